"""Background indexing: watch the tree, coalesce bursts of changes, run incremental builds.

The watcher only needs to learn *that* something relevant changed: `build` re-stats the whole
tree anyway, so a `git checkout` touching thousands of files becomes one build (or a few, one
per `max_latency_s` while the burst lasts), never one per file. Which events count is the
change filter's decision (`indexer.ops.watch_filter`); this module batches them and runs the
builds.

One writer at a time: the watcher and a manual `repoctx index build` share the write lock; the
watcher waits for a manual build instead of failing. Readers never wait (SQLite WAL). The
watcher's pid file, state file and log, and the status, stop and detached-start commands that
read them, are `indexer.ops.watch_daemon`.
"""

from __future__ import annotations

import errno
import importlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from indexer.build import build
from indexer.config import Config
from indexer.errors import IndexLockedError, RepoctxError
from indexer.ops.watch_daemon import (
    STATE_FILE,
    PidLock,
    WatcherError,
    check_index,
    write_state,
)
from indexer.ops.watch_filter import (
    CHECK,
    DROP,
    KEEP,
    MAX_IGNORE_CHECKS,
    RULE_FILES,
    ChangeFilter,
    event_filter,
)

#: A batch at least this large gets one follow-up build after it settles: a burst big enough
#: may overflow the kernel's inotify queue, and events lost at its end would go unnoticed.
SETTLE_BATCH = 256


@dataclass(frozen=True, slots=True)
class WatchSettings:
    #: Build once no relevant event arrived for this long…
    debounce_s: float = 0.2
    #: …or once the oldest unbuilt event is this old, even while events keep coming.
    max_latency_s: float = 2.0
    #: Also give new chunks vectors (the embedding phase of `index build`).
    embed: bool = False
    #: How long one attempt to take the write lock waits before reporting and trying again.
    lock_retry_s: float = 1.0
    #: At most this many paths of one batch are checked against the ignore rules (each check
    #: runs `git check-ignore`); past it, a (cheap, stat-only) build decides instead.
    max_ignore_checks: int = MAX_IGNORE_CHECKS


@dataclass(frozen=True, slots=True)
class BuildEvent:
    """What one watcher build did, reported to ``on_event`` and kept in the state file."""

    number: int
    kind: str  # build | waiting_lock | error
    at: float  # epoch seconds when it finished
    seconds: float = 0.0
    events: int = 0  # relevant file-system events coalesced into this build
    files_parsed: int = 0
    files_deleted: int = 0
    generation: int = 0
    embedded: int = 0
    message: str = ""


class _Pending:
    """Relevant events not built yet; shared by the observer thread and the build loop."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.first = 0.0  # monotonic time of the oldest unbuilt event
        self.last = 0.0
        self.since = 0.0  # the same, epoch seconds (reported)
        self.count = 0
        self.keep = False  # some event is relevant without further checks
        self.rules = False  # an ignore/config file changed
        self.check: dict[str, None] = {}  # ordered set of paths needing the ignore check

    def add(self, kind: int, rel: str) -> bool:
        """Record one event; True when it opened a new batch."""
        now = time.monotonic()
        with self.cond:
            opened = self.count == 0
            if opened:
                self.first, self.since = now, time.time()
            self.last = now
            self.count += 1
            if kind == KEEP:
                self.keep = True
                if rel.rpartition("/")[2] in RULE_FILES or rel.startswith(".git/info/"):
                    self.rules = True
            elif not self.keep and len(self.check) < 100_000:
                self.check[rel] = None
            self.cond.notify_all()
            return opened

    def take(self) -> tuple[int, bool, bool, list[str]]:
        count, keep, rules, check = self.count, self.keep, self.rules, list(self.check)
        self.count, self.keep, self.rules, self.check = 0, False, False, {}
        return count, keep, rules, check


class _Handler:
    """watchdog event handler: classify in the observer thread, never block it."""

    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher

    def dispatch(self, event) -> None:
        w = self.watcher
        paths = [event.src_path]
        if getattr(event, "dest_path", ""):
            paths.append(event.dest_path)
        best, best_rel = DROP, ""
        for p in paths:
            p = os.fsdecode(p)
            kind, rel = w.filter.classify(p, event.is_directory)
            if kind == KEEP or (kind == CHECK and best == DROP):
                best, best_rel = kind, rel
        if best != DROP and w._pending.add(best, best_rel):
            w._set_state("pending")


# --------------------------------------------------------------------------- the watcher


class Watcher:
    """Watch ``config.root`` and keep the index at ``config.index_path`` up to date.

    `run()` blocks (an initial catch-up build, then one build per settled batch of changes)
    until `stop()` is called from another thread or a signal handler.
    """

    def __init__(
        self,
        config: Config,
        settings: WatchSettings | None = None,
        *,
        on_event: Callable[[BuildEvent], None] | None = None,
        reload_config: Callable[[], Config] | None = None,
        embedder=None,
    ) -> None:
        check_index(config.index_path)
        self.config = config
        self.settings = settings or WatchSettings()
        self.on_event = on_event
        self.reload_config = reload_config
        self.filter = ChangeFilter(config)
        self._embedder = embedder
        self._pending = _Pending()
        self._stop = threading.Event()
        self._pid_lock: PidLock | None = None
        self._status_lock = threading.Lock()
        self._state: dict = {
            "pid": os.getpid(),
            "since": time.time(),
            "root": str(config.root),
            "state": "starting",
            "builds": 0,
            "generation": 0,
            "pending_since": None,
            "last_build": None,
            "last_error": "",
            "embed": self.settings.embed,
        }
        self.builds = 0
        self.events_seen = 0

    # -- public ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask `run()` to return after the build in progress (safe from signal handlers)."""
        self._stop.set()
        # The condition's lock is reentrant, so this is safe even when a signal handler
        # interrupts the main thread while it holds it.
        with self._pending.cond:
            self._pending.cond.notify_all()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self) -> None:
        from watchdog.observers import Observer

        self._pid_lock = PidLock(self.config.index_path).acquire()
        observer = Observer()
        try:
            try:
                observer.schedule(
                    _Handler(self), self.filter.root, recursive=True, event_filter=event_filter()
                )
                observer.start()
            except OSError as exc:
                if exc.errno == errno.ENOSPC:
                    raise WatcherError(
                        f"Cannot watch {self.config.root}: the inotify watch limit is reached — "
                        "raise it (`sysctl fs.inotify.max_user_watches=524288`) or exclude large "
                        "directories in .repoctxignore."
                    ) from exc
                raise WatcherError(f"Cannot watch {self.config.root}: {exc}") from exc
            self._warm_up()  # before the first build: "idle" means ready for fast edits
            # Catch up with changes made while nobody watched (or a build that was killed).
            self._build_batch(events=0, settle=False)
            self._loop(observer)
        finally:
            observer.stop()
            if observer.is_alive():
                observer.join(timeout=5)
            self._set_state("stopped")
            self._pid_lock.release()

    # -- loop -----------------------------------------------------------------------------

    def _loop(self, observer) -> None:
        s = self.settings
        p = self._pending
        settle_at: float | None = None
        while not self._stop.is_set():
            with p.cond:
                # Sleep until an event (or the settle timer); wake every few seconds only to
                # notice a dead observer thread.
                while p.count == 0 and not self._stop.is_set():
                    now = time.monotonic()
                    if settle_at is not None and now >= settle_at:
                        break
                    p.cond.wait(5.0 if settle_at is None else settle_at - now)
                    if not observer.is_alive():
                        raise WatcherError(
                            "The file-system observer stopped (was the root deleted?) — restart "
                            "`repoctx index watch`."
                        )
                # Debounce: wait for a quiet gap, but never longer than max_latency_s overall.
                while p.count and not self._stop.is_set():
                    left = min(p.last + s.debounce_s, p.first + s.max_latency_s) - time.monotonic()
                    if left <= 0:
                        break
                    p.cond.wait(left)
                if self._stop.is_set():
                    return
                count, keep, rules, check = p.take()
            settle_at = None
            if count == 0:  # the settle timer: one more look after a large burst
                self._build_batch(events=0, settle=False)
                continue
            self.events_seen += count
            if rules:
                self._rules_changed()
            if not (keep or self._any_relevant(check)):
                if p.count == 0:
                    self._set_state("idle", pending_since=None)
                continue
            if self._build_batch(events=count, settle=count >= SETTLE_BATCH):
                settle_at = time.monotonic() + max(s.debounce_s, 0.5)

    def _any_relevant(self, paths: Sequence[str]) -> bool:
        return self.filter.any_relevant(paths, self.settings.max_ignore_checks)

    def _rules_changed(self) -> None:
        self.filter.rules_changed()
        if self.reload_config is None:
            return
        try:
            config = self.reload_config()
        except RepoctxError as exc:  # a half-written .repoctx.toml: keep the old settings
            self._report(BuildEvent(self.builds, "error", time.time(), message=str(exc)))
            return
        self.config = config
        self.filter = ChangeFilter(config)

    def _build_batch(self, events: int, settle: bool) -> bool:
        """Run one incremental build, waiting for the write lock as long as it takes.
        Returns ``settle`` when the build ran (so a follow-up is scheduled)."""
        s = self.settings
        self._set_state("building")
        t0 = time.perf_counter()
        announced = False
        while not self._stop.is_set():
            try:
                stats = build(
                    self.config,
                    wait_lock=s.lock_retry_s,
                    embed=s.embed,
                    embedder=self._get_embedder(),
                )
            except IndexLockedError as exc:
                if not announced:  # report once per wait, not once per retry
                    announced = True
                    self._set_state("waiting_lock")
                    self._report(
                        BuildEvent(self.builds, "waiting_lock", time.time(), message=str(exc))
                    )
                continue
            except (RepoctxError, sqlite3.Error, OSError) as exc:
                # Reported and retried on the next change; the watcher itself keeps running.
                msg = f"{type(exc).__name__}: {exc}"
                self._set_state("idle", last_error=msg)
                self._report(
                    BuildEvent(self.builds, "error", time.time(), events=events, message=msg)
                )
                return False
            self.builds += 1
            ev = BuildEvent(
                number=self.builds,
                kind="build",
                at=time.time(),
                seconds=round(time.perf_counter() - t0, 4),
                events=events,
                files_parsed=stats.files_parsed,
                files_deleted=stats.files_deleted,
                generation=stats.generation,
                embedded=int(stats.embedding.get("embedded", 0)) if stats.embedding else 0,
            )
            pending_since = None
            with self._pending.cond:
                if self._pending.count:
                    pending_since = self._pending.since
            self._set_state(
                "pending" if pending_since else "idle",
                last_build=asdict(ev),
                generation=stats.generation,
                pending_since=pending_since,
                last_error="",
                builds=self.builds,
            )
            self._report(ev)
            return settle
        return False

    def _get_embedder(self):
        if not self.settings.embed:
            return None
        if self._embedder is None:
            # One model for the watcher's lifetime: loading it per build would dominate latency.
            from indexer.vectors.embed import create_embedder

            self._embedder = create_embedder(
                self.config.embed_model, batch_size=self.config.embed_batch_size
            )
        return self._embedder

    def _warm_up(self) -> None:
        """Pay the one-time costs of the embedding phase now (model load, the runtime's first
        inference, importing LanceDB: seconds), not inside the first edit's build."""
        embedder = self._get_embedder()
        if embedder is None:
            return
        embedder.embed(["def warm_up():\n    return None"])
        importlib.import_module("lancedb")

    def _report(self, ev: BuildEvent) -> None:
        if self.on_event is not None:
            self.on_event(ev)

    def _set_state(self, state: str, **fields) -> None:
        with self._status_lock:
            self._state["state"] = state
            if (
                state == "pending"
                and "pending_since" not in fields
                and not self._state["pending_since"]
            ):
                self._state["pending_since"] = self._pending.since or time.time()
            self._state.update(fields)
            write_state(self.config.index_path / STATE_FILE, self._state)
