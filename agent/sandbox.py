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

The ruleset and all mount arguments are prepared in the parent: what is granted, and what does
not change per command (computed once, revalidated by directory mtimes), in sandbox_grants.py;
the policy itself in sandbox_policy.py; the secrets and `.git` entries in the workspace in
sandbox_walk.py; what runs in the child after fork in sandbox_child.py. This module decides the
layers together — which apply depends on what the kernel offers and on each other (Landlock's TCP
rules only without a network namespace, say) — and retries without namespaces the kernel refuses.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import logging
import mmap
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from indexer import write_atomic

from . import landlock, sandbox_env
from . import sandbox_child as child
from . import sandbox_grants as grants
from .errors import AgentError
from .sandbox_grants import Static
from .sandbox_policy import SandboxMode as SandboxMode
from .sandbox_policy import SandboxPolicy, home_dir, normalized, within
from .sandbox_walk import nothing_secret, secrets_in

log = logging.getLogger("agent.sandbox")

#: A PID namespace with its own /proc (other processes and their command lines are not
#: visible) and an IPC namespace (SysV shared memory, semaphores, message queues); tried first,
#: dropped together when the kernel refuses them.
PROCESS_NS = child.CLONE_NEWPID | child.CLONE_NEWIPC


class SandboxError(AgentError):
    """The command cannot run in the sandbox — see the reason; set `agent.sandbox = "auto"` to
    run it with the checks the kernel allows."""


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
    policy = normalized(policy)
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
        with grants.LOCK:
            static = grants.static(policy, home, abi, bool(flags))
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
    plan: child.ChildPlan, policy: SandboxPolicy, static: Static, flags: int, cwd: Path
) -> None:
    workspace = str(policy.workspace)
    plan.ns_flags = flags
    if flags & child.CLONE_NEWUSER:
        uid, gid = os.geteuid(), os.getegid()
        plan.uid_map = f"{uid} {uid} 1\n".encode()
        plan.gid_map = f"{gid} {gid} 1\n".encode()
    plan.trees, plan.keep, plan.mkdirs = static.trees, static.keep, static.mkdirs
    hits = secrets_in(workspace, policy.is_secret or nothing_secret)
    readonly = [p for p in policy.readonly if within(p, workspace) and os.path.exists(p)]
    if not policy.git_writable:
        readonly += [os.path.join(workspace, rel) for rel, kind in hits if kind == "git"]
    plan.readonly = [(os.fsencode(p), child.mount_flags(p)) for p in sorted(set(readonly))]
    covers = {*(os.path.join(workspace, r) for r, k in hits if k != "git"), *static.secrets}
    for path in sorted(covers):
        real = os.path.realpath(path)
        if not os.path.exists(real):
            continue  # a dangling link
        if os.path.islink(path) and not within(real, workspace) and path not in static.secrets:
            continue  # a link out of the workspace: Landlock governs what it points to
        if any(within(real, t) for t in static.roots) and not any(
            within(real, c) for c in static.visible
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
            write_atomic(path, b"", mode=0o444)  # never a half-made file at the name
        _empty[:] = [path]
        return path


def _is_empty_file(path: str) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == 0 and st.st_uid == os.getuid()
