"""A model that replays canned responses from a file: for tests, demos and offline agent runs."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import Completion, Message, ToolCall, ToolSpec, Usage
from .errors import ModelConfigError, ScriptExhaustedError
from .providers import ClientRequest, register

_ENTRY_KEYS = frozenset({"content", "tool_calls", "finish_reason"})
_CALL_KEYS = frozenset({"name", "arguments", "id"})


@dataclass(frozen=True)
class ScriptedCall:
    """What the scripted model was sent on one call."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]
    max_tokens: int | None
    temperature: float | None


@dataclass(frozen=True)
class _ScriptedCallSpec:
    name: str
    arguments: str | dict[str, Any] | None
    id: str | None


@dataclass(frozen=True)
class _Entry:
    content: str
    tool_calls: tuple[_ScriptedCallSpec, ...]
    finish_reason: str | None
    raw: dict[str, Any]


class ScriptedModel:
    """Replays responses in order; ``calls`` records every request, including one that found the
    script exhausted.

    ``script`` is a path to JSON (a list of entries, ``{"responses": [...]}`` or one entry) or
    JSONL (one entry per line), or the entries themselves. An entry is a string (the content) or
    ``{"content": str, "tool_calls": [{"name": str, "arguments": object | str, "id"?: str}],
    "finish_reason"?: str}``; string arguments are passed through unparsed, so a script can feed
    the agent malformed JSON. Usage counts whitespace-separated tokens.
    """

    def __init__(
        self, script: str | os.PathLike[str] | Sequence[Any], *, name: str | None = None
    ) -> None:
        if isinstance(script, str | os.PathLike):
            path = Path(script)
            located = load_script(path)
            self.name = name or f"scripted:{path}"
        else:
            located = [(f"entry {i}", entry) for i, entry in enumerate(script, 1)]
            self.name = name or "scripted"
        self._entries = [_parse_entry(entry, where) for where, entry in located]
        self.calls: list[ScriptedCall] = []

    @property
    def remaining(self) -> int:
        return max(0, len(self._entries) - len(self.calls))

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> Completion:
        start = time.monotonic()
        self.calls.append(ScriptedCall(tuple(messages), tuple(tools), max_tokens, temperature))
        number = len(self.calls)
        if number > len(self._entries):
            raise ScriptExhaustedError(
                f"The scripted model {self.name} was called {number} times but its script has "
                f"{len(self._entries)} responses — add entries to the script file."
            )
        entry = self._entries[number - 1]
        calls = tuple(
            ToolCall.from_raw(spec.id or f"call_{number}_{i}", spec.name, spec.arguments)
            for i, spec in enumerate(entry.tool_calls)
        )
        message = Message("assistant", entry.content, calls)
        prompt = sum(_message_tokens(m) for m in messages)
        completion = _message_tokens(message)
        finish = entry.finish_reason or ("tool_calls" if calls else "stop")
        usage = Usage(prompt, completion, prompt + completion)
        return Completion(message, usage, time.monotonic() - start, "scripted", finish, entry.raw)


def load_script(path: Path) -> list[tuple[str, Any]]:
    """Read a script file into (location, entry) pairs; locations name the file and entry/line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ModelConfigError(
            f"Script file {path} not found — pass an existing JSON or JSONL file to scripted:."
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelConfigError(f"Cannot read script file {path}: {exc} — check the file.") from exc
    if path.suffix.lower() != ".jsonl":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if path.suffix.lower() == ".json":
                raise ModelConfigError(
                    f"{path} is not valid JSON ({exc}) — fix the file or use JSONL."
                ) from exc
        else:
            if isinstance(data, Mapping) and "responses" in data:
                data = data["responses"]
            if isinstance(data, Mapping):
                data = [data]
            if not isinstance(data, list):
                raise ModelConfigError(
                    f"{path} must hold a list of responses — see ScriptedModel for the format."
                )
            return [(f"{path} entry {i}", entry) for i, entry in enumerate(data, 1)]
    located = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            located.append((f"{path}:{lineno}", json.loads(line)))
        except json.JSONDecodeError as exc:
            raise ModelConfigError(
                f"{path}:{lineno} is not valid JSON ({exc}) — fix that line of the script."
            ) from exc
    return located


def _parse_entry(entry: Any, where: str) -> _Entry:
    if isinstance(entry, str):
        return _Entry(entry, (), None, {"content": entry})
    if not isinstance(entry, Mapping):
        raise _bad(where, "an entry must be a string or an object")
    unknown = set(entry) - _ENTRY_KEYS
    if unknown:
        raise _bad(where, f"unknown keys {sorted(unknown)}; allowed: {sorted(_ENTRY_KEYS)}")
    content = entry.get("content", "")
    if not isinstance(content, str):
        raise _bad(where, "`content` must be a string")
    wire_calls = entry.get("tool_calls") or []
    if not isinstance(wire_calls, list):
        raise _bad(where, "`tool_calls` must be a list")
    finish = entry.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise _bad(where, "`finish_reason` must be a string")
    calls = tuple(_parse_call(call, f"{where} tool call {i}") for i, call in enumerate(wire_calls))
    return _Entry(content, calls, finish, dict(entry))


def _parse_call(call: Any, where: str) -> _ScriptedCallSpec:
    if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
        raise _bad(where, "a tool call must be an object with a string `name`")
    unknown = set(call) - _CALL_KEYS
    if unknown:
        raise _bad(where, f"unknown keys {sorted(unknown)}; allowed: {sorted(_CALL_KEYS)}")
    arguments = call.get("arguments")
    if arguments is not None and not isinstance(arguments, str | Mapping):
        raise _bad(where, "`arguments` must be an object or a string")
    call_id = call.get("id")
    if call_id is not None and not isinstance(call_id, str):
        raise _bad(where, "`id` must be a string")
    return _ScriptedCallSpec(call["name"], arguments, call_id)


def _bad(where: str, problem: str) -> ModelConfigError:
    return ModelConfigError(f"Bad scripted response at {where}: {problem} — fix the script.")


def _message_tokens(message: Message) -> int:
    return len(message.content.split()) + sum(
        len(call.raw_arguments.split()) for call in message.tool_calls
    )


@register("scripted")
def _scripted(req: ClientRequest) -> ScriptedModel:
    return ScriptedModel(req.model, name=f"scripted:{req.model}")
