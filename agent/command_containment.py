"""How many processes one command may have, strongest guard first: a pids cgroup made for the
command (needs a writable pids controller: root, or a delegated cgroup v2 subtree); RLIMIT_NPROC
(not enforced for root or with CAP_SYS_RESOURCE / CAP_SYS_ADMIN); otherwise a /proc watchdog
that finds a session holding too many. agent/runner.py picks one per command and kills the
process tree at the end; the memory bound that rides on the cgroup is agent/command_memory.py.
"""

from __future__ import annotations

import os
import re
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

from . import command_memory

#: How long removing a cgroup (and killing what is left in it) may take.
REAP_S = 5.0


def proc_stat(pid: str) -> tuple[str, int, int, int] | None:
    """(state, pgid, sid, threads) of a /proc entry, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    return fields[0].decode(), int(fields[2]), int(fields[3]), int(fields[17])


def _live(pgid: int | None, sid: int | None) -> Iterator[tuple[int, int]] | None:
    """(pid, threads) of each live (non-zombie) process in a process group or session, as
    /proc lists them; None without /proc."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None

    def scan() -> Iterator[tuple[int, int]]:
        for entry in entries:
            if not entry.isdigit():
                continue
            info = proc_stat(entry)
            if info is None or info[0] in ("Z", "X"):
                continue
            if (pgid is not None and info[1] == pgid) or (sid is not None and info[2] == sid):
                yield int(entry), info[3]

    return scan()


def members(*, pgid: int | None = None, sid: int | None = None) -> list[int] | None:
    """Live (non-zombie) pids in a process group or session; None without /proc."""
    found = _live(pgid, sid)
    return None if found is None else [pid for pid, _ in found]


def session_tasks(sid: int, stop_after: int) -> int | None:
    """Processes and threads of a session (each counts, as a pids cgroup and RLIMIT_NPROC count
    them), or a number past ``stop_after`` as soon as the scan has found that many; None
    without /proc."""
    found = _live(None, sid)
    if found is None:
        return None
    total = 0
    for _, threads in found:
        total += threads
        if total > stop_after:
            break
    return total


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to a process group; False when it is gone (or not ours to signal)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def nproc_enforced() -> bool:
    """RLIMIT_NPROC does not apply to root, nor to holders of CAP_SYS_RESOURCE or CAP_SYS_ADMIN."""
    if os.geteuid() == 0:
        return False
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return True
    match = re.search(r"^CapEff:\s*([0-9a-f]+)", status, re.M)
    caps = int(match.group(1), 16) if match else 0
    return not caps & ((1 << 21) | (1 << 24))


def user_tasks() -> int:
    """Processes and threads the effective user has now — RLIMIT_NPROC counts them all."""
    uid, total = os.geteuid(), 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
        except OSError:
            continue
        info = proc_stat(entry)
        total += info[3] if info is not None else 0
    return total


class PidsCgroup:
    """A pids cgroup made for one command, removed afterwards."""

    def __init__(self, path: Path) -> None:
        self.path = path
        #: The command's memory bound as a whole (agent/command_memory.py), where one can be had.
        self.memory: command_memory.MemoryCgroup | None = None

    @classmethod
    def create(cls, max_pids: int, max_memory: int | None = None) -> PidsCgroup | None:
        for base in pids_cgroup_bases():
            command_memory.remove_stale(base)
            path = base / f"repoctx-{os.getpid()}-{uuid.uuid4().hex[:10]}"
            try:
                path.mkdir()
            except OSError:
                continue
            try:
                (path / "pids.max").write_text(str(max_pids))
            except OSError:
                path.rmdir()
                continue
            made = cls(path)
            if max_memory is not None:
                made.memory = command_memory.bound(path, max_memory)
            return made
        return None

    @property
    def procs_file(self) -> str:
        return str(self.path / "cgroup.procs")

    @property
    def procs_files(self) -> tuple[str, ...]:
        """Every cgroup the command's first process joins (a v1 memory cgroup is a second)."""
        extra = self.memory.procs_file if self.memory is not None else None
        return (self.procs_file,) if extra is None else (self.procs_file, extra)

    def pids(self) -> list[int]:
        try:
            return [int(x) for x in Path(self.procs_file).read_text().split()]
        except OSError:
            return []

    def fork_denied(self) -> bool:
        try:
            events = (self.path / "pids.events").read_text()
        except OSError:
            return False
        match = re.search(r"^max (\d+)", events, re.M)
        return bool(match and int(match.group(1)))

    def kill(self) -> None:
        kill_file = self.path / "cgroup.kill"
        if kill_file.exists():
            try:
                kill_file.write_text("1")
                return
            except OSError:
                pass  # fall back to signalling each member
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue

    def remove(self) -> None:
        try:
            self._remove_pids()
        finally:
            if self.memory is not None:
                self.memory.remove()

    def _remove_pids(self) -> None:
        command_memory.remove_cgroup(self.path, REAP_S, before_each=self.kill)


def pids_cgroup_bases() -> list[Path]:
    """Directories where a child pids cgroup of ours could be made, most specific first."""
    try:
        own = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    bases: list[Path] = []
    for line in own:
        hier, controllers, rel = line.split(":", 2)
        for mount in mounts:
            left, _, right = mount.partition(" - ")
            fstype, _, opts = (right.split() + ["", "", ""])[:3]
            fields = left.split()
            root, mountpoint = fields[3], fields[4]
            rel_in_mount = rel[len(root) :] if rel.startswith(root) and root != "/" else rel
            here = Path(mountpoint + rel_in_mount.rstrip("/"))
            if hier == "0" and fstype == "cgroup2":
                for cand in (here, here.parent):
                    try:
                        enabled = (cand / "cgroup.subtree_control").read_text().split()
                    except OSError:
                        continue
                    if "pids" in enabled:
                        bases.append(cand)
            elif (
                fstype == "cgroup"
                and "pids" in controllers.split(",")
                and "pids" in opts.split(",")
            ):
                bases.append(here)
    return bases


def system_tasks() -> int | None:
    """Tasks on the whole system, from one read of /proc/loadavg (4th field, "running/total")."""
    try:
        with open("/proc/loadavg", "rb") as fh:
            return int(fh.read().split()[3].split(b"/")[1])
    except (OSError, IndexError, ValueError):
        return None


class Watchdog:
    """Says when a session holds more than ``limit`` tasks (processes and threads), where
    nothing else bounds them; the runner then kills it.

    The machine's task count (threads included) is cheap to read, so it is checked every poll;
    the /proc scan of the session runs only when that count has grown by more than ``limit``
    over a baseline of the tasks outside the session. The baseline follows the count down: when
    other tasks end (the last command's processes, still being reaped) while the session grows,
    a baseline left high would hide the growth until the timeout. Both sides count threads, so
    a command cannot trade threads for processes unseen.

    The command's process group is stopped (SIGSTOP) while the scan runs and continued after it
    if it is within the limit: a fork bomb outnumbers the watchdog on the CPU, and one scan
    while it ran took seconds on two cores, long enough for it to reach thousands of processes
    and the command's timeout. Stopped, it cannot grow.
    """

    def __init__(self, sid: int, limit: int) -> None:
        self.sid = sid
        self.limit = limit
        self.baseline = system_tasks()

    def over_limit(self) -> bool:
        total = system_tasks()
        if total is not None and self.baseline is not None:
            self.baseline = min(self.baseline, total)
            if total - self.baseline <= self.limit:
                return False
        frozen = signal_group(self.sid, signal.SIGSTOP)
        over = False
        try:
            tasks = session_tasks(self.sid, self.limit)
            over = tasks is not None and tasks > self.limit
        finally:
            if frozen and not over:
                signal_group(self.sid, signal.SIGCONT)
        if tasks is not None and total is not None:
            # Growth came from elsewhere; rebase so the scan is not repeated every poll.
            self.baseline = total - tasks
        return over
