"""Helper processes die with the process that started them.

A parse worker blocked on its task queue never learns that the build was `kill -9`ed: the
queue's pipe stays open in the worker itself, so no EOF arrives and it waits forever, and
multiprocessing's resource tracker waits for every worker. On Linux the kernel can tell a
process when its parent dies (``PR_SET_PDEATHSIG``); elsewhere a watchdog thread polls.

Helpers started by a library whose children run none of our code (a private Ray's daemons and
their agents) get a reaper instead: a small process that notes those processes and their
descendants while this one lives, and kills them when it dies.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from concurrent.futures import Executor, ProcessPoolExecutor

PR_SET_PDEATHSIG = 1
#: How often the fallback watchdog looks at the parent (seconds), where prctl is missing.
POLL_S = 1.0


def die_with_parent(parent_pid: int) -> str:
    """Make this process exit as soon as ``parent_pid`` (its parent) dies; returns how
    (``pdeathsig`` or ``poll``). Call it first thing in a child (a pool initializer).

    The signal is delivered when the parent *thread* that forked us exits, so the parent must
    start children from a thread that outlives them (pools here live inside one call)."""
    how = "poll"
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
                how = "pdeathsig"
        except (OSError, AttributeError):
            pass
    # The parent may have died before prctl took effect: we were re-parented already.
    if os.getppid() != parent_pid:
        os._exit(1)
    if how == "poll":
        threading.Thread(target=_poll_parent, args=(parent_pid,), daemon=True,
                         name="repoctx-parent-watch").start()
    return how


@contextlib.contextmanager
def spawn_pool(jobs: int, tree: str | os.PathLike | None = None) -> Iterator[ProcessPoolExecutor]:
    """A pool of ``jobs`` spawned worker processes that die with this one (`die_with_parent`;
    spawn, not fork: LanceDB, used by the same process for vectors, is not fork-safe). They
    start isolated from ``tree`` (the indexed tree) and from the working directory
    (`indexer.safety.isolation`): no module there can stand in for one of Python's or repoctx's.

    Left by an exception (a worker that died, the caller's error, an interrupt), it kills its
    workers instead of waiting for them: when a worker dies while the pool is starting another,
    CPython's executor (3.11) can wait forever for the new one to exit, and so would the build
    and, at exit, the interpreter."""
    from concurrent.futures import ProcessPoolExecutor

    from indexer.safety.isolation import spawn_context

    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=spawn_context(tree),
                               initializer=die_with_parent, initargs=(os.getpid(),))
    try:
        # Every worker started now, not on a later submit: a worker that dies while the pool
        # starts another breaks CPython's executor (its thread iterating the process table
        # as it grows, or waiting for the new worker forever).
        for _ in range(jobs):
            pool.submit(os.getpid)
        yield pool
    except BaseException:
        procs = _workers(pool)
        for proc in procs:
            with contextlib.suppress(OSError, ValueError):
                proc.kill()
        _wait_exit(procs, STOP_GRACE_S)
        # A worker killed while sending a result leaves part of a message in the result pipe:
        # the executor's thread reads on for the rest, forever (and the interpreter, at exit,
        # waits for that thread). With every worker gone, closing this process's end of the
        # pipe ends its read (end of file): it then sees the pool broken, and ends.
        with contextlib.suppress(AttributeError, OSError):
            pool._result_queue._writer.close()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    stop_pool(pool)


#: Seconds idle workers get to read their stop sentinel when a pool is left normally.
STOP_GRACE_S = 5.0


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Shut a pool down whose every result is in. Idle workers wait for work holding, in turn,
    the call queue's read lock: one that dies then (killed as the build ends) leaves the lock
    held, the others never read their stop sentinel, and CPython's executor (3.11) waits for
    them forever (seen in CI: a build done with its work, hung in `shutdown`). So the workers
    get ``STOP_GRACE_S`` to exit, then are killed: they hold nothing left to save. A caller may
    stop its pool early, from another thread (`phases.sharded`): leaving it then finds the
    workers gone."""
    procs = _workers(pool)
    pool.shutdown(wait=False)
    for proc in _wait_exit(procs, STOP_GRACE_S):  # the executor's thread reaps them, and ends
        with contextlib.suppress(OSError, ValueError):
            proc.kill()


def _workers(pool: Executor) -> list:
    """The worker processes of a process pool (none for other executors): there is no public
    way to reach them."""
    return list((getattr(pool, "_processes", None) or {}).values())


def _wait_exit(procs: list, seconds: float) -> list:
    """Wait up to ``seconds`` for ``procs`` to exit (their sentinels: nothing is reaped
    here); returns those still running."""
    from multiprocessing.connection import wait

    deadline = time.monotonic() + seconds
    running = {p.sentinel: p for p in procs}
    while running and (left := deadline - time.monotonic()) > 0:
        for sentinel in wait(list(running), timeout=left):
            running.pop(sentinel)
    return list(running.values())


#: How often `in_flight` looks at the workers while no result comes (seconds).
WATCH_S = 1.0


def _check_workers(pool: Executor) -> None:
    """BrokenProcessPool when a worker of a process pool has exited: the executor notices
    that itself, except when the worker died while sending a result (see `spawn_pool`)."""
    from concurrent.futures.process import BrokenProcessPool
    from multiprocessing.connection import wait

    procs = _workers(pool)
    if procs and wait([p.sentinel for p in procs], timeout=0):
        raise BrokenProcessPool("a worker process exited while the pool was working")


def in_flight(pool: Executor, fn: Callable, calls: Iterable[tuple], most: int) -> Iterator:
    """``fn(*args)`` on ``pool`` for each ``args`` of ``calls``, at most ``most`` submitted at
    once (so memory follows them, not all the calls); yields the results as they finish."""
    from concurrent.futures import FIRST_COMPLETED, Future, wait

    calls = iter(calls)
    pending: set[Future] = set()
    while True:
        while len(pending) < most and (args := next(calls, None)) is not None:
            pending.add(pool.submit(fn, *args))
        if not pending:
            return
        finished, pending = wait(pending, timeout=WATCH_S, return_when=FIRST_COMPLETED)
        if not finished:
            _check_workers(pool)
        for fut in finished:
            yield fut.result()


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (another user's counts: it cannot be signalled, but lives)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _poll_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(POLL_S)
    os._exit(1)


def start_reaper(roots: list[int]) -> subprocess.Popen | None:
    """Start a reaper of ``roots`` (pids of this process's helpers) and their descendants
    (see the module docstring); None where /proc cannot list children. Stop it with
    ``stop_reaper`` once the helpers are shut down."""
    if not roots or not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children"):
        return None
    from indexer.safety.isolation import NEUTRAL_DIR, interpreter_args

    # This file run as a script (it needs only the standard library), isolated (``-I``) and
    # elsewhere: ``-m indexer.safety.lifetime`` would put the working directory — the repository,
    # often — first on its path.
    return subprocess.Popen(
        [*interpreter_args(), os.path.abspath(__file__), str(os.getpid()), *map(str, roots)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        close_fds=True, cwd=NEUTRAL_DIR,
    )


def stop_reaper(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


def reap(parent: int, roots: list[int], interval: float = 0.2) -> None:
    """Until ``parent`` dies, record ``roots`` and their descendants (pid and start time);
    then SIGKILL those still running. The start time makes sure a pid reused since is never
    hit."""
    seen: dict[int, str] = {}
    while os.getppid() == parent:
        for pid in _descendants(roots) | set(roots):
            if pid not in seen:
                started = _start_time(pid)
                if started is not None:
                    seen[pid] = started
        time.sleep(interval)
    for pid, started in seen.items():
        if _start_time(pid) == started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _descendants(roots: list[int]) -> set[int]:
    out: set[int] = set()
    todo = list(roots)
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as fh:
                    kids = [int(k) for k in fh.read().split()]
            except OSError:
                continue
            for k in kids:
                if k not in out:
                    out.add(k)
                    todo.append(k)
    return out


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()
    return None if fields[0] == b"Z" else fields[19].decode()  # starttime; zombies are done


if __name__ == "__main__":
    reap(int(sys.argv[1]), [int(p) for p in sys.argv[2:]])
