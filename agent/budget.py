"""What a run may spend and when it must stop: the per-step prompt budget and its split across
sections, the run's limits, and the classes of failure the loop counts and reports."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from retrieval.context import ContextPack
from retrieval.tokens import TokenCounter

from .models.base import Message, ToolCall, ToolSpec
from .models.errors import ContextTooLongError, ModelError
from .models.prompt_tokens import DEFAULT_TEMPLATE, ChatTemplate, PromptCounter
from .models.text_calls import parse_text_calls
from .settings import DEFAULT_RETRIES

#: Share of the prompt (after system prompt and tool schemas) each section may use. Retrieved
#: code takes whatever the others leave, so the prompt fills its budget but never grows past it.
DEFAULT_SHARES: dict[str, float] = {
    "task": 0.12,  # the task, project instructions and memory
    "plan": 0.08,
    "history": 0.12,  # one line per earlier step
    "observation": 0.33,  # the latest assistant message and tool results, whole if they fit
    "code": 0.35,
}
#: Room a step needs besides the fixed prompt: the plan, the latest result and some code.
MIN_ROOM = 800


@dataclass(frozen=True)
class Limits:
    """When a run stops. ``max_tokens`` counts prompt and completion tokens of every model call
    (as the provider reports them); ``timeout_s`` is wall time of this session of the run."""

    max_steps: int = 30
    max_tokens: int = 400_000
    timeout_s: float = 1800.0
    max_consecutive_failures: int = 5
    #: Identical tool calls in a row before the model is told; one more ends the run.
    max_repeats: int = 3
    #: Retries of a retryable model error (rate limit, server error, timeout) per model call,
    #: the adapter's and the loop's together (agent/models/http.py retry_budget).
    model_retries: int = DEFAULT_RETRIES
    #: Shrink-and-retry rounds after the provider says the prompt is too long.
    overflow_retries: int = 2
    #: Token budget of each step's prompt, system prompt and tool schemas included.
    prompt_budget: int = 12_000
    #: Completion tokens asked for per model call (fewer in a small context window:
    #: see reply_tokens).
    completion_tokens: int = 4096
    #: The model server's context window in tokens, when known (the user said, or the server
    #: reported it in an overflow error): the prompt budget and the reply fit inside it.
    context_window: int | None = None


#: The reply reserved per call in a small window never goes below this (a tool call with an
#: edit, or a short edit block, fits in 512 tokens of Qwen or GPT-4o).
MIN_REPLY_TOKENS = 512


def reply_tokens(window: int, wanted: int) -> int:
    """Completion tokens to ask for in a context window of ``window`` tokens: ``wanted`` (4,096
    by default), but at most a quarter of the window and at least MIN_REPLY_TOKENS — 512 at
    2k, 1,024 at 4k, 2,048 at 8k. Reserving the whole 4,096 left nothing of a window under
    ~7.8k for the prompt."""
    return min(wanted, max(MIN_REPLY_TOKENS, window // 4))


def window_budget(limits: Limits) -> tuple[int, int]:
    """The prompt budget and the reply tokens of ``limits``: both fit the context window
    when it is known."""
    if not limits.context_window:
        return limits.prompt_budget, limits.completion_tokens
    reply = reply_tokens(limits.context_window, limits.completion_tokens)
    return min(limits.prompt_budget, limits.context_window - reply), reply


@dataclass(frozen=True)
class Allocation:
    """Tokens per section for one step; ``fixed`` is the system prompt plus tool schemas."""

    total: int
    fixed: int
    caps: dict[str, int] = field(default_factory=dict)

    def cap(self, section: str) -> int:
        return self.caps.get(section, 0)


def allocate(total: int, fixed: int, shares: Mapping[str, float] = DEFAULT_SHARES) -> Allocation:
    rest = max(0, total - fixed)
    return Allocation(total, fixed, {name: int(rest * share) for name, share in shares.items()})


def clip_to_tokens(text: str, limit: int, counter: TokenCounter, *, keep: str = "head") -> str:
    """``text`` cut to at most ``limit`` tokens with a marker saying how much was cut; ``keep``
    is head (the start), tail (the end) or both (start and end, the middle cut)."""
    if limit <= 0 or not text:
        return ""
    n = counter.count(text)
    if n <= limit:
        return text
    chars = len(text)
    # Tokens are not characters: estimate from this text's own ratio, then correct a few times.
    size = int(chars * limit / n * 0.95)
    for _ in range(6):
        cut = _cut(text, size, keep)
        if counter.count(cut) <= limit:
            return cut
        size = int(size * 0.85)
    return _cut(text, max(0, size), keep)


def _cut(text: str, size: int, keep: str) -> str:
    dropped = len(text) - size
    marker = f"\n[... {dropped} characters cut to fit the prompt budget ...]\n"
    size = max(0, size - len(marker))
    if keep == "tail":
        return marker.lstrip("\n") + text[len(text) - size :]
    if keep == "both":
        head = size * 2 // 3
        return text[:head] + marker + text[len(text) - (size - head) :]
    return text[:size] + marker.rstrip("\n")


def fixed_tokens(tokens: PromptCounter, system: str, tools_tokens: int, task: str) -> int:
    """What every step's prompt holds whatever the budget: the system prompt, the tool schemas,
    the task and the template's markers, in the model's tokens."""
    t = tokens.template
    return (
        tokens.count(system)
        + tools_tokens
        + tokens.count(f"# Task\n{task}")
        + 2 * t.per_message
        + t.reply
    )


# -- failures ------------------------------------------------------------------------------------

#: Failure classes of tool results and model calls, as recorded in the trace.
FAILURE_KINDS = (
    "bad_arguments",
    "unknown_tool",
    "missing_file",
    "permission",
    "syntax",
    "command_failure",
    "timeout",
    "tool_error",
    "context_overflow",
    "model_service",
    "model_error",
)
_MISSING = {"PathNotFoundError", "NotAFileError", "FileNotFoundError", "IsADirectoryError"}
_PERMISSION = {
    "ToolPermissionError",
    "SecretPathError",
    "PathEscapeError",
    "CommandNotAllowedError",
    "PermissionError",
}


def classify_tool_failure(error: str | None, data: Mapping[str, Any]) -> str:
    """The failure class of a tool result that is not ok."""
    exc = str(data.get("exception") or "")
    if data.get("unknown_tool"):
        return "unknown_tool"
    if data.get("bad_arguments") or data.get("match_count") is not None:
        return "bad_arguments"
    if exc in _MISSING:
        return "missing_file"
    if data.get("refused") or data.get("declined") or exc in _PERMISSION:
        return "permission"
    if data.get("syntax_errors"):
        return "syntax"
    if data.get("timed_out") or any(r.get("timed_out") for r in data.get("runs") or ()):
        return "timeout"
    if data.get("exit_code") not in (None, 0) or data.get("passed") is False:
        return "command_failure"
    if error and "does not exist" in error:
        return "missing_file"
    return "tool_error"


def classify_model_error(exc: ModelError) -> str:
    if isinstance(exc, ContextTooLongError):
        return "context_overflow"
    return "model_service" if exc.retryable else "model_error"


# -- the prompt of one step ----------------------------------------------------------------------

#: Tokens a provider adds around each message (role markers) when its chat template is unknown;
#: a known template's own counts come with the model's tokenizer (models/prompt_tokens.py).
MESSAGE_OVERHEAD = DEFAULT_TEMPLATE.per_message
#: Retrieval is skipped when less than this is left for code.
MIN_CODE_TOKENS = 200


@dataclass(frozen=True)
class StepPrompt:
    messages: tuple[Message, ...]
    #: Estimated prompt tokens (system, tool schemas, every message), counted with ``counter``.
    tokens: int
    budget: int
    sections: dict[str, int]
    pack: ContextPack | None
    #: Milliseconds in retrieval (assemble_context), and in building the whole prompt.
    context_ms: float
    total_ms: float = 0.0
    #: The tools to send with it (None: the caller's); a prompt built for the compact frame
    #: of a small window carries its own.
    tools: tuple[ToolSpec, ...] | None = None


Retrieve = Callable[[str, int], "ContextPack | None"]


def assemble_prompt(
    *,
    counter: TokenCounter,
    budget: int,
    system: str,
    tools_tokens: int,
    task: str,
    notes: str,
    plan: str,
    history: Sequence[str],
    observation: Sequence[Message],
    query: str,
    retrieve: Retrieve,
    closing: str = "",
    template: ChatTemplate = DEFAULT_TEMPLATE,
) -> StepPrompt:
    """Fit every section into its share of ``budget``; retrieved code gets what is left, so the
    estimate never exceeds the budget however long the run. ``tools_tokens`` is the tool
    schemas as the template renders them; ``template`` adds its markers around each message."""
    start = time.perf_counter()
    fixed = counter.count(system) + tools_tokens + template.per_message + template.reply
    alloc = allocate(budget, fixed)
    task_cap = alloc.cap("task")
    task_text = clip_to_tokens(task, max(1, task_cap * 2 // 3), counter, keep="both")
    used_task = counter.count(task_text)
    notes_text = clip_to_tokens(notes, task_cap - used_task, counter) if notes else ""
    plan_text = clip_to_tokens(plan, alloc.cap("plan"), counter, keep="both") if plan else ""
    history_text = _fit_history(history, alloc.cap("history"), counter)
    obs = _fit_observation(observation, alloc.cap("observation"), counter, template)
    sections = {
        "system+tools": fixed,
        "task": used_task + (counter.count(notes_text) if notes_text else 0),
        "plan": counter.count(plan_text) if plan_text else 0,
        "history": counter.count(history_text) if history_text else 0,
        "observation": sum(_message_tokens(m, counter, template) for m in obs),
    }
    skeleton = _user_text(task_text, notes_text, plan_text, "", history_text, closing)
    spent = fixed + counter.count(skeleton) + template.per_message + sections["observation"]
    code_budget = budget - spent - 16  # headers around the code block
    pack = None
    t0 = time.perf_counter()
    if code_budget >= MIN_CODE_TOKENS:
        pack = retrieve(query, code_budget)
    ms = (time.perf_counter() - t0) * 1000
    code = pack.render() if pack is not None and pack.items else ""
    sections["code"] = pack.used_tokens if code else 0
    user = _user_text(task_text, notes_text, plan_text, code, history_text, closing)
    messages = (Message.system(system), Message.user(user), *obs)
    tokens = fixed + counter.count(user) + template.per_message + sections["observation"]
    total = (time.perf_counter() - start) * 1000
    return StepPrompt(messages, tokens, budget, sections, pack, ms, total)


_LOCATION = re.compile(r"[\w./-]+\.\w+:\d+")
_TEXT_RESULT = re.compile(r'<tool_response name="[^"]*">\n(.*?)\n</tool_response>', re.S)


def observation_digest(messages: Sequence[Message], limit: int = 600) -> str:
    """What of the latest observation goes into the retrieval query: the tool calls' arguments
    (paths, symbols, search words), each result's first line and the file:line locations it
    names. Whole outputs would make the lexical query slow and vague."""
    parts: list[str] = []
    for m in messages:
        calls = m.tool_calls
        if m.role == "assistant" and not calls and "{" in m.content:  # calls written as text
            calls = parse_text_calls(m.content).calls
        parts += [f"{c.name} {c.raw_arguments[:200]}" for c in calls]
        results = [m.content] if m.role == "tool" else []
        if m.role == "user":  # results of calls written as text (loop._observation)
            results = [r.group(1) for r in _TEXT_RESULT.finditer(m.content)]
        for text in results:
            lines = text.strip().splitlines()
            parts.append(lines[0][:200] if lines else "")
            parts += list(dict.fromkeys(_LOCATION.findall(text)))[:5]
    return " ".join(p for p in parts if p)[:limit]


def _user_text(task: str, notes: str, plan: str, code: str, history: str, closing: str) -> str:
    parts = [f"# Task\n{task}"]
    if notes:
        parts.append(f"# Project instructions and memory\n{notes}")
    if plan:
        parts.append(f"# Plan\n{plan}")
    if code:
        parts.append(f"# Relevant code (retrieved for the current step)\n{code}")
    if history:
        parts.append(f"# Progress so far (one line per step; the latest result follows)\n{history}")
    if closing:
        parts.append(closing)
    return "\n\n".join(parts)


def _fit_history(lines: Sequence[str], cap: int, counter: TokenCounter) -> str:
    kept: list[str] = []
    used = 0
    counts = counter.count_many(list(lines)) if lines else []
    for line, n in zip(reversed(lines), reversed(counts), strict=True):
        if used + n + 1 > cap:
            break
        kept.append(line)
        used += n + 1
    dropped = len(lines) - len(kept)
    head = [f"({dropped} earlier steps not shown)"] if dropped else []
    return "\n".join(head + list(reversed(kept)))


def _message_tokens(
    m: Message, counter: TokenCounter, template: ChatTemplate = DEFAULT_TEMPLATE
) -> int:
    """As PromptCounter.message_tokens: the texts, the call names and the template's markers."""
    texts = [m.content] + [t for c in m.tool_calls for t in (c.name, c.raw_arguments)]
    wrap = template.per_result if m.role == "tool" else template.per_message
    return sum(counter.count_many(texts)) + wrap + template.per_call * len(m.tool_calls)


def _fit_observation(
    messages: Sequence[Message],
    cap: int,
    counter: TokenCounter,
    template: ChatTemplate = DEFAULT_TEMPLATE,
) -> list[Message]:
    """The latest observation, whole if it fits; otherwise the largest parts are clipped, each
    to a fair share of what the others leave."""
    if not messages:
        return []
    sizes = [_message_tokens(m, counter, template) for m in messages]
    if sum(sizes) <= cap:
        return list(messages)
    out: list[Message | None] = [None] * len(messages)
    left = cap
    order = sorted(range(len(messages)), key=lambda i: sizes[i])
    for rank, i in enumerate(order):
        share = max(32, left // (len(order) - rank))
        m = messages[i]
        if sizes[i] > share:
            m = _clip_message(m, share, counter, template)
        out[i] = m
        left -= min(sizes[i], share)
    return [m for m in out if m is not None]


def _clip_message(
    m: Message, limit: int, counter: TokenCounter, template: ChatTemplate = DEFAULT_TEMPLATE
) -> Message:
    calls = m.tool_calls
    if calls:
        per = max(16, limit // (2 * len(calls)))
        calls = tuple(
            c
            if counter.count(c.raw_arguments) <= per
            else ToolCall(
                c.id,
                c.name,
                {"omitted": f"{len(c.raw_arguments)} characters of arguments"},
                json.dumps({"omitted": f"{len(c.raw_arguments)} characters of arguments"}),
            )
            for c in calls
        )
        limit = max(16, limit - sum(counter.count(c.raw_arguments) for c in calls))
    # Test output and tracebacks end with the decisive lines: keep both ends.
    wrap = template.per_result if m.role == "tool" else template.per_message
    wrap += (template.per_call + 4) * len(calls)  # a call's name and wrapper
    content = clip_to_tokens(m.content, max(1, limit - wrap), counter, keep="both")
    return replace(m, content=content, tool_calls=calls)
