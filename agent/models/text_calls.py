"""Tool calls a model wrote in the text of its reply instead of the provider's `tool_calls`.

Small local models often do: llama.cpp's server with a GGUF chat template renders the tools into
the prompt, and Qwen2.5-Coder answers with Hermes `<tool_call>{...}</tool_call>` tags, a fenced
```json block or bare JSON, while `tool_calls` stays empty and the finish reason is "stop".

    parsed = parse_text_calls(reply.content, names={"read_span", "finish"})
    parsed.calls      # ToolCalls, in the order written, validated later like native ones
    parsed.text       # the reply without the calls, their tags and their fences
    parsed.malformed  # a correction for the model when a part looks like a call but is broken

JSON objects are found with ``json.JSONDecoder.raw_decode`` (balanced braces, strings with
braces in them), never with a regular expression over JSON.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .base import ToolCall, ToolSpec

#: How to write a call. The capitals stand for no real tool, argument or value and the text
#: says it is a form to fill in: small models copy an example's values as their next call (a
#: made-up path read as a real one).
CALL_EXAMPLE = (
    '<tool_call>{"name": "TOOL_NAME", "arguments": {"ARGUMENT": "VALUE"}}</tool_call> (the form '
    "only: TOOL_NAME, ARGUMENT and VALUE stand for a tool you were given, its arguments and your "
    "values)"
)
#: Characters of the model's own broken call quoted back in a correction.
QUOTE_CHARS = 160

_TAG = re.compile(r"<tool_call>(?P<body>.*?)(?:</tool_call>|\Z)", re.S)
_FENCE = re.compile(r"```[\w+-]*[ \t]*\n(?P<body>.*?)(?:```|\Z)", re.S)
# Markers some chat templates put around calls (Llama 3, Mistral, Hermes variants), and the
# `<tools>` wrapper Qwen2.5-Coder 1.5B was seen to write instead of `<tool_call>`.
_MARKERS = re.compile(r"</?tool(?:_call)?s?>|<\|python_tag\|>|\[TOOL_CALLS\]|<\|tool_call\|>")
_EMPTY_FENCE = re.compile(r"```[\w+-]*\s*```")
_NAME = re.compile(r"^[A-Za-z_][\w.-]{0,63}$")
# A broken object "looks like a call" when it names a function and its arguments (quoted either
# way: a Python dict written for JSON is a broken call too).
_NAME_KEY = re.compile(r"""["']name["']\s*:""")
_ARGS_KEY = re.compile(r"""["'](?:arguments|parameters)["']\s*:""")
_DECODER = json.JSONDecoder()
_ARG_KEYS = ("arguments", "parameters")
#: Keys besides the name and arguments that a call object may carry.
_EXTRA_KEYS = frozenset({"id", "type"})


@dataclass(frozen=True)
class TextCalls:
    """What :func:`parse_text_calls` found. ``form`` says where the first call was written:
    ``tag`` (``<tool_call>``), ``fenced`` (a code fence), ``json`` (bare), '' (no call)."""

    calls: tuple[ToolCall, ...]
    text: str
    malformed: str = ""
    form: str = ""


@dataclass(frozen=True)
class _Found:
    start: int
    end: int
    calls: tuple[ToolCall, ...]


def parse_text_calls(
    text: str, *, names: Collection[str] = (), id_prefix: str = "text_call"
) -> TextCalls:
    """The tool calls written in ``text``: JSON objects with ``name`` and ``arguments`` (or
    ``parameters``), bare, fenced or in ``<tool_call>`` tags; lists of them; OpenAI-shaped
    ``{"function": {...}}`` objects and ``{"tool_calls": [...]}``. An object with only a
    ``name`` counts when that name is one of ``names`` (a tool without arguments).

    Call-like parts that are not valid JSON are not guessed at: ``malformed`` says what is
    wrong, for the model to send again."""
    return _parse(text or "", frozenset(names), id_prefix)[0]


def tools_prompt(tools: Collection[ToolSpec]) -> str:
    """The tools described for a model that is sent none (``--tool-format text``), in the
    Hermes form Qwen and other open models are trained on."""
    lines = [
        json.dumps(
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            },
            ensure_ascii=False,
        )
        for t in tools
    ]
    return (
        "# Tools\n\nYou may call one or more functions. Their signatures are within "
        "<tools></tools> XML tags:\n<tools>\n" + "\n".join(lines) + "\n</tools>\n\n"
        "For each call, write a JSON object with the function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, '
        '"arguments": <args-json-object>}\n</tool_call>'
    )


def prose(text: str, names: Collection[str] = ()) -> str:
    """``text`` without any tool call written in it, well-formed or broken: what a summary may
    show."""
    parsed, spans = _parse(text or "", frozenset(names), "text_call")
    if not parsed.malformed:
        return parsed.text
    return _without(text, spans, drop_tags=True)


def _parse(
    text: str, names: frozenset[str], id_prefix: str
) -> tuple[TextCalls, list[tuple[int, int]]]:
    """The calls, and the spans of text that hold calls or broken call-like parts."""
    if "{" not in text and "<tool_call>" not in text:
        return TextCalls((), text.strip()), []
    found, broken = _scan(text, names)
    for m in _TAG.finditer(text):
        body_start, body_end = m.start("body"), m.end("body")
        inside = [*(f.start for f in found), *broken]
        if not any(body_start <= pos < body_end for pos in inside):
            body = text[body_start:body_end]
            problem = _tag_problem(body) if body.strip() else "the <tool_call> block is empty"
            broken.setdefault(body_start, problem)
    # A broken wrapper around a call that was read (`{"tool_calls": [ {...} ` cut short) is
    # not reported when the call inside it was found.
    problems, spans, wrote = [], [(f.start, f.end) for f in found], []
    for pos, why in sorted(broken.items()):
        end = _region_end(text, pos)
        if not any(f.start > pos and f.end <= end for f in found):
            problems.append(why)
            spans.append((pos, end))
            wrote.append(text[pos:end])
    calls: list[ToolCall] = []
    for f in found:
        for call in f.calls:
            call_id = call.id or f"{id_prefix}_{len(calls)}"
            calls.append(
                ToolCall(call_id, call.name, call.arguments, call.raw_arguments, call.error)
            )
    rest = _without(text, [(f.start, f.end) for f in found], drop_tags=bool(found))
    parsed = TextCalls(
        tuple(calls),
        rest,
        _correction(problems, wrote) if problems else "",
        _form(text, found[0]) if found else "",
    )
    return parsed, spans


# -- scanning ------------------------------------------------------------------------------------


def _scan(text: str, names: frozenset[str]) -> tuple[list[_Found], dict[int, str]]:
    found: list[_Found] = []
    broken: dict[int, str] = {}
    i = 0
    n = len(text)
    while i < n:
        if text[i] not in "{[":
            i += 1
            continue
        try:
            value, end = _DECODER.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            if text[i] == "{" and _looks_like_call(text[i : _region_end(text, i)]):
                broken.setdefault(i, _json_problem(text, i, exc))
            i += 1
            continue
        except RecursionError:
            # Nested deeper than the decoder goes: no call is that deep, and every inner
            # bracket would fail the same way, so skip the whole run of them at once.
            if text[i] == "{" and _looks_like_call(text[i : _region_end(text, i)]):
                broken.setdefault(i, "an object nested too deeply — send a flat JSON object")
            i = _region_end(text, i + 1)
            continue
        calls = tuple(_calls_in(value, names))
        if calls:
            found.append(_Found(i, end, calls))
        # Not a call (a plan, an example): nothing inside it is one either.
        i = end
    return found, broken


def _looks_like_call(segment: str) -> bool:
    return bool(_NAME_KEY.search(segment) and _ARGS_KEY.search(segment))


def _calls_in(value: Any, names: frozenset[str]) -> Iterator[ToolCall]:
    if isinstance(value, list):
        items = [_call(v, names) for v in value]
        if items and all(c is not None for c in items):
            yield from (c for c in items if c is not None)
        return
    if isinstance(value, Mapping):
        nested = value.get("tool_calls")
        if isinstance(nested, list) and set(value) <= {"tool_calls", "content", "role"}:
            yield from _calls_in(nested, names)
            return
        call = _call(value, names)
        if call is not None:
            yield call


def _call(value: Any, names: frozenset[str]) -> ToolCall | None:
    if not isinstance(value, Mapping):
        return None
    function = value.get("function")
    if isinstance(function, Mapping) and set(value) <= {"function", *_EXTRA_KEYS}:
        inner = _call(function, names)
        if inner is None:
            return None
        call_id = value.get("id") if isinstance(value.get("id"), str) else ""
        return ToolCall(call_id, inner.name, inner.arguments, inner.raw_arguments, inner.error)
    name = value.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        return None
    keys = set(value)
    arg_keys = [k for k in _ARG_KEYS if k in keys]
    if not arg_keys:
        # `{"name": "run_tests"}`: only for a tool that exists, or any {"name": ...} would do.
        if name in names and keys <= {"name", *_EXTRA_KEYS}:
            return ToolCall("", name, {}, "{}")
        return None
    # Other keys are allowed next to a tool's own name; for an unknown name they mean the object
    # is data (`{"name": ..., "arguments": ..., "license": ...}`), not a call.
    if len(arg_keys) > 1 or (name not in names and not keys <= {"name", *arg_keys, *_EXTRA_KEYS}):
        return None
    call_id = value.get("id") if isinstance(value.get("id"), str) else ""
    args = value[arg_keys[0]]
    beside = {k: v for k, v in value.items() if k not in {"name", arg_keys[0], *_EXTRA_KEYS}}
    if beside and isinstance(args, Mapping):
        # `{"name": "update_plan", "arguments": {"complete": true}, "reason": "..."}`: a key
        # written next to the arguments is one of them (the schema check still applies).
        args = {**beside, **args}
    return ToolCall.from_raw(call_id, name, args)


# -- what is left, and what to tell the model ----------------------------------------------------


def _region_end(text: str, start: int) -> int:
    """Where a broken object starting at ``start`` can end at most: its tag, its fence, or the
    end of the text."""
    ends = [len(text)]
    for marker in ("</tool_call>", "```"):
        pos = text.find(marker, start)
        if pos != -1:
            ends.append(pos)
    return min(ends)


def _without(text: str, spans: list[tuple[int, int]], drop_tags: bool) -> str:
    """``text`` without ``spans``; with ``drop_tags``, tags and fences left empty go too."""
    parts, pos = [], 0
    for start, end in sorted(spans):
        if start >= pos:
            parts.append(text[pos:start])
        pos = max(pos, end)
    parts.append(text[pos:])
    rest = "".join(parts)
    if drop_tags:
        rest = _TAG.sub(lambda m: m.group("body") if m.group("body").strip() else "", rest)
        rest = _EMPTY_FENCE.sub("", rest)
    rest = _MARKERS.sub("", rest)
    if spans and not rest.strip("{}[], \n\t"):
        return ""  # stray braces around a call (`{{"name": ...}}}`, seen from Qwen2.5-Coder)
    return re.sub(r"\n{3,}", "\n\n", rest).strip()


def _form(text: str, first: _Found) -> str:
    if any(m.start("body") <= first.start < m.end("body") for m in _TAG.finditer(text)):
        return "tag"
    if any(m.start("body") <= first.start < m.end("body") for m in _FENCE.finditer(text)):
        return "fenced"
    return "json"


def _json_problem(text: str, start: int, exc: json.JSONDecodeError) -> str:
    line = text.count("\n", start, exc.pos) + 1
    near = " ".join(text[max(start, exc.pos - 30) : exc.pos + 10].split())
    return f"{exc.msg} in line {line} of the call, near `{near}`"


def _tag_problem(body: str) -> str:
    stripped = body.strip()
    if not stripped.startswith("{"):
        return f"the <tool_call> block does not start with a JSON object: `{stripped[:40]}`"
    try:
        value, _ = _DECODER.raw_decode(stripped)
    except json.JSONDecodeError as exc:
        return _json_problem(stripped, 0, exc)
    if not isinstance(value, Mapping) or "name" not in value:
        return "the <tool_call> object has no `name`"
    return 'the <tool_call> object needs exactly `name` and `arguments`: {"name": ..., "arguments": {...}}'


def _correction(problems: list[str], wrote: list[str]) -> str:
    """What was wrong, quoting the model's own call back (clipped): an invented example here
    became small models' next call."""
    why = "; ".join(dict.fromkeys(problems))
    quoted = " ".join(" ".join(w.split()) for w in wrote[:2])
    if len(quoted) > QUOTE_CHARS:
        quoted = quoted[: QUOTE_CHARS - 1] + "…"
    return (
        f"Your reply looks like a tool call, but it could not be read: {why}. Nothing was run. "
        + (f"You wrote: {quoted} " if quoted else "")
        + "Send that call again as one JSON object with double-quoted keys and strings, no "
        'trailing commas and every brace closed, {"name": ..., "arguments": {...}} inside '
        "<tool_call></tool_call>. When the task is done, call `finish`."
    )
