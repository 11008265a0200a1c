"""Background indexing: watch the tree, coalesce bursts of changes, run incremental builds.

The watcher only needs to learn *that* something relevant changed: `build` re-stats the whole
tree anyway, so a `git checkout` touching thousands of files becomes one build (or a few, one
per `max_latency_s` while the burst lasts), never one per file. Events in paths discovery never
indexes are dropped: the index directory (the watcher's own writes would otherwise loop),
`.git` internals other than HEAD and refs (a branch switch), files without a grammar, and paths
the ignore rules exclude.

One writer at a time: the watcher and a manual `repoctx index build` share the write lock; the
watcher waits for a manual build instead of failing. Readers never wait (SQLite WAL). A running
watcher holds an advisory lock on `<index>/watch.pid`, which the kernel drops when it dies, so a
pid file left by `kill -9` is never mistaken for a live watcher; its state is in
`<index>/watch.json`.

Size: the change filter, the event batcher, the watcher loop and its pid and state files are one
lifecycle; the filter is shared with the MCP server.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import importlib
import json
import os
import signal
import sqlite3
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from indexer.build import build
from indexer.config import Config
from indexer.errors import IndexLockedError, NoIndexError, RepoctxError
from indexer.graph import store
from indexer.parse.discovery import is_ignored_path
from indexer.parse.languages import extensionless, language_for_path
from indexer.safety.index_dir_guard import check_index_dir

PID_FILE = "watch.pid"
STATE_FILE = "watch.json"
LOG_FILE = "watch.log"
#: The log is rotated (to watch.log.1) when a detached watcher starts and it is larger.
LOG_ROTATE_BYTES = 5_000_000
#: Files whose change alters what discovery lists or how: always worth a build.
RULE_FILES = frozenset({".gitignore", ".repoctxignore", ".repoctx.toml", "pyproject.toml"})
#: `.git` entries whose change means the checked-out branch or the ignore rules moved.
GIT_SIGNALS = ("HEAD", "packed-refs", "info/exclude")
GIT_SIGNAL_DIRS = ("refs/heads/",)
#: A batch at least this large gets one follow-up build after it settles: a burst big enough
#: may overflow the kernel's inotify queue, and events lost at its end would go unnoticed.
SETTLE_BATCH = 256
#: Paths checked one by one against the ignore rules before a stat-only build is cheaper.
MAX_IGNORE_CHECKS = 64


class WatcherError(RepoctxError):
    """The index watcher failed — see `<index>/watch.log`, then restart it."""


class WatcherRunningError(WatcherError):
    """A watcher is already running for this index — `repoctx index watch --status` shows it."""


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


@dataclass(frozen=True, slots=True)
class WatchStatus:
    """Whether a watcher serves this index, and how fresh the index is."""

    index_dir: str
    running: bool
    pid: int | None = None
    since: float | None = None  # epoch seconds the watcher started
    state: str = "stopped"  # starting | idle | pending | building | waiting_lock | stopped
    builds: int = 0
    generation: int = 0
    pending_since: float | None = None  # oldest change not yet built
    last_build: dict | None = None
    last_error: str = ""
    embed: bool = False
    #: The index reflects every change the watcher has seen (running, idle, nothing pending).
    fresh: bool = False


@dataclass(frozen=True, slots=True)
class StopResult:
    pid: int | None
    was_running: bool
    forced: bool = False  # it ignored SIGTERM and was killed (builds survive kill -9)


# --------------------------------------------------------------------------- event filtering

DROP, KEEP, CHECK = 0, 1, 2


class ChangeFilter:
    """Classifies event paths: dropped outright, relevant, or to be checked against the ignore
    rules (which costs a `git check-ignore`, so it is done per batch, not per event)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.root = os.path.realpath(config.root)
        index_real = os.path.realpath(config.index_path)
        self.index_rel = (
            os.path.relpath(index_real, self.root).replace(os.sep, "/")
            if index_real.startswith(self.root + os.sep)
            else None
        )
        self._dir_ignored: dict[str, bool] = {}

    def rel(self, path: str) -> str | None:
        real = path if path.startswith(self.root + os.sep) else None
        if real is None:
            return None
        return real[len(self.root) + 1 :].replace(os.sep, "/")

    def classify(self, path: str, is_dir: bool) -> tuple[int, str]:
        rel = self.rel(path)
        if not rel:
            return DROP, ""
        ix = self.index_rel
        if ix and (rel == ix or rel.startswith(ix + "/")):
            return DROP, rel
        if rel == ".git" or rel.startswith(".git/"):
            inner = rel[5:]
            if inner in GIT_SIGNALS or inner.startswith(GIT_SIGNAL_DIRS):
                return KEEP, rel
            return DROP, rel
        if "/.git/" in rel or rel.endswith("/.git"):
            return DROP, rel  # a nested repository's internals
        name = rel.rpartition("/")[2]
        if name in RULE_FILES:
            return KEEP, rel
        if not is_dir and language_for_path(rel) is None and not extensionless(rel):
            # build never parses it: its change cannot alter the index (a file without a
            # suffix may be a script whose `#!` line names its language: the build looks)
            return DROP, rel
        return CHECK, rel

    def rules_changed(self) -> None:
        self._dir_ignored.clear()

    def any_relevant(self, paths: Sequence[str], limit: int = MAX_IGNORE_CHECKS) -> bool:
        """Whether some of the CHECK paths ``paths`` is not ignored; past ``limit`` checks the
        answer is yes (a stat-only build is cheaper than checking them one by one)."""
        return any(i >= limit or not self.ignored(rel) for i, rel in enumerate(paths))

    def ignored(self, rel: str) -> bool:
        """Whether discovery's path rules exclude ``rel``; ancestors are checked (and cached)
        first so a burst inside one ignored directory costs a handful of checks."""
        parts = rel.split("/")
        for depth in range(1, len(parts)):
            d = "/".join(parts[:depth])
            hit = self._dir_ignored.get(d)
            if hit is None:
                hit = self._dir_ignored[d] = is_ignored_path(self.config, d)
            if hit:
                return True
        return is_ignored_path(self.config, rel)


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


_WATCHED_EVENTS: list[type] | None = None


def event_filter() -> list[type]:
    """Only changes that can alter the tree: no opened/closed-without-write/attrib events, so
    the build reading files does not wake the watcher (the kernel is not even asked for them)."""
    global _WATCHED_EVENTS
    if _WATCHED_EVENTS is None:
        from watchdog import events as ev

        _WATCHED_EVENTS = [
            ev.FileCreatedEvent,
            ev.FileDeletedEvent,
            ev.FileModifiedEvent,
            ev.FileMovedEvent,
            ev.FileClosedEvent,
            ev.DirCreatedEvent,
            ev.DirDeletedEvent,
            ev.DirMovedEvent,
        ]
    return _WATCHED_EVENTS


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
        self._pid_lock: _PidLock | None = None
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

        self._pid_lock = _PidLock(self.config.index_path).acquire()
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
            _write_json(self.config.index_path / STATE_FILE, self._state)


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)  # readers see the old or the new state, never half of one


# --------------------------------------------------------------------------- pid file


class _PidLock:
    """`<index>/watch.pid`, flock-ed for the watcher's lifetime."""

    def __init__(self, index_dir: Path) -> None:
        self.path = index_dir / PID_FILE
        self._fd: int | None = None

    def acquire(self) -> _PidLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                pid = _read_pid(self.path)
                raise WatcherRunningError(
                    f"A watcher (process {pid or '?'}) already keeps {self.path.parent} up to date "
                    "— `repoctx index watch --stop` stops it."
                ) from None
            # The file may have been unlinked by a stopping watcher between open and flock:
            # then this lock guards nothing; take the file that is there now.
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # unlinked while still locked: see acquire()
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None


def _read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _holder(index_dir: Path) -> int | None:
    """The pid of the live watcher of ``index_dir``, or None (a stale pid file is removed)."""
    path = index_dir / PID_FILE
    try:
        # A watcher makes its pid file O_NOFOLLOW, so a link there is not one: a repository
        # that ships `watch.pid → some daemon's flock-ed pid file` would have `--stop` kill it.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            for _ in range(50):  # the holder writes its pid right after locking
                text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                if text.isdigit() and int(text):
                    return int(text)
                time.sleep(0.01)
            return None
        # Nobody holds it: left behind by a watcher that was killed.
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                path.unlink()
        except FileNotFoundError:
            pass
        return None
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- control


def watch_status(config: Config) -> WatchStatus:
    """Is a watcher running for this index, since when, what did it last build, and is the
    index fresh (every change it saw is built)?"""
    index_dir = config.index_path
    pid = _holder(index_dir)
    try:
        state = json.loads((index_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        state = {}
    generation = _generation(index_dir)
    running = pid is not None
    current = state.get("state", "stopped") if running and state.get("pid") == pid else "stopped"
    if running and current == "stopped":
        current = "starting"
    pending_since = state.get("pending_since") if running else None
    return WatchStatus(
        index_dir=str(index_dir),
        running=running,
        pid=pid,
        since=state.get("since") if running else None,
        state=current,
        builds=int(state.get("builds", 0)),
        generation=generation,
        pending_since=pending_since,
        last_build=state.get("last_build"),
        last_error=state.get("last_error", ""),
        embed=bool(state.get("embed", False)),
        fresh=running and current == "idle" and not pending_since,
    )


def check_index(index_dir: Path) -> None:
    """Refuse to start on a damaged or foreign graph (IndexDamagedError names the repair); no
    index yet, or an older schema, is fine: the first build makes or migrates it. A graph
    damaged while the watcher runs is reported by each build that meets it. The directory
    itself must hold no link or special file repoctx did not make (`index_dir_guard`): the
    watcher's log, state and pid files are opened by path."""
    check_index_dir(index_dir)
    if store.graph_file(index_dir) is not None:
        with contextlib.suppress(NoIndexError):
            store.open_for_read(index_dir, check_version=False).conn.close()


def _generation(index_dir: Path) -> int:
    try:
        db = store.open_for_read(index_dir)
    except RepoctxError:
        return 0
    try:
        return int(store.get_meta(db, "generation", "0") or 0)
    except sqlite3.Error:
        return 0
    finally:
        db.conn.close()


def stop_watcher(config: Config, timeout: float = 30.0) -> StopResult:
    """SIGTERM the watcher and wait for it to exit; SIGKILL it after ``timeout`` (safe: a build
    killed at any point is finished by the next one)."""
    index_dir = config.index_path
    pid = _holder(index_dir)
    if pid is None:
        return StopResult(None, was_running=False)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        _holder(index_dir)  # it just exited: clears the pid file if it left one
        return StopResult(pid, was_running=True)
    if _wait_gone(index_dir, timeout):
        return StopResult(pid, was_running=True)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if not _wait_gone(index_dir, 10.0):
        raise WatcherError(f"Watcher process {pid} does not exit — check it with `ps {pid}`.")
    return StopResult(pid, was_running=True, forced=True)


def _wait_gone(index_dir: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _holder(index_dir) is None:
            return True
        time.sleep(0.1)
    return False


def start_detached(config: Config, argv: Sequence[str], timeout: float = 60.0) -> int:
    """Start ``argv`` (a foreground `repoctx index watch` command line) in a new session,
    detached from the terminal, logging to `<index>/watch.log`; return its pid once it holds
    the watcher lock."""
    index_dir = config.index_path
    running = _holder(index_dir)
    if running is not None:
        raise WatcherRunningError(
            f"A watcher (process {running}) already keeps {index_dir} up to date — "
            "`repoctx index watch --stop` stops it."
        )
    check_index(index_dir)
    index_dir.mkdir(parents=True, exist_ok=True)
    log_path = index_dir / LOG_FILE
    if log_path.exists() and log_path.stat().st_size > LOG_ROTATE_BYTES:
        os.replace(log_path, log_path.with_name(LOG_FILE + ".1"))
    from indexer.safety.isolation import NEUTRAL_DIR, python_env

    with open(log_path, "ab") as log:
        # Not in the tree, nor with it on its path (`indexer.safety.isolation`): run there, ``-c``
        # would import the tree's modules in place of Python's.
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=NEUTRAL_DIR,
            env=python_env(config.root),
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _holder(index_dir) == proc.pid:
            return proc.pid
        code = proc.poll()
        if code is not None:
            raise WatcherError(f"The watcher exited at start (status {code}) — see {log_path}.")
        time.sleep(0.05)
    raise WatcherError(
        f"The watcher (process {proc.pid}) did not start within {timeout:.0f}s — see {log_path}."
    )
