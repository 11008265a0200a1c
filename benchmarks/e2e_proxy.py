"""The recording proxy of benchmarks/agent_e2e.py: between a system under test and the model
server, it forwards each request, keeps what was asked and answered, counts requests in flight
and marks where each request begins and ends in the server's own log."""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import select
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


class RecordingProxy:
    """A proxy on 127.0.0.1 between the CLI and the model server. It forwards each request as it
    comes (streamed replies line by line, so the client's silence timer sees every ping), keeps
    what was asked and answered, counts requests in flight at once, and — when the reply carried
    no usage — asks the server for the prompt token count of the same chat request afterwards.
    Every path is forwarded as it is (a client may ask the server's tokenize endpoints too);
    only chat completions are scored.

    Requests reach the server one at a time (the probe must follow its own request); a request
    that arrives while another is still being answered is counted as an overlap either way. A
    client that goes away mid-reply has its upstream connection closed at once, as the client
    itself would have closed it."""

    def __init__(
        self, base_url: str, *, probe: bool = True, upstream_timeout: float = 3600
    ) -> None:
        parts = urlsplit(base_url.rstrip("/"))
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        #: The base URL's path (``/v1``): the proxy's URL has the same, so paths map 1:1.
        self.prefix = parts.path.rstrip("/")
        self.probe = probe
        self.upstream_timeout = upstream_timeout
        self.exchanges: list[dict[str, Any]] = []
        self.in_flight = self.max_in_flight = self.overlaps = 0
        self.on_exchange: Callable[[dict[str, Any]], None] | None = None
        #: Called as a request goes upstream and again as its reply ends (before any probe):
        #: the two values are kept as ``mark_start`` / ``mark_end`` (a ServerLog's offsets).
        self.mark: Callable[[], Any] | None = None
        self._state = threading.Lock()
        self._server = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}{self.prefix}"

    def start(self) -> RecordingProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                proxy._handle(self, "POST", body)

            def do_GET(self) -> None:
                proxy._handle(self, "GET", None)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> RecordingProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one request ---------------------------------------------------------------------------

    def _arrive(self) -> bool:
        with self._state:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            overlapped = self.in_flight > 1
            self.overlaps += overlapped
            return overlapped

    def _leave(self, record: dict[str, Any]) -> None:
        with self._state:
            if not record.get("_left"):
                record["_left"] = True
                self.in_flight -= 1

    def _handle(self, handler: BaseHTTPRequestHandler, method: str, body: bytes | None) -> None:
        t0 = time.monotonic()
        record: dict[str, Any] = {
            "index": None,
            "method": method,
            "path": handler.path,
            "chat": method == "POST" and handler.path.split("?")[0].endswith("/chat/completions"),
            "started": round(time.time(), 3),
            "overlapped": self._arrive(),
            "stream": False,
            "status": None,
            "complete": False,
            "client_gone": False,
            "content": "",
            "finish_reason": None,
            "server_usage": None,
            "prompt_tokens": None,
            "seconds": None,
            "probe_s": None,
            "error": "",
        }
        try:
            payload = json.loads(body) if body else {}
        except ValueError:
            payload = {}
        payload = payload if isinstance(payload, dict) else {}
        record["stream"] = bool(payload.get("stream"))
        record["request"] = payload
        try:
            with self._server:
                if self.mark is not None:
                    record["mark_start"] = self.mark()
                self._forward(handler, method, body, record, t0)
                if self.mark is not None:
                    record["mark_end"] = self.mark()
                probe = record["chat"] and record["complete"] and record["server_usage"] is None
                if self.probe and probe:
                    p0 = time.monotonic()
                    record["prompt_tokens"] = self._probe(payload)
                    record["probe_s"] = round(time.monotonic() - p0, 3)
        except Exception as exc:  # the benchmark's own failure: recorded, the client sees 502
            record["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            self._leave(record)
            with self._state:
                record["index"] = len(self.exchanges)
                self.exchanges.append(record)
        if self.on_exchange is not None:
            self.on_exchange(record)

    def _forward(
        self,
        handler: BaseHTTPRequestHandler,
        method: str,
        body: bytes | None,
        record: dict[str, Any],
        t0: float,
    ) -> None:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.upstream_timeout)
        gone = threading.Event()
        done = threading.Event()
        try:
            try:
                headers = {
                    k: v
                    for k in ("Content-Type", "Authorization", "Accept")
                    if (v := handler.headers.get(k))
                }
                conn.request(method, handler.path, body, headers)
                resp = conn.getresponse()
            except OSError as exc:
                record["error"] = f"upstream: {exc}"
                handler.send_error(502, "upstream unreachable")
                return
            record["status"] = resp.status
            ctype = resp.headers.get("Content-Type", "")
            threading.Thread(
                target=_watch_client, args=(handler.connection, conn, gone, done), daemon=True
            ).start()
            kept: list[bytes] = []
            try:
                if "event-stream" not in ctype:
                    # A whole reply (JSON, an error, a tokenize count) is read upstream first, so
                    # the request has left the server before the client sees a byte of it: a
                    # client that acts on the status line alone is not an overlap.
                    kept.append(resp.read())
                    done.set()
                    self._leave(record)
                    handler.send_response(resp.status)
                    handler.send_header("Content-Type", ctype or "application/json")
                    handler.send_header("Content-Length", str(len(kept[0])))
                    handler.end_headers()
                    handler.wfile.write(kept[0])
                    handler.wfile.flush()
                else:
                    handler.send_response(resp.status)
                    for key in ("Content-Type", "Content-Length"):
                        if resp.headers.get(key):
                            handler.send_header(key, resp.headers[key])
                    handler.end_headers()
                    pending: bytes | None = None
                    while line := resp.readline():
                        if pending is not None:
                            handler.wfile.write(pending)
                            handler.wfile.flush()
                        kept.append(line)
                        pending = line
                    # The reply is complete upstream: the request is no longer in flight, even
                    # before the client has read its last line and moved on to the next one
                    # (and the client closing after that line is no hang-up).
                    done.set()
                    self._leave(record)
                    if pending is not None:
                        handler.wfile.write(pending)
                        handler.wfile.flush()
            except (OSError, http.client.HTTPException):
                record["client_gone"] = True
            finally:
                done.set()
            record["client_gone"] = record["client_gone"] or gone.is_set()
            record["seconds"] = round(time.monotonic() - t0, 3)
            if record["chat"]:
                _read_reply(b"".join(kept), ctype, resp.status, record)
            else:
                record["complete"] = not gone.is_set()
                record["reply"] = b"".join(kept)[:2000].decode("utf-8", "replace")
            if record["client_gone"]:
                record["complete"] = False
            # The end of the reply for a client that reads to the end of the connection.
            with contextlib.suppress(OSError):
                handler.connection.shutdown(socket.SHUT_WR)
        finally:
            done.set()
            conn.close()

    def _probe(self, payload: dict[str, Any]) -> int | None:
        """The server's prompt token count of ``payload``: the same request, not streamed,
        one token long."""
        drop = ("stream", "stream_options", "max_completion_tokens")
        probe = {k: v for k, v in payload.items() if k not in drop}
        probe["max_tokens"] = 1
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.upstream_timeout)
        try:
            path = f"{self.prefix}/chat/completions"
            conn.request("POST", path, json.dumps(probe), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = json.loads(resp.read() or b"{}")
        finally:
            conn.close()
        usage = data.get("usage") if isinstance(data, dict) else None
        tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        return tokens if isinstance(tokens, int) else None


def _watch_client(
    client: socket.socket,
    upstream: http.client.HTTPConnection,
    gone: threading.Event,
    done: threading.Event,
) -> None:
    """Close the upstream connection as soon as the client hangs up (it sends nothing after its
    request, so a readable socket means it went away)."""
    while not done.is_set():
        try:
            ready, _, _ = select.select([client], [], [], 0.25)
            if not ready:
                continue
            if client.recv(1, socket.MSG_PEEK):  # bytes after the request: not a hang-up
                time.sleep(0.25)
                continue
        except (OSError, ValueError):
            pass
        if done.is_set():
            return
        gone.set()
        sock = upstream.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        return


def _read_reply(raw: bytes, ctype: str, status: int, record: dict[str, Any]) -> None:
    """Content, finish reason, usage and completeness of a reply, streamed or not."""
    if "event-stream" in ctype:
        content: list[str] = []
        for line in raw.decode("utf-8", "replace").splitlines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                record["complete"] = status == 200
                continue
            try:
                chunk = json.loads(data)
            except ValueError:
                continue
            if isinstance(chunk.get("usage"), dict):
                record["server_usage"] = chunk["usage"]
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                if isinstance(delta.get("content"), str):
                    content.append(delta["content"])
                if choice.get("finish_reason"):
                    record["finish_reason"] = choice["finish_reason"]
        record["content"] = "".join(content)
        record["complete"] = record["complete"] or (
            status == 200 and record["finish_reason"] is not None
        )
    else:
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        choice = (body.get("choices") or [{}])[0] if isinstance(body, dict) else {}
        record["content"] = ((choice.get("message") or {}).get("content")) or ""
        record["finish_reason"] = choice.get("finish_reason")
        if isinstance(body, dict) and isinstance(body.get("usage"), dict):
            record["server_usage"] = body["usage"]
        record["complete"] = status == 200 and bool(choice)
    usage = record["server_usage"]
    if usage and isinstance(usage.get("prompt_tokens"), int) and usage["prompt_tokens"] > 0:
        record["prompt_tokens"] = usage["prompt_tokens"]
    else:
        record["server_usage"] = None


def server_models(base_url: str) -> list[str]:
    parts = urlsplit(base_url.rstrip("/"))
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=10)
    try:
        conn.request("GET", parts.path.rstrip("/") + "/models")
        data = json.loads(conn.getresponse().read() or b"{}")
    finally:
        conn.close()
    return [m.get("id", "") for m in data.get("data") or []]


# -- the server's own log ------------------------------------------------------------------------

#: llama-cpp-python (verbose, the default of its server) prints one of these as it starts a
#: request whose prompt shares a prefix with the one before it; with no shared prefix it prints
#: nothing and evaluates the whole prompt.
_PREFIX_HIT = re.compile(
    r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens to eval"
)
_FULL_CACHED = "Llama.generate: full prompt already cached"


class ServerLog:
    """The model server's log file, read by byte offsets: :meth:`mark` is where it ends now,
    :meth:`between` the text written between two marks. The server is one process serving one
    request at a time, so the prefix line of a request lies between the marks taken as the
    request went upstream and as its reply ended; lines of other clients' requests served in
    that window come before it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def mark(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return -1

    def between(self, start: int, end: int) -> str:
        if start < 0 or end <= start:
            return ""
        with open(self.path, "rb") as fh:
            fh.seek(start)
            return fh.read(end - start).decode("utf-8", "replace")


def prompt_cache_use(text: str, prompt_tokens: int | None) -> dict[str, Any]:
    """Prompt tokens the server processed and reused for the request whose log window is
    ``text``: its last prefix line (``N prefix-match hit, remaining M``: N reused, M processed;
    "full prompt already cached": all reused). No prefix line: the whole prompt was processed —
    known when ``prompt_tokens`` (the server's usage, or the proxy's probe) is. A prefix line
    whose N + M is not the request's prompt belongs to another client's request."""
    hits = [(int(m.group(1)), int(m.group(2)), m.end()) for m in _PREFIX_HIT.finditer(text)]
    cached = text.rfind(_FULL_CACHED)
    last = hits[-1] if hits else None
    if cached >= 0 and (last is None or cached > last[2]):
        if prompt_tokens:
            return {"processed": 0, "reused": prompt_tokens, "source": "log: full prompt cached"}
        last = None
    if last is not None and (not prompt_tokens or last[0] + last[1] == prompt_tokens):
        return {"processed": last[1], "reused": last[0], "source": "log: prefix-match line"}
    if prompt_tokens:
        return {"processed": prompt_tokens, "reused": 0, "source": "log: no prefix line"}
    return {"processed": None, "reused": None, "source": "unknown"}


def cache_figures(exchanges: Sequence[Mapping[str, Any]], log: ServerLog | None) -> dict[str, Any]:
    """Per completed chat request of a run and in total: prompt tokens the server processed and
    reused, from its own log; and the share of each prompt after the first that it processed
    (the issue's target: at most 30 %)."""
    per_call: list[dict[str, Any]] = []
    for x in exchanges:
        if not x.get("chat", True) or not x.get("complete"):
            continue
        text = (
            log.between(x.get("mark_start", -1), x.get("mark_end", -1)) if log is not None else ""
        )
        use = prompt_cache_use(text, x.get("prompt_tokens"))
        prompt = x.get("prompt_tokens")
        if not prompt and use["source"] == "log: prefix-match line":
            prompt = use["processed"] + use["reused"]  # a streamed reply, no probe: N + M
        per_call.append({"prompt": prompt, **use})
    known = [c for c in per_call if c["processed"] is not None]
    later = [c for c in per_call[1:] if c["processed"] is not None and c["prompt"]]
    shares = [round(c["processed"] / c["prompt"] * 100, 1) for c in later]
    return {
        "processed": sum(c["processed"] for c in known) if known else None,
        "reused": sum(c["reused"] for c in known) if known else None,
        "calls_known": len(known),
        "calls": len(per_call),
        "processed_pct_after_first_max": max(shares, default=None),
        "processed_pct_after_first": shares,
        "per_call": per_call,
    }
