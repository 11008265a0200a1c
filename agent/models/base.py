"""The model-client seam: records that cross it and the protocol every adapter implements."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

ROLES = frozenset({"system", "user", "assistant", "tool"})

#: Normalised finish reasons (providers' own values stay in ``Completion.raw``).
FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter"})


@dataclass(frozen=True)
class ToolCall:
    """One tool invocation requested by the model.

    ``arguments`` is None when the model sent arguments that are not a JSON object; ``error`` then
    says why, so the agent loop can hand the problem back to the model instead of crashing.
    ``raw_arguments`` is exactly what the model sent.
    """

    id: str
    name: str
    arguments: dict[str, Any] | None
    raw_arguments: str
    error: str | None = None

    @classmethod
    def from_raw(cls, id: str, name: str, raw: str | Mapping[str, Any] | None) -> ToolCall:
        """Parse arguments as sent on the wire (a JSON string, or an already-decoded object)."""
        if raw is None:
            return cls(id, name, {}, "", None)
        if isinstance(raw, Mapping):
            return cls(id, name, dict(raw), json.dumps(raw, ensure_ascii=False), None)
        if not isinstance(raw, str):
            text = json.dumps(raw, ensure_ascii=False)
            return cls(id, name, None, text, f"arguments must be a JSON object, got {text[:80]}")
        # Some local servers send "" for tools that take no arguments.
        if not raw.strip():
            return cls(id, name, {}, raw, None)
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            return cls(id, name, None, raw, f"arguments are not valid JSON: {exc}")
        except RecursionError:  # model output nested deeper than the decoder goes
            return cls(id, name, None, raw, "arguments are nested too deeply — send a flat "
                       "JSON object")
        if not isinstance(value, dict):
            kind = type(value).__name__
            return cls(id, name, None, raw, f"arguments must be a JSON object, got {kind}")
        return cls(id, name, value, raw, None)


@dataclass(frozen=True)
class Message:
    """One chat message. ``tool`` messages answer the assistant tool call named by ``tool_call_id``."""

    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {sorted(ROLES)}, got {self.role!r}")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id it answers")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages carry tool_calls")
        if not isinstance(self.tool_calls, tuple):
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))

    @classmethod
    def system(cls, content: str) -> Message:
        return cls("system", content)

    @classmethod
    def user(cls, content: str) -> Message:
        return cls("user", content)

    @classmethod
    def assistant(cls, content: str, tool_calls: Sequence[ToolCall] = ()) -> Message:
        return cls("assistant", content, tuple(tool_calls))

    @classmethod
    def tool(cls, tool_call_id: str, content: str, name: str | None = None) -> Message:
        return cls("tool", content, tool_call_id=tool_call_id, name=name)


@dataclass(frozen=True)
class ToolSpec:
    """A tool offered to the model; ``parameters`` is a JSON schema for its arguments object."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


#: Where ``Usage.cached_tokens`` comes from: the server said so, repoctx worked it out from the
#: prompt it sent before (the longest common prefix, in the model's tokens), or nobody knows.
CACHE_SOURCES = ("server", "estimate", "")


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    #: Prompt tokens the server took from its cache instead of processing them again (a prompt
    #: that extends the previous one is mostly reused); ``prompt_tokens - cached_tokens`` were
    #: processed. See ``cache_source`` for whether it was reported or estimated.
    cached_tokens: int = 0
    cache_source: str = ""

    @property
    def processed_tokens(self) -> int:
        return max(0, self.prompt_tokens - self.cached_tokens)

    def __add__(self, other: Usage) -> Usage:
        sources = {self.cache_source, other.cache_source} - {""}
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
            self.cached_tokens + other.cached_tokens,
            # a sum of reported and estimated figures is only an estimate
            "" if not sources else ("server" if sources == {"server"} else "estimate"),
        )


@dataclass(frozen=True)
class Completion:
    """One model reply. ``latency_s`` is wall time of the whole call, retries included;
    ``finish_reason`` is one of FINISH_REASONS where the provider's value maps onto one;
    ``raw`` is the provider's response body (assembled from chunks when streaming)."""

    message: Message
    usage: Usage
    latency_s: float
    model: str
    finish_reason: str
    raw: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class ModelClient(Protocol):
    name: str

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> Completion: ...
