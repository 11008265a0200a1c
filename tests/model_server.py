"""The tests' fake model server: a real HTTP server on 127.0.0.1 that answers the model adapters'
requests with scripted replies and records every request it received.

The adapters are tested over real HTTP (real sockets, real headers, real timeouts), so this is a
server, not a mock. What it answers is either the next reply of a script (``replies``, in order)
or what a function of the request returns (``answer``: for servers with behaviour, such as one
that counts tokens or refuses a prompt longer than its window). A reply can be a JSON body with
any status and headers (error and overflow bodies included), server-sent events (OpenAI-style
streaming), or newline-delimited JSON sent chunked (Ollama's streaming); it can wait before
answering, between events, or after them, so time limits can be tested. Waits end at teardown.

    def test_x(model_server):
        model_server.reply(Reply(body={...}), Reply(429, {...}, {"Retry-After": "1"}))
        client = OpenAIClient("m", base_url=model_server.url)
        ...
        assert model_server.requests[0].body["model"] == "m"
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: Request paths that are chat requests (OpenAI-compatible, Anthropic, Ollama); any other path
#: (a tokenize probe, a model list) is something else.
CHAT_PATHS = ("/chat/completions", "/messages", "/api/chat")


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # dict/list -> JSON; str/bytes -> sent as is; None -> empty
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str | None = None  # default: JSON, event stream or NDJSON, as fits
    delay: float = 0.0  # wait before answering
    events: list[Any] | None = None  # server-sent events: dicts (as `data:`) or raw frames
    lines: list[Any] | None = None  # newline-delimited JSON objects, sent chunked (Ollama)
    gap: float = 0.0  # wait before each event or line (a slow model producing tokens)
    stall: float = 0.0  # wait after the events or lines, before closing


def recorded(reply: dict[str, Any]) -> Reply:
    """A reply as benchmarks/record_llm.py recorded it from a real server: ``status``,
    ``content_type`` and a JSON ``body``, or the ``events`` it streamed (one write each)."""
    content_type = reply.get("content_type", "application/json")
    if "events" in reply:
        events = [event + "\n\n" for event in reply["events"]]
        return Reply(reply["status"], events=events, content_type=content_type)
    return Reply(reply["status"], reply["body"], content_type=content_type)


@dataclass
class Seen:
    """One request as it arrived."""

    method: str
    path: str
    headers: dict[str, str]  # names in lower case
    body: Any  # the JSON body; None when there was none

    @property
    def chat(self) -> bool:
        return self.path.endswith(CHAT_PATHS)

    def __iter__(self) -> Iterator[Any]:
        """Unpacks as ``(path, body)``."""
        return iter((self.path, self.body))


#: The answer to a request past the end of the script.
UNSCRIPTED = Reply(500, {"error": {"message": "unscripted request"}})

#: What ``answer`` may return: a Reply, ``(status, body)``, or a body (a dict, sent with 200).
Answer = Callable[[Seen], Any]


def as_reply(value: Any) -> Reply:
    if isinstance(value, Reply):
        return value
    if isinstance(value, tuple):
        status, body = value
        return Reply(status, body)
    if isinstance(value, dict):
        return Reply(body=value)
    raise TypeError(f"not a reply: {value!r}")


class ModelServer:
    """A started server (use it as a context manager, or the ``model_server`` fixture).

    ``replies`` are served in order, one per request (per chat request when ``chat_only``: then
    other paths are answered 404, as a server without a tokenize endpoint does); a request after
    the last gets ``unscripted``. ``answer``, when set, decides every reply instead.
    """

    def __init__(
        self,
        replies: list[Any] | tuple[Any, ...] = (),
        *,
        answer: Answer | None = None,
        unscripted: Any = UNSCRIPTED,
        chat_only: bool = False,
    ) -> None:
        self.replies: list[Any] = list(replies)
        self.answer = answer
        self.unscripted = unscripted
        self.chat_only = chat_only
        self.requests: list[Seen] = []
        # Set at teardown so replies that are told to wait finish promptly.
        self.release = threading.Event()
        # Set when a client hung up while it was being answered.
        self.hung_up = threading.Event()
        # Each request's connection, and how many earlier connections the client still held
        # open when it arrived: a retry beside a request the server still works on.
        self.connections: list[socket.socket] = []
        self.overlaps: list[int] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.01,), daemon=True
        )
        self._thread.start()

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL clients are given (``.../v1``)."""
        return f"{self.url}/v1"

    # -- scripting ------------------------------------------------------------------------------

    def reply(self, *replies: Any) -> None:
        """Queue replies: Reply objects, ``(status, body)`` or bodies."""
        self.replies.extend(replies)

    def next_reply(self) -> Reply:
        return as_reply(self.replies.pop(0) if self.replies else self.unscripted)

    def _reply_to(self, seen: Seen) -> Reply:
        if self.answer is not None:
            return as_reply(self.answer(seen))
        if self.chat_only and not seen.chat:
            return Reply(404, {"detail": "Not Found"})
        return self.next_reply()

    # -- what arrived ---------------------------------------------------------------------------

    @property
    def bodies(self) -> list[Any]:
        """The body of every request, in order."""
        return [s.body for s in self.requests]

    @property
    def chats(self) -> list[Any]:
        """The body of every chat request, in order (no tokenize probes)."""
        return [s.body for s in self.requests if s.chat]

    def seen(self, count: int, within: float = 10.0) -> int:
        """How many requests arrived, waiting up to ``within`` seconds for ``count`` of them.

        A client that timed out has sent its request, but on a busy machine the server's
        handler thread may not have read it yet when the client gives up.
        """
        deadline = time.monotonic() + within
        while len(self.requests) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return len(self.requests)

    # -- lifetime -------------------------------------------------------------------------------

    def close(self) -> None:
        self.release.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> ModelServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _client_holds(sock: socket.socket) -> bool:
    """Whether the client still has this connection open (it sent no FIN)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return not readable or sock.recv(1, socket.MSG_PEEK) != b""
    except (OSError, ValueError):  # the server closed it after answering
        return False


def _handler(server: ModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def _serve(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            headers = {k.lower(): v for k, v in self.headers.items()}
            server.overlaps.append(sum(_client_holds(c) for c in server.connections))
            server.connections.append(self.connection)
            seen = Seen(self.command, self.path, headers, json.loads(raw) if raw else None)
            server.requests.append(seen)
            reply = server._reply_to(seen)
            if reply.delay:
                server.release.wait(reply.delay)
            try:
                if reply.events is not None:
                    self._stream(reply, reply.events)
                elif reply.lines is not None:
                    self._stream(reply, reply.lines)
                else:
                    self._send(reply)
            except OSError:  # the client gave up first (timeout and hang-up tests)
                server.hung_up.set()

        def _send(self, reply: Reply) -> None:
            body = reply.body
            if isinstance(body, dict | list):
                body = json.dumps(body)
            data = body.encode() if isinstance(body, str) else (body or b"")
            self.send_response(reply.status)
            content_type = reply.content_type or "application/json"
            for key, value in {"Content-Type": content_type, **reply.headers}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, reply: Reply, items: list[Any]) -> None:
            """One write per event or line, as a model server sends tokens as it makes them;
            server-sent events end with the connection, NDJSON is sent chunked."""
            ndjson = reply.lines is not None
            self.send_response(reply.status)
            kind = "application/x-ndjson" if ndjson else "text/event-stream"
            self.send_header("Content-Type", reply.content_type or kind)
            for key, value in reply.headers.items():
                self.send_header(key, value)
            if ndjson:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for item in items:
                if reply.gap:
                    server.release.wait(reply.gap)
                if ndjson:
                    data = json.dumps(item).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                else:
                    frame = item if isinstance(item, str) else f"data: {json.dumps(item)}\n\n"
                    self.wfile.write(frame.encode())
                self.wfile.flush()
            if ndjson:
                self.wfile.write(b"0\r\n\r\n")
            if reply.stall:
                server.release.wait(reply.stall)

    return Handler
