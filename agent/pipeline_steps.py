"""The pipeline's repair of a change across several functions, one function per request
(Agentless repairs per location): an interface change — the definition, then each caller —
or several functions a task names. Asked for the whole change in one reply, Qwen2.5-Coder-1.5B
got the signature or the bodies right, rarely both (0 of 5 runs on `add_param`); asked for one
function at a time it has one small thing to do per reply.

The run's fixed messages (system, example, the task with all the code) stay first and
unchanged; the first of them already asks for the first function. Each later request appends
the reply and one user message: "now this function: <its code as it is after the earlier
edits>", so the server reuses everything before. Each reply's blocks are applied through the
same path as any attempt (agent/pipeline.py `apply`: gate, sandbox, checkpoints, trace).
Each request asks for the function written out whole (a fence is read as one block replacing
the function as it is now; a SEARCH/REPLACE block is taken too); each function's reply is
checked on its own (a parameter the task adds: taken and used) and asked again once. When
every function has had its turn, the parameter check, the tests and the task's examples run
once; a failure goes back to the function it names (the innermost frame, the name in a
correction or an example, a failing test named for it), within the run's request budget.

Also here, shared with agent/pipeline.py: `verify` (the tests that reach the change, then the
task's examples) and `reaching_tests` (the tests run before any edit).
"""

from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from indexer import Config, Index

from .edit_blocks import EditBlock, ScannedBlocks, WorkspaceFiles, scan_edit_blocks
from .localize import Localization
from .models.base import Message, ToolCall
from .pipeline_text import (
    FAILURE_CHARS,
    declined,
    failures_text,
    missing_parameters,
    new_parameters,
)
from .run_base import RunEnded
from .run_result import FileStat
from .tools import ToolContext, ToolResult
from .tools.changes import ChangedSymbol, changed_ranges, changed_symbols
from .tools.testing import Failure, is_test_file, select_tests
from .trace import clip


class RepairRun(Protocol):
    """What the repair and `verify` use of the run that drives them (agent/pipeline.py
    `PipelineRun`): its task, its state, and its steps' building blocks."""

    config: Config
    ctx: ToolContext
    run_id: str
    task: str
    #: (path, name) of the functions whose interface the task changes.
    interface: list[tuple[str, str]]
    attempts: int
    attempts_made: int
    next_step: int
    #: The current request extends the conversation (else it is a fresh sample).
    keep: bool
    fixed: list[Message]
    convo: list[Message]
    named_tests: list[str]
    failing_before: list[str]
    examples: list[str]

    def files(self) -> WorkspaceFiles: ...
    def original(self, path: str) -> str | None: ...
    def check_limits(self, t0: float) -> None: ...
    def reply(self, step: int, messages: list[Message], temperature: float) -> Message: ...
    def apply(self, step: int, scanned: ScannedBlocks) -> tuple[list[str], list[str]]: ...
    def changed(self) -> list[FileStat]: ...
    def call(self, step: int, call: ToolCall) -> ToolResult: ...
    def failing_examples(self, step: int, scripts: list[str]) -> tuple[list[str], str]: ...
    def end_step(
        self, step: int, obs: list[Message], summary: str, failed: bool = False, **extra: Any
    ) -> None: ...


#: Temperature of every request after the first (which is greedy): a retry needs a new reply.
SAMPLE_TEMPERATURE = 0.8


#: What each request asks for: the function written out whole (Aider's "whole" form, for one
#: function). Asked for a SEARCH/REPLACE block, Qwen2.5-Coder-1.5B put only the `def` line or
#: only the `return` line in it, and the other half never changed; a block is still taken.
WHOLE = (
    "Reply with the whole function as it must be (its `def` line and its whole body) in one "
    "fence under its path."
)
_FENCE = re.compile(r"```[\w+-]*[ \t]*\n(.*?)```", re.S)
#: Functions repaired one at a time, at most (more would not fit a small prompt's attention).
MOST_LOCATIONS = 5
#: Requests for one function in a row when its reply holds no block or a block that does not
#: apply (then the next function has its turn; the final check sends it back if it matters).
TRIES_PER_LOCATION = 2
_FUNCS = ("function", "method")
_RENAME = re.compile(r"\brenam(e|es|ed|ing)\b", re.I)


@dataclass(frozen=True)
class Location:
    """One function to change: ``qualname`` in ``path``; ``role`` definition | caller |
    named; a caller says which changed function it ``calls``."""

    path: str
    qualname: str
    role: str
    calls: str = ""

    @property
    def name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]


def locations(loc: Localization, has_failing_tests: bool, task: str = "") -> list[Location]:
    """The functions to repair one at a time, the definition first, then its callers; [] when
    the change is in one place (a bug fix stays one request for the whole change) or is not
    made of functions alone (a rename also changes imports and tests)."""
    if _RENAME.search(task):
        return []
    covered = {(s.path, s.start, s.end) for s in loc.spans}

    def shown(c: Any) -> bool:
        return any(p == c.path and a <= c.start and c.end <= b for p, a, b in covered)

    funcs = [
        c for c in loc.candidates if c.kind in _FUNCS and not is_test_file(c.path) and shown(c)
    ]
    named = [c for c in funcs if any(r.startswith("named in the task") for r in c.reasons)]
    out: list[Location] = []
    if loc.signature_change:
        called = {
            r.removeprefix("calls ") for c in funcs for r in c.reasons if r.startswith("calls ")
        }
        defs = [c for c in named if c.qualname.rsplit(".", 1)[-1] in called]
        callers = [
            (c, next(r.removeprefix("calls ") for r in c.reasons if r.startswith("calls ")))
            for c in funcs
            if c not in defs and any(r.startswith("calls ") for r in c.reasons)
        ]
        out = [Location(c.path, c.qualname, "definition") for c in defs]
        out += [Location(c.path, c.qualname, "caller", to) for c, to in callers]
        out += [Location(c.path, c.qualname, "named") for c in named if c not in defs]
    elif not has_failing_tests and len(named) >= 2:
        out = [Location(c.path, c.qualname, "named") for c in named]
    seen: set[tuple[str, str]] = set()
    ordered = []
    for x in out:
        if (x.path, x.qualname) not in seen:
            seen.add((x.path, x.qualname))
            ordered.append(x)
    return ordered[:MOST_LOCATIONS] if len(ordered) >= 2 else []


def function_text(text: str, qualname: str) -> str | None:
    """The source of function ``qualname`` (with its decorators) in Python ``text`` as it is
    now, or None when it is not there or the file does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    parts = qualname.split(".")

    def find(nodes: list[ast.stmt], names: list[str]) -> ast.AST | None:
        for node in nodes:
            if getattr(node, "name", None) != names[0]:
                continue
            if len(names) == 1 and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                return node
            if len(names) > 1 and isinstance(node, ast.ClassDef):
                return find(node.body, names[1:])
        return None

    # A qualname may start with the module's path (report.format.format_amount).
    node = next((n for k in range(len(parts)) if (n := find(tree.body, parts[k:]))), None)
    if node is None:
        return None
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    lines = text.splitlines(True)
    return "".join(lines[start - 1 : node.end_lineno])


def function_reply(scanned: ScannedBlocks, x: Location, code: str | None) -> ScannedBlocks:
    """A reply that writes function ``x`` out whole (in a fence, under its path or none, no
    markers) as one block replacing ``code``, the function as it is now (None: not found, the
    reply is taken as it is); SEARCH/REPLACE blocks as they are."""

    def new_code(text: str) -> str | None:
        if not re.search(rf"^[ \t]*(?:async[ \t]+)?def[ \t]+{re.escape(x.name)}\b", text, re.M):
            return None
        new = function_text(text, x.name) or text  # that function alone when it parses
        return new if new.endswith("\n") else new + "\n"

    if not x.path.endswith(".py") or not code:
        return scanned
    blocks = []
    for b in scanned.blocks:
        new = new_code(b.replace) if b.kind == "file" and b.path in (None, x.path) else None
        blocks.append(EditBlock(x.path, code, new) if new else b)
    if not scanned.blocks:
        for m in _FENCE.finditer(scanned.rest):
            if new := new_code(m.group(1)):
                blocks.append(EditBlock(x.path, code, new))
                break
    return ScannedBlocks(blocks, scanned.problems, scanned.rest)


def def_line(code: str) -> str:
    """The `def` line(s) of a function's source, up to the colon that ends them."""
    m = re.search(r"^[ \t]*(?:async[ \t]+)?def\b.*?\)[^:\n]*:", code, re.M | re.S)
    return m.group(0).strip() if m else ""


def route(text: str, locs: list[Location]) -> int:
    """The location a failure is about: the innermost line (last first) naming one of them —
    a frame `path:line: in name`, a correction "`name` in path", an example `name(...)`; else
    a failing test named for one; else the first (the definition)."""
    lines = text.splitlines()[::-1]
    # Then a failing test named for one (test_invoice_line), when no line names it as code.
    for before in (r"(?<![\w.])", r"\btest_\w*?"):
        for line in lines:
            for i, x in enumerate(locs):
                if re.search(rf"{before}{re.escape(x.name)}\b", line):
                    return i
    return 0


class LocationRepair:
    """The requests of a run that repairs ``locs`` one at a time (agent/pipeline.py drives it
    after localization: `PipelineRun._drive`)."""

    def __init__(self, run: RepairRun, locs: list[Location]) -> None:
        self.run, self.locs = run, locs
        self.lang = "python"

    # -- what each request says ------------------------------------------------------------------

    def first_request(self) -> str:
        """Appended to the task message (a fixed message): the first function's turn."""
        x = self.locs[0]
        names = ", ".join(f"`{y.name}` in {y.path}" for y in self.locs)
        return (
            f"Make the change one function at a time ({names}). First only `{x.name}` in "
            f"{x.path}{self._hint(x)}. {WHOLE}"
        )

    def _code(self, x: Location) -> str:
        text = self.run.files().read(x.path) or ""
        code = function_text(text, x.qualname) if x.path.endswith(".py") else None
        return code if code is not None else text

    def _hint(self, x: Location) -> str:
        params = new_parameters(self.run.task)
        parts = []
        if params and x.name in {n for _, n in self.run.interface}:
            parts.append(f"; the task adds {', '.join(f'`{p}`' for p in params)} to it")
        if x.calls:
            now = def_line(self._code_of_name(x.calls))
            if now:
                parts.append(f"; it calls `{x.calls}`, which is now `{now}`")
        return "".join(parts)

    def _code_of_name(self, name: str) -> str:
        for y in self.locs:
            if y.name == name:
                return self._code(y)
        return ""

    def request(self, i: int, before: str = "") -> str:
        x = self.locs[i]
        lead = f"{before}\n\n" if before else ""
        return (
            f"{lead}Now only `{x.name}` in {x.path}{self._hint(x)}. It is now:\n\n{x.path}\n"
            f"```{self.lang}\n{self._code(x).rstrip()}\n```\n{WHOLE}"
        )

    def _own(self, x: Location) -> list[str]:
        """The parameter check's corrections for ``x`` alone."""
        run = self.run
        wrong = missing_parameters(run.task, run.interface, run.files().read)
        return [c for c in wrong if c.startswith(f"`{x.name}` in {x.path} ")]

    # -- the requests ----------------------------------------------------------------------------

    def budget(self) -> int:
        return len(self.locs) + max(1, self.run.attempts - 1)

    def drive(self, t0: float, at: int = 0, swept: bool = False) -> tuple[str, str]:
        """Ask for each location from ``at`` (``swept``: every one has had its turn, so each
        reply is checked), then send failures back; returns what the last request left
        (state, detail) when the budget is spent. Raises RunEnded when the run ends."""
        run = self.run
        tries, state, detail = 0, "no_blocks", ""
        start = run.attempts_made  # a resumed run gets the budget again
        while run.attempts_made - start < self.budget():
            run.check_limits(t0)
            step = run.next_step
            run.keep = True
            run.attempts_made += 1
            # Greedy for a function's first turn; a request asked again samples (greedy, the
            # 1.5B model sent the same reply three times).
            temperature = 0.0 if tries == 0 and not swept else SAMPLE_TEMPERATURE
            reply = run.reply(step, [*run.fixed, *run.convo], temperature)
            x = self.locs[at]
            now = function_text(run.files().read(x.path) or "", x.qualname)
            scanned = function_reply(scan_edit_blocks(reply.content), x, now)
            applied: list[str] = []
            corrections: list[str] = []
            if scanned.blocks or scanned.problems:
                applied, corrections = run.apply(step, scanned)
            elif declined(reply.content) and not run.changed():
                run.end_step(step, [reply], f"step {step}: the model said it cannot")
                raise declined_end(reply.content)
            own = [] if corrections or not scanned.blocks else self._own(x)
            if not scanned.blocks or corrections or own:
                if state != "tests_failed":  # else the last check's failure still holds
                    state = "unplaced" if corrections or own else "no_blocks"
                    detail = clip((corrections or own or [reply.content])[0], 300)
                tries += 1
                if tries < TRIES_PER_LOCATION:  # the same function again
                    said = (
                        "Not applied:\n" + "\n".join(f"- {c}" for c in corrections)
                        if corrections
                        else "Not done yet:\n" + "\n".join(f"- {c}" for c in own)
                        if own
                        else "Your reply had no code for it, so nothing was changed."
                    )
                    self._next(step, reply, at, swept, self.request(at, said), failed=True)
                    continue
            tries = 0
            summary = f"step {step}: `{x.name}`: {len(applied)} block(s) applied"
            if not swept:
                # The next function not already done by an earlier reply (a reply may change
                # more than its own function).
                nxt = next((j for j in range(at + 1, len(self.locs)) if not self._done(j)), None)
                if nxt is not None:
                    at = nxt
                    lead = "Applied." if applied else f"`{x.name}` stays as it is for now."
                    self._next(step, reply, at, swept, self.request(at, lead), summary)
                    continue
                swept = True
            wrong = missing_parameters(run.task, run.interface, run.files().read)
            if wrong:  # to the function the first correction names, with its own corrections
                at = route(wrong[0], self.locs)
                failure = "Not done yet:\n" + "\n".join(
                    f"- {c}" for c in wrong if route(c, self.locs) == at
                )
            else:
                failure = self._check(step, reply)  # raises when the change is done
                at = route(failure, self.locs)
            state, detail = "tests_failed", failure
            self._next(step, reply, at, swept, self.request(at, failure), summary, failed=True,
                       tests_failed=True)  # fmt: skip
        return state, detail

    def _done(self, i: int) -> bool:
        """Whether an earlier reply already changed function ``i`` and it passes its check."""
        return self._changed(self.locs[i]) and not self._own(self.locs[i])

    def _changed(self, x: Location) -> bool:
        original = self.run.original(x.path)
        if original is None:
            return False
        before = function_text(original, x.qualname)
        return before is not None and before != self._code(x)

    def _next(
        self, step: int, reply: Message, at: int, swept: bool, ask: str, summary: str = "",
        failed: bool = False, **extra: Any,
    ) -> None:  # fmt: skip
        self.run.end_step(
            step,
            [reply, Message.user(ask)],
            summary or f"step {step}: `{self.locs[at].name}` asked again",
            failed=failed,
            next_location=at,
            swept=swept,
            **extra,
        )

    def _check(self, step: int, reply: Message) -> str:
        """The tests and the examples; what failed (the run ends when they pass)."""
        verdict, why = verify(self.run, step, reply)
        if verdict == "example":
            return f"The tests pass, but {why}"
        if verdict == "unchanged":
            return "The blocks so far changed nothing."
        return f"These tests fail now:\n{why}"


def declined_end(text: str) -> RunEnded:
    """The end of a run whose model said it cannot do the task (``text``, its reply)."""
    return RunEnded(
        "declined",
        f'The model said it cannot do the task: "{clip(text, 200)}" '
        "Nothing was changed; try a stronger model or a more specific task.",
        "blocked",
    )


def locations_from(data: list[dict[str, str]]) -> list[Location]:
    return [Location(**d) for d in data]


def locations_data(locs: list[Location]) -> list[dict[str, str]]:
    return [asdict(x) for x in locs]


def verify(run: RepairRun, step: int, reply: Message) -> tuple[str, str]:
    """Run the tests that reach the change, then the task's examples: the run ends when
    they pass (or nothing tests the change); else (unchanged | example | tests, why)."""
    if not run.changed():
        return "unchanged", ""
    index = run.ctx.index
    ranges, _ = changed_ranges(run.ctx)
    selected, total = select_tests(
        index, changed_symbols(index, ranges), run.ctx.agent.test_select_hops
    )
    tests = list(dict.fromkeys([*run.named_tests, *run.failing_before, *selected]))
    changed = ", ".join(c.path for c in run.changed())
    if not tests and not total:
        run.end_step(step, [reply], f"step {step}: changed; the repository has no tests")
        raise RunEnded(
            "untested",
            f"Changed {changed}; the index holds no test, so it is not verified — review it "
            f"(`git diff`), or undo it with `repoctx agent undo {run.run_id}`.",
            "done",
        )
    # No test reaches the change through the graph, but the repository has tests: run them
    # all. A deleted function or a half-done rename breaks tests the graph cannot link to the
    # edit (both were called done, untested, on the benchmark).
    args = {"tests": tests} if tests else {"scope": "full"}
    result = run.call(step, ToolCall.from_raw(f"tests-{step}", "run_tests", args))
    if result.data.get("passed") and (wrong := run.failing_examples(step, run.examples)[1]):
        # The tests may never pass the new behaviour: the task's own examples are checked.
        return "example", wrong
    if result.data.get("passed"):
        which = (
            f"the {len(tests)} test(s) that reach the change pass"
            if tests
            else "no test reaches the change through the code graph, and the whole test "
            "suite passes"
        )
        passed = f"{len(tests)} test(s) pass" if tests else "the whole test suite passes"
        run.end_step(step, [reply], f"step {step}: changed; {passed}")
        raise RunEnded("tests_passed", f"Changed {changed}; {which}.", "done")
    failures = [Failure(**f) for r in result.data.get("runs") or () for f in r["failures"]]
    return "tests", failures_text(failures) or clip(result.error or result.output, FAILURE_CHARS)


def reaching_tests(index: Index, loc: Localization, hops: int) -> list[str]:
    """Tests that reach the task's named definitions through the graph (run before the
    edit when the task names no test)."""

    named = [c for c in loc.candidates if "named in the task" in " ".join(c.reasons)]
    changed = [
        ChangedSymbol(c.id, c.qualname, c.kind, c.path, c.start, c.end, None)
        for c in named
        if not is_test_file(c.path)
    ]
    selected, _ = select_tests(index, changed, hops)
    return selected[:50]
