"""What one command may touch (agent/sandbox.py enforces it): the workspace, what the policy adds
to read and write, what stays read-only or denied, and which layers to try. Paths in a policy are
made absolute and real once (`normalized`) before anything is granted.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

SandboxMode = Literal["auto", "required", "off"]


@dataclass(frozen=True)
class SandboxPolicy:
    """What one command may touch. Relative paths are taken from the workspace; ``read`` and
    ``write`` add hierarchies, ``readonly`` keeps paths inside the workspace read-only (the index
    directory), ``deny_read`` adds ``$HOME``-relative secrets."""

    workspace: Path
    mode: SandboxMode = "auto"
    #: Leave the network alone (no network namespace, no Landlock TCP rules).
    network: bool = False
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    deny_read: tuple[str, ...] = ()
    readonly: tuple[str, ...] = ()
    #: `.git` writable: only for git commands planned by the tools with `agent.git_write`.
    git_writable: bool = False
    #: The workspace's secrets predicate (`Workspace.is_secret`) on "/"-separated relative paths.
    is_secret: Callable[[str], bool] | None = field(default=None, compare=False)
    #: Layer switches (tests, benchmarks): False behaves as if the kernel lacked the layer.
    use_landlock: bool = True
    use_namespaces: bool = True
    #: "always": a user namespace even as root (the path non-root users take).
    userns: Literal["auto", "always"] = "auto"
    #: False behaves as if the kernel refused PID and IPC namespaces (tests, benchmarks).
    pid_namespace: bool = True


def home_dir() -> str:
    """``$HOME`` as the commands see it (the environment wins over the password file)."""
    home = os.environ.get("HOME")
    if not home:
        import pwd

        home = pwd.getpwuid(os.getuid()).pw_dir
    return os.path.normpath(home)


def within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def normalized(policy: SandboxPolicy) -> SandboxPolicy:
    workspace = os.path.realpath(policy.workspace)

    def absolute(path: str) -> str:
        expanded = os.path.expanduser(path)
        if not os.path.isabs(expanded):
            expanded = os.path.join(workspace, expanded)
        return os.path.normpath(expanded)

    return replace(
        policy,
        workspace=Path(workspace),
        read=tuple(absolute(p) for p in policy.read),
        write=tuple(absolute(p) for p in policy.write),
        readonly=tuple(absolute(p) for p in policy.readonly),
    )
