"""The conversation of an agent run, kept so that each model call extends the previous one.

A server with a prompt cache (llama.cpp, vLLM, OpenAI, Anthropic) only reuses what a request
shares from its start with the one before. So the prompt is never rebuilt: the system message
(system prompt, then the task, project instructions and memory) and the tool schemas come first
and stay byte-identical for the whole run — the plan call included — and each step *appends*:
the model's reply, the tool results, and one short user message with what is new for the step
(code not shown before in the conversation, the plan when it changed). Before, every step
rebuilt one user message holding everything, so consecutive prompts shared ~4 tokens and the
server re-read ~5.5k tokens at every step.

When the conversation outgrows the budget, its oldest messages are dropped at once down to
half the room (a *compaction*, counted): the fixed prefix still matches, the dropped steps live
on as one line each, and the next calls extend the shorter conversation again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from retrieval.context import ContextPack, render_blocks

from .budget import MIN_CODE_TOKENS, StepPrompt, _fit_observation
from .models.base import Message, ToolSpec
from .models.prompt_tokens import PromptCounter

#: A compaction is due when the conversation and the step's new text would pass this share of
#: the room; it drops the oldest messages down to COMPACT_TO of it.
COMPACT_AT, COMPACT_TO = 0.85, 0.5
#: Share of the room one step's new code may take (the plan call's, more: nothing is shown yet).
STEP_CODE_SHARE, FIRST_CODE_SHARE = 0.2, 0.3
#: Share of the room one step's tool results may take when they are appended.
OBSERVATION_SHARE = 0.33
#: Share of the room the lines of dropped steps may take.
RECAP_SHARE = 0.12
#: The plan call's exchange survives a compaction while it takes at most this share of what is
#: kept (it holds the first code shown; the cache keeps matching through it).
HEAD_SHARE = 0.75
#: The step number of the message holding the lines of dropped steps.
RECAP_STEP = -1
#: How the lines of dropped steps are introduced: a record, not a form to answer in (a 1.5B
#: model copied the old `step N: tool({...}) -> ok` lines as its reply).
RECAP_HEADER = (
    "Earlier steps of this run, summarised by repoctx (their messages were removed to fit "
    "the context window; this is a record, not a format to reply in):"
)
#: ... and when a resumed run starts: its earlier steps were in an earlier session.
RESUME_HEADER = (
    "Earlier steps of this run, summarised by repoctx (the run was stopped and resumed; this "
    "is a record, not a format to reply in):"
)
CODE_HEADER = "Code retrieved for the current step (not shown before in this conversation):"

Retrieve = Callable[[str, int], "ContextPack | None"]


@dataclass
class _Pending:
    """What a built prompt adds to the conversation once the model answered it."""

    message: Message
    merged: bool
    step: int
    shown: list[tuple[str, int, int]]
    plan: str


@dataclass
class Conversation:
    """The messages after the system message, with the step each belongs to, its size in the
    model's tokens, and the code items already shown (so a step shows only new ones)."""

    tokens: PromptCounter
    messages: list[Message] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    #: (message index, path, start line, end line) of each code item shown
    shown: list[tuple[int, str, int, int]] = field(default_factory=list)
    #: one line per step, shown for the steps whose messages were dropped
    recaps: dict[int, str] = field(default_factory=dict)
    dropped: list[int] = field(default_factory=list)
    #: the plan as last shown ('' when it must be shown again)
    plan_shown: str = ""
    compactions: int = 0
    _pending: _Pending | None = None

    # -- growing -------------------------------------------------------------------------------

    def extend(self, step: int, messages: Sequence[Message], recap: str = "") -> None:
        """Append what the model said and what its calls returned. A user message right after
        a user message is joined to it (chat templates want turns to alternate)."""
        for m in messages:
            if m.role == "user" and self.messages and self.messages[-1].role == "user":
                joined = Message.user(f"{self.messages[-1].content}\n\n{m.content}")
                self.messages[-1], self.steps[-1] = joined, step
                self.sizes[-1] = self.tokens.message_tokens(joined)
                continue
            self.messages.append(m)
            self.steps.append(step)
            self.sizes.append(self.tokens.message_tokens(m))
        if recap:
            self.recaps[step] = recap

    def observe(self, step: int, messages: Sequence[Message], budget: int, fixed: int,
                recap: str = "") -> None:
        """Append a step's reply and results, clipped once to their share of the room (never
        again later: a message that changes breaks the server's cache from there on)."""
        room = max(0, self.tokens.usable(budget) - fixed)
        cap = max(64, int(room * OBSERVATION_SHARE))
        fitted = _fit_observation(messages, cap, self.tokens.counter, self.tokens.template)
        self.extend(step, fitted, recap)

    def resume(self, history: Sequence[str], observation: Sequence[Message]) -> None:
        """Start a resumed run's conversation: its earlier steps as lines, then the latest
        reply and results as they were."""
        self.dropped = list(range(1, len(history) + 1))
        self.recaps = dict(enumerate(history, 1))
        if history:
            self.extend(0, [Message.user(self._recap_text(10_000, RESUME_HEADER))])
        self.extend(max(len(history), 1), list(observation))

    def commit(self) -> None:
        """The model answered the prompt built last: its new message is part of the run."""
        p = self._pending
        if p is None:
            return
        self._pending = None
        if p.merged:
            self.messages[-1], self.steps[-1] = p.message, p.step
            self.sizes[-1] = self.tokens.message_tokens(p.message)
        else:
            self.messages.append(p.message)
            self.steps.append(p.step)
            self.sizes.append(self.tokens.message_tokens(p.message))
        at = len(self.messages) - 1
        self.shown += [(at, *key) for key in p.shown]
        self.plan_shown = p.plan or self.plan_shown

    # -- one call's prompt -----------------------------------------------------------------------

    def build(
        self,
        *,
        step: int,
        budget: int,
        system: str,
        tools_tokens: int,
        tools: Sequence[ToolSpec] | None,
        plan: str,
        closing: str,
        query: str,
        retrieve: Retrieve | None,
        code_share: float = STEP_CODE_SHARE,
    ) -> StepPrompt:
        """The prompt of one call within ``budget``: the system message, the conversation, and
        a user message with what is new (the plan when it changed, code not shown before, the
        closing words). Compacts the conversation first when it would not fit."""
        start = time.perf_counter()
        t = self.tokens.template
        fixed = self.tokens.count(system) + tools_tokens + t.per_message + t.reply
        room = max(0, self.tokens.usable(budget) - fixed)
        plan_part = plan if plan and plan != self.plan_shown else ""
        if plan_part:
            plan_part = ("Plan (updated):\n" if self.plan_shown else "Plan:\n") + plan_part
        base = self._text(plan_part, "", closing)
        need = sum(self.sizes) + self.tokens.count(base) + t.per_message
        if need > room * COMPACT_AT:
            self._compact(int(room * COMPACT_TO))
            if self.plan_shown != plan:  # the plan went with the dropped messages
                plan_part = f"Plan:\n{plan}" if plan else ""
                base = self._text(plan_part, "", closing)
            need = sum(self.sizes) + self.tokens.count(base) + t.per_message
        # New code gets its share, and never what the next results will need.
        code_room = min(int(room * code_share), room - need - int(room * OBSERVATION_SHARE))
        pack, code, keys, ms = None, "", [], 0.0
        if retrieve is not None and code_room >= MIN_CODE_TOKENS:
            t0 = time.perf_counter()
            pack = retrieve(query, code_room - self.tokens.count(CODE_HEADER) - 8)
            ms = (time.perf_counter() - t0) * 1000
            fresh = [i for i in (pack.items if pack else ()) if not self._seen(i)]
            if fresh:
                code = render_blocks(
                    [i.text for i in fresh if i.kind == "full"],
                    [i.text for i in fresh if i.kind != "full"],
                )
                keys = [(i.path, i.start_line, i.end_line) for i in fresh]
            if pack is not None:  # the trace lists what this prompt shows, not what was found
                pack = replace(pack, items=tuple(fresh), used_tokens=self.tokens.count(code))
        text = self._text(plan_part, code, closing)
        merged = bool(self.messages) and self.messages[-1].role == "user"
        message = Message.user(f"{self.messages[-1].content}\n\n{text}" if merged else text)
        tail = self.messages[:-1] if merged else self.messages
        messages = (Message.system(system), *tail, message)
        new = self.tokens.message_tokens(message)
        before = sum(self.sizes[:-1] if merged else self.sizes)
        sections = {
            "system+tools": fixed,
            "conversation": before,
            "plan": self.tokens.count(plan_part) if plan_part else 0,
            "code": self.tokens.count(code) if code else 0,
            "new": new,
        }
        self._pending = _Pending(message, merged, step, keys, plan)
        total = (time.perf_counter() - start) * 1000
        tokens = fixed + before + new
        out_tools = tuple(tools) if tools is not None else None
        usable = self.tokens.usable(budget)  # what the prompt may fill (the margin stays free)
        return StepPrompt(messages, tokens, usable, sections, pack, ms, total, out_tools)

    def _text(self, plan: str, code: str, closing: str) -> str:
        parts = [plan, f"{CODE_HEADER}\n{code}" if code else "", closing]
        return "\n\n".join(p for p in parts if p)

    def _seen(self, item) -> bool:  # noqa: ANN001 - a retrieval ContextItem
        return any(
            p == item.path and s <= item.start_line and item.end_line <= e
            for _, p, s, e in self.shown
        )

    # -- compaction ------------------------------------------------------------------------------

    def _compact(self, target: int) -> None:
        """Drop the oldest steps until the rest fits ``target`` tokens, and put one line per
        dropped step in their place. The plan call's exchange stays when it is not too large
        (the server's cache then keeps matching through it), and so do the latest reply and
        its results."""
        head = 0
        while head < len(self.messages) and self.steps[head] == 0:
            head += 1
        if sum(self.sizes[:head]) > target * HEAD_SHARE:
            head = 0
        last_reply = max(
            (i for i, m in enumerate(self.messages) if m.role == "assistant"), default=0
        )
        cut = head
        for i in range(head, last_reply + 1):
            if self.messages[i].role == "tool":  # results stay with the call they answer
                continue
            cut = i
            if sum(self.sizes[:head]) + sum(self.sizes[i:]) <= target:
                break
        if cut == head and sum(self.sizes) <= target * 2:
            return  # nothing can be dropped, and what there is fits the room
        gone = set(self.steps[head:cut]) - set(self.steps[cut:]) - {0, RECAP_STEP}
        self.dropped = sorted(set(self.dropped) | gone)
        kept = range(cut, len(self.messages))
        messages = [*self.messages[:head], *(self.messages[i] for i in kept)]
        steps = [*self.steps[:head], *(self.steps[i] for i in kept)]
        sizes = [*self.sizes[:head], *(self.sizes[i] for i in kept)]
        self.shown = [
            (i if i < head else i - cut + head, *rest)
            for i, *rest in self.shown
            if i < head or i >= cut
        ]
        self.plan_shown = ""
        self.compactions += 1
        recap = self._recap_text(int(target * RECAP_SHARE / COMPACT_TO))
        if recap and len(messages) > head and messages[head].role == "user":
            messages[head] = Message.user(f"{recap}\n\n{messages[head].content}")
            sizes[head] = self.tokens.message_tokens(messages[head])
        elif recap:  # a user turn in front of the kept reply (turns alternate)
            lead = Message.user(recap)
            messages.insert(head, lead)
            steps.insert(head, RECAP_STEP)
            sizes.insert(head, self.tokens.message_tokens(lead))
            self.shown = [(i + 1 if i >= head else i, *rest) for i, *rest in self.shown]
        self.messages, self.steps, self.sizes = messages, steps, sizes
        if sum(self.sizes) > target * 2:
            # One reply with its results larger than the room: clip them (they change, so the
            # server's cache matches up to here this once).
            lead_n = head + (1 if len(messages) > head and messages[head].role == "user" else 0)
            fitted = _fit_observation(
                self.messages[lead_n:], max(64, target), self.tokens.counter,
                self.tokens.template,
            )
            self.messages = self.messages[:lead_n] + fitted
            self.steps = self.steps[: len(self.messages)]
            self.sizes = [self.tokens.message_tokens(m) for m in self.messages]

    def _recap_text(self, cap: int, header: str = RECAP_HEADER) -> str:
        lines = [self.recaps[s] for s in self.dropped if s in self.recaps]
        if not lines:
            return ""
        kept: list[str] = []
        used = self.tokens.count(header)
        for line in reversed(lines):
            n = self.tokens.count(line) + 1
            if used + n > cap:
                break
            kept.append(f"- {line}")
            used += n
        skipped = len(lines) - len(kept)
        head = [f"- ({skipped} earlier steps not shown)"] if skipped else []
        return "\n".join([header, *head, *reversed(kept)])
