"""run_command: real processes, real process groups, real limits."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import tracemalloc

import pytest

from agent import command_containment
from agent.errors import CommandNotAllowedError, InvalidCommandError, PathNotFoundError
from agent.runner import CommandResult, ResourceLimits, build_env, plan_command, run_command

PY = sys.executable
LINUX = os.path.isdir("/proc/self")


def run(argv, cwd, **kw) -> CommandResult:
    kw.setdefault("timeout_s", 30)
    return run_command(argv, cwd, **kw)


def alive(pid: int) -> bool:
    """True while ``pid`` is a live (non-zombie) process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return False
    return raw[raw.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


def live_in_group(pgid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    raw = fh.read()
            except OSError:
                continue
            fields = raw[raw.rfind(b")") + 2 :].split()
            if fields[0] not in (b"Z", b"X") and pgid in (int(fields[2]), int(fields[3])):
                found.append(int(entry))
    return found


def _kill_group_for_good(pgid: int) -> None:
    for _ in range(500):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        if not live_in_group(pgid):
            return
        time.sleep(0.01)


# -- basics ---------------------------------------------------------------------------------------


def test_runs_a_command_and_captures_both_streams(tmp_path):
    result = run([PY, "-c", "import sys; print('out'); print('err', file=sys.stderr)"], tmp_path)
    assert result.exit_code == 0
    assert result.stdout == "out\n"
    assert result.stderr == "err\n"
    assert not (result.timed_out or result.killed or result.truncated)
    assert result.argv == (PY, "-c", "import sys; print('out'); print('err', file=sys.stderr)")


@pytest.mark.parametrize("code", [1, 3, 42])
def test_exit_codes_are_reported(tmp_path, code):
    assert run([PY, "-c", f"raise SystemExit({code})"], tmp_path).exit_code == code
    assert run(f"exit {code}", tmp_path).exit_code == code


def test_exit_status_survives_closing_output_before_exit(tmp_path):
    """The pipes reach EOF before the command exits (as with coreutils' atexit close): the
    real status is reported, not the SIGKILL that cleans up leftovers."""
    code = "import os, time; os.close(1); os.close(2); time.sleep(0.3); raise SystemExit(7)"
    result = run([PY, "-c", code], tmp_path)
    assert result.exit_code == 7 and not result.killed


def test_missing_program_is_exit_127(tmp_path):
    result = run(["repoctx-no-such-program-xyz"], tmp_path)
    assert result.exit_code == 127
    assert "repoctx-no-such-program-xyz" in result.stderr


def test_cwd_is_the_workspace(tmp_path):
    (tmp_path / "marker.txt").write_text("here")
    result = run(
        [PY, "-c", "import os; print(os.getcwd()); print(open('marker.txt').read())"], tmp_path
    )
    assert result.stdout.splitlines() == [str(tmp_path.resolve()), "here"]


def test_missing_cwd_is_a_typed_error(tmp_path):
    with pytest.raises(PathNotFoundError):
        run(["true"], tmp_path / "nope")


def test_stdin_is_closed(tmp_path):
    result = run([PY, "-c", "import sys; print(repr(sys.stdin.read()))"], tmp_path)
    assert result.stdout == "''\n"


# -- timeouts and process groups ------------------------------------------------------------------


@pytest.mark.skipif(not LINUX, reason="needs /proc")
@pytest.mark.parametrize("use_cgroup", [True, False], ids=["cgroup-if-available", "no-cgroup"])
def test_timeout_kills_the_whole_process_group_including_grandchildren(tmp_path, use_cgroup):
    result = run(
        "sh -c 'sleep 1000 & echo $!; sleep 1000'",
        tmp_path,
        timeout_s=1,
        limits=ResourceLimits(kill_grace_s=0.2, use_cgroup=use_cgroup),
    )
    assert result.timed_out and result.killed and result.kill_reason == "timeout"
    assert result.exit_code < 0  # ended by a signal
    grandchild = int(result.stdout.split()[0])
    assert not alive(grandchild)


@pytest.mark.skipif(not LINUX, reason="needs /proc")
def test_sigterm_ignoring_process_gets_sigkill(tmp_path):
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(1000)"
    result = run([PY, "-c", code], tmp_path, timeout_s=1, limits=ResourceLimits(kill_grace_s=0.2))
    assert result.timed_out
    assert result.exit_code == -9
    assert result.stdout == "ready\n"


@pytest.mark.skipif(not LINUX, reason="needs /proc")
@pytest.mark.parametrize("use_cgroup", [True, False], ids=["cgroup-if-available", "no-cgroup"])
def test_background_leftovers_are_killed_when_the_command_exits(tmp_path, use_cgroup):
    limits = ResourceLimits(use_cgroup=use_cgroup)
    result = run("sleep 1000 & echo $!", tmp_path, timeout_s=60, limits=limits)
    assert result.exit_code == 0
    assert not result.timed_out and not result.killed
    assert not alive(int(result.stdout.split()[0]))


# -- output ---------------------------------------------------------------------------------------


def test_100_mb_of_output_is_capped_and_never_held_in_memory(tmp_path):
    cap = 10_000
    tracemalloc.start()
    try:
        result = run("yes x | head -c 100000000", tmp_path, max_output_bytes=cap, timeout_s=120)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0 and not result.killed
    assert result.truncated
    assert result.stdout_bytes == 100_000_000
    assert f"[... {100_000_000 - cap} bytes truncated ...]" in result.stdout
    assert len(result.stdout) < cap + 100
    assert result.stdout.startswith("x\nx\n") and result.stdout.endswith("x\nx\n")
    assert peak < 5_000_000, f"peak Python allocation {peak} bytes"


def test_output_under_the_cap_is_kept_whole(tmp_path):
    result = run([PY, "-c", "print('a' * 999)"], tmp_path, max_output_bytes=1000)
    assert result.stdout == "a" * 999 + "\n"
    assert not result.truncated


def test_endless_output_is_killed_at_the_drain_limit(tmp_path):
    result = run(["yes"], tmp_path, timeout_s=60, limits=ResourceLimits(max_drain_bytes=5_000_000))
    assert result.killed and result.kill_reason == "output_limit" and not result.timed_out
    assert result.stdout_bytes > 5_000_000


# -- fork bombs -----------------------------------------------------------------------------------


@pytest.mark.skipif(not LINUX, reason="needs /proc")
@pytest.mark.parametrize("use_cgroup", [True, False], ids=["cgroup-if-available", "no-cgroup"])
@pytest.mark.parametrize(
    "bomb",
    [":(){ :|:& };:", ":(){ :|:& };:; sleep 1000"],
    ids=["classic", "parent-stays"],
)
def test_fork_bomb_is_contained_and_cleaned_up(tmp_path, use_cgroup, bomb):
    # Small limits: the machine running the tests must survive whatever guard is active.
    limits = ResourceLimits(max_processes=64, use_cgroup=use_cgroup, kill_grace_s=0.1)
    result = run(f"echo $$; {bomb}", tmp_path, timeout_s=3, max_output_bytes=2000, limits=limits)
    assert result.containment != "none"
    pgid = int(result.stdout.split()[0])
    leftovers = live_in_group(pgid)
    _kill_group_for_good(pgid)  # a failing run must not leave a bomb behind on the test machine
    assert leftovers == []
    if bomb.endswith("sleep 1000"):
        assert result.killed
        if result.containment in ("cgroup", "watchdog"):
            assert result.kill_reason == "process_limit"


def _sleepers(n: int, **kw) -> list:
    import subprocess

    return [subprocess.Popen(["sleep", "60"], **kw) for _ in range(n)]


def _end(procs: list) -> None:
    for proc in procs:
        proc.kill()
    for proc in procs:
        proc.wait()


def _session_leader():
    """A session whose leader starts 80 sleeping children when a line arrives on its stdin."""
    import subprocess

    script = "read go; for i in $(seq 80); do sleep 60 & done; echo started; wait"
    return subprocess.Popen(
        ["bash", "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )


@pytest.mark.skipif(not LINUX, reason="needs /proc")
def test_watchdog_sees_growth_after_other_tasks_end():
    """The baseline of tasks outside the session must follow them down: with 150 other tasks
    counted in it and gone before the session grows by 80, a baseline left high hid the growth
    (the fork bomb that ran to its timeout in CI)."""
    others = _sleepers(150)
    leader = _session_leader()
    try:
        watchdog = command_containment.Watchdog(leader.pid, 64)
        _end(others)
        assert not watchdog.over_limit()
        leader.stdin.write(b"go\n")
        leader.stdin.flush()
        assert leader.stdout.readline() == b"started\n"
        assert any(watchdog.over_limit() for _ in range(20))
    finally:
        _end(others)
        _kill_group_for_good(leader.pid)
        leader.wait()


@pytest.mark.skipif(not LINUX, reason="needs /proc")
def test_watchdog_leaves_a_session_within_the_limit_running():
    """Growth elsewhere on the machine makes the watchdog stop the session to count it; a
    session within the limit must be continued, not left stopped."""
    leader = _session_leader()
    others: list = []
    try:
        watchdog = command_containment.Watchdog(leader.pid, 100)
        others = _sleepers(150)
        assert not watchdog.over_limit()
        with open(f"/proc/{leader.pid}/stat", "rb") as fh:
            raw = fh.read()
        assert raw[raw.rfind(b")") + 2 :].split()[0] != b"T"
        leader.stdin.write(b"go\n")  # a stopped leader would never answer
        leader.stdin.flush()
        assert leader.stdout.readline() == b"started\n"
    finally:
        _end(others)
        _kill_group_for_good(leader.pid)
        leader.wait()


@pytest.mark.skipif(not LINUX, reason="needs /proc")
def test_a_command_under_the_watchdog_runs_at_lower_priority(tmp_path):
    code = "import os; print(os.nice(0))"
    limits = ResourceLimits(max_processes=64, use_cgroup=False)
    result = run([PY, "-c", code], tmp_path, limits=limits)
    if result.containment != "watchdog":
        pytest.skip("RLIMIT_NPROC bounds processes here; no watchdog")
    assert int(result.stdout) == min(19, os.nice(0) + 10)


#: A command that holds 40 threads, then trades them one by one for 40 sleeping processes: the
#: machine's task count never moves, so a watchdog counting processes alone (against a
#: baseline that counts threads) never looked again.
_THREADS_FOR_PROCESSES = """
import subprocess, threading, time
stops = [threading.Event() for _ in range(40)]
threads = [threading.Thread(target=e.wait) for e in stops]
for t in threads:
    t.start()
time.sleep(0.3)
for e, t in zip(stops, threads):
    e.set(); t.join()
    subprocess.Popen(["sleep", "30"])
    time.sleep(0.02)
time.sleep(1)
print("not stopped")
"""


@pytest.mark.skipif(not LINUX, reason="needs /proc")
def test_the_watchdog_counts_threads_so_they_cannot_be_traded_for_processes(tmp_path):
    limits = ResourceLimits(max_processes=16, use_cgroup=False, kill_grace_s=0.1)
    result = run([PY, "-c", _THREADS_FOR_PROCESSES], tmp_path, timeout_s=20, limits=limits)
    if result.containment != "watchdog":
        pytest.skip("RLIMIT_NPROC bounds processes here; no watchdog")
    assert result.killed and result.kill_reason == "process_limit"
    assert "not stopped" not in result.stdout


@pytest.mark.skipif(not LINUX, reason="needs /proc")
@pytest.mark.parametrize("use_cgroup", [True, False], ids=["cgroup-if-available", "no-cgroup"])
def test_a_process_that_leaves_the_group_but_not_the_session_dies_with_the_command(
    tmp_path, use_cgroup
):
    code = (
        "import subprocess; p = subprocess.Popen(['sleep', '60'], process_group=0, "
        "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid)"
    )
    limits = ResourceLimits(max_processes=64, use_cgroup=use_cgroup)
    result = run([PY, "-c", code], tmp_path, limits=limits)
    pid = int(result.stdout)
    try:
        assert result.exit_code == 0
        deadline = time.monotonic() + 2
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not alive(pid)
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not LINUX, reason="needs /proc")
def test_per_command_cgroup_is_removed(tmp_path):
    result = run(["true"], tmp_path)
    if result.containment != "cgroup":
        pytest.skip("no writable pids cgroup here")
    leftovers = [
        p
        for base in command_containment.pids_cgroup_bases()
        for p in base.glob(f"repoctx-{os.getpid()}-*")
    ]
    assert leftovers == []


# -- resource limits ------------------------------------------------------------------------------


def test_file_size_limit(tmp_path):
    code = "open('big.bin', 'wb').write(b'x' * 3_000_000)"
    result = run([PY, "-c", code], tmp_path, limits=ResourceLimits(max_file_bytes=1_000_000))
    assert result.exit_code != 0
    assert (tmp_path / "big.bin").stat().st_size <= 1_000_000


def test_memory_limit(tmp_path):
    code = "b = bytearray(2_000_000_000); print('allocated')"
    result = run([PY, "-c", code], tmp_path, limits=ResourceLimits(max_memory_bytes=1_000_000_000))
    assert result.exit_code != 0
    assert "MemoryError" in result.stderr
    assert "allocated" not in result.stdout


# -- environment ----------------------------------------------------------------------------------

DUMP_ENV = [PY, "-c", "import json, os; print(json.dumps(dict(os.environ)))"]


def test_environment_is_filtered_and_secrets_never_pass(tmp_path, monkeypatch):
    monkeypatch.setenv("REPOCTX_T_VISIBLE", "yes")
    monkeypatch.setenv("REPOCTX_T_API_KEY", "s3cret-key")
    monkeypatch.setenv("REPOCTX_T_TOKEN", "s3cret-token")
    monkeypatch.setenv("AWS_REPOCTX_T", "s3cret-aws")
    monkeypatch.setenv("REPOCTX_T_PASSWORD_FILE", "s3cret-pw")
    monkeypatch.setenv("NOT_ALLOWED_AT_ALL", "hidden")
    result = run(
        DUMP_ENV,
        tmp_path,
        env_allow=("PATH", "REPOCTX_T_*", "AWS_*"),
        extra_env={"EXTRA_ONE": "1", "EXTRA_SECRET": "s3cret-extra"},
    )
    env = json.loads(result.stdout)
    assert env["REPOCTX_T_VISIBLE"] == "yes"
    assert env["EXTRA_ONE"] == "1"
    assert "PATH" in env
    assert "NOT_ALLOWED_AT_ALL" not in env
    assert "s3cret" not in result.stdout


def test_default_env_allow_keeps_python_variables_out(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONSTARTUP", "/tmp/evil.py")
    monkeypatch.setenv("VIRTUAL_ENV", "/some/venv")
    env = json.loads(run(DUMP_ENV, tmp_path).stdout)
    assert "PYTHONSTARTUP" not in env
    assert env["VIRTUAL_ENV"] == "/some/venv"


def test_build_env_is_case_insensitive_about_secrets():
    env = build_env(("*",), source={"github_token": "x", "Db_Password": "y", "OK": "z"})
    assert env == {"OK": "z"}


# -- allowlist ------------------------------------------------------------------------------------


def test_allowlist_refuses_unlisted_program(tmp_path):
    with pytest.raises(CommandNotAllowedError) as info:
        run(["rm", "-rf", "x"], tmp_path, allowlist=("pytest", "git"))
    message = str(info.value)
    assert "`rm`" in message and "git, pytest" in message and "agent.allow_commands" in message


def test_allowlist_matches_by_basename(tmp_path):
    result = run([PY, "-c", "print(1)"], tmp_path, allowlist=(os.path.basename(PY),))
    assert result.stdout == "1\n"


@pytest.mark.parametrize(
    "command",
    [
        "echo hi | rm -rf x",
        "echo hi && rm x",
        "echo hi; rm x",
        "echo hi\nrm x",
        "(echo hi; rm x)",
        "echo $(rm x)",
        'echo "`rm x`"',
        "cat <(rm x)",
        "$EDITOR x",
        "for f in *; do rm $f; done",
        "FOO=1 rm x",
        "! rm x",
        "echo hi > out.txt; rm out.txt",
    ],
)
def test_allowlist_checks_every_command_word_of_a_shell_string(tmp_path, command):
    with pytest.raises(CommandNotAllowedError):
        run(command, tmp_path, allowlist=("echo", "cat", "tr"))
    assert not (tmp_path / "out.txt").exists()


def test_allowed_shell_pipeline_runs(tmp_path):
    result = run(
        "echo hello 2>&1 | tr a-z A-Z > out.txt && cat out.txt",
        tmp_path,
        allowlist=("echo", "tr", "cat"),
    )
    assert result.exit_code == 0
    assert result.stdout == "HELLO\n"
    assert (tmp_path / "out.txt").read_text() == "HELLO\n"


def test_quoted_operators_are_arguments_not_commands(tmp_path):
    result = run("echo 'a; rm x' \"b | c\" '$(d)'", tmp_path, allowlist=("echo",))
    assert result.stdout == "a; rm x b | c $(d)\n"
    assert result.argv[0] == "echo"  # no shell needed


def test_plan_command_runs_plain_strings_without_a_shell():
    assert plan_command("git status --short", None) == ("git", "status", "--short")
    assert plan_command('grep -n "two words" file.py', None) == (
        "grep",
        "-n",
        "two words",
        "file.py",
    )
    shell = plan_command("ls *.py", None)
    assert shell[1:] == ("-c", "ls *.py")


@pytest.mark.parametrize("command", ["", "   ", "# only a comment", []])
def test_empty_commands_are_invalid(tmp_path, command):
    with pytest.raises(InvalidCommandError):
        run(command, tmp_path)


def test_unterminated_quote_is_invalid(tmp_path):
    with pytest.raises(InvalidCommandError):
        run("echo 'oops", tmp_path)
