"""Ollama's native API through the real adapter, against a 127.0.0.1 server that speaks Ollama's
`/api/chat`: newline-delimited JSON streamed one object per write, tool calls as objects,
`options.num_ctx`, and Ollama's error bodies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.budget import Limits
from agent.loop import RunOptions, run_agent
from agent.models import (
    Message,
    OllamaClient,
    OpenAIClient,
    RetryPolicy,
    ServiceError,
    ToolCall,
    ToolSpec,
    UnknownModelError,
    create_model,
    model_tokenizer,
)
from agent.models.ollama import ollama_base_url
from cli.settings import load_config
from tests.conftest import make_repo
from tests.model_server import ModelServer, Reply, Seen
from tests.test_agent_loop import FILES, FIX, PLAN

MODEL = "qwen2.5-coder:7b"
READ = ToolSpec(
    "read_span",
    "Read lines of a file.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


def line(content: str = "", done: bool = False, calls: list | None = None, **extra: Any) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls is not None:
        message["tool_calls"] = calls
    return {
        "model": MODEL,
        "created_at": "2026-12-02T05:00:00.000000Z",
        "message": message,
        "done": done,
        **extra,
    }


def final(reason: str = "stop", prompt: int = 312, completion: int = 21) -> dict:
    return line(
        done=True,
        done_reason=reason,
        total_duration=4_120_000_000,
        load_duration=20_000_000,
        prompt_eval_count=prompt,
        prompt_eval_duration=900_000_000,
        eval_count=completion,
        eval_duration=3_000_000_000,
    )


JSON = "application/json; charset=utf-8"


@pytest.fixture
def ollama(model_server: ModelServer) -> ModelServer:
    """The shared fake server speaking Ollama's `/api/chat`: each scripted reply is a list of
    objects (streamed one per line, or the last one alone when the request does not stream)
    or (status, object); Ollama has no tokenize endpoint."""

    def answer(seen: Seen) -> Reply:
        if seen.path != "/api/chat":
            return Reply(404, b"404 page not found", content_type="text/plain; charset=utf-8")
        reply = model_server.replies.pop(0) if model_server.replies else (500, {"error": "unscripted"})
        if isinstance(reply, list):
            if seen.body.get("stream", True):
                return Reply(lines=reply)
            reply = (200, reply[-1])  # one object: the folded reply
        status, payload = reply
        return Reply(status, payload, content_type=JSON)

    model_server.answer = answer
    return model_server


def test_a_streamed_reply_with_a_tool_call(ollama: ModelServer) -> None:
    ollama.replies = [
        [
            line("Let me "),
            line("read it."),
            line(calls=[{"function": {"name": "read_span", "arguments": {"path": "a.py"}}}]),
            final(prompt=312, completion=21),
        ]
    ]
    pieces: list[str] = []
    client = OllamaClient(MODEL, base_url=ollama.url, stream=True, on_text=pieces.append,
                          num_ctx=16384)  # fmt: skip
    history = [
        Message.system("You read code."),
        Message.user("Show a.py"),
        Message.assistant("", [ToolCall.from_raw("call_0", "list_dir", {"path": "."})]),
        Message.tool("call_0", "a.py\nb.py"),
    ]
    result = client.complete(history, [READ], max_tokens=512, temperature=0.0)

    assert result.message.content == "Let me read it." and pieces == ["Let me ", "read it."]
    (call,) = result.message.tool_calls
    assert (call.name, call.arguments, call.error) == ("read_span", {"path": "a.py"}, None)
    assert result.finish_reason == "tool_calls"
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (312, 21)
    assert result.usage.total_tokens == 333 and result.model == MODEL

    path, sent = ollama.requests[-1].path, ollama.requests[-1].body
    assert path == "/api/chat" and sent["stream"] is True and sent["model"] == MODEL
    assert sent["options"] == {"num_ctx": 16384, "num_predict": 512, "temperature": 0.0}
    assert sent["tools"][0]["function"]["name"] == "read_span"
    assert sent["messages"][2]["tool_calls"] == [
        {"function": {"name": "list_dir", "arguments": {"path": "."}}}
    ]
    # The tool result names its tool (Ollama matches results by name, not id).
    assert sent["messages"][3] == {"role": "tool", "content": "a.py\nb.py", "tool_name": "list_dir"}


def test_a_reply_not_streamed_and_the_length_limit(ollama: ModelServer) -> None:
    ollama.replies = [[final(reason="length") | {"message": {"role": "assistant", "content": "x"}}]]
    result = OllamaClient(MODEL, base_url=ollama.url).complete([Message.user("hi")])
    assert (result.message.content, result.finish_reason) == ("x", "length")
    assert ollama.bodies[-1]["stream"] is False and "options" not in ollama.bodies[-1]


def test_ollama_errors_are_typed(ollama: ModelServer) -> None:
    ollama.replies = [(404, {"error": f'model "{MODEL}" not found, try pulling it first'})]
    client = OllamaClient(MODEL, base_url=ollama.url, stream=True, retry=RetryPolicy(0))
    with pytest.raises(UnknownModelError, match="try pulling it first"):
        client.complete([Message.user("hi")])
    # An error in the middle of the stream.
    ollama.replies = [[line("par"), {"error": "llama runner process has terminated"}]]
    with pytest.raises(ServiceError, match="runner process has terminated"):
        client.complete([Message.user("hi")])


@pytest.mark.parametrize(
    ("host", "url"),
    [
        (None, "http://localhost:11434"),
        ("0.0.0.0", "http://localhost:11434"),
        ("127.0.0.1:11500", "http://127.0.0.1:11500"),
        ("https://ollama.example.com", "https://ollama.example.com:443"),
        ("http://gpu-box:11434/v1/", "http://gpu-box:11434"),
        ("http://gpu-box:11434/api/chat", "http://gpu-box:11434"),
    ],
)
def test_ollama_host_forms(host: str | None, url: str) -> None:
    assert ollama_base_url(host) == url


def test_create_model_ollama_native_and_openai_compatible() -> None:
    client = create_model(f"ollama:{MODEL}", env={"OLLAMA_HOST": "127.0.0.1:11500"},
                          context_tokens=16_096)  # fmt: skip
    assert isinstance(client, OllamaClient) and client.url == "http://127.0.0.1:11500/api/chat"
    assert client.num_ctx == 16_384 and client.name == f"ollama:{MODEL}"
    v1 = create_model(f"ollama-openai:{MODEL}", env={"OLLAMA_HOST": "127.0.0.1:11500"})
    assert isinstance(v1, OpenAIClient) and v1.url == "http://127.0.0.1:11500/v1/chat/completions"
    plain = create_model(f"ollama:{MODEL}", env={"REPOCTX_MODEL_BASE_URL": "http://h:1/v1"})
    assert plain.url == "http://h:1/api/chat" and plain.num_ctx is None
    # The family table counts its prompts: no tokenize endpoint to ask.
    assert model_tokenizer(client, probe=False).source == "qwen3 (qwen family table)"


def test_a_whole_agent_run_over_ollamas_api(ollama: ModelServer, tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", FILES)

    def called(name: str, args: dict) -> list[dict]:
        return [line(calls=[{"function": {"name": name, "arguments": args}}]), final()]

    ollama.replies = [
        [line(PLAN), final()],
        called("edit", FIX),
        called("finish", {"summary": "add adds."}),
    ]
    client = OllamaClient(MODEL, base_url=ollama.url, stream=True, num_ctx=16_384)
    options = RunOptions(limits=Limits(), granted=frozenset({"read", "write"}),
                         sleep=lambda s: None, tokenizer=model_tokenizer(client))  # fmt: skip
    report = run_agent(load_config(root, env={}, jobs=1), "Fix add", client, options)
    assert (report.status, report.final) == ("done", "add adds.")
    assert "return a + b" in (root / "pkg/calc.py").read_text()
    assert report.usage.prompt_tokens == 3 * 312
    paths = [s.path for s in ollama.requests]
    assert paths == ["/api/chat"] * 3  # Ollama has no tokenize endpoint: nothing probed
    assert all(b["options"]["num_ctx"] == 16_384 for b in ollama.bodies)
