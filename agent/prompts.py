"""What an agent run says to the model besides the task and the code: the system prompt,
the nudges after a reply without tool calls, and the fixed frame of every prompt (system text,
tool schemas and the smallest budget that holds them) — in full, or compact for small windows.

The frame is the prefix every call of a run shares byte for byte (the plan call included), so
a server's prompt cache reuses it: nothing in it changes from call to call.
"""

from __future__ import annotations

from dataclasses import dataclass

from .budget import MIN_REPLY_TOKENS, MIN_ROOM, fixed_tokens, reply_tokens
from .errors import BudgetTooSmallError
from .models.base import ToolSpec
from .models.prompt_tokens import PromptCounter
from .models.text_calls import tools_prompt

SYSTEM_PROMPT = """\
You are a careful software engineer working in a code repository through tools. The \
conversation holds the task, the plan with its current step, code retrieved for that step \
(more is added as the work moves on) and the results of your tool calls. Work on the current \
plan step; call `update_plan` with `complete: true` when its criterion holds, or with new \
`steps` and a reason when what you see contradicts the plan. Read before you edit; copy \
old_text exactly. Instead of `edit` you may write SEARCH/REPLACE blocks in your reply: the \
file's path on its own line, `<<<<<<< SEARCH`, the exact lines now in the file, `=======`, the \
new lines, `>>>>>>> REPLACE`. Run the tests after changing code. Save lasting facts about the repository \
(test command, layout, conventions) with `remember`. When the task is done, or cannot be done, \
call `finish` with a summary for the user. Always answer with tool calls."""
#: For small context windows: the same rules in fewer words, for the compact tool set.
COMPACT_SYSTEM_PROMPT = """\
You fix code in a repository through tools. Read the code before you change it; in `edit`, \
copy old_text exactly from the file (or write SEARCH/REPLACE blocks: the path on its own \
line, `<<<<<<< SEARCH`, the exact lines, `=======`, the new lines, `>>>>>>> REPLACE`). Run the \
tests after a change. When the task is done, or \
cannot be done, call `finish` with a short summary. Always answer with tool calls."""
NUDGE_EMPTY = "Your reply was empty. Call a tool for the current plan step, or call `finish`."
NUDGE_TEXT = (
    "You answered without calling a tool. If the task is done, call `finish` with your "
    "summary; otherwise call the next tool."
)
NUDGE_NO_CHANGE = (
    "You answered without calling a tool, and no file has been changed yet although the task "
    "asks for a change. Make it with the tools (read the code, then `edit`), or call `finish` "
    "with status `blocked` saying what stops you."
)

#: The compact tool set: what a small model needs to fix code shown to it, with one-line
#: descriptions and only the arguments it must give (the registry still checks every call
#: against the full schema, so the optional arguments keep working when sent).
COMPACT_TOOLS: dict[str, tuple[str, dict[str, str]]] = {
    "read_span": ("Read numbered lines of a file.", {}),
    "search_code": ("Search the code by words or names.", {}),
    "edit": ("Replace old_text, copied exactly from the file, with new_text.", {}),
    "run_tests": ("Run the tests.", {}),
    "finish": ("End the task with a summary for the user.", {}),
}
#: Arguments the compact schemas keep besides the required ones.
_COMPACT_KEEP = {"read_span": ("start_line", "end_line"), "finish": ("status",)}
#: Below this prompt budget the compact frame is used even when the full one would fit: the
#: full tool schemas alone take ~2.6k tokens, more than half of such a prompt.
COMPACT_BELOW = 6_000


@dataclass(frozen=True)
class PromptFrame:
    """The fixed part of every step's prompt."""

    system: str
    #: the tool schemas sent in the request ([] when they are described in the system text)
    offered: list[ToolSpec]
    tools_tokens: int
    #: the smallest budget that holds the fixed prompt and some room (refused below it)
    min_budget: int
    #: whether this is the compact frame of a small window
    compact: bool = False
    #: the tools the model is told about (offered, or described in the system text)
    specs: tuple[ToolSpec, ...] = ()


def compact_specs(specs: list[ToolSpec]) -> list[ToolSpec]:
    """The compact tool set out of ``specs`` (only the tools granted), short descriptions and
    no optional arguments but the few a small model uses."""
    out = []
    for spec in specs:
        if spec.name not in COMPACT_TOOLS:
            continue
        props = spec.parameters.get("properties", {})
        required = list(spec.parameters.get("required", ()))
        keep = [*required, *_COMPACT_KEEP.get(spec.name, ())]
        slim = {}
        for name in keep:
            if name in props:
                prop = {k: v for k, v in props[name].items() if k in ("type", "enum", "items")}
                slim[name] = prop
        params = {"type": "object", "properties": slim}
        if required:
            params["required"] = required
        out.append(ToolSpec(spec.name, COMPACT_TOOLS[spec.name][0], params))
    return out


def _frame(
    tokens: PromptCounter, specs: list[ToolSpec], task: str, tool_format: str, compact: bool
) -> PromptFrame:
    base = COMPACT_SYSTEM_PROMPT if compact else SYSTEM_PROMPT
    if tool_format == "text":
        # No `tools` in the request: the tools are described in the system prompt, whose
        # tokens are counted with it.
        system, offered, tools_tokens = f"{base}\n\n{tools_prompt(specs)}", [], 0
    else:
        system, offered, tools_tokens = base, specs, tokens.tools_tokens(specs)
    fixed = fixed_tokens(tokens, system, tools_tokens, task)
    return PromptFrame(
        system, offered, tools_tokens, tokens.needed(fixed + MIN_ROOM), compact, tuple(specs)
    )


def prompt_frame(
    tokens: PromptCounter, specs: list[ToolSpec], task: str, tool_format: str, budget: int
) -> PromptFrame:
    """The frame for ``tool_format`` and ``budget``: the full one, or the compact one when the
    budget is small (under COMPACT_BELOW, or too small for the full frame). Raises
    BudgetTooSmallError when not even the compact frame fits, naming the minimum and what
    can help."""
    full = _frame(tokens, specs, task, tool_format, compact=False)
    if budget >= max(full.min_budget, COMPACT_BELOW):
        return full
    small = _frame(tokens, compact_specs(specs), task, tool_format, compact=True)
    if budget >= small.min_budget:
        return small
    raise BudgetTooSmallError(too_small(tokens, small, budget), small.min_budget)


def too_small(tokens: PromptCounter, frame: PromptFrame, budget: int) -> str:
    """Why ``budget`` cannot hold ``frame``, and what can help: a larger budget or context
    window (not a smaller retrieval budget: the fixed prompt is what does not fit)."""
    fixed = frame.min_budget - MIN_ROOM
    window = min_window(frame.min_budget)
    tools = f"{len(frame.specs)} tool schemas" + (" (the compact set)" if frame.compact else "")
    return (
        f"A prompt budget of {budget:,} tokens is too small: the system prompt, {tools} and "
        f"the task take about {fixed:,} tokens of this model (counted by {tokens.source}) and "
        f"a step needs {MIN_ROOM} more for the plan, the latest result and code — the minimum "
        f"is {frame.min_budget:,} (a context window of {window:,} with a "
        f"{reply_tokens(window, 4096):,}-token reply): pass --budget {frame.min_budget} or more, "
        "start the model server with a larger context (llama.cpp: --ctx-size 4096), shorten "
        "the task, or use --strategy pipeline."
    )


def min_window(min_budget: int) -> int:
    """The smallest context window whose prompt budget (the window less the reply, see
    agent/budget.py reply_tokens) holds ``min_budget``."""
    if min_budget + MIN_REPLY_TOKENS <= 4 * MIN_REPLY_TOKENS:  # the reply is at its floor
        return min_budget + MIN_REPLY_TOKENS
    return -(-min_budget * 4 // 3)  # the reply is a quarter of the window


def smallest_frame(
    tokens: PromptCounter, specs: list[ToolSpec], task: str, tool_format: str
) -> PromptFrame:
    """The compact frame: the smallest prompt a run can shrink to after an overflow."""
    return _frame(tokens, compact_specs(specs), task, tool_format, compact=True)
