"""The agent loop: plan, then step by step assemble a budgeted prompt for the current plan step,
ask the model, run its tool calls, and stop on `finish` or a limit — every event in a trace.

    report = run_agent(load_config("."), "fix the failing test", create_model("openai:gpt-4o"),
                       RunOptions(granted={"read", "write", "execute"}))

(``load_config`` of cli/settings.py: every layer's settings, the agent's included.)

The run's skeleton — start, the end, its report and commit, how each tool call and step is traced —
is agent/run_base.py's, shared with the pipeline; the plan, the memory and the loop's own tools
that keep them are agent/loop_plan.py's; the code each step shows is agent/step_code.py's.
`AgentRun` sets the run up (tools, conversation, prompts, resume) and drives its steps: one model
call, its tool calls through the guard, the observation and the step's ending. Helpers: budget.py
(prompt budget, limits), guard.py (misbehaviour), plan.py, memory.py, trace.py, model_calls.py (one
model call with retries), call_reading.py (native or text tool calls), run_prompts.py and
prompts.py (the prompt frame, nudges), outcome.py (how a run ends), run_result.py (options, report,
what changed). See docs/agent.md.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from indexer import Config

from .budget import StepPrompt
from .call_reading import CallReader, observation
from .checkpoints import CheckpointStore, RollbackReport
from .conversation import FIRST_CODE_SHARE, Conversation
from .errors import AgentError
from .guard import NUDGE_PLAN_ONLY, Guard
from .loop_plan import PlanKeeper
from .memory import REMEMBER, ProjectMemory, read_instructions
from .model_calls import ModelCalls
from .models.base import Message, ModelClient, ToolCall, ToolSpec, Usage
from .models.text_calls import CALL_EXAMPLE, prose
from .outcome import Ending, asks_for_change, finish_ending, plan_only_ending, text_ending
from .plan import (
    UPDATE_PLAN,
    fallback_plan,
    parse_plan,
    quote_call,
)
from .prompts import NUDGE_EMPTY, NUDGE_NO_CHANGE, NUDGE_TEXT
from .redact import redact
from .run_base import BaseRun, RunEnded, offered
from .run_prompts import PLAN_REQUEST, RunPrompts
from .run_result import RunOptions, RunReport
from .settings import TOOL_FORMATS, AgentSettings
from .step_code import StepCode
from .tools import (
    ToolRegistry,
    ToolResult,
    fail,
)
from .trace import (
    TestRecord,
    TraceError,
    TraceWriter,
    canonical_arguments,
    read_trace,
    resolve_run,
    resume_state,
    step_summary,
    tests_from,
    trace_path,
)


class AgentRun(BaseRun):
    """The loop: plan, then one model call a step whose tool calls run through the registry."""

    says_not_committed = True

    def _setup(self) -> None:
        config, options = self.config, self.opts
        settings = AgentSettings.from_config(config)
        self.guard = Guard(options.limits)
        window = settings.context_window  # `agent.context_window`, an int the table checked
        if self.limits.context_window is None and window:
            # the prompt and the reply are sized to fit it up front
            self.limits = replace(self.limits, context_window=window)
        base = self.registry
        # The plan, the memory and the loop's own tools that keep them (agent/loop_plan.py).
        self.book = PlanKeeper(self, ProjectMemory.for_index(config.index_path))
        self.registry = base.with_tools(*self.book.tools())
        self.counter = self.tokens.counter
        # The run's conversation: each call extends the previous one (agent/conversation.py).
        self.convo = Conversation(self.tokens)
        self.instructions = read_instructions(config.root)
        self.observation: tuple[Message, ...] = ()
        run_id, resumed = self._resume()
        self.tool_format = options.tool_format or settings.tool_format
        if self.tool_format not in TOOL_FORMATS:
            raise AgentError(
                f"Unknown tool format {self.tool_format!r} — use one of {', '.join(TOOL_FORMATS)}."
            )
        self.specs: list[ToolSpec] = [*base.specs(offered(options)), UPDATE_PLAN, REMEMBER]
        self.names = frozenset(s.name for s in self.specs)
        # The frame (full or compact), the system message fixed for the run and each call's
        # prompt on the conversation (agent/run_prompts.py).
        self.prompts = RunPrompts(
            self.tokens,
            self.specs,
            self.task,
            self.tool_format,
            self.limits,
            self.convo,
            self.emit,
        )
        self.calls = ModelCalls(
            self.model,
            self.limits,
            self.tokens,
            self.prompts.frame.offered,
            self.emit,
            options.sleep,
            self.prompts.min_budget,
        )
        self.calls.usage, self.calls.count = resumed
        # The project instructions and the memory as they were when the run started.
        memory = self.book.memory
        notes = [f"Learned in earlier runs:\n{memory.render()}"] if memory.entries else []
        self.prompts.attach(
            self.calls, redact("\n\n".join([*notes, self.instructions.text]).strip())
        )
        self.reader = CallReader(self.tool_format, self.names, self.emit, lambda: self.ctx)
        self._open(run_id)
        # The code each step shows (agent/step_code.py).
        self.code = StepCode(config, self.ctx, self.counter)

    def _load(self, run_id: str) -> tuple[Usage, int]:
        """Restore a run's state from its trace; returns its usage and model calls so far."""
        events = read_trace(trace_path(self.config.index_path, run_id))
        state = resume_state(events)
        if state.ended and state.ended.get("reason") in ("finished", "answered"):
            raise TraceError(f"Run {run_id} already finished — start a new run instead.")
        self.task, self.next_step = state.task, state.next_step
        self.history, self.observation = list(state.history), state.observation
        self.convo.resume(self.history, self.observation)
        self.prior_s = float(((state.ended or {}).get("summary") or {}).get("elapsed_s", 0))
        self.tests = tests_from(events)
        self.book.resume(state.plan, events)
        return Usage(**state.usage), state.model_calls

    # -- the run ---------------------------------------------------------------------------------

    def _drive(self, t0: float) -> None:
        while True:
            self.check_limits(t0)
            self._step(self.next_step)

    def _header(self) -> dict[str, Any]:
        return {"tools": [s.name for s in self.specs], "tool_format": self.tool_format}

    def _opening(self) -> None:
        self.emit(
            "instructions",
            files=list(self.instructions.files),
            tokens=self.counter.count(self.instructions.text),
            memory=self.book.memory.to_dict(),
        )

    def _announce(self) -> None:
        self.emit(
            "notice", kind="tokenizer", message=f"prompts counted by {self.tokens.describe()}"
        )
        if self.opts.strategy_why:  # agent/strategy.py picked the loop: say why
            self.emit("notice", kind="strategy", strategy="loop",
                      message=f"loop: {self.opts.strategy_why}")  # fmt: skip

    def _ready(self) -> None:
        if self.book.plan is None:
            self._make_plan()

    def _make_plan(self) -> None:
        # The same system message and tools as every step: the plan call starts the
        # conversation the steps extend (a plan call of its own shared ~4 tokens with them).
        _, completion = self.calls.complete(
            0,
            "plan",
            lambda budget: self.prompt(
                budget, step=0, closing=PLAN_REQUEST, code_share=FIRST_CODE_SHARE
            ),
        )
        self.convo.commit()
        self.convo.extend(0, [Message.assistant(completion.message.content or "(no plan)")])
        plan, why = parse_plan(completion.message.content)
        if plan is None or completion.message.tool_calls:
            why = why or "the plan reply called tools instead of returning JSON"
            self.book.set_plan(fallback_plan(self.task), "plan", f"one-step plan: {why}")
        else:
            self.book.set_plan(plan, "plan", "")

    def check_limits(self, t0: float) -> None:
        lim, again = self.limits, f"continue with `repoctx agent run --resume {self.run_id}`"
        if self.next_step > lim.max_steps:
            raise RunEnded(
                "max_steps", f"Reached the step limit ({lim.max_steps}) — {again} --max-steps N."
            )
        super().check_limits(t0)

    # -- prompt and model ------------------------------------------------------------------------

    def prompt(
        self,
        budget: int,
        *,
        step: int | None = None,
        closing: str = "",
        code_share: float | None = None,
    ) -> StepPrompt:
        """The prompt of the next call (agent/run_prompts.py)."""
        return self.prompts.build(
            budget,
            plan=self.book.plan,
            observation=self.observation,
            step=self.next_step if step is None else step,
            retrieve=self.code,
            closing=closing,
            code_share=code_share,
        )

    # -- one step --------------------------------------------------------------------------------

    def _step(self, step: int) -> None:
        reply = self.calls.complete(step, "act", self.prompt)[1].message
        self.convo.commit()
        calls, form, hint = self.reader.read(step, reply)
        if not calls:
            return self._no_calls(step, reply, hint)
        verdict = self.guard.calls(tuple((c.name, canonical_arguments(c)) for c in calls))
        if verdict == "stop":
            raise RunEnded(
                "repetition",
                f"The model repeated the same tool call(s) "
                f"{self.guard.repeats} times in a row after being told — stopped.",
            )
        if verdict == "block":
            self.emit(
                "notice",
                step=step,
                kind="repetition",
                message=f"{self.guard.repeats} "
                "identical (or nearly identical) calls in a row: not run, the model was told",
            )
        results: list[tuple[ToolCall, ToolResult]] = []
        try:
            for call in calls:
                results.append(
                    (call, self.call(step, call, self._refusal() if verdict == "block" else None))
                )
        except KeyboardInterrupt:  # every call gets an answer, so the resumed conversation is valid
            answers = [(c, r.text()) for c, r in results] + [
                (c, "Not run: the user interrupted the run.") for c in calls[len(results) :]
            ]
            obs = observation(reply, form, answers, hint)
            self._end_step(step, obs, step_summary(step, results) + " [interrupted]", False)
            raise
        plan_only = self.guard.plan_step([c.name for c in calls])
        if plan_only == "nudge":
            self.emit("notice", step=step, kind="plan_only", message=NUDGE_PLAN_ONLY)
            hint = "\n\n".join(h for h in (hint, NUDGE_PLAN_ONLY) if h)
        obs = observation(reply, form, [(c, r.text()) for c, r in results], hint)
        errors = [r.error for _, r in results if r.error]
        self._end_step(
            step,
            obs,
            step_summary(step, results),
            len(errors) == len(results) and plan_only != "stop",  # that has its own ending
            errors[-1] if errors else "",
        )
        if plan_only == "stop":
            end = plan_only_ending(
                self.guard.plan_only,
                quote_call(calls[-1].name, calls[-1].arguments or {}),
                can_write=self.can_write,
                changed=len(self.changed()),
                run_id=self.run_id,
            )
            raise RunEnded(end.reason, end.message, end.status)
        done = [r for c, r in results if c.name == "finish" and r.ok]
        if done:
            if self.book.plan is not None:
                self.book.set_plan(self.book.plan.complete_all(), "plan_progress", "finish called")
            end = finish_ending(
                self.task,
                str(done[-1].data.get("status", "done")),
                str(done[-1].data.get("summary", "")),
                can_write=self.can_write,
                changed=len(self.changed()),
                run_id=self.run_id,
            )
            raise RunEnded(end.reason, end.message, end.status)

    def _no_calls(self, step: int, reply: Message, hint: str = "") -> None:
        text = reply.content.strip()
        if hint:  # a tool call it meant to make: tell it what is wrong, it is no answer
            self.emit("notice", step=step, kind="malformed_call", message=hint)
            self._end_step(
                step,
                [reply, Message.user(hint)],
                f"step {step}: a tool call that could not be read (not run)",
                failed=True,
                last_error=hint,
            )
            return
        verdict = self.guard.no_calls(empty=not text)
        if not text and verdict == "stop":
            raise RunEnded(
                "empty_answer",
                "The model sent empty replies twice in a row — try "
                "another model, or rephrase the task.",
                "failed",
            )
        if verdict == "stop":
            self._end_step(step, [reply], f"step {step}: answered in text", False)
            end = self._text_ending(text)
            raise RunEnded(end.reason, end.message, end.status)
        self.emit(
            "notice",
            step=step,
            kind="empty_answer" if not text else "text_only",
            message="empty reply" if not text else "reply without tool calls",
        )
        change_missing = self._change_expected() and not self.changed()
        nudge = NUDGE_NO_CHANGE if change_missing else NUDGE_TEXT
        if self.tool_format == "text" or self.reader.used == "text":
            nudge += f" Write each tool call like this: {CALL_EXAMPLE}"
        obs = [Message.user(NUDGE_EMPTY)] if not text else [reply, Message.user(nudge)]
        said = " ".join(text.split())[:120]
        self._end_step(
            step,
            obs,
            f"step {step}: " + (f"said: {said}" if text else "(empty reply)"),
            failed=not text,
        )

    def _change_expected(self) -> bool:
        return self.can_write and asks_for_change(self.task)

    def _text_ending(self, text: str) -> Ending:
        """How a run ends when the model stops calling tools (see agent/outcome.py)."""
        return text_ending(
            self.task,
            prose(text, self.names),
            can_write=self.can_write,
            changed=len(self.changed()),
            run_id=self.run_id,
        )

    def _refusal(self) -> ToolResult:
        """The answer to a call the guard will not run again."""
        return fail(
            f"You sent this {'exact ' if self.guard.exact else ''}call "
            f"{'' if self.guard.exact else '(or one differing only by a word or spacing) '}"
            f"{self.guard.repeats} times in a row; it was not run again. Its result will "
            "not change: try another approach, or call `finish` saying what blocks you. "
            "Repeating it ends the run.",
            repeated=True,
        )

    def _after_call(
        self, step: int, call: ToolCall, result: ToolResult, record: TestRecord | None
    ) -> None:
        self.book.learn(step, call, result, record)

    def _end_step(
        self, step: int, obs: list[Message], summary: str, failed: bool, last_error: str = ""
    ) -> None:
        self.observation = tuple(obs)
        self.convo.observe(step, obs, self.calls.budget, self.prompts.fixed(), recap=summary)
        self._record_step(step, obs, summary, failed)
        if self.guard.step_done(failed):
            raise RunEnded(
                "consecutive_failures",
                f"{self.guard.failures} steps in a row failed; "
                f"the last error: {last_error or 'no usable reply'} — see "
                f"`repoctx agent replay {self.run_id}` and rephrase the task.",
            )

    # -- the end ---------------------------------------------------------------------------------

    def _final(self, end: RunEnded) -> tuple[str, str]:
        # What the user reads as the result: never a tool call the model wrote as text.
        if end.reason in ("finished", "answered"):
            final = prose(end.message, self.names)
            return final, final
        return "", end.message

    def _plan(self) -> dict[str, Any]:
        return self.book.plan.to_dict() if self.book.plan else {}

    def _summary_counts(self) -> dict[str, Any]:
        # times the conversation was cut to fit the budget (agent/conversation.py)
        return {"compactions": self.convo.compactions}

    def _summary_how(self) -> dict[str, Any]:
        return {"tool_format": {"setting": self.tool_format, "used": self.reader.used}}

    def _format_used(self) -> str:
        return self.reader.used

    def _report_how(self) -> dict[str, Any]:
        return {}  # the strategy is said by agent/strategy.py, which picked it


def run_agent(
    config: Config,
    task: str,
    model: ModelClient,
    options: RunOptions | None = None,
    registry: ToolRegistry | None = None,
) -> RunReport:
    """Run (or, with ``options.resume``, continue) the agent on ``task`` in ``config.root``."""
    return AgentRun(config, task, model, options or RunOptions(), registry).run()


def undo_run(config: Config, run_ref: str) -> RollbackReport:
    """Put every file the run changed back as it was before the run, byte for byte."""
    run_id = resolve_run(config.index_path, run_ref)
    # With the root: a recorded path outside the workspace is never restored or deleted.
    store = CheckpointStore(config.index_path / "checkpoints", config.root)
    report = store.rollback_run(run_id)
    writer = TraceWriter(trace_path(config.index_path, run_id))
    writer.write(
        "undo",
        steps=list(report.steps),
        restored=[str(p) for p in report.restored],
        deleted=[str(p) for p in report.deleted],
    )
    writer.close()
    return report
