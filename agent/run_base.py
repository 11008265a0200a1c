"""What every strategy's run has in common (agent/loop.py `AgentRun`, agent/pipeline.py
`PipelineRun`): the run's skeleton — start (the trace's header or resume event, the index
refreshed), drive, and end on a `RunEnded` (a limit, Ctrl-C, a model or index failure, or the
strategy's own outcome) — and the trace records it writes along the way: each tool call, each
step, the end event, the commit, the report. A strategy fills in how it drives (`_drive`) and
what it adds at the edges (the hooks below), so the two strategies' traces, reports, `agent
replay`, `--resume` and `agent undo` work alike.
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from typing import Any

from indexer import Config, RepoctxError
from retrieval.settings import RetrievalSettings

from .budget import Limits, classify_tool_failure
from .model_calls import ModelCallFailed, ModelCalls
from .models.base import Message, ModelClient, ToolCall, Usage
from .models.prompt_tokens import PromptCounter, model_tokenizer
from .run_result import FileStat, RunOptions, RunReport, commit_run, diff_stats, git_stat
from .settings import ModelSettings
from .tools import ToolContext, ToolRegistry, ToolResult, default_registry, run_originals
from .trace import (
    TRACE_FORMAT,
    TestRecord,
    TraceWriter,
    checkpoint_files,
    message_to_dict,
    record_tests,
    resolve_run,
    trace_path,
)


class RunEnded(Exception):  # noqa: N818 - control flow, not an error
    def __init__(self, reason: str, message: str, status: str = "stopped") -> None:
        super().__init__(message)
        self.reason, self.message, self.status = reason, message, status


def run_tokenizer(config: Config, model: ModelClient, options: RunOptions) -> PromptCounter:
    """How the run counts prompt tokens: the options' tokenizer, else the model's."""
    return options.tokenizer or model_tokenizer(
        model,
        ModelSettings.resolve(config).tokenizer,
        fallback=RetrievalSettings.from_config(config).tokenizer,
        probe=False,
    )


def offered(options: RunOptions) -> set[str]:
    """The permissions the run's tools may use: those granted, and with --confirm those the
    user is asked for."""
    return set(options.granted) | ({"write", "execute"} if options.confirm else set())


class BaseRun:
    """A run's skeleton. The strategy's `_setup` makes what it needs, resumes (`_resume`) and
    opens the trace (`_open`); then `run` starts it, lets `_drive` go until a `RunEnded`, and
    ends it."""

    calls: ModelCalls
    ctx: ToolContext
    run_id: str
    trace: TraceWriter
    #: The strategy's name in its report and trace.
    strategy = "loop"
    #: An uncommitted run says why in a notice (the loop; the pipeline's trace never had it).
    says_not_committed = False

    def __init__(
        self,
        config: Config,
        task: str,
        model: ModelClient,
        options: RunOptions,
        registry: ToolRegistry | None = None,
    ) -> None:
        self.config, self.task, self.model, self.opts = config, task, model, options
        self.limits: Limits = options.limits
        self.registry = registry or default_registry()
        self.tokens = run_tokenizer(config, model, options)
        self.can_write = "write" in offered(options)
        self.tests: list[TestRecord] = []
        self.history: list[str] = []  # the steps' summaries
        self.next_step, self.prior_s = 1, 0.0  # prior_s: seconds run before a resume
        self._setup()

    def _setup(self) -> None:
        """The strategy's own state, then `_resume` and `_open`."""
        raise NotImplementedError

    def _resume(self) -> tuple[str | None, tuple[Usage, int]]:
        """The run's id (None: a new run's is made) and the model usage and calls so far,
        the strategy's state restored from the trace (`_load`) when the options resume a run."""
        if not self.opts.resume:
            return self.opts.run_id, (Usage(), 0)
        run_id = resolve_run(self.config.index_path, self.opts.resume)
        return run_id, self._load(run_id)

    def _load(self, run_id: str) -> tuple[Usage, int]:
        raise NotImplementedError

    def _open(self, run_id: str | None) -> None:
        """The run's tool context (``run_id``: the run resumed, or None for a new one) and its
        trace."""
        self.ctx = ToolContext.create(
            self.config, granted=self.opts.granted, confirm=self.opts.confirm, run_id=run_id
        )
        self.run_id = self.ctx.run_id
        self.trace = TraceWriter(trace_path(self.config.index_path, self.run_id))

    def emit(self, type: str, **fields: Any) -> dict[str, Any]:
        event = self.trace.write(type, **fields)
        if self.opts.on_event is not None:
            self.opts.on_event(event)
        return event

    # -- the run ---------------------------------------------------------------------------------

    def run(self) -> RunReport:
        t0 = self.opts.clock()
        try:
            try:
                self._start()
                self._drive(t0)
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

    def _drive(self, t0: float) -> None:
        """The strategy's steps; ends by raising RunEnded."""
        raise NotImplementedError

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
                **self._header(),
            )
            self._opening()
        self._announce()
        done = self.ctx.session.reindex(self.config)  # the index must match the tree
        self.emit(
            "notice",
            kind="index",
            message=f"index refreshed in {done.seconds:.2f} s ({done.files_parsed} files parsed)",
        )
        self._ready()

    def _header(self) -> dict[str, Any]:
        """The header's fields after the common ones (the tools, their format)."""
        return {}

    def _opening(self) -> None:
        """Events a new run writes after its header."""

    def _announce(self) -> None:
        """Notices every start writes, a resumed one too, before the index is refreshed."""

    def _ready(self) -> None:
        """The last of the start, the index fresh (the loop's plan; the pipeline's checks)."""

    def check_limits(self, t0: float) -> None:
        again = f"continue with `repoctx agent run --resume {self.run_id}`"
        if self.opts.clock() - t0 >= self.limits.timeout_s:
            raise RunEnded(
                "timeout", f"Reached the time limit ({self.limits.timeout_s:g} s) — {again}."
            )
        if self.calls.usage.total_tokens >= self.limits.max_tokens:
            raise RunEnded(
                "max_tokens",
                f"Used {self.calls.usage.total_tokens:,} tokens of "
                f"{self.limits.max_tokens:,} — {again} --max-tokens N.",
            )

    # -- what each step records ------------------------------------------------------------------

    def call(self, step: int, call: ToolCall, refused: ToolResult | None = None) -> ToolResult:
        """Run one tool call through the registry (``refused``: the answer given instead of
        running it) and trace it; a test run is kept among the run's test records."""
        t0 = time.perf_counter()
        if refused is not None:
            result = refused
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
        self._after_call(step, call, result, record)
        return result

    def _after_call(
        self, step: int, call: ToolCall, result: ToolResult, record: TestRecord | None
    ) -> None:
        """What the strategy learns from a traced call."""

    def _record_step(
        self, step: int, obs: list[Message], summary: str, failed: bool, **extra: Any
    ) -> None:
        """A step is over: its checkpoint and its step event, with what it showed the model."""
        self.next_step = step + 1
        self.history.append(summary)
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
            **extra,
        )

    def changed(self) -> list[FileStat]:
        """The files the run has changed so far."""
        store = self.ctx.checkpoints
        return diff_stats(self.config.root, run_originals(store, self.run_id)) if store else []

    # -- the end ---------------------------------------------------------------------------------

    def _final(self, end: RunEnded) -> tuple[str, str]:
        """(the answer the user reads as the result, the end's message)."""
        return (end.message if end.status == "done" else ""), end.message

    def _plan(self) -> dict[str, Any]:
        return {}

    def _summary_counts(self) -> dict[str, Any]:
        """Summary fields after the model calls (the loop's compactions)."""
        return {}

    def _summary_how(self) -> dict[str, Any]:
        """The summary's last fields: how the run went about it."""
        return {"strategy": self.strategy}

    def _format_used(self) -> str:
        """How tool calls were written: native | text | "" (no call)."""
        return ""

    def _report_how(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "strategy_why": self.opts.strategy_why}

    def _finish(self, end: RunEnded, t0: float) -> RunReport:
        elapsed = round(self.prior_s + self.opts.clock() - t0, 3)
        changed = self.changed()
        paths = [c.path for c in changed]
        stat = git_stat(self.config.root, paths)
        final, message = self._final(end)
        plan = self._plan()
        summary = {
            "final": final,
            "changed": [asdict(c) for c in changed],
            "git_stat": stat,
            "tests": [asdict(t) for t in self.tests],
            "usage": asdict(self.calls.usage),
            "model_calls": self.calls.count,
            **self._summary_counts(),
            "steps": self.next_step - 1,
            "elapsed_s": elapsed,
            **self._summary_how(),
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
        elif self.opts.commit and self.says_not_committed:
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
            self._format_used(),
            **self._report_how(),
        )
