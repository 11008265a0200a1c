"""The agent loop on real repositories: real git, real index builds, real pytest through the
tools, real checkpoints — driven by scripted models, and once by the OpenAI adapter against a
real HTTP server on 127.0.0.1 that replays a conversation."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agent.budget import Limits
from agent.loop import RunOptions, run_agent, undo_run
from agent.memory import ProjectMemory, readme_test_section
from agent.models import (
    Message,
    OpenAIClient,
    RateLimitError,
    RetryPolicy,
    ScriptedModel,
    ToolSpec,
)
from agent.plan import parse_plan
from agent.replay import render_trace
from agent.tools import Tool, default_registry, ok
from agent.trace import read_trace, resume_state, trace_path
from cli.main import cli
from cli.settings import load_config
from tests.conftest import git, make_repo
from tests.model_server import ModelServer, Reply

TOML = """
[agent]
test_env = { PYTEST_DISABLE_PLUGIN_AUTOLOAD = "1" }
"""

FILES = {
    ".repoctx.toml": TOML,
    "AGENTS.md": "Run the tests with pytest. Keep functions small.\n",
    "README.md": "# Demo\n\nIntro.\n\n## Running the tests\n\nUse `pytest -q`.\n\n## License\n\nMIT\n",
    "pkg/__init__.py": "",
    "pkg/calc.py": '''
        """Arithmetic helpers."""


        def add(a, b):
            """Sum of two numbers."""
            return a - b


        def double(x):
            return add(x, x)
        ''',
    "pkg/use.py": """
        from pkg.calc import add


        def total(xs):
            return add(xs[0], xs[1])
        """,
    "tests/test_calc.py": """
        from pkg.calc import add, double
        from pkg.use import total


        def test_add():
            assert add(1, 2) == 3


        def test_double():
            assert double(2) == 4


        def test_total():
            assert total([2, 3]) == 5
        """,
}

ALL = frozenset({"read", "write", "execute"})
PLAN = json.dumps(
    {
        "steps": [
            {"title": "Find the bug in add", "done_when": "the faulty line is known"},
            {"title": "Fix add", "done_when": "all tests pass", "check": "tests_pass"},
        ]
    }
)
FIX = {"path": "pkg/calc.py", "old_text": "return a - b", "new_text": "return a + b"}


def call(tool: str, **args: Any) -> dict:
    return {"tool_calls": [{"name": tool, "arguments": args}]}


def finish(summary: str = "Fixed add.") -> dict:
    return call("finish", summary=summary)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", FILES)


def config(root: Path):
    return load_config(root, env={}, jobs=1)


def run(root: Path, script: list, model=None, registry=None, **opts):
    limits = opts.pop("limits", Limits())
    options = RunOptions(
        limits=limits, granted=opts.pop("granted", ALL), sleep=lambda s: None, **opts
    )
    model = model or ScriptedModel(script)
    return run_agent(config(root), "Fix the bug in pkg/calc.py add", model, options, registry)


def events(root: Path, run_id: str) -> list[dict]:
    return read_trace(trace_path(config(root).index_path, run_id))


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and ".git" not in p.parts and ".repoctx" not in p.parts
    }


# -- the planted bug -----------------------------------------------------------------------------


def test_fixes_a_planted_bug_until_the_tests_pass(repo: Path) -> None:
    model = ScriptedModel(
        [
            PLAN,
            call("find_symbol", name="add"),
            call("read_span", path="pkg/calc.py", start_line=1, end_line=12),
            call("update_plan", reason="add returns a - b", complete=True),
            call("edit", **FIX),
            call("run_tests"),
            finish(),
        ]
    )
    report = run(repo, [], model=model)
    assert (report.status, report.reason) == ("done", "finished")
    assert report.final == "Fixed add."
    assert "return a + b" in (repo / "pkg/calc.py").read_text()
    assert [c.path for c in report.changed] == ["pkg/calc.py"]
    assert (report.changed[0].added, report.changed[0].removed) == (1, 1)
    assert "pkg/calc.py" in report.git_stat
    assert report.tests and report.tests[-1].passed is True
    assert report.steps == 6 and report.model_calls == 7
    assert all(s["status"] == "done" for s in report.plan["steps"])

    trace = events(repo, report.run_id)
    assert trace[0]["type"] == "header" and trace[0]["format"] == 1
    kinds = [e["type"] for e in trace]
    for kind in (
        "plan",
        "context",
        "model_call",
        "tool_call",
        "checkpoint",
        "plan_progress",
        "end",
    ):
        assert kind in kinds, kind
    ctx_events = [e for e in trace if e["type"] == "context"]
    # Every prompt stays inside its budget, retrieved code included.
    assert all(e["prompt_tokens"] <= e["budget"] for e in ctx_events)
    assert any(i["path"] == "pkg/calc.py" for e in ctx_events for i in e["items"])
    instructions = next(e for e in trace if e["type"] == "instructions")
    assert instructions["files"] == ["AGENTS.md", "README.md"]

    # The prompt of the edit step (issue 39: prefix-stable) extends the one before: the
    # system message holds the task and instructions, then the plan call with its code, then
    # every step's reply and results; the last user message says what is new (the plan, now
    # that it changed).
    edit_call = model.calls[4]
    system, first = edit_call.messages[0].content, edit_call.messages[1].content
    assert "# Task\nFix the bug in pkg/calc.py add" in system
    assert "Keep functions small" in system and "Use `pytest -q`" in system
    assert "def add(a, b)" in first and '{"steps"' in first
    assert edit_call.messages[: len(model.calls[3].messages)] == model.calls[3].messages
    last = edit_call.messages[-1].content
    assert last.startswith("Plan (updated):") and "[x] 1. Find the bug in add" in last
    assert "[>] 2. Fix add" in last
    assert [m.role for m in edit_call.messages[-3:]] == ["assistant", "tool", "user"]
    assert "Plan updated" in edit_call.messages[-2].content
    assert {"update_plan", "remember", "edit", "finish"} <= {t.name for t in edit_call.tools}

    memory = ProjectMemory.for_index(config(repo).index_path)
    assert "-m pytest" in memory.entries["test_command"].value
    assert memory.entries["test_command"].source == "run_tests"

    text = render_trace(trace)
    assert "Plan (model)" in text and "> edit" in text and "End: done" in text


def test_undo_restores_bytes(repo: Path) -> None:
    before = snapshot(repo)
    script = [
        PLAN,
        call("edit", **FIX),
        call("create_file", path="pkg/sub/notes.txt", content="new\n"),
        call("edit", path="pkg/calc.py", old_text="def double", new_text="def twice"),
        finish(),
    ]
    report = run(repo, script)
    assert {c.path for c in report.changed} == {"pkg/calc.py", "pkg/sub/notes.txt"}
    undo_run(config(repo), report.run_id[:12])
    assert snapshot(repo) == before and not (repo / "pkg/sub").exists()
    assert events(repo, report.run_id)[-1]["type"] == "undo"


def test_commit_puts_the_result_on_a_new_branch(repo: Path) -> None:
    (repo / "unrelated.txt").write_text("the user's own change\n")
    report = run(repo, [PLAN, call("edit", **FIX), finish("Fixed add.")], commit=True)
    assert report.status == "done" and report.branch and report.commit
    assert report.branch.startswith(f"repoctx/{report.run_id}-fix-the-bug")
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == report.branch
    message = git(repo, "log", "-1", "--format=%B")
    assert message.startswith("repoctx: Fix the bug in pkg/calc.py add")
    assert "Fixed add." in message and "pkg/calc.py" in message and report.run_id in message
    # Only the run's files are committed; the user's change stays uncommitted.
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == ["pkg/calc.py"]
    assert git(repo, "status", "--porcelain").strip() == "?? unrelated.txt"
    assert git(repo, "remote").strip() == ""


def test_rename_a_function_used_across_files(repo: Path) -> None:
    script = [
        json.dumps({"steps": [{"title": "Rename add to plus", "check": "tests_pass"}]}),
        call("edit", **FIX),
        call("rename_symbol", symbol="pkg.calc.add", new_name="plus"),
        call("run_tests"),
        finish("Renamed add to plus."),
    ]
    report = run(repo, script)
    assert report.status == "done"
    for rel in ("pkg/calc.py", "pkg/use.py", "tests/test_calc.py"):
        text = (repo / rel).read_text()
        assert "plus(" in text and not re.search(r"\badd\(", text), rel
    assert report.tests[-1].passed is True
    assert {c.path for c in report.changed} == {"pkg/calc.py", "pkg/use.py", "tests/test_calc.py"}


def test_syntax_gate_rejects_then_the_run_recovers(repo: Path) -> None:
    broken = {**FIX, "new_text": "return (a + b"}
    script = [PLAN, call("edit", **broken), call("edit", **FIX), call("run_tests"), finish()]
    report = run(repo, script)
    assert report.status == "done" and report.tests[-1].passed
    tools = [e for e in events(repo, report.run_id) if e["type"] == "tool_call"]
    assert tools[0]["ok"] is False and tools[0]["kind"] == "syntax"
    assert tools[1]["ok"] is True
    assert "return a + b" in (repo / "pkg/calc.py").read_text()


def test_failing_tests_revise_the_plan_with_a_reason(repo: Path) -> None:
    script = [
        json.dumps(
            {"steps": [{"title": "Run the tests", "done_when": "green", "check": "tests_pass"}]}
        ),
        call("run_tests"),
        call("edit", **FIX),
        call("run_tests"),
        finish(),
    ]
    report = run(repo, script)
    trace = events(repo, report.run_id)
    revision = next(e for e in trace if e["type"] == "plan_revision")
    assert "run_tests failed" in revision["reason"] and "Run the tests" in revision["reason"]
    assert revision["plan"]["steps"][0]["title"].startswith("Make the failing tests pass")
    assert "tests/test_calc.py::test_add" in revision["plan"]["steps"][0]["title"]
    assert [t.passed for t in report.tests] == [False, True]
    assert all(s["status"] == "done" for s in report.plan["steps"])


# -- limits --------------------------------------------------------------------------------------


def reads(n: int) -> list[dict]:
    return [
        call("read_span", path="pkg/calc.py", start_line=i + 1, end_line=i + 2) for i in range(n)
    ]


def test_step_limit(repo: Path) -> None:
    report = run(repo, [PLAN, *reads(5)], limits=Limits(max_steps=2))
    assert (report.status, report.reason, report.steps) == ("stopped", "max_steps", 2)
    assert "--resume" in report.message


def test_token_limit(repo: Path) -> None:
    report = run(repo, [PLAN, *reads(5)], limits=Limits(max_tokens=50))
    assert report.reason == "max_tokens" and report.steps < 5
    assert report.usage.total_tokens >= 50


def test_time_limit(repo: Path) -> None:
    ticks = iter(range(1000))
    report = run(repo, [PLAN, *reads(5)], limits=Limits(timeout_s=3), clock=lambda: next(ticks))
    assert report.reason == "timeout" and 0 < report.steps < 5


def test_consecutive_failure_limit(repo: Path) -> None:
    missing = [call("read_span", path=f"pkg/missing{i}.py") for i in range(5)]
    report = run(repo, [PLAN, *missing], limits=Limits(max_consecutive_failures=3))
    assert (report.reason, report.steps) == ("consecutive_failures", 3)
    kinds = [e["kind"] for e in events(repo, report.run_id) if e["type"] == "tool_call"]
    assert kinds == ["missing_file"] * 3


# -- model misbehaviour ---------------------------------------------------------------------------


def test_malformed_json_unknown_tool_and_empty_answer_are_handled(repo: Path) -> None:
    script = [
        "I will fix it.",  # not a JSON plan: one-step fallback
        {"tool_calls": [{"name": "read_span", "arguments": '{"path": "pkg/calc.py"'}]},
        call("open_file", path="pkg/calc.py"),
        "",
        call("edit", **FIX),
        "The bug is fixed.",  # text without a tool call: the model is nudged once
        finish(),
    ]
    report = run(repo, script)
    assert (report.status, report.reason) == ("done", "finished")
    trace = events(repo, report.run_id)
    plan = next(e for e in trace if e["type"] == "plan")
    assert plan["plan"]["source"] == "fallback" and "not JSON" in plan["reason"]
    tools = [e for e in trace if e["type"] == "tool_call"]
    assert [t["kind"] for t in tools[:2]] == ["bad_arguments", "unknown_tool"]
    notices = [e["kind"] for e in trace if e["type"] == "notice"]
    assert "empty_answer" in notices and "text_only" in notices
    assert "return a + b" in (repo / "pkg/calc.py").read_text()


def test_bad_pseudo_tool_calls_are_errors_for_the_model(repo: Path) -> None:
    script = [
        PLAN,
        {"tool_calls": [{"name": "update_plan", "arguments": "{not json"}]},
        call("update_plan", reason="x", steps=[{"title": ""}]),
        call("remember", key="9 bad key", value="v"),
        call("update_plan", reason="found it", steps=[{"title": "Edit add"}]),
        finish(),
    ]
    report = run(repo, script)
    trace = events(repo, report.run_id)
    tools = [e for e in trace if e["type"] == "tool_call"]
    assert [t["kind"] for t in tools[:3]] == ["bad_arguments"] * 3
    assert "Could not read the arguments of `update_plan`" in tools[0]["error"]
    revision = next(e for e in trace if e["type"] == "plan_revision")
    assert revision["reason"] == "found it" and revision["plan"]["revision"] == 1
    assert [s["title"] for s in revision["plan"]["steps"]] == ["Edit add"]


def test_the_loops_own_tools_go_through_the_registry(repo: Path) -> None:
    """update_plan and remember are validated against their schemas like every tool (an
    unknown argument, a missing one), and their results are traced like every tool's. A step
    is completed only on evidence (issue 39): nothing read yet, the first `complete` is refused."""
    script = [
        PLAN,
        call("update_plan", reason="x", complete=True, bogus=1),
        call("remember", value="v"),
        call("update_plan", reason="first step done", complete=True),
        call("read_span", path="pkg/calc.py", start_line=1, end_line=8),
        call("update_plan", reason="read_span shows add returns a - b", complete=True),
        finish(),
    ]
    report = run(repo, script)
    tools = [e for e in events(repo, report.run_id) if e["type"] == "tool_call"]
    assert "Invalid arguments for `update_plan`" in tools[0]["error"] and "bogus" in tools[0]["error"]
    assert "Invalid arguments for `remember`" in tools[1]["error"] and "key" in tools[1]["error"]
    assert not tools[2]["ok"] and "nothing was read" in tools[2]["error"]
    assert tools[4]["ok"] and tools[4]["output"].startswith("Plan updated:")


def test_endless_repetition_is_told_then_stopped(repo: Path) -> None:
    same = call("list_dir", path="pkg")
    report = run(repo, [PLAN, same, same, same, same, same])
    assert report.reason == "repetition" and report.steps == 3
    trace = events(repo, report.run_id)
    assert sum(e["type"] == "tool_call" for e in trace) == 3
    third = [e for e in trace if e["type"] == "tool_call"][2]
    assert third["ok"] is False and "3 times in a row" in third["error"]


def test_two_empty_answers_end_the_run(repo: Path) -> None:
    report = run(repo, [PLAN, "", ""])
    assert (report.status, report.reason) == ("failed", "empty_answer")


class FlakyModel:
    """Raises the given errors first, then replays a script."""

    def __init__(self, errors: list[Exception], script: list) -> None:
        self.errors, self.inner, self.name = list(errors), ScriptedModel(script), "flaky"

    def complete(self, messages, tools=(), **kw):
        if self.errors:
            raise self.errors.pop(0)
        return self.inner.complete(messages, tools, **kw)


def test_retryable_model_errors_and_context_overflow_are_retried(repo: Path) -> None:
    from agent.models import ContextTooLongError

    model = FlakyModel([RateLimitError(), ContextTooLongError()], [PLAN, finish("nothing")])
    report = run(repo, [], model=model)
    # past both errors to `finish` (which, with nothing changed on a fix task, is no_progress)
    assert (report.status, report.reason) == ("no_progress", "finished_without_change")
    trace = events(repo, report.run_id)
    assert [e["kind"] for e in trace if e["type"] == "model_error"] == [
        "model_service",
        "context_overflow",
    ]
    budgets = [e["budget"] for e in trace if e["type"] == "context"]
    assert budgets[-1] < budgets[0]


# -- interrupt, resume -----------------------------------------------------------------------------


class InterruptingModel(ScriptedModel):
    def __init__(self, script: list, at_call: int) -> None:
        super().__init__(script)
        self.at_call = at_call

    def complete(self, messages, tools=(), **kw):
        if len(self.calls) + 1 == self.at_call:
            self.calls.append(None)  # type: ignore[arg-type]
            raise KeyboardInterrupt
        return super().complete(messages, tools, **kw)


def test_interrupt_then_resume_continues_from_the_trace(repo: Path) -> None:
    first = InterruptingModel([PLAN, call("find_symbol", name="add"), call("edit", **FIX)], 4)
    report = run(repo, [], model=first)
    assert (report.status, report.reason, report.steps) == ("interrupted", "interrupted", 2)
    assert "--resume" in report.message
    state = resume_state(events(repo, report.run_id))
    assert state.next_step == 3 and len(state.history) == 2 and state.plan

    second = ScriptedModel([call("run_tests"), finish()])
    resumed = run(repo, [], model=second, resume=report.run_id)
    assert (resumed.run_id, resumed.status, resumed.steps) == (report.run_id, "done", 4)
    # No second plan call: the first call of the resumed run is a step with the saved history
    # (one line per step), then the latest reply and results as they were.
    user = second.calls[0].messages[1].content
    assert "step 1: find_symbol" in user and "step 2: edit" in user
    assert [m.role for m in second.calls[0].messages[-3:]] == ["assistant", "tool", "user"]
    assert resumed.tests[-1].passed and [c.path for c in resumed.changed] == ["pkg/calc.py"]
    kinds = [e["type"] for e in events(repo, report.run_id)]
    assert kinds.count("header") == 1 and "interrupted" in kinds and "resume" in kinds


def test_interrupt_inside_a_tool_keeps_the_completed_calls(repo: Path) -> None:
    def boom(ctx, args):
        raise KeyboardInterrupt

    registry = default_registry()
    registry.register(
        Tool("slow", "A slow tool.", {"type": "object", "properties": {}}, "read", boom)
    )
    script = [
        PLAN,
        {"tool_calls": [{"name": "edit", "arguments": FIX}, {"name": "slow", "arguments": {}}]},
    ]
    report = run(repo, script, registry=registry)
    assert report.status == "interrupted" and report.steps == 1
    state = resume_state(events(repo, report.run_id))
    assert state.next_step == 2
    # Every call of the step has an answer, so the conversation stays valid for the provider.
    assert [m.role for m in state.observation] == ["assistant", "tool", "tool"]
    assert "interrupted" in state.observation[-1].content
    undo_run(config(repo), report.run_id)
    assert "return a - b" in (repo / "pkg/calc.py").read_text()


# -- read-only and memory -----------------------------------------------------------------------


def test_read_only_offers_and_grants_only_read_tools(repo: Path) -> None:
    model = ScriptedModel([PLAN, call("edit", **FIX), finish("Cannot edit.")])
    report = run(repo, [], model=model, granted=frozenset({"read"}))
    names = {t.name for t in model.calls[1].tools}
    assert "edit" not in names and "run_tests" not in names and "read_span" in names
    tool = next(e for e in events(repo, report.run_id) if e["type"] == "tool_call")
    assert tool["kind"] == "permission"
    assert "return a - b" in (repo / "pkg/calc.py").read_text()


def test_remember_persists_and_later_runs_see_it(repo: Path) -> None:
    run(repo, [PLAN, call("remember", key="style", value="tabs are forbidden"), finish()])
    model = ScriptedModel([PLAN, finish()])
    run(repo, [], model=model)
    assert "style: tabs are forbidden" in model.calls[0].messages[0].content


def test_readme_test_section_and_plan_parsing() -> None:
    assert readme_test_section(FILES["README.md"]) == "## Running the tests\n\nUse `pytest -q`."
    plan, why = parse_plan('```json\n{"steps": [{"title": "a"}]}\n```')
    assert plan is not None and plan.steps[0].title == "a" and not why
    assert parse_plan('{"steps": []}')[0] is None
    assert parse_plan('{"steps": [{"title": "x", "check": "maybe"}]}')[0] is None


# -- CLI --------------------------------------------------------------------------------------------


def test_cli_run_replay_memory_undo(repo: Path, tmp_path: Path) -> None:
    script = tmp_path / "script.jsonl"
    lines = [PLAN, call("edit", **FIX), call("run_tests"), finish()]
    script.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    runner = CliRunner()
    base = ["--root", str(repo)]
    res = runner.invoke(
        cli, ["agent", "run", "Fix add", "--model", f"scripted:{script}", "--yes", "--json", *base]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["status"] == "done" and data["changed"][0]["path"] == "pkg/calc.py"
    run_id = data["run_id"]

    res = runner.invoke(cli, ["agent", "replay", run_id[:10], *base])
    assert res.exit_code == 0 and "> edit" in res.output and "End: done" in res.output

    res = runner.invoke(cli, ["agent", "memory", "--edit", "style=black", "--json", *base])
    assert json.loads(res.output)["style"]["value"] == "black"
    res = runner.invoke(cli, ["agent", "memory", "--forget", "style", *base])
    assert res.exit_code == 0 and "style" not in res.output

    res = runner.invoke(cli, ["agent", "undo", "last", *base])
    assert res.exit_code == 0, res.output
    assert "return a - b" in (repo / "pkg/calc.py").read_text()

    res = runner.invoke(cli, ["agent", "replay", "nope", *base])
    assert res.exit_code == 1 and "No run 'nope'" in res.output


# -- the OpenAI-compatible adapter against a real local server ------------------------------------


def chat(content: str | None, calls: list[tuple[str, str, dict]] = ()) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for cid, n, a in calls
        ]
    return {
        "id": "chatcmpl-x",
        "object": "chat.completion",
        "model": "local",
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    }


@pytest.fixture
def conversation(model_server: ModelServer) -> ModelServer:
    model_server.unscripted = Reply(400, {"error": {"message": "unscripted"}})
    return model_server


def test_openai_adapter_drives_a_whole_run(repo: Path, conversation: ModelServer) -> None:
    convo, url = conversation, conversation.base_url
    convo.replies = [
        chat(PLAN),
        chat(None, [("call_a", "read_span", {"path": "pkg/calc.py"})]),
        chat("Fixing.", [("call_b", "edit", FIX), ("call_c", "run_tests", {})]),
        chat(None, [("call_d", "finish", {"summary": "Fixed add over HTTP."})]),
    ]
    client = OpenAIClient("local", base_url=url, retry=RetryPolicy(max_retries=0))
    report = run(repo, [], model=client)
    assert (report.status, report.final) == ("done", "Fixed add over HTTP.")
    assert report.usage.total_tokens == 4 * 110
    assert report.tests[-1].passed
    reqs = convo.bodies
    # The plan call sends the same tools as the steps (one prefix for the whole run).
    assert len(reqs) == 4 and reqs[0]["tools"] == reqs[1]["tools"]
    assert {t["function"]["name"] for t in reqs[1]["tools"]} >= {"edit", "update_plan", "finish"}
    # Each request extends the one before: the assistant message with its tool calls and one
    # tool message per call, then a user message with what is new.
    last = reqs[3]["messages"]
    assert last[: len(reqs[2]["messages"])] == reqs[2]["messages"]
    assert [m["role"] for m in last[-4:]] == ["assistant", "tool", "tool", "user"]
    assert [c["id"] for c in last[-4]["tool_calls"]] == ["call_b", "call_c"]
    assert [m["tool_call_id"] for m in last[-3:-1]] == ["call_b", "call_c"]
    assert "PASSED" in last[-2]["content"]


def test_message_tool_spec_types_are_the_models_own() -> None:
    # The pseudo-tools are plain ToolSpecs any adapter can send.
    from agent.memory import REMEMBER
    from agent.plan import UPDATE_PLAN

    assert isinstance(REMEMBER, ToolSpec) and isinstance(UPDATE_PLAN, ToolSpec)
    assert Message.tool("x", "y").role == "tool"
    assert ok("fine").ok


# -- tool calls written as text (llama.cpp + Qwen), honest outcomes, time limits ----------------

MODEL = "qwen2.5-coder-1.5b"


def llama_reply(content: str) -> dict:
    """A non-streamed reply exactly as llama-cpp-python 0.3.36 sends it: the call in `content`,
    no `tool_calls`, finish_reason "stop"."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1767225600,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940},
    }


def llama_stream(content: str, pieces: int = 4) -> Reply:
    """The same reply streamed as llama-cpp-python streams it: a role delta, content deltas, an
    empty delta with the finish reason, [DONE] — and no usage (it ignores include_usage)."""
    size = max(1, -(-len(content) // pieces))
    base = {"id": "chatcmpl-2", "model": MODEL, "created": 1, "object": "chat.completion.chunk"}

    def chunk(delta: dict, finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return f"data: {json.dumps({**base, 'choices': [choice]})}\r\n\r\n"

    parts = [content[i : i + size] for i in range(0, len(content), size)]
    return Reply(
        events=[
            chunk({"role": "assistant"}),
            *(chunk({"content": p}) for p in parts),
            chunk({}, "stop"),
            "data: [DONE]\r\n\r\n",
        ]
    )


@pytest.fixture
def llama(model_server: ModelServer) -> ModelServer:
    """The shared fake server answering like llama-cpp-python's: each reply a JSON body, a
    Reply with server-sent events (llama_stream), or (status, body)."""
    model_server.unscripted = Reply(500, {"error": "unscripted"})
    return model_server


def llama_client(srv: ModelServer, **kw: Any) -> OpenAIClient:
    kw.setdefault("retry", RetryPolicy(max_retries=0))
    return OpenAIClient(MODEL, base_url=srv.base_url, sleep=lambda s: None, **kw)


FENCED_READ = (
    "```json\n"
    + json.dumps({"name": "read_span", "arguments": {"path": "pkg/calc.py", "end_line": 12}})
    + "\n```"
)
BARE_EDIT = json.dumps({"name": "edit", "arguments": FIX})
TAGGED_TEST_AND_FINISH = (
    '<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call>\n'
    '<tool_call>\n{"name": "finish", "arguments": {"summary": "add adds again."}}\n</tool_call>'
)


def test_calls_written_as_text_by_a_llama_cpp_server_are_run(repo: Path, llama) -> None:
    llama.replies = [
        llama_reply(PLAN),
        llama_stream(FENCED_READ),
        llama_reply("The sign is wrong. " + BARE_EDIT),
        llama_stream(TAGGED_TEST_AND_FINISH),
    ]
    report = run(repo, [], model=llama_client(llama, stream=True))
    assert (report.status, report.reason, report.final) == ("done", "finished", "add adds again.")
    assert "return a + b" in (repo / "pkg/calc.py").read_text()
    assert report.tests[-1].passed and report.tool_format == "text"
    trace = events(repo, report.run_id)
    assert [e["name"] for e in trace if e["type"] == "tool_call"] == [
        "read_span",
        "edit",
        "run_tests",
        "finish",
    ]
    assert all(e["ok"] for e in trace if e["type"] == "tool_call")
    (notice,) = [e for e in trace if e.get("kind") == "tool_format"]
    assert (notice["format"], notice["form"], notice["step"]) == ("text", "fenced", 1)
    end = trace[-1] if trace[-1]["type"] == "end" else next(e for e in trace if e["type"] == "end")
    assert end["summary"]["tool_format"] == {"setting": "auto", "used": "text"}
    assert trace[0]["tool_format"] == "auto"
    # The requests: tools offered with tool_choice; results of text calls come back as text
    # (no `tool` messages a template without tools could not render).
    assert llama.bodies[1]["tool_choice"] == "auto" and llama.bodies[1]["tools"]
    third = llama.bodies[2]["messages"]
    assert [m["role"] for m in third[-2:]] == ["assistant", "user"]
    assert third[-2]["content"] == FENCED_READ and "tool_calls" not in third[-2]
    assert third[-1]["content"].startswith('<tool_response name="read_span">\n')
    assert "return a - b" in third[-1]["content"]
    fourth = llama.bodies[3]["messages"]
    assert fourth[: len(third)] == third  # each request extends the one before
    assert fourth[-2]["content"].startswith("The sign is wrong.")
    assert '<tool_response name="edit">' in fourth[-1]["content"]


def test_a_malformed_call_gets_a_correction_not_an_ending(repo: Path, llama) -> None:
    broken = '<tool_call>\n{"name": "edit", "arguments": {"path": "pkg/calc.py"\n</tool_call>'
    llama.replies = [
        llama_reply(PLAN),
        llama_reply(broken),
        llama_reply(broken),  # twice in a row: still not an answer
        llama_reply(BARE_EDIT),
        llama_reply(json.dumps({"name": "finish", "arguments": {"summary": "Fixed."}})),
    ]
    report = run(repo, [], model=llama_client(llama))
    assert (report.status, report.reason) == ("done", "finished")
    trace = events(repo, report.run_id)
    notices = [e for e in trace if e.get("kind") == "malformed_call"]
    assert len(notices) == 2 and "could not be read" in notices[0]["message"]
    steps = [e for e in trace if e["type"] == "step"]
    assert [s["failed"] for s in steps[:2]] == [True, True]
    correction = llama.bodies[2]["messages"][-1]
    assert correction["role"] == "user"
    assert correction["content"].startswith("Your reply looks like a tool call")
    assert "Expecting ',' delimiter" in correction["content"]


def test_text_format_describes_the_tools_in_the_prompt_and_sends_none(repo: Path, llama) -> None:
    llama.replies = [
        llama_reply(PLAN),
        llama_reply(f"<tool_call>\n{BARE_EDIT}\n</tool_call>"),
        llama_reply(TAGGED_TEST_AND_FINISH),
    ]
    report = run(repo, [], model=llama_client(llama), tool_format="text")
    assert (report.status, report.tool_format) == ("done", "text")
    assert report.tests[-1].passed
    for request in llama.bodies[1:]:
        assert "tools" not in request and "tool_choice" not in request
        system = request["messages"][0]["content"]
        assert "<tools>" in system and '"name": "edit"' in system and "<tool_call>" in system
    assert events(repo, report.run_id)[0]["tool_format"] == "text"


def test_native_format_does_not_run_calls_written_as_text(repo: Path, llama) -> None:
    llama.replies = [
        llama_reply(PLAN),
        llama_reply(BARE_EDIT),
        chat(None, [("call_1", "finish", {"summary": "Gave up.", "status": "gave_up"})]),
    ]
    report = run(repo, [], model=llama_client(llama), tool_format="native")
    assert (report.status, report.tool_format) == ("gave_up", "native")
    assert "return a - b" in (repo / "pkg/calc.py").read_text()  # the text edit did not run
    correction = llama.bodies[2]["messages"][-1]["content"]
    assert "tool format `native`" in correction


def test_text_without_a_change_on_a_change_task_is_no_progress(repo: Path) -> None:
    model = ScriptedModel([PLAN, "The bug is in add.", "add subtracts instead of adding."])
    report = run(repo, [], model=model)
    assert (report.status, report.reason) == ("no_progress", "no_change")
    assert report.final == "" and "without changing any file" in report.message
    assert "add subtracts instead of adding." in report.message  # its last words, quoted
    # The nudge after the first text reply says that nothing has changed yet.
    assert "no file has been changed yet" in model.calls[2].messages[-1].content


def test_text_after_a_change_without_finish_is_not_completed(repo: Path) -> None:
    script = [PLAN, call("edit", **FIX), "I fixed it.", "Done."]
    report = run(repo, script)
    assert (report.status, report.reason) == ("stopped", "no_finish")
    assert "changed 1 file(s)" in report.message and "repoctx agent undo" in report.message


def test_a_question_answered_in_text_is_completed(repo: Path) -> None:
    model = ScriptedModel([PLAN, "add is in pkg/calc.py.", "add is defined at pkg/calc.py:4."])
    options = RunOptions(granted=ALL, sleep=lambda s: None)
    report = run_agent(config(repo), "Where is add defined?", model, options)
    assert (report.status, report.reason) == ("done", "answered")
    assert report.final == "add is defined at pkg/calc.py:4."


def test_cli_no_progress_exit_status_and_a_summary_without_raw_calls(
    repo: Path, tmp_path: Path
) -> None:
    runner = CliRunner()
    base = ["--root", str(repo), "--yes"]
    stuck = tmp_path / "stuck.jsonl"
    stuck.write_text("\n".join(json.dumps(x) for x in [PLAN, "I see.", "It subtracts."]) + "\n")
    res = runner.invoke(cli, ["agent", "run", "Fix add", "--model", f"scripted:{stuck}", *base])
    assert res.exit_code == 3, res.output
    assert "no_progress: no_change" in res.output and "Nothing was done" in res.output

    # A summary that carries a tool call written as text shows only its words.
    summary = 'Fixed add.\n```json\n{"name": "run_tests", "arguments": {}}\n```'
    done = tmp_path / "done.jsonl"
    done.write_text(
        "\n".join(json.dumps(x) for x in [PLAN, call("edit", **FIX), finish(summary)]) + "\n"
    )
    res = runner.invoke(cli, ["agent", "run", "Fix add", "--model", f"scripted:{done}", *base])
    assert res.exit_code == 0, res.output
    # stdout is the report (stderr shows each tool call with its arguments, as progress)
    assert "Summary: Fixed add.\nChanged: pkg/calc.py" in res.stdout
    assert '"name"' not in res.stdout and "```" not in res.stdout


def test_cli_tool_format_flag_beats_config_and_env(repo: Path, tmp_path: Path) -> None:
    (repo / ".repoctx.toml").write_text(TOML + 'tool_format = "text"\n')
    script = tmp_path / "s.jsonl"
    script.write_text("\n".join(json.dumps(x) for x in [PLAN, finish()]) + "\n")
    runner = CliRunner()
    args = ["agent", "run", "Fix add", "--model", f"scripted:{script}", "--root", str(repo)]
    env = {"REPOCTX_AGENT_TOOL_FORMAT": "native"}
    formats = []
    for extra in ([], ["--tool-format", "native"]):
        res = runner.invoke(cli, [*args, *extra, "--json"], env=env)
        assert res.exit_code == 0, res.output
        run_id = json.loads(res.stdout)["run_id"]
        formats.append(events(repo, run_id)[0]["tool_format"])
    assert formats == ["text", "native"]  # the file over the environment, the flag over both
    res = runner.invoke(cli, [*args, "--tool-format", "xml"])
    assert res.exit_code == 2 and "xml" in res.output


def test_a_stalled_stream_is_closed_before_the_loop_retries(repo: Path, llama) -> None:
    llama.replies = [
        Reply(events=llama_stream(PLAN).events[:2], stall=5),  # the model goes silent mid-reply
        llama_stream(PLAN),
        llama_stream(json.dumps({"name": "finish", "arguments": {"summary": "ok"}})),
    ]
    client = llama_client(llama, stream=True, timeout=0.5)
    report = run(repo, [], model=client, limits=Limits(model_retries=1))
    assert report.reason == "finished_without_change" and len(llama.requests) == 3
    assert llama.overlaps == [0, 0, 0]  # no request ran beside an earlier one
    (error,) = [e for e in events(repo, report.run_id) if e["type"] == "model_error"]
    assert error["kind"] == "model_service" and "stopped sending" in error["message"]


def test_the_adapter_and_the_loop_share_one_retry_budget(repo: Path, llama) -> None:
    llama.replies = [(503, {"error": {"message": "busy"}})] * 10
    client = llama_client(llama, retry=RetryPolicy(max_retries=5))
    report = run(repo, [], model=client, limits=Limits(model_retries=2))
    assert (report.status, report.reason) == ("failed", "model_service")
    # 1 try + 2 retries, not (5 + 1) * (2 + 1).
    assert len(llama.requests) == 3


@pytest.mark.parametrize(
    ("task", "change"),
    [
        ("Fix the bug in pkg/calc.py add", True),
        ("The EU total is ten times too high; fix it", True),
        ("Find and fix the bug in add", True),
        ("Can you rename add to plus?", True),
        ("Why does test_add fail? Fix it.", True),
        ("test_add fails", True),
        ("Where is add defined?", False),
        ("How does add work", False),
        ("Explain how add works", False),
        ("Could you explain add?", False),
        ("Where are add and update defined?", False),
    ],
)
def test_which_tasks_ask_for_a_change(task: str, change: bool) -> None:
    from agent.outcome import asks_for_change

    assert asks_for_change(task) is change


def test_finish_as_done_without_a_change_on_a_change_task_is_no_progress(repo: Path) -> None:
    """The model's word is not a result: `finish` says done, nothing changed, the task asked
    for a fix — no_progress (exit 3 from the CLI), and the summary is quoted, not trusted."""
    report = run(repo, [PLAN, finish("The tests passed.")])
    assert (report.status, report.reason) == ("no_progress", "finished_without_change")
    assert "no file was changed" in report.message and "The tests passed." in report.message
    fixed = run(repo, [PLAN, call("edit", **FIX), finish("Fixed add.")])
    assert (fixed.status, fixed.reason) == ("done", "finished")


def test_update_plan_with_complete_and_steps_completes_then_replaces() -> None:
    from agent.plan import apply_update

    plan, why = parse_plan(PLAN)
    assert plan is not None, why
    change = apply_update(
        plan, {"reason": "found it", "complete": True, "steps": [{"title": "Edit add"}]}
    )
    assert not isinstance(change, str)
    assert [(s.title, s.status) for s in change.plan.steps] == [
        ("Find the bug in add", "done"),
        ("Edit add", "pending"),
    ]
    assert change.plan.current.title == "Edit add" and change.title == "Find the bug in add"


def test_cli_exit_status_says_the_model_gave_up(repo: Path, tmp_path: Path) -> None:
    """finish as blocked is an honest end, not a success: exit status 4."""
    script = tmp_path / "s.json"
    script.write_text(json.dumps([PLAN, call("finish", summary="Cannot run tests here.", status="blocked")]))
    res = CliRunner().invoke(
        cli, ["agent", "run", "Fix add", "-C", str(repo), "--model", f"scripted:{script}", "--yes"]
    )
    assert res.exit_code == 4, res.output
    assert "blocked" in res.output
