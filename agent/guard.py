"""What must not go on forever in a run: failed steps, empty or tool-less replies, the same tool
calls again and again — also when they differ only by a word, spacing, key order or the
spelling of a path — and steps that only update the plan or memory. The loop asks the guard
after every reply and ends the run when it says ``stop``.

Near repeats are judged per argument, not over the whole JSON: free text (a reason, a query,
a summary) is near when it differs by about a word; paths are compared once normalised; code,
numbers and flags must be equal once spacing is collapsed — reading a file page by page or
editing each caller in turn differs from the previous call "by a word" too, and is progress.
"""

from __future__ import annotations

import difflib
import json
import posixpath
import re
from dataclasses import dataclass
from typing import Any

from .budget import Limits

#: Arguments holding free text the model words afresh each time; near when about a word differs.
PROSE_KEYS = frozenset({"reason", "summary", "query", "value", "title", "done_when", "question"})
#: Arguments holding a path (or paths): compared once normalised ("./a//b.py" is "a/b.py").
PATH_KEYS = frozenset({"path", "paths", "cwd", "file", "path_glob"})
#: difflib ratio over words at or above which two texts are near (one word of six differs).
NEAR_RATIO = 0.8
#: Plan-only steps in a row (every call `update_plan` or `remember`) before the model is told,
#: and before the run ends.
PLAN_ONLY_NUDGE = 3
PLAN_ONLY_STOP = 5
#: The loop's own tools: calling only these is not progress.
PLAN_TOOLS = frozenset({"update_plan", "remember"})
NUDGE_PLAN_ONLY = (
    f"Your last {PLAN_ONLY_NUDGE} steps only updated the plan or memory: nothing was read, run "
    "or changed, so the plan cannot advance. Do the current step with a tool now (search or "
    "read the code, edit a file, run the tests), or call `finish` with status `blocked` saying "
    f"what stops you. {PLAN_ONLY_STOP - PLAN_ONLY_NUDGE} more steps like these end the run."
)

_WORD = re.compile(r"\w+")


@dataclass
class Guard:
    """Counts what must not go on forever: failed steps, empty or tool-less replies, the same
    (or nearly the same) tool calls again and again, and plan-only steps."""

    limits: Limits
    failures: int = 0
    empty: int = 0
    text_only: int = 0
    repeats: int = 0
    last: tuple[tuple[str, str], ...] = ()
    #: Whether the last repeat was the very same call (False: near, differing by a word).
    exact: bool = True
    plan_only: int = 0

    def calls(self, signature: tuple[tuple[str, str], ...]) -> str:
        """run | block (the model is told, the calls do not run) | stop. ``signature`` is
        each call's name and canonical arguments (JSON, or the raw text when unreadable)."""
        self.empty = self.text_only = 0
        near = bool(self.last) and same_calls(signature, self.last)
        self.exact = signature == self.last
        self.repeats = self.repeats + 1 if near else 1
        self.last = signature
        if self.repeats > self.limits.max_repeats:
            return "stop"
        return "block" if self.repeats == self.limits.max_repeats else "run"

    def no_calls(self, empty: bool) -> str:
        """A reply without tool calls: nudge once, stop on the second in a row."""
        self.last, self.repeats = (), 0
        if empty:
            self.empty += 1
            return "stop" if self.empty >= 2 else "nudge"
        self.text_only += 1
        return "stop" if self.text_only >= 2 else "nudge"

    def plan_step(self, names: list[str]) -> str:
        """A step that called the tools ``names``: ok | nudge (the PLAN_ONLY_NUDGE-th plan-only
        step in a row: the model is told once) | stop (the PLAN_ONLY_STOP-th)."""
        if not names or not set(names) <= PLAN_TOOLS:
            self.plan_only = 0
            return "ok"
        self.plan_only += 1
        if self.plan_only >= PLAN_ONLY_STOP:
            return "stop"
        return "nudge" if self.plan_only == PLAN_ONLY_NUDGE else "ok"

    def step_done(self, failed: bool) -> bool:
        """Record a step; True when the consecutive-failure limit is reached."""
        self.failures = self.failures + 1 if failed else 0
        return self.failures >= self.limits.max_consecutive_failures


def same_calls(a: tuple[tuple[str, str], ...], b: tuple[tuple[str, str], ...]) -> bool:
    """Whether two steps' calls are the same calls, or nearly (see the module docstring)."""
    if len(a) != len(b):
        return False
    return all(
        na == nb and _near(_load(xa), _load(xb)) for (na, xa), (nb, xb) in zip(a, b, strict=True)
    )


def _load(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:  # unreadable arguments: compared as text
        return arguments


def _near(a: Any, b: Any, key: str = "") -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        a = {k: v for k, v in a.items() if v is not None}  # a null is an argument left out
        b = {k: v for k, v in b.items() if v is not None}
        return a.keys() == b.keys() and all(_near(a[k], b[k], k) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_near(x, y, key) for x, y in zip(a, b, strict=True))
    if isinstance(a, str) and isinstance(b, str):
        if key in PATH_KEYS:
            return _path(a) == _path(b)
        if key in PROSE_KEYS or not key:  # not key: raw text of unreadable arguments
            return near_text(a, b)
        return " ".join(a.split()) == " ".join(b.split())
    return type(a) is type(b) and a == b


def _path(p: str) -> str:
    p = posixpath.normpath(p.strip().replace("\\", "/"))
    return p.removeprefix("./") if p != "." else ""


def near_text(a: str, b: str) -> bool:
    """Equal once spacing and case are set aside, or about a word apart: a difflib ratio of
    NEAR_RATIO over words, or one word changed, added or dropped in three or more."""
    wa, wb = _WORD.findall(a.lower()), _WORD.findall(b.lower())
    if wa == wb:  # the same words: only spacing, case or punctuation differ
        return bool(wa) or " ".join(a.split()) == " ".join(b.split())
    if max(len(wa), len(wb)) < 3:  # "tax rate" and "tax total" are two searches
        return False
    m = difflib.SequenceMatcher(None, wa, wb, autojunk=False)
    changed = sum(max(i2 - i1, j2 - j1) for op, i1, i2, j1, j2 in m.get_opcodes() if op != "equal")
    return changed <= 1 or m.ratio() >= NEAR_RATIO
