"""Anthropic Messages API client (`/v1/messages`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .base import Completion, Message, ToolCall, ToolSpec, Usage
from .chat_client import JsonChatClient
from .errors import MalformedResponseError, ModelConfigError, ModelConnectionError
from .http import (
    decode_stream_json,
)
from .providers import ClientRequest, host, register

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
#: The API requires max_tokens on every request.
DEFAULT_MAX_TOKENS = 4096

_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


class AnthropicClient(JsonChatClient):
    """Messages API with tool use. System messages are joined into the top-level ``system``;
    tool messages become ``tool_result`` blocks in a user turn (consecutive ones share a turn).

    With ``prompt_cache`` (the default) the request marks two cache breakpoints: the system
    text (so the tools and the system prompt are cached) and the last block of the last turn
    (so the next request, which extends this one, reads the whole conversation back from the
    cache). Anthropic caches only what a request marks; usage reports the tokens read back."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        name: str | None = None,
        prompt_cache: bool = True,
        **options: Any,
    ) -> None:
        if not model:
            raise ModelConfigError("No model name given — pass e.g. anthropic:claude-sonnet-4-5.")
        super().__init__(model, name=name or f"anthropic:{model}", **options)
        base = (base_url or DEFAULT_BASE_URL).strip().rstrip("/")
        base = base.removesuffix("/messages").removesuffix("/v1")
        self.url = f"{base}/v1/messages"
        self.default_max_tokens = default_max_tokens
        self.prompt_cache = prompt_cache
        self._headers = {"anthropic-version": API_VERSION}
        if api_key:
            self._headers["x-api-key"] = api_key

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
        system = "\n\n".join(m.content for m in messages if m.role == "system" and m.content)
        turns: list[dict[str, Any]] = []
        for message in messages:
            if message.role == "system":
                continue
            role, blocks = to_wire_blocks(message)
            if not blocks:
                continue
            # The API wants alternating turns; parallel tool results must share one user turn.
            if turns and turns[-1]["role"] == role:
                turns[-1]["content"].extend(blocks)
            else:
                turns.append({"role": role, "content": blocks})
        payload: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens if max_tokens is not None else self.default_max_tokens,
            "messages": turns,
        }
        if system:
            payload["system"] = system
        if self.prompt_cache:
            mark = {"type": "ephemeral"}
            if system:
                payload["system"] = [{"type": "text", "text": system, "cache_control": mark}]
            if turns and turns[-1]["content"]:
                last = turns[-1]["content"]
                last[-1] = {**last[-1], "cache_control": mark}
        if tools:
            payload["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in tools
            ]
        if temperature is not None:
            payload["temperature"] = temperature
        return payload

    def _stream(self, payload: dict[str, Any]) -> dict[str, Any]:
        acc = _StreamAccumulator()
        with self._http.stream(self.url, {**payload, "stream": True}, self._headers) as events:
            for event in events:
                if event.event == "json":
                    return json.loads(event.data)
                text = acc.add(decode_stream_json(event.data, "stream event"))
                if text and self.on_text:
                    self.on_text(text)
                if acc.done:
                    break
        return acc.result()


def to_wire_blocks(message: Message) -> tuple[str, list[dict[str, Any]]]:
    if message.role == "tool":
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
        if message.content:
            block["content"] = message.content
        return "user", [block]
    # The API rejects empty or whitespace-only text blocks.
    blocks: list[dict[str, Any]] = (
        [{"type": "text", "text": message.content}] if message.content.strip() else []
    )
    for call in message.tool_calls:
        blocks.append(
            {
                "type": "tool_use",
                "id": call.id,
                "name": call.name,
                # `input` must be an object; a malformed call is explained by its tool result.
                "input": call.arguments if call.arguments is not None else {},
            }
        )
    return message.role, blocks


def parse_response(raw: Mapping[str, Any], latency_s: float, default_model: str) -> Completion:
    content = raw.get("content")
    if not isinstance(content, list):
        raise MalformedResponseError(detail="the response has no `content` list")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for index, block in enumerate(content):
        if not isinstance(block, Mapping):
            raise MalformedResponseError(detail=f"content block {index} is not an object")
        if block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            call_id = str(block.get("id") or f"toolu_{index}")
            calls.append(ToolCall.from_raw(call_id, str(block.get("name", "")), block.get("input")))
    stop = raw.get("stop_reason")
    finish = _FINISH.get(stop, stop) if stop else ("tool_calls" if calls else "stop")
    message = Message("assistant", "".join(texts), tuple(calls))
    model = raw.get("model") if isinstance(raw.get("model"), str) else default_model
    return Completion(message, _usage(raw.get("usage")), latency_s, model, finish, dict(raw))


def _usage(usage: Any) -> Usage:
    if not isinstance(usage, Mapping):
        return Usage()
    # `input_tokens` excludes cached prompt tokens; the prompt's size is the sum of all three.
    prompt = sum(
        _int(usage.get(key))
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
    completion = _int(usage.get("output_tokens"))
    # Prompt caching reports what it read back (0 when nothing was: still the server's word).
    read = usage.get("cache_read_input_tokens")
    source = "server" if isinstance(read, int) and not isinstance(read, bool) else ""
    return Usage(prompt, completion, prompt + completion, _int(read), source)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class _StreamAccumulator:
    """Folds Messages API stream events into the shape of a non-streamed response."""

    def __init__(self) -> None:
        self.message: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json_parts: dict[int, list[str]] = {}
        self.usage: dict[str, Any] = {}
        self.stop_reason: str | None = None
        self.done = False

    def add(self, event: Mapping[str, Any]) -> str:
        kind = event.get("type")
        index = event.get("index", 0)
        if kind == "message_start":
            self.message = dict(event.get("message") or {})
            self.usage.update(self.message.get("usage") or {})
        elif kind == "content_block_start":
            self.blocks[index] = dict(event.get("content_block") or {})
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            block = self.blocks.setdefault(index, {"type": "text", "text": ""})
            if delta.get("type") == "text_delta":
                block["text"] = block.get("text", "") + delta.get("text", "")
                return str(delta.get("text", ""))
            if delta.get("type") == "input_json_delta":
                self.json_parts.setdefault(index, []).append(delta.get("partial_json", ""))
        elif kind == "message_delta":
            self.stop_reason = (event.get("delta") or {}).get("stop_reason") or self.stop_reason
            self.usage.update(event.get("usage") or {})
        elif kind == "message_stop":
            self.done = True
        return ""

    def result(self) -> dict[str, Any]:
        if not self.message and not self.blocks:
            raise MalformedResponseError(detail="the stream ended before any data")
        if not self.done:
            raise ModelConnectionError(detail="the stream ended before the reply was complete")
        content = []
        for index, block in sorted(self.blocks.items()):
            if block.get("type") == "tool_use" and index in self.json_parts:
                text = "".join(self.json_parts[index])
                block = {**block, "input": _parse_or_keep(text)}
            content.append(block)
        return {
            **self.message,
            "content": content,
            "stop_reason": self.stop_reason,
            "usage": self.usage,
        }


def _parse_or_keep(text: str) -> Any:
    """Decoded JSON when valid; otherwise the raw text, which ToolCall reports as malformed."""
    try:
        return json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        return text


@register("anthropic")
def _anthropic(req: ClientRequest) -> AnthropicClient:
    url = req.url("ANTHROPIC_BASE_URL")
    key = req.key("ANTHROPIC_API_KEY")
    if not key and host(url or DEFAULT_BASE_URL) == "api.anthropic.com":
        raise ModelConfigError(
            f"No API key for {req.spec} — set ANTHROPIC_API_KEY (or REPOCTX_API_KEY)."
        )
    return AnthropicClient(req.model, base_url=url, api_key=key, **req.options)
