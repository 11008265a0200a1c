"""Replays of real exchanges with llama-cpp-python 0.3.36 + Qwen2.5-Coder-1.5B (recorded by
benchmarks/record_llm.py into tests/recordings/), served from 127.0.0.1 byte for byte, through
the real OpenAI adapter and the real agent loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.budget import Limits
from agent.loop import RunOptions, run_agent
from agent.memory import REMEMBER
from agent.models import Message, OpenAIClient, RetryPolicy, parse_text_calls
from agent.plan import UPDATE_PLAN
from agent.prompts import SYSTEM_PROMPT
from agent.tools import default_registry
from agent.trace import read_trace
from cli.settings import load_config
from tests.conftest import make_repo
from tests.model_server import ModelServer, recorded

RECORDINGS = Path(__file__).parent / "recordings"
SINGLE = sorted(RECORDINGS.glob("*-single.json"))
RUNS = sorted(RECORDINGS.glob("*-run.json"))
ALL = frozenset({"read", "write", "execute"})


@pytest.fixture
def replay(model_server: ModelServer) -> tuple[ModelServer, str]:
    """The shared fake server serving recorded replies (dicts) as the real server sent them."""
    model_server.answer = lambda seen: recorded(
        model_server.replies.pop(0) if model_server.replies else {"status": 500, "body": {}}
    )
    return model_server, model_server.base_url


def test_recordings_are_there() -> None:
    assert SINGLE and RUNS, "run benchmarks/record_llm.py against the local model server"


@pytest.mark.parametrize("path", SINGLE, ids=lambda p: p.stem)
def test_single_exchanges_are_text_calls_the_agent_reads(path: Path, replay) -> None:
    server, url = replay
    recording = json.loads(path.read_text())
    tools = [*default_registry().specs(ALL), UPDATE_PLAN, REMEMBER]
    registry = default_registry()
    for exchange in recording["exchanges"]:
        request = exchange["request"]
        server.replies = [exchange["reply"]]
        client = OpenAIClient(
            recording["model"],
            base_url=url,
            stream=bool(request.get("stream")),
            retry=RetryPolicy(max_retries=0),
        )
        user = request["messages"][1]["content"]
        result = client.complete(
            [Message.system(SYSTEM_PROMPT), Message.user(user)], tools, max_tokens=300
        )
        sent = server.bodies[-1]
        # What the adapter sends today is what was sent to the real server.
        assert [t["function"]["name"] for t in sent["tools"]] == request["tools"]
        assert sent.get("tool_choice") == request.get("tool_choice") == "auto"
        assert sent["messages"][0]["content"] == SYSTEM_PROMPT
        # The real server's shape: no tool_calls, finish "stop", no usage when streamed.
        assert result.message.tool_calls == () and result.finish_reason == "stop"
        if request.get("stream"):
            assert result.usage.total_tokens == 0
        parsed = parse_text_calls(result.message.content, names=recording["tools"])
        assert parsed.calls and not parsed.malformed, result.message.content
        for call in parsed.calls:
            assert call.name in registry, call.name
            assert call.arguments is not None and call.error is None
        assert parsed.text == ""  # nothing but the call(s): no raw call left as an "answer"


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.stem)
def test_a_recorded_agent_run_replays_through_the_adapter_and_the_loop(
    path: Path, replay, tmp_path: Path
) -> None:
    server, url = replay
    recording = json.loads(path.read_text())
    server.replies = [e["reply"] for e in recording["exchanges"]]
    root = make_repo(tmp_path / "repo", recording["files"])
    client = OpenAIClient(
        recording["model"], base_url=url, stream=True, retry=RetryPolicy(max_retries=0)
    )
    report = run_agent(
        load_config(root, env={}, jobs=1),
        recording["task"],
        client,
        RunOptions(
            limits=Limits(**recording["limits"]),
            granted=ALL,
            tool_format="auto",
            sleep=lambda s: None,
        ),
    )
    want = recording["outcome"]
    trace = read_trace(Path(report.trace_path))
    calls = [{"name": e["name"], "ok": e["ok"]} for e in trace if e["type"] == "tool_call"]
    assert calls == want["tool_calls"] and calls, "the text-form calls ran, as when recorded"
    assert (report.status, report.reason, report.tool_format) == (
        want["status"],
        want["reason"],
        want["tool_format"],
    )
    assert (report.steps, report.model_calls) == (want["steps"], want["model_calls"])
    assert [c.path for c in report.changed] == want["changed"]
    # The loop asked what it asked when recording: the same tools, format and conversation.
    assert len(server.bodies) == len(recording["exchanges"])
    for sent, exchange in zip(server.bodies, recording["exchanges"], strict=True):
        recorded = exchange["request"]
        assert [t["function"]["name"] for t in sent.get("tools", [])] == recorded.get("tools", [])
        assert sent.get("tool_choice") == recorded.get("tool_choice")
        assert [m["role"] for m in sent["messages"]] == [m["role"] for m in recorded["messages"]]
    # The model's usage is counted by the loop (llama.cpp streams none).
    assert report.usage.total_tokens > 0
    assert report.final == "" or "{" not in report.final
