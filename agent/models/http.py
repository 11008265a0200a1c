"""JSON over HTTP for model providers: timeouts, retries with backoff, provider errors -> typed errors.

Standard library only (urllib): the calls are plain POSTs and a dependency would buy little.
"""

from __future__ import annotations

import email.utils
import functools
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
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

# the model client's defaults are settings (`model_timeout_s` ...): declared with them
from ..settings import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_RETRIES, DEFAULT_TIMEOUT_S
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

    max_retries: int = DEFAULT_RETRIES
    backoff_base_s: float = 0.5
    backoff_max_s: float = 20.0
    #: A Retry-After longer than this is not waited for; the error is raised with ``retry_after``.
    max_retry_after_s: float = 60.0


class RetryBudget:
    """Retries left for one logical model call. The agent loop opens one per call with
    :func:`retry_budget`; every layer that would retry (this module's backoff, the loop's own
    retry of a stream cut short) takes from it, so the retries of a call never multiply."""

    def __init__(self, retries: int) -> None:
        self.left = max(0, retries)

    def take(self) -> bool:
        """Use one retry; False when none is left."""
        if self.left <= 0:
            return False
        self.left -= 1
        return True


_BUDGET: ContextVar[RetryBudget | None] = ContextVar("repoctx_retry_budget", default=None)


@contextmanager
def retry_budget(retries: int) -> Iterator[RetryBudget]:
    """Share ``retries`` among every retry of the model calls made inside the block (in this
    thread); inside it, an adapter's own ``RetryPolicy.max_retries`` is not used."""
    budget = RetryBudget(retries)
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


class JsonHttp:
    """POSTs JSON and returns decoded JSON objects, or streams server-sent events.

    ``sleep`` and ``rand`` are injectable so tests can observe backoff without waiting.
    ``connect_timeout`` bounds opening the connection; ``timeout`` is the longest silence
    allowed after it (waiting for the status line, and between any two reads of the body), not
    the length of the whole exchange. A failed attempt's connection is closed before the next
    one starts, so a retry never runs beside a request the server is still working on (servers
    such as llama.cpp's stop generating when the client goes away).
    """

    def __init__(
        self,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.timeout = timeout
        self.connect_timeout = connect_timeout
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

    @contextmanager
    def lines(
        self, url: str, payload: Mapping[str, Any], headers: Mapping[str, str]
    ) -> Iterator[Iterator[bytes]]:
        """Yield the response body line by line (newline-delimited JSON: Ollama's stream)."""
        resp = self._send(url, payload, {"Accept": "application/x-ndjson", **headers}, lambda r: r)
        try:
            yield _guarded(iter(resp.readline, b""), url, self.timeout)
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
        opener = _opener_for(url, self.timeout)
        attempt = 0
        while True:
            attempt += 1
            request = urllib.request.Request(url, data=data, headers=all_headers, method="POST")
            give_up = False
            try:
                # urllib's timeout is the connect timeout here; reads get self.timeout.
                resp = opener.open(request, timeout=self.connect_timeout)
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
            except TimeoutError as exc:  # connected, then silence (urllib closed the socket)
                error, cause = self._timeout_error(url), exc
            except urllib.error.URLError as exc:
                cause = exc
                if isinstance(exc.reason, TimeoutError):  # while connecting or sending
                    error = ModelConnectionError(
                        detail=f"could not connect to {url} within {self.connect_timeout:g}s "
                        "(the connect timeout: --connect-timeout, `model_connect_timeout_s`)"
                    )
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
        return ModelTimeoutError(detail=f"{url} sent nothing for {self.timeout:g}s")

    def _delay(self, attempt: int, error: ModelError) -> float | None:
        """Seconds to wait before the next attempt, or None to give up."""
        if not error.retryable:
            return None
        if error.retry_after is not None and error.retry_after > self.retry.max_retry_after_s:
            return None
        budget = _BUDGET.get()
        if budget is not None:
            if not budget.take():
                return None
        elif attempt > self.retry.max_retries:
            return None
        if error.retry_after is not None:
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
    error = _classify(status, {c.lower() for c in codes}, message or "", headers)
    if isinstance(error, ContextTooLongError):  # llama.cpp's server says it in fields
        fields = err if isinstance(err, Mapping) else payload
        for attr, key in (("context_window", "n_ctx"), ("prompt_tokens", "n_prompt_tokens")):
            if isinstance(fields.get(key), int) and fields[key] > 0:
                setattr(error, attr, fields[key])
    return error


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
        error = ContextTooLongError(**kw)
        error.context_window, error.prompt_tokens = context_sizes(message)
        return error
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


_WINDOW_RES = (
    re.compile(r"maximum context length is (\d+)", re.I),  # OpenAI, vLLM, llama-cpp-python
    re.compile(r"context (?:window|size|length) (?:of|is) (\d+)", re.I),
    re.compile(r"tokens? > (\d+) maximum", re.I),  # Anthropic
    re.compile(r"n_ctx[\"']?\s*[:=]\s*(\d+)", re.I),
)
_PROMPT_RES = (
    re.compile(r"\((\d+) in the messages", re.I),
    re.compile(r"prompt is too long: (\d+) tokens", re.I),
    re.compile(r"n_prompt_tokens[\"']?\s*[:=]\s*(\d+)", re.I),
)


def context_sizes(message: str) -> tuple[int | None, int | None]:
    """The context window and the prompt's tokens an overflow message names, where it does."""

    def first(patterns: tuple[re.Pattern[str], ...]) -> int | None:
        for pattern in patterns:
            m = pattern.search(message or "")
            if m:
                return int(m.group(1))
        return None

    return first(_WINDOW_RES), first(_PROMPT_RES)


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


class _Connection(http.client.HTTPConnection):
    """Connects within ``timeout`` (the connect timeout), then reads with ``read_timeout``."""

    def __init__(self, *args: Any, read_timeout: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read_timeout = read_timeout

    def connect(self) -> None:
        super().connect()
        self.sock.settimeout(self.read_timeout)


class _TlsConnection(http.client.HTTPSConnection):
    def __init__(self, *args: Any, read_timeout: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read_timeout = read_timeout

    def connect(self) -> None:
        super().connect()  # TCP and the TLS handshake, both within the connect timeout
        self.sock.settimeout(self.read_timeout)


class _HttpHandler(urllib.request.HTTPHandler):
    def __init__(self, read_timeout: float) -> None:
        super().__init__()
        self.read_timeout = read_timeout

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_Connection, read_timeout=self.read_timeout), req)


class _HttpsHandler(urllib.request.HTTPSHandler):
    def __init__(self, read_timeout: float) -> None:
        super().__init__()
        self.read_timeout = read_timeout

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        factory = functools.partial(_TlsConnection, read_timeout=self.read_timeout)
        return self.do_open(factory, req, context=self._context)


def _opener_for(url: str, read_timeout: float) -> urllib.request.OpenerDirector:
    host = urlsplit(url).hostname or ""
    handlers: list[urllib.request.BaseHandler] = [
        _HttpHandler(read_timeout),
        _HttpsHandler(read_timeout),
        _NoRedirect(),
    ]
    if _is_loopback(host):
        # Local servers (Ollama, llama.cpp, vLLM) must not be routed through an HTTP(S)_PROXY.
        handlers.insert(0, urllib.request.ProxyHandler({}))
    return urllib.request.build_opener(*handlers)


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


def decode_stream_json(data: str | bytes, what: str = "stream chunk") -> dict[str, Any]:
    """One JSON object of a streamed reply (an SSE ``data:`` or an NDJSON line); an error object
    the server streams instead becomes the matching ModelError."""
    try:
        obj = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MalformedResponseError(detail=f"bad {what} {data[:120]!r}") from exc
    if not isinstance(obj, dict):
        raise MalformedResponseError(detail=f"bad {what} {data[:120]!r}")
    if obj.get("error") or obj.get("type") == "error":
        raise error_from_payload(obj, None, {})
    return obj
