"""A kernel-enforced sandbox for the commands the agent runs.

Layers, strongest available first (``CommandResult.sandbox`` records which applied):

``landlock-<abi>`` (Linux >= 5.13, no privileges needed)
    Every file-system right the ABI knows is handled, so anything not granted is denied to the
    command and everything it starts. Granted: read and execute on every top-level directory of
    ``/`` except the home and temp trees (``EXCLUDED_TREES``); of the user's ``$HOME`` only the
    toolchain directories (agent/home_policy.py), and in them not ``HOME_SECRETS``
    (+ ``agent.sandbox_deny_read``); the toolchain (``sys.prefix``, the
    venv, each ``PATH`` directory and its parent); read and write on the workspace, the command's
    private temp directory and ``/dev/null`` & co; ``agent.sandbox_read`` / ``sandbox_write``.
    ABI >= 6 also scopes signals and abstract Unix sockets: the command cannot signal repoctx or
    any process outside its own sandbox. Without namespaces, ABI >= 4 denies TCP bind/connect
    when the network is off (UDP is then not covered).
``mountns`` (root, or unprivileged user namespaces)
    A private mount namespace: empty tmpfs over ``/tmp`` and ``/dev/shm`` (private, writable) and
    over the other home and temp trees and ``/run`` (read-only), with the granted paths inside
    them bound back at the same place; ``.git`` directories and the index directory bound
    read-only (writable only for git commands the tools plan when ``agent.git_write`` is true);
    files on the workspace's secrets deny list covered by ``/dev/null`` and such directories by an
    empty read-only tmpfs, and the same for the ``$HOME`` secrets. Capabilities are dropped.
``pidns``, ``ipcns`` (with ``mountns``, where the kernel allows)
    A PID namespace with its own ``/proc``: the command sees only its own processes; PID 1 is a
    fork of repoctx that starts the command, cannot be read through ``/proc`` (not dumpable),
    and takes every process left in the namespace with it when the command ends (or when
    repoctx dies: parent-death signals). An IPC namespace: no SysV IPC object of the host.
``netns`` (unless ``agent.network = true``)
    A new network namespace with only the loopback interface, brought up: a server the command
    starts on 127.0.0.1 works; nothing outside, 127.0.0.1 of the host included, is reachable.
``userns``
    Non-root users get the namespaces inside a user namespace that maps their own uid and gid.

Where the kernel offers neither Landlock nor namespaces, ``mode="auto"`` says so once (a
warning in the first result and on the ``agent.sandbox`` logger) and runs the command with the
allowlist and argument checks only; ``mode="required"`` refuses to run it unless Landlock is
enforced. git inside the sandbox runs with the environment of agent/sandbox_env.py.

The ruleset and all mount arguments are prepared in the parent (agent/sandbox_child.py runs in
the child); what does not change per command is computed once and revalidated by directory
mtimes.

Size: the layers are decided together — which apply depends on what the kernel offers and on each
other (Landlock's TCP rules only without a network namespace, say) — so the policy, the probes and
the rule building are read in one place; what runs in the child after fork is in sandbox_child.py.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fnmatch
import logging
import mmap
import os
import shutil
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from indexer.safety import gitsafe

from . import home_policy, landlock, sandbox_env
from . import sandbox_child as child
from .errors import AgentError

log = logging.getLogger("agent.sandbox")

SandboxMode = Literal["auto", "required", "off"]

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
#: `pyvenv.cfg` (a virtualenv): secrets inside them are not covered.
PRUNED_DIRS: frozenset[str] = frozenset({".git", "node_modules", "__pycache__"})
#: Covered by a private, writable tmpfs in the mount namespace.
_PRIVATE_RW = ("/tmp", "/dev/shm")
#: Covered by an empty tmpfs, read-only once what is granted inside is bound back.
_PRIVATE_RO = ("/home", "/root", "/var/tmp", "/mnt", "/media", "/run")
#: A PID namespace with its own /proc (other processes and their command lines are not
#: visible) and an IPC namespace (SysV shared memory, semaphores, message queues); tried first,
#: dropped together when the kernel refuses them.
PROCESS_NS = child.CLONE_NEWPID | child.CLONE_NEWIPC


class SandboxError(AgentError):
    """The command cannot run in the sandbox — see the reason; set `agent.sandbox = "auto"` to
    run it with the checks the kernel allows."""


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


@dataclass(frozen=True)
class Status:
    """What the kernel offers here."""

    landlock_abi: int
    #: None while untried; "" when namespaces work; otherwise why they do not.
    namespaces: str | None


_lock = threading.Lock()
#: namespace flags -> "" (they work) or why they do not
_ns_state: dict[int, str] = {}
_warned: set[str] = set()


def forget_warnings() -> None:
    """Show the one-time warnings again (tests)."""
    with _lock:
        _warned.clear()


def status() -> Status:
    with _lock:
        known = dict(_ns_state)
    ns = None
    if known:
        ns = "" if "" in known.values() else "; ".join(sorted(set(known.values())))
    return Status(landlock.abi_version(), ns)


# -- what is granted ------------------------------------------------------------------------------


def home_dir() -> str:
    """``$HOME`` as the commands see it (the environment wins over the password file)."""
    home = os.environ.get("HOME")
    if not home:
        import pwd

        home = pwd.getpwuid(os.getuid()).pw_dir
    return os.path.normpath(home)


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _expand(base: str, patterns: tuple[str, ...], stamps: list[tuple[str, int]]) -> list[str]:
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


def _toolchain() -> list[str]:
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
class _Static:
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


def _grant_tree(
    directory: str, denies: list[list[str]], access: int, out: _Static, denied: list[str]
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
            if any(_within(real, d) or _within(d, real) for d in denied):
                continue
        if deeper:
            if os.path.isdir(path) and not os.path.islink(path):
                _grant_tree(path, deeper, access, out, denied)
            continue
        out.rules.append((path, access))


def _compute_static(policy: SandboxPolicy, home: str, abi: int, ns: bool) -> _Static:
    out = _Static()
    has_home = home not in ("", "/") and os.path.isdir(home)
    secrets = _expand(home, HOME_SECRETS + policy.deny_read, out.stamps) if has_home else []
    if os.geteuid() == 0:
        secrets += _expand("/", ROOT_SECRETS, out.stamps)
    out.secrets = secrets
    # $HOME is denied but for the toolchain (agent/home_policy.py); outside it, the toolchain
    # minus $HOME and its ancestors (a `~/bin` on PATH must not grant $HOME).
    allowed_home = (
        sorted(
            set(_expand(home, home_policy.HOME_TOOLCHAIN, out.stamps))
            | set(home_policy.toolchain_in_home(home))
        )
        if has_home
        else []
    )
    toolchain = [
        t for t in _toolchain() if not has_home or not (_within(t, home) or _within(home, t))
    ]
    if abi:
        denied = [os.path.realpath(s) for s in secrets] + list(EXCLUDED_TREES)
        # Root's secrets: in a mount namespace they are covered by an empty file; without one,
        # their directories are granted child by child.
        excluded = [*EXCLUDED_TREES, *(s for s in secrets if not ns and not _within(s, home))]
        if has_home:
            excluded.append(home)
        _grant_tree("/", [_parts(e) for e in excluded], landlock.READ, out, denied)
        out.rules = [(p, a | landlock.IOCTL_DEV if _within(p, "/dev") else a) for p, a in out.rules]
        for allowed in allowed_home:
            inside = [_parts(os.path.relpath(s, allowed)) for s in secrets if _within(s, allowed)]
            _grant_tree(allowed, inside, landlock.READ, out, denied)
        for tool in toolchain:
            if any(_within(e, tool) for e in EXCLUDED_TREES):
                continue  # an ancestor of an excluded tree: it would undo the exclusion
            if any(_within(s, tool) for s in secrets):
                continue
            out.rules.append((tool, landlock.READ))
        out.rules += [(dev, landlock.FILE_RIGHTS) for dev in DEVICES_RW]
        out.rules += [(p, landlock.READ) for p in policy.read]
        out.rules += [(p, landlock.fs_rights(abi)) for p in policy.write]
        out.rules.append((str(policy.workspace), landlock.fs_rights(abi)))
        out.rules += [
            (p, landlock.fs_rights(abi) if policy.git_writable else landlock.READ)
            for p in _external_git_dirs(str(policy.workspace))
        ]
        out.rules = _minimal(out.rules)
    if ns:
        keep = [(str(policy.workspace), True)]
        keep += [(p, True) for p in policy.write]
        keep += [(p, False) for p in policy.read]
        keep += [(p, False) for p in allowed_home]
        keep += [(p, False) for p in toolchain if p != "/"]
        keep += [(p, policy.git_writable) for p in _external_git_dirs(str(policy.workspace))]
        if policy.network:
            keep.append(("/run/systemd/resolve", False))
        _plan_trees(out, [(os.path.realpath(p), w) for p, w in keep if os.path.exists(p)])
    return out


def _minimal(rules: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Rules without those another rule already implies (same or more rights on an ancestor)."""
    kept: list[tuple[str, int]] = []
    for path, access in sorted(rules, key=lambda r: (r[0].count("/"), r[0])):
        if any(_within(path, p) and a & access == access for p, a in kept):
            continue
        kept.append((path, access))
    return kept


def _plan_trees(out: _Static, keep: list[tuple[str, bool]]) -> None:
    """Which trees to cover with a tmpfs, and which kept paths to bind back inside them."""
    trees: list[tuple[str, bool]] = []
    for tree in (*_PRIVATE_RW, *_PRIVATE_RO):
        if not os.path.isdir(tree) or os.path.islink(tree):
            continue
        real = os.path.realpath(tree)
        if any(_within(real, p) for p, _ in keep):
            continue  # a kept path is the tree or above it: leave the tree alone
        trees.append((real, tree in _PRIVATE_RW))
    out.trees = [child.Tree(os.fsencode(t), w) for t, w in trees]
    roots = [t for t, _ in trees]
    # Kept paths inside a covered tree, outermost first; one inside another kept path needs no
    # bind of its own unless it is writable and the outer one is not.
    inside = sorted(
        {(p, w) for p, w in keep if any(_within(p, t) and p != t for t in roots)},
        key=lambda pw: (pw[0].count("/"), pw[0]),
    )
    chosen: list[tuple[str, bool]] = []
    for path, writable in inside:
        outer = [w for c, w in chosen if _within(path, c)]
        if outer and (not writable or any(outer)):
            continue
        chosen.append((path, writable))
    mkdirs: set[str] = set()
    for path, writable in chosen:
        others = [c for c, _ in chosen if c != path]
        tree = next(t for t in roots if _within(path, t))
        is_dir = os.path.isdir(path)
        here = path if is_dir else os.path.dirname(path)
        while here != tree and not any(_within(here, c) for c in others):
            mkdirs.add(here)
            here = os.path.dirname(here)
        out.keep.append(child.Keep(os.fsencode(path), is_dir, writable, child.mount_flags(path)))
    out.mkdirs = [os.fsencode(p) for p in sorted(mkdirs, key=lambda p: (p.count("/"), p))]
    out.roots = roots
    out.visible = [c for c, _ in chosen]


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p]


def _external_git_dirs(workspace: str) -> list[str]:
    """A linked worktree's git directories when they lie outside the workspace."""
    dirs = gitsafe.find_git_dirs(workspace)
    if dirs is None:
        return []
    return sorted({str(d) for d in dirs if not _within(str(d), workspace)})


_static_cache: dict[tuple[object, ...], _Static] = {}


def _static(policy: SandboxPolicy, home: str, abi: int, ns: bool) -> _Static:
    """Cached _compute_static; call with ``_lock`` held (``fds`` are closed on invalidation)."""
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
    fresh = _compute_static(policy, home, abi, ns)
    fresh.open()
    if len(_static_cache) >= 16:
        for old in _static_cache.values():
            old.close()
        _static_cache.clear()
    _static_cache[key] = fresh
    return fresh


# -- the workspace walk ---------------------------------------------------------------------------

#: Directories changed this recently are rescanned next time: their mtime may not move again
#: within the file system's timestamp granularity.
_RACY_NS = 2_000_000_000


@dataclass(frozen=True)
class _DirScan:
    mtime_ns: int
    subdirs: tuple[str, ...]
    #: (relative path, "file" | "dir" | "git")
    hits: tuple[tuple[str, str], ...]


_walk_cache: dict[tuple[str, object], dict[str, _DirScan]] = {}


def secrets_in(root: str, is_secret: Callable[[str], bool]) -> list[tuple[str, str]]:
    """Secret files and directories (per ``is_secret``) and `.git` entries under ``root``, as
    (relative path, kind). Not entered: ``PRUNED_DIRS``, virtualenvs (a `pyvenv.cfg` inside) and
    the secrets themselves. A directory is rescanned only when its mtime changed."""
    # A workspace's predicate is fixed by its patterns: runs with equal deny lists share a cache.
    key = (root, getattr(getattr(is_secret, "__self__", None), "deny_patterns", is_secret))
    with _lock:
        previous = _walk_cache.get(key, {})
    current: dict[str, _DirScan] = {}
    hits: list[tuple[str, str]] = []
    now = time.time_ns()
    stack = [""]
    while stack:
        rel = stack.pop()
        path = os.path.join(root, rel) if rel else root
        try:
            mtime = os.lstat(path).st_mtime_ns
        except OSError:
            continue
        scan = previous.get(rel)
        if scan is None or scan.mtime_ns != mtime:
            scan = _scan_dir(path, rel, mtime, is_secret)
        if now - mtime > _RACY_NS:
            current[rel] = scan
        hits += scan.hits
        stack += scan.subdirs
    with _lock:
        if len(_walk_cache) >= 8 and key not in _walk_cache:
            _walk_cache.clear()
        _walk_cache[key] = current
    return hits


def _nothing_secret(_rel: str) -> bool:
    return False


def _scan_dir(path: str, rel: str, mtime: int, is_secret: Callable[[str], bool]) -> _DirScan:
    subdirs: list[str] = []
    hits: list[tuple[str, str]] = []
    try:
        entries = list(os.scandir(path))
    except OSError:
        return _DirScan(mtime, (), ())
    for entry in entries:
        erel = f"{rel}/{entry.name}" if rel else entry.name
        is_dir = entry.is_dir(follow_symlinks=False)
        if entry.name == ".git":
            hits.append((erel, "git"))
            if is_dir and is_secret(f"{erel}/config"):
                hits.append((f"{erel}/config", "file"))
            continue
        if is_secret(erel):
            hits.append((erel, "dir" if is_dir else "file"))
        elif (
            is_dir
            and entry.name not in PRUNED_DIRS
            and not os.path.exists(os.path.join(entry.path, "pyvenv.cfg"))
        ):
            subdirs.append(erel)
    return _DirScan(mtime, tuple(subdirs), tuple(hits))


# -- preparing one command ------------------------------------------------------------------------


@dataclass
class Prepared:
    """One command's sandbox: the environment to run it with, the descriptors to pass, the
    function the child runs before exec, and which layers apply."""

    env: dict[str, str]
    pass_fds: tuple[int, ...] = ()
    child: Callable[[], None] | None = None
    layers: tuple[str, ...] = ()
    note: str = ""
    warning: str = ""
    ns_flags: int = 0
    ruleset: landlock.Ruleset | None = None
    tmpdir: str | None = None
    plan: child.ChildPlan | None = None
    #: For retries: how many times these namespaces failed to be made, and which namespace
    #: flags this command does without (and why).
    attempt: int = 0
    avoid: Mapping[int, str] = field(default_factory=dict)

    def spawned(self) -> None:
        """The spawn attempt is over: the parent's copy of the ruleset can go."""
        if self.ruleset is not None:
            self.ruleset.close()
            self.ruleset = None

    def failure(self) -> tuple[int, int] | None:
        """(step, errno) if the child failed while entering the sandbox."""
        return self.plan.failure() if self.plan is not None else None

    def cleanup(self) -> None:
        self.spawned()
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None
        if self.plan is not None:
            self.plan.shared.close()
            self.plan = None


def _warn_once(key: str, message: str) -> str:
    with _lock:
        if key in _warned:
            return ""
        _warned.add(key)
    log.warning("%s", message)
    return message


def _ns_candidates(policy: SandboxPolicy) -> list[int]:
    base = child.CLONE_NEWNS | (0 if policy.network else child.CLONE_NEWNET)
    bases = [base | PROCESS_NS, base] if policy.pid_namespace else [base]
    if policy.userns == "always" or os.geteuid() != 0:
        return [b | child.CLONE_NEWUSER for b in bases]
    return [f for b in bases for f in (b, b | child.CLONE_NEWUSER)]


def _pick_ns(policy: SandboxPolicy, avoid: Mapping[int, str]) -> tuple[int, str]:
    """The namespace flags to try, or 0; and why the stronger candidates are not used."""
    if not policy.use_namespaces:
        return 0, "turned off by the policy"
    reasons = []
    with _lock:
        for flags in _ns_candidates(policy):
            state = _ns_state.get(flags) or avoid.get(flags)
            if not state:
                return flags, "; ".join(dict.fromkeys(reasons))
            reasons.append(state)
    return 0, "; ".join(dict.fromkeys(reasons))


#: errno values that mean the kernel will not make these namespaces for this process at all.
_REFUSED = {errno.EPERM, errno.EACCES, errno.ENOSPC, errno.EUSERS, errno.ENOSYS, errno.EOPNOTSUPP}
#: Tries of the same namespaces after an error that may pass (EINVAL, ENOMEM, EAGAIN ...).
_TRIES = 3


def after_failure(
    policy: SandboxPolicy, failed: Prepared, step: int, err: int, cwd: Path, env: Mapping[str, str]
) -> Prepared | None:
    """The child failed at ``step`` with ``err`` and ran nothing. When it failed making
    namespaces: the sandbox to try next — the same again after an error that may pass, else
    without those namespaces (remembered for the process when the kernel refuses them, for
    this command only otherwise). None: nothing to retry (the caller reports the failure)."""
    if not failed.ns_flags or step > child.LAST_PROBE_STEP:
        return None
    reason = f"{child.STEPS[step]}: {os.strerror(err)}"
    avoid = dict(failed.avoid)
    if err in _REFUSED:
        with _lock:
            _ns_state[failed.ns_flags] = reason
    elif failed.attempt + 1 < _TRIES:
        retry = prepare(policy, cwd, env, avoid=avoid)
        retry.attempt = failed.attempt + 1
        return retry
    else:
        avoid[failed.ns_flags] = reason
    return prepare(policy, cwd, env, avoid=avoid)


def failure_message(step: int, err: int) -> str:
    return (
        f"The sandbox could not be set up ({child.STEPS[step]}: {os.strerror(err)}) — the "
        'command did not run. Set `agent.sandbox = "off"` only if you accept running it '
        "unconfined."
    )


def _normalized(policy: SandboxPolicy) -> SandboxPolicy:
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


def prepare(
    policy: SandboxPolicy | None,
    cwd: Path,
    env: Mapping[str, str],
    *,
    avoid: Mapping[int, str] | None = None,
) -> Prepared:
    """The sandbox for one command run in ``cwd`` with environment ``env`` (``avoid``: namespace
    flags not to use, with the reason; see after_failure).

    Raises SandboxError in "required" mode when Landlock is not available.
    """
    avoid = dict(avoid or {})
    if policy is None:
        return Prepared(dict(env), note="not sandboxed")
    policy = _normalized(policy)
    workspace = str(policy.workspace)
    out_env = sandbox_env.command_env(workspace, env, git_writable=policy.git_writable)
    if policy.mode == "off":
        return Prepared(out_env, note='sandbox off (agent.sandbox = "off")')
    abi = landlock.abi_version() if policy.use_landlock else 0
    flags, ns_reason = _pick_ns(policy, avoid)
    if policy.mode == "required" and not abi:
        why = (
            "Landlock is turned off"
            if not policy.use_landlock
            else "this kernel does not offer Landlock (Linux >= 5.13, `landlock` in the LSM list)"
        )
        raise SandboxError(
            f'agent.sandbox = "required" but {why} — the command did not run. Use a kernel '
            'with Landlock, or set `agent.sandbox = "auto"` to run commands with the checks '
            "available."
        )
    if not abi and not flags:
        message = (
            "No kernel sandbox here: Landlock is "
            + ("turned off" if not policy.use_landlock else "unavailable")
            + f" and namespaces cannot be made ({ns_reason or 'unknown'}). Commands run with the "
            "allowlist and argument checks only: they can read and write whatever the user can. "
            'Set `agent.sandbox = "required"` to refuse them instead.'
        )
        return Prepared(out_env, note=message, warning=_warn_once("none", message))
    home = home_dir()
    plan = child.ChildPlan(mmap.mmap(-1, child.SHARED_SIZE))
    prepared = Prepared(out_env, child=plan, plan=plan, ns_flags=flags, avoid=avoid)
    layers: list[str] = []
    try:
        with _lock:
            static = _static(policy, home, abi, bool(flags))
            if abi:
                net = (
                    landlock.net_rights(abi)
                    if not policy.network and not flags & child.CLONE_NEWNET
                    else 0
                )
                ruleset = landlock.Ruleset(
                    abi, fs=landlock.fs_rights(abi), net=net, scoped=landlock.scopes(abi)
                )
                prepared.ruleset = ruleset
                for fd, access in static.fds:
                    ruleset.allow_fd(fd, access)
                plan.ruleset_fd = ruleset.fd
                plan.rw_access = landlock.fs_rights(abi)
                layers.append(f"landlock-{abi}")
                if net:
                    layers.append("landlock-tcp")
        if flags:
            _plan_namespaces(plan, policy, static, flags, cwd)
            out_env.update(TMPDIR="/tmp", TMP="/tmp", TEMP="/tmp")
            layers.append("mountns")
            if flags & child.CLONE_NEWPID:
                layers += ["pidns", "ipcns"]
            if flags & child.CLONE_NEWNET:
                layers.append("netns")
            if flags & child.CLONE_NEWUSER:
                layers.append("userns")
        else:
            prepared.tmpdir = tempfile.mkdtemp(prefix="repoctx-cmd-")
            out_env.update(TMPDIR=prepared.tmpdir, TMP=prepared.tmpdir, TEMP=prepared.tmpdir)
            if prepared.ruleset is not None:
                prepared.ruleset.allow_path(prepared.tmpdir, landlock.fs_rights(abi))
                prepared.ruleset.allow_path("/dev/shm", landlock.fs_rights(abi))
        if flags or os.geteuid() == 0:
            plan.drop_caps = _last_cap()
    except BaseException:
        prepared.cleanup()
        raise
    prepared.pass_fds = (plan.ruleset_fd,) if plan.ruleset_fd >= 0 else ()
    prepared.layers = tuple(layers)
    notes = []
    if not abi:
        notes.append(
            "Landlock unavailable: reads and writes outside the covered paths are not prevented"
        )
    if flags and not flags & child.CLONE_NEWPID:
        notes.append(
            f"no PID or IPC namespace ({ns_reason or 'turned off by the policy'}): the command "
            "can list other processes and their command lines, and reach SysV IPC objects"
        )
    if not flags:
        net_note = (
            "TCP denied by Landlock, UDP and Unix sockets not covered"
            if abi >= 4 and not policy.network
            else "not restricted"
        )
        notes.append(
            f"no namespaces ({ns_reason}): `.git` and secrets inside the workspace are protected "
            f"only by argument checks; the temp dir is not private; network: {net_note}"
        )
    if notes:
        prepared.note = "; ".join(notes)
        prepared.warning = _warn_once(
            f"{bool(abi)}-{bool(flags)}", f"Sandbox weaker than usual — {prepared.note}."
        )
    return prepared


_last_cap_cache: list[int] = []


def _last_cap() -> int:
    if not _last_cap_cache:
        try:
            _last_cap_cache.append(int(Path("/proc/sys/kernel/cap_last_cap").read_text()))
        except (OSError, ValueError):
            _last_cap_cache.append(63)
    return _last_cap_cache[0]


def _plan_namespaces(
    plan: child.ChildPlan, policy: SandboxPolicy, static: _Static, flags: int, cwd: Path
) -> None:
    workspace = str(policy.workspace)
    plan.ns_flags = flags
    if flags & child.CLONE_NEWUSER:
        uid, gid = os.geteuid(), os.getegid()
        plan.uid_map = f"{uid} {uid} 1\n".encode()
        plan.gid_map = f"{gid} {gid} 1\n".encode()
    plan.trees, plan.keep, plan.mkdirs = static.trees, static.keep, static.mkdirs
    hits = secrets_in(workspace, policy.is_secret or _nothing_secret)
    readonly = [p for p in policy.readonly if _within(p, workspace) and os.path.exists(p)]
    if not policy.git_writable:
        readonly += [os.path.join(workspace, rel) for rel, kind in hits if kind == "git"]
    plan.readonly = [(os.fsencode(p), child.mount_flags(p)) for p in sorted(set(readonly))]
    covers = {*(os.path.join(workspace, r) for r, k in hits if k != "git"), *static.secrets}
    for path in sorted(covers):
        real = os.path.realpath(path)
        if not os.path.exists(real):
            continue  # a dangling link
        if os.path.islink(path) and not _within(real, workspace) and path not in static.secrets:
            continue  # a link out of the workspace: Landlock governs what it points to
        if any(_within(real, t) for t in static.roots) and not any(
            _within(real, c) for c in static.visible
        ):
            continue  # not visible in the namespace at all
        (plan.cover_dirs if os.path.isdir(real) else plan.cover_files).append(os.fsencode(real))
    if plan.cover_files:
        plan.empty_file = os.fsencode(_empty_file())
        plan.empty_flags = child.mount_flags(_empty_file())
    if flags & child.CLONE_NEWNET:
        plan.ifreq = child.loopback_ifreq()
    plan.cwd = os.fsencode(os.path.realpath(cwd))


_empty: list[str] = []


def _empty_file() -> str:
    """An empty read-only file to bind over secret files: `<tmp>/repoctx-sandbox-<uid>/empty`,
    made once and shared by the user's repoctx processes (nothing to clean up); a private
    temporary one if that directory is not the user's own."""
    with _lock:
        if _empty and _is_empty_file(_empty[0]):
            return _empty[0]
        base = os.path.join(tempfile.gettempdir(), f"repoctx-sandbox-{os.getuid()}")
        with contextlib.suppress(FileExistsError):
            os.mkdir(base, 0o700)
        st = os.lstat(base)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            base = tempfile.mkdtemp(prefix="repoctx-sandbox-")
            atexit.register(shutil.rmtree, base, True)
        path = os.path.join(base, "empty")
        if not _is_empty_file(path):
            fresh = f"{path}.{os.getpid()}"
            with open(fresh, "wb"):
                pass
            os.chmod(fresh, 0o444)
            os.replace(fresh, path)
        _empty[:] = [path]
        return path


def _is_empty_file(path: str) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == 0 and st.st_uid == os.getuid()
