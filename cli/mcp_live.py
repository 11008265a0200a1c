"""The MCP server's index kept live: a watchdog observer marks it dirty when a relevant file
changes, and the next tool call first runs an incremental build (only changed files are parsed,
vectors too when the index keeps them), waiting briefly for the write lock. If another process
holds the lock the call is answered from the current index and says so. Every answer carries
its generation and flags the files it names that changed on disk since they were indexed
(``LiveIndex.freshness``, ``stamp``).

Events reach the observer asynchronously, so before each call the server writes a marker file
in the index directory and waits until the observer reports it (about a millisecond): inotify
delivers events in order, so every change made before the call has been seen by then. (With
``--index-dir`` outside the repository the marker is watched separately and this ordering is
only near-certain.) Without inotify, or when it never reports, the tree is re-stat'ed at most
every ``poll_interval_s`` instead. The change filter itself is the watcher's (`ChangeFilter`).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from indexer import (
    CHECK,
    KEEP,
    RULE_FILES,
    ChangeFilter,
    Config,
    DatabaseError,
    Index,
    IndexLockedError,
    RepoctxError,
    damaged,
    event_filter,
    is_damage,
    place,
)

if TYPE_CHECKING:
    from agent.tools.session import ToolSession

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
        # The watcher's own filter (`ChangeFilter`): ignore rules included.
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
        except (RepoctxError, DatabaseError) as exc:  # a damaged index, a lost model
            return RefreshReport(note=f"the index could not be refreshed: {_message(config, exc)}")
        if model:
            # Chunks are sized with the tokenizer of the model that embeds them.
            config = replace(config, embed_model=model)
        try:
            stats = Index(config).build(
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

    def freshness(self, report: RefreshReport, data: dict[str, Any]) -> dict[str, Any]:
        """What an answer says about its freshness: the generation it came from, what the
        refresh before it did, and which of the files it names changed on disk since."""
        try:
            index = self.session.index(self.config)
            stale = sorted(index.stale_paths(_paths(data), self.config.root))
            gen = index.graph.generation()
        except (RepoctxError, DatabaseError) as exc:
            return {"generation": None, "refreshed": report.refreshed,
                    "files_reindexed": report.files_parsed + report.files_deleted,
                    "stale_files": [], "auto_refresh": self.options.refresh,
                    "note": _message(self.config, exc)}
        return {
            "generation": gen,
            "refreshed": report.refreshed,
            "files_reindexed": report.files_parsed + report.files_deleted,
            "stale_files": stale,
            "auto_refresh": self.options.refresh,
            "note": report.note,
        }

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
    if isinstance(exc, DatabaseError) and is_damage(exc):
        return str(damaged(config.index_path, exc))
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


def stamp(fresh: dict[str, Any]) -> str:
    """The line that ends every answer: its generation, the refresh, stale files."""
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
