"""repoctx as an MCP server: the index's read tools for any MCP client (Claude Code, Cursor, …).

The tools are the agent's own (``agent.tools.read_tools`` through a ``ToolRegistry``: same
schemas, validation, secrets filtering and messages), plus ``get_context`` and
``index_status``. Nothing here writes to the repository: the only writes are the incremental
builds of the index and a sync marker inside the index directory.

Freshness: a watchdog observer started with the server marks the index dirty when a relevant file
changes; the next tool call first runs an incremental ``build`` (only changed files are parsed,
vectors too when the index keeps them), waiting briefly for the write lock. If another process
holds the lock the call is answered from the current index and says so. Every answer carries
its generation and flags the files it names that changed on disk since they were indexed.

Events reach the observer asynchronously, so before each call the server writes a marker file
in the index directory and waits until the observer reports it (about a millisecond): inotify
delivers events in order, so every change made before the call has been seen by then. (With
``--index-dir`` outside the repository the marker is watched separately and this ordering is
only near-certain.) Without inotify, or when it never reports, the tree is re-stat'ed at most
every ``poll_interval_s`` instead.

Tool calls run at once, each in a thread of its own with a time limit (``call_async``): one that
never returns is answered with a tool error and holds up nothing else. The wire (checking every
message, stdio and HTTP) is ``cli.mcp_protocol``.

Size: the freshness protocol (LiveIndex, sync markers) and the tool adapters of one server; the
change filter itself is indexer.ops.watch_filter.ChangeFilter.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import mcp_types as types

from agent.redact import detectors
from agent.tools.core import Tool, ToolContext, ToolRegistry, ToolResult, fail, ok
from agent.tools.read_tools import FIND_REFERENCES, FIND_SYMBOL, READ_SPAN, SEARCH_CODE
from agent.tools.session import ToolSession
from agent.workspace import Workspace
from indexer.build import build, index_exists
from indexer.config import Config
from indexer.display import place, shown
from indexer.errors import IndexLockedError, NoIndexError, RepoctxError
from indexer.graph import store
from indexer.graph.reads import GraphReads
from indexer.ops.watch_filter import CHECK, KEEP, RULE_FILES, ChangeFilter, event_filter
from retrieval.freshness import generation, stale_paths
from retrieval.status import index_status

SYNC_PREFIX = "mcp-sync-"

@dataclass(frozen=True, slots=True)
class ServeOptions:
    #: Watch the tree and run an incremental build before answering when something changed.
    refresh: bool = True
    #: Seconds a refresh waits for another writer before answering from the current index.
    lock_wait_s: float = 0.5
    #: Seconds a call waits for the observer to catch up with the file system.
    sync_timeout_s: float = 1.0
    #: Seconds the first call waits for the observer's watches to be in place.
    startup_timeout_s: float = 15.0
    #: Without a watcher (inotify unavailable), check the tree at most this often.
    poll_interval_s: float = 2.0
    #: Seconds one tool call may take; past that it is answered with a tool error and its
    #: work, left running in its thread, is dropped when it ends.
    call_timeout_s: float = 60.0
    #: Seconds a call waits for another call's refresh before answering from the index as is.
    refresh_wait_s: float = 10.0
    #: Tool calls running at once (abandoned ones included); past it a call is refused.
    max_running_calls: int = 16


@dataclass(frozen=True, slots=True)
class RefreshReport:
    """What the freshness check before a call did."""

    refreshed: bool = False  # an incremental build ran
    files_parsed: int = 0
    files_deleted: int = 0
    seconds: float = 0.0
    note: str = ""  # why the index may be behind the tree, if it may
    #: Another process held the write lock: the changes are still to be built.
    blocked: bool = False


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """One tool call's answer: text for the model, the same facts as JSON, and the error flag."""

    text: str
    data: dict[str, Any]
    is_error: bool = False


# --------------------------------------------------------------------------- change watching


class _Events:
    """watchdog handler: classifies events in the observer thread and never blocks it."""

    def __init__(self, live: LiveIndex) -> None:
        self.live = live

    def dispatch(self, event: Any) -> None:
        live = self.live
        src = os.fsdecode(event.src_path)
        marker = live.marker_number(src)
        if marker is not None:
            if type(event).__name__ == "FileClosedEvent":
                live._synced(marker)
            return
        paths = [src]
        if getattr(event, "dest_path", ""):
            paths.append(os.fsdecode(event.dest_path))
        # The watcher's own filter (`indexer.ops.watch_filter.ChangeFilter`): ignore rules included.
        kinds = [live.filter.classify(p, event.is_directory) for p in paths]
        if any(kind == KEEP for kind, _ in kinds):
            if any(r.rpartition("/")[2] in RULE_FILES or r.startswith(".git/info/") for _, r in kinds):
                live.filter.rules_changed()  # what is ignored may have changed
            live.mark_dirty()
        else:
            for kind, rel in kinds:
                if kind == CHECK:
                    live.mark_dirty(check=rel)


class LiveIndex:
    """Keeps the index at ``config.index_path`` in step with the tree while the server runs.

    Sync markers are files ``mcp-sync-<pid>-<n>`` in the index directory, written and removed
    by ``_catch_up``; the number in the name says which call an event answers, so a marker
    event that arrives late or never (queue overflow) cannot be mistaken for another's."""

    def __init__(self, config: Config, options: ServeOptions, session: ToolSession) -> None:
        self.config = config
        self.options = options
        self.session = session
        self.root = os.path.realpath(config.root)
        self.index_dir = os.path.realpath(config.index_path)
        self._marker_prefix = os.path.join(self.index_dir, f"{SYNC_PREFIX}{os.getpid()}-")
        self._cond = threading.Condition()
        self._dirty = 1  # changes may have happened while no server was running
        self._keep = True  # some change needs a build whatever the ignore rules say
        self._check: dict[str, None] = {}  # changed paths that matter unless ignored
        self.filter = ChangeFilter(config)
        self._built = 0
        self._markers = 0  # markers written
        self._seen = 0  # highest marker the observer reported
        self._confirmed = False  # the observer reported a marker: its watches are in place
        self._observer: Any = None
        self._last_poll = 0.0
        self.watcher = "off" if not options.refresh else "starting"
        self.last_refresh: RefreshReport | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        if not self.options.refresh:
            return
        from watchdog.observers import Observer

        _remove_dead_markers(self.index_dir)
        observer = Observer()
        handler = _Events(self)
        try:
            observer.schedule(handler, self.root, recursive=True, event_filter=event_filter())
            if not _within(self.index_dir, self.root):
                observer.schedule(handler, self.index_dir, event_filter=event_filter())
            observer.start()
        except OSError as exc:
            self._poll_instead(f"unavailable ({exc.strerror or exc})")
            return
        self._observer = observer
        self.watcher = "starting"

    def _poll_instead(self, why: str) -> None:
        # inotify limits (ENOSPC), no inotify, or watches that never report: stat-only checks.
        self.watcher = (
            f"{why}; checking the whole tree at most every "
            f"{self.options.poll_interval_s:g}s instead"
        )
        self._stop_observer()

    def _stop_observer(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None

    def close(self) -> None:
        self._stop_observer()
        if self.options.refresh:
            self.watcher = "stopped"

    # -- events -------------------------------------------------------------------------------

    def marker_number(self, path: str) -> int | None:
        """n for this server's marker ``path``, else None."""
        if not path.startswith(self._marker_prefix):
            return None
        tail = path[len(self._marker_prefix) :]
        return int(tail) if tail.isdigit() else None

    def mark_dirty(self, check: str | None = None) -> None:
        """Note a change; ``check``: the path of one that matters only if the ignore rules
        do not exclude it (decided in a batch by ``refresh``)."""
        with self._cond:
            self._dirty += 1
            if check is None:
                self._keep = True
            elif not self._keep and len(self._check) < 100_000:
                self._check[check] = None

    def _synced(self, n: int) -> None:
        with self._cond:
            self._seen = max(self._seen, n)
            self._cond.notify_all()

    def _catch_up(self, timeout: float) -> bool:
        """Wait until the observer has handled every change made before now (inotify keeps
        events in order); False if it did not report in time."""
        with self._cond:
            self._markers += 1
            n = self._markers
        path = f"{self._marker_prefix}{n}"
        try:
            # A new file, never one that is there: a link planted at the name (the index
            # directory is writable where the sandbox has no mount namespace) is not followed.
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            with os.fdopen(os.open(path, flags, 0o600), "w") as fh:
                fh.write("repoctx MCP server sync marker\n")
        except OSError:
            return False
        try:
            with self._cond:
                return self._cond.wait_for(lambda: self._seen >= n, timeout=timeout)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)

    # -- refresh ------------------------------------------------------------------------------

    def refresh(self) -> RefreshReport:
        """Run an incremental build if the tree changed since the last one (call serialised)."""
        if not self.options.refresh:
            return RefreshReport(note="automatic refresh is off (--no-refresh)")
        if self._observer is not None:
            if self._catch_up(
                self.options.sync_timeout_s if self._confirmed else self.options.startup_timeout_s
            ):
                if not self._confirmed:
                    self._confirmed, self.watcher = True, "running"
            elif self._confirmed:
                self.mark_dirty()  # events may have been lost: let the build's stat decide
            else:
                self._poll_instead("not reporting changes")
        if self._observer is None and (
            time.monotonic() - self._last_poll >= self.options.poll_interval_s
        ):
            self._last_poll = time.monotonic()
            self.mark_dirty()
        with self._cond:
            target = self._dirty
            if target == self._built:
                return RefreshReport()
            keep, check = self._keep, list(self._check)
            self._keep, self._check = False, {}
        if not keep and not self.filter.any_relevant(check):  # only ignored paths changed
            with self._cond:
                self._built = max(self._built, target)
            return RefreshReport()
        report = self._build()
        if report.blocked:  # nothing was built: the next call must try again
            self.mark_dirty()
        if not report.blocked:
            with self._cond:
                self._built = max(self._built, target)
        self.last_refresh = report
        return report

    def _build(self) -> RefreshReport:
        t0 = time.perf_counter()
        config = self.config
        try:
            model = self.session.embed_model(config)
            embedder = self.session.embedder(config) if model else None
        except (RepoctxError, sqlite3.DatabaseError) as exc:  # a damaged index, a lost model
            return RefreshReport(note=f"the index could not be refreshed: {_message(config, exc)}")
        if model:
            # Chunks are sized with the tokenizer of the model that embeds them.
            config = replace(config, embed_model=model)
        try:
            stats = build(
                config,
                wait_lock=self.options.lock_wait_s,
                embed=embedder is not None,
                embedder=embedder,
            )
        except IndexLockedError:
            return RefreshReport(
                note="another process is writing the index right now, so this answer comes from "
                "the index as it was; the next call refreshes it",
                blocked=True,
            )
        except RepoctxError as exc:
            return RefreshReport(note=f"the index could not be refreshed: {exc}")
        return RefreshReport(
            True, stats.files_parsed, stats.files_deleted, round(time.perf_counter() - t0, 3)
        )

    def state(self) -> dict[str, Any]:
        with self._cond:
            dirty = self._dirty != self._built
        return {
            "auto_refresh": self.options.refresh,
            "watcher": self.watcher,
            "changes_pending": dirty if self.options.refresh else None,
            "last_refresh": asdict(self.last_refresh) if self.last_refresh else None,
        }


def _message(config: Config, exc: BaseException) -> str:
    """What to tell the client about ``exc``: SQLite's word for a damaged file becomes the
    one-line IndexDamagedError naming the repair."""
    if isinstance(exc, sqlite3.DatabaseError) and store.is_damage(exc):
        return str(store.damaged(config.index_path, exc))
    return str(exc)


def _remove_dead_markers(index_dir: str) -> None:
    """Sync markers left behind by servers that were killed mid-call."""
    try:
        names = os.listdir(index_dir)
    except OSError:
        return
    for name in names:
        pid = name[len(SYNC_PREFIX) :].partition("-")[0]
        if not name.startswith(SYNC_PREFIX) or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # its server is still running
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(index_dir, name))


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


# --------------------------------------------------------------------------- extra tools


_FOCUS_SPAN = re.compile(r"(.+?):(\d+)(?:-(\d+))?")


def _get_context(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    try:
        from retrieval.context import assemble_context
    except ImportError:
        return fail(
            "get_context is not available in this repoctx build (retrieval.context is "
            "missing) — use search_code and find_symbol, then read_span."
        )
    focus = list(args.get("focus") or ())
    for entry in focus:
        m = _FOCUS_SPAN.fullmatch(entry)
        ctx.workspace.check_readable(m.group(1) if m else entry)  # confinement and secrets
    pack = assemble_context(
        ctx.session.conn(ctx.config),
        ctx.config.root,
        args["query"],
        args["budget_tokens"],
        focus=focus,
        searcher=ctx.session.searcher(ctx.config, semantic=True),
    )
    kept = tuple(i for i in pack.items if not ctx.workspace.is_hidden(i.path))
    if len(kept) != len(pack.items):
        pack = replace(pack, items=kept)
    data = pack.to_dict()
    if not kept:
        return ok(
            "Nothing relevant found for this task — try search_code with other words.", **data
        )
    why = "\n".join(
        f"- {place(i.path, i.start_line, i.end_line)} ({i.kind}, {i.tokens} tokens): "
        + shown("; ".join(str(r) for r in i.reasons))  # qualnames come from file names
        for i in kept
    )
    warn = "".join(f"\nNote: {w}" for w in pack.warnings)
    return ok(
        f"{pack.render()}\n\nWhy these spans ({pack.used_tokens}/{pack.budget} tokens):\n{why}"
        + warn,
        **data,
    )


GET_CONTEXT = Tool(
    "get_context",
    "Assemble the code most relevant to a task or question within a token budget: definitions, "
    "their callers and callees, related tests, each span with the reason it was chosen. Use it "
    "first on a new task, then read_span or find_references to go deeper.",
    {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": 4000,
                "description": "The task, bug report or question, in words.",
            },
            "budget_tokens": {
                "type": "integer",
                "minimum": 256,
                "maximum": 32000,
                "default": 4000,
                "description": "Most tokens the pack may use.",
            },
            "focus": {
                "type": "array",
                "maxItems": 20,
                "items": {"type": "string", "minLength": 1, "maxLength": 4096},
                "description": "Files or directories to include first, relative to the "
                "repository root; `path:12` or `path:12-40` for lines.",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    "read",
    _get_context,
)


def _status_tool(live: LiveIndex) -> Tool:
    def handler(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        st = index_status(ctx.config)
        st["server"] = live.state()
        pend = st["pending"]
        lines = [
            f"Index of {st['root']}: generation {st['generation']}, {st['files']} files, "
            f"{st['symbols']} symbols, {st['references']} references "
            f"({st['resolved_pct']:.1f}% resolved).",
            f"On disk but not indexed yet: {pend['changed']} changed, {pend['added']} added, "
            f"{pend['deleted']} deleted.",
        ]
        model = ctx.session.embed_model(ctx.config)
        if model:
            done, total = GraphReads(ctx.session.conn(ctx.config)).vector_coverage()
            st["vectors"] = {"model": model, "coverage": round(done / total, 4) if total else 1.0}
            lines.append(f"Vectors: {model}, {done} of {total} chunks embedded.")
        else:
            st["vectors"] = None
            lines.append("Vectors: none (search_code uses lexical and symbol matches).")
        srv = st["server"]
        lines.append(
            "Automatic refresh: "
            + (
                f"on, watcher {srv['watcher']}"
                if srv["auto_refresh"]
                else "off — restart the server without --no-refresh"
            )
        )
        return ok("\n".join(lines), **st)

    return Tool(
        "index_status",
        "How complete and fresh the index is: generation, counts of files, symbols and "
        "references, files changed on disk but not indexed yet, vectors, and whether this "
        "server refreshes the index automatically.",
        {"type": "object", "properties": {}, "additionalProperties": False},
        "read",
        handler,
    )


# --------------------------------------------------------------------------- the service


class RepoctxMCP:
    """The tools, the index they read and the freshness keeper; ``call`` is thread-safe."""

    def __init__(self, config: Config, options: ServeOptions | None = None) -> None:
        if not index_exists(config):
            raise NoIndexError(
                f"No index at {config.index_path} — run `repoctx index build {config.root}` "
                "first, then start the server again."
            )
        # A damaged or foreign graph refuses to serve at once (IndexDamagedError); an older
        # schema is fine: the first refresh migrates it.
        store.open_for_read(config.index_path, check_version=False).conn.close()
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
                _status_tool(self.live),
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
            import indexer.vectors.table  # noqa: F401  (lancedb)
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
            damaged = store.damaged(self.config.index_path, result.error or "")
            result = fail(str(damaged), exception="IndexDamagedError")
        try:
            fresh = self._freshness(report, result.data)
        except (RepoctxError, sqlite3.DatabaseError) as exc:
            fresh = {"generation": None, "refreshed": report.refreshed,
                     "files_reindexed": report.files_parsed + report.files_deleted,
                     "stale_files": [], "auto_refresh": self.options.refresh,
                     "note": _message(self.config, exc)}
        data = {**result.data, "ok": result.ok, "freshness": fresh}
        if result.error is not None:
            data["error"] = result.error
        return ToolOutcome(result.text() + "\n\n" + _stamp(fresh), data, not result.ok)

    def _freshness(self, report: RefreshReport, data: dict[str, Any]) -> dict[str, Any]:
        conn = self.session.conn(self.config)
        stale = sorted(stale_paths(conn, _paths(data), str(self.config.root)))
        return {
            "generation": generation(conn),
            "refreshed": report.refreshed,
            "files_reindexed": report.files_parsed + report.files_deleted,
            "stale_files": stale,
            "auto_refresh": self.options.refresh,
            "note": report.note,
        }


def _refused(text: str, **data: Any) -> ToolOutcome:
    """A tool error the server gives without running (or finishing) the tool."""
    return ToolOutcome(text, {**data, "ok": False, "error": text}, is_error=True)


def _paths(data: dict[str, Any]) -> set[str]:
    """The repository paths an answer names (hits, symbols, references, pack items)."""
    out: set[str] = set()
    if isinstance(data.get("path"), str) and "start_line" in data:
        out.add(data["path"])
    for key in ("hits", "symbols", "refs", "items"):
        rows = data.get(key)
        for row in rows if isinstance(rows, list) else ():
            if isinstance(row, dict) and isinstance(row.get("path"), str):
                out.add(row["path"])
    return out


def _stamp(fresh: dict[str, Any]) -> str:
    gen = fresh["generation"]
    parts = [f"[index generation {gen}" if gen is not None else "[index unreadable"]
    n = fresh["files_reindexed"]
    if n:
        parts.append(
            f"refreshed: {n} changed file{'s' if n != 1 else ''} re-indexed before answering"
        )
    elif fresh["auto_refresh"] and not fresh["note"]:
        parts.append("up to date with the working tree")
    if fresh["note"]:
        parts.append(fresh["note"])
    if fresh["stale_files"]:
        names = ", ".join(place(p) for p in fresh["stale_files"][:5])
        more = f" and {len(fresh['stale_files']) - 5} more" if len(fresh["stale_files"]) > 5 else ""
        parts.append(f"changed on disk since indexed (line numbers may be off): {names}{more}")
    return " · ".join(parts) + "]"
