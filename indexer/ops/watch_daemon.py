"""The watcher process seen from outside: its pid file (flock-ed for its lifetime, so a file
left by `kill -9` is never taken for a live watcher), its state file, its log, and the commands
that read them: status, stop, start detached.

A running watcher holds an advisory lock on `<index>/watch.pid`, which the kernel drops when it
dies; its state is in `<index>/watch.json`, replaced whole at each change (`indexer.atomic`);
a detached watcher logs to `<index>/watch.log`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import sqlite3
import stat
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from indexer.atomic import write_atomic
from indexer.config import Config
from indexer.errors import NoIndexError, RepoctxError
from indexer.graph import store
from indexer.safety.index_dir_guard import check_index_dir

PID_FILE = "watch.pid"
STATE_FILE = "watch.json"
LOG_FILE = "watch.log"
#: The log is rotated (to watch.log.1) when a detached watcher starts and it is larger.
LOG_ROTATE_BYTES = 5_000_000


class WatcherError(RepoctxError):
    """The index watcher failed — see `<index>/watch.log`, then restart it."""


class WatcherRunningError(WatcherError):
    """A watcher is already running for this index — `repoctx index watch --status` shows it."""


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


def write_state(path: Path, data: dict) -> None:
    """Replace the state file whole: readers see the old or the new state, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=1))


# --------------------------------------------------------------------------- pid file


class PidLock:
    """`<index>/watch.pid`, flock-ed for the watcher's lifetime."""

    def __init__(self, index_dir: Path) -> None:
        self.path = index_dir / PID_FILE
        self._fd: int | None = None

    def acquire(self) -> PidLock:
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
