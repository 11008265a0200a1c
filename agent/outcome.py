"""How a run that stops calling tools — or calls only its plan tools — is judged: an answer to
a question is a completed run; a task that asked for a change and got none is ``no_progress``,
never a success."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .trace import clip

_VERBS = (
    r"(fix(es|ed)?|add|implement|change|update|rename|refactor|remove|delete|drop|replace|"
    r"make|create|write|edit|modify|move|convert|migrate|bump|upgrade|improve|support|handle|"
    r"correct|repair|port|introduce|extract|split|merge|optimi[sz]e|clean\s+up|rewrite|"
    r"reformat|format|patch|resolve|enable|disable|deprecate|inline|simplify|allow|prevent)"
)
# A change verb that opens a sentence (an instruction: "...; fix it"), or that is joined to
# another instruction ("find and fix", "explain it, then fix it"). A change verb elsewhere may
# be a name in the code ("how does add work?").
_JOINED = re.compile(rf"(?:\band|\bthen|,)\s+(?:please\s+)?{_VERBS}\b", re.I)
_INSTRUCTION = re.compile(
    rf"(?:^|[.!?;:]\s+|\n\s*)(?:(?:please|now|then|also|and)\s+)?{_VERBS}\b", re.I
)
_QUESTION = re.compile(
    r"^\s*(what|where|why|how|which|who|when|whose|is|are|does|do|did|was|were|has|have|can|"
    r"could|should|would|will)\b",
    re.I,
)
# Openers that ask for an answer unless a change verb follows ("find and fix the bug").
_EXPLAIN = re.compile(
    r"^\s*(explain|describe|summari[sz]e|list|show|tell|find|locate|trace|compare|review)\b", re.I
)
_REQUEST = re.compile(
    rf"^\s*(?:please\s+)?(?:can|could|would|will)\s+you\s+(?:please\s+)?{_VERBS}\b", re.I
)
#: Characters of the model's last words quoted in a no_progress message.
QUOTE_CHARS = 200


@dataclass(frozen=True)
class Ending:
    status: str  # done | no_progress | stopped
    reason: str  # answered | no_change | no_finish
    message: str


def asks_for_change(task: str) -> bool:
    """Whether ``task`` asks for the code to change (``fix the failing test``) rather than for
    an answer (``where is the tax computed?``). A polite request (``can you fix ...?``) and an
    instruction after a question (``why does it fail? Fix it.``) ask for a change; so does a
    task in neither form (``test_add fails``)."""
    text = task.strip()
    if _REQUEST.match(text) or _INSTRUCTION.search(text):
        return True
    if _QUESTION.match(text) or text.endswith("?"):
        return False
    return bool(_JOINED.search(text)) or not _EXPLAIN.match(text)


def text_ending(task: str, answer: str, *, can_write: bool, changed: int, run_id: str) -> Ending:
    """The end of a run whose model stopped calling tools and answered ``answer`` in text.

    Completed (``done``/``answered``) only when the task asked a question or the run may not
    write; a change task that changed nothing is ``no_progress``; one that changed files but
    never called ``finish`` is ``stopped`` (``no_finish``), so its changes are not taken as a
    result nobody confirmed."""
    if not can_write or not asks_for_change(task):
        return Ending("done", "answered", answer)
    quote = _quote("Its last reply", answer)
    if not changed:
        return Ending(
            "no_progress",
            "no_change",
            "The task asks for a change, but the model stopped calling tools without "
            f"changing any file or calling `finish`.{quote} Nothing was done: try a model that "
            "calls tools (or another --tool-format), or rephrase the task; the exchange is in "
            f"`repoctx agent replay {run_id}`.",
        )
    return Ending(
        "stopped",
        "no_finish",
        f"The model changed {changed} file(s), then stopped calling tools without calling "
        f"`finish`, so the change was not confirmed.{quote} Review it with `git diff`, "
        f"continue with `repoctx agent run --resume {run_id}`, or undo it with "
        f"`repoctx agent undo {run_id}`.",
    )


def finish_ending(
    task: str, status: str, summary: str, *, can_write: bool, changed: int, run_id: str
) -> Ending:
    """The end of a run whose model called ``finish`` with ``status``. A change task finished
    as ``done`` with no file changed is ``no_progress``: the model's word is not a result."""
    if status != "done" or changed or not can_write or not asks_for_change(task):
        return Ending(status, "finished", summary)
    quote = _quote("Its summary", summary)
    return Ending(
        "no_progress",
        "finished_without_change",
        "The task asks for a change and the model called `finish` as done, but no file was "
        f"changed.{quote} Nothing was done: try a stronger model or a more specific task; the "
        f"exchange is in `repoctx agent replay {run_id}`.",
    )


def _quote(label: str, text: str) -> str:
    """`` Its summary: "…"`` — the model's words on one line, clipped; '' when it said nothing."""
    said = clip(text, QUOTE_CHARS)
    return f' {label}: "{said}"' if said else ""


def plan_only_ending(
    steps: int, last_call: str, *, can_write: bool, changed: int, run_id: str
) -> Ending:
    """The end of a run whose model only updated its plan (or memory) for ``steps`` steps in a
    row after being told: never a success. Nothing changed → ``no_progress``; files changed
    but unconfirmed → ``stopped``; both with the reason ``plan_only`` and its last call quoted."""
    quote = _quote("Its last call", last_call)
    if changed:
        return Ending(
            "stopped",
            "plan_only",
            f"The model changed {changed} file(s), then only updated its plan for {steps} "
            f"steps in a row after being told, without calling `finish`.{quote} Review the "
            f"change with `git diff`, continue with `repoctx agent run --resume {run_id}`, or "
            f"undo it with `repoctx agent undo {run_id}`.",
        )
    done = "nothing was changed" if can_write else "nothing was answered"
    return Ending(
        "no_progress",
        "plan_only",
        f"The model only updated its plan for {steps} steps in a row after being told, and "
        f"{done}.{quote} Nothing was done: try a stronger model or a more specific task; the "
        f"exchange is in `repoctx agent replay {run_id}`.",
    )
