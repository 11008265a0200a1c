"""OpenAI-compatible `/chat/completions` client (OpenAI, vLLM, Ollama, llama.cpp server, LM Studio)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from .base import Completion, Message, ToolCall, ToolSpec, Usage
from .chat_client import JsonChatClient
from .errors import (
    BadRequestError,
    MalformedResponseError,
    ModelConfigError,
    ModelConnectionError,
)
from .http import (
    DEFAULT_TIMEOUT_S,
    decode_stream_json,
)
from .providers import ClientRequest, host, register
from .server_tokens import ServerTokenizer

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# How servers name the field when they refuse it ("tool_choice", vLLM's "tool choice").
_TOOL_CHOICE = re.compile(r"tool[_ -]?choice", re.I)

_FINISH = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}


class OpenAIClient(JsonChatClient):
    """Chat completions with function calling.

    ``base_url`` follows the OpenAI SDK convention (it includes ``/v1``); a bare ``http://host:port``
    gets ``/v1`` appended. No key is sent when ``api_key`` is empty (local servers need none).
    With ``stream=True`` the reply is read as server-sent events and ``on_text`` receives each
    piece of text as it arrives.

    ``tool_choice`` ("auto" unless given) goes with every request that offers tools; a server
    that rejects the field (vLLM without --enable-auto-tool-choice) is asked again without it,
    and this client does not send it again.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_tokens_field: str | None = None,
        tool_choice: str | None = "auto",
        name: str | None = None,
        **options: Any,
    ) -> None:
        if not model:
            raise ModelConfigError("No model name given — pass e.g. openai:gpt-4o-mini.")
        super().__init__(model, name=name or f"openai:{model}", **options)
        self.base_url = normalize_base_url(base_url or DEFAULT_BASE_URL)
        self.url = f"{self.base_url}/chat/completions"
        self.tool_choice = tool_choice
        # OpenAI deprecated `max_tokens` (newer models reject it); local servers may only know it.
        hosted = urlsplit(self.base_url).hostname == "api.openai.com"
        self.max_tokens_field = max_tokens_field or (
            "max_completion_tokens" if hosted else "max_tokens"
        )
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        timeout = options.get("timeout", DEFAULT_TIMEOUT_S)
        self._tokens = ServerTokenizer(self.base_url, model, self._headers, timeout=timeout)

    def count_tokens(self, text: str) -> int | None:
        """``text`` in the server's own tokenizer (llama.cpp, vLLM, TGI), or None when the
        server has no tokenize endpoint; probed once."""
        return self._tokens.count(text)

    @property
    def tokenize_url(self) -> str:
        """The tokenize endpoint that answered ('' before a count, or when none did)."""
        return self._tokens.url

    def _send(self, payload: dict[str, Any]) -> dict[str, Any]:
        try:
            return super()._send(payload)
        except BadRequestError as exc:
            if "tool_choice" not in payload or not _TOOL_CHOICE.search(str(exc)):
                raise
            self.tool_choice = None  # this server takes tools but not the field
            return super()._send({k: v for k, v in payload.items() if k != "tool_choice"})

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
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [to_wire_message(m) for m in messages],
        }
        if tools:
            payload["tools"] = [to_wire_tool(t) for t in tools]
            if self.tool_choice:
                payload["tool_choice"] = self.tool_choice
        if max_tokens is not None:
            payload[self.max_tokens_field] = max_tokens
        if temperature is not None:
            payload["temperature"] = temperature
        return payload

    def _stream(self, payload: dict[str, Any]) -> dict[str, Any]:
        streamed = {**payload, "stream": True, "stream_options": {"include_usage": True}}
        acc = _StreamAccumulator()
        with self._http.stream(self.url, streamed, self._headers) as events:
            for event in events:
                if event.event == "json":
                    return json.loads(event.data)
                if event.data.strip() == "[DONE]":
                    acc.done = True
                    break
                text = acc.add(decode_stream_json(event.data, "stream chunk"))
                if text and self.on_text:
                    self.on_text(text)
        if not acc.chunks and not acc.done:
            # llama-cpp-python refuses a prompt longer than its context with an empty stream
            # (the reason goes to its log only); asked again without streaming, it says why —
            # "maximum context length is 8192 tokens ... 9030 in the messages".
            return self._http.post(self.url, payload, self._headers)
        return acc.result()


def normalize_base_url(url: str) -> str:
    url = url.strip().rstrip("/")
    url = url.removesuffix("/chat/completions")
    if not urlsplit(url).path:
        url += "/v1"
    return url


def to_wire_message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.name:
        out["name"] = message.name
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                # Echo what the model sent (even if malformed) so the history matches its output.
                "function": {"name": call.name, "arguments": _wire_arguments(call)},
            }
            for call in message.tool_calls
        ]
    return out


def _wire_arguments(call: ToolCall) -> str:
    if call.raw_arguments.strip():
        return call.raw_arguments
    return json.dumps(call.arguments or {}, ensure_ascii=False)


def to_wire_tool(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def parse_response(raw: Mapping[str, Any], latency_s: float, default_model: str) -> Completion:
    choices = raw.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise MalformedResponseError(detail="the response has no `choices`")
    choice = choices[0]
    wire = choice.get("message")
    if not isinstance(wire, Mapping):
        raise MalformedResponseError(detail="the first choice has no `message`")
    wire_calls = wire.get("tool_calls") or []
    if not isinstance(wire_calls, list):
        raise MalformedResponseError(detail="`tool_calls` is not a list")
    calls = tuple(_tool_call(i, c) for i, c in enumerate(wire_calls))
    finish = _FINISH.get(choice.get("finish_reason") or "stop", choice.get("finish_reason"))
    # Some servers (older Ollama) report "stop" even when the reply is a tool call.
    if calls and finish == "stop":
        finish = "tool_calls"
    message = Message("assistant", _text(wire.get("content")), calls)
    model = raw.get("model") if isinstance(raw.get("model"), str) else default_model
    usage = _usage(raw.get("usage"), raw.get("timings"))
    return Completion(message, usage, latency_s, model, finish, dict(raw))


def _tool_call(index: int, wire: Any) -> ToolCall:
    if not isinstance(wire, Mapping):
        raise MalformedResponseError(detail=f"tool call {index} is not an object")
    function = wire.get("function") if isinstance(wire.get("function"), Mapping) else {}
    call_id = wire.get("id") or f"call_{index}"
    name = function.get("name") or ""
    call = ToolCall.from_raw(str(call_id), str(name), function.get("arguments"))
    if not name and call.error is None:
        return ToolCall(call.id, "", None, call.raw_arguments, "the tool call has no function name")
    return call


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    raise MalformedResponseError(detail=f"message content is a {type(content).__name__}")


def _usage(usage: Any, timings: Any = None) -> Usage:
    """Token counts, and the prompt tokens the server reused from its cache where it says:
    OpenAI and vLLM in ``usage.prompt_tokens_details.cached_tokens``, llama.cpp's server in
    ``timings`` (``cache_n`` reused, ``prompt_n`` processed). llama-cpp-python says neither."""
    usage = usage if isinstance(usage, Mapping) else {}
    prompt = _int(usage.get("prompt_tokens"))
    completion = _int(usage.get("completion_tokens"))
    total = _int(usage.get("total_tokens")) or prompt + completion
    cached, source = 0, ""
    details = usage.get("prompt_tokens_details")
    if isinstance(details, Mapping) and _is_int(details.get("cached_tokens")):
        cached, source = details["cached_tokens"], "server"
    if isinstance(timings, Mapping) and _is_int(timings.get("cache_n")):
        cached, source = timings["cache_n"], "server"
        # Its usage may be missing (a stream without include_usage): the timings have it all.
        prompt = prompt or cached + _int(timings.get("prompt_n"))
        completion = completion or _int(timings.get("predicted_n"))
        total = total or prompt + completion
    if not (prompt or completion or source):
        return Usage()
    return Usage(prompt, completion, total, min(cached, prompt) if prompt else cached, source)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class _StreamAccumulator:
    """Folds `chat.completion.chunk` deltas into the shape of a non-streamed response."""

    def __init__(self) -> None:
        self.chunks = 0
        self.done = False
        self.id: str | None = None
        self.model: str | None = None
        self.content: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self.timings: dict[str, Any] | None = None

    def add(self, chunk: Mapping[str, Any]) -> str:
        self.chunks += 1
        self.id = self.id or chunk.get("id")
        self.model = chunk.get("model") or self.model
        if isinstance(chunk.get("usage"), Mapping):
            self.usage = dict(chunk["usage"])
        if isinstance(chunk.get("timings"), Mapping):  # llama.cpp's server, on the last chunk
            self.timings = dict(chunk["timings"])
        text = ""
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            piece = _text(delta.get("content"))
            if piece:
                self.content.append(piece)
                text += piece
            for wire in delta.get("tool_calls") or []:
                self._add_call(wire)
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return text

    def _add_call(self, wire: Mapping[str, Any]) -> None:
        index = wire.get("index")
        if not isinstance(index, int):
            # Servers that omit `index` start a new call with each id and continue the last one.
            index = len(self.calls) if wire.get("id") or not self.calls else max(self.calls)
        slot = self.calls.setdefault(index, {"id": None, "name": "", "arguments": []})
        if wire.get("id"):
            slot["id"] = wire["id"]
        function = wire.get("function") or {}
        if function.get("name"):
            slot["name"] = function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            slot["arguments"].append(arguments)
        elif isinstance(arguments, Mapping):
            slot["arguments"] = [json.dumps(arguments, ensure_ascii=False)]

    def result(self) -> dict[str, Any]:
        if not self.chunks:
            raise MalformedResponseError(detail="the stream ended before any data")
        if not self.done and self.finish is None:
            raise ModelConnectionError(detail="the stream ended before the reply was complete")
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content)}
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": slot["id"] or f"call_{i}",
                    "type": "function",
                    "function": {"name": slot["name"], "arguments": "".join(slot["arguments"])},
                }
                for i, slot in sorted(self.calls.items())
            ]
        out = {
            "id": self.id,
            "object": "chat.completion",
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish}],
            "usage": self.usage,
        }
        if self.timings is not None:
            out["timings"] = self.timings
        return out


#: Local OpenAI-compatible servers and their default addresses; none needs a key.
#: (`ollama:` is Ollama's native API, which can set the context size; `ollama-openai:` its /v1.)
LOCAL_SERVERS = {
    "ollama-openai": "http://localhost:11434/v1",
    "lmstudio": "http://localhost:1234/v1",
    "llamacpp": "http://localhost:8080/v1",
    "vllm": "http://localhost:8000/v1",
}


@register("openai")
def _openai(req: ClientRequest) -> OpenAIClient:
    url = req.url("OPENAI_BASE_URL")
    key = req.key("OPENAI_API_KEY")
    if not key and host(url or DEFAULT_BASE_URL) == "api.openai.com":
        raise ModelConfigError(
            f"No API key for {req.spec} — set OPENAI_API_KEY (or REPOCTX_API_KEY), or set "
            "REPOCTX_MODEL_BASE_URL to a local OpenAI-compatible server."
        )
    return OpenAIClient(req.model, base_url=url, api_key=key, **req.options)


@register(*LOCAL_SERVERS)
def _local_server(req: ClientRequest) -> OpenAIClient:
    url = req.url() or LOCAL_SERVERS[req.provider]
    if req.provider == "ollama-openai" and not req.url() and req.first("OLLAMA_HOST"):
        from .ollama import ollama_base_url

        url = ollama_base_url(req.first("OLLAMA_HOST")) + "/v1"
    return OpenAIClient(req.model, base_url=url, api_key=req.key(), **req.options)
