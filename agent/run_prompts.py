"""The prompts of one loop run: its frame (the full tool set, or the compact one of a small
window), the system message fixed for the whole run (system prompt, task, project
instructions and memory), and each call's prompt built on the run's conversation
(agent/conversation.py) — the loop (agent/loop.py) asks for one per model call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .budget import (
    Limits,
    StepPrompt,
    clip_to_tokens,
    fixed_tokens,
    observation_digest,
    window_budget,
)
from .conversation import Conversation, Retrieve
from .model_calls import ModelCalls
from .models.base import Message, ToolSpec
from .models.prompt_tokens import PromptCounter
from .plan import PLAN_PROMPT, Plan
from .prompts import COMPACT_BELOW, prompt_frame, smallest_frame, too_small

#: The plan call's closing words (the plan's format is agent/plan.py's).
PLAN_REQUEST = (
    "Before using the tools, plan the task. "
    + PLAN_PROMPT
    + "\nThis reply is the plan only: no tool call yet."
)
#: A step's closing words.
STEP_CLOSING = "Work on the current plan step: answer with tool calls."
#: The first step's, after the plan reply: small models went on writing plans (the 0.5B did).
FIRST_CLOSING = (
    "The plan is set: do not write it again. Work on its current step: answer with a tool call."
)
#: Share of what the frame leaves that project instructions and memory may take.
NOTES_SHARE = 0.12


class RunPrompts:
    """The frame, the fixed system message and each call's prompt of one run."""

    def __init__(
        self,
        tokens: PromptCounter,
        specs: list[ToolSpec],
        task: str,
        tool_format: str,
        limits: Limits,
        convo: Conversation,
        emit: Callable[..., dict[str, Any]],
    ) -> None:
        self.tokens, self.specs, self.task, self.tool_format = tokens, specs, task, tool_format
        self.convo, self.emit = convo, emit
        # The full frame, or the compact one when the window is small (agent/prompts.py).
        self.frame = prompt_frame(tokens, specs, task, tool_format, window_budget(limits)[0])
        self.smallest = smallest_frame(tokens, specs, task, tool_format)
        #: the smallest budget a run can shrink to after an overflow
        self.min_budget = min(self.frame.min_budget, self.smallest.min_budget)
        self.notes_text, self.notes = "", ""
        self.calls: ModelCalls | None = None

    def attach(self, calls: ModelCalls, notes: str) -> None:
        """The run's model calls (their budget sizes the notes; they take the frame's tools
        and the advice for a window too small) and its project instructions and memory."""
        self.calls, self.notes_text = calls, notes
        calls.too_small = lambda window: too_small(
            self.tokens, self.smallest, max(0, window - calls.reply) if window else 0
        )
        self.notes = self._notes()

    def build(
        self,
        budget: int,
        *,
        plan: Plan | None,
        observation: tuple[Message, ...],
        step: int,
        retrieve: Retrieve,
        closing: str = "",
        code_share: float | None = None,
    ) -> StepPrompt:
        """The prompt of the next call: the conversation so far (system message and tools
        fixed for the run), plus a user message with what is new for this step."""
        if budget < self.frame.min_budget or (budget < COMPACT_BELOW and not self.frame.compact):
            self._reframe(budget)
        current = plan.current if plan else None
        plan_text = ""
        if plan is not None:
            plan_text = plan.render() + (f"\nCurrent step: {current.title}" if current else "")
        query = " ".join(
            [
                self.task,
                current.title if current else "",
                current.done_when if current else "",
                observation_digest(observation),
            ]
        )
        before = self.convo.compactions
        built = self.convo.build(
            step=step,
            budget=budget,
            system=self.system(),
            tools_tokens=self.frame.tools_tokens,
            tools=self.frame.offered,
            plan=plan_text,
            closing=closing or (FIRST_CLOSING if not observation else STEP_CLOSING),
            query=query,
            retrieve=retrieve,
            **({"code_share": code_share} if code_share is not None else {}),
        )
        if self.convo.compactions > before:
            self.emit(
                "notice",
                step=step,
                kind="compaction",
                message=f"the conversation outgrew the budget: its oldest steps were dropped "
                f"(one line each kept; compaction {self.convo.compactions})",
            )
        return built

    def system(self) -> str:
        """The system message, the same at every call of the run: the system prompt, the task,
        the project instructions and memory."""
        parts = [self.frame.system, f"# Task\n{self.task}"]
        if self.notes:
            parts.append(f"# Project instructions and memory\n{self.notes}")
        return "\n\n".join(parts)

    def fixed(self) -> int:
        """Tokens of what every call sends first: the system message and the tool schemas."""
        t = self.tokens.template
        return self.tokens.count(self.system()) + self.frame.tools_tokens + t.per_message + t.reply

    def _notes(self) -> str:
        """The project instructions and memory, clipped once to their share of the room: the
        system message never changes in a run."""
        if not self.notes_text or self.calls is None:
            return ""
        fixed = fixed_tokens(self.tokens, self.frame.system, self.frame.tools_tokens, self.task)
        room = self.tokens.usable(self.calls.budget) - fixed
        return clip_to_tokens(self.notes_text, max(0, int(room * NOTES_SHARE)), self.tokens.counter)

    def _reframe(self, budget: int) -> None:
        """A budget too small for the frame (the server reported a small window): the compact
        frame from now on (the prefix changes this once)."""
        frame = prompt_frame(self.tokens, self.specs, self.task, self.tool_format, budget)
        if frame.compact != self.frame.compact:
            self.frame = frame
            if self.calls is not None:
                self.calls.offered = frame.offered
            self.notes = self._notes()
            self.emit(
                "notice",
                kind="compact_tools",
                message=f"a {budget:,}-token prompt budget: the compact tool set "
                f"({', '.join(s.name for s in frame.specs)})",
            )
