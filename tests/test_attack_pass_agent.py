"""An independent attack pass on the agent side of issue 38: what a sandboxed command can do to
the host beyond the cases the issue names. Real runner, real namespaces, real tools."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time
from inspect import signature
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent.runner import ResourceLimits, run_command
from agent.tools import ToolContext, default_registry
from cli.main import cli
from cli.settings import load_config
from tests.conftest import make_repo
from tests.test_sandbox import NAMESPACES, policy

needs_ns = pytest.mark.skipif(not NAMESPACES, reason="needs mount namespaces")
#: As root without a user namespace, and the path non-root users take.
NS_MODES = {"full": {}, "userns": {"userns": "always"}}


def sandboxed(repo: Path, command, **kw):
    return run_command(command, repo, timeout_s=60, sandbox=policy(repo, **kw))

#: Inside: how big the private tree is, then try to fill it past the bound in 64 MiB files
#: (RLIMIT_FSIZE bounds one file, not how many).
_FILL = """
import os, sys
path, fill = sys.argv[1], sys.argv[2] == "fill"
s = os.statvfs(path)
print("size", s.f_blocks * s.f_frsize)
print("inodes", s.f_files)
written = 0
chunk = b"x" * (1 << 20)
try:
    for i in range(40 if fill else 0):
        with open(os.path.join(path, f"fill{i}"), "wb") as f:
            for _ in range(64):
                f.write(chunk)
                written += len(chunk)
except OSError as exc:
    print("stopped", exc.errno)
print("written", written)
"""


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"pkg/__init__.py": "", "pkg/calc.py": "X = 1\n"})


@needs_ns
@pytest.mark.parametrize("mode", list(NS_MODES))
@pytest.mark.parametrize("tree", ["/tmp", "/dev/shm"])
def test_private_tmpfs_is_bounded(repo: Path, mode: str, tree: str):
    """A private /tmp or /dev/shm is host memory no rlimit or pids cgroup counts: unbounded, two
    of them took all of RAM between them (each half of it). Filling one stops at its bound."""
    # Filling costs a GiB of memory for a moment: done in one case, the others ask the kernel.
    fill = mode == "full" and tree == "/dev/shm"
    argv = ["python3", "-c", _FILL, tree, "fill" if fill else "ask"]
    res = sandboxed(repo, argv, **NS_MODES[mode])
    assert res.exit_code == 0, res.stderr
    facts = dict(line.split(" ", 1) for line in res.stdout.splitlines())
    assert int(facts["size"]) <= 1 << 30, f"{tree} is {int(facts['size']) >> 20} MiB"
    assert int(facts["inodes"]) <= 1 << 20, f"{tree} has {facts['inodes']} inodes"
    if fill:
        assert int(facts["written"]) <= 1 << 30
        assert facts.get("stopped") == "28"  # ENOSPC, at the bound


#: Inside: N children each touch `mib` MiB at once and report; the parent prints how each ended
#: (0: held its share to the end; -9: killed).
_SPREAD = """
import os, sys, time
n, mib = int(sys.argv[1]), int(sys.argv[2])
kids = []
for _ in range(n):
    pid = os.fork()
    if pid == 0:
        block = bytearray(mib << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(1.5)
        os._exit(0)
    kids.append(pid)
ends = []
for pid in kids:
    _, status = os.waitpid(pid, 0)
    ends.append(os.waitstatus_to_exitcode(status))
print("ends", *ends)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a cgroup to make (root, or delegated)")
@pytest.mark.parametrize("mode", ["unsandboxed", *NS_MODES])
def test_memory_is_bounded_per_command_not_per_process(repo: Path, mode: str):
    """RLIMIT_AS bounds one process: four processes of one command each under it held four
    times the bound together. The command's memory cgroup bounds them all."""
    bound = 256 << 20
    limits = ResourceLimits(max_memory_bytes=bound)
    argv = ["python3", "-c", _SPREAD, "4", "96"]  # 4 x 96 MiB: each under, all over the bound
    kw = {} if mode == "unsandboxed" else {"sandbox": policy(repo, **NS_MODES[mode])}
    res = run_command(argv, repo, timeout_s=60, limits=limits, **kw)
    ends = res.stdout.split()[1:] if res.stdout.startswith("ends") else []
    # The kernel kills inside the command: some children, or (sandboxed) its PID 1 — a fork of
    # this large process, first in the OOM killer's order — and with it the whole command.
    assert len(ends) == 4 or res.exit_code == -9, (res.exit_code, res.stdout, res.stderr)
    held = ends.count("0")
    assert held * 96 << 20 <= bound, f"{held} of 4 held 96 MiB each: {res.stdout} {res.stderr}"


def _tool_ctx(repo: Path) -> ToolContext:
    (repo / ".repoctx.toml").write_text('[agent]\nallow_commands = ["python3"]\n')
    # The test's own settings, trusted as the user's would be (17a1ef1 trusted every config).
    trust = {"trust_repo": True} if "trust_repo" in signature(load_config).parameters else {}
    config = load_config(repo, env={}, **trust)
    return ToolContext.create(config, granted={"read", "write", "execute"}, run_id="atk")


#: Where a command points the index directory's name before repoctx has made it: an existing
#: directory outside, one in $HOME, a path that does not exist yet, a chain of two links.
_INDEX_LINKS = ["outside", "home", "dangling", "chain"]


@pytest.mark.parametrize("shape", _INDEX_LINKS)
def test_a_command_cannot_send_checkpoints_outside(tmp_path: Path, repo: Path, shape: str,
                                                   monkeypatch: pytest.MonkeyPatch):
    """No index directory yet, so no read-only mount covers its name: a command made it a link
    out of the workspace, and the next edit's checkpoint (the file's old bytes) was written
    through it."""
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    outside = tmp_path / "outside"
    outside.mkdir()
    target = {"outside": outside, "home": home / ".config", "dangling": outside / "new",
              "chain": tmp_path / "hop"}[shape]
    if shape == "chain":
        target.symlink_to(outside)
    ctx = _tool_ctx(repo)
    (repo / "pkg" / "calc.py").write_text("SECRET_OLD = 1\n")
    assert not (repo / ".repoctx").exists()
    plant = f"import os; os.symlink({str(target)!r}, '.repoctx')"
    res = default_registry().call("run_command", {"command": ["python3", "-c", plant]}, ctx)
    assert res.ok and os.path.islink(repo / ".repoctx"), res.text()
    default_registry().call(
        "edit", {"path": "pkg/calc.py", "old_text": "SECRET_OLD = 1", "new_text": "X = 2"}, ctx
    )
    written = [p for d in (outside, home) for p in d.rglob("*") if p.name != ".config"]
    assert written == [], written


@pytest.mark.parametrize("shape", ["index_dir", "runs", "home_dir"])
def test_a_shipped_index_link_gets_no_trace(tmp_path: Path, shape: str,
                                            monkeypatch: pytest.MonkeyPatch):
    """A cloned repository ships `.repoctx` (or `.repoctx/runs`) as a link. The index's own
    writers refuse it, and `agent run` stops, but its trace was written through the link first:
    a `runs/<id>.jsonl` in the directory the repository chose."""
    home = tmp_path / "home"
    (home / "notes").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    outside = tmp_path / "outside"
    outside.mkdir()
    repo = make_repo(tmp_path / "repo", {"pkg/__init__.py": "", "pkg/calc.py": "X = 1\n"})
    if shape == "runs":
        (repo / ".repoctx").mkdir()
        (repo / ".repoctx" / "runs").symlink_to(outside)
    else:
        (repo / ".repoctx").symlink_to(outside if shape == "index_dir" else home / "notes")
    script = tmp_path / "script.jsonl"
    finish = {"tool_calls": [{"name": "finish", "arguments": {"summary": "done"}}]}
    script.write_text(json.dumps({"content": '{"steps": [{"title": "a"}]}'}) + "\n"
                      + json.dumps(finish) + "\n")
    res = CliRunner().invoke(
        cli, ["agent", "run", "task", "--model", f"scripted:{script}", "--yes", "--root", str(repo)]
    )
    assert res.exit_code != 0 and "Traceback" not in res.output, res.output
    written = [p for d in (outside, home / "notes") for p in d.rglob("*")]
    assert written == [], written


@pytest.mark.parametrize("shape", ["fifo", "link_to_home_file"])
def test_replay_of_a_shipped_trace_neither_blocks_nor_follows(tmp_path: Path, shape: str):
    """A repository ships `.repoctx/runs/<id>.jsonl` under an id that sorts last: as a FIFO,
    `agent replay last` blocked for ever; as a link, it read a file in $HOME."""
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    secret = home / ".aws" / "credentials"
    secret.write_text('{"type": "start", "note": "aws-marker-0042"}\n')
    repo = make_repo(tmp_path / "repo", {"pkg/__init__.py": ""})
    runs = repo / ".repoctx" / "runs"
    runs.mkdir(parents=True)
    trace = runs / "99991231T235959-ffffff.jsonl"
    if shape == "fifo":
        os.mkfifo(trace)
    else:
        trace.symlink_to(secret)
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    # A process of its own (a FIFO blocks it for good), running this checkout's code.
    argv = [sys.executable, "-c", "from cli.main import cli; cli(prog_name='repoctx')"]
    started = time.monotonic()
    try:
        res = subprocess.run([*argv, "agent", "replay", "last", "--root", str(repo)],
                             capture_output=True, text=True, env=env, timeout=20,
                             cwd=Path(__file__).resolve().parents[1])
    except subprocess.TimeoutExpired:
        pytest.fail("agent replay blocked on the shipped trace")
    assert time.monotonic() - started < 20
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "aws-marker" not in res.stdout + res.stderr
    # Reading the file through the link moves its access time past its change time (relatime;
    # on a noatime mount this check cannot fail).
    read_through = secret.stat().st_atime_ns > secret.stat().st_mtime_ns
    assert not read_through, "the file in $HOME was read through the shipped link"


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_KEY_SYSCALL = {"x86_64": (248, 250), "aarch64": (217, 219)}.get(os.uname().machine)

#: Inside: reach the host's key by several routes and print what each one read.
_KEYS = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
add_key, keyctl = int(sys.argv[1]), int(sys.argv[2])
name = sys.argv[3].encode()
SESSION, USER = -3, -4
def read(kid):
    buf = ctypes.create_string_buffer(256)
    n = libc.syscall(keyctl, 11, kid, buf, 256)  # KEYCTL_READ
    return buf.raw[:n] if n > 0 else b""
def search(ring):
    return libc.syscall(keyctl, 10, ring, b"user", name, 0)  # KEYCTL_SEARCH
out = []
kid = search(SESSION)  # the session keyring repoctx handed down
out.append(read(kid) if kid > 0 else b"")
listing = read(SESSION)  # the ids it holds, then each of them
for i in range(0, len(listing) - 3, 4):
    out.append(read(int.from_bytes(listing[i:i + 4], "little")))
persistent = libc.syscall(keyctl, 22, -1, SESSION)  # KEYCTL_GET_PERSISTENT, linked in
if persistent > 0:
    kid = libc.syscall(keyctl, 10, persistent, b"user", name, 0)
    out.append(read(kid) if kid > 0 else b"")
print(b"|".join(out).decode(errors="replace"))
"""


@pytest.mark.skipif(_KEY_SYSCALL is None, reason="key syscall numbers known for x86_64, aarch64")
@pytest.mark.parametrize("mode", [*NS_MODES, "landlock-only"])
def test_a_command_reads_no_key_of_the_host(repo: Path, mode: str):
    """Keyrings are not namespaced: a command possessed repoctx's session keyring and read
    its keys (and could link the user's persistent keyring, where Kerberos keeps tickets)."""
    # A session keyring of this test's own, so nothing is left in the user's.
    if _libc.syscall(_KEY_SYSCALL[1], 1, None) < 0:  # KEYCTL_JOIN_SESSION_KEYRING
        pytest.skip(f"no session keyring: {os.strerror(ctypes.get_errno())}")
    name = f"atk-{os.getpid()}"
    secret = f"keyring-secret-{os.urandom(4).hex()}".encode()
    if _libc.syscall(_KEY_SYSCALL[0], b"user", name.encode(), secret, len(secret), -3) < 0:
        pytest.skip(f"add_key: {os.strerror(ctypes.get_errno())}")
    argv = ["python3", "-c", _KEYS, *map(str, _KEY_SYSCALL), name]
    # Unconfined, the same script reads it: the attack is a real one.
    control = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert secret.decode() in control.stdout, control.stderr
    kw = {"use_namespaces": False} if mode == "landlock-only" else NS_MODES[mode]
    res = sandboxed(repo, argv, **kw)
    assert res.exit_code == 0, res.stderr
    assert secret.decode() not in res.stdout
