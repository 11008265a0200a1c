"""Model adapters against real HTTP servers on 127.0.0.1 that speak each provider's protocol."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from agent.models import (
    AnthropicClient,
    AuthError,
    BadRequestError,
    ContextTooLongError,
    MalformedResponseError,
    Message,
    ModelClient,
    ModelConfigError,
    ModelConnectionError,
    ModelError,
    ModelTimeoutError,
    OpenAIClient,
    QuotaExceededError,
    RateLimitError,
    RetryPolicy,
    ScriptedModel,
    ScriptExhaustedError,
    ServiceError,
    ToolCall,
    ToolSpec,
    UnknownModelError,
    Usage,
    create_model,
)
from agent.models.http import parse_retry_after
from indexer.errors import RepoctxError
from tests.model_server import ModelServer, Reply

# ---------------------------------------------------------------------------- fake provider


@pytest.fixture
def server(model_server: ModelServer) -> ModelServer:
    """The shared fake server; a request past the script is a teapot, which no adapter retries."""
    model_server.unscripted = Reply(418, {"error": "unscripted"})
    return model_server


@pytest.fixture
def sleeps() -> list[float]:
    return []


def openai_client(server: ModelServer, sleeps: list[float], **kw: Any) -> OpenAIClient:
    kw.setdefault("retry", RetryPolicy(max_retries=2))
    return OpenAIClient("test-model", base_url=server.url, sleep=sleeps.append, **kw)


def anthropic_client(server: ModelServer, sleeps: list[float], **kw: Any) -> AnthropicClient:
    kw.setdefault("retry", RetryPolicy(max_retries=2))
    kw.setdefault("api_key", "sk-ant")
    return AnthropicClient("claude-test", base_url=server.url, sleep=sleeps.append, **kw)


def chat_reply(
    content: str | None = "Hello!", tool_calls: list | None = None, **extra: Any
) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "test-model-0613",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
        **extra,
    }


def wire_call(call_id: str | None, name: str, arguments: Any) -> dict:
    out: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if call_id is not None:
        out["id"] = call_id
    return out


SEARCH = ToolSpec(
    "search",
    "Search the repository index.",
    {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
)

# ---------------------------------------------------------------------------- records


def test_message_validates_roles_and_tool_links() -> None:
    with pytest.raises(ValueError, match="role"):
        Message("robot", "hi")
    with pytest.raises(ValueError, match="tool_call_id"):
        Message("tool", "result")
    with pytest.raises(ValueError, match="assistant"):
        Message("user", "hi", (ToolCall("c", "f", {}, "{}"),))
    call = ToolCall.from_raw("c1", "search", '{"query": "x"}')
    assert Message("assistant", "", [call]).tool_calls == (call,)  # lists become tuples


@pytest.mark.parametrize(
    ("raw", "arguments", "error"),
    [
        ('{"a": 1}', {"a": 1}, None),
        ({"a": 1}, {"a": 1}, None),
        ("", {}, None),
        (None, {}, None),
        ('{"a": ', None, "not valid JSON"),
        ("[1, 2]", None, "must be a JSON object"),
        (42, None, "must be a JSON object"),
    ],
)
def test_tool_call_from_raw(raw: Any, arguments: Any, error: str | None) -> None:
    call = ToolCall.from_raw("id", "f", raw)
    assert call.arguments == arguments
    assert (call.error is None) if error is None else (error in call.error)
    if isinstance(raw, str):
        assert call.raw_arguments == raw


def test_usage_adds_up() -> None:
    assert Usage(1, 2, 3) + Usage(10, 20, 30) == Usage(11, 22, 33)


def test_errors_are_repoctx_errors_with_actionable_messages() -> None:
    error = AuthError(detail="Incorrect API key provided", status=401)
    assert isinstance(error, ModelError) and isinstance(error, RepoctxError)
    assert "REPOCTX_API_KEY" in str(error) and "HTTP 401" in str(error)
    assert RateLimitError.retryable and ServiceError.retryable and ModelTimeoutError.retryable
    assert ModelConnectionError.retryable and issubclass(ModelConnectionError, ServiceError)
    assert not AuthError.retryable and not ContextTooLongError.retryable
    assert not MalformedResponseError.retryable and not QuotaExceededError.retryable


def test_retry_after_forms() -> None:
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=1445412480) == 10
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None


# ---------------------------------------------------------------------------- OpenAI


def test_openai_completion(server: ModelServer, sleeps: list[float]) -> None:
    server.reply(Reply(body=chat_reply("Hello!")))
    client = openai_client(server, sleeps, api_key="sk-test")
    assert isinstance(client, ModelClient)

    result = client.complete(
        [Message.system("Be brief."), Message.user("Hi")], max_tokens=50, temperature=0.2
    )

    assert result.message == Message("assistant", "Hello!")
    assert result.usage == Usage(12, 3, 15)
    assert result.finish_reason == "stop"
    assert result.model == "test-model-0613"
    assert result.latency_s > 0
    assert result.raw["id"] == "chatcmpl-1"
    (seen,) = server.requests
    # A bare host:port base URL gets /v1 like the OpenAI SDK convention.
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == "Bearer sk-test"
    assert seen.body == {
        "model": "test-model",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
        ],
        "max_tokens": 50,
        "temperature": 0.2,
    }
    assert sleeps == []


def test_openai_local_server_gets_no_key_and_keeps_path(
    server: ModelServer, sleeps: list[float]
) -> None:
    server.reply(Reply(body=chat_reply()))
    client = OpenAIClient("m", base_url=f"{server.url}/api/v1/", sleep=sleeps.append)
    client.complete([Message.user("Hi")])
    assert server.requests[0].path == "/api/v1/chat/completions"
    assert "authorization" not in server.requests[0].headers


def test_openai_tool_call_round_trip(server: ModelServer, sleeps: list[float]) -> None:
    server.reply(
        Reply(body=chat_reply(None, [wire_call("call_1", "search", '{"query": "parse_file"}')])),
        Reply(body=chat_reply("It is in indexer/parse.py.")),
    )
    client = openai_client(server, sleeps)
    history = [Message.system("You answer questions."), Message.user("Where is parse_file?")]

    first = client.complete(history, [SEARCH])

    assert first.finish_reason == "tool_calls"
    assert first.message.content == ""
    (call,) = first.message.tool_calls
    assert call == ToolCall("call_1", "search", {"query": "parse_file"}, '{"query": "parse_file"}')

    history += [first.message, Message.tool("call_1", "indexer/parse.py:10 def parse_file")]
    second = client.complete(history, [SEARCH])

    assert second.message.content == "It is in indexer/parse.py."
    assert server.requests[0].body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "search",
                "description": "Search the repository index.",
                "parameters": SEARCH.parameters,
            },
        }
    ]
    assert server.requests[1].body["messages"][2:] == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"query": "parse_file"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": "indexer/parse.py:10 def parse_file",
        },
    ]


def test_openai_malformed_and_odd_tool_calls_do_not_raise(
    server: ModelServer, sleeps: list[float]
) -> None:
    server.reply(
        Reply(
            body=chat_reply(
                "",
                [
                    wire_call("call_a", "search", '{"query": "unterminated'),
                    wire_call("call_b", "search", "[1, 2]"),
                    # Ollama-style: arguments already decoded, and no id.
                    wire_call(None, "search", {"query": "x"}),
                ],
            )
        )
    )
    calls = (
        openai_client(server, sleeps).complete([Message.user("go")], [SEARCH]).message.tool_calls
    )

    assert calls[0].arguments is None
    assert "not valid JSON" in calls[0].error
    assert calls[0].raw_arguments == '{"query": "unterminated'
    assert calls[1].arguments is None and "JSON object" in calls[1].error
    assert calls[2] == ToolCall("call_2", "search", {"query": "x"}, '{"query": "x"}')


def test_openai_rate_limit_is_retried_honouring_retry_after(
    server: ModelServer, sleeps: list[float]
) -> None:
    server.reply(
        Reply(429, {"error": {"message": "Slow down", "type": "requests"}}, {"Retry-After": "7"}),
        Reply(body=chat_reply("ok")),
    )
    result = openai_client(server, sleeps).complete([Message.user("Hi")])
    assert result.message.content == "ok"
    assert sleeps == [7.0]
    assert len(server.requests) == 2


def test_openai_too_long_retry_after_is_not_waited_for(
    server: ModelServer, sleeps: list[float]
) -> None:
    server.reply(Reply(429, {"error": {"message": "Slow down"}}, {"Retry-After": "3600"}))
    with pytest.raises(RateLimitError) as info:
        openai_client(server, sleeps).complete([Message.user("Hi")])
    assert info.value.retry_after == 3600
    assert sleeps == [] and len(server.requests) == 1


def test_openai_server_errors_exhaust_retries_with_growing_backoff(
    server: ModelServer, sleeps: list[float]
) -> None:
    server.reply(*[Reply(500, {"error": {"message": "boom", "type": "server_error"}})] * 3)
    client = openai_client(server, sleeps, retry=RetryPolicy(max_retries=2, backoff_base_s=0.5))
    with pytest.raises(ServiceError, match="boom") as info:
        client.complete([Message.user("Hi")])
    assert info.value.status == 500
    assert len(server.requests) == 3
    # Equal jitter: attempt n waits between half and all of base * 2**(n-1).
    assert len(sleeps) == 2
    assert 0.25 <= sleeps[0] <= 0.5 and 0.5 <= sleeps[1] <= 1.0


_OPENAI_ERRORS = [
    (401, {"error": {"message": "Incorrect API key", "code": "invalid_api_key"}}, AuthError),
    (403, {"error": {"message": "Forbidden"}}, AuthError),
    (
        404,
        {"error": {"message": "The model `nope` does not exist", "code": "model_not_found"}},
        UnknownModelError,
    ),
    (404, {"error": 'model "nope" not found, try pulling it first'}, UnknownModelError),  # Ollama
    (
        400,
        {"object": "error", "message": "The model `nope` does not exist.", "type": "NotFoundError"},
        UnknownModelError,
    ),  # vLLM
    (
        400,
        {
            "error": {
                "message": "This model's maximum context length is 8192 tokens.",
                "code": "context_length_exceeded",
            }
        },
        ContextTooLongError,
    ),
    (
        400,
        {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size",
                "type": "exceed_context_size_error",
            }
        },
        ContextTooLongError,
    ),  # llama.cpp
    (
        429,
        {"error": {"message": "You exceeded your quota", "code": "insufficient_quota"}},
        QuotaExceededError,
    ),
    (422, {"detail": [{"msg": "field required"}]}, BadRequestError),
    (502, "<html>Bad gateway</html>", ServiceError),
    (307, "", ModelConfigError),
]


@pytest.mark.parametrize(("status", "body", "expected"), _OPENAI_ERRORS)
def test_openai_error_mapping(
    server: ModelServer, sleeps: list[float], status: int, body: Any, expected: type
) -> None:
    headers = {"Location": "https://elsewhere.example/v1/chat/completions"} if status == 307 else {}
    server.reply(Reply(status, body, headers))
    client = openai_client(server, sleeps, retry=RetryPolicy(max_retries=0))
    with pytest.raises(expected) as info:
        client.complete([Message.user("Hi")])
    assert type(info.value) is expected
    assert info.value.status == status
    assert len(server.requests) == 1


def test_openai_auth_error_is_not_retried_and_says_what_to_do(
    server: ModelServer, sleeps: list[float]
) -> None:
    server.reply(Reply(401, {"error": {"message": "Incorrect API key provided: sk-bad"}}))
    with pytest.raises(AuthError, match="REPOCTX_API_KEY") as info:
        openai_client(server, sleeps).complete([Message.user("Hi")])
    assert "Incorrect API key provided" in str(info.value)
    assert sleeps == [] and len(server.requests) == 1


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("<html>not json</html>", "expected JSON"),
        ({"id": "x", "object": "chat.completion"}, "choices"),
        ({"choices": []}, "choices"),
        ({"choices": [{"index": 0}]}, "message"),
        ([1, 2], "JSON object"),
    ],
)
def test_openai_malformed_responses(
    server: ModelServer, sleeps: list[float], body: Any, match: str
) -> None:
    server.reply(Reply(200, body))
    with pytest.raises(MalformedResponseError, match=match):
        openai_client(server, sleeps).complete([Message.user("Hi")])


def test_openai_error_object_in_a_200_body_is_typed(
    server: ModelServer, sleeps: list[float]
) -> None:
    server.reply(Reply(200, {"error": {"message": "prompt is too long: 9000 > 8192"}}))
    with pytest.raises(ContextTooLongError):
        openai_client(server, sleeps).complete([Message.user("Hi")])


def test_openai_timeout_is_retried_then_raised(server: ModelServer, sleeps: list[float]) -> None:
    server.reply(Reply(delay=5, body=chat_reply()), Reply(delay=5, body=chat_reply()))
    client = openai_client(server, sleeps, timeout=0.3, retry=RetryPolicy(max_retries=1))
    with pytest.raises(ModelTimeoutError, match="0.3s"):
        client.complete([Message.user("Hi")])
    assert server.seen(2) == 2 and len(sleeps) == 1


def test_unreachable_server_is_a_connection_error(sleeps: list[float]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = OpenAIClient(
        "m",
        base_url=f"http://127.0.0.1:{port}/v1",
        retry=RetryPolicy(max_retries=2),
        sleep=sleeps.append,
    )
    with pytest.raises(ModelConnectionError, match="REPOCTX_MODEL_BASE_URL"):
        client.complete([Message.user("Hi")])
    assert len(sleeps) == 2


def _chunk(delta: dict, finish: str | None = None, **extra: Any) -> dict:
    return {
        "id": "chatcmpl-s",
        "object": "chat.completion.chunk",
        "model": "test-model-0613",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


def test_openai_streaming_accumulates_text_and_tool_calls(
    server: ModelServer, sleeps: list[float]
) -> None:
    tool_start = {
        "index": 0,
        "id": "call_9",
        "type": "function",
        "function": {"name": "search", "arguments": ""},
    }
    server.reply(
        Reply(
            events=[
                ": keep-alive comment\n\n",
                _chunk({"role": "assistant", "content": ""}),
                _chunk({"content": "Let me "}),
                _chunk({"content": "look."}),
                _chunk({"tool_calls": [tool_start]}),
                _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"que'}}]}),
                _chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ry": "x"}'}}]}),
                _chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 1,
                                "id": "call_10",
                                "function": {"name": "search", "arguments": "{bad"},
                            }
                        ]
                    }
                ),
                _chunk({}, "tool_calls"),
                {
                    "id": "chatcmpl-s",
                    "choices": [],
                    "usage": {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29},
                },
                "data: [DONE]\n\n",
            ]
        )
    )
    pieces: list[str] = []
    client = openai_client(server, sleeps, stream=True, on_text=pieces.append)

    result = client.complete([Message.user("find x")], [SEARCH])

    assert server.requests[0].body["stream"] is True
    assert server.requests[0].headers["accept"] == "text/event-stream"
    assert pieces == ["Let me ", "look."]
    assert result.message.content == "Let me look."
    first, second = result.message.tool_calls
    assert first == ToolCall("call_9", "search", {"query": "x"}, '{"query": "x"}')
    assert second.id == "call_10" and second.arguments is None and second.error
    assert result.finish_reason == "tool_calls"
    assert result.usage == Usage(20, 9, 29)
    assert result.model == "test-model-0613"


def test_openai_stream_that_stalls_times_out(server: ModelServer, sleeps: list[float]) -> None:
    server.reply(Reply(events=[_chunk({"content": "partial"})], stall=5))
    client = openai_client(server, sleeps, stream=True, timeout=0.3)
    with pytest.raises(ModelTimeoutError):
        client.complete([Message.user("Hi")])


# -- time limits: silence, not total time; one retry budget; no overlapping retries -----------


def _text_chunks(words: list[str]) -> list[Any]:
    return [
        *(_chunk({"content": w}) for w in words),
        _chunk({}, "stop"),
        "data: [DONE]\n\n",
    ]


def test_a_slow_stream_is_not_a_timeout_while_tokens_flow(
    server: ModelServer, sleeps: list[float]
) -> None:
    # 8 pieces 0.15 s apart: 1.2 s in all, four times the 0.3 s timeout, never 0.3 s silent.
    words = ["one ", "two ", "three ", "four ", "five ", "six ", "seven ", "eight"]
    server.reply(Reply(events=_text_chunks(words), gap=0.15))
    client = openai_client(server, sleeps, stream=True, timeout=0.3)
    start = time.monotonic()
    result = client.complete([Message.user("count")])
    assert time.monotonic() - start > 1.0
    assert result.message.content == "".join(words) and not sleeps


def test_silence_in_the_middle_of_a_stream_times_out(
    server: ModelServer, sleeps: list[float]
) -> None:
    server.reply(Reply(events=[_chunk({"content": "par"}), _chunk({"content": "tial"})], stall=5))
    client = openai_client(server, sleeps, stream=True, timeout=0.3)
    with pytest.raises(ModelTimeoutError, match="stopped sending for 0.3s") as info:
        client.complete([Message.user("Hi")])
    assert "--model-timeout" in str(info.value) and "REPOCTX_MODEL_TIMEOUT_S" in str(info.value)


def test_the_connect_timeout_does_not_bound_the_wait_for_an_answer(
    server: ModelServer, sleeps: list[float]
) -> None:
    server.reply(Reply(delay=0.6, body=chat_reply("late but fine")))
    client = openai_client(server, sleeps, timeout=3, connect_timeout=0.2)
    assert client.complete([Message.user("Hi")]).message.content == "late but fine"
    assert not sleeps


def test_a_retry_closes_the_timed_out_request_first(
    server: ModelServer, sleeps: list[float]
) -> None:
    # The first request hangs (a CPU model on a long prompt); the retry must not run beside it.
    server.reply(Reply(delay=5, body=chat_reply("never")), Reply(body=chat_reply("second")))
    client = openai_client(server, sleeps, timeout=0.3, retry=RetryPolicy(max_retries=1))
    assert client.complete([Message.user("Hi")]).message.content == "second"
    assert len(server.requests) == 2 and len(sleeps) == 1
    assert server.overlaps == [0, 0]


def test_retries_inside_a_budget_come_out_of_it(server: ModelServer, sleeps: list[float]) -> None:
    from agent.models import retry_budget

    server.reply(*[Reply(503, {"error": {"message": "busy"}}) for _ in range(6)])
    client = openai_client(server, sleeps, retry=RetryPolicy(max_retries=5))
    with retry_budget(1) as budget, pytest.raises(ServiceError):
        client.complete([Message.user("Hi")])
    # Its own policy would have sent 6 requests; the shared budget allows one retry.
    assert len(server.requests) == 2 and len(sleeps) == 1 and budget.left == 0


def test_tool_choice_is_sent_and_dropped_where_the_server_rejects_it(
    server: ModelServer, sleeps: list[float]
) -> None:
    vllm = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    server.reply(
        Reply(body=chat_reply("a")),
        Reply(400, {"object": "error", "message": vllm, "type": "BadRequestError", "code": 400}),
        Reply(body=chat_reply("b")),
        Reply(body=chat_reply("c")),
        Reply(body=chat_reply("d")),
    )
    client = openai_client(server, sleeps)
    replies = [client.complete([Message.user("Hi")], [SEARCH]).message.content for _ in range(3)]
    assert replies == ["a", "b", "c"]
    sent = [r.body for r in server.requests]
    assert sent[0]["tool_choice"] == "auto"
    # Refused for tool_choice: the same request again without it, then never again.
    assert sent[1]["tool_choice"] == "auto"
    assert "tool_choice" not in sent[2] and sent[2]["tools"] == sent[1]["tools"]
    assert "tool_choice" not in sent[3] and client.tool_choice is None
    assert len(sleeps) == 0
    # No tools, no tool_choice.
    openai_client(server, sleeps).complete([Message.user("Hi")])
    assert "tool_choice" not in server.requests[-1].body
    assert "tools" not in server.requests[-1].body


def test_create_model_takes_timeouts_and_retries_and_says_which_flag_is_wrong(
    server: ModelServer,
) -> None:
    env = {"REPOCTX_MODEL_BASE_URL": server.url}
    client = create_model("llamacpp:m", env=env, timeout=0.3, connect_timeout=0.1, max_retries=0)
    server.reply(Reply(delay=5, body=chat_reply()))
    with pytest.raises(ModelTimeoutError, match="sent nothing for 0.3s"):
        client.complete([Message.user("Hi")])
    assert server.seen(1) == 1  # max_retries=0
    for kw, flag in [
        ({"timeout": 0}, "--model-timeout"),
        ({"connect_timeout": -1}, "--connect-timeout"),
        ({"max_retries": -1}, "--model-retries"),
    ]:
        with pytest.raises(ModelConfigError, match=flag):
            create_model("llamacpp:m", env=env, **kw)


def test_openai_stream_cut_short_is_a_connection_error(
    server: ModelServer, sleeps: list[float]
) -> None:
    server.reply(Reply(events=[_chunk({"content": "partial"})]))
    with pytest.raises(ModelConnectionError, match="ended before"):
        openai_client(server, sleeps, stream=True).complete([Message.user("Hi")])


def test_openai_stream_error_event_is_typed(server: ModelServer, sleeps: list[float]) -> None:
    server.reply(Reply(events=[{"error": {"message": "overloaded", "type": "server_error"}}]))
    with pytest.raises(ServiceError, match="overloaded"):
        openai_client(server, sleeps, stream=True).complete([Message.user("Hi")])


def test_openai_stream_request_answered_with_json(
    server: ModelServer, sleeps: list[float]
) -> None:
    server.reply(Reply(body=chat_reply("whole")))
    result = openai_client(server, sleeps, stream=True).complete([Message.user("Hi")])
    assert result.message.content == "whole" and result.usage.total_tokens == 15


# ---------------------------------------------------------------------------- Anthropic


def anthropic_reply(content: list[dict], stop: str = "end_turn") -> dict:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test-20250101",
        "content": content,
        "stop_reason": stop,
        "usage": {
            "input_tokens": 30,
            "cache_creation_input_tokens": 5,
            "cache_read_input_tokens": 100,
            "output_tokens": 7,
        },
    }


def test_anthropic_completion(server: ModelServer, sleeps: list[float]) -> None:
    server.reply(Reply(body=anthropic_reply([{"type": "text", "text": "Hi there."}])))
    client = anthropic_client(server, sleeps)
    assert isinstance(client, ModelClient)

    result = client.complete(
        [Message.system("Be brief."), Message.user("Hi"), Message.system("Cite files.")],
        temperature=0.0,
    )

    assert result.message == Message("assistant", "Hi there.")
    # the 100 tokens read from Anthropic's prompt cache, as it reports them (issue 39)
    assert result.usage == Usage(135, 7, 142, 100, "server")
    assert result.finish_reason == "stop"
    assert result.model == "claude-test-20250101"
    assert result.latency_s > 0
    (seen,) = server.requests
    assert seen.path == "/v1/messages"
    assert seen.headers["x-api-key"] == "sk-ant"
    assert seen.headers["anthropic-version"] == "2023-06-01"
    # Two cache breakpoints (issue 39): the system text, and the end of the conversation.
    cache = {"cache_control": {"type": "ephemeral"}}
    assert seen.body == {
        "model": "claude-test",
        "max_tokens": 4096,
        "system": [{"type": "text", "text": "Be brief.\n\nCite files.", **cache}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi", **cache}]}],
        "temperature": 0.0,
    }


def test_anthropic_tool_use_round_trip(server: ModelServer, sleeps: list[float]) -> None:
    server.reply(
        Reply(
            body=anthropic_reply(
                [
                    {"type": "text", "text": "Searching."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "search",
                        "input": {"query": "a"},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_2",
                        "name": "search",
                        "input": {"query": "b"},
                    },
                ],
                stop="tool_use",
            )
        ),
        Reply(body=anthropic_reply([{"type": "text", "text": "Done."}])),
    )
    client = anthropic_client(server, sleeps)
    history = [Message.system("sys"), Message.user("Find a and b")]

    first = client.complete(history, [SEARCH], max_tokens=100)

    assert first.finish_reason == "tool_calls"
    assert first.message.content == "Searching."
    assert [c.arguments for c in first.message.tool_calls] == [{"query": "a"}, {"query": "b"}]
    assert first.message.tool_calls[0].raw_arguments == '{"query": "a"}'

    history += [
        first.message,
        Message.tool("toolu_1", "a.py"),
        Message.tool("toolu_2", ""),
        Message.user("Be quick."),
    ]
    assert client.complete(history, [SEARCH]).message.content == "Done."

    assert server.requests[0].body["max_tokens"] == 100
    assert server.requests[0].body["tools"] == [
        {
            "name": "search",
            "description": "Search the repository index.",
            "input_schema": SEARCH.parameters,
        }
    ]
    assert server.requests[1].body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Find a and b"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Searching."},
                {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"query": "a"}},
                {"type": "tool_use", "id": "toolu_2", "name": "search", "input": {"query": "b"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py"},
                {"type": "tool_result", "tool_use_id": "toolu_2"},
                # the end of the conversation, marked for Anthropic's prompt cache (issue 39)
                {"type": "text", "text": "Be quick.", "cache_control": {"type": "ephemeral"}},
            ],
        },
    ]


def test_anthropic_overloaded_is_retried(server: ModelServer, sleeps: list[float]) -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    server.reply(
        Reply(529, overloaded), Reply(body=anthropic_reply([{"type": "text", "text": "ok"}]))
    )
    assert anthropic_client(server, sleeps).complete([Message.user("Hi")]).message.content == "ok"
    assert len(sleeps) == 1 and len(server.requests) == 2


_ANTHROPIC_ERRORS = [
    (401, "authentication_error", "invalid x-api-key", AuthError),
    (404, "not_found_error", "model: claude-nope", UnknownModelError),
    (
        400,
        "invalid_request_error",
        "prompt is too long: 215000 tokens > 200000 maximum",
        ContextTooLongError,
    ),
    (413, "request_too_large", "Request exceeds the maximum allowed size", ContextTooLongError),
    (429, "rate_limit_error", "Number of requests has exceeded your rate limit", RateLimitError),
    (400, "invalid_request_error", "temperature: range is 0-1", BadRequestError),
]


@pytest.mark.parametrize(("status", "kind", "message", "expected"), _ANTHROPIC_ERRORS)
def test_anthropic_error_mapping(
    server: ModelServer, sleeps: list[float], status: int, kind: str, message: str, expected: type
) -> None:
    server.reply(Reply(status, {"type": "error", "error": {"type": kind, "message": message}}))
    client = anthropic_client(server, sleeps, retry=RetryPolicy(max_retries=0))
    with pytest.raises(expected) as info:
        client.complete([Message.user("Hi")])
    assert type(info.value) is expected and message in str(info.value)


def test_anthropic_missing_content_is_malformed(server: ModelServer, sleeps: list[float]) -> None:
    server.reply(Reply(body={"id": "msg_1", "type": "message"}))
    with pytest.raises(MalformedResponseError, match="content"):
        anthropic_client(server, sleeps).complete([Message.user("Hi")])


def _event(kind: str, **data: Any) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


def test_anthropic_streaming(server: ModelServer, sleeps: list[float]) -> None:
    start = {
        "id": "msg_s",
        "type": "message",
        "role": "assistant",
        "model": "claude-test-s",
        "content": [],
        "usage": {"input_tokens": 40, "output_tokens": 1},
    }
    server.reply(
        Reply(
            events=[
                _event("message_start", message=start),
                _event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
                _event("ping"),
                _event("content_block_delta", index=0, delta={"type": "text_delta", "text": "On "}),
                _event("content_block_delta", index=0, delta={"type": "text_delta", "text": "it."}),
                _event("content_block_stop", index=0),
                _event(
                    "content_block_start",
                    index=1,
                    content_block={
                        "type": "tool_use",
                        "id": "toolu_s",
                        "name": "search",
                        "input": {},
                    },
                ),
                _event(
                    "content_block_delta",
                    index=1,
                    delta={"type": "input_json_delta", "partial_json": '{"query": '},
                ),
                _event(
                    "content_block_delta",
                    index=1,
                    delta={"type": "input_json_delta", "partial_json": '"b"}'},
                ),
                _event("content_block_stop", index=1),
                _event(
                    "content_block_start",
                    index=2,
                    content_block={
                        "type": "tool_use",
                        "id": "toolu_t",
                        "name": "search",
                        "input": {},
                    },
                ),
                _event(
                    "content_block_delta",
                    index=2,
                    delta={"type": "input_json_delta", "partial_json": '{"query'},
                ),
                _event("content_block_stop", index=2),
                _event(
                    "message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 15}
                ),
                _event("message_stop"),
            ]
        )
    )
    pieces: list[str] = []
    client = anthropic_client(server, sleeps, stream=True, on_text=pieces.append)

    result = client.complete([Message.user("find b")], [SEARCH])

    assert server.requests[0].body["stream"] is True
    assert pieces == ["On ", "it."]
    assert result.message.content == "On it."
    good, bad = result.message.tool_calls
    assert good == ToolCall("toolu_s", "search", {"query": "b"}, '{"query": "b"}')
    assert bad.id == "toolu_t" and bad.arguments is None and "not valid JSON" in bad.error
    assert result.finish_reason == "tool_calls"
    assert result.usage == Usage(40, 15, 55)
    assert result.model == "claude-test-s"


def test_anthropic_stream_error_event(server: ModelServer, sleeps: list[float]) -> None:
    error = {"type": "overloaded_error", "message": "Overloaded"}
    server.reply(Reply(events=[_event("message_start", message={}), _event("error", error=error)]))
    with pytest.raises(ServiceError, match="Overloaded"):
        anthropic_client(server, sleeps, stream=True).complete([Message.user("Hi")])


# ---------------------------------------------------------------------------- scripted


def test_scripted_model_replays_records_and_runs_out(tmp_path: Path) -> None:
    script = tmp_path / "script.jsonl"
    lines = [
        {"tool_calls": [{"name": "search", "arguments": {"query": "parse file"}}]},
        {"content": "", "tool_calls": [{"name": "search", "arguments": '{"query": ', "id": "x"}]},
        {"content": "The answer is here."},
    ]
    script.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    model = ScriptedModel(script)
    assert isinstance(model, ModelClient)
    assert model.name == f"scripted:{script}"

    first = model.complete([Message.user("where is parse file")], [SEARCH], max_tokens=9)
    assert first.message.tool_calls == (
        ToolCall("call_1_0", "search", {"query": "parse file"}, '{"query": "parse file"}'),
    )
    assert first.finish_reason == "tool_calls"
    assert first.usage == Usage(4, 3, 7)

    second = model.complete([Message.user("again")])
    (bad,) = second.message.tool_calls
    assert bad.id == "x" and bad.arguments is None and bad.error

    third = model.complete([Message.user("and")])
    assert third.message.content == "The answer is here." and third.finish_reason == "stop"
    assert model.remaining == 0

    with pytest.raises(ScriptExhaustedError, match="3 responses"):
        model.complete([Message.user("more?")])
    assert [c.messages[0].content for c in model.calls] == [
        "where is parse file",
        "again",
        "and",
        "more?",
    ]
    assert model.calls[0].tools == (SEARCH,) and model.calls[0].max_tokens == 9


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("list.json", json.dumps(["one", {"content": "two"}])),
        ("wrapped.json", json.dumps({"responses": ["one", {"content": "two"}]})),
        ("noext", '"one"\n{"content": "two"}\n'),
    ],
)
def test_scripted_model_file_forms(tmp_path: Path, name: str, text: str) -> None:
    (tmp_path / name).write_text(text)
    model = ScriptedModel(tmp_path / name)
    assert [model.complete([]).message.content for _ in range(2)] == ["one", "two"]


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("bad.jsonl", '{"content": "a"}\n{"content": \n', "bad.jsonl:2"),
        ("typo.jsonl", '{"content": "a", "tool_call": []}\n', "unknown keys"),
        ("noname.jsonl", '{"tool_calls": [{"arguments": {}}]}\n', "string `name`"),
        ("bad.json", "[1, 2", "not valid JSON"),
    ],
)
def test_scripted_model_rejects_bad_scripts(
    tmp_path: Path, name: str, text: str, match: str
) -> None:
    (tmp_path / name).write_text(text)
    with pytest.raises(ModelConfigError, match=match):
        ScriptedModel(tmp_path / name)


# ---------------------------------------------------------------------------- create_model


@pytest.mark.parametrize(
    ("spec", "env", "kind", "model", "url"),
    [
        (
            "openai:gpt-4o-mini",
            {"OPENAI_API_KEY": "k"},
            OpenAIClient,
            "gpt-4o-mini",
            "https://api.openai.com/v1/chat/completions",
        ),
        (
            "gpt-4o-mini",
            {"REPOCTX_API_KEY": "k"},
            OpenAIClient,
            "gpt-4o-mini",
            "https://api.openai.com/v1/chat/completions",
        ),
        (
            "ollama-openai:qwen2.5-coder:7b",
            {},
            OpenAIClient,
            "qwen2.5-coder:7b",
            "http://localhost:11434/v1/chat/completions",
        ),
        (
            "my-model",
            {"REPOCTX_MODEL_BASE_URL": "http://localhost:8000"},
            OpenAIClient,
            "my-model",
            "http://localhost:8000/v1/chat/completions",
        ),
        (
            "",
            {"REPOCTX_MODEL": "vllm:Qwen/Qwen3-8B"},
            OpenAIClient,
            "Qwen/Qwen3-8B",
            "http://localhost:8000/v1/chat/completions",
        ),
        (
            "anthropic:claude-sonnet-4-5",
            {"ANTHROPIC_API_KEY": "k"},
            AnthropicClient,
            "claude-sonnet-4-5",
            "https://api.anthropic.com/v1/messages",
        ),
    ],
)
def test_create_model_parses_specs(spec: str, env: dict, kind: type, model: str, url: str) -> None:
    client = create_model(spec, env=env)
    assert type(client) is kind
    assert client.model == model and client.url == url
    assert client.name.endswith(model)


def test_create_model_scripted(tmp_path: Path) -> None:
    (tmp_path / "s.jsonl").write_text('"hello"\n')
    client = create_model(f"scripted:{tmp_path / 's.jsonl'}", env={})
    assert isinstance(client, ScriptedModel)
    assert client.complete([Message.user("hi")]).message.content == "hello"


@pytest.mark.parametrize(
    ("spec", "env", "match"),
    [
        ("openai:gpt-4o-mini", {}, "OPENAI_API_KEY"),
        ("gpt-4o-mini", {"ANTHROPIC_API_KEY": "k"}, "OPENAI_API_KEY"),
        ("anthropic:claude-sonnet-4-5", {"OPENAI_API_KEY": "k"}, "ANTHROPIC_API_KEY"),
        ("mistral:latest", {}, "ollama:mistral:latest"),
        ("openai:", {"OPENAI_API_KEY": "k"}, "No model name"),
        ("", {}, "REPOCTX_MODEL"),
        ("scripted:/nonexistent/script.jsonl", {}, "not found"),
    ],
)
def test_create_model_config_errors(spec: str, env: dict, match: str) -> None:
    with pytest.raises(ModelConfigError, match=match):
        create_model(spec, env=env)


def test_create_model_key_precedence_end_to_end(server: ModelServer) -> None:
    server.reply(Reply(body=chat_reply()), Reply(body=chat_reply()))
    env = {
        "REPOCTX_MODEL_BASE_URL": f"{server.url}/v1",
        "REPOCTX_API_KEY": "from-repoctx",
        "OPENAI_API_KEY": "from-openai",
    }
    create_model("openai:m", env=env).complete([Message.user("Hi")])
    create_model("openai:m", env=env, api_key="from-arg").complete([Message.user("Hi")])
    assert [r.headers["authorization"] for r in server.requests] == [
        "Bearer from-repoctx",
        "Bearer from-arg",
    ]
    assert server.requests[0].path == "/v1/chat/completions"


def test_a_new_provider_is_one_registered_factory(tmp_path):
    """create_model has no list of providers: a factory registered beside its client is
    found by its name, gets what the spec and environment resolved, and is listed in errors."""
    from agent.models import providers

    script = tmp_path / "s.jsonl"
    script.write_text('{"content": "hello"}\n')
    seen = []

    @providers.register("echo-test")
    def make(req):
        seen.append((req.provider, req.model, req.url("ECHO_URL"), req.options["timeout"]))
        return ScriptedModel(str(script), name=f"echo-test:{req.model}")

    client = create_model("echo-test:tiny", env={"ECHO_URL": "http://127.0.0.1:9"}, timeout=42)
    assert client.complete([Message("user", "hi")]).message.content == "hello"
    assert seen == [("echo-test", "tiny", "http://127.0.0.1:9", 42)]
    with pytest.raises(ModelConfigError, match="echo-test:"):
        create_model("nosuch:x", env={})
    with pytest.raises(ValueError, match="registered twice"):
        providers.register("echo-test")(lambda req: None)
