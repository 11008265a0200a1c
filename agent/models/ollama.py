"""Ollama's native chat API (``POST /api/chat``): tools, a newline-delimited JSON stream, and
``options.num_ctx`` — Ollama's OpenAI-compatible ``/v1`` cannot set the context size and
cuts a longer prompt silently at its default."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from .base import Completion, Message, ToolCall, ToolSpec, Usage
from .chat_client import JsonChatClient
from .errors import MalformedResponseError, ModelConfigError, ModelConnectionError
from .http import (
    decode_stream_json,
)
from .providers import ClientRequest, register

DEFAULT_BASE_URL = "http://localhost:11434"
_FINISH = {"stop": "stop", "length": "length"}


def ollama_base_url(value: str | None) -> str:
    """A base URL from ``OLLAMA_HOST``'s forms (``0.0.0.0``, ``host:port``, ``http://host``)
    or a URL the user copied with ``/v1`` or ``/api`` on the end."""
    value = (value or "").strip().rstrip("/")
    if not value:
        return DEFAULT_BASE_URL
    if "://" not in value:
        value = f"http://{value}"
    parts = urlsplit(value)
    host = parts.hostname or "localhost"
    if host in ("0.0.0.0", "::"):  # the address Ollama listens on, not one to connect to
        host = "localhost"
    if ":" in host:
        host = f"[{host}]"
    port = parts.port or (443 if parts.scheme == "https" else 11434)
    path = parts.path
    for tail in ("/api/chat", "/api", "/v1"):
        path = path.removesuffix(tail)
    return f"{parts.scheme}://{host}:{port}{path}"


class OllamaClient(JsonChatClient):
    """Chat with tool calling over ``/api/chat``. ``num_ctx`` (when given) sets the context
    window the model is loaded with; Ollama reloads a model whose ``num_ctx`` changes, so keep
    it the same from call to call. Streams by default as the CLI does; ``on_text`` receives
    each piece of text."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        num_ctx: int | None = None,
        name: str | None = None,
        api_key: str | None = None,
        **options: Any,
    ) -> None:
        if not model:
            raise ModelConfigError("No model name given — pass e.g. ollama:qwen2.5-coder:7b.")
        super().__init__(model, name=name or f"ollama:{model}", **options)
        self.base_url = ollama_base_url(base_url)
        self.url = f"{self.base_url}/api/chat"
        self.num_ctx = num_ctx
        # A proxy in front of Ollama may want a bearer token; Ollama itself needs none.
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def parse(self, raw: dict[str, Any], latency_s: float) -> Completion:
        return parse_response(raw, latency_s, self.model)

    def build_request(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> dict[str, Any]:
        names = {c.id: c.name for m in messages for c in m.tool_calls}
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [to_wire_message(m, names) for m in messages],
            "stream": self.stream,
        }
        if tools:
            payload["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in tools
            ]
        options: dict[str, Any] = {}
        if self.num_ctx:
            options["num_ctx"] = self.num_ctx
        if max_tokens is not None:
            options["num_predict"] = max_tokens
        if temperature is not None:
            options["temperature"] = temperature
        if options:
            payload["options"] = options
        return payload

    def _stream(self, payload: dict[str, Any]) -> dict[str, Any]:
        acc = _Accumulator()
        with self._http.lines(self.url, payload, self._headers) as lines:
            for line in lines:
                if not line.strip():
                    continue
                text = acc.add(decode_stream_json(line, "stream line"))
                if text and self.on_text:
                    self.on_text(text)
                if acc.done:
                    break
        return acc.result()


def to_wire_message(message: Message, names: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.role == "tool":
        name = message.name or names.get(message.tool_call_id or "")
        if name:
            out["tool_name"] = name
    if message.tool_calls:
        out["tool_calls"] = [
            {"function": {"name": c.name, "arguments": c.arguments or {}}}
            for c in message.tool_calls
        ]
    return out


def parse_response(raw: Mapping[str, Any], latency_s: float, default_model: str) -> Completion:
    wire = raw.get("message")
    if not isinstance(wire, Mapping):
        raise MalformedResponseError(detail="the response has no `message`")
    content = wire.get("content") or ""
    if not isinstance(content, str):
        raise MalformedResponseError(detail=f"message content is a {type(content).__name__}")
    wire_calls = wire.get("tool_calls") or []
    if not isinstance(wire_calls, list):
        raise MalformedResponseError(detail="`tool_calls` is not a list")
    calls = tuple(_tool_call(i, c) for i, c in enumerate(wire_calls))
    reason = raw.get("done_reason") or "stop"
    finish = "tool_calls" if calls else _FINISH.get(reason, reason)
    prompt, completion = _int(raw.get("prompt_eval_count")), _int(raw.get("eval_count"))
    # `prompt_eval_count` is the whole prompt (cached tokens included, as llama.cpp's cache_n +
    # prompt_n); newer servers add `prompt_eval_cached_count`. Older ones leave the count out
    # when the whole prompt was cached: 0 here, and the agent counts the prompt itself.
    cached = raw.get("prompt_eval_cached_count")
    source = "server" if isinstance(cached, int) and not isinstance(cached, bool) else ""
    model = raw.get("model") if isinstance(raw.get("model"), str) else default_model
    return Completion(
        Message("assistant", content, calls),
        Usage(prompt, completion, prompt + completion, min(_int(cached), prompt), source),
        latency_s,
        model,
        finish,
        dict(raw),
    )


def _tool_call(index: int, wire: Any) -> ToolCall:
    if not isinstance(wire, Mapping) or not isinstance(wire.get("function"), Mapping):
        raise MalformedResponseError(detail=f"tool call {index} has no `function`")
    function = wire["function"]
    name = function.get("name") or ""
    call = ToolCall.from_raw(
        str(wire.get("id") or f"call_{index}"), str(name), function.get("arguments")
    )
    if not name and call.error is None:
        return ToolCall(call.id, "", None, call.raw_arguments, "the tool call has no function name")
    return call


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class _Accumulator:
    """Folds the stream's objects into the shape of one non-streamed reply."""

    def __init__(self) -> None:
        self.lines = 0
        self.done = False
        self.content: list[str] = []
        self.calls: list[Any] = []
        self.last: dict[str, Any] = {}

    def add(self, chunk: dict[str, Any]) -> str:
        self.lines += 1
        self.last = chunk
        message = chunk.get("message") if isinstance(chunk.get("message"), Mapping) else {}
        text = message.get("content") or ""
        if not isinstance(text, str):
            raise MalformedResponseError(detail=f"message content is a {type(text).__name__}")
        self.content.append(text)
        calls = message.get("tool_calls") or []
        if not isinstance(calls, list):
            raise MalformedResponseError(detail="`tool_calls` is not a list")
        self.calls += calls
        self.done = bool(chunk.get("done"))
        return text

    def result(self) -> dict[str, Any]:
        if not self.lines:
            raise MalformedResponseError(detail="the stream ended before any data")
        if not self.done:
            raise ModelConnectionError(detail="the stream ended before the reply was complete")
        message = {"role": "assistant", "content": "".join(self.content)}
        if self.calls:
            message["tool_calls"] = self.calls
        return {**self.last, "message": message}


@register("ollama")
def _ollama(req: ClientRequest) -> OllamaClient:
    ctx = req.context_tokens
    num_ctx = -(-ctx // 1024) * 1024 if ctx else None  # whole KiB, as Ollama's own sizes
    return OllamaClient(
        req.model, base_url=req.url("OLLAMA_HOST"), api_key=req.key(), num_ctx=num_ctx,
        **req.options,
    )
