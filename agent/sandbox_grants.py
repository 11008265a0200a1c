"""What the sandbox grants a command, computed in the parent: the Landlock rules (read and
execute on the system's trees but the home and temp trees, the toolchain, the workspace and what
the policy adds; the secrets under a granted tree left out child by child) and the mount plan of
the namespaces (which trees an empty tmpfs covers, and what is bound back inside them). What
does not change from one command to the next is computed once and revalidated by the mtimes of
the directories it consulted (`static`).
"""

from __future__ import annotations

import fnmatch
import os
import stat
import sys
import threading
from dataclasses import dataclass, field

from indexer import find_git_dirs

from . import home_policy, landlock
from . import sandbox_child as child
from .sandbox_policy import SandboxPolicy, within

#: Known secrets, denied even inside the toolchain directories of $HOME that are granted.
HOME_SECRETS = home_policy.HOME_SECRETS

#: Not granted by Landlock; covered by an empty tmpfs in the mount namespace.
EXCLUDED_TREES: tuple[str, ...] = (
    "/home",
    "/root",
    "/tmp",
    "/var/tmp",
    "/mnt",
    "/media",
    "/run/user",
)
#: Readable only by root; denied too when repoctx runs as root (file modes protect them else).
ROOT_SECRETS: tuple[str, ...] = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssh/ssh_host_*key",
)
#: Device files commands may write.
DEVICES_RW: tuple[str, ...] = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty")
#: Not entered by the workspace walk (see `secrets_in`), nor is any directory holding a
#: Covered by a private, writable tmpfs in the mount namespace.
_PRIVATE_RW = ("/tmp", "/dev/shm")
#: Covered by an empty tmpfs, read-only once what is granted inside is bound back.
_PRIVATE_RO = ("/home", "/root", "/var/tmp", "/mnt", "/media", "/run")
#: A PID namespace with its own /proc (other processes and their command lines are not


def expand(base: str, patterns: tuple[str, ...], stamps: list[tuple[str, int]]) -> list[str]:
    """Existing paths under ``base`` matching the relative glob ``patterns``; records the mtime
    of every directory consulted in ``stamps``."""
    found: set[str] = set()
    consulted: set[str] = set()
    for pattern in patterns:
        level = [base]
        for part in (p for p in pattern.strip("/").split("/") if p):
            nxt = []
            for d in level:
                consulted.add(d)
                if any(c in part for c in "*?["):
                    try:
                        names = os.listdir(d)
                    except OSError:
                        continue
                    nxt += [os.path.join(d, n) for n in names if fnmatch.fnmatchcase(n, part)]
                elif os.path.lexists(os.path.join(d, part)):
                    nxt.append(os.path.join(d, part))
            level = nxt
        found.update(level)
    for d in sorted(consulted):
        try:
            stamps.append((d, os.stat(d).st_mtime_ns))
        except OSError:
            stamps.append((d, -1))
    return sorted(found)


def toolchain_paths() -> list[str]:
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable)}
    venv = os.environ.get("VIRTUAL_ENV")
    if venv:
        paths.add(venv)
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if os.path.isabs(entry):
            paths.add(entry)
            paths.add(os.path.dirname(entry.rstrip("/")))
    return sorted(os.path.normpath(p) for p in paths if p and os.path.exists(p))


@dataclass
class Static:
    """What does not change from one command to the next, and how to tell that it changed."""

    #: Landlock rules: (path, access)
    rules: list[tuple[str, int]] = field(default_factory=list)
    #: Denied although under a granted tree: $HOME secrets (and root's, as root).
    secrets: list[str] = field(default_factory=list)
    #: (directory, mtime_ns) that the computation listed or probed
    stamps: list[tuple[str, int]] = field(default_factory=list)
    #: (O_PATH descriptor, access) per rule, opened once, used under _lock
    fds: list[tuple[int, int]] = field(default_factory=list)
    #: Mount namespace: the covered trees, what is bound back inside them, the directories to
    #: make for that, and the kept paths that are visible inside covered trees.
    trees: list[child.Tree] = field(default_factory=list)
    keep: list[child.Keep] = field(default_factory=list)
    mkdirs: list[bytes] = field(default_factory=list)
    roots: list[str] = field(default_factory=list)
    visible: list[str] = field(default_factory=list)

    def valid(self) -> bool:
        for path, mtime in self.stamps:
            try:
                if os.stat(path).st_mtime_ns != mtime:
                    return False
            except OSError:
                if mtime != -1:
                    return False
        return True

    def open(self) -> None:
        for path, access in self.rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # gone since: nothing to grant
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                access &= landlock.FILE_RIGHTS
            self.fds.append((fd, access))

    def close(self) -> None:
        for fd, _ in self.fds:
            os.close(fd)
        self.fds = []


def grant_tree(
    directory: str, denies: list[list[str]], access: int, out: Static, denied: list[str]
) -> None:
    """Grant ``access`` on ``directory`` except the paths ``denies`` (lists of components) name:
    READ_DIR on the directory (names are not secrets), and each child in full or, when a deny
    goes deeper, child by child again. Symbolic links into or above ``denied`` are left out."""
    if not denies:
        out.rules.append((directory, access))
        return
    out.rules.append((directory, landlock.READ_DIR))
    try:
        names = sorted(os.listdir(directory))
        out.stamps.append((directory, os.stat(directory).st_mtime_ns))
    except OSError:
        return
    for name in names:
        path = os.path.join(directory, name)
        deeper = [d[1:] for d in denies if fnmatch.fnmatchcase(name, d[0])]
        if any(not d for d in deeper):
            continue
        if os.path.islink(path):
            real = os.path.realpath(path)
            if any(within(real, d) or within(d, real) for d in denied):
                continue
        if deeper:
            if os.path.isdir(path) and not os.path.islink(path):
                grant_tree(path, deeper, access, out, denied)
            continue
        out.rules.append((path, access))


def compute_static(policy: SandboxPolicy, home: str, abi: int, ns: bool) -> Static:
    out = Static()
    has_home = home not in ("", "/") and os.path.isdir(home)
    secrets = expand(home, HOME_SECRETS + policy.deny_read, out.stamps) if has_home else []
    if os.geteuid() == 0:
        secrets += expand("/", ROOT_SECRETS, out.stamps)
    out.secrets = secrets
    # $HOME is denied but for the toolchain (agent/home_policy.py); outside it, the toolchain
    # minus $HOME and its ancestors (a `~/bin` on PATH must not grant $HOME).
    allowed_home = (
        sorted(
            set(expand(home, home_policy.HOME_TOOLCHAIN, out.stamps))
            | set(home_policy.toolchain_in_home(home))
        )
        if has_home
        else []
    )
    toolchain = [
        t for t in toolchain_paths() if not has_home or not (within(t, home) or within(home, t))
    ]
    if abi:
        denied = [os.path.realpath(s) for s in secrets] + list(EXCLUDED_TREES)
        # Root's secrets: in a mount namespace they are covered by an empty file; without one,
        # their directories are granted child by child.
        excluded = [*EXCLUDED_TREES, *(s for s in secrets if not ns and not within(s, home))]
        if has_home:
            excluded.append(home)
        grant_tree("/", [parts(e) for e in excluded], landlock.READ, out, denied)
        out.rules = [(p, a | landlock.IOCTL_DEV if within(p, "/dev") else a) for p, a in out.rules]
        for allowed in allowed_home:
            inside = [parts(os.path.relpath(s, allowed)) for s in secrets if within(s, allowed)]
            grant_tree(allowed, inside, landlock.READ, out, denied)
        for tool in toolchain:
            if any(within(e, tool) for e in EXCLUDED_TREES):
                continue  # an ancestor of an excluded tree: it would undo the exclusion
            if any(within(s, tool) for s in secrets):
                continue
            out.rules.append((tool, landlock.READ))
        out.rules += [(dev, landlock.FILE_RIGHTS) for dev in DEVICES_RW]
        out.rules += [(p, landlock.READ) for p in policy.read]
        out.rules += [(p, landlock.fs_rights(abi)) for p in policy.write]
        out.rules.append((str(policy.workspace), landlock.fs_rights(abi)))
        out.rules += [
            (p, landlock.fs_rights(abi) if policy.git_writable else landlock.READ)
            for p in external_git_dirs(str(policy.workspace))
        ]
        out.rules = minimal(out.rules)
    if ns:
        keep = [(str(policy.workspace), True)]
        keep += [(p, True) for p in policy.write]
        keep += [(p, False) for p in policy.read]
        keep += [(p, False) for p in allowed_home]
        keep += [(p, False) for p in toolchain if p != "/"]
        keep += [(p, policy.git_writable) for p in external_git_dirs(str(policy.workspace))]
        if policy.network:
            keep.append(("/run/systemd/resolve", False))
        plan_trees(out, [(os.path.realpath(p), w) for p, w in keep if os.path.exists(p)])
    return out


def minimal(rules: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Rules without those another rule already implies (same or more rights on an ancestor)."""
    kept: list[tuple[str, int]] = []
    for path, access in sorted(rules, key=lambda r: (r[0].count("/"), r[0])):
        if any(within(path, p) and a & access == access for p, a in kept):
            continue
        kept.append((path, access))
    return kept


def plan_trees(out: Static, keep: list[tuple[str, bool]]) -> None:
    """Which trees to cover with a tmpfs, and which kept paths to bind back inside them."""
    trees: list[tuple[str, bool]] = []
    for tree in (*_PRIVATE_RW, *_PRIVATE_RO):
        if not os.path.isdir(tree) or os.path.islink(tree):
            continue
        real = os.path.realpath(tree)
        if any(within(real, p) for p, _ in keep):
            continue  # a kept path is the tree or above it: leave the tree alone
        trees.append((real, tree in _PRIVATE_RW))
    out.trees = [child.Tree(os.fsencode(t), w) for t, w in trees]
    roots = [t for t, _ in trees]
    # Kept paths inside a covered tree, outermost first; one inside another kept path needs no
    # bind of its own unless it is writable and the outer one is not.
    inside = sorted(
        {(p, w) for p, w in keep if any(within(p, t) and p != t for t in roots)},
        key=lambda pw: (pw[0].count("/"), pw[0]),
    )
    chosen: list[tuple[str, bool]] = []
    for path, writable in inside:
        outer = [w for c, w in chosen if within(path, c)]
        if outer and (not writable or any(outer)):
            continue
        chosen.append((path, writable))
    mkdirs: set[str] = set()
    for path, writable in chosen:
        others = [c for c, _ in chosen if c != path]
        tree = next(t for t in roots if within(path, t))
        is_dir = os.path.isdir(path)
        here = path if is_dir else os.path.dirname(path)
        while here != tree and not any(within(here, c) for c in others):
            mkdirs.add(here)
            here = os.path.dirname(here)
        out.keep.append(child.Keep(os.fsencode(path), is_dir, writable, child.mount_flags(path)))
    out.mkdirs = [os.fsencode(p) for p in sorted(mkdirs, key=lambda p: (p.count("/"), p))]
    out.roots = roots
    out.visible = [c for c, _ in chosen]


def parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p]


def external_git_dirs(workspace: str) -> list[str]:
    """A linked worktree's git directories when they lie outside the workspace."""
    dirs = find_git_dirs(workspace)
    if dirs is None:
        return []
    return sorted({str(d) for d in dirs if not within(str(d), workspace)})


#: Held while a cached Static is computed or its descriptors are used (they are closed when
#: it is found stale).
LOCK = threading.Lock()
_static_cache: dict[tuple[object, ...], Static] = {}


def static(policy: SandboxPolicy, home: str, abi: int, ns: bool) -> Static:
    """Cached compute_static; call with ``LOCK`` held (``fds`` are closed on invalidation)."""
    key = (
        policy.workspace,
        policy.read,
        policy.write,
        policy.deny_read,
        policy.git_writable,
        policy.network,
        home,
        abi,
        ns,
        os.geteuid(),
        os.environ.get("PATH", ""),
        os.environ.get("VIRTUAL_ENV", ""),
    )
    cached = _static_cache.get(key)
    if cached is not None:
        if cached.valid():
            return cached
        cached.close()
        del _static_cache[key]
    fresh = compute_static(policy, home, abi, ns)
    fresh.open()
    if len(_static_cache) >= 16:
        for old in _static_cache.values():
            old.close()
        _static_cache.clear()
    _static_cache[key] = fresh
    return fresh
