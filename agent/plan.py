"""The run's plan: ordered steps, each with a completion criterion, asked of the model once in a
strict JSON format and revised — with a recorded reason — when observations contradict it."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, replace
from typing import Any

from .models.base import ToolSpec

MAX_PLAN_STEPS = 12
#: A step whose criterion is checked by the loop itself: it holds when run_tests passes.
TESTS_PASS = "tests_pass"
FIX_PREFIX = "Make the failing tests pass"

PLAN_PROMPT = """\
You plan changes to a code repository. Reply with ONLY a JSON object, no prose, in exactly \
this format:
{"steps": [{"title": "what to do", "done_when": "observable completion criterion", \
"check": null}]}
Use 1 to MAX steps, in order. Set "check" to "tests_pass" on a step that is complete exactly \
when the test suite passes; otherwise null.""".replace("MAX", str(MAX_PLAN_STEPS))

UPDATE_PLAN = ToolSpec(
    "update_plan",
    "Mark the current plan step complete, or replace the remaining steps when what you learned "
    "contradicts the plan. Always give the reason.",
    {
        "type": "object",
        "properties": {
            "reason": {"type": "string", "minLength": 1},
            "complete": {
                "type": "boolean",
                "description": "The current step's criterion holds; move to the next step.",
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
    """Validated steps, or a string saying what is wrong."""
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
        if not isinstance(done_when, str) or check not in (None, TESTS_PASS):
            return f"step {i}: `done_when` must be a string and `check` null or {TESTS_PASS!r}"
        steps.append(PlanStep(title[:300], done_when.strip()[:300], check))
    return steps


@dataclass(frozen=True)
class PlanChange:
    plan: Plan
    #: plan_revision (steps changed) | plan_progress (a step completed)
    kind: str
    reason: str
    title: str = ""


def apply_update(plan: Plan, args: dict[str, Any]) -> PlanChange | str:
    """The change an `update_plan` call asks for, or what is wrong with the call."""
    reason = str(args.get("reason") or "").strip()
    if not reason:
        return "update_plan needs a `reason`"
    if args.get("steps"):
        steps = parse_steps(args["steps"])
        if isinstance(steps, str):
            return f"invalid steps: {steps}"
        if args.get("complete"):  # both: the current step is done, then the rest is replaced
            title = plan.current.title if plan.current else ""
            return PlanChange(plan.complete_current().revise(steps), "plan_revision", reason, title)
        return PlanChange(plan.revise(steps), "plan_revision", reason)
    if args.get("complete"):
        title = plan.current.title if plan.current else ""
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
