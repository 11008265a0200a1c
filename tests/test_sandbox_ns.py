"""Namespaces and processes of the command sandbox (issue 38, item 6), attacked through the real
runner and the real run_command tool: host processes and SysV IPC out of sight, git's programs
out of reach whatever the environment or the command line says, no command outliving a signal
to `repoctx agent run`, and $HOME denied but for the toolchain."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from inspect import signature
from pathlib import Path

import pytest

from agent.runner import run_command
from agent.tools import ToolContext, default_registry
from cli.settings import load_config
from tests.conftest import git, make_repo
from tests.test_sandbox import ABI, NAMESPACES, NO_INTERPRETERS, policy, text

PY = sys.executable
needs_ns = pytest.mark.skipif(
    ABI < 6 or not NAMESPACES, reason="needs Landlock ABI >= 6 and namespaces"
)
#: The namespace paths: as root without a user namespace, and the one non-root users take.
NS_MODES = {"full": {}, "userns": {"userns": "always"}}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.shmat.restype = ctypes.c_void_p
_libc.shmat.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
_libc.shmdt.argtypes = (ctypes.c_void_p,)
_IPC_CREAT, _IPC_RMID = 0o1000, 0


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake $HOME: a credential under a name no list knows, an ordinary dotfile, a toolchain
    directory with a program on PATH, and a known secret inside that toolchain directory."""
    h = tmp_path / "home"
    (h / ".myservice").mkdir(parents=True)
    (h / ".myservice" / "token").write_text("myservice-token-0042\n")
    (h / ".bashrc").write_text("bashrc-content-0042\n")
    (h / ".gitconfig").write_text('[url "https://u:gitconfig-token-0042@example.com/"]\n')
    tool = h / ".local" / "bin" / "hometool"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\necho hometool-ran\n")
    tool.chmod(0o755)
    (h / ".cargo" / "bin").mkdir(parents=True)
    (h / ".cargo" / "credentials.toml").write_text("cargo-token-0042\n")
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    return h


@pytest.fixture()
def repo(tmp_path: Path, home: Path) -> Path:
    root = make_repo(
        tmp_path / "repo",
        {"pkg/__init__.py": "", "pkg/calc.py": "def add(a, b):\n    return a + b\n"},
    )
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    return root


def tool_ctx(repo: Path, allow: list[str], env_allow: list[str] | None = None) -> ToolContext:
    lines = ["[agent]", "allow_commands = [" + ", ".join(f'"{c}"' for c in allow) + "]"]
    if env_allow is not None:
        lines.append("env_allow = [" + ", ".join(f'"{c}"' for c in env_allow) + "]")
    (repo / ".repoctx.toml").write_text("\n".join(lines) + "\n")
    # The test's own settings: trusted as the user's would be (17a1ef1 trusted every config).
    trust = {"trust_repo": True} if "trust_repo" in signature(load_config).parameters else {}
    config = load_config(repo, env={}, **trust)
    return ToolContext.create(config, granted={"read", "write", "execute"}, run_id="ns")


def run_tool(ctx: ToolContext, command: str | list[str]):
    return default_registry().call("run_command", {"command": command}, ctx)


def sandboxed(repo: Path, command, **kw):
    return run_command(command, repo, timeout_s=60, sandbox=policy(repo, **kw))


# -- PID and IPC namespaces -----------------------------------------------------------------------


@needs_ns
@pytest.mark.parametrize("mode", list(NS_MODES))
def test_host_processes_are_not_visible(repo: Path, mode: str):
    marker = f"host-marker-{uuid.uuid4().hex}"
    host = subprocess.Popen([PY, "-c", "import time; time.sleep(60)", marker])
    try:
        listing = sandboxed(repo, "ls /proc", **NS_MODES[mode])
        cmdlines = sandboxed(repo, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '", **NS_MODES[mode])
        init = sandboxed(repo, ["cat", "/proc/1/cmdline"], **NS_MODES[mode])
        environ = sandboxed(repo, ["cat", "/proc/1/environ"], **NS_MODES[mode])
        by_pid = sandboxed(repo, ["cat", f"/proc/{host.pid}/cmdline"], **NS_MODES[mode])
    finally:
        host.kill()
        host.wait()
    assert {"pidns", "ipcns"} <= set(listing.sandbox), listing.sandbox_note
    pids = [int(n) for n in listing.stdout.split() if n.isdigit()]
    assert pids and max(pids) < 20, pids  # the namespace's own few processes
    assert marker not in cmdlines.stdout and marker not in by_pid.stdout
    assert init.stdout.encode() != Path("/proc/1/cmdline").read_bytes()
    # PID 1 is a fork of repoctx: its environment (API keys) is not readable.
    assert environ.exit_code != 0 and environ.stdout == ""


def _host_shm(secret: bytes) -> tuple[int, int]:
    key = int.from_bytes(os.urandom(3), "big") + 0x4200_0000
    shmid = _libc.shmget(key, 4096, _IPC_CREAT | 0o666)
    if shmid < 0:
        pytest.skip(f"shmget: {os.strerror(ctypes.get_errno())}")
    addr = _libc.shmat(shmid, None, 0)
    ctypes.memmove(addr, secret, len(secret))
    _libc.shmdt(ctypes.c_void_p(addr))
    return key, shmid


#: Inside: attach the host's segment by id and by key, and print what it holds.
_READ_SHM = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
key, shmid = int(sys.argv[1]), int(sys.argv[2])
for ident in (shmid, libc.shmget(key, 0, 0)):
    addr = libc.shmat(ident, None, 0) if ident >= 0 else None
    if addr not in (None, ctypes.c_void_p(-1).value):
        print(ctypes.string_at(addr, 32))
"""


@needs_ns
@pytest.mark.parametrize("mode", list(NS_MODES))
def test_host_sysv_shared_memory_is_not_reachable(repo: Path, mode: str):
    secret = f"shm-secret-{uuid.uuid4().hex[:8]}".encode()
    key, shmid = _host_shm(secret)
    try:
        listed = sandboxed(repo, "ipcs -m", **NS_MODES[mode])
        read = sandboxed(repo, [PY, "-c", _READ_SHM, str(key), str(shmid)], **NS_MODES[mode])
    finally:
        _libc.shmctl(shmid, _IPC_RMID, None)
    assert secret.decode() not in read.stdout, read.stdout
    assert read.exit_code == 0, read.stderr
    assert f"{key:#010x}" not in listed.stdout and f" {shmid} " not in listed.stdout


@needs_ns
def test_command_tree_ends_with_its_pid_1(repo: Path, tmp_path: Path):
    """A daemon that left the session is killed when the command ends, and timeouts still end
    everything although the command runs under a PID 1 of its own."""
    beat = repo / "beat"
    daemon = (
        f"import time\nwhile True:\n    open({str(beat)!r}, 'a').write('x')\n    time.sleep(0.05)"
    )
    done = sandboxed(repo, f'setsid {PY} -c "{daemon}" & sleep 0.5; echo started')
    assert "started" in done.stdout and "pidns" in done.sandbox
    size = beat.stat().st_size
    time.sleep(0.3)
    assert beat.stat().st_size == size, "the setsid daemon outlived its command"
    slow = run_command(["sleep", "30"], repo, timeout_s=0.5, sandbox=policy(repo))
    assert slow.timed_out and slow.duration_s < 10


@needs_ns
@pytest.mark.parametrize("mode", list(NS_MODES))
def test_kernel_settings_are_read_only_without_landlock(repo: Path, mode: str):
    """The new /proc's /proc/sys is read-only: a root command where Landlock is missing cannot
    change a setting (here one of its own network namespace's, so nothing leaks if it could)."""
    setting = "/proc/sys/net/ipv4/ip_forward"
    result = sandboxed(
        repo, f"echo 1 > {setting}; cat {setting}", use_landlock=False, **NS_MODES[mode]
    )
    assert "pidns" in result.sandbox and "landlock" not in " ".join(result.sandbox)
    assert result.stdout.strip() == "0", (result.stdout, result.stderr)


def test_fallbacks_say_what_they_lack(repo: Path):
    if ABI < 6:
        pytest.skip("needs Landlock ABI >= 6")
    alone = sandboxed(repo, "true", use_namespaces=False)
    assert "pidns" not in alone.sandbox and "no namespaces" in alone.sandbox_note
    if NAMESPACES:
        no_pid = sandboxed(repo, "ls /proc", pid_namespace=False)
        assert "mountns" in no_pid.sandbox and "pidns" not in no_pid.sandbox
        assert "no PID or IPC namespace" in no_pid.sandbox_note
        assert str(os.getpid()) in no_pid.stdout.split()


# -- git's programs -------------------------------------------------------------------------------

#: Ways to make git run ./x, by the command's words. ./x writes PWNED in the workspace.
GIT_SHAPES = {
    "leading GIT_EXTERNAL_DIFF": "GIT_EXTERNAL_DIFF=./x git diff",
    "leading GIT_EXTERNAL_DIFF, abbreviated --ext": "GIT_EXTERNAL_DIFF=./x git diff --ext",
    "leading GIT_CONFIG_PARAMETERS": "GIT_CONFIG_PARAMETERS=\"'diff.external'='./x'\" git diff",
    "leading GIT_CONFIG_COUNT": (
        "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=diff.external GIT_CONFIG_VALUE_0=./x git diff"
    ),
    "leading GIT_CONFIG_GLOBAL": "GIT_CONFIG_GLOBAL=evil.cfg git diff",
    "after &&": "true && GIT_EXTERNAL_DIFF=./x git diff",
    "in a subshell": "(GIT_EXTERNAL_DIFF=./x git diff)",
    # bash appends with +=; the word's basename, `git`, is what an allowlist would check
    "appended, looking like git": "GIT_EXTERNAL_DIFF+=t/git git diff; true",
    "env wrapper": "env GIT_EXTERNAL_DIFF=./x git diff",
    "HOME pointing at the workspace": "HOME=. git diff",
    "XDG_CONFIG_HOME pointing at the workspace": "XDG_CONFIG_HOME=. git diff",
    "grep -O attached": "git grep -O./x add",
    "grep -O in a cluster": "git grep -nO./x add",
    "grep --open-files-in-pager=": "git grep --open-files-in-pager=./x add",
    "grep --open-files abbreviated": "git grep --open-files=./x add",
    "-c": "git -c diff.external=./x diff",
    "argv list with env": ["env", "GIT_EXTERNAL_DIFF=./x", "git", "diff"],
}


def _git_trap(repo: Path) -> None:
    x = repo / "x"
    x.write_text(f"#!/bin/sh\necho ran > {repo}/PWNED\n")
    x.chmod(0o755)
    (repo / "t").mkdir()
    (repo / "t" / "git").write_text(x.read_text())
    (repo / "t" / "git").chmod(0o755)
    (repo / "evil.cfg").write_text("[diff]\n\texternal = ./x\n")
    (repo / ".gitconfig").write_text("[diff]\n\texternal = ./x\n")
    (repo / "git").mkdir()
    (repo / "git" / "config").write_text("[diff]\n\texternal = ./x\n")
    (repo / "pkg" / "calc.py").write_text("def add(a, b):\n    return b + a\n")


@needs_ns
@pytest.mark.parametrize("shape", list(GIT_SHAPES))
def test_git_runs_no_program_the_command_names(repo: Path, shape: str):
    _git_trap(repo)
    ctx = tool_ctx(repo, [*NO_INTERPRETERS, "env", "true"])
    result = run_tool(ctx, GIT_SHAPES[shape])
    assert not (repo / "PWNED").exists(), text(result)


@needs_ns
def test_variable_names_as_plain_text_are_not_refused(repo: Path):
    (repo / "build.sh").write_text("LD_PRELOAD=/x.so GIT_DIR=/y make\n")
    ctx = tool_ctx(repo, NO_INTERPRETERS)
    for command in ("grep -r LD_PRELOAD= .", ["grep", "GIT_DIR=", "build.sh"]):
        result = run_tool(ctx, command)
        assert result.ok and "LD_PRELOAD=/x.so" in text(result), text(result)


@needs_ns
@pytest.mark.parametrize("name", ["GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_EXTERNAL_DIFF"])
def test_git_runs_no_program_the_environment_names(
    repo: Path, name: str, monkeypatch: pytest.MonkeyPatch
):
    """Passed on by `agent.env_allow`: dropped from the command's environment all the same."""
    _git_trap(repo)
    values = {
        "GIT_CONFIG_PARAMETERS": {name: "'diff.external'='./x'"},
        "GIT_CONFIG_COUNT": {
            name: "1",
            "GIT_CONFIG_KEY_0": "diff.external",
            "GIT_CONFIG_VALUE_0": "./x",
        },
        "GIT_EXTERNAL_DIFF": {name: "./x"},
    }[name]
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    ctx = tool_ctx(repo, NO_INTERPRETERS, env_allow=["PATH", "HOME", "GIT_*"])
    result = run_tool(ctx, "git diff")
    assert "return b + a" in text(result)
    assert not (repo / "PWNED").exists(), text(result)


# -- $HOME ----------------------------------------------------------------------------------------


@needs_ns
@pytest.mark.parametrize("mode", [*NS_MODES, "landlock-only"])
def test_home_is_denied_but_the_toolchain(repo: Path, home: Path, mode: str):
    kw = {"use_namespaces": False} if mode == "landlock-only" else NS_MODES[mode]
    result = sandboxed(
        repo,
        "cat ~/.myservice/token ~/.bashrc ~/.gitconfig ~/.cargo/credentials.toml; "
        "grep -r 0042 ~; hometool; "
        f"{PY} -c 'print(\"python-ran\")'; {PY} -m pytest --version",
        **kw,
    )
    for secret in ("myservice-token", "bashrc-content", "gitconfig-token", "cargo-token"):
        assert secret not in result.stdout + result.stderr, (secret, mode)
    assert "hometool-ran" in result.stdout and "python-ran" in result.stdout, result.stderr
    assert "pytest" in result.stdout + result.stderr


@needs_ns
def test_home_through_the_tool_and_sandbox_read(repo: Path, home: Path):
    ctx = tool_ctx(repo, NO_INTERPRETERS)
    for command in ("cat ~/.myservice/token", "grep -r token ~", "cat ~/.*/to*"):
        assert "myservice-token-0042" not in text(run_tool(ctx, command)), command
    granted = sandboxed(repo, "cat ~/.myservice/token", read=(str(home / ".myservice"),))
    assert "myservice-token-0042" in granted.stdout


# -- signals to `repoctx agent run` ---------------------------------------------------------------

_DAEMON = """
import os, sys, time
path = sys.argv[1]
while True:
    with open(path, "a") as fh:
        fh.write("x")
    time.sleep(0.05)
"""
_COMMAND = """
import subprocess, sys, time
subprocess.Popen(["setsid", sys.executable, "-c", {daemon!r}, {beat!r}, {marker!r}])
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", {marker!r}])
time.sleep(600)
"""


def _alive(marker: str) -> list[int]:
    """Host pids whose command line holds ``marker`` and that have not exited."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state not in (b"Z", b"X"):
            found.append(int(entry))
    return found


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_signal_to_agent_run_kills_every_command(repo: Path, tmp_path: Path, sig: int):
    marker = f"tree-marker-{uuid.uuid4().hex}"
    beat = repo / "beat"
    command = _COMMAND.format(daemon=_DAEMON, beat=str(beat), marker=marker)
    plan = json.dumps({"steps": [{"title": "run it", "done_when": "it ran"}]})
    script = tmp_path / "script.jsonl"
    calls = [
        plan,
        {"tool_calls": [{"name": "run_command", "arguments": {"command": [PY, "-c", command]}}]},
    ]
    script.write_text("\n".join(json.dumps(c) for c in calls) + "\n")
    repoctx = Path(sys.executable).with_name("repoctx")
    proc = subprocess.Popen(
        [
            str(repoctx),
            "agent",
            "run",
            "Run it",
            "--model",
            f"scripted:{script}",
            "--yes",
            "--root",
            str(repo),
            "-q",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        # The code under test, not whatever the installed entry point would import.
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    try:
        deadline = time.monotonic() + 60
        while not (beat.exists() and len(_alive(marker)) >= 2):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.05)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        # The run stops as an interrupted one (trace saved), with the signal's exit status.
        assert proc.returncode == (130 if sig == signal.SIGINT else 128 + sig), err
        assert b"Traceback" not in err, err
        time.sleep(0.5)
        size = beat.stat().st_size
        time.sleep(0.5)
        assert beat.stat().st_size == size, "the setsid daemon still beats"
        assert _alive(marker) == []
    finally:
        for pid in _alive(marker):
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@needs_ns
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_proc_mount_refused_by_the_kernel_falls_back_and_says_so(repo: Path):
    """A real refusal: in a user namespace whose /proc has a file covered by a mount (as in
    most containers: /proc/kcore, /proc/keys), the kernel refuses a new proc mount (EPERM); the command runs in the
    other namespaces, the result says what it lacks, and the next command does not try again."""
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from pathlib import Path
        from agent.runner import run_command
        from agent.sandbox import SandboxPolicy
        repo = Path({str(repo)!r})
        out = []
        for _ in range(2):
            r = run_command(["ls", "/proc"], repo, sandbox=SandboxPolicy(repo, userns="always"))
            out.append([r.exit_code, r.stdout, list(r.sandbox), r.sandbox_note])
        print(json.dumps(out))
        """
    )
    covered = next(
        (p for p in ("/proc/keys", "/proc/kcore", "/proc/sysrq-trigger") if os.path.exists(p)), None
    )
    if covered is None:
        pytest.skip("no /proc file to cover here")
    proc = subprocess.run(
        [
            "unshare",
            "--user",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            f'mount --bind /dev/null {covered} && exec "$0" -c "$1"',
            PY,
            script,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0 and covered in proc.stderr:
        pytest.skip(f"cannot cover {covered} here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    for code, stdout, layers, note in json.loads(proc.stdout):
        assert code == 0 and "self" in stdout.split()
        assert {"mountns", "netns", "userns"} <= set(layers) and "pidns" not in layers, layers
        assert "no PID or IPC namespace (mount /proc: Operation not permitted)" in note, note


@needs_ns
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the workspace to another user")
def test_git_keeps_the_users_safe_directory(repo: Path, home: Path):
    """~/.gitconfig is not read in the sandbox, but its `safe.directory` still lets git work
    in a workspace another user owns (a repository mounted into a container)."""
    for path in [repo, *repo.rglob("*")]:
        os.lchown(path, 4242, 4242)
    (home / ".gitconfig").write_text(f"[safe]\n\tdirectory = {repo}\n")
    result = sandboxed(repo, ["git", "log", "--oneline"])
    assert result.exit_code == 0 and "init" in result.stdout, result.stderr
    (home / ".gitconfig").write_text("")
    refused = sandboxed(repo, ["git", "log", "--oneline"])
    assert "dubious ownership" in refused.stderr
