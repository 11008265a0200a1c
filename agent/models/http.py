"""JSON over HTTP for model providers: timeouts, retries with backoff, provider errors -> typed errors.

Standard library only (urllib): the calls are plain POSTs and a dependency would buy little.
"""

from __future__ import annotations

import email.utils
import http.client
import ipaddress
import json
import logging
import random
import re
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from .errors import (
    AuthError,
    BadRequestError,
    ContextTooLongError,
    MalformedResponseError,
    ModelConfigError,
    ModelConnectionError,
    ModelError,
    ModelTimeoutError,
    QuotaExceededError,
    RateLimitError,
    ServiceError,
    UnknownModelError,
)
from .sse import SseEvent, parse_sse

log = logging.getLogger(__name__)

T = TypeVar("T")

_CONTEXT_RE = re.compile(
    r"context_length_exceeded|maximum context length|prompt is too long|context length"
    r"|exceed_context_size|exceeds the available context|context window|input is too long",
    re.IGNORECASE,
)
_MODEL_MISSING_RE = re.compile(r"model\b[^.\n]{0,120}\b(not found|does not exist)", re.IGNORECASE)
_AUTH_CODES = frozenset({"invalid_api_key", "authentication_error", "permission_error"})


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry retryable failures (429, 5xx, timeouts, refused connections)."""

    max_retries: int = 3
    backoff_base_s: float = 0.5
    backoff_max_s: float = 20.0
    #: A Retry-After longer than this is not waited for; the error is raised with ``retry_after``.
    max_retry_after_s: float = 60.0


class JsonHttp:
    """POSTs JSON and returns decoded JSON objects, or streams server-sent events.

    ``sleep`` and ``rand`` are injectable so tests can observe backoff without waiting.
    ``timeout`` applies to connecting and to each read, not to the whole exchange.
    """

    def __init__(
        self,
        *,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.sleep = sleep
        self.rand = rand

    def post(
        self, url: str, payload: Mapping[str, Any], headers: Mapping[str, str]
    ) -> dict[str, Any]:
        def consume(resp: http.client.HTTPResponse) -> dict[str, Any]:
            with resp:
                return decode_json_body(resp.read(), resp.status, url)

        return self._send(url, payload, headers, consume)

    @contextmanager
    def stream(
        self, url: str, payload: Mapping[str, Any], headers: Mapping[str, str]
    ) -> Iterator[Iterator[SseEvent]]:
        """Yield the response's events. A server that ignored ``stream`` and answered with one
        JSON document yields a single event named ``json`` carrying that document."""
        resp = self._send(url, payload, {"Accept": "text/event-stream", **headers}, lambda r: r)
        try:
            if "json" in (resp.headers.get("Content-Type") or ""):
                body = decode_json_body(_read_stream(resp, url, self.timeout), resp.status, url)
                yield iter([SseEvent("json", json.dumps(body))])
            else:
                yield _guarded(parse_sse(resp), url, self.timeout)
        finally:
            resp.close()

    def _send(
        self,
        url: str,
        payload: Mapping[str, Any],
        headers: Mapping[str, str],
        consume: Callable[[http.client.HTTPResponse], T],
    ) -> T:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        all_headers = {"Content-Type": "application/json", "Accept": "application/json"}
        all_headers.update(headers)
        opener = _opener_for(url)
        attempt = 0
        while True:
            attempt += 1
            request = urllib.request.Request(url, data=data, headers=all_headers, method="POST")
            give_up = False
            try:
                resp = opener.open(request, timeout=self.timeout)
                try:
                    return consume(resp)
                except BaseException:
                    resp.close()
                    raise
            except urllib.error.HTTPError as exc:
                body = _read_quietly(exc)
                exc.close()
                error = error_from_response(exc.code, body, exc.headers)
                cause: BaseException = exc
            except TimeoutError as exc:
                error, cause = self._timeout_error(url), exc
            except urllib.error.URLError as exc:
                cause = exc
                if isinstance(exc.reason, TimeoutError):
                    error = self._timeout_error(url)
                else:
                    error = ModelConnectionError(detail=f"{url}: {exc.reason}")
                    # A certificate problem will not fix itself between attempts.
                    give_up = isinstance(exc.reason, ssl.SSLCertVerificationError)
            except (http.client.HTTPException, OSError) as exc:
                error, cause = ModelConnectionError(detail=f"{url}: {exc!r}"), exc
            delay = None if give_up else self._delay(attempt, error)
            if delay is None:
                raise error from cause
            log.debug("model call failed (%s); retry %d in %.2fs", error, attempt, delay)
            self.sleep(delay)

    def _timeout_error(self, url: str) -> ModelTimeoutError:
        return ModelTimeoutError(detail=f"no answer from {url} within {self.timeout:g}s")

    def _delay(self, attempt: int, error: ModelError) -> float | None:
        """Seconds to wait before the next attempt, or None to give up."""
        if not error.retryable or attempt > self.retry.max_retries:
            return None
        if error.retry_after is not None:
            if error.retry_after > self.retry.max_retry_after_s:
                return None
            return error.retry_after
        ceiling = min(self.retry.backoff_max_s, self.retry.backoff_base_s * 2 ** (attempt - 1))
        # "Equal jitter": keeps a floor so retries never hammer, spreads clients apart above it.
        return ceiling / 2 + self.rand() * ceiling / 2


def decode_json_body(body: bytes, status: int, url: str = "") -> dict[str, Any]:
    """Decode a success body; a JSON error object inside a 2xx is raised as its typed error."""
    try:
        value = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        snippet = body[:200].decode("utf-8", errors="replace")
        raise MalformedResponseError(
            detail=f"expected JSON from {url or 'the server'}, got {snippet!r}", status=status
        ) from exc
    if not isinstance(value, dict):
        raise MalformedResponseError(
            detail=f"expected a JSON object, got {type(value).__name__}", status=status
        )
    if value.get("error"):
        raise error_from_payload(value, status, {})
    return value


def error_from_response(status: int, body: bytes, headers: Mapping[str, str]) -> ModelError:
    """Map an HTTP error status and the provider's error body to a typed error."""
    try:
        payload = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        payload = None
    if isinstance(payload, dict):
        return error_from_payload(payload, status, headers)
    text = body[:500].decode("utf-8", errors="replace").strip()
    return _classify(status, set(), text, headers)


def error_from_payload(
    payload: Mapping[str, Any], status: int | None, headers: Mapping[str, str]
) -> ModelError:
    """Map a provider error object (OpenAI, Anthropic, vLLM, Ollama, llama.cpp shapes)."""
    codes: set[str] = set()
    err = payload.get("error")
    message: Any
    if isinstance(err, Mapping):
        codes.update(str(err[k]) for k in ("code", "type") if isinstance(err.get(k), str))
        message = err.get("message")
    elif isinstance(err, str):
        message = err
    else:
        message = payload.get("message") or payload.get("detail")
    codes.update(str(payload[k]) for k in ("code", "type") if isinstance(payload.get(k), str))
    if message is not None and not isinstance(message, str):
        message = json.dumps(message, ensure_ascii=False)
    return _classify(status, {c.lower() for c in codes}, message or "", headers)


def _classify(
    status: int | None, codes: set[str], message: str, headers: Mapping[str, str]
) -> ModelError:
    kw: dict[str, Any] = {"detail": message or None, "status": status}
    text = " ".join([*sorted(codes), message])
    if status is not None and 300 <= status < 400:
        location = headers.get("Location") or "another address"
        return ModelConfigError(
            f"The model server redirected to {location} — set the base URL to that address.",
            status=status,
        )
    if status in (401, 403) or codes & _AUTH_CODES:
        return AuthError(**kw)
    if status == 413 or _CONTEXT_RE.search(text):
        return ContextTooLongError(**kw)
    if status == 404 or "model_not_found" in codes or _MODEL_MISSING_RE.search(message):
        return UnknownModelError(**kw)
    if status == 429 or "rate_limit_error" in codes:
        if "insufficient_quota" in codes:
            return QuotaExceededError(**kw)
        return RateLimitError(**kw, retry_after=parse_retry_after(headers))
    if status == 408:
        return ModelTimeoutError(**kw)
    if status is not None and 400 <= status < 500:
        return BadRequestError(**kw)
    # 5xx, Anthropic's 529 "overloaded", and error objects arriving in 2xx bodies or streams.
    return ServiceError(**kw, retry_after=parse_retry_after(headers))


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date)."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("Retry-After") or headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # urllib turns a redirected POST into a body-less GET; surface the redirect instead.
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def _opener_for(url: str) -> urllib.request.OpenerDirector:
    host = urlsplit(url).hostname or ""
    if _is_loopback(host):
        # Local servers (Ollama, llama.cpp, vLLM) must not be routed through an HTTP(S)_PROXY.
        return urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())
    return urllib.request.build_opener(_NoRedirect())


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _read_quietly(exc: urllib.error.HTTPError) -> bytes:
    try:
        return exc.read()
    except (OSError, http.client.HTTPException):
        return b""


def _read_stream(resp: http.client.HTTPResponse, url: str, timeout: float) -> bytes:
    return b"".join(_guarded(iter(lambda: resp.read(65536), b""), url, timeout))


def _guarded(items: Iterator[T], url: str, timeout: float) -> Iterator[T]:
    """Re-raise transport failures in the middle of a stream as typed errors (not retried:
    part of the answer may already have been consumed)."""
    try:
        yield from items
    except TimeoutError as exc:
        raise ModelTimeoutError(detail=f"{url} stopped sending for {timeout:g}s") from exc
    except (http.client.HTTPException, OSError) as exc:
        raise ModelConnectionError(detail=f"stream from {url} broke: {exc!r}") from exc
