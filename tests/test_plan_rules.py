"""A plan that cannot be gamed (issue 39): `update_plan` completes a step only on the evidence its
criterion names — a passing test run after the last edit, a changed file, something read — taken
from the run's own records; steps that only update the plan end the run honestly; calls that
differ by a word, spacing, key order or a path's spelling are repeats; and the plan prompt gives
a small model nothing it could copy as a value. Real git repositories, real pytest through
`run_tests`, real edits; models are scripted, once through a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from agent.budget import Limits
from agent.guard import NUDGE_PLAN_ONLY, PLAN_ONLY_NUDGE, PLAN_ONLY_STOP, Guard
from agent.loop import RunOptions, run_agent
from agent.models import OpenAIClient, RetryPolicy, ScriptedModel
from agent.models.base import ToolCall
from agent.plan import (
    CHANGE,
    PLAN_PROMPT,
    READ,
    TESTS,
    UPDATE_PLAN,
    Plan,
    PlanStep,
    apply_update,
    echoes,
    needs,
    parse_plan,
)
from agent.trace import canonical_arguments, read_trace, trace_path
from cli.settings import load_config
from tests.conftest import make_repo
from tests.model_server import ModelServer, Reply

FILES = {
    ".repoctx.toml": '[agent]\ntest_env = { PYTEST_DISABLE_PLUGIN_AUTOLOAD = "1" }\n',
    "pkg/__init__.py": "",
    "pkg/calc.py": '''
        """Arithmetic helpers."""


        def add(a, b):
            """Sum of two numbers."""
            return a - b
        ''',
    "tests/test_calc.py": """
        from pkg.calc import add


        def test_add():
            assert add(1, 2) == 3
        """,
}
ALL = frozenset({"read", "write", "execute"})
FIX = {"path": "pkg/calc.py", "old_text": "return a - b", "new_text": "return a + b"}
TASK = "Fix the bug in pkg/calc.py add"


def plan(*steps: dict) -> str:
    return json.dumps({"steps": list(steps)})


def call(tool: str, **args: Any) -> dict:
    return {"tool_calls": [{"name": tool, "arguments": args}]}


def complete(reason: str) -> dict:
    return call("update_plan", reason=reason, complete=True)


def finish(summary: str = "Fixed add.") -> dict:
    return call("finish", summary=summary)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", FILES)


def config(root: Path):
    return load_config(root, env={}, jobs=1)


def run(root: Path, model, limits: Limits | None = None, **opts: Any):
    options = RunOptions(limits=limits or Limits(), granted=ALL, sleep=lambda s: None, **opts)
    return run_agent(config(root), TASK, model, options)


def events(root: Path, run_id: str) -> list[dict]:
    return read_trace(trace_path(config(root).index_path, run_id))


def plan_calls(root: Path, run_id: str) -> list[dict]:
    return [
        e for e in events(root, run_id) if e["type"] == "tool_call" and e["name"] == "update_plan"
    ]


# -- complete needs the evidence its step names --------------------------------------------------


def test_a_tests_step_completes_only_after_a_passing_run_after_the_last_edit(repo: Path) -> None:
    model = ScriptedModel(
        [
            plan(
                {"title": "Fix add", "done_when": "the calc tests pass"},
                {"title": "Tell the user", "done_when": "the user knows what changed"},
            ),
            call("run_tests"),  # fails: the bug is still there
            complete("the tests pass"),
            call("edit", **FIX),
            complete("add is fixed"),
            call("run_tests"),  # passes
            complete("run_tests passed after the edit"),
            finish(),
        ]
    )
    report = run(repo, model)
    assert (report.status, report.reason) == ("done", "finished")
    refused_failed, refused_stale, accepted = plan_calls(repo, report.run_id)
    assert (
        not refused_failed["ok"] and "the last test run (step 1) failed" in refused_failed["error"]
    )
    assert "Next: fix the code, then call run_tests" in refused_failed["error"]
    assert not refused_stale["ok"] and "not run since the last edit" in refused_stale["error"]
    assert refused_stale["error"].endswith("Next: call run_tests, then mark the step complete.")
    # One line, quoting the model's own call first and naming the step — never "Plan updated".
    for refused, reason in ((refused_failed, "the tests pass"), (refused_stale, "add is fixed")):
        assert "\n" not in refused["error"] and 'step "Fix add"' in refused["error"]
        quoted = f'update_plan: refused your call update_plan (complete: true, reason: "{reason}")'
        assert refused["error"].startswith(quoted)
        assert "Plan updated" not in (refused["output"] or "")
    assert accepted["ok"] and accepted["output"].startswith("Plan updated:")
    progress = [e for e in events(repo, report.run_id) if e["type"] == "plan_progress"]
    assert (
        progress[0]["title"] == "Fix add"
        and progress[0]["reason"] == "run_tests passed after the edit"
    )
    assert [t.passed for t in report.tests] == [False, True]


def test_a_change_step_completes_only_after_a_real_edit(repo: Path) -> None:
    model = ScriptedModel(
        [
            plan({"title": "Make add return the sum", "done_when": "add returns a + b"}),
            call("read_span", path="pkg/calc.py", start_line=1, end_line=8),
            complete("add returns a + b now"),
            call("edit", **FIX),
            complete("the edit replaced a - b with a + b"),
            finish(),
        ]
    )
    report = run(repo, model)
    refused, accepted = plan_calls(repo, report.run_id)
    assert not refused["ok"] and "no file has been changed in this run" in refused["error"]
    assert (
        'refused your call update_plan (complete: true, reason: "add returns a + b now")'
        in (refused["error"])
    )
    assert "Next: make the change with an edit" in refused["error"]
    assert accepted["ok"] and "[x] 1. Make add return the sum" in accepted["output"]
    assert (report.status, [c.path for c in report.changed]) == ("done", ["pkg/calc.py"])


def test_the_evidence_survives_a_resume(repo: Path) -> None:
    """The evidence is the run's record, so a resumed run still knows its passing test run —
    and still wants a fresh look for a step that began after it."""
    first = ScriptedModel(
        [
            plan(
                {"title": "Fix add", "done_when": "the calc tests pass"},
                {"title": "Double-check add", "done_when": "add(2, 2) is seen to be 4"},
            ),
            call("edit", **FIX),
            call("run_tests"),
        ]
    )
    stopped = run(repo, first, Limits(max_steps=2))
    assert stopped.reason == "max_steps" and stopped.tests[-1].passed
    second = ScriptedModel(
        [
            complete("run_tests passed at step 2"),
            complete("add(2, 2) is 4"),  # nothing looked at since this step began
            call("read_span", path="pkg/calc.py", start_line=4, end_line=6),
            complete("read_span shows return a + b"),
            finish(),
        ]
    )
    resumed = run(repo, second, resume=stopped.run_id)
    fixed, unseen, seen = plan_calls(repo, resumed.run_id)
    assert fixed["ok"], fixed["error"]
    assert (
        not unseen["ok"]
        and "nothing was read, searched or run since this step began" in unseen["error"]
    )
    assert seen["ok"] and resumed.status == "done"


@pytest.mark.parametrize(
    ("title", "done_when", "check", "need"),
    [
        ("Fix add", "all tests pass", None, TESTS),
        ("Fix the bug", "observable completion criterion of `test_add` passing", None, TESTS),
        ("Anything", "", "tests_pass", TESTS),
        ("Find the bug in add", "the faulty line is known", None, READ),
        ("Find the bug", "the bug is found and fixed", None, READ),  # never stricter than said
        ("Look around", "", "changed", CHANGE),  # the plan may declare it
        ("Add an optional parameter", "", None, CHANGE),
        ("Add an optional parameter", "the parameter exists", None, CHANGE),
        ("Make add return the sum", "add returns a + b", None, CHANGE),
        ("Think", "it is clear", None, READ),
        ("Fix add", "the calc tests no longer fail", None, TESTS),
        ("Fix the failing test", "", None, TESTS),
        ("Find the failing test", "", None, READ),
        # written by the live Qwen2.5-Coder-1.5B for the new prompt
        (
            "Identify the issue in the test",
            "the test fails with an error message indicating that apply_discount(200, 10) "
            "returns -1800",
            None,
            READ,
        ),
        (
            "Add a new parameter `minimum` to the function `apply_discount`",
            "the function is defined and the type of `percent` is float or int",
            None,
            CHANGE,
        ),
        (
            "Add a new test case for the `minimum` parameter",
            "the function is updated to handle the new parameter, and the new test case passes",
            "tests_pass",
            TESTS,
        ),
    ],
)
def test_what_a_step_needs_follows_from_its_criterion(title, done_when, check, need) -> None:
    assert needs(PlanStep(title, done_when, check)) == need


# -- plan-only steps are no progress -------------------------------------------------------------

#: Thirteen plan updates a small model might send, no two of them alike.
PLAN_ONLY = [
    complete("The bug has been fixed in pkg/calc.py."),
    call("update_plan", reason="Looking at add next", steps=[{"title": "Inspect add"}]),
    call("remember", key="style", value="four spaces"),
    complete("Now the subtraction is an addition"),
    call("update_plan", reason="Rethinking the approach", steps=[{"title": "Check tests"}]),
    complete("All good according to my analysis"),
    call("remember", key="tests", value="pytest under tests/"),
    complete("Verified manually that sums work"),
    call("update_plan", reason="Another idea about callers", steps=[{"title": "Read use"}]),
    complete("Done with this part"),
    complete("Moving on to finishing"),
    call("update_plan", reason="Final plan", steps=[{"title": "Finish"}]),
    complete("Everything works"),
]


def test_thirteen_plan_only_steps_end_the_run_honestly_within_the_bound(repo: Path) -> None:
    model = ScriptedModel(
        [plan({"title": "Fix add", "done_when": "the calc tests pass"}), *PLAN_ONLY]
    )
    report = run(repo, model)
    assert (report.status, report.reason) == ("no_progress", "plan_only")
    assert report.steps == PLAN_ONLY_STOP < len(PLAN_ONLY) and model.remaining > 0
    assert "only updated its plan" in report.message and "Nothing was done" in report.message
    assert 'Its last call: "update_plan' in report.message  # quoted, not trusted
    trace = events(repo, report.run_id)
    notices = [e for e in trace if e["type"] == "notice" and e.get("kind") == "plan_only"]
    assert [n["step"] for n in notices] == [PLAN_ONLY_NUDGE]  # told once
    # The model saw the nudge in the step after it.
    told = model.calls[PLAN_ONLY_NUDGE + 1].messages
    assert any(NUDGE_PLAN_ONLY in m.content for m in told[2:])
    assert all(s["status"] != "done" for s in report.plan["steps"])


def test_plan_only_after_a_change_stops_without_claiming_it(repo: Path) -> None:
    model = ScriptedModel([plan({"title": "Fix add"}), call("edit", **FIX), *PLAN_ONLY])
    report = run(repo, model)
    assert (report.status, report.reason) == ("stopped", "plan_only")
    assert report.steps == 1 + PLAN_ONLY_STOP and "undo" in report.message


def test_a_real_action_resets_the_plan_only_count(repo: Path) -> None:
    """Each streak of plan-only steps is told once, at its third; a read starts the count
    again, so four more do not end the run (its `finish` does, honestly: nothing changed)."""
    read = call("read_span", path="pkg/calc.py", start_line=1, end_line=3)
    script = [*PLAN_ONLY[:4], read, *PLAN_ONLY[4:8], finish()]
    model = ScriptedModel([plan({"title": "Fix add"}), *script])
    report = run(repo, model)
    assert report.reason == "finished_without_change" and report.steps == len(script)
    notices = [e["step"] for e in events(repo, report.run_id) if e.get("kind") == "plan_only"]
    assert notices == [PLAN_ONLY_NUDGE, 5 + PLAN_ONLY_NUDGE]


# -- near-identical repetition -------------------------------------------------------------------


def tool_call(name: str, raw: str) -> ToolCall:
    return ToolCall("c1", name, json.loads(raw), raw)


def signature(name: str, raw: str) -> tuple[tuple[str, str], ...]:
    """As the loop builds it: each call's name and canonical arguments."""
    return ((name, canonical_arguments(tool_call(name, raw))),)


@pytest.mark.parametrize(
    ("name", "variants", "different"),
    [
        pytest.param(
            "search_code",
            [
                '{"query": "where is tax computed"}',
                '{"query": "where is  tax\\ncomputed "}',
                '{"query": "Where is tax computed?"}',
            ],
            '{"query": "where is the discount applied"}',
            id="whitespace-and-case",
        ),
        pytest.param(
            "update_plan",
            [
                '{"reason": "The bug has been fixed in pkg/calc.py.", "complete": true}',
                '{"reason": "The bug was fixed in pkg/calc.py.", "complete": true}',
                '{"reason": "The bug is fixed in pkg/calc.py", "complete": true}',
            ],
            '{"reason": "run_tests passed after the edit", "complete": true}',
            id="one-word",
        ),
        pytest.param(
            "read_span",
            [
                '{"path": "pkg/calc.py", "start_line": 1, "end_line": 9}',
                '{"end_line": 9, "start_line": 1, "path": "pkg/calc.py"}',
                '{"start_line": 1, "path": "pkg/calc.py", "end_line": 9}',
            ],
            '{"path": "pkg/calc.py", "start_line": 10, "end_line": 19}',  # the next page
            id="key-order",  # canonical_arguments already sorted keys; kept covered
        ),
        pytest.param(
            "read_span",
            ['{"path": "pkg/calc.py"}', '{"path": "./pkg/calc.py"}', '{"path": "pkg//./calc.py"}'],
            '{"path": "pkg/use.py"}',
            id="path-spelling",
        ),
        pytest.param(
            "update_plan",
            [
                '{"reason": "Step one done", "complete": true}',
                '{"reason": "Step two done", "complete": true, "steps": null}',
                '{"reason": "Step three done", "complete": true}',
            ],
            '{"reason": "Step three done", "complete": false}',
            id="null-and-a-counter",
        ),
        pytest.param(
            "edit",
            [
                '{"path": "pkg/calc.py", "old_text": "return a - b", "new_text": "return a + b"}',
                '{"path": "pkg/calc.py", "old_text": "return  a - b", "new_text": "return a + b"}',
                '{"path": "pkg/calc.py", "old_text": "return a - b\\n", "new_text": "return a + b"}',
            ],
            # the next caller: code differing by a word is another edit, not a repeat
            '{"path": "pkg/calc.py", "old_text": "return a - c", "new_text": "return a + c"}',
            id="code-spacing",
        ),
    ],
)
def test_calls_differing_by_a_word_or_spelling_are_repeats(name, variants, different) -> None:
    guard = Guard(Limits(max_repeats=3))
    verdicts = [guard.calls(signature(name, raw)) for raw in variants]
    assert verdicts == ["run", "run", "block"]
    assert guard.calls(signature(name, variants[0])) == "stop"
    # What is really another call starts the count again.
    fresh = Guard(Limits(max_repeats=3))
    assert [fresh.calls(signature(name, raw)) for raw in (*variants[:2], different)] == ["run"] * 3
    assert fresh.repeats == 1


def test_near_repeats_through_the_loop_are_told_then_stopped(repo: Path) -> None:
    queries = ["where is tax computed", "where is the tax computed", "Where is tax  computed?"]
    searches = [call("search_code", query=q) for q in [*queries, queries[0]]]
    report = run(repo, ScriptedModel([plan({"title": "Find add"}), *searches]))
    assert (report.reason, report.steps) == ("repetition", 3)  # the 4th is not run
    third = [e for e in events(repo, report.run_id) if e["type"] == "tool_call"][2]
    assert not third["ok"] and "differing only by a word or spacing" in third["error"]


# -- prompts a small model does not echo ---------------------------------------------------------

#: The plan the real Qwen2.5-Coder-1.5B wrote for the earlier prompt
#: (tests/recordings/qwen2.5-coder-1.5b-run.json): its placeholder became the criterion.
RECORDED_PLAN = """```json
{
  "steps": [
    {"title": "Identify the bug", "done_when": "observable completion criterion of `test_add` failing", "check": null},
    {"title": "Fix the bug in pkg/calc.py", "done_when": "observable completion criterion of `test_add` passing", "check": "tests_pass"}
  ]
}
```"""


def test_the_plan_prompt_has_no_placeholder_that_reads_like_a_value() -> None:
    assert not re.search(r"<[^>\n]{1,40}>", PLAN_PROMPT)  # no "<criterion>"
    assert "observable completion criterion" not in PLAN_PROMPT
    shape, example = PLAN_PROMPT.splitlines()[1], PLAN_PROMPT.splitlines()[-1]
    assert '"title": ...' in shape and '"done_when": ...' in shape  # a shape, not values
    assert "Example only, for an unrelated task" in PLAN_PROMPT and json.loads(example)["steps"]
    # A plan copying the example is no plan for this task; its copied criterion is dropped.
    assert parse_plan(example)[0] is None and "copies the prompt" in parse_plan(example)[1]


def test_a_copied_criterion_is_dropped_and_the_step_keeps_its_own_needs() -> None:
    recorded, why = parse_plan(RECORDED_PLAN)
    assert recorded is not None, why
    assert [s.done_when for s in recorded.steps] == ["", ""]
    assert [needs(s) for s in recorded.steps] == [READ, TESTS]
    own, _ = parse_plan(plan({"title": "Fix add", "done_when": "the tests pass"}))
    assert own is not None and own.steps[0].done_when == "the tests pass"


@pytest.mark.parametrize(
    "description",
    [UPDATE_PLAN.description]
    + [
        p["description"]
        for p in UPDATE_PLAN.parameters["properties"].values()
        if "description" in p
    ],
)
def test_a_reason_copied_from_a_description_is_refused(description: str) -> None:
    current = Plan((PlanStep("Fix add", "the tests pass"),))
    change = apply_update(current, {"reason": description, "steps": [{"title": "Edit add"}]})
    assert isinstance(change, str) and "repeats the tool's description" in change
    assert change.startswith("refused your call update_plan (reason: ")
    own = apply_update(current, {"reason": "the tests pass", "steps": [{"title": "Edit add"}]})
    assert not isinstance(own, str) and not echoes("the tests pass")


# -- end to end: a llama.cpp-style server, calls written as text ---------------------------------


def text_reply(content: str) -> dict:
    """A non-streamed reply as llama-cpp-python sends it: the call in `content`, no tool_calls."""
    message = {"role": "assistant", "content": content}
    usage = {"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return {
        "id": "c",
        "object": "chat.completion",
        "model": "qwen",
        "choices": [choice],
        "usage": usage,
    }


def text_call(tool: str, **args: Any) -> dict:
    return text_reply("```json\n" + json.dumps({"name": tool, "arguments": args}) + "\n```")


@pytest.fixture
def server(model_server: ModelServer) -> ModelServer:
    model_server.unscripted = Reply(500, {"error": "unscripted"})
    return model_server


def test_a_claimed_fix_is_refused_until_the_run_shows_it_end_to_end(
    repo: Path, server: ModelServer
) -> None:
    """The recorded 1.5B pattern — a copied criterion, then "The bug has been fixed" with
    nothing changed — through the OpenAI adapter and the loop: refused with its own call
    quoted back, and the run completes only after the real edit and a passing test run."""
    claim = {"reason": "The bug has been fixed in pkg/calc.py.", "complete": True}
    server.replies += [
        text_reply(RECORDED_PLAN),
        text_call("find_symbol", name="add"),
        text_call(
            "update_plan", reason="Found add in pkg/calc.py: it returns a - b.", complete=True
        ),
        text_call("update_plan", **claim),
        text_call("edit", **FIX),
        text_call("run_tests"),  # the tests_pass step completes itself on the passing run
        text_call("finish", summary="add returns a + b."),
    ]
    client = OpenAIClient(
        "qwen", base_url=server.base_url, retry=RetryPolicy(max_retries=0), sleep=lambda s: None
    )
    report = run(repo, client)
    assert (report.status, report.reason) == ("done", "finished")
    assert "return a + b" in (repo / "pkg/calc.py").read_text()
    found, claimed = plan_calls(repo, report.run_id)
    assert found["ok"] and not claimed["ok"]
    assert "the tests have not run yet" in claimed["error"]  # its step: done when tests pass
    # The model is shown its own call in the refusal, in the next request.
    shown = " ".join(m["content"] or "" for m in server.bodies[4]["messages"])
    assert 'refused your call update_plan (complete: true, reason: "The bug has been fixed' in shown
    assert "Next: call run_tests, then mark the step complete." in shown
    assert all(s["status"] == "done" for s in report.plan["steps"])
