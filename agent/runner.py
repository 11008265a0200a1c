"""Run a command for the agent: allowlisted, in its own session, with a filtered environment,
resource limits, capped output, and the whole process tree killed when it is over.

Which program runs, and whether the allowlist lets it, is decided first by
`agent.command_policy.plan_command` (a string is split like a shell would).

Process-count containment, strongest available first (agent/command_containment.py): a pids
cgroup created per command; RLIMIT_NPROC; otherwise a /proc watchdog that kills the session
when it holds more than ``max_processes`` processes. In every case the whole process group is
killed at the end, so nothing outlives the call unless it left the session with setsid(2) — and
inside a cgroup or the sandbox's PID namespace even those are killed. Every running command is
registered with `agent.command_reaper`, whose `kill_running` the CLI's signal handlers call.

With ``sandbox=SandboxPolicy(...)`` the command also runs in the kernel sandbox of
agent/sandbox.py (Landlock, mount/network/user namespaces) and with git's repository-configured
programs neutralised; ``CommandResult.sandbox`` says which layers applied. The allowlist stays a
second layer.

Size: spawning, supervising (deadline, output capture, the guards' verdicts) and killing the
process tree share the process group and cgroup of one command; the command policy is in
command_policy.py, the process-count guards in command_containment.py and the kernel sandbox in
sandbox.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import os
import resource
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from . import command_containment as guards
from . import command_reaper
from . import sandbox as _sandbox
from .command_policy import plan_command
from .errors import PathNotFoundError
from .sandbox import SandboxError, SandboxPolicy
from .settings import DEFAULT_ENV_ALLOW, AgentSettings

#: Never passed to a command, even when allowed or given in extra_env (matched case-insensitively).
SECRET_ENV_PATTERNS: tuple[str, ...] = (
    "*_KEY",
    "*_KEY_ID",
    "*_TOKEN",
    "*_SECRET",
    "*_SECRET_*",
    "*PASSWORD*",
    "*_CREDENTIALS",
    "AWS_*",
)

KillReason = Literal["timeout", "process_limit", "output_limit"]
Containment = Literal["cgroup", "rlimit", "watchdog", "none"]

_POLL_S = 0.05
#: The watchdog polls faster: a fork bomb doubles in milliseconds.
_WATCHDOG_POLL_S = 0.01
_WATCHDOG_NICE = 10
_AFTER_KILL_DRAIN_S = 2.0
#: How long a command whose output has ended may take to exit before it is killed.
_EXIT_GRACE_S = 1.0


@dataclass(frozen=True)
class ResourceLimits:
    """Per-command limits; ``None`` leaves a limit unset."""

    #: Processes (and threads) the command may have at once.
    max_processes: int | None = 1024
    #: RLIMIT_AS per process, bytes of address space; also the bound of all the command's
    #: processes and tmpfs pages together, where a memory cgroup can be made (command_memory).
    max_memory_bytes: int | None = 8 * 2**30
    #: RLIMIT_FSIZE, the largest file a process may write.
    max_file_bytes: int | None = 2**30
    #: RLIMIT_CPU per process, seconds.
    cpu_seconds: int | None = 600
    #: Try a per-command pids cgroup (root or delegated cgroup v2 only).
    use_cgroup: bool = True
    #: Seconds between SIGTERM and SIGKILL when a command is stopped.
    kill_grace_s: float = 0.5
    #: Kill the command once it has written this many bytes (stdout + stderr); None drains forever.
    max_drain_bytes: int | None = None


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    #: Exit status; negative signal number when a signal ended it; 127 not found, 126 not executable.
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    #: True when either stream was longer than max_output_bytes and its middle was dropped.
    truncated: bool
    duration_s: float
    #: True when run_command had to kill the command (see kill_reason).
    killed: bool
    kill_reason: KillReason | None = None
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    #: Which guard bounded the number of processes.
    containment: Containment = "none"
    #: Sandbox layers that applied, e.g. ("landlock-7", "mountns", "netns"); () when none did.
    sandbox: tuple[str, ...] = ()
    #: What the sandbox did not cover for this command ("" when every layer applied).
    sandbox_note: str = ""
    #: A one-time warning that the sandbox is weaker than usual here (first command only).
    sandbox_warning: str = ""


# -- environment ----------------------------------------------------------------------------------


def is_secret_env(name: str) -> bool:
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pat) for pat in SECRET_ENV_PATTERNS)


def build_env(
    env_allow: Sequence[str],
    extra_env: Mapping[str, str] | None = None,
    source: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Variables of ``source`` (default os.environ) named in ``env_allow`` (glob patterns allowed),
    plus ``extra_env``, minus anything that looks like a secret."""
    src = os.environ if source is None else source
    env = {k: v for k, v in src.items() if any(fnmatch.fnmatchcase(k, pat) for pat in env_allow)}
    env.update(extra_env or {})
    return {k: v for k, v in env.items() if not is_secret_env(k)}


def _child_setup(
    procs_files: tuple[str, ...],
    limits: list[tuple[int, tuple[int, int]]],
    nice: int,
    sandbox: Callable[[], None] | None = None,
) -> None:
    """Runs in the child between fork and exec; kept to syscalls."""
    for procs_file in procs_files:
        # Raising here fails the Popen call, and run_command retries without the cgroup.
        fd = os.open(procs_file, os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)
    for which, values in limits:
        resource.setrlimit(which, values)
    if nice:
        os.nice(nice)
    if sandbox is not None:
        sandbox()


def _rlimits(limits: ResourceLimits, nproc: int | None) -> list[tuple[int, tuple[int, int]]]:
    wanted = [
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NPROC, nproc),
        (resource.RLIMIT_AS, limits.max_memory_bytes),
        (resource.RLIMIT_FSIZE, limits.max_file_bytes),
        (resource.RLIMIT_CPU, limits.cpu_seconds),
    ]
    out = []
    for which, value in wanted:
        if value is None:
            continue
        _, hard = resource.getrlimit(which)
        # Only ever lower: raising a hard limit needs CAP_SYS_RESOURCE, which container root lacks.
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        out.append((which, (value, value)))
    return out


# -- output ---------------------------------------------------------------------------------------


class _Capped:
    """Keeps the first and last bytes of a stream; the middle is counted, not stored."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.tail_cap + 65536:
                del self.tail[: len(self.tail) - self.tail_cap]

    @property
    def truncated(self) -> bool:
        return self.total > self.head_cap + self.tail_cap

    def text(self) -> str:
        tail = self.tail[len(self.tail) - self.tail_cap :] if self.tail_cap else bytearray()
        if not self.truncated:
            return (self.head + self.tail).decode("utf-8", errors="replace")
        dropped = self.total - len(self.head) - len(tail)
        marker = f"\n[... {dropped} bytes truncated ...]\n"
        return (
            self.head.decode("utf-8", errors="replace")
            + marker
            + tail.decode("utf-8", errors="replace")
        )


# -- running --------------------------------------------------------------------------------------


def _signal_all(pgid: int, sig: int) -> None:
    """``sig`` to the command's process group, then to every process of its session (the
    leader's pid is both ids): one that moved to a group of its own (`setpgid`) is still in the
    session, and counted there by the watchdog. Leaving the session takes `setsid`; the PID
    namespace or the cgroup catch that."""
    guards.signal_group(pgid, sig)
    for pid in guards.members(sid=pgid) or ():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _exited(pid: int) -> bool:
    """Whether ``pid`` has exited, without reaping it: an unreaped child keeps its pid, so the
    process group id cannot be recycled while we still signal it."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _others_alive(pgid: int, cgroup: guards.PidsCgroup | None) -> bool:
    members = guards.members(sid=pgid)
    if members is not None and [p for p in members if p != pgid]:
        return True
    if members is None and not _exited(pgid):
        return True
    return bool(cgroup and [p for p in cgroup.pids() if p != pgid])


def _kill_all(pgid: int, cgroup: guards.PidsCgroup | None) -> None:
    """SIGKILL the session (and cgroup) until no live member is left, bounded by guards.REAP_S."""
    deadline = time.monotonic() + guards.REAP_S
    while True:
        _signal_all(pgid, signal.SIGKILL)
        if cgroup is not None:
            cgroup.kill()
        if not _others_alive(pgid, cgroup) and _exited(pgid):
            return
        if time.monotonic() > deadline:
            return
        time.sleep(0.01)


def _spawn(
    argv: tuple[str, ...],
    cwd: Path,
    env: dict[str, str],
    cgroup: guards.PidsCgroup | None,
    setup_limits: list[tuple[int, tuple[int, int]]],
    watchdog: bool,
    prepared: _sandbox.Prepared,
) -> subprocess.Popen[bytes]:
    procs_files = cgroup.procs_files if cgroup is not None else ()
    # Under the watchdog the command runs at lower priority, so a fork bomb cannot starve the
    # parent that has to notice and kill it.
    nice = _WATCHDOG_NICE if watchdog else 0
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
        pass_fds=prepared.pass_fds,
        preexec_fn=lambda: _child_setup(procs_files, setup_limits, nice, prepared.child),
    )


def run_command(
    argv: Sequence[str] | str,
    cwd: Path,
    *,
    timeout_s: float = AgentSettings.command_timeout_s,
    max_output_bytes: int = AgentSettings.max_output_bytes,
    env_allow: tuple[str, ...] = DEFAULT_ENV_ALLOW,
    allowlist: tuple[str, ...] | None = None,
    extra_env: Mapping[str, str] | None = None,
    limits: ResourceLimits = ResourceLimits(),  # noqa: B008 - frozen, safe to share
    sandbox: SandboxPolicy | None = None,
) -> CommandResult:
    """Run ``argv`` in ``cwd`` and return its exit status and (capped) output.

    ``max_output_bytes`` applies to stdout and stderr separately. Output beyond it is read and
    discarded (the first and last halves are kept), so memory stays bounded however much the
    command prints. Processes the command leaves behind are killed when it exits.

    ``sandbox`` confines the command (see agent/sandbox.py); None runs it unconfined, which the
    agent's tools never do. Raises SandboxError when the policy requires a sandbox the kernel
    cannot give, or when setting it up failed (the command then did not run).
    """
    exec_argv = plan_command(argv, allowlist)
    cwd = Path(cwd)
    if not cwd.is_dir():
        raise PathNotFoundError(
            f"Working directory {cwd} does not exist — pass the workspace root."
        )
    base_env = build_env(env_allow, extra_env)
    prepared = _sandbox.prepare(sandbox, cwd, base_env)
    try:
        return _run(
            exec_argv, cwd, base_env, prepared, sandbox, timeout_s, max_output_bytes, limits
        )
    finally:
        prepared.cleanup()


def _run(
    exec_argv: tuple[str, ...],
    cwd: Path,
    base_env: dict[str, str],
    prepared: _sandbox.Prepared,
    policy: SandboxPolicy | None,
    timeout_s: float,
    max_output_bytes: int,
    limits: ResourceLimits,
) -> CommandResult:
    env = prepared.env
    started = time.monotonic()

    cgroup = None
    if limits.max_processes is not None and limits.use_cgroup:
        cgroup = guards.PidsCgroup.create(limits.max_processes, limits.max_memory_bytes)
    nproc_enforced = guards.nproc_enforced()
    nproc = None
    if limits.max_processes is not None:
        nproc = limits.max_processes + (guards.user_tasks() if nproc_enforced else 0)
    setup_limits = _rlimits(limits, nproc)
    guarded = (
        limits.max_processes is not None and not nproc_enforced and os.path.isdir("/proc/self")
    )
    spawn_error: OSError | None = None
    try:
        while True:
            try:
                proc = _spawn(
                    exec_argv, cwd, env, cgroup, setup_limits, cgroup is None and guarded, prepared
                )
                prepared.spawned()
                break
            except subprocess.SubprocessError:
                prepared.spawned()
                failed = prepared.failure()
                if failed is not None:
                    # The child could not set up the sandbox; it ran nothing.
                    retry = None
                    if policy is not None:
                        retry = _sandbox.after_failure(policy, prepared, *failed, cwd, base_env)
                    prepared.cleanup()
                    if retry is None:
                        raise SandboxError(_sandbox.failure_message(*failed)) from None
                    prepared = retry
                    env = prepared.env
                    continue
                if cgroup is None:
                    raise
                # Joining the cgroup failed in the child (no permission to move it); go without.
                cgroup.remove()
                cgroup = None
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        spawn_error = exc
    except BaseException:
        if cgroup is not None:
            cgroup.remove()
        prepared.cleanup()
        raise
    if spawn_error is not None:
        if cgroup is not None:
            cgroup.remove()
        prepared.cleanup()
        code = 127 if isinstance(spawn_error, FileNotFoundError) else 126
        return CommandResult(
            exec_argv,
            code,
            "",
            f"{exec_argv[0]}: {spawn_error.strerror}\n",
            False,
            False,
            time.monotonic() - started,
            False,
            sandbox=prepared.layers,
            sandbox_note=prepared.note,
            sandbox_warning=prepared.warning,
        )

    pgid = proc.pid
    token = command_reaper.register(pgid, cgroup.kill if cgroup is not None else None)
    containment: Containment = "none"
    if cgroup is not None:
        containment = "cgroup"
    elif limits.max_processes is not None and nproc_enforced:
        containment = "rlimit"
    elif guarded:
        containment = "watchdog"
    try:
        result = _supervise(
            proc, exec_argv, started, timeout_s, max_output_bytes, limits, cgroup, containment
        )
    finally:
        _kill_all(pgid, cgroup)
        proc.wait()
        command_reaper.unregister(token)
        if cgroup is not None:
            cgroup.remove()
        prepared.cleanup()
    return dataclasses.replace(
        result,
        sandbox=prepared.layers,
        sandbox_note=prepared.note,
        sandbox_warning=prepared.warning,
    )


def _supervise(
    proc: subprocess.Popen[bytes],
    argv: tuple[str, ...],
    started: float,
    timeout_s: float,
    max_output_bytes: int,
    limits: ResourceLimits,
    cgroup: guards.PidsCgroup | None,
    containment: Containment,
) -> CommandResult:
    assert proc.stdout is not None and proc.stderr is not None
    pgid = proc.pid
    buffers = {
        proc.stdout.fileno(): _Capped(max_output_bytes),
        proc.stderr.fileno(): _Capped(max_output_bytes),
    }
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    sel = selectors.DefaultSelector()
    for fd in buffers:
        sel.register(fd, selectors.EVENT_READ)
    deadline = started + timeout_s
    kill_reason: KillReason | None = None
    term_at: float | None = None  # when SIGTERM went out; SIGKILL follows after the grace
    stop_at: float | None = None  # when the group was SIGKILLed; reading ends soon after
    checked_at = 0.0
    main_done = False
    watchdog = None
    if containment == "watchdog" and limits.max_processes is not None:
        watchdog = guards.Watchdog(pgid, limits.max_processes)
    poll_s = _POLL_S if watchdog is None else _WATCHDOG_POLL_S

    def hard_kill() -> None:
        nonlocal stop_at
        _signal_all(pgid, signal.SIGKILL)
        if cgroup is not None:
            cgroup.kill()
        stop_at = time.monotonic()

    try:
        while sel.get_map():
            now = time.monotonic()
            if kill_reason is None and now >= deadline:
                kill_reason = "timeout"
                _signal_all(pgid, signal.SIGTERM)
                term_at = now
            if term_at is not None and stop_at is None and now - term_at >= limits.kill_grace_s:
                hard_kill()
            if stop_at is not None and now - stop_at > _AFTER_KILL_DRAIN_S:
                break  # something outside the group still holds the pipes
            for key, _ in sel.select(timeout=poll_s):
                data = os.read(key.fd, 65536)
                if data:
                    buffers[key.fd].add(data)
                else:
                    sel.unregister(key.fd)
            if (
                kill_reason is None
                and limits.max_drain_bytes is not None
                and sum(b.total for b in buffers.values()) > limits.max_drain_bytes
            ):
                kill_reason = "output_limit"
                hard_kill()
            if kill_reason is None and (
                (watchdog is not None and watchdog.over_limit())
                or (cgroup is not None and cgroup.fork_denied())
            ):
                kill_reason = "process_limit"
                hard_kill()
            now = time.monotonic()
            if now - checked_at < _POLL_S:
                continue  # a steady stream of output must not pay a waitid + scan per read
            checked_at = now
            if not main_done and _exited(pgid):
                main_done = True
                if term_at is None and _others_alive(pgid, cgroup):
                    # Leftover background processes would hold the pipes open; stop them.
                    _signal_all(pgid, signal.SIGTERM)
                    term_at = now
    finally:
        sel.close()
        proc.stdout.close()
        proc.stderr.close()
    if kill_reason is None:
        # Output ends when the last holder closes the pipes, which can be just before the
        # command exits (coreutils close stdout and stderr in an atexit handler): let it
        # finish, or its real exit status would be lost to the SIGKILL below.
        deadline = time.monotonic() + _EXIT_GRACE_S
        while not _exited(pgid) and time.monotonic() < deadline:
            time.sleep(0.005)
    _kill_all(pgid, cgroup)
    exit_code = proc.wait()
    out, err = buffers[out_fd], buffers[err_fd]
    return CommandResult(
        argv=argv,
        exit_code=exit_code,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=kill_reason == "timeout",
        truncated=out.truncated or err.truncated,
        duration_s=time.monotonic() - started,
        killed=kill_reason is not None,
        kill_reason=kill_reason,
        stdout_bytes=out.total,
        stderr_bytes=err.total,
        containment=containment,
    )
