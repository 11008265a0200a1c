"""The pipeline strategy for small models (`agent run --strategy pipeline`; Agentless's
localize, repair, validate): no plan, no tool calls. Step 1 localizes with the index
(agent/localize.py; the tests the task names run once first, their frames are signals) and
puts the task and the exact code into the run's fixed messages (system, one example exchange,
the task), which never change. Each later step is one attempt: the model's reply and the
feedback are appended, so every request extends the one before and llama.cpp's prefix cache
reuses it. The SEARCH/REPLACE blocks run through the tool registry as `edit`/`create_file`
calls (gate, sandbox, checkpoints, undo, trace as in the loop), then `run_tests` on the tests
that reach the change; a failed attempt's edits are rolled back before the next, so the code
shown stays true.

Outcomes: `done` only when files changed and the tests that reach them pass (`tests_passed`;
`untested`, said in the message, when none does); no block is `no_progress`, never done; a
model that says it cannot is `blocked`; still failing after the last attempt is `stopped`
(`tests_failing`, the change left for review or undo).

`PipelineRun` drives localize and the attempts over what a run carries (the fixed messages, the
conversation, the live attempts' files); the repair one function at a time is
agent/pipeline_steps.py's. The run's skeleton — start, end, report, commit, how each tool call
and step is traced — is agent/run_base.py's, shared with the loop, so `agent replay`,
`--resume` and `agent undo` work alike.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from indexer import Config

from .budget import StepPrompt
from .edit_blocks import WorkspaceFiles, block_calls, scan_edit_blocks
from .localize import localize
from .model_calls import ModelCalls
from .models.base import Message, ModelClient, ToolCall, Usage
from .outcome import asks_for_change
from .pipeline_steps import (
    SAMPLE_TEMPERATURE,
    Location,
    LocationRepair,
    declined_end,
    locations,
    locations_data,
    locations_from,
    reaching_tests,
    verify,
)
from .pipeline_text import (
    NO_BLOCKS,
    TEST_TASK,
    UNAPPLIED,
    Sampling,
    after_attempts,
    declined,
    example_checks,
    example_failure,
    first_prompt,
    fixed_messages,
    guard_tests,
    missing_parameters,
    module_of,
    rebase,
    resumed_state,
    shown_paths,
)
from .run_base import BaseRun, RunEnded
from .run_result import RunOptions, RunReport
from .tools import ToolRegistry, run_originals
from .tools.testing import Failure, is_test_file, pytest_argv
from .trace import (
    TraceError,
    clip,
    read_trace,
    tests_from,
    trace_path,
)

#: Attempts (model calls after localization) per run, unless RunOptions.attempts says.
ATTEMPTS = 6
#: Tokens of code shown (the spans); the whole prompt stays near 1-2k tokens.
SPAN_TOKENS = 1500
#: Most reply tokens asked for: a few blocks fit; a runaway reply at ~7 tokens/s on a CPU
#: would take minutes.
REPLY_TOKENS = 1024
#: Requests per attempt when replies come back empty (the run ends) or cut short.
EMPTY_TRIES = 3


@dataclass
class _Attempt:
    state: str = ""  # what the last attempt left: tests_failed | unplaced | no_blocks
    detail: str = ""


class PipelineRun(BaseRun):
    """Localize once, then attempts: each one reply of SEARCH/REPLACE blocks, applied and tested."""

    strategy = "pipeline"

    def _setup(self) -> None:
        options = self.opts
        self.attempts = options.attempts or ATTEMPTS
        self.fixed: list[Message] = []  # system, example exchange, task with code: never change
        self.convo: list[Message] = []  # the replies and feedback kept after them
        self.named_tests: list[str] = []
        self.failing_before: list[str] = []
        #: (path, name) of the functions whose interface the task changes (named in it).
        self.interface: list[tuple[str, str]] = []
        self.examples: list[str] = []  # checks of the task's examples (failing before the edit)
        #: The functions repaired one per request (agent/pipeline_steps.py); [] for one place.
        self.locations: list[Location] = []
        self.loc_next, self.swept = 0, False  # the function asked for next; all had a turn
        self.live_steps: list[int] = []  # steps whose edits are in the tree
        self.test_failures = 0  # attempts whose tests failed
        self.attempts_made = 0  # the first two build the conversation, the rest are samples
        self.keep = True  # the current attempt extends the conversation (else: a sample)
        run_id, resumed = self._resume()
        self._open(run_id)
        limits = replace(
            self.limits, completion_tokens=min(self.limits.completion_tokens, REPLY_TOKENS)
        )
        self.sampling = Sampling(self.model)
        self.calls = ModelCalls(self.sampling, limits, self.tokens, [], self.emit, options.sleep, 1)
        self.first_attempt = self.next_step if self.fixed else self.next_step + 1
        self.calls.usage, self.calls.count = resumed

    # -- resume ----------------------------------------------------------------------------------

    def _load(self, run_id: str) -> tuple[Usage, int]:
        """A pipeline run's state from its trace (agent/pipeline_text.py `resumed_state`)."""
        events = read_trace(trace_path(self.config.index_path, run_id))
        if any(e["type"] == "end" and e.get("status") == "done" for e in events):
            raise TraceError(f"Run {run_id} is done — start a new run instead.")
        st = resumed_state(events)
        self.task, self.tests, self.fixed, self.convo = st["task"], tests_from(events), *st["msgs"]
        for key in ("named_tests", "failing_before", "interface", "examples", "test_failures",
                    "attempts_made", "next_step", "prior_s", "history", "loc_next", "swept"):  # fmt: skip
            setattr(self, key, st[key])
        self.locations = locations_from(st["locations"])
        return st["usage"], st["calls"]

    # -- the run ---------------------------------------------------------------------------------

    def _drive(self, t0: float) -> None:
        if not self.fixed:
            self._localize(self.next_step)
        state = _Attempt()
        if self.locations:  # a change across functions: one function per request
            repair = LocationRepair(self, self.locations)
            state = _Attempt(*repair.drive(t0, self.loc_next, self.swept))
        for _ in range(0 if self.locations else self.attempts):
            self.check_limits(t0)
            state = self._attempt(self.next_step)
        raise self._after_attempts(state)

    def _header(self) -> dict[str, Any]:
        return {
            "tools": ["edit", "create_file", "run_tests"],
            "tool_format": "text",
            "strategy": "pipeline",
        }

    def _announce(self) -> None:
        self.emit(
            "notice",
            kind="strategy",
            strategy="pipeline",
            message=f"pipeline: {self.opts.strategy_why or 'asked for'}",
        )

    def _ready(self) -> None:
        if not self.can_write and asks_for_change(self.task):
            raise RunEnded(
                "read_only",
                "The pipeline changes files by its edits, and this run may not write — rerun "
                "with --yes, or use --strategy loop for a read-only run.",
                "failed",
            )

    # -- step 1: localize ------------------------------------------------------------------------

    def _localize(self, step: int) -> None:
        index = self.ctx.index
        loc0 = localize(index, self.task, counter=self.tokens.count, budget=0, retrieve=False)
        self.named_tests = list(loc0.named_tests)
        failures: list[Failure] = []
        tests = self.named_tests or reaching_tests(index, loc0, self.ctx.agent.test_select_hops)
        if tests and ("execute" in self.opts.granted or self.opts.confirm):
            result = self.call(
                step, ToolCall.from_raw("localize-tests", "run_tests", {"tests": tests})
            )
            for run in result.data.get("runs") or ():
                failures += [Failure(**f) for f in run.get("failures", ())]
        self.failing_before = [f.test_id for f in failures]
        # Examples in the task that fail before any edit describe the change wanted (one that
        # holds describes the bug: "add(1, 2) returns -1"): checked after the tests pass.
        checks = example_checks(self.task, lambda name: module_of(index, name))
        if checks and ("execute" in self.opts.granted or self.opts.confirm):
            self.examples = self.failing_examples(step, checks)[0]
        searcher = self._searcher()
        loc = localize(
            index,
            self.task,
            failures=failures,
            searcher=searcher,
            counter=self.tokens.count,
            budget=SPAN_TOKENS,
            show_tests=bool(TEST_TASK.search(self.task)),
        )
        self.emit(
            "notice",
            kind="localize",
            message=f"{len(loc.spans)} spans shown: "
            + ", ".join(f"{s.path}:{s.start}-{s.end}" for s in loc.spans)
            + (f"; {len(loc.left_out)} left out for the budget" if loc.left_out else ""),
            localization=loc.to_dict(),
        )
        if loc.signature_change:
            self.interface = [
                (c.path, c.qualname.rsplit(".", 1)[-1])
                for c in loc.candidates
                if c.kind in ("function", "method")
                and not is_test_file(c.path)
                and any(r.startswith("named in the task") for r in c.reasons)
            ]
        if asks_for_change(self.task):
            failing = bool(self.named_tests or self.failing_before)
            self.locations = locations(loc, failing, self.task)
        closing = LocationRepair(self, self.locations).first_request() if self.locations else None
        self.fixed = fixed_messages(self.task, first_prompt(self.task, loc, closing))
        summary = f"step {step}: localized {len(loc.spans)} spans" + (
            f", {len(failures)} failing test(s) before any change" if failures else ""
        )
        self.end_step(
            step,
            self.fixed,
            summary,
            localized=True,
            named_tests=self.named_tests,
            failing_before=self.failing_before,
            interface=self.interface,
            examples=self.examples,
            locations=locations_data(self.locations),
        )

    def _searcher(self) -> Any:
        session, cfg = self.ctx.session, self.config
        return session.searcher(cfg, semantic=session.embed_model(cfg) is not None)

    # -- one attempt -----------------------------------------------------------------------------

    def _attempt(self, step: int) -> _Attempt:
        # A test failure is fed back once; after a second, each attempt is a fresh sample from
        # the fixed messages alone (all of them in the server's cache): in tries with
        # Qwen2.5-Coder-1.5B a model that failed twice repeated itself or undid its own change,
        # while fresh samples of the first prompt found the fix one time in four.
        self.keep = self.attempts_made < 2
        self.attempts_made += 1
        messages = [*self.fixed, *self.convo] if self.keep else list(self.fixed)
        temperature = 0.0 if step == self.first_attempt else SAMPLE_TEMPERATURE
        reply = self.reply(step, messages, temperature)
        text = reply.content
        scanned = scan_edit_blocks(text)
        if not scanned.blocks and not scanned.problems:
            if not asks_for_change(self.task):
                self.end_step(step, [reply], f"step {step}: answered in text")
                raise RunEnded("answered", text.strip(), "done")
            if declined(text):
                self._rollback(step)
                self.end_step(step, [reply], f"step {step}: the model said it cannot")
                raise declined_end(text)
            self.end_step(
                step,
                [reply, Message.user(NO_BLOCKS)],
                f"step {step}: no SEARCH/REPLACE block",
                failed=True,
            )
            return _Attempt("no_blocks", clip(text, 200))
        if not asks_for_change(self.task):
            # A question is answered, never edited: its blocks are suggestions for the user.
            self.end_step(step, [reply], f"step {step}: answered; suggested edits not applied")
            raise RunEnded("answered", text.strip() + UNAPPLIED, "done")
        if self.test_failures and not self.interface:
            # A fix the tests refuted is wrong as a whole: it goes before the next is applied.
            # A change across an interface (a parameter through its callers) is kept: its
            # pieces are the def and each caller, and the next reply's blocks replace theirs.
            self._rollback(step)
        applied, corrections = self.apply(step, scanned)
        if not corrections:
            corrections = missing_parameters(self.task, self.interface, self.files().read)
        if corrections:
            done = f"Applied: {', '.join(dict.fromkeys(applied))}. " if applied else ""
            feedback = (
                f"{done}Not applied:\n"
                + "\n".join(f"- {c}" for c in corrections)
                + "\nSend the blocks for the whole change again, copying SEARCH exactly from "
                "the code shown at the start."
            )
            self.end_step(
                step,
                [reply, Message.user(feedback)],
                f"step {step}: {len(applied)} block(s) applied, {len(corrections)} not",
                failed=not applied,
            )
            return _Attempt("unplaced", clip(corrections[0], 300))
        return self._test(step, reply)

    def reply(self, step: int, messages: list[Message], temperature: float) -> Message:
        """The model's reply; an empty or cut-short one is asked again (nothing appended keeps
        the prefix): llama-cpp-python's server ends a streamed reply at once when another
        client's request arrives, and a real reply comes back the same."""
        for n in range(1, EMPTY_TRIES + 1):
            reply = self._ask(step, messages, temperature)
            cut = scan_edit_blocks(reply.content)
            if reply.content.strip() and (cut.blocks or not cut.problems or n > 1):
                return reply
            kind = "cut_reply" if reply.content.strip() else "empty_answer"
            self.emit("notice", step=step, kind=kind, message=f"{kind}: asked again")
            self.opts.sleep(2.0 * n)
        if reply.content.strip():
            return reply
        self.end_step(step, [], f"step {step}: empty replies", failed=True)
        raise RunEnded(
            "empty_answer",
            f"The model sent {EMPTY_TRIES} empty replies in a row — is another client using "
            "the same server (llama.cpp's server cuts a streamed reply short when another "
            "request arrives)? Run again, or try another model.",
            "failed",
        )

    def apply(self, step: int, scanned: Any) -> tuple[list[str], list[str]]:
        """A reply's blocks as `edit`/`create_file` calls through the registry: the paths
        changed, and a correction for each block that could not be placed or applied."""
        corrections = list(scanned.problems)
        blocks = guard_tests(
            self.task, bool(self.named_tests or self.failing_before), scanned.blocks, corrections
        )
        files = self.files()
        # An incomplete change stays, and the next reply's blocks complete it: a block already
        # in place is skipped; one written against code an earlier block changed replaces it.
        blocks = self._rebase(step, blocks, files)
        shown = [p for p in dict.fromkeys(shown_paths(self.fixed))]
        calls, unplaced = block_calls(blocks, shown, files.read, repo_paths=files.paths, step=step)
        corrections += unplaced
        applied: list[str] = []
        for call in calls:
            result = self.call(step, call)
            if result.ok:
                applied.append(str((call.arguments or {}).get("path", "")))
            else:
                corrections.append(
                    f"{call.arguments and call.arguments.get('path')}: {result.error}"
                )
        if applied:
            self.live_steps.append(step)
        return applied, corrections

    def files(self) -> WorkspaceFiles:
        return WorkspaceFiles(self.ctx)

    def original(self, path: str) -> str | None:
        """``path`` as it was before the run (its text now when the run has not changed it)."""
        store = self.ctx.checkpoints
        before = run_originals(store, self.run_id).get(str(self.ctx.workspace.root / path))
        if before is not None:
            return before.decode("utf-8", "replace")
        return self.files().read(path)

    def _rebase(self, step: int, blocks: list, files: WorkspaceFiles) -> list:
        store = self.ctx.checkpoints
        originals = run_originals(store, self.run_id) if store and self.live_steps else {}
        root = self.ctx.workspace.root
        kept, restore = rebase(blocks, files.read, lambda p: originals.get(str(root / p)))
        for path, text in restore.items():  # the later block replaces the earlier edits
            args = {"path": path, "content": text, "overwrite": True}
            self.call(step, ToolCall.from_raw(f"rebase-{step}", "create_file", args))
        return kept

    def failing_examples(self, step: int, scripts: list[str]) -> tuple[list[str], str]:
        """The example checks that fail now, and what the first of them says."""
        failing, said = [], ""
        for n, script in enumerate(scripts):
            # -B: a __pycache__ entry (same size, same second) hid a later edit from the tests
            argv = {"command": [pytest_argv(self.ctx)[0], "-B", "-c", script]}
            res = self.call(step, ToolCall.from_raw(f"example-{step}-{n}", "run_command", argv))
            if not (res.ok and res.data.get("exit_code") == 0):
                failing.append(script)
                said = said or example_failure(res.text())
        return failing, said

    def _ask(self, step: int, messages: list[Message], temperature: float) -> Message:
        self.sampling.temperature = temperature
        # ModelCalls estimates the reused prefix (this request against the last and its reply)
        _, completion = self.calls.complete(
            step, "edit", lambda budget: self._step_prompt(messages, budget), tools=()
        )
        return Message.assistant(completion.message.content)

    def _step_prompt(self, messages: list[Message], budget: int) -> StepPrompt:
        fixed, total = self.tokens.prompt_tokens(self.fixed), self.tokens.prompt_tokens(messages)
        sections = {"fixed": fixed, "conversation": total - fixed}
        return StepPrompt(tuple(messages), total, budget, sections, None, 0.0)

    def _test(self, step: int, reply: Message) -> _Attempt:
        verdict, why = verify(self, step, reply)
        if verdict == "unchanged":
            self.end_step(
                step,
                [reply, Message.user(NO_BLOCKS)],
                f"step {step}: the blocks changed nothing",
                failed=True,
            )
            return _Attempt("no_blocks", "the blocks changed nothing")
        self.test_failures += 1
        if verdict == "example":
            feedback = f"The tests pass, but {why} Send corrected SEARCH/REPLACE blocks."
            obs = [reply, Message.user(feedback)] if self.keep else [reply]
            self.end_step(step, obs, f"step {step}: an example fails", True, tests_failed=True)
            return _Attempt("tests_failed", why)
        undone = (
            "That change is undone: the code is again as shown at the start."
            if not self.interface
            else "Blocks you send now replace the ones for the same lines."
        )
        feedback = (
            f"The edit was applied, then these tests failed:\n{why}\n{undone} Send corrected "
            "SEARCH/REPLACE blocks for the whole change."
        )
        obs = [reply, Message.user(feedback)] if self.keep else [reply]
        self.end_step(
            step, obs, f"step {step}: changed; tests fail", failed=True, tests_failed=True
        )
        return _Attempt("tests_failed", why)

    def _after_attempts(self, state: _Attempt) -> RunEnded:
        reason, message, status = after_attempts(
            state.state,
            state.detail,
            bool(self.changed()),
            self.attempts_made if self.locations else self.attempts,
            self.run_id,
        )
        return RunEnded(reason, message, status)

    # -- tools, steps, rollback ------------------------------------------------------------------

    def _rollback(self, step: int) -> None:
        """Put back the files of the attempts still in the tree (newest first)."""
        store = self.ctx.checkpoints
        if not self.live_steps or store is None:
            return
        for s in reversed(self.live_steps):
            store.rollback_step(self.run_id, s)
        self.emit(
            "notice",
            step=step,
            kind="rollback",
            message=f"the edits of step(s) {', '.join(map(str, self.live_steps))} were "
            "rolled back before this attempt",
        )
        self.live_steps = []
        self.ctx.session.reindex(self.config)

    def end_step(
        self, step: int, obs: list[Message], summary: str, failed: bool = False, **extra: Any
    ) -> None:
        if not extra.get("localized"):
            extra["kept"] = self.keep
            if self.keep:
                self.convo += obs
        self._record_step(step, obs, summary, failed, **extra)

    # -- the end ---------------------------------------------------------------------------------

    def _format_used(self) -> str:
        return "text" if self.calls.count else ""


def run_pipeline(
    config: Config,
    task: str,
    model: ModelClient,
    options: RunOptions | None = None,
    registry: ToolRegistry | None = None,
) -> RunReport:
    """Run (or, with ``options.resume``, continue) the pipeline on ``task``."""
    return PipelineRun(config, task, model, options or RunOptions(), registry).run()
