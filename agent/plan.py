"""The run's plan: ordered steps, each with a completion criterion, asked of the model once in a
strict JSON format and revised — with a recorded reason — when observations contradict it.

A step is complete only on evidence from the run's own records, never on the model's word:
what a step needs follows from its criterion (``needs``) — tests that pass → a passing test
run after the last edit; a change → a file changed in this run; anything else → something
read, searched or run while the step was current — and ``apply_update`` refuses a
``complete: true`` without it, saying in one line what is missing and quoting the call.

Nothing the model is shown reads like a value it could copy: the plan format is given as a
shape, its example is marked as one and is about another task, and a criterion, title or
reason that repeats the prompt's own words (``echoes``) is not taken.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import asdict, dataclass, replace
from typing import Any

from .models.base import ToolSpec

MAX_PLAN_STEPS = 12
#: A step whose criterion is checked by the loop itself: it holds when run_tests passes.
TESTS_PASS = "tests_pass"
#: A step declared complete once a file has changed in this run.
CHANGED = "changed"
CHECKS = (TESTS_PASS, CHANGED)
FIX_PREFIX = "Make the failing tests pass"

# The format is a shape, not a filled-in object: a 1.5B model made the placeholder criterion
# of the earlier prompt ("observable completion criterion") its own criterion. The example is
# marked as one and is about another task, so copying it shows (``echoes``).
_EXAMPLE = {
    "steps": [
        {
            "title": "Find where the invoice date is formatted",
            "done_when": "the function that formats invoice dates is known",
            "check": None,
        },
        {
            "title": "Format invoice dates as YYYY-MM-DD",
            "done_when": "the invoice tests pass",
            "check": TESTS_PASS,
        },
    ]
}
PLAN_PROMPT = f"""\
You plan changes to a code repository. Reply with only a JSON object of this shape, no prose:
{{"steps": [{{"title": ..., "done_when": ..., "check": ...}}, ...]}}
title: the action of the step, in your words for this task.
done_when: what will be true, and can be seen with the tools, when the step is done.
check: "{TESTS_PASS}" if the step is done exactly when the tests pass, "{CHANGED}" if it is \
done once a file is changed, otherwise null.
Use 1 to {MAX_PLAN_STEPS} steps, in order.
Example only, for an unrelated task (do not copy its words):
{json.dumps(_EXAMPLE)}"""

UPDATE_PLAN = ToolSpec(
    "update_plan",
    "Mark the current plan step complete once a tool result shows its criterion holds, or "
    "replace the remaining steps when what you learned contradicts the plan.",
    {
        "type": "object",
        "properties": {
            # No description a model could send back as its reason (a 1.5B did); every word
            # here is in every step's prompt, so they stay few.
            "reason": {"type": "string", "minLength": 1},
            "complete": {
                "type": "boolean",
                "description": "Marks the current step done; refused without its evidence (a "
                "passing test run after the last edit, a changed file).",
            },
            "steps": {
                "type": "array",
                "description": "New remaining steps (replace the current and later ones).",
                "items": {
                    "type": "object",
                    "properties": {
                        "title": {"type": "string"},
                        "done_when": {"type": "string"},
                        "check": {"type": ["string", "null"]},
                    },
                    "required": ["title"],
                },
            },
        },
        "required": ["reason"],
        "additionalProperties": False,
    },
)


@dataclass(frozen=True)
class PlanStep:
    title: str
    done_when: str = ""
    check: str | None = None
    status: str = "pending"  # pending | done


@dataclass(frozen=True)
class Plan:
    steps: tuple[PlanStep, ...]
    revision: int = 0
    #: model | fallback | resumed
    source: str = "model"

    @property
    def current_index(self) -> int | None:
        for i, step in enumerate(self.steps):
            if step.status != "done":
                return i
        return None

    @property
    def current(self) -> PlanStep | None:
        i = self.current_index
        return None if i is None else self.steps[i]

    def complete_current(self) -> Plan:
        i = self.current_index
        if i is None:
            return self
        steps = list(self.steps)
        steps[i] = replace(steps[i], status="done")
        return replace(self, steps=tuple(steps))

    def complete_all(self) -> Plan:
        return replace(self, steps=tuple(replace(s, status="done") for s in self.steps))

    def revise(self, remaining: list[PlanStep]) -> Plan:
        """Keep the steps already done; the rest becomes ``remaining``."""
        done = tuple(s for s in self.steps if s.status == "done")
        return replace(self, steps=done + tuple(remaining), revision=self.revision + 1)

    def insert_current(self, step: PlanStep) -> Plan:
        i = self.current_index
        i = len(self.steps) if i is None else i
        steps = (*self.steps[:i], step, *self.steps[i:])
        return replace(self, steps=steps, revision=self.revision + 1)

    def render(self) -> str:
        cur = self.current_index
        lines = []
        for i, s in enumerate(self.steps):
            mark = "x" if s.status == "done" else (">" if i == cur else " ")
            crit = f" — done when: {s.done_when}" if s.done_when else ""
            lines.append(f"[{mark}] {i + 1}. {s.title}{crit}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": [asdict(s) for s in self.steps],
            "revision": self.revision,
            "source": self.source,
            "current": self.current_index,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        steps = tuple(PlanStep(**s) for s in data.get("steps", ()))
        return cls(steps, int(data.get("revision", 0)), str(data.get("source", "resumed")))


def fallback_plan(task: str) -> Plan:
    title = " ".join(task.split())[:300] or "Do the task"
    return Plan((PlanStep(title, "the task is done and `finish` has been called"),), 0, "fallback")


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


def parse_plan(text: str) -> tuple[Plan | None, str]:
    """The plan in a model reply, or None and why it is not valid."""
    body = text.strip()
    fenced = _FENCE.search(body)
    if fenced:
        body = fenced.group(1).strip()
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        return None, f"the plan reply is not JSON ({exc})"
    steps = parse_steps(data.get("steps") if isinstance(data, dict) else None)
    if isinstance(steps, str):
        return None, steps
    return Plan(tuple(steps)), ""


def parse_steps(raw: Any) -> list[PlanStep] | str:
    """Validated steps, or a string saying what is wrong. A criterion that repeats the
    prompt's words is dropped (the step's needs then follow from its title); a title that
    does is refused, since the step would be the prompt's, not the task's."""
    if not isinstance(raw, list) or not raw:
        return "`steps` must be a non-empty list"
    if len(raw) > MAX_PLAN_STEPS:
        return f"at most {MAX_PLAN_STEPS} steps"
    steps = []
    for i, item in enumerate(raw, 1):
        if not isinstance(item, dict) or not isinstance(item.get("title"), str):
            return f"step {i} needs a string `title`"
        title = item["title"].strip()
        if not title:
            return f"step {i} has an empty title"
        done_when = item.get("done_when") or ""
        check = item.get("check")
        if not isinstance(done_when, str) or check not in (None, *CHECKS):
            return (
                f"step {i}: `done_when` must be a string and `check` null, "
                f"{TESTS_PASS!r} or {CHANGED!r}"
            )
        if echoes(title):
            return f"step {i}'s title {title[:80]!r} copies the prompt; name this task's step"
        if echoes(done_when):
            done_when = ""
        steps.append(PlanStep(title[:300], done_when.strip()[:300], check))
    return steps


# -- what the model copies -----------------------------------------------------------------------

_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _prompt_phrases() -> list[list[str]]:
    """The prompt's own words a model might send back as values: the example's values and
    the field descriptions of the plan format and of `update_plan`."""
    texts = [v for step in _EXAMPLE["steps"] for v in (step["title"], step["done_when"])]
    texts += [ln.split(":", 1)[1] for ln in PLAN_PROMPT.splitlines()[2:5]]
    texts += [UPDATE_PLAN.description]
    texts += [p.get("description", "") for p in UPDATE_PLAN.parameters["properties"].values()]
    return [w for w in map(_words, texts) if w]


#: Placeholders of earlier prompts that recorded small-model runs copied into their plans
#: (tests/recordings/qwen2.5-coder-1.5b-run.json: "observable completion criterion of …").
_OLD_CRITERION = ["observable", "completion", "criterion"]
_OLD_TITLE = ["what", "to", "do"]


def echoes(text: str) -> bool:
    """Whether ``text`` repeats the prompt instead of saying something of its own: one of
    its phrases whole, or inside it (five words or more, or an old placeholder), five or more
    words cut from one, or nearly one (a difflib ratio of 0.8 over words, both four words or
    more: "the tests pass" is no echo of "the invoice tests pass")."""
    words = _words(text)
    if not words:
        return bool(text.strip())  # "...", "<>": punctuation only
    if words == _OLD_TITLE or _contains(words, _OLD_CRITERION):
        return True
    for phrase in _PHRASES:
        if words == phrase or (len(phrase) >= 5 and _contains(words, phrase)):
            return True
        if len(words) >= 5 and _contains(phrase, words):  # a piece of a description
            return True
        near = difflib.SequenceMatcher(None, words, phrase, autojunk=False).ratio() >= 0.8
        if near and min(len(words), len(phrase)) >= 4:
            return True
    return False


def _contains(words: list[str], phrase: list[str]) -> bool:
    n = len(phrase)
    return any(words[i : i + n] == phrase for i in range(len(words) - n + 1))


_PHRASES = _prompt_phrases()


# -- evidence ------------------------------------------------------------------------------------

#: What a step's completion needs: a passing test run after the last edit, a file changed in
#: this run, or something read, searched or run while the step was current.
TESTS, CHANGE, READ = "tests", "change", "read"

_TESTS = re.compile(
    r"\b(tests?|test_\w+|pytest|suite|specs?)\b.*\b(pass\w*|green|succeed\w*|(no longer|not|never)"
    r"\s+fail\w*)|\b(pass\w*|green)\b.*\b(tests?|test_\w+|pytest|suite)\b"
    r"|\b(fix\w*|make|repair\w*|get)\b.*\bfail\w*\s+(tests?|test_\w+)",  # fix the failing test
    re.I | re.S,
)
_CHANGE = re.compile(
    r"\b(fix(es|ed|ing)?|edit\w*|chang\w*|add(s|ed|ing)?|updat\w*|renam\w*|remov\w*|"
    r"delet\w*|creat\w*|implement\w*|replac\w*|modif\w*|writ\w*|wrote|patch\w*|refactor\w*|"
    r"introduc\w*|insert\w*|repair\w*|mov(e|ed|es|ing)|extract\w*|appl(y|ied|ies)|"
    r"rais(e|es|ed|ing)|return(s|ed|ing)?|accept(s|ed|ing)?)\b",
    re.I,
)
# Finding something out (seeing a failure included): the step is done once something was looked
# at. A criterion or title that also names a change ("the bug is found and fixed"; "Identify …"
# done when "… returns -1800", as the live 1.5B wrote) counts as this one, so an honest model
# is never refused for want of an edit its step does not make.
_READ = re.compile(
    r"\b(find|found|locat\w*|identif\w*|read|known|know|understand\w*|understood|inspect\w*|"
    r"look\w*|examin\w*|review\w*|explor\w*|search\w*|determin\w*|confirm\w*|list\w*|"
    r"seen|see|open\w*|reproduc\w*|clear|visible|where|fail\w*|error\w*|why)\b",
    re.I,
)


def needs(step: PlanStep) -> str:
    """What completing ``step`` needs, from its declared check, else its criterion and title:
    tests that pass → TESTS; else a finding → READ; else a change → CHANGE; else READ."""
    if step.check == TESTS_PASS:
        return TESTS
    if step.check == CHANGED:
        return CHANGE
    texts = (step.done_when, step.title)
    for pattern, need in ((_TESTS, TESTS), (_READ, READ), (_CHANGE, CHANGE)):
        if any(pattern.search(t) for t in texts):
            return need
    return READ


#: Calls that show nothing about the code: the plan's own tools, and `finish` (its word).
_NOT_EVIDENCE = frozenset({"update_plan", "remember", "finish"})


def verdict_of(name: str, data: dict[str, Any]) -> bool | None:
    """Whether a call was a test run that passed (True), failed (False), or no test run."""
    if name == "run_tests":
        passed = data.get("passed")
        return passed if isinstance(passed, bool) else None
    if name == "run_command" and isinstance(data.get("exit_code"), int):
        words = [str(w).rsplit("/", 1)[-1] for w in list(data.get("argv") or ())[:3]]
        if words[:1] == ["pytest"] or words[1:3] == ["-m", "pytest"]:
            return data["exit_code"] == 0
    return None


@dataclass
class Evidence:
    """What the run has done, in order, from its own tool results: the loop notes every call
    and marks every plan change; the model's words play no part."""

    #: Calls noted so far; the positions below are 1-based, 0 = never.
    seq: int = 0
    #: The last successful call that read, searched or ran something (not the plan's tools).
    read_at: int = 0
    #: The last successful write (edit, create_file, rename_symbol …).
    write_at: int = 0
    #: The last test run with a verdict, and whether it passed.
    tests_at: int = 0
    tests_passed: bool | None = None
    test_step: int = 0
    #: Where the current plan step began (the last plan change).
    step_began: int = 0

    def note(self, step: int, permission: str, ok: bool, tests_passed: bool | None = None) -> None:
        """One tool call: ``permission`` is the tool's (read | write | execute; "" for the
        loop's own tools and unknown ones); ``tests_passed`` a test run's verdict."""
        self.seq += 1
        if ok and permission in ("read", "execute"):
            self.read_at = self.seq
        if ok and permission == "write":
            self.write_at = self.seq
        if tests_passed is not None:
            self.tests_at, self.tests_passed, self.test_step = self.seq, tests_passed, step

    def note_call(self, step: int, name: str, permission: str, ok: bool, data: Any) -> None:
        """A tool call as the loop ran it: the plan's own tools and `finish` are no evidence;
        a test run's verdict is `run_tests`' ``passed`` or a pytest command's exit status."""
        perm = "" if name in _NOT_EVIDENCE else permission
        self.note(step, perm, ok, verdict_of(name, data if isinstance(data, dict) else {}))

    @classmethod
    def from_events(cls, events: list[dict[str, Any]], permission: Any) -> Evidence:
        """The evidence of a run so far, from its trace (for ``--resume``); ``permission``
        maps a tool name to its permission."""
        evidence = cls()
        for e in events:
            if e.get("type") == "tool_call":
                name = str(e.get("name", ""))
                evidence.note_call(
                    int(e.get("step", 0)), name, permission(name), bool(e.get("ok")), e.get("data")
                )
            elif e.get("type") in ("plan", "plan_revision", "plan_progress"):
                evidence.mark()
        return evidence

    def mark(self) -> None:
        """The plan changed: a new current step begins after the calls so far."""
        self.step_began = self.seq

    def missing(self, step: PlanStep, changed_files: int) -> tuple[str, str]:
        """What completing ``step`` still lacks and what to do next, in words; ("", "") when
        the evidence is there."""
        need = needs(step)
        if need == TESTS:
            if self.tests_at > self.write_at and self.tests_passed:
                return "", ""
            if not self.tests_at:
                return "the tests have not run yet", "call run_tests"
            if self.tests_at < self.write_at:
                return "the tests have not run since the last edit", "call run_tests"
            return (
                f"the last test run (step {self.test_step}) failed",
                "fix the code, then call run_tests",
            )
        if need == CHANGE:
            if changed_files:
                return "", ""
            return "no file has been changed in this run", "make the change with an edit"
        if self.read_at > self.step_began:
            return "", ""
        return (
            "nothing was read, searched or run since this step began",
            "read or search the code for it",
        )


@dataclass(frozen=True)
class PlanChange:
    plan: Plan
    #: plan_revision (steps changed) | plan_progress (a step completed)
    kind: str
    reason: str
    title: str = ""


def quote_call(name: str, args: dict[str, Any], limit: int = 160) -> str:
    """The model's own call on one line, clipped, as ``name (key: value, …)``: what a
    correction quotes back. Not in the JSON a call is written in, and not last in the
    correction: the live 1.5B sent a call quoted last as JSON straight back, and called
    run_tests when the quote came first and the next action last."""
    shown = ", ".join(f"{k}: {json.dumps(args[k], ensure_ascii=False)}" for k in sorted(args))
    text = " ".join(f"{name} ({shown})".split())
    return text if len(text) <= limit else text[: limit - 2] + "…)"


def apply_update(
    plan: Plan,
    args: dict[str, Any],
    evidence: Evidence | None = None,
    changed_files: int = 0,
) -> PlanChange | str:
    """The change an `update_plan` call asks for, or what is wrong with the call. With
    ``evidence``, `complete: true` is refused unless the run shows what the current step's
    criterion needs (``Evidence.missing``); the refusal quotes the call."""
    reason = str(args.get("reason") or "").strip()
    if not reason:
        return "update_plan needs a `reason`"
    # The loop shows these as "update_plan: <this>." — one line, the model's call first, the
    # next action last.
    if echoes(reason):
        return (
            f"refused your call {quote_call(UPDATE_PLAN.name, args)}: its reason repeats the "
            "tool's description. Next: say in your own words which result shows it"
        )
    current = plan.current
    if args.get("complete") and current is not None and evidence is not None:
        lacking, action = evidence.missing(current, changed_files)
        if lacking:
            crit = current.done_when or ("the tests pass" if needs(current) == TESTS else "")
            said = f" is done when {crit[:80]}" if crit else " is not done"
            return (
                f'refused your call {quote_call(UPDATE_PLAN.name, args)}: step "'
                f'{current.title[:80]}"{said}, and {lacking}. Next: {action}, then mark the '
                "step complete"
            )
    if args.get("steps"):
        steps = parse_steps(args["steps"])
        if isinstance(steps, str):
            return f"invalid steps: {steps}"
        if args.get("complete"):  # both: the current step is done, then the rest is replaced
            title = current.title if current else ""
            return PlanChange(plan.complete_current().revise(steps), "plan_revision", reason, title)
        return PlanChange(plan.revise(steps), "plan_revision", reason)
    if args.get("complete"):
        title = current.title if current else ""
        return PlanChange(plan.complete_current(), "plan_progress", reason, title)
    return "pass `complete: true` or new `steps`"


def after_tests(plan: Plan, passed: bool | None, failing: list[str]) -> list[PlanChange]:
    """Check a test run against the plan: passing completes the current tests_pass steps; failing
    contradicts such a step, so a step to fix the failures goes in before it."""
    changes: list[PlanChange] = []
    while passed and plan.current and plan.current.check == TESTS_PASS:
        title = plan.current.title
        plan = plan.complete_current()
        changes.append(PlanChange(plan, "plan_progress", "run_tests passed", title))
    cur = plan.current
    if passed is False and cur and cur.check == TESTS_PASS and not cur.title.startswith(FIX_PREFIX):
        ids = ", ".join(failing[:5]) or "see the test output"
        fix = PlanStep(f"{FIX_PREFIX}: {ids}", "run_tests passes", TESTS_PASS)
        reason = (
            f"run_tests failed ({len(failing)} failing) — the criterion of '{cur.title}' "
            f"({cur.done_when or 'tests pass'}) does not hold"
        )
        changes.append(PlanChange(plan.insert_current(fix), "plan_revision", reason))
    return changes
