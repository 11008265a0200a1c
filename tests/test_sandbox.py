"""The kernel sandbox of the agent's commands: real processes, real git repositories, a real
fake $HOME, real sockets and signals. Every escape below works on an unsandboxed runner."""

from __future__ import annotations

import ctypes
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from agent.runner import run_command
from agent.tools import ToolContext, default_registry
from cli.settings import load_config
from tests.conftest import git, make_repo

PY = sys.executable
AKIA = "AKIA-SANDBOX-TEST-0001"
SSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY----- sandbox-test-key"
DOTENV = "API_TOKEN=sandbox-test-dotenv"
#: Without an interpreter: what the issue's hostile user had.
NO_INTERPRETERS = ["echo", "cat", "ls", "grep", "git"]


def _landlock_abi() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return max(int(libc.syscall(ctypes.c_long(444), None, ctypes.c_size_t(0), ctypes.c_uint32(1))), 0)


def _namespaces() -> bool:
    if os.geteuid() == 0:
        return True
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    probe = subprocess.run([unshare, "--user", "--mount", "--net", "true"], capture_output=True)
    return probe.returncode == 0


ABI = _landlock_abi()
NAMESPACES = _namespaces()
needs_landlock = pytest.mark.skipif(ABI < 6, reason="needs Landlock ABI >= 6 (Linux >= 6.12)")
needs_namespaces = pytest.mark.skipif(not NAMESPACES, reason="needs mount/net namespaces")
needs_all = pytest.mark.skipif(
    ABI < 6 or not NAMESPACES, reason="needs Landlock ABI >= 6 and namespaces"
)


# -- fixtures -------------------------------------------------------------------------------------


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake $HOME with secrets next to ordinary files; the sandbox reads $HOME from the env."""
    h = tmp_path / "home"
    (h / ".aws").mkdir(parents=True)
    (h / ".aws" / "credentials").write_text(f"[default]\naws_access_key_id = {AKIA}\n")
    (h / ".ssh").mkdir()
    (h / ".ssh" / "id_rsa").write_text(SSH_KEY + "\n")
    (h / ".config" / "gcloud").mkdir(parents=True)
    (h / ".config" / "gcloud" / "credentials.db").write_text("gcloud-sandbox-secret\n")
    (h / ".config" / "tool").mkdir()
    (h / ".config" / "tool" / "settings.ini").write_text("colour = blue\n")
    (h / ".bashrc").write_text("# an ordinary dotfile\n")
    monkeypatch.setenv("HOME", str(h))
    return h


@pytest.fixture()
def repo(tmp_path: Path, home: Path) -> Path:
    root = make_repo(
        tmp_path / "repo",
        {
            "pkg/__init__.py": "",
            "pkg/calc.py": "def add(a, b):\n    return a + b\n",
            "tests/test_calc.py": (
                "from pkg.calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"
            ),
        },
    )
    (root / ".env").write_text(DOTENV + "\n")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    return root


def tool_ctx(repo: Path, **agent: object) -> ToolContext:
    """A context whose `[agent]` table holds ``agent`` (TOML written to .repoctx.toml, trusted
    as the user's own settings: loosening ones are refused from an untrusted repository)."""
    lines = ["[agent]", 'test_env = { PYTEST_DISABLE_PLUGIN_AUTOLOAD = "1" }']
    for key, value in agent.items():
        if isinstance(value, bool):
            lines.append(f"{key} = {'true' if value else 'false'}")
        elif isinstance(value, list):
            lines.append(f"{key} = [" + ", ".join(f'"{v}"' for v in value) + "]")
        else:
            lines.append(f'{key} = "{value}"')
    (repo / ".repoctx.toml").write_text("\n".join(lines) + "\n")
    return ToolContext.create(
        load_config(repo, env={}, trust_repo=True), granted={"read", "write", "execute"},
        run_id="sbx",
    )


def run_tool(ctx: ToolContext, command: str | list[str]):
    return default_registry().call("run_command", {"command": command}, ctx)


def text(result) -> str:
    return (result.output or "") + (result.error or "")


def out(result) -> str:
    """The command's own output in a run_command result (not the echoed command line)."""
    return text(result).split("\n--- stdout ---\n", 1)[-1] if "--- stdout ---" in text(result) else ""


def policy(repo: Path, **kw):
    from agent.sandbox import SandboxPolicy
    from agent.workspace import Workspace

    return SandboxPolicy(repo, is_secret=Workspace(repo).is_secret, **kw)


#: The three ways the sandbox can be built on this machine: everything (as root: no user
#: namespace), the user-namespace path non-root users take, and Landlock alone (no namespaces).
MODES = {
    "full": {},
    "userns": {"userns": "always"},
    "landlock-only": {"use_namespaces": False},
}


def sandboxed(repo: Path, command, mode: str, **kw):
    return run_command(command, repo, timeout_s=60, sandbox=policy(repo, **MODES[mode], **kw))


# -- escapes through the real run_command tool (allowlist without interpreters) -------------------


@needs_landlock
def test_tool_redirect_out_of_the_workspace_leaves_no_file(repo: Path, tmp_path: Path):
    ctx = tool_ctx(repo, allow_commands=NO_INTERPRETERS)
    outside = tmp_path / "outside.txt"
    run_tool(ctx, f"echo pwned > {outside}")
    run_tool(ctx, f"echo pwned >> {tmp_path}/home/.bashrc")
    assert not outside.exists()
    assert (tmp_path / "home" / ".bashrc").read_text() == "# an ordinary dotfile\n"


@needs_landlock
def test_tool_reads_of_home_secrets_return_nothing(repo: Path, home: Path):
    ctx = tool_ctx(repo, allow_commands=NO_INTERPRETERS)
    # Word checks miss these (globs); the kernel does not.
    for command in ("cat < $HOME/.a?s/cred*", "cat ~/.s?h/i*", "grep -r key $HOME/.c?nfig"):
        result = run_tool(ctx, command)
        assert AKIA not in text(result) and "sandbox-test-key" not in text(result), command
        assert "gcloud-sandbox-secret" not in text(result), command
    # So do files on no list: $HOME is denied but for the toolchain (tests/test_sandbox_ns.py).
    assert "ordinary dotfile" not in text(run_tool(ctx, "cat ~/.bashrc"))
    assert "colour = blue" not in text(run_tool(ctx, "cat ~/.config/tool/settings.ini"))


@needs_all
def test_tool_append_to_git_config_is_refused_by_the_kernel(repo: Path, tmp_path: Path):
    ctx = tool_ctx(repo, allow_commands=NO_INTERPRETERS)
    before = (repo / ".git" / "config").read_bytes()
    marker = repo / "fsmonitor-ran"
    result = run_tool(ctx, f"echo '[core] fsmonitor = \"touch {marker}\"' >> .git/config")
    assert (repo / ".git" / "config").read_bytes() == before
    assert "Read-only file system" in text(result)
    run_tool(ctx, "git status")
    assert not marker.exists()


@needs_all
def test_tool_dotenv_is_unreadable_however_it_is_named(repo: Path):
    ctx = tool_ctx(repo, allow_commands=[*NO_INTERPRETERS, "python3", os.path.basename(PY)])
    for command in (
        'cat ./.e""nv',
        "cat ./.e?v",
        "grep -r API_TOKEN .",
        [PY, "-c", "print(open('.e' + 'nv').read())"],
    ):
        result = run_tool(ctx, command)
        assert "sandbox-test-dotenv" not in text(result), command
    # The file itself is untouched.
    assert (repo / ".env").read_text() == DOTENV + "\n"


@needs_all
def test_tool_writes_inside_the_workspace_and_temp_dir_work(repo: Path):
    ctx = tool_ctx(repo, allow_commands=[*NO_INTERPRETERS, os.path.basename(PY)])
    result = run_tool(ctx, "echo hello > made.txt && cat made.txt")
    assert result.ok and "hello" in result.output
    assert (repo / "made.txt").read_text() == "hello\n"
    code = (
        "import os, tempfile\n"
        "p = os.path.join(tempfile.gettempdir(), 'x.txt')\n"
        "open(p, 'w').write('tmp ok')\n"
        "print(open(p).read(), tempfile.gettempdir())\n"
    )
    result = run_tool(ctx, [PY, "-c", code])
    assert result.ok and "tmp ok" in result.output
    assert result.data["sandbox"][:1] == [f"landlock-{ABI}"]
    assert {"mountns", "netns"} <= set(result.data["sandbox"])


@needs_all
def test_tool_network_is_off_but_loopback_inside_works(repo: Path):
    ctx = tool_ctx(repo, allow_commands=[os.path.basename(PY)])
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        accepted: list[object] = []
        server.settimeout(5)
        thread = threading.Thread(target=lambda: _accept(server, accepted), daemon=True)
        thread.start()
        hosts = ["127.0.0.1", *_outside_addresses()]
        code = textwrap.dedent(
            f"""
            import socket
            for host in {hosts!r}:
                try:
                    socket.create_connection((host, {port}), timeout=2).close()
                    print("CONNECTED", host)
                except OSError as exc:
                    print("refused", host, exc)
            """
        )
        result = run_tool(ctx, [PY, "-c", code])
        thread.join(6)
    assert result.ok, text(result)
    assert "refused" in out(result) and "CONNECTED" not in out(result) and not accepted
    inside = textwrap.dedent(
        """
        import socket, threading
        srv = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=lambda: srv.accept()[0].sendall(b"pong"), daemon=True).start()
        c = socket.create_connection(srv.getsockname(), timeout=5)
        print(c.recv(4).decode())
        """
    )
    result = run_tool(ctx, [PY, "-c", inside])
    assert result.ok and "pong" in out(result), text(result)


def _accept(server: socket.socket, accepted: list[object]) -> None:
    try:
        accepted.append(server.accept())
    except OSError:
        return


def _outside_addresses() -> list[str]:
    """This host's non-loopback addresses (none on an isolated machine)."""
    found = set()
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            found.add(info[4][0])
    except OSError:
        pass
    return sorted(a for a in found if not a.startswith("127."))


@needs_landlock
def test_tool_command_cannot_signal_repoctx(repo: Path):
    ctx = tool_ctx(repo, allow_commands=[os.path.basename(PY)])
    received: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: received.append(signum))
    try:
        code = (
            "import os, signal\n"
            f"try:\n    os.kill({os.getpid()}, signal.SIGUSR1)\n    print('SENT')\n"
            # Landlock's signal scope refuses it; in a PID namespace repoctx is not even there.
            "except (PermissionError, ProcessLookupError) as exc:\n    print('denied', exc)\n"
        )
        result = run_tool(ctx, [PY, "-c", code])
        time.sleep(0.2)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert not received
    assert "denied" in out(result) and "SENT" not in out(result)


# -- git never runs what the repository configures ------------------------------------------------


def _hostile_repo(repo: Path, tmp_path: Path) -> Path:
    """Plant fsmonitor, a clean filter, an external diff, a textconv driver and hooks that all
    append to a marker file in the workspace."""
    marker = repo / "git-ran-a-program"
    scripts = tmp_path / "evil"
    (scripts / "hooks").mkdir(parents=True)
    for name in ("fsmonitor", "clean", "external", "textconv", "hook"):
        script = scripts / f"{name}.sh"
        script.write_text(f"#!/bin/sh\necho {name} >> {marker}\ncat 2>/dev/null\nexit 0\n")
        script.chmod(0o755)
    for hook in ("post-index-change", "reference-transaction", "pre-commit"):
        shutil.copy(scripts / "hook.sh", scripts / "hooks" / hook)
    (repo / ".gitattributes").write_text("*.py filter=evil diff=evil\n")
    with (repo / ".git" / "config").open("a") as fh:
        fh.write(
            f"[core]\n\tfsmonitor = {scripts}/fsmonitor.sh\n\thooksPath = {scripts}/hooks\n"
            f'[filter "evil"]\n\tclean = {scripts}/clean.sh\n'
            f"[diff]\n\texternal = {scripts}/external.sh\n"
            f'[diff "evil"]\n\ttextconv = {scripts}/textconv.sh\n'
        )
    (repo / "pkg" / "calc.py").write_text("def add(a, b):\n    return b + a\n")
    return marker


def test_repoctx_own_git_calls_run_nothing_the_repository_configures(repo: Path, tmp_path: Path):
    from click.testing import CliRunner

    from cli.main import cli

    marker = _hostile_repo(repo, tmp_path)
    result = CliRunner().invoke(cli, ["index", "build", str(repo), "--no-embed", "-q", "-j", "1"])
    assert result.exit_code == 0, result.output
    assert not marker.exists(), marker.read_text()
    ctx = tool_ctx(repo, sandbox="off")  # gitsafe alone, without the kernel sandbox
    diff = default_registry().call("git_diff", {}, ctx)
    assert diff.ok and "return b + a" in diff.output, text(diff)
    assert not marker.exists(), marker.read_text()


@needs_landlock
@pytest.mark.parametrize("sandbox", ["auto", "off"])
def test_git_through_run_command_runs_nothing_the_repository_configures(
    repo: Path, tmp_path: Path, sandbox: str
):
    marker = _hostile_repo(repo, tmp_path)
    ctx = tool_ctx(repo, allow_commands=NO_INTERPRETERS, sandbox=sandbox)
    for command in ("git status", "git diff --no-ext-diff", "git log -p -1", "git show HEAD"):
        run_tool(ctx, command)
    status = run_tool(ctx, "git status --short")
    assert status.ok and "pkg/calc.py" in status.output
    log = run_tool(ctx, "git log -p -1")
    assert log.ok and "return a + b" in log.output
    assert not marker.exists(), marker.read_text()


def test_gitsafe_overrides_only_the_keys_the_repository_sets(tmp_path: Path):
    from indexer.safety.gitsafe import git_env, repo_overrides

    root = make_repo(tmp_path / "r", {"a.txt": "a\n"})
    extra = tmp_path / "extra.inc"
    extra.write_text('[alias]\n\tst = !touch /tmp/x\n[merge "m"]\n\tdriver = evil %A\n')
    with (root / ".git" / "config").open("a") as fh:
        # Same-line key after a header, as in the attack.
        fh.write(f'[core] sshCommand = evil\n[include]\n\tpath = {extra}\n[filter "F"]\n\tsmudge = x\n')
    overrides = dict(repo_overrides(root))
    assert overrides == {
        "core.sshcommand": "ssh",
        "alias.st": "",
        "merge.m.driver": "false",
        "filter.F.smudge": "",
        "filter.F.required": "false",
    }
    env = git_env(root, base={"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "a.b",
                              "GIT_CONFIG_VALUE_0": "c"})
    assert env["GIT_CONFIG_KEY_0"] == "a.b"  # kept, ours come after it
    keys = {env[f"GIT_CONFIG_KEY_{i}"] for i in range(int(env["GIT_CONFIG_COUNT"]))}
    assert {"core.fsmonitor", "core.hooksPath", "alias.st", "filter.F.smudge"} <= keys
    assert env["GIT_CONFIG_NOSYSTEM"] == "1" and env["GIT_TERMINAL_PROMPT"] == "0"


# -- the runner, in each sandbox mode -------------------------------------------------------------


def _skip_unless(mode: str) -> None:
    if ABI < 6:
        pytest.skip("needs Landlock ABI >= 6")
    if mode != "landlock-only" and not NAMESPACES:
        pytest.skip("needs namespaces")


@pytest.mark.parametrize("mode", list(MODES))
def test_runner_escapes_are_contained(repo: Path, home: Path, tmp_path: Path, mode: str):
    _skip_unless(mode)
    outside = tmp_path / "outside.txt"
    before = (repo / ".git" / "config").read_bytes()
    result = sandboxed(
        repo,
        f"echo x > {outside}; cat < ~/.aws/credentials; cat ~/.ssh/id_rsa; cat /etc/hostname"
        " >/dev/null && echo system-readable; echo ok > inside.txt",
        mode,
    )
    assert not outside.exists()
    assert AKIA not in result.stdout and "sandbox-test-key" not in result.stdout
    assert "system-readable" in result.stdout
    assert (repo / "inside.txt").read_text() == "ok\n"
    append = sandboxed(repo, "echo '[core] fsmonitor = x' >> .git/config", mode)
    if mode == "landlock-only":
        # Without a mount namespace `.git` is protected by the tools' checks only (documented).
        assert "no namespaces" in result.sandbox_note
    else:
        assert (repo / ".git" / "config").read_bytes() == before, (append.sandbox, append.sandbox_note)
    assert result.sandbox[0] == f"landlock-{ABI}"
    assert ("userns" in result.sandbox) == (mode == "userns")
    assert ("mountns" in result.sandbox) == (mode != "landlock-only")


@pytest.mark.parametrize("mode", list(MODES))
def test_runner_network_is_off(repo: Path, mode: str):
    _skip_unless(mode)
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        code = (
            "import socket\ntry:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n    print('CONNECTED')\n"
            "except OSError as exc:\n    print('refused', exc)\n"
        )
        result = sandboxed(repo, [PY, "-c", code], mode)
    assert "refused" in result.stdout and "CONNECTED" not in result.stdout, result.stderr
    if mode == "landlock-only":
        assert "landlock-tcp" in result.sandbox and "UDP" in result.sandbox_note


@pytest.mark.parametrize("mode", list(MODES))
def test_runner_pytest_runs_inside(repo: Path, mode: str):
    _skip_unless(mode)
    result = sandboxed(
        repo,
        [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        mode,
    )
    assert result.exit_code == 0 and "1 passed" in result.stdout, result.stdout + result.stderr


@needs_all
def test_user_namespace_works_when_fork_hooks_start_threads(repo: Path):
    """lancedb's at-fork hook starts a thread in every forked child, and a user namespace needs
    a single-threaded process: the sandbox goes on in a hook-free child and relays its exit."""
    import warnings

    from lancedb.background_loop import LOOP

    assert LOOP.thread.is_alive()
    before = (repo / ".git" / "config").read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # lancedb's fork warning, in the child
        result = sandboxed(repo, "cat .env; echo x >> .git/config; exit 3", "userns")
        killed = sandboxed(repo, "kill -USR1 $$", "userns")
        missing = sandboxed(repo, ["repoctx-no-such-program"], "userns")
    assert {"userns", "mountns"} <= set(result.sandbox), result.sandbox_note
    assert result.exit_code == 3 and "sandbox-test-dotenv" not in result.stdout
    assert (repo / ".git" / "config").read_bytes() == before
    assert killed.exit_code == -signal.SIGUSR1
    assert missing.exit_code == 127 and "repoctx-no-such-program" in missing.stderr


@needs_all
def test_runner_workspace_secret_added_later_is_hidden(repo: Path):
    """The workspace walk is cached by directory mtimes: a secret made after the cache was
    filled is hidden all the same."""
    (repo / "sub").mkdir()
    old = time.time() - 3600
    for d in (repo, repo / "sub", repo / "pkg", repo / "tests"):
        os.utime(d, (old, old))
    first = sandboxed(repo, "cat sub/* 2>&1; true", "full")
    assert first.exit_code == 0
    (repo / "sub" / ".env").write_text("LATER=sandbox-later-secret\n")
    (repo / "sub" / "id_rsa").write_text("sandbox-later-key\n")
    result = sandboxed(repo, "cat sub/.e?v sub/id_*", "full")
    assert "sandbox-later" not in result.stdout


@needs_all
def test_secret_under_a_non_utf8_name_is_hidden(repo: Path):
    odd = os.fsdecode(b"latin1_\xe9")
    (repo / odd).mkdir()
    (repo / odd / ".env").write_text("ODD=sandbox-odd-secret\n")
    (repo / odd / "ok.txt").write_text("visible\n")
    result = sandboxed(repo, "cat latin1_*/.e?v latin1_*/ok.txt", "full")
    assert "visible" in result.stdout and "sandbox-odd-secret" not in result.stdout


@needs_all
def test_index_directory_is_read_only(repo: Path):
    (repo / ".repoctx").mkdir()
    (repo / ".repoctx" / "graph.db").write_bytes(b"db")
    result = sandboxed(repo, "echo x >> .repoctx/graph.db", "full", readonly=(".repoctx",))
    assert "Read-only" in result.stderr
    assert (repo / ".repoctx" / "graph.db").read_bytes() == b"db"


@needs_all
def test_git_write_lets_planned_git_commands_write_git_only(repo: Path):
    ctx = tool_ctx(repo, allow_commands=NO_INTERPRETERS, git_write=True)
    (repo / "pkg" / "calc.py").write_text("def add(a, b):\n    return b + a\n")
    commit = run_tool(ctx, ["git", "commit", "-q", "-am", "agent change"])
    assert commit.ok and commit.data["exit_code"] == 0, text(commit)
    assert "agent change" in git(repo, "log", "-1", "--format=%s")
    # Through a shell `.git` stays read-only, and git config is never written.
    before = (repo / ".git" / "config").read_bytes()
    run_tool(ctx, "echo '[core] fsmonitor = x' >> .git/config && git status")
    refused = run_tool(ctx, ["git", "config", "core.fsmonitor", "x"])
    assert not refused.ok and "git config" in refused.error
    assert (repo / ".git" / "config").read_bytes() == before


@needs_all
def test_run_tests_passes_in_the_sandbox(repo: Path):
    ctx = tool_ctx(repo)
    result = default_registry().call("run_tests", {"scope": "full"}, ctx)
    assert result.ok and result.data["passed"] is True, text(result)
    run = result.data["runs"][-1]
    assert run["passed"] == 1 and f"landlock-{ABI}" in run["sandbox"]


# -- fallbacks say what they are ------------------------------------------------------------------


def test_sandbox_off_reports_it(repo: Path):
    ctx = tool_ctx(repo, allow_commands=NO_INTERPRETERS, sandbox="off")
    result = run_tool(ctx, "echo hi")
    assert result.ok and result.data["sandbox"] == []
    assert "off" in result.data["sandbox_note"]


def test_no_kernel_sandbox_warns_once_and_required_refuses(
    repo: Path, caplog: pytest.LogCaptureFixture
):
    from agent import sandbox

    sandbox.forget_warnings()
    without = {"use_landlock": False, "use_namespaces": False}
    with caplog.at_level(logging.WARNING, logger="agent.sandbox"):
        first = run_command("echo hi", repo, sandbox=policy(repo, **without))
        second = run_command("echo hi", repo, sandbox=policy(repo, **without))
    assert first.stdout == "hi\n" and first.sandbox == ()
    assert "No kernel sandbox" in first.sandbox_warning and "required" in first.sandbox_warning
    assert second.sandbox_warning == "" and "No kernel sandbox" in second.sandbox_note
    assert [r.message for r in caplog.records].count(first.sandbox_warning) == 1
    with pytest.raises(sandbox.SandboxError, match="required"):
        run_command("echo hi", repo, sandbox=policy(repo, mode="required", **without))
    (repo / "never.txt").unlink(missing_ok=True)
    with pytest.raises(sandbox.SandboxError):
        run_command("echo x > never.txt", repo, sandbox=policy(repo, mode="required", **without))
    assert not (repo / "never.txt").exists()


def test_required_mode_runs_with_landlock_or_refuses_without(repo: Path):
    ctx = tool_ctx(repo, allow_commands=NO_INTERPRETERS, sandbox="required")
    if ABI:
        result = run_tool(ctx, "echo hi")
        assert result.ok and result.data["sandbox"][0] == f"landlock-{ABI}"
    else:
        result = run_tool(ctx, "echo hi")
        assert not result.ok and "required" in result.error


@needs_landlock
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_namespaces_refused_by_the_kernel_fall_back_to_landlock_and_say_so(repo: Path):
    """A real refusal: inside a user namespace whose limit of nested user namespaces is 0,
    unshare(CLONE_NEWUSER) fails with ENOSPC; the command is retried with Landlock alone, the
    result says why, and the next command does not try again."""
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from pathlib import Path
        from agent.runner import run_command
        from agent.sandbox import SandboxPolicy
        repo = Path({str(repo)!r})
        policy = SandboxPolicy(repo, userns="always")
        out = []
        for _ in range(2):
            r = run_command(["cat", str(repo / "pkg" / "calc.py")], repo, sandbox=policy)
            out.append([r.exit_code, r.stdout, list(r.sandbox), r.sandbox_note, r.sandbox_warning])
        print(json.dumps(out))
        """
    )
    proc = subprocess.run(
        [
            "unshare",
            "--user",
            "--map-root-user",
            "sh",
            "-c",
            'echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" -c "$1"',
            PY,
            script,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0 and "max_user_namespaces" in proc.stderr:
        pytest.skip(f"cannot lower max_user_namespaces here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    first, second = json.loads(proc.stdout)
    for code, stdout, layers, note, _ in (first, second):
        assert code == 0 and "return a + b" in stdout
        assert layers == [f"landlock-{ABI}", "landlock-tcp"]
        assert "unshare: No space left on device" in note
    assert "weaker" in first[4] and second[4] == ""
