"""What an agent run says to the model besides the task and the code: the system prompt,
the nudges after a reply without tool calls, and the fixed frame of every prompt (system text,
tool schemas and the smallest budget that holds them)."""

from __future__ import annotations

from dataclasses import dataclass

from .budget import MIN_ROOM, fixed_tokens
from .errors import BudgetTooSmallError
from .models.base import ToolSpec
from .models.prompt_tokens import PromptCounter
from .models.text_calls import tools_prompt

SYSTEM_PROMPT = """\
You are a careful software engineer working in a code repository through tools. Each turn you \
see the task, the plan with its current step, code retrieved for that step, one line per \
earlier step, and the full result of your latest tool calls. Work on the current plan step; \
call `update_plan` with `complete: true` when its criterion holds, or with new `steps` and a \
reason when what you see contradicts the plan. Read before you edit; copy old_text exactly. \
Run the tests after changing code. Save lasting facts about the repository (test command, \
layout, conventions) with `remember`. When the task is done, or cannot be done, call `finish` \
with a summary for the user. Always answer with tool calls."""
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



@dataclass(frozen=True)
class PromptFrame:
    """The fixed part of every step's prompt."""

    system: str
    #: the tool schemas sent in the request ([] when they are described in the system text)
    offered: list[ToolSpec]
    tools_tokens: int
    #: the smallest budget that holds the fixed prompt and some room (refused below it)
    min_budget: int


def prompt_frame(
    tokens: PromptCounter, specs: list[ToolSpec], task: str, tool_format: str, budget: int
) -> PromptFrame:
    """The frame for ``tool_format``; raises BudgetTooSmallError when ``budget`` cannot hold
    it, naming the minimum."""
    if tool_format == "text":
        # No `tools` in the request: the tools are described in the system prompt, whose
        # tokens are counted with it.
        system, offered, tools_tokens = f"{SYSTEM_PROMPT}\n\n{tools_prompt(specs)}", [], 0
    else:
        system, offered, tools_tokens = SYSTEM_PROMPT, specs, tokens.tools_tokens(specs)
    fixed = fixed_tokens(tokens, system, tools_tokens, task)
    min_budget = tokens.needed(fixed + MIN_ROOM)
    if budget < min_budget:
        raise BudgetTooSmallError(
            f"A prompt budget of {budget:,} tokens is too small: the "
            f"system prompt, {len(specs)} tool schemas and the task alone take {fixed:,} tokens of "
            f"this model (counted by {tokens.source}), and a step needs {MIN_ROOM} more "
            f"for the plan, the latest result and code — the minimum is "
            f"{min_budget:,}: pass --budget {min_budget} or more.",
            min_budget,
        )
    return PromptFrame(system, offered, tools_tokens, min_budget)
