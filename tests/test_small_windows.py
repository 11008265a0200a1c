"""Any window from 2k (issue 39): the reply reservation shrinks with the context window, a
small window gets the compact tool set, and a small edit task completes in a 2,048-token and a
4,096-token window — whether the window is given up front or learned from llama.cpp's
overflow error. Below the minimum the run is refused naming it, with advice that can work.

The server is test_prefix_stable's scripted OpenAI-compatible server on 127.0.0.1, counting
each prompt as Qwen's chat template renders it and refusing one that does not fit its window
with llama-cpp-python's own error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.budget import Limits, reply_tokens, window_budget
from agent.errors import BudgetTooSmallError
from agent.loop import RunOptions, run_agent
from agent.prompts import COMPACT_TOOLS
from agent.trace import read_trace
from cli.settings import load_config
from tests import test_prefix_stable as stable
from tests.conftest import make_repo
from tests.test_prefix_stable import ALL, FIX, LlamaCpp, client, script

serve = stable.serve  # the recording server, as a fixture here too


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", stable.FILES)


EDIT_TASK: list[tuple[str, dict[str, Any]]] = [
    ("read_span", {"path": "pkg/calc.py", "start_line": 1, "end_line": 12}),
    ("edit", FIX),
    ("run_tests", {}),
    ("finish", {"summary": "add adds again."}),
]


def run(repo: Path, srv: LlamaCpp, limits: Limits, task: str = stable.TASK):
    options = RunOptions(limits=limits, granted=ALL, sleep=lambda s: None)
    return run_agent(load_config(repo, env={}, jobs=1), task, client(srv), options)


def model_errors(report) -> list[dict[str, Any]]:
    return [e for e in read_trace(Path(report.trace_path)) if e["type"] == "model_error"]


def test_the_reply_reservation_shrinks_with_the_window() -> None:
    assert [reply_tokens(w, 4096) for w in (2048, 4096, 8192, 32_768)] == [512, 1024, 2048, 4096]
    assert reply_tokens(2048, 300) == 300  # never more than asked
    # 4,096 reserved from a 4k window left nothing for the prompt; now 3,072 is left.
    assert window_budget(Limits(context_window=4096)) == (3072, 1024)
    assert window_budget(Limits(context_window=2048)) == (1536, 512)
    assert window_budget(Limits()) == (12_000, 4096)


@pytest.mark.parametrize(("window", "reply"), [(2048, 512), (4096, 1024)])
def test_an_edit_completes_in_a_small_window_without_overflow(
    repo: Path, serve, window: int, reply: int
) -> None:
    srv = serve(script(EDIT_TASK), shape="llama-cpp-python", window=window)
    report = run(repo, srv, Limits(context_window=window))
    assert (report.status, report.reason) == ("done", "finished"), report.message
    assert "return a + b" in (repo / "pkg/calc.py").read_text()
    assert srv.overflows == [] and model_errors(report) == []
    for body, size in zip(srv.requests, srv.sizes, strict=True):
        assert body["max_tokens"] == reply
        assert size + reply <= window  # the prompt leaves the reply its room
        assert {t["function"]["name"] for t in body["tools"]} <= set(COMPACT_TOOLS)
    assert report.tests and report.tests[-1].passed


#: A task with the test output pasted in (~1,100 tokens): the first prompt passes 4k too.
OUTPUT = "\n".join(
    f"tests/test_calc.py:{i}: in test_add\n    assert add(1, 2) == 3\nE   assert -1 == 3"
    for i in range(5, 35)
)


@pytest.mark.parametrize(("window", "task"), [(2048, ""), (4096, OUTPUT)])
def test_a_window_learned_from_llama_cpps_overflow_error(
    repo: Path, serve, window: int, task: str
) -> None:
    """Nobody said the window: the first request (12,000-token budget, full tool set) is
    refused by the server, which names its window; the run shrinks prompt and reply into it,
    switches to the compact tools, and completes without another overflow."""
    srv = serve(script(EDIT_TASK), shape="llama-cpp-python", window=window)
    report = run(repo, srv, Limits(), task=f"Fix the bug in pkg/calc.py add\n{task}".strip())
    assert (report.status, report.reason) == ("done", "finished"), report.message
    assert "return a + b" in (repo / "pkg/calc.py").read_text()
    assert len(srv.overflows) == 1
    assert [e["kind"] for e in model_errors(report)] == ["context_overflow"]
    accepted = srv.requests[1:]  # after the refused first one
    assert len(accepted) == len(srv.sizes) == 5
    for body, size in zip(accepted, srv.sizes, strict=True):
        assert size + body["max_tokens"] <= window
        assert body["max_tokens"] == reply_tokens(window, 4096)
    notices = [e for e in read_trace(Path(report.trace_path)) if e.get("kind") == "compact_tools"]
    assert len(notices) == 1


def test_below_the_minimum_the_run_is_refused_with_advice_that_can_work(repo: Path) -> None:
    with pytest.raises(BudgetTooSmallError) as info:
        run_agent(load_config(repo, env={}, jobs=1), "Fix the bug in pkg/calc.py add",
                  client(LlamaCpp([])), RunOptions(limits=Limits(context_window=1024),
                                                      granted=ALL))  # fmt: skip
    message = str(info.value)
    assert "the minimum is" in message and "--strategy pipeline" in message
    assert "--ctx-size" in message and "retrieval budget" not in message
    # The stated minimum: a window of at most 2,048 tokens holds the compact frame.
    window = int(message.split("a context window of ")[1].split(" ")[0].replace(",", ""))
    assert info.value.minimum + 512 == window <= 2048


def test_a_server_window_below_the_minimum_ends_the_run_with_the_minimum(
    repo: Path, serve
) -> None:
    srv = serve(script(EDIT_TASK), shape="llama-cpp-python", window=900)
    report = run(repo, srv, Limits())
    assert (report.status, report.reason) == ("failed", "context_overflow")
    assert "the minimum is" in report.message and "--strategy pipeline" in report.message
    assert "retrieval budget" not in report.message
    assert "context window of 900 tokens" in report.message
    assert (repo / "pkg/calc.py").read_text().count("return a - b") == 1
    assert json.dumps(srv.requests[0]["tools"])  # it did ask, once, with the full set
