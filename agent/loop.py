"""The agent loop: plan, then step by step assemble a budgeted prompt for the current plan step,
ask the model, run its tool calls, and stop on `finish` or a limit — every event in a trace.

    report = run_agent(load_config("."), "fix the failing test", create_model("openai:gpt-4o"),
                       RunOptions(granted={"read", "write", "execute"}))

Helpers: budget.py (prompt budget, limits), guard.py (misbehaviour), plan.py, memory.py, trace.py,
model_calls.py (one model call with retries), call_reading.py (native or text tool calls),
prompts.py (system prompt, nudges, the fixed prompt frame), run_result.py (options, report,
what changed). See docs/agent.md.

Size: one class, `AgentRun`, the run's state machine (start, step, end) over the state a
run carries — plan, history, observation, memory, checkpoints — which every step reads and
writes; what does not need that state lives in the helpers above.
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from typing import Any

from indexer.config import Config
from indexer.errors import RepoctxError
from retrieval.context import ContextPack, assemble_context
from retrieval.freshness import generation

from .budget import StepPrompt, classify_tool_failure
from .call_reading import CallReader, observation
from .checkpoints import CheckpointStore, RollbackReport
from .conversation import FIRST_CODE_SHARE, Conversation
from .errors import AgentError
from .guard import NUDGE_PLAN_ONLY, Guard
from .memory import REMEMBER, ProjectMemory, learned_facts, read_instructions
from .model_calls import ModelCallFailed, ModelCalls
from .models.base import Message, ModelClient, ToolCall, ToolSpec, Usage
from .models.prompt_tokens import model_tokenizer
from .models.text_calls import CALL_EXAMPLE, prose
from .outcome import Ending, asks_for_change, finish_ending, plan_only_ending, text_ending
from .plan import (
    UPDATE_PLAN,
    Evidence,
    Plan,
    after_tests,
    apply_update,
    fallback_plan,
    parse_plan,
    quote_call,
)
from .prompts import NUDGE_EMPTY, NUDGE_NO_CHANGE, NUDGE_TEXT
from .redact import redact, redact_pack
from .run_prompts import PLAN_REQUEST, RunPrompts
from .run_result import FileStat, RunOptions, RunReport, commit_run, diff_stats, git_stat
from .settings import TOOL_FORMATS, AgentSettings
from .tools import (
    Tool,
    ToolContext,
    ToolRegistry,
    ToolResult,
    default_registry,
    fail,
    ok,
    run_originals,
)
from .trace import (
    TRACE_FORMAT,
    TestRecord,
    TraceError,
    TraceWriter,
    canonical_arguments,
    checkpoint_files,
    message_to_dict,
    read_trace,
    record_tests,
    resolve_run,
    resume_state,
    step_summary,
    tests_from,
    trace_path,
)


class RunEnded(Exception):  # noqa: N818 - control flow, not an error
    def __init__(self, reason: str, message: str, status: str = "stopped") -> None:
        super().__init__(message)
        self.reason, self.message, self.status = reason, message, status


class AgentRun:
    def __init__(
        self,
        config: Config,
        task: str,
        model: ModelClient,
        options: RunOptions,
        registry: ToolRegistry | None = None,
    ) -> None:
        self.config, self.task, self.model, self.opts = config, task, model, options
        self.limits, self.guard = options.limits, Guard(options.limits)
        window = AgentSettings.from_config(config).context_window
        if self.limits.context_window is None and window:
            # `agent.context_window` (checked by agent/strategy.py): the prompt and the reply
            # are sized to fit it up front.
            try:
                tokens = int(window)
            except (TypeError, ValueError):
                raise AgentError(
                    f"agent.context_window must be a number of tokens, got {window!r}."
                ) from None
            self.limits = replace(self.limits, context_window=tokens)
        base = registry or default_registry()
        # The loop's own tools go through the registry like every other: validated, redacted,
        # capped, traced; their handlers act on this run's plan and memory.
        self.registry = base.with_tools(
            Tool(
                UPDATE_PLAN.name,
                UPDATE_PLAN.description,
                UPDATE_PLAN.parameters,
                "read",
                lambda ctx, args: self._own_tool(ctx.step, UPDATE_PLAN.name, args),
            ),
            Tool(
                REMEMBER.name,
                REMEMBER.description,
                REMEMBER.parameters,
                "read",
                lambda ctx, args: self._own_tool(ctx.step, REMEMBER.name, args),
            ),
        )
        self.tokens = options.tokenizer or model_tokenizer(
            model,
            config.extra.get("model_tokenizer"),
            fallback=config.extra.get("tokenizer"),
            probe=False,
        )
        self.counter = self.tokens.counter
        # The run's conversation: each call extends the previous one (agent/conversation.py).
        self.convo = Conversation(self.tokens)
        self.memory = ProjectMemory.for_index(config.index_path)
        self.instructions = read_instructions(config.root)
        self.prior_s = 0.0
        resumed = (Usage(), 0)
        self.history: list[str] = []
        self.observation: tuple[Message, ...] = ()
        self.tests: list[TestRecord] = []
        self.plan: Plan | None = None
        self.evidence = Evidence()  # what update_plan's `complete` needs (agent/plan.py)
        self.next_step, run_id = 1, options.run_id
        if options.resume:
            run_id = resolve_run(config.index_path, options.resume)
            resumed = self._load(run_id)
        offered = set(options.granted) | ({"write", "execute"} if options.confirm else set())
        self.can_write = "write" in offered
        self.tool_format = options.tool_format or AgentSettings.from_config(config).tool_format
        if self.tool_format not in TOOL_FORMATS:
            raise AgentError(
                f"Unknown tool format {self.tool_format!r} — use one of {', '.join(TOOL_FORMATS)}."
            )
        self.specs: list[ToolSpec] = [*base.specs(offered), UPDATE_PLAN, REMEMBER]
        self.names = frozenset(s.name for s in self.specs)
        # The frame (full or compact), the system message fixed for the run and each call's
        # prompt on the conversation (agent/run_prompts.py).
        self.prompts = RunPrompts(
            self.tokens, self.specs, self.task, self.tool_format, self.limits, self.convo,
            self.emit,
        )
        self.calls = ModelCalls(
            model, self.limits, self.tokens, self.prompts.frame.offered, self.emit, options.sleep,
            self.prompts.min_budget,
        )
        self.calls.usage, self.calls.count = resumed
        # The project instructions and the memory as they were when the run started.
        notes = [f"Learned in earlier runs:\n{self.memory.render()}"] if self.memory.entries else []
        self.prompts.attach(
            self.calls, redact("\n\n".join([*notes, self.instructions.text]).strip())
        )
        self.reader = CallReader(self.tool_format, self.names, self.emit, lambda: self.ctx)
        self.ctx = ToolContext.create(
            config, granted=options.granted, confirm=options.confirm, run_id=run_id
        )
        self.run_id = self.ctx.run_id
        self.trace = TraceWriter(trace_path(config.index_path, self.run_id))
        self._packs: dict[tuple[str, int, int], ContextPack] = {}

    def _load(self, run_id: str) -> tuple[Usage, int]:
        """Restore a run's state from its trace; returns its usage and model calls so far."""
        events = read_trace(trace_path(self.config.index_path, run_id))
        state = resume_state(events)
        if state.ended and state.ended.get("reason") in ("finished", "answered"):
            raise TraceError(f"Run {run_id} already finished — start a new run instead.")
        self.task, self.next_step = state.task, state.next_step
        self.plan = Plan.from_dict(state.plan) if state.plan else None
        self.history, self.observation = list(state.history), state.observation
        self.convo.resume(self.history, self.observation)
        self.prior_s = float(((state.ended or {}).get("summary") or {}).get("elapsed_s", 0))
        self.tests = tests_from(events)
        self.evidence = Evidence.from_events(events, self._permission)
        return Usage(**state.usage), state.model_calls

    def emit(self, type: str, **fields: Any) -> dict[str, Any]:
        event = self.trace.write(type, **fields)
        if self.opts.on_event is not None:
            self.opts.on_event(event)
        return event

    def set_plan(self, plan: Plan, kind: str, reason: str, **extra: Any) -> None:
        self.plan = plan
        self.evidence.mark()
        self.emit(kind, plan=plan.to_dict(), reason=reason, **extra)

    # -- the run ---------------------------------------------------------------------------------

    def run(self) -> RunReport:
        t0 = self.opts.clock()
        try:
            try:
                self._start()
                while True:
                    self._check_limits(self.next_step, t0)
                    self._step(self.next_step)
            except KeyboardInterrupt:  # Ctrl-C: a safe point, the trace and checkpoints are saved
                self.emit("interrupted", next_step=self.next_step)
                raise RunEnded(
                    "interrupted",
                    f"Interrupted before step {self.next_step}; "
                    f"continue with `repoctx agent run --resume {self.run_id}` or undo "
                    f"with `repoctx agent undo {self.run_id}`.",
                    "interrupted",
                ) from None
            except ModelCallFailed as exc:  # retries spent, or an error no retry mends
                raise RunEnded(exc.reason, exc.message, "failed") from exc.__cause__
            except RepoctxError as exc:  # the index or the checkpoints failed: end cleanly
                raise RunEnded("error", str(exc), "failed") from exc
        except RunEnded as end:
            return self._finish(end, t0)

    def _start(self) -> None:
        if self.opts.resume:
            self.emit("resume", next_step=self.next_step, run_id=self.run_id)
        else:
            self.emit(
                "header",
                format=TRACE_FORMAT,
                run_id=self.run_id,
                task=self.task,
                model=self.model.name,
                root=str(self.config.root),
                granted=sorted(self.opts.granted),
                limits=asdict(self.limits),
                tools=[s.name for s in self.specs],
                tool_format=self.tool_format,
            )
            self.emit(
                "instructions",
                files=list(self.instructions.files),
                tokens=self.counter.count(self.instructions.text),
                memory=self.memory.to_dict(),
            )
        self.emit(
            "notice", kind="tokenizer", message=f"prompts counted by {self.tokens.describe()}"
        )
        if self.opts.strategy_why:  # agent/strategy.py picked the loop: say why
            self.emit("notice", kind="strategy", strategy="loop",
                      message=f"loop: {self.opts.strategy_why}")
        done = self.ctx.session.reindex(self.config)  # the index must match the tree
        self.emit(
            "notice",
            kind="index",
            message=f"index refreshed in {done.seconds:.2f} s ({done.files_parsed} files parsed)",
        )
        if self.plan is None:
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
            self.set_plan(fallback_plan(self.task), "plan", f"one-step plan: {why}")
        else:
            self.set_plan(plan, "plan", "")

    def _check_limits(self, step: int, t0: float) -> None:
        lim, again = self.limits, f"continue with `repoctx agent run --resume {self.run_id}`"
        if step > lim.max_steps:
            raise RunEnded(
                "max_steps", f"Reached the step limit ({lim.max_steps}) — {again} --max-steps N."
            )
        if self.opts.clock() - t0 >= lim.timeout_s:
            raise RunEnded("timeout", f"Reached the time limit ({lim.timeout_s:g} s) — {again}.")
        if self.calls.usage.total_tokens >= lim.max_tokens:
            raise RunEnded(
                "max_tokens",
                f"Used {self.calls.usage.total_tokens:,} tokens of "
                f"{lim.max_tokens:,} — {again} --max-tokens N.",
            )

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
            plan=self.plan,
            observation=self.observation,
            step=self.next_step if step is None else step,
            retrieve=self._retrieve,
            closing=closing,
            code_share=code_share,
        )

    def _retrieve(self, query: str, budget: int) -> ContextPack:
        session, cfg = self.ctx.session, self.config
        conn = session.conn(cfg)
        # The same query on the same index generation gives the same pack: steps that stay on
        # one plan step with similar results skip the search (a write bumps the generation).
        key = (query, budget, generation(conn))
        if key not in self._packs:
            searcher = session.searcher(cfg, semantic=session.embed_model(cfg) is not None)
            pack = assemble_context(
                conn, cfg.root, query, budget, searcher=searcher, tokenizer=self.counter
            )
            # The pack enters the prompt directly, not through the tools: the same deny list
            # and the same redaction as every tool result.
            self._packs = {key: redact_pack(pack, self.ctx.workspace.is_hidden)}
        return self._packs[key]

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
                results.append((call, self._call(step, call, blocked=verdict == "block")))
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
                changed=len(self._changed()),
                run_id=self.run_id,
            )
            raise RunEnded(end.reason, end.message, end.status)
        done = [r for c, r in results if c.name == "finish" and r.ok]
        if done:
            if self.plan is not None:
                self.set_plan(self.plan.complete_all(), "plan_progress", "finish called")
            end = finish_ending(
                self.task,
                str(done[-1].data.get("status", "done")),
                str(done[-1].data.get("summary", "")),
                can_write=self.can_write,
                changed=len(self._changed()),
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
        change_missing = self._change_expected() and not self._changed()
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

    def _changed(self) -> list[FileStat]:
        store = self.ctx.checkpoints
        return diff_stats(self.config.root, run_originals(store, self.run_id)) if store else []

    def _text_ending(self, text: str) -> Ending:
        """How a run ends when the model stops calling tools (see agent/outcome.py)."""
        return text_ending(
            self.task,
            prose(text, self.names),
            can_write=self.can_write,
            changed=len(self._changed()),
            run_id=self.run_id,
        )

    def _call(self, step: int, call: ToolCall, blocked: bool = False) -> ToolResult:
        t0 = time.perf_counter()
        if blocked:
            result = fail(
                f"You sent this {'exact ' if self.guard.exact else ''}call "
                f"{'' if self.guard.exact else '(or one differing only by a word or spacing) '}"
                f"{self.guard.repeats} times in a row; it was not run again. Its result will "
                "not change: try another approach, or call `finish` saying what blocks you. "
                "Repeating it ends the run.",
                repeated=True,
            )
        else:
            result = self.registry.call_tool(call, replace(self.ctx, step=step))
        seconds, extra = time.perf_counter() - t0, {}
        record = None
        if call.name == "run_tests" and "passed" in result.data:
            record = record_tests(step, result.output, result.data)
            self.tests.append(record)
            extra = {"tests_summary": record.summary, "failing": list(record.failures)}
        self.emit(
            "tool_call",
            step=step,
            id=call.id,
            name=call.name,
            arguments=call.raw_arguments,
            ok=result.ok,
            error=result.error,
            kind=None if result.ok else classify_tool_failure(result.error, result.data),
            output=result.output,
            seconds=round(seconds, 4),
            **extra,
            data={k: v for k, v in result.data.items() if k != "diff"},
        )
        if result.ok:
            facts = learned_facts(call.name, call.arguments or {}, result.data, self.config.root)
            for key, value in facts.items():
                if key not in self.memory.entries or self.memory.entries[key].value != value:
                    self.memory.set(key, value, call.name, self.run_id)
                    self.emit("memory", step=step, key=key, value=value, source=call.name)
        self.evidence.note_call(
            step, call.name, self._permission(call.name), result.ok, result.data
        )
        if record is not None and self.plan is not None:
            for change in after_tests(self.plan, record.passed, list(record.failures)):
                self.set_plan(change.plan, change.kind, change.reason, title=change.title)
        return result

    def _own_tool(self, step: int, name: str, args: dict[str, Any]) -> ToolResult:
        """`update_plan` and `remember`: the loop's own tools (registered per run)."""
        if name == REMEMBER.name:
            try:
                entry = self.memory.set(
                    str(args.get("key", "")), str(args.get("value", "")), "remember", self.run_id
                )
            except AgentError as exc:
                return fail(str(exc), bad_arguments=True)
            self.emit("memory", step=step, key=entry.key, value=entry.value, source="remember")
            return ok(f"Remembered {entry.key}.")
        changed = len(self._changed()) if args.get("complete") else 0
        change = (
            apply_update(self.plan, args, self.evidence, changed)
            if self.plan
            else "there is no plan yet"
        )
        if isinstance(change, str):
            return fail(f"update_plan: {change}.", bad_arguments=True)
        self.set_plan(change.plan, change.kind, change.reason, title=change.title)
        return ok("Plan updated:\n" + change.plan.render())

    def _permission(self, name: str) -> str:
        tool = self.registry.get(name)
        return tool.permission if tool is not None else ""

    def _end_step(
        self, step: int, obs: list[Message], summary: str, failed: bool, last_error: str = ""
    ) -> None:
        self.observation, self.next_step = tuple(obs), step + 1
        self.history.append(summary)
        self.convo.observe(step, obs, self.calls.budget, self.prompts.fixed(), recap=summary)
        store = self.ctx.checkpoints
        files = checkpoint_files(store.dir, self.run_id, step) if store else []
        if files:
            self.emit("checkpoint", step=step, files=files)
        self.emit(
            "step",
            step=step,
            summary=summary,
            failed=failed,
            observation=[message_to_dict(m) for m in obs],
        )
        if self.guard.step_done(failed):
            raise RunEnded(
                "consecutive_failures",
                f"{self.guard.failures} steps in a row failed; "
                f"the last error: {last_error or 'no usable reply'} — see "
                f"`repoctx agent replay {self.run_id}` and rephrase the task.",
            )

    # -- the end ---------------------------------------------------------------------------------

    def _finish(self, end: RunEnded, t0: float) -> RunReport:
        elapsed = round(self.prior_s + self.opts.clock() - t0, 3)
        changed = self._changed()
        paths = [c.path for c in changed]
        stat = git_stat(self.config.root, paths)
        # What the user reads as the result: never a tool call the model wrote as text.
        final = prose(end.message, self.names) if end.reason in ("finished", "answered") else ""
        message = final if end.reason in ("finished", "answered") else end.message
        plan = self.plan.to_dict() if self.plan else {}
        summary = {
            "final": final,
            "changed": [asdict(c) for c in changed],
            "git_stat": stat,
            "tests": [asdict(t) for t in self.tests],
            "usage": asdict(self.calls.usage),
            "model_calls": self.calls.count,
            # times the conversation was cut to fit the budget (agent/conversation.py)
            "compactions": self.convo.compactions,
            "steps": self.next_step - 1,
            "elapsed_s": elapsed,
            "tool_format": {"setting": self.tool_format, "used": self.reader.used},
        }
        self.emit(
            "end",
            status=end.status,
            reason=end.reason,
            message=message,
            summary=summary,
            plan=plan,
        )
        branch = sha = None
        if self.opts.commit and paths and end.status == "done":
            result = commit_run(self.config.root, self.run_id, self.task, final, paths, self.tests)
            branch, sha = result.branch, result.commit
            self.emit("commit", branch=branch, commit=sha)
        elif self.opts.commit:
            self.emit(
                "notice",
                kind="commit",
                message="not committed: "
                + ("nothing changed" if not paths else f"the run ended {end.status}"),
            )
        self.trace.close()
        self.ctx.session.close()
        return RunReport(
            self.run_id,
            end.status,
            end.reason,
            message,
            final,
            self.next_step - 1,
            self.calls.usage,
            self.calls.count,
            elapsed,
            tuple(changed),
            stat,
            tuple(self.tests),
            str(self.trace.path),
            plan,
            branch,
            sha,
            self.reader.used,
        )


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
