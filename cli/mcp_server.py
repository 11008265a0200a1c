"""repoctx as an MCP server: the index's read tools for any MCP client (Claude Code, Cursor, …).

The tools are the agent's own (``agent.tools.read_tools`` through a ``ToolRegistry``: same
schemas, validation, secrets filtering and messages), plus ``get_context`` and
``index_status`` (``cli.mcp_tools``). Nothing here writes to the repository: the only writes
are the incremental builds of the index and a sync marker inside the index directory.

Freshness (``cli.mcp_live``): a watchdog observer started with the server marks the index dirty
when a relevant file changes; the next tool call first runs an incremental build, and every
answer carries its generation and flags the files it names that changed on disk since they
were indexed.

Tool calls run at once, each in a thread of its own with a time limit (``call_async``): one that
never returns is answered with a tool error and holds up nothing else. The wire (checking every
message, stdio and HTTP) is ``cli.mcp_protocol``.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import mcp_types as types

from agent.redact import detectors
from agent.tools.core import ToolContext, ToolRegistry, fail
from agent.tools.read_tools import FIND_REFERENCES, FIND_SYMBOL, READ_SPAN, SEARCH_CODE
from agent.tools.session import ToolSession
from agent.workspace import Workspace
from indexer import Config, Index, NoIndexError, RepoctxError, SchemaError, damaged

from .mcp_live import LiveIndex, RefreshReport, ServeOptions, stamp
from .mcp_tools import GET_CONTEXT, status_tool


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """One tool call's answer: text for the model, the same facts as JSON, and the error flag."""

    text: str
    data: dict[str, Any]
    is_error: bool = False


class RepoctxMCP:
    """The tools, the index they read and the freshness keeper; ``call`` is thread-safe."""

    def __init__(self, config: Config, options: ServeOptions | None = None) -> None:
        index = Index(config)
        if not index.exists():
            raise NoIndexError(
                f"No index at {config.index_path} — run `repoctx index build {config.root}` "
                "first, then start the server again."
            )
        # A damaged or foreign graph refuses to serve at once (IndexDamagedError); an older
        # schema is fine: the first refresh migrates it.
        with index, contextlib.suppress(SchemaError):
            index.connect()
        self.config = config
        self.options = options or ServeOptions()
        self.session = ToolSession()
        self.workspace = Workspace.from_config(config)
        self.ctx = ToolContext(self.workspace, config, frozenset({"read"}), session=self.session)
        self.live = LiveIndex(config, self.options, self.session)
        self.registry = ToolRegistry(
            (
                SEARCH_CODE,
                FIND_SYMBOL,
                FIND_REFERENCES,
                GET_CONTEXT,
                READ_SPAN,
                status_tool(self.live),
            )
        )
        # Serialises refreshes only: tool calls run at once, each in a thread of its own, so
        # one slow or hung call (a read that never returns) holds up no other.
        self._lock = threading.Lock()
        self._running = 0  # calls whose thread has not returned, timed-out ones included
        self._running_lock = threading.Lock()

    def start(self) -> RepoctxMCP:
        self.live.start()
        threading.Thread(target=self._warm, name="repoctx-mcp-warm", daemon=True).start()
        return self

    def _warm(self) -> None:
        """Catch up with changes made while no server ran, then import the search stack (the
        vector store and the tokenizer cost seconds) while the client is still connecting.
        Only the catch-up holds the call lock: imports and cached loads are thread-safe."""
        with self._lock:
            try:
                self.live.refresh()
            except (RepoctxError, OSError):
                return  # the first call meets the same problem and reports it
        try:
            detectors()  # detect-secrets, which redacts every answer (~0.2 s to import)
            from indexer import VectorReader  # noqa: F401  (the vector table: numpy, pyarrow)
            from retrieval.tokens import get_tokenizer

            get_tokenizer(None)
        except (RepoctxError, OSError, ImportError):
            return

    def close(self) -> None:
        self.live.close()
        self.session.close()

    def __enter__(self) -> RepoctxMCP:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def tools(self) -> list[types.Tool]:
        read_only = types.ToolAnnotations(
            read_only_hint=True,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        )
        tools = [self.registry.get(name) for name in self.registry.names()]
        return [
            types.Tool(name=t.name, description=t.description, input_schema=t.parameters,
                       annotations=read_only)
            for t in tools if t is not None
        ]

    def input_schema(self, name: str) -> dict[str, Any] | None:
        tool = self.registry.get(name)
        return None if tool is None else tool.parameters

    async def call_async(self, name: str, arguments: dict[str, Any] | None) -> ToolOutcome:
        """``call`` in a thread of its own, answered within ``call_timeout_s`` whatever the
        tool does: past it the answer is a tool error and the thread's result is dropped."""
        limit = self.options.max_running_calls
        with self._running_lock:
            busy = self._running >= limit
            self._running += 0 if busy else 1
        if busy:
            return _refused(
                f"{limit} tool calls are still running (some may never end, such as a read "
                "that waits for a writer) — try again in a moment, or restart the server."
            )
        done = anyio.Event()
        token = anyio.lowlevel.current_token()
        answer: list[ToolOutcome | BaseException] = []

        def work() -> None:
            try:
                answer.append(self.call(name, arguments))
            except BaseException as exc:  # handed to the awaiting task, which raises it
                answer.append(exc)
            finally:
                with self._running_lock:
                    self._running -= 1
                with contextlib.suppress(RuntimeError):  # the event loop has ended: nobody waits
                    anyio.from_thread.run_sync(done.set, token=token)

        # A daemon thread of its own, not anyio's pool: a call that never returns must not
        # hold the process at exit, nor take a worker that the transport needs.
        threading.Thread(target=work, name=f"repoctx-mcp-{name}", daemon=True).start()
        timeout = self.options.call_timeout_s
        with anyio.move_on_after(timeout):
            await done.wait()
            if isinstance(answer[0], BaseException):
                raise answer[0]
            return answer[0]
        return _refused(
            f"`{name}` did not finish within {timeout:g}s and was abandoned — narrow the "
            "request (a smaller span, a more specific query), or check the path is a regular "
            "file.",
            timed_out=True,
        )

    def _refresh(self) -> RefreshReport:
        """The live refresh, unless another call's refresh is still running after
        ``refresh_wait_s``: then this call answers from the index as it is."""
        if not self._lock.acquire(timeout=self.options.refresh_wait_s):
            return RefreshReport(
                note="another call is still refreshing the index, so this answer comes from "
                "the index as it was; a later call catches up"
            )
        try:
            return self.live.refresh()
        finally:
            self._lock.release()

    def call(self, name: str, arguments: dict[str, Any] | None) -> ToolOutcome:
        """Refresh if needed, run the tool, stamp the answer with its freshness."""
        report = self._refresh()
        result = self.registry.call(name, arguments if arguments is not None else {}, self.ctx)
        if not result.ok and result.data.get("exception") == "DatabaseError":
            # sqlite3 raises exactly DatabaseError for a damaged file (not Operational...)
            error = damaged(self.config.index_path, result.error or "")
            result = fail(str(error), exception="IndexDamagedError")
        fresh = self.live.freshness(report, result.data)
        data = {**result.data, "ok": result.ok, "freshness": fresh}
        if result.error is not None:
            data["error"] = result.error
        return ToolOutcome(result.text() + "\n\n" + stamp(fresh), data, not result.ok)


def _refused(text: str, **data: Any) -> ToolOutcome:
    """A tool error the server gives without running (or finishing) the tool."""
    return ToolOutcome(text, {**data, "ok": False, "error": text}, is_error=True)
