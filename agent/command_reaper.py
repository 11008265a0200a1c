"""Every command running now, and one call that kills them all: for the signal handlers of the
program that runs them (cli/agent_cmds.py), so that no command outlives a SIGTERM, SIGHUP or
SIGINT to repoctx.

What a kill reaches, strongest first: the command's PID namespace (SIGKILL to its PID 1, in the
command's process group, makes the kernel kill every process in the namespace, those that left
the group with setsid(2) included), its pids cgroup (`cgroup.kill` on cgroup v2, each member
otherwise) and its process group. Where neither a PID namespace nor a cgroup could be made, a
process that left the group is out of reach (the runner's result says which containment held).

Called from a signal handler, between two bytecodes of whatever the main thread was doing: so it
takes no lock (single dict operations are atomic) and does nothing that could wait.
"""

from __future__ import annotations

import itertools
import signal
from collections.abc import Callable

from agent.command_containment import signal_group

_running: dict[int, tuple[int, Callable[[], None] | None]] = {}
_ids = itertools.count()


def register(pgid: int, cgroup_kill: Callable[[], None] | None) -> int:
    """Note a command started as process group ``pgid`` (with its cgroup's kill); the token
    for `unregister`."""
    token = next(_ids)
    _running[token] = (pgid, cgroup_kill)
    return token


def unregister(token: int) -> None:
    _running.pop(token, None)


def kill_running() -> int:
    """SIGKILL every running command's process tree; how many commands were running."""
    entries = list(_running.values())
    for pgid, cgroup_kill in entries:
        signal_group(pgid, signal.SIGKILL)  # gone already: the runner reaps it
        if cgroup_kill is not None:
            cgroup_kill()
    return len(entries)
