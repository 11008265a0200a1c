"""The MCP server's wire: every message checked before the SDK sees it, and the two transports.

The SDK drops a line it cannot validate without a word (stdio) and answers some malformed HTTP
bodies with the wrong code, so a client that sent ``{}``, a request without a method or with
``params`` of the wrong type waited forever. Here each message is checked first
(``check``): a request the SDK could not answer gets its JSON-RPC error (-32700 parse error,
-32600 invalid request, -32602 invalid params) from the transport itself, and only messages
the SDK can dispatch reach it — where unknown methods get -32601 and unknown tools -32602.
Notifications and responses are never answered (the spec forbids it): an invalid one is
dropped. Batches (JSON-RPC arrays) are refused element by element: no MCP version the SDK
serves dispatches them.

Both transports use ``check``: ``serve_stdio`` reads the lines itself, ``serve_http`` wraps the
SDK's ASGI app in ``CheckedMessages``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

import anyio
import mcp_types as types
import pydantic_core
from mcp.server import Server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    JSONRPCMessage,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError

from indexer import RepoctxError, json_safe

from .mcp_server import RepoctxMCP

SERVER_NAME = "repoctx"
INSTRUCTIONS = """\
repoctx indexes this repository (symbol graph with resolved references, lexical and semantic \
search). Prefer it to grepping: find_symbol for a name you know, search_code for words or \
behaviour, find_references for the callers and users of a definition, get_context for a \
budgeted set of the code most relevant to a task, read_span to read exact lines. Paths are \
relative to the repository root. Every answer ends with the index generation it came from; a \
file flagged stale changed on disk after it was indexed (read it with read_span to see its \
current text)."""

#: Largest message accepted, as the SDK's own HTTP body limit: a longer stdio line is answered
#: with an error and skipped without being held in memory.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do with one received message: hand ``message`` to the SDK, send ``reply``
    back at once (an error object, or a list of them for a batch), or neither (drop)."""

    message: JSONRPCMessage | None = None
    reply: dict[str, Any] | list[dict[str, Any]] | None = None


def error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    """A JSON-RPC error response."""
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _valid_id(value: Any) -> bool:
    # MCP: "a string or integer" (not null, not a fraction); bool is an int to Python.
    return isinstance(value, str | int) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), "a number")


def check(raw: bytes | str) -> Verdict:
    """Check one message as received (a stdio line, an HTTP body)."""
    if len(raw) > MAX_MESSAGE_BYTES:
        return Verdict(reply=error(None, INVALID_REQUEST, "Message larger than 4 MiB — send a "
                                   "smaller request."))
    try:
        # NaN/Infinity are not JSON; nesting deeper than pydantic's limit is refused here too.
        obj = pydantic_core.from_json(raw, allow_inf_nan=False)
    except ValueError as exc:
        return Verdict(reply=error(None, PARSE_ERROR, f"Parse error: {exc} — send one JSON-RPC "
                                   "object per message, as UTF-8 JSON."))
    if isinstance(obj, list):
        return _batch(obj)
    return _single(obj)


def _batch(items: list[Any]) -> Verdict:
    if not items:
        return Verdict(reply=error(None, INVALID_REQUEST, "Empty batch — send one JSON-RPC "
                                   "object per message."))
    replies = []
    for item in items:
        is_notification = (isinstance(item, dict) and isinstance(item.get("method"), str)
                           and "id" not in item)
        if not is_notification:
            rid = item.get("id") if isinstance(item, dict) else None
            replies.append(error(rid if _valid_id(rid) else None, INVALID_REQUEST,
                                 "Batches are not supported — send each request as its own "
                                 "message."))
    return Verdict(reply=replies or None)


def _single(obj: Any) -> Verdict:
    if not isinstance(obj, dict):
        return Verdict(reply=error(None, INVALID_REQUEST, f"A JSON-RPC message is an object, "
                                   f"got {_kind(obj)}."))
    has_id = "id" in obj
    rid = obj.get("id")
    reply_id = rid if _valid_id(rid) else None
    if obj.get("jsonrpc") != "2.0":
        return Verdict(reply=error(reply_id, INVALID_REQUEST, 'Invalid request: "jsonrpc" must '
                                   'be "2.0".'))
    if "method" not in obj:
        if "result" in obj or "error" in obj:  # a client's response: never answered
            return _validated(obj, None)
        return Verdict(reply=error(reply_id, INVALID_REQUEST, 'Invalid request: no "method" — '
                                   'a request is {"jsonrpc": "2.0", "id": 1, "method": "…"}.'))
    method = obj["method"]
    if not isinstance(method, str) or not method:
        return Verdict(reply=error(reply_id, INVALID_REQUEST, 'Invalid request: "method" must be '
                                   f"a non-empty string, got {_kind(method)}."))
    if has_id and not _valid_id(rid):
        return Verdict(reply=error(None, INVALID_REQUEST, 'Invalid request: "id" must be a '
                                   f"string or an integer, got {_kind(rid)}."))
    params = obj.get("params")
    if params is not None and not isinstance(params, dict):
        if not has_id:
            return Verdict()  # a notification is never answered
        return Verdict(reply=error(rid, INVALID_PARAMS, f'Invalid params for {method!r}: '
                                   f'"params" must be an object, got {_kind(params)}.'))
    return _validated(obj, rid if has_id else None)


def _validated(obj: dict[str, Any], rid: Any) -> Verdict:
    try:
        return Verdict(message=jsonrpc_message_adapter.validate_python(obj, by_name=False))
    except ValidationError:
        if rid is None:
            return Verdict()  # a notification or a response: nobody waits for an answer
        return Verdict(reply=error(rid, INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 "
                                   "request object."))


def _encode(reply: dict[str, Any] | list[dict[str, Any]]) -> bytes:
    # ensure_ascii: an id may hold any character; escaped, it cannot break the framing.
    return json.dumps(reply, separators=(",", ":")).encode()


# --------------------------------------------------------------------------- the SDK's server


def create_server(service: RepoctxMCP) -> Server:
    """The MCP server object for ``service`` (not yet bound to a transport)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ver = version("repoctx")
    except PackageNotFoundError:
        ver = "0"

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=service.tools())

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in service.registry:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"Unknown tool {params.name!r} — this server has: "
                + ", ".join(service.registry.names()),
            )
        out = await service.call_async(params.name, params.arguments)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=out.text)],
            structured_content=out.data,
            is_error=out.is_error,
        )

    return Server(
        SERVER_NAME,
        version=ver,
        title="repoctx",
        instructions=INSTRUCTIONS,
        get_tool_input_schema=service.input_schema,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


# --------------------------------------------------------------------------- stdio


@contextlib.contextmanager
def _claim_std_streams() -> Any:
    """The protocol's own copies of fds 0 and 1; while serving, fd 0 reads /dev/null and fd 1
    writes to stderr, so a stray print or a child's output cannot corrupt the protocol."""
    import sys

    sys.stdout.flush()
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
    finally:
        os.close(null)
    try:
        yield wire_in, wire_out
    finally:
        sys.stdout.flush()
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        os.close(wire_in)
        os.close(wire_out)


def _read_line(stream: BinaryIO) -> tuple[bytes, bool]:
    """One line (b"" at end of input) and whether it fit in MAX_MESSAGE_BYTES; the rest of an
    oversized line is read and dropped in pieces."""
    line = stream.readline(MAX_MESSAGE_BYTES + 1)
    if len(line) <= MAX_MESSAGE_BYTES or line.endswith(b"\n"):
        return line, True
    while line and not line.endswith(b"\n"):
        line = stream.readline(1 << 20)
    return b"x" * (MAX_MESSAGE_BYTES + 1), False


async def serve_stdio(server: Server) -> None:
    """Serve MCP over stdin/stdout until the client closes stdin."""
    with _claim_std_streams() as (wire_in, wire_out):
        source = os.fdopen(wire_in, "rb", closefd=False)
        sink = os.fdopen(wire_out, "wb", buffering=0, closefd=False)
        # Our own thread limiter: tool threads (their own limiter) can never starve the wire.
        io_limiter = anyio.CapacityLimiter(2)
        write_lock = anyio.Lock()

        async def emit(data: bytes) -> None:
            async with write_lock:
                await anyio.to_thread.run_sync(sink.write, data + b"\n", limiter=io_limiter)

        to_server, from_client = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        to_client, from_server = anyio.create_memory_object_stream[SessionMessage](0)

        async def reader() -> None:
            async with to_server:
                while True:
                    line, _ = await anyio.to_thread.run_sync(
                        _read_line, source, abandon_on_cancel=True, limiter=io_limiter
                    )
                    if not line:
                        return
                    if not line.strip():
                        continue  # blank lines between messages ask nothing
                    verdict = check(line)
                    if verdict.reply is not None:
                        await emit(_encode(verdict.reply))
                    elif verdict.message is not None:
                        await to_server.send(SessionMessage(verdict.message))

        async def writer() -> None:
            async with from_server:
                async for item in from_server:
                    try:
                        data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    except ValueError as exc:  # an answer pydantic cannot write as JSON
                        rid = getattr(item.message, "id", None)
                        if rid is None:
                            continue
                        data = json.dumps(error(rid, INTERNAL_ERROR, f"Internal error: the "
                                                f"answer could not be encoded ({exc})."))
                    await emit(json_safe(data).encode())  # U+2028 & co. cannot split a line

        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            tg.start_soon(writer)
            await server.run(from_client, to_client, server.create_initialization_options())
            tg.cancel_scope.cancel()


# --------------------------------------------------------------------------- HTTP


class CheckedMessages:
    """ASGI middleware: a POSTed body is checked before the SDK's app sees it; the errors it
    yields are answered here (HTTP 400, or 202 for a dropped notification)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body, complete = await _body(receive)
        if not complete:  # over the limit: the SDK's own size check answers 413
            await self.app(scope, _replay(body, receive, more=True), send)
            return
        verdict = check(body)
        if verdict.message is not None:
            await self.app(scope, _replay(body, receive), send)
            return
        status, payload = (400, _encode(verdict.reply)) if verdict.reply is not None else (202, b"")
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(payload)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


async def _body(receive: Callable) -> tuple[bytes, bool]:
    """The request body, and whether it was read whole within MAX_MESSAGE_BYTES."""
    parts: list[bytes] = []
    size = 0
    while True:
        event = await receive()
        if event["type"] != "http.request":
            return b"".join(parts), True
        chunk = event.get("body", b"")
        parts.append(chunk)
        size += len(chunk)
        if not event.get("more_body", False):
            return b"".join(parts), True
        if size > MAX_MESSAGE_BYTES:
            return b"".join(parts), False


def _replay(body: bytes, receive: Callable, *, more: bool = False) -> Callable:
    """A receive callable that yields the body already read, then whatever ``receive`` has."""
    first = [{"type": "http.request", "body": body, "more_body": more}]

    async def replay() -> dict[str, Any]:
        return first.pop() if first else await receive()

    return replay


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def bind_loopback(host: str, port: int) -> socket.socket:
    """A listening socket on a loopback address (port 0 picks a free one). The server has no
    authentication, so it refuses to listen where other machines could reach it."""
    if host not in LOOPBACK and not host.startswith("127."):
        raise RepoctxError(
            f"Refusing to serve on {host}: the MCP server has no authentication — use "
            "127.0.0.1 (or an SSH tunnel to reach it from elsewhere)."
        )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise RepoctxError(
            f"Cannot listen on {host}:{port}: {exc.strerror} — pick another "
            "port (0 picks a free one)."
        ) from exc
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def serve_http(
    server: Server, sock: socket.socket, *, on_ready: Callable[[str], None] | None = None
) -> None:
    """Serve MCP over streamable HTTP at ``http://HOST:PORT/mcp`` on an already bound socket."""
    import uvicorn

    host, port = sock.getsockname()[:2]
    app = server.streamable_http_app(host="127.0.0.1" if host.startswith("127.") else host)
    config = uvicorn.Config(CheckedMessages(app), log_level="warning", lifespan="on")
    web = uvicorn.Server(config)
    if on_ready is not None:
        shown = f"[{host}]" if ":" in host else host
        on_ready(f"http://{shown}:{port}/mcp")
    await web.serve(sockets=[sock])
