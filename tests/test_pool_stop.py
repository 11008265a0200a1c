"""A worker pool whose work is done stops even when a worker dies as it stops: CPython's
executor (3.11) waited forever for the others when the dead one held the call queue's lock
(seen in CI: a build with every result in, hung in `shutdown` after a worker was killed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: What both scripts start with: the system call a process is blocked in (/proc/PID/syscall).
PRELUDE = r"""
import os, signal, sys, time
from indexer.safety import lifetime

def syscall(pid):
    with open(f"/proc/{pid}/syscall") as fh:
        return fh.read().split()[0]
"""

# Two idle workers: one waits for work reading the call queue's pipe while holding its read lock
# (system call 0, read), the other waits for that lock (a futex). The reader is killed as the
# pool is left normally. Prints the workers still alive afterwards.
SCRIPT = PRELUDE + r"""

with lifetime.spawn_pool(2) as pool:
    assert sorted(f.result() for f in [pool.submit(abs, -i) for i in range(8)]) == list(range(8))
    procs = list(pool._processes.values())
    deadline = time.monotonic() + 20
    while not (readers := [p for p in procs if syscall(p.pid) == "0"]):
        assert time.monotonic() < deadline, [syscall(p.pid) for p in procs]
        time.sleep(0.01)
    os.kill(readers[0].pid, signal.SIGKILL)  # and leave at once: the executor's thread wakes
    # to the shutdown and the death together, and takes it for a shutdown


def running(pid):  # exists and is no zombie (the executor's thread reaps them)
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False

deadline = time.monotonic() + 10
while any(running(p.pid) for p in procs) and time.monotonic() < deadline:
    time.sleep(0.05)
print("stopped", sum(running(p.pid) for p in procs))
"""


@pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/syscall"), reason="needs /proc/PID/syscall")
def test_a_pool_stops_when_a_worker_dies_holding_the_queue_lock():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["stopped", "0"]


# A worker sends a 200 MB result and is killed in the middle of writing it (system call 1).
# The executor's thread then waited forever for the rest of the message, and so did every
# future of the pool and, at exit, the interpreter.
MID_SEND = PRELUDE + r"""
from concurrent.futures import BrokenExecutor

try:
    with lifetime.spawn_pool(1) as pool:
        assert pool.submit(abs, -1).result() == 1
        worker = next(iter(pool._processes.values()))
        results = lifetime.in_flight(pool, bytes, [(200_000_000,)], 1)
        import threading
        def kill_mid_send():
            deadline = time.monotonic() + 30
            while syscall(worker.pid) != "1":
                assert time.monotonic() < deadline
            os.kill(worker.pid, signal.SIGKILL)
        killer = threading.Thread(target=kill_mid_send)
        killer.start()
        list(results)
        print("no error")
except BrokenExecutor:
    killer.join()
    print("broken")
"""


@pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/syscall"), reason="needs /proc/PID/syscall")
def test_a_worker_killed_while_sending_a_result_breaks_the_pool_instead_of_hanging_it():
    proc = subprocess.run([sys.executable, "-c", MID_SEND], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["broken"]
