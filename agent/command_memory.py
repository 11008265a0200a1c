"""A memory bound for one command as a whole, by a memory cgroup.

``RLIMIT_AS`` (`ResourceLimits.max_memory_bytes`) bounds one process's address space; a
command that forks N processes may still take N times that, and the pages of a tmpfs it fills
count against no rlimit at all. The kernel's memory controller counts all of them — every
process of the command and the shared-memory pages they touch — and kills inside the command
when the bound is reached, never outside it.

Where the command's own cgroup (the pids cgroup the runner makes) is in the unified hierarchy
(cgroup v2) and the memory controller is enabled there, the bound is its ``memory.max``. In a
v1 or hybrid layout the memory controller has a hierarchy of its own: a cgroup of the same name
is made there, and the child joins it between fork and exec as it joins the pids cgroup. Where
neither can be made (no root, no delegated cgroup), the command runs with the per-process bound
only.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: How long removal waits for the kernel to let go of a cgroup whose processes were killed.
_REMOVE_S = 2.0


@dataclass
class MemoryCgroup:
    path: Path
    #: True for a v1 cgroup made here: the child joins it, and it is removed afterwards. False
    #: when the bound sits in the command's own v2 cgroup (nothing more to join or remove).
    own: bool

    @property
    def procs_file(self) -> str | None:
        return str(self.path / "cgroup.procs") if self.own else None

    def remove(self) -> None:
        if self.own:
            remove_cgroup(self.path, _REMOVE_S)


def bound(command_cgroup: Path, max_bytes: int) -> MemoryCgroup | None:
    """Bound the memory of the command whose own cgroup is ``command_cgroup``; None when no
    memory cgroup can be had here."""
    try:
        (command_cgroup / "memory.max").write_text(str(max_bytes))
    except OSError:
        pass
    else:
        # Swapped-out pages would otherwise not count against the bound.
        with contextlib.suppress(OSError):
            (command_cgroup / "memory.swap.max").write_text("0")
        return MemoryCgroup(command_cgroup, own=False)
    for base in _v1_bases():
        remove_stale(base)
        path = base / command_cgroup.name
        try:
            path.mkdir()
        except OSError:
            continue
        try:
            (path / "memory.limit_in_bytes").write_text(str(max_bytes))
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()
            continue
        with contextlib.suppress(OSError):  # absent without swap accounting
            (path / "memory.memsw.limit_in_bytes").write_text(str(max_bytes))
        return MemoryCgroup(path, own=True)
    return None


def _v1_bases() -> list[Path]:
    """This process's own cgroup in each mounted v1 memory hierarchy."""
    try:
        own = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    bases = []
    for line in own:
        _hier, controllers, rel = line.split(":", 2)
        if "memory" not in controllers.split(","):
            continue
        for mount in mounts:
            left, _, right = mount.partition(" - ")
            fstype, _, opts = (right.split() + ["", "", ""])[:3]
            if fstype != "cgroup" or "memory" not in opts.split(","):
                continue
            fields = left.split()
            root, mountpoint = fields[3], fields[4]
            inside = rel[len(root) :] if rel.startswith(root) and root != "/" else rel
            bases.append(Path(mountpoint + inside.rstrip("/")))
    return bases


def remove_cgroup(path: Path, seconds: float, before_each: Callable[[], None] | None = None) -> None:
    """Remove the cgroup at ``path``, retrying for up to ``seconds`` while it still has members
    (``before_each`` may kill them first); one left behind is removed later (`remove_stale`)."""
    deadline = time.monotonic() + seconds
    while True:
        if before_each is not None:
            before_each()
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return  # an empty cgroup left behind: harmless, removed by a later run
            time.sleep(0.02)


def remove_stale(base: Path) -> None:
    """Empty cgroups (pids or memory) of repoctx processes that died before removing them."""
    for stale in base.glob("repoctx-*-*"):
        owner = stale.name.split("-")[1]
        if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
            with contextlib.suppress(OSError):  # still has members, or not ours to remove
                stale.rmdir()
