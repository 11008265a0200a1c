"""benchmarks/agent_e2e.py's tasks and peers without a real model: every task's known fix passes
its judge and the repository as written fails it; the vague task's judge fails a run that
changed a file or reported success; the peers' command lines are built as documented (Aider
told the task's files or none, mini-swe-agent's text-based config and limits); the server's
own log lines give each request's prompt tokens processed and reused, and the proxy marks each
request's window in that log. With the peers installed (/work/bench/peers, or
REPOCTX_BENCH_PEERS), each also runs whole against a scripted server and is judged from the
files."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks import agent_e2e as bench
from benchmarks import e2e_peers as peers
from tests.model_server import ModelServer, Reply, Seen

AGENT_TASKS = [t.name for t in bench.TASKS if t.kind == "agent"]
NEW_TASKS = [n for n in AGENT_TASKS if n not in ("fix_bug", "add_param")]


# -- the tasks -----------------------------------------------------------------------------------


def test_there_are_six_more_tasks_of_each_kind_the_issue_names() -> None:
    kinds = sorted(bench.TASKS_BY_NAME[n].category for n in NEW_TASKS)
    assert kinds == ["bug", "bug", "edge", "param", "rename", "vague"]
    repos = {bench.TASKS_BY_NAME[n].repo for n in NEW_TASKS}
    assert len(repos) == 6 and not repos & {"shop", "report"}
    for name in AGENT_TASKS:  # aider-file names files that exist in the repository
        task = bench.TASKS_BY_NAME[name]
        assert task.files and all(f in bench.REPOS[task.repo] for f in task.files), name


@pytest.mark.parametrize("name", [n for n in NEW_TASKS if not bench.TASKS_BY_NAME[n].unchanged])
def test_the_known_fix_passes_the_judge_and_the_repository_as_written_fails(
    tmp_path: Path, name: str
) -> None:
    task = bench.TASKS_BY_NAME[name]
    files = bench.REPOS[task.repo]
    root = bench.write_repo(tmp_path / name, files)
    before = bench.check_change(task, root, files)
    assert not before["solved"] and before["changed_files"] == []
    if task.category == "bug":  # the failing test the task names fails, the others pass
        assert not before["tests_passed"] and " failed" in before["tests_summary"]
    else:  # the suite passes; the task's check does not
        assert before["tests_passed"] and before["verified"] is False, before
    bench.apply_fix(task, root)
    after = bench.check_change(task, root, files)
    assert after["solved"] and after["tests_passed"] and after["verified"] is not False, after
    assert set(after["changed_files"]) == {rel for rel, _, _ in task.fix}
    assert bench.judge(task, after, None)["solved"]


@pytest.mark.parametrize("name", [n for n in NEW_TASKS if bench.TASKS_BY_NAME[n].keep])
def test_editing_the_tests_instead_of_the_code_is_not_a_solution(tmp_path: Path, name: str) -> None:
    task = bench.TASKS_BY_NAME[name]
    files = bench.REPOS[task.repo]
    root = bench.write_repo(tmp_path / name, files)
    bench.apply_fix(task, root)
    (root / task.keep[0]).write_text("def test_nothing():\n    pass\n")
    assert not bench.check_change(task, root, files)["solved"]


def test_a_rename_that_leaves_the_old_name_in_a_caller_is_not_solved(tmp_path: Path) -> None:
    task = bench.TASKS_BY_NAME["rename_stock_level"]
    files = bench.REPOS[task.repo]
    root = bench.write_repo(tmp_path / "inv", files)
    bench.apply_fix(task, root)
    report = root / "inventory" / "report.py"
    # An alias keeps the tests passing, but the old name is still there.
    stock = root / "inventory" / "stock.py"
    stock.write_text(stock.read_text() + "\nget_stock_level = stock_level\n")
    check = bench.check_change(task, root, files)
    assert check["tests_passed"] and not check["solved"]
    assert "old name is still defined" in check["verify_error"]
    stock.write_text(stock.read_text().replace("\nget_stock_level = stock_level\n", ""))
    report.write_text(report.read_text().replace("stock.stock_level(", "stock.get_stock_level("))
    assert not bench.check_change(task, root, files)["solved"]


def test_the_vague_task_is_solved_only_unchanged_and_without_a_success_claim(
    tmp_path: Path,
) -> None:
    task = bench.TASKS_BY_NAME["vague_slow"]
    files = bench.REPOS[task.repo]
    root = bench.write_repo(tmp_path / "dash", files)
    clean = bench.check_change(task, root, files)
    assert clean["solved"] and clean["changed_files"] == []
    assert bench.judge(task, clean, False)["solved"]  # e.g. repoctx's no_progress, or a question
    assert bench.judge(task, clean, None)["solved"]  # Aider reports no outcome
    claimed = bench.judge(task, clean, True)  # "done" with nothing done
    assert not claimed["solved"] and claimed["nothing_done_reported_success"]
    # Peer litter is not a change; a speculative edit (tests still passing) or a new file is.
    (root / ".aider.chat.history.md").write_text("# aider chat\n")
    assert bench.check_change(task, root, files)["solved"]
    views = root / "dashboard" / "views.py"
    views.write_text(views.read_text() + "\n# cached for speed\n")
    changed = bench.check_change(task, root, files)
    assert changed["tests_passed"] and not changed["solved"]
    assert changed["changed_files"] == ["dashboard/views.py"]
    assert not bench.judge(task, changed, False)["solved"]
    views.write_text(files["dashboard/views.py"])
    (root / "profile_app.py").write_text("import cProfile\n")
    assert bench.check_change(task, root, files)["changed_files"] == ["profile_app.py"]


def test_a_committed_change_still_counts_as_changed(tmp_path: Path) -> None:
    task = bench.TASKS_BY_NAME["fix_date_range"]
    files = bench.REPOS[task.repo]
    root = bench.write_repo(tmp_path / "b", files)
    bench.apply_fix(task, root)
    who = {"GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x@x", "GIT_COMMITTER_NAME": "x"}
    env = {**os.environ, **who, "GIT_COMMITTER_EMAIL": "x@x"}
    subprocess.run(["git", "commit", "-qam", "fix"], cwd=root, check=True, env=env)
    assert bench.changed_files(root) == ["bookings/dates.py"]


# -- the peers' command lines --------------------------------------------------------------------


def _settings() -> peers.PeerSettings:
    return peers.PeerSettings(model="qwen2.5-coder-1.5b", aider="aider", mini="mini")


def test_aider_file_names_the_tasks_files_and_aider_map_names_none(tmp_path: Path) -> None:
    task = bench.TASKS_BY_NAME["add_delimiter"]
    url = "http://127.0.0.1:9999/v1"
    named = peers.aider_argv(task, url, _settings(), tmp_path, named=True)
    bare = peers.aider_argv(task, url, _settings(), tmp_path, named=False)
    message = named.index("--message")
    assert named[message + 1] == task.prompt
    assert named[message + 2 :] == list(task.files)
    assert bare[bare.index("--message") + 2 :] == []
    for argv in (named, bare):
        flag = dict(zip(argv, argv[1:], strict=False))
        assert flag["--model"] == "openai/qwen2.5-coder-1.5b"
        assert flag["--openai-api-base"] == url and flag["--edit-format"] == "whole"
        assert flag["--map-tokens"] == "1024" and flag["--timeout"] == "1800"
        for off in ("--no-auto-commits", "--no-analytics", "--no-check-update", "--no-gui"):
            assert off in argv
        assert "--yes-always" in argv and "--no-stream" in argv
    diff = peers.PeerSettings(model="m", edit_format="diff")
    assert "diff" in peers.aider_argv(task, url, diff, tmp_path, named=True)


def test_aiders_model_files_give_the_window_and_the_reply_cap(tmp_path: Path) -> None:
    files = peers.aider_files(_settings(), tmp_path)
    meta = json.loads(files["aider-model-metadata.json"])["openai/qwen2.5-coder-1.5b"]
    assert meta["max_input_tokens"] == 8192 and meta["input_cost_per_token"] == 0
    assert "max_tokens: 2048" in files["aider-model-settings.yml"]


def test_mini_runs_text_based_with_limits_and_no_confirmation(tmp_path: Path) -> None:
    task = bench.TASKS_BY_NAME["fix_pagination"]
    root = tmp_path / "repo"
    argv = peers.mini_argv(task, root, "http://127.0.0.1:9/v1", _settings(), tmp_path)
    specs = [argv[i + 1] for i, a in enumerate(argv) if a == "-c"]
    assert specs[0] == "mini_textbased.yaml"
    assert "model.model_class=litellm_textbased" in specs
    assert "model.model_kwargs.api_base=http://127.0.0.1:9/v1" in specs
    assert "agent.step_limit=8" in specs and f"environment.cwd={root}" in specs
    assert "agent.wall_time_limit_seconds=810" in specs
    assert argv[argv.index("-t") + 1] == task.prompt
    assert "--yolo" in argv and "--exit-immediately" in argv
    assert argv[argv.index("-m") + 1] == "openai/qwen2.5-coder-1.5b"


def test_peer_env_isolates_home_and_turns_telemetry_off(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("REPOCTX_MODEL_BASE_URL", "http://elsewhere")
    monkeypatch.setenv("OPENAI_API_KEY", "a-real-key")
    env = peers.peer_env(tmp_path, "http://127.0.0.1:1/v1")
    assert env["HOME"] == str(tmp_path / "home") and (tmp_path / "home").is_dir()
    assert env["OPENAI_API_KEY"] == "dummy" and "REPOCTX_MODEL_BASE_URL" not in env
    assert env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True" and env["MSWEA_CONFIGURED"] == "true"


def test_what_aider_and_mini_report(tmp_path: Path) -> None:
    out = "Applied edit to catalog/pagination.py\nApplied edit to catalog/pagination.py\n"
    assert peers.aider_report(out)["applied"] == ["catalog/pagination.py"]
    assert peers.aider_report("I cannot see the file.")["status"] == "no edit applied"
    traj = tmp_path / "t.json"
    info = {"exit_status": "Submitted", "model_stats": {"api_calls": 3}}
    traj.write_text(json.dumps({"info": info, "messages": []}))
    assert peers.mini_report(traj)["claimed_success"] and peers.mini_report(traj)["api_calls"] == 3
    info["exit_status"] = "LimitsExceeded"
    traj.write_text(json.dumps({"info": info, "messages": []}))
    assert peers.mini_report(traj)["claimed_success"] is False


# -- the server's log ----------------------------------------------------------------------------


def test_prompt_cache_use_reads_the_requests_own_prefix_line(tmp_path: Path) -> None:
    other = "Llama.generate: 10 prefix-match hit, remaining 90 prompt tokens to eval\n"
    mine = "Llama.generate: 1200 prefix-match hit, remaining 300 prompt tokens to eval\n"
    use = bench.prompt_cache_use(other + "llama_perf ...\n" + mine, 1500)
    assert (use["processed"], use["reused"]) == (300, 1200)
    # No line of its own (no shared prefix): the whole prompt was processed.
    assert bench.prompt_cache_use(other, 1500)["processed"] == 1500
    assert bench.prompt_cache_use("", 800) == {
        "processed": 800,
        "reused": 0,
        "source": "log: no prefix line",
    }
    full = "Llama.generate: full prompt already cached, skipping reset\n"
    assert bench.prompt_cache_use(mine + full, 1500)["reused"] == 1500
    assert bench.prompt_cache_use("", None)["processed"] is None
    # A streamed reply without a count (no probe): the prefix line's N + M is the prompt.
    log = tmp_path / "server.log"
    log.write_text("start\n" + mine)
    calls = [
        {"chat": True, "complete": True, "mark_start": 0, "mark_end": 6},
        {"chat": True, "complete": True, "mark_start": 6, "mark_end": log.stat().st_size},
    ]
    figures = bench.cache_figures(calls, bench.ServerLog(log))
    assert figures["per_call"][1]["prompt"] == 1500 and figures["processed_pct_after_first"] == [
        20.0
    ]
    assert figures["per_call"][0]["processed"] is None  # no line, no count: unknown


class LoggingServer:
    """A non-streaming OpenAI-compatible server on 127.0.0.1 (tests/model_server.py) that
    answers chat requests with scripted replies and usage, and appends llama-cpp-python's prefix
    line for each request to a log file (the reused part: what the prompt shares with the
    previous one, in characters)."""

    def __init__(self, replies: list[str], log: Path) -> None:
        self.replies, self.log = list(replies), log
        self.requests: list[dict[str, Any]] = []
        self.previous = ""
        self.server = ModelServer(answer=self.answer)
        self.url = self.server.base_url

    def answer(self, seen: Seen) -> Reply:
        if seen.method == "GET":
            return Reply(body={"data": [{"id": "scripted"}]})
        body = seen.body
        self.requests.append(body)
        prompt = json.dumps(body.get("messages"))
        shared = 0
        while shared < min(len(prompt), len(self.previous)) and (
            prompt[shared] == self.previous[shared]
        ):
            shared += 1
        self.previous = prompt
        with open(self.log, "a") as fh:
            if shared:
                fh.write(
                    f"Llama.generate: {shared} prefix-match hit, "
                    f"remaining {len(prompt) - shared} prompt tokens to eval\n"
                )
        text = self.replies.pop(0) if self.replies else "Nothing more to do."
        return Reply(
            body={
                "id": "x",
                "object": "chat.completion",
                "model": body.get("model"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": len(prompt),
                    "completion_tokens": 5,
                    "total_tokens": len(prompt) + 5,
                },
            }
        )

    def __enter__(self) -> LoggingServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.close()


def _post(url: str, messages: list[dict[str, str]]) -> None:
    req = urllib.request.Request(
        url + "/chat/completions",
        json.dumps({"model": "m", "messages": messages}).encode(),
        {"Content-Type": "application/json"},
    )
    urllib.request.urlopen(req, timeout=10).read()


def test_the_proxy_marks_each_requests_window_in_the_server_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("startup\n")
    server_log = bench.ServerLog(log)
    system = {"role": "system", "content": "You are a careful assistant. " * 20}
    first = [system, {"role": "user", "content": "one"}]
    second = [*first, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "two"}]
    with (
        LoggingServer(["ok", "ok"], log) as server,
        bench.RecordingProxy(server.url, probe=False) as proxy,
    ):
        proxy.mark = server_log.mark
        _post(proxy.url, first)
        _post(proxy.url, second)
    figures = bench.cache_figures(proxy.exchanges, server_log)
    one, two = figures["per_call"]
    assert one["reused"] == 0 and one["processed"] == one["prompt"]  # nothing before it
    assert two["reused"] > 0 and two["processed"] + two["reused"] == two["prompt"]
    assert two["source"] == "log: prefix-match line"
    assert figures["processed_pct_after_first"] == [
        round(two["processed"] / two["prompt"] * 100, 1)
    ]
    # Without the log the reuse is unknown, not zero.
    assert bench.cache_figures(proxy.exchanges, None)["per_call"][1]["source"] == (
        "log: no prefix line"
    )


# -- the peers, whole, against a scripted server (when installed) --------------------------------

_PAGINATION_FIXED = bench.REPOS["catalog"]["catalog/pagination.py"].replace(
    "start = page * per_page", "start = (page - 1) * per_page"
)


def _installed(exe: str) -> bool:
    return Path(exe).is_file()


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Path]:
    yield bench.write_repo(tmp_path / "fix_pagination", bench.REPOS["catalog"])


@pytest.mark.slow  # a whole Aider run: ~7 s
@pytest.mark.skipif(not _installed(peers.PeerSettings(model="m").aider), reason="no Aider venv")
def test_aider_file_runs_against_the_server_and_is_judged_from_the_files(
    catalog: Path, tmp_path: Path
) -> None:
    task = bench.TASKS_BY_NAME["fix_pagination"]
    reply = f"catalog/pagination.py\n```python\n{_PAGINATION_FIXED}```\n"
    log = tmp_path / "server.log"
    log.write_text("")
    settings = peers.PeerSettings(model="scripted", timeout=240, model_timeout=60)
    with (
        LoggingServer([reply], log) as server,
        bench.RecordingProxy(server.url, probe=False) as proxy,
    ):
        proxy.mark = bench.ServerLog(log).mark
        row = peers.run_peer("aider-file", task, catalog, proxy, settings, bench.ServerLog(log))
    assert row["outcome"] == "solved", row.get("stderr_tail") or row
    assert row["changed_files"] == ["catalog/pagination.py"]
    assert row["status"] == "applied edits to catalog/pagination.py"
    assert row["model_calls"] == 1 and row["claimed_success"] is None
    assert row["server_cache"]["calls_known"] == 1 and row["server_prompt_tokens"] > 0
    # The files named on the command line reached the model.
    assert "def paginate" in json.dumps(server.requests[0]["messages"])


@pytest.mark.slow  # a whole mini-swe-agent run: ~8 s
@pytest.mark.skipif(not _installed(peers.PeerSettings(model="m").mini), reason="no mini venv")
def test_mini_swe_agent_runs_against_the_server_and_a_claim_is_not_a_solution(
    catalog: Path, tmp_path: Path
) -> None:
    task = bench.TASKS_BY_NAME["fix_pagination"]
    replies = [
        "THOUGHT: look first.\n\n```mswea_bash_command\ncat catalog/pagination.py\n```",
        "THOUGHT: done.\n\n```mswea_bash_command\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```",
    ]
    log = tmp_path / "server.log"
    log.write_text("")
    settings = peers.PeerSettings(model="scripted", timeout=240, model_timeout=60, steps=4)
    with (
        LoggingServer(replies, log) as server,
        bench.RecordingProxy(server.url, probe=False) as proxy,
    ):
        proxy.mark = bench.ServerLog(log).mark
        row = peers.run_peer("mini-swe-agent", task, catalog, proxy, settings, bench.ServerLog(log))
    assert row["status"] == "Submitted" and row["claimed_success"] is True, row
    assert row["outcome"] == "unsolved" and row["nothing_done"]
    assert row["nothing_done_reported_success"] and row["steps"] == 2
    # The second prompt extends the first: the server's log shows the reuse.
    assert row["server_cache"]["per_call"][1]["reused"] > 0


def test_an_answered_question_is_no_claim_of_a_change_but_a_done_edit_is() -> None:
    from benchmarks.e2e_fixtures import repoctx_claimed

    vague = next(t for t in bench.TASKS if t.unchanged)
    unchanged = {"solved": True, "changed_files": []}
    answered = bench.judge(vague, unchanged, repoctx_claimed("done", "answered"))
    assert answered["solved"] and not answered["success_claimed_but_unsolved"]
    done = bench.judge(vague, unchanged, repoctx_claimed("done", "tests_passed"))
    assert not done["solved"] and done["success_claimed_but_unsolved"]
    assert repoctx_claimed("no_progress", "no_change") is False
    assert repoctx_claimed(None, None) is None
