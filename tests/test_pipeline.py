"""The pipeline strategy (agent/pipeline.py) on real repositories: real git, real index builds,
real pytest through the tools, real checkpoints — the model an OpenAI-compatible server on
127.0.0.1 answering from a script (as llama.cpp's server does: replies as text, no usage when
streamed), and once replaying a recorded exchange with the real Qwen2.5-Coder-1.5B server."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agent.budget import Limits
from agent.localize import localize
from agent.loop import undo_run
from agent.models import OpenAIClient, RetryPolicy
from agent.pipeline import ATTEMPTS
from agent.replay import render_trace
from agent.run_result import RunOptions
from agent.strategy import choose, model_size_b, run_task
from agent.trace import read_trace, trace_path
from cli.main import cli
from cli.settings import load_config
from indexer import Index
from tests.conftest import index, make_repo
from tests.model_server import ModelServer, Reply

TOML = '[agent]\ntest_env = { PYTEST_DISABLE_PLUGIN_AUTOLOAD = "1" }\n'
FILES = {
    ".repoctx.toml": TOML,
    "pyproject.toml": '[tool.pytest.ini_options]\npythonpath = ["."]\n',
    "pkg/__init__.py": "",
    "pkg/calc.py": '"""Arithmetic helpers."""\n\n\ndef add(a, b):\n    """Sum of two numbers."""\n'
    "    return a - b\n\n\ndef double(x):\n    return add(x, x)\n",
    "pkg/use.py": "from pkg.calc import add\n\n\ndef total(xs):\n    return add(xs[0], xs[1])\n",
    "tests/test_calc.py": "from pkg.calc import add, double\nfrom pkg.use import total\n\n\n"
    "def test_add():\n    assert add(1, 2) == 3\n\n\ndef test_double():\n"
    "    assert double(2) == 4\n\n\ndef test_total():\n    assert total([2, 3]) == 5\n",
}
TASK = "tests/test_calc.py::test_add fails: add(1, 2) returns -1. Fix the bug in the code."
ALL = frozenset({"read", "write", "execute"})
MODEL = "qwen2.5-coder-1.5b"


def block(path: str | None, search: str, replace: str, say: str = "Fix add.") -> str:
    head = f"{path}\n" if path else ""
    return f"{say}\n\n{head}<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


FIX = block("pkg/calc.py", "    return a - b\n", "    return a + b\n")
WRONG = block("pkg/calc.py", "    return a - b\n", "    return a * b\n", "Multiply.")


# -- a scripted OpenAI-compatible server ------------------------------------------------------------


def reply(content: str) -> dict:
    """A non-streamed reply as llama-cpp-python sends it: the text in `content`."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content},
             "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 500, "completion_tokens": 20, "total_tokens": 520},
    }


@pytest.fixture
def server(model_server: ModelServer) -> ModelServer:
    """The shared fake server: chat requests get the scripted replies (bodies, or recorded
    server-sent events); other paths are 404, as a server with no tokenizer endpoint."""
    model_server.chat_only = True
    return model_server


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", FILES)


def client(srv: ModelServer, **kw: Any) -> OpenAIClient:
    return OpenAIClient(MODEL, base_url=srv.base_url, retry=RetryPolicy(max_retries=0),
                        sleep=lambda s: None, **kw)


def config(root: Path):
    return load_config(root, env={}, jobs=1)


def run(root: Path, srv: ModelServer, task: str = TASK, **opts: Any):
    options = RunOptions(
        limits=opts.pop("limits", Limits(model_retries=0)),
        granted=opts.pop("granted", ALL),
        sleep=lambda s: None,
        **opts,
    )
    return run_task(config(root), task, client(srv), options, setting="pipeline")


def events(root: Path, run_id: str) -> list[dict]:
    return read_trace(trace_path(config(root).index_path, run_id))


def sent(srv: ModelServer, i: int) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in srv.chats[i]["messages"]]


# -- the pipeline end to end -----------------------------------------------------------------------


def test_localize_edit_test_done(repo: Path, server: ModelServer) -> None:
    server.replies = [reply(FIX)]
    report = run(repo, server)
    assert (report.status, report.reason, report.strategy) == ("done", "tests_passed", "pipeline")
    assert "return a + b" in (repo / "pkg/calc.py").read_text()
    assert [c.path for c in report.changed] == ["pkg/calc.py"]
    assert report.tests[-1].passed and report.model_calls == 1
    # One small request with no tools: the task and the exact code of the function, whole,
    # under its path, without line-number prefixes a small model would copy into SEARCH.
    (request,) = server.chats
    assert not request.get("tools")
    roles = [m["role"] for m in request["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    prompt = request["messages"][-1]["content"]
    assert prompt.startswith(f"# Task\n{TASK}")
    assert 'pkg/calc.py\n```python\n"""Arithmetic helpers."""' in prompt
    assert "def add(a, b):\n" in prompt and not re.search(r"^\s*\d+\s*[|:]", prompt, re.M)
    assert "assert add(1, 2) == 3" not in prompt  # the test is not shown: it is not to change
    trace = events(repo, report.run_id)
    calls = [(e["name"], e["ok"]) for e in trace if e["type"] == "tool_call"]
    # the named test before any edit (it fails), the task's example "add(1, 2) returns -1"
    # (it holds before the edit: it describes the bug, so it is not checked after), the block
    # as an edit, the tests after it
    assert calls == [("run_tests", True), ("run_command", True), ("edit", True),
                     ("run_tests", True)]  # fmt: skip
    before = next(e for e in trace if e["type"] == "tool_call")
    assert before["failing"] == ["tests/test_calc.py::test_add"]
    (strategy,) = [e for e in trace if e.get("kind") == "strategy"]
    assert strategy["strategy"] == "pipeline"
    (loc,) = [e for e in trace if e.get("kind") == "localize"]
    assert loc["localization"]["spans"][0]["path"] == "pkg/calc.py"
    text = render_trace(trace)
    assert "> edit" in text and "End: done — tests_passed" in text


def test_a_failure_is_fed_back_then_fixed_on_attempt_two(repo: Path, server: ModelServer) -> None:
    server.replies = [reply(WRONG), reply(FIX)]
    report = run(repo, server)
    assert (report.status, report.reason, report.model_calls) == ("done", "tests_passed", 2)
    assert "return a + b" in (repo / "pkg/calc.py").read_text()
    feedback = server.chats[1]["messages"][-1]["content"]
    assert feedback.startswith("The edit was applied, then these tests failed:")
    assert "FAILED tests/test_calc.py::test_add" in feedback and "assert 2 == 3" in feedback
    # Attempt 2 is applied to the code as shown: attempt 1's edit was rolled back first.
    trace = events(repo, report.run_id)
    assert any(e.get("kind") == "rollback" for e in trace)
    assert [t.passed for t in report.tests] == [False, False, True]


def test_every_request_extends_the_one_before(repo: Path, server: ModelServer) -> None:
    server.replies = [reply("I am not sure."), reply(WRONG), reply(FIX)]
    report = run(repo, server)
    assert report.status == "done" and len(server.chats) == 3
    # Each request extends the one before (its reply, then the feedback), or — a fresh sample
    # after two attempts — is the fixed messages again: a prefix of the one before. Either way
    # the server's cache holds everything before the new part.
    first = sent(server, 0)
    assert [r for r, _ in first] == ["system", "user", "assistant", "user"]
    before, now = first, sent(server, 1)
    assert now[: len(before)] == before and len(now) == len(before) + 2
    assert now[len(before)][0] == "assistant" and now[len(before) + 1][0] == "user"
    assert sent(server, 2) == first
    # Reuse is estimated for a server that reports none: the whole previous request and reply.
    calls = [e for e in events(repo, report.run_id) if e["type"] == "model_call"]
    assert calls[0]["cache"]["reused"] == 0
    assert all(c["cache"]["reused"] > 0 and c["cache"]["source"] == "estimate" for c in calls[1:])
    assert report.usage.cached_tokens > 0


def test_a_reply_without_blocks_is_no_progress(repo: Path, server: ModelServer) -> None:
    server.replies = [reply("The function looks right to me.")] * ATTEMPTS
    report = run(repo, server)
    assert (report.status, report.reason) == ("no_progress", "no_change")
    assert report.model_calls == ATTEMPTS and not report.changed
    assert "return a - b" in (repo / "pkg/calc.py").read_text()
    assert "no file was changed" in report.message
    assert "no SEARCH/REPLACE block" in server.chats[1]["messages"][-1]["content"]


def test_a_model_that_says_it_cannot_is_blocked(repo: Path, server: ModelServer) -> None:
    server.replies = [reply("CANNOT: the code needed is not shown.")]
    report = run(repo, server)
    assert (report.status, report.reason, report.model_calls) == ("blocked", "declined", 1)
    assert not report.changed


def test_a_block_on_the_failing_test_is_refused(repo: Path, server: ModelServer) -> None:
    cheat = block("tests/test_calc.py", "    assert add(1, 2) == 3\n",
                  "    assert add(1, 2) == -1\n")
    server.replies = [reply(cheat), reply(FIX)]
    report = run(repo, server)
    assert report.status == "done"
    assert (repo / "tests/test_calc.py").read_text() == FILES["tests/test_calc.py"]
    assert "change the code it tests, not the test" in server.chats[1]["messages"][-1]["content"]


def test_undo_restores_the_files(repo: Path, server: ModelServer) -> None:
    server.replies = [reply(WRONG), reply(FIX)]
    report = run(repo, server)
    assert report.status == "done"
    undo_run(config(repo), report.run_id)
    assert (repo / "pkg/calc.py").read_text() == FILES["pkg/calc.py"]


def test_resume_continues_the_conversation(repo: Path, server: ModelServer) -> None:
    server.replies = [reply("No idea.")]
    first = run(repo, server, attempts=1)
    assert first.status == "no_progress"
    server.replies = [reply(FIX)]
    options = RunOptions(limits=Limits(model_retries=0), granted=ALL, sleep=lambda s: None,
                         resume=first.run_id)
    report = run_task(config(repo), "", client(server), options)
    assert (report.run_id, report.status, report.strategy) == (first.run_id, "done", "pipeline")
    # The resumed request continues the first run's: its messages, the reply, the feedback.
    before, now = sent(server, 0), sent(server, 1)
    assert now[: len(before)] == before and now[len(before)] == ("assistant", "No idea.")
    assert report.model_calls == 2
    trace = events(repo, report.run_id)
    assert [e["type"] for e in trace].count("resume") == 1
    # localization is not redone: the test ran once before the edit, once after it
    assert [e["name"] for e in trace if e["type"] == "tool_call"] == [
        "run_tests", "run_command", "edit", "run_tests"
    ]


def test_callers_are_shown_for_a_new_parameter(tmp_path: Path) -> None:
    from benchmarks.e2e_tasks import REPOS

    root = make_repo(tmp_path / "report", REPOS["report"])
    cfg = index(root)
    idx = Index.open(cfg)
    task = "Add a parameter `currency` (default None) to `format_amount` and update its callers."
    loc = localize(idx, task, counter=lambda s: len(s) // 4)
    shown = {s.path for s in loc.spans}
    assert loc.signature_change
    assert {"report/format.py", "report/invoice.py", "report/summary.py"} <= shown
    assert not any(p.startswith("tests/") for p in shown)
    whys = {c.qualname.rsplit(".", 1)[-1]: c.reasons for c in loc.candidates}
    assert "calls format_amount" in whys["invoice_line"]
    # Without an interface change, callers are not pulled in.
    plain = localize(idx, "Make `format_amount` round half up.",
                     counter=lambda s: len(s) // 4)
    assert not plain.signature_change
    assert "report/invoice.py" not in {s.path for s in plain.spans}


# -- choosing the strategy --------------------------------------------------------------------------


def test_auto_picks_by_model_and_window() -> None:
    assert choose("auto", "gpt-4o", None).strategy == "loop"
    assert choose("auto", "gpt-4o", 128_000).strategy == "loop"
    small = choose("auto", "some-local-model", 4096)
    assert small.strategy == "pipeline" and "4,096-token context window" in small.why
    assert choose("auto", "qwen2.5-coder-1.5b", None).strategy == "pipeline"
    assert choose("auto", "ollama:llama3.2:3b", None).strategy == "pipeline"
    assert choose("auto", "ollama:qwen2.5-coder:32b", None).strategy == "loop"
    assert choose("loop", "qwen2.5-coder-1.5b", 2048).strategy == "loop"
    assert model_size_b("qwen2.5-coder:1.5b") == 1.5 and model_size_b("gpt-4o") is None


def test_cli_strategy_flag_and_auto_from_the_window(
    repo: Path, server: ModelServer, tmp_path: Path
) -> None:
    runner = CliRunner()
    env = {"REPOCTX_MODEL_BASE_URL": server.base_url, "REPOCTX_API_KEY": "x"}
    base = ["--root", str(repo), "--model", "openai:local-model", "--yes", "--json"]
    server.replies = [reply(FIX)]
    res = runner.invoke(cli, ["agent", "run", TASK, "--strategy", "pipeline", *base], env=env)
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert (data["status"], data["strategy"]) == ("done", "pipeline")
    runner.invoke(cli, ["agent", "undo", "last", "--root", str(repo)])
    # auto, with the window the configuration states: the pipeline, and the trace says why
    (repo / ".repoctx.toml").write_text(TOML + "strategy = \"auto\"\ncontext_window = 4096\n")
    server.replies = [reply("Nothing to change.")] * ATTEMPTS
    res = runner.invoke(cli, ["agent", "run", TASK, *base], env=env)
    assert res.exit_code == 3, res.output  # no_progress
    data = json.loads(res.output)
    assert data["strategy"] == "pipeline" and "4,096-token context window" in data["strategy_why"]
    trace = events(repo, data["run_id"])
    (notice,) = [e for e in trace if e.get("kind") == "strategy"]
    assert "4,096-token context window" in notice["message"]


# -- a recorded exchange with the real server ------------------------------------------------------

RECORDING = Path(__file__).parent / "recordings" / "qwen2.5-coder-1.5b-pipeline.json"


@pytest.mark.skipif(not RECORDING.exists(), reason="no recording yet")
def test_a_recorded_qwen_exchange_replays_to_done(tmp_path: Path, server: ModelServer) -> None:
    rec = json.loads(RECORDING.read_text())
    root = make_repo(tmp_path / "rec", rec["files"])
    server.replies = [
        Reply(events=[event + "\r\n\r\n" for event in x["reply"]["events"]])
        for x in rec["exchanges"]
    ]
    report = run_task(
        config(root), rec["task"], client(server, stream=True),
        RunOptions(limits=Limits(model_retries=0), granted=ALL, sleep=lambda s: None),
        setting="pipeline",
    )
    assert (report.status, report.reason) == (rec["status"], rec["reason"])
    assert report.model_calls == len(rec["exchanges"])
    # The prompt is the one the real model answered: the same messages, request by request.
    for got, want in zip(server.chats, rec["exchanges"], strict=True):
        assert got["messages"] == want["request"]["messages"]
    for path, text in rec["after"].items():
        assert (root / path).read_text() == text


PARAM_FILES = {
    ".repoctx.toml": TOML,
    "pyproject.toml": FILES["pyproject.toml"],
    "fmt/__init__.py": "",
    "fmt/num.py": "def show(x):\n    return f\"{x:.1f}\"\n",
    "fmt/line.py": "from fmt.num import show\n\n\ndef line(name, x):\n"
    "    return f\"{name}: {show(x)}\"\n",
    "tests/test_fmt.py": "from fmt.line import line\nfrom fmt.num import show\n\n\n"
    "def test_show():\n    assert show(2) == \"2.0\"\n\n\ndef test_line():\n"
    "    assert line(\"a\", 2) == \"a: 2.0\"\n",
}
PARAM_TASK = (
    "Add a parameter `unit` (default \"\") to `show` in fmt/num.py, appended after the number. "
    "Add the same parameter to its caller `line` in fmt/line.py and pass it through."
)


def test_a_named_parameter_missing_from_a_def_line_is_fed_back(
    tmp_path: Path, server: ModelServer
) -> None:
    root = make_repo(tmp_path / "fmt", PARAM_FILES)
    callers_only = block(
        "fmt/line.py", "    return f\"{name}: {show(x)}\"\n",
        "    return f\"{name}: {show(x, unit=unit)}\"\n",
    )
    whole = (
        block("fmt/num.py", "def show(x):\n    return f\"{x:.1f}\"\n",
              "def show(x, unit=\"\"):\n    return f\"{x:.1f}{unit}\"\n")
        + block("fmt/line.py", "def line(name, x):\n    return f\"{name}: {show(x)}\"\n",
                "def line(name, x, unit=\"\"):\n    return f\"{name}: {show(x, unit=unit)}\"\n",
                "")
    )
    unused = (  # `unit` named in the docstring only: not a use
        block("fmt/num.py", "def show(x):\n", "def show(x, unit=\"\"):\n    \"\"\"With unit.\"\"\"\n")
        + block("fmt/line.py", "def line(name, x):\n    return f\"{name}: {show(x)}\"\n",
                "def line(name, x, unit=\"\"):\n    return f\"{name}: {show(x, unit=unit)}\"\n",
                "")
    )
    server.replies = [reply(callers_only), reply(unused), reply(whole)]
    report = run(root, server, task=PARAM_TASK)
    assert (report.status, report.reason, report.model_calls) == ("done", "tests_passed", 3)
    # One function per request (two functions, an interface change): `show` first, and its
    # feedback is about `show` alone.
    feedback = server.chats[1]["messages"][-1]["content"]
    assert "`show` in fmt/num.py does not take `unit` yet" in feedback
    assert "`line` in fmt/line.py" not in feedback
    steps = [e for e in events(root, report.run_id) if e["type"] == "step"]
    feedback = steps[2]["observation"][-1]["content"]  # after attempt 2
    assert "`show` in fmt/num.py takes `unit` but never uses it" in feedback
    assert "`line` in fmt/line.py" not in feedback
    # Attempt 1's change to `line` was kept and completed, not thrown away: attempt 3 was a
    # fresh sample whose block for `line` was already in place.
    assert "unit=\"\"" in (root / "fmt/num.py").read_text()
    # The tests did not run on the incomplete change (they would have passed: nothing calls it).
    assert len(report.tests) == 2  # before any edit (graph-selected), and after attempt 3


def test_an_empty_reply_is_asked_again_without_counting(repo: Path, server: ModelServer) -> None:
    server.replies = [reply(""), reply(FIX)]
    report = run(repo, server, attempts=1)
    assert (report.status, report.model_calls) == ("done", 2)
    assert sent(server, 0) == sent(server, 1)  # the same request again
    assert any(e.get("kind") == "empty_answer" for e in events(repo, report.run_id))


def test_after_two_attempts_each_samples_the_first_prompt(
    repo: Path, server: ModelServer
) -> None:
    other = block("pkg/calc.py", "    return a - b\n", "    return b - a\n", "Swap.")
    server.replies = [reply(WRONG), reply(other), reply(FIX)]
    report = run(repo, server)
    assert (report.status, report.model_calls) == ("done", 3)
    first, second, third = (sent(server, i) for i in range(3))
    assert second[: len(first)] == first and len(second) == len(first) + 2  # fed back
    assert third == first  # then a fresh sample of the fixed messages, all of them cached
    temps = [r.get("temperature") for r in server.chats]
    assert temps[0] == 0.0 and temps[1] > 0 and temps[2] > 0
    # The conversation kept for a resume holds the feedback, not the sampled reply.
    steps = [e for e in events(repo, report.run_id) if e["type"] == "step"]
    assert [e.get("kept") for e in steps[1:]] == [True, True, False]


def test_the_tasks_own_example_is_checked_after_the_tests(tmp_path: Path, server: ModelServer) -> None:
    root = make_repo(tmp_path / "fmt", PARAM_FILES)
    task = PARAM_TASK + ' So show(2, unit="m") returns "2.0m".'

    def change(body: str) -> str:
        return block(
            "fmt/num.py", "def show(x):\n    return f\"{x:.1f}\"\n",
            f"def show(x, unit=\"\"):\n    return {body}\n",
        ) + block(
            "fmt/line.py", "def line(name, x):\n    return f\"{name}: {show(x)}\"\n",
            "def line(name, x, unit=\"\"):\n    return f\"{name}: {show(x, unit=unit)}\"\n", "",
        )

    spaced = 'f"{x:.1f}" + (" " + unit if unit else "")'  # the tests pass, the example not
    server.replies = [reply(change(spaced)), reply(change('f"{x:.1f}{unit}"'))]
    report = run(root, server, task=task)
    assert (report.status, report.reason, report.model_calls) == ("done", "tests_passed", 2)
    feedback = server.chats[1]["messages"][-1]["content"]
    assert feedback.startswith("The tests pass, but The task says")
    assert "returns '2.0 m'" in feedback
    checks = [e for e in events(root, report.run_id) if e.get("name") == "run_command"]
    assert [e["data"]["exit_code"] for e in checks] == [1, 1, 0]  # before, attempt 1, 2
    assert 'return f"{x:.1f}{unit}"' in (root / "fmt/num.py").read_text()


# -- one function per request (agent/pipeline_steps.py) ---------------------------------------------


def _report(tmp_path: Path) -> tuple[Path, str]:
    from benchmarks.e2e_tasks import REPOS, TASKS_BY_NAME

    return make_repo(tmp_path / "report", REPOS["report"]), TASKS_BY_NAME["add_param"].prompt


FMT_DEF = (
    "def format_amount(value):\n    \"\"\"``value`` with two decimals and thousands separators: "
    "1234.5 -> '1,234.50'.\"\"\"\n    return f\"{value:,.2f}\"\n"
)
FMT_NEW = (
    "def format_amount(value, currency=None):\n    text = f\"{value:,.2f}\"\n"
    "    return f\"{text} {currency}\" if currency else text\n"
)
INV = "def invoice_line(name, value):\n"
SUM = "def summary_total(values):\n"


def _caller(path: str, name: str, args: str, ret: str, call: str) -> str:
    return block(
        path, f"def {name}({args}):\n",
        f"def {name}({args}, currency=None):\n", f"Add currency to {name}.",
    ) + block(
        path, f"    return {ret}{{format_amount({call})}}\"\n",
        f"    return {ret}{{format_amount({call}, currency=currency)}}\"\n", "",
    )


def test_an_interface_change_is_asked_one_function_at_a_time(
    tmp_path: Path, server: ModelServer
) -> None:
    root, task = _report(tmp_path)
    server.replies = [  # the function written out whole (under its path, then without), a block
        reply(f"Add currency.\n\nreport/format.py\n```python\n{FMT_NEW}```\n"),
        reply("```python\ndef invoice_line(name, value, currency=None):\n"
              '    return f"{name}: {format_amount(value, currency=currency)}"\n```\n'),
        reply(_caller("report/summary.py", "summary_total", "values", 'f"Total: ', "sum(values)")),
    ]
    report = run(root, server, task=task)
    assert (report.status, report.reason, report.model_calls) == ("done", "tests_passed", 3)
    assert (root / "report/format.py").read_text().startswith('"""Number formatting')
    first, second, third = (sent(server, i) for i in range(3))
    # Prefix-stable: each request is the one before, its reply and one more user message.
    assert second[: len(first)] == first and len(second) == len(first) + 2
    assert third[: len(second)] == second and len(third) == len(second) + 2
    assert "First only `format_amount` in report/format.py" in first[-1][1]
    ask2, ask3 = second[-1][1], third[-1][1]
    assert ask2.startswith("Applied.") and "Now only `invoice_line` in report/invoice.py" in ask2
    # The caller's turn shows its code as it is now and the definition as the reply left it.
    assert "def invoice_line(name, value):" in ask2 and "format_amount(value)" in ask2
    assert "which is now `def format_amount(value, currency=None):`" in ask2
    assert "Now only `summary_total` in report/summary.py" in ask3
    assert "def invoice_line" not in ask3  # each request shows its own function only
    assert {c.path for c in report.changed} == {
        "report/format.py", "report/invoice.py", "report/summary.py"
    }
    verify = TASKS_BY_NAME_VERIFY()
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", verify], cwd=root, capture_output=True)
    assert done.returncode == 0, done.stderr
    steps = [e for e in events(root, report.run_id) if e["type"] == "step"]
    assert [e.get("next_location") for e in steps[1:]] == [1, 2, None]
    assert steps[0]["locations"][0]["role"] == "definition"


def TASKS_BY_NAME_VERIFY() -> str:  # noqa: N802 - the benchmark's own check of add_param
    from benchmarks.e2e_tasks import TASKS_BY_NAME

    return TASKS_BY_NAME["add_param"].verify


def test_a_location_with_an_empty_then_wrong_reply_ends_honestly(
    tmp_path: Path, server: ModelServer
) -> None:
    root, task = _report(tmp_path)
    no_block = reply("I would add the parameter to summary_total.")
    server.replies = [
        reply(block("report/format.py", FMT_DEF, FMT_NEW, "Add currency.")),
        reply(_caller("report/invoice.py", "invoice_line", "name, value", 'f"{name}: ', "value")),
        no_block, no_block,  # summary_total: asked twice, no block either time
        *[no_block] * 5,  # every later request, sent back to summary_total
    ]
    report = run(root, server, task=task, attempts=3)
    # 3 functions + 2 more requests (attempts - 1): never called done.
    assert report.model_calls == 5
    assert report.status == "stopped" and report.reason == "tests_failing"
    assert "summary_total" in report.message and report.message.startswith("After 5 attempt")
    retry = sent(server, 3)[-1][1]
    assert retry.startswith("Your reply had no code for it")
    assert "Now only `summary_total`" in retry
    # After every function's turn, the failed check goes back to the function it names.
    last = sent(server, 4)[-1][1]
    assert "`summary_total` in report/summary.py does not take `currency` yet" in last
    assert "Now only `summary_total` in report/summary.py" in last
    assert "currency=None" in (root / "report/invoice.py").read_text()
    assert "currency" not in (root / "report/summary.py").read_text()


def test_a_failing_test_goes_back_to_the_function_of_its_frame(
    tmp_path: Path, server: ModelServer
) -> None:
    root, task = _report(tmp_path)
    broken = block(
        "report/invoice.py", "def invoice_line(name, value):\n",
        "def invoice_line(name, value, currency=None):\n    value = value + 1\n", "Add it.",
    ) + block("report/invoice.py", '    return f"{name}: {format_amount(value)}"\n',
              '    return f"{name}: {format_amount(value, currency=currency)}"\n', "")
    fixed = block("report/invoice.py", "    value = value + 1\n", "", "Drop the line.")
    server.replies = [
        reply(block("report/format.py", FMT_DEF, FMT_NEW, "Add currency.")),
        reply(broken),
        reply(_caller("report/summary.py", "summary_total", "values", 'f"Total: ', "sum(values)")),
        reply(fixed),
    ]
    report = run(root, server, task=task)
    assert (report.status, report.reason, report.model_calls) == ("done", "tests_passed", 4)
    back = sent(server, 3)[-1][1]
    assert back.startswith("These tests fail now:") and "test_invoice_line" in back
    assert "Now only `invoice_line` in report/invoice.py" in back, back
    assert "value = value + 1" in back  # its code as it is now, with the wrong line


def test_a_bug_fix_stays_one_request_for_the_whole_change(repo: Path, server: ModelServer) -> None:
    server.replies = [reply(FIX)]
    report = run(repo, server)
    assert (report.status, report.model_calls) == ("done", 1)
    assert "one function at a time" not in sent(server, 0)[-1][1]
    steps = [e for e in events(repo, report.run_id) if e["type"] == "step"]
    assert steps[0]["locations"] == []


def test_a_resumed_run_asks_the_function_it_stopped_at(tmp_path: Path, server: ModelServer) -> None:
    root, task = _report(tmp_path)
    no_block = reply("I would add the parameter to summary_total.")
    server.replies = [
        reply(block("report/format.py", FMT_DEF, FMT_NEW, "Add currency.")),
        reply(_caller("report/invoice.py", "invoice_line", "name, value", 'f"{name}: ', "value")),
        no_block, no_block,
    ]
    first = run(root, server, task=task, attempts=1)
    assert (first.status, first.model_calls) == ("stopped", 4)
    server.replies = [
        reply(_caller("report/summary.py", "summary_total", "values", 'f"Total: ', "sum(values)"))
    ]
    options = RunOptions(limits=Limits(model_retries=0), granted=ALL, sleep=lambda s: None,
                         resume=first.run_id)
    report = run_task(config(root), "", client(server), options)
    assert (report.status, report.reason, report.model_calls) == ("done", "tests_passed", 5)
    before, now = sent(server, 3), sent(server, 4)
    assert now[: len(before)] == before and len(now) == len(before) + 2
    assert "Now only `summary_total` in report/summary.py" in now[-1][1]


def test_locations_are_the_definition_then_its_callers_never_for_a_rename(
    tmp_path: Path,
) -> None:
    from agent.pipeline_steps import locations
    from benchmarks.e2e_tasks import REPOS, TASKS_BY_NAME

    def locs(name: str) -> list:
        task = TASKS_BY_NAME[name]
        root = make_repo(tmp_path / name, REPOS[task.repo])
        loc = localize(Index.open(index(root)), task.prompt, counter=lambda s: len(s) // 4)
        return locations(loc, False, task.prompt)

    found = locs("add_delimiter")
    assert [(x.name, x.role) for x in found] == [
        ("csv_line", "definition"), ("customers_csv", "caller"), ("orders_csv", "caller")
    ]
    assert {x.calls for x in found[1:]} == {"csv_line"}
    # A rename changes imports and tests too, which are not functions: one request for all.
    assert locs("rename_stock_level") == []
