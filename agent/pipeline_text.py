"""The pipeline's text and its pure helpers (agent/pipeline.py): the fixed messages — the
system prompt, one example exchange, the task with the localized code — the feedback appended
after an attempt (test failures in their decisive lines, corrections), the checks of a reply
(a test file edited, a named parameter not taken or not used, blocks already applied), the
outcome after the last attempt, and a run's state read back from its trace for `--resume`."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from indexer import Index

from .edit_blocks import EditBlock, find_search
from .localize import Localization
from .models.base import Message, ModelClient, Usage
from .outcome import asks_for_change
from .tools.testing import Failure, is_test_file
from .trace import clip, message_from_dict

#: Characters of one test failure fed back.
FAILURE_CHARS = 700

SYSTEM = (
    "You change code in a repository. You are given a task and the code it concerns, each "
    "file under its path. Reply with one sentence saying what to change, then the change as "
    "SEARCH/REPLACE blocks: the file's path on its own line, a line `<<<<<<< SEARCH`, the "
    "lines to replace copied exactly from the code shown, a line `=======`, the new lines, "
    "and a line `>>>>>>> REPLACE`. Copy the SEARCH lines exactly, with their indentation: the "
    "lines that change and one or two around them. Change several places with several blocks. "
    "Keep the tests as they are unless the task asks to change them. If the task cannot be "
    "done with this code, reply CANNOT and one line saying why."
)
#: One exchange before the task, marked as an example: small models copy an example written
#: into the system prompt as their answer (tried with Qwen2.5-Coder-1.5B), but follow the form
#: of an earlier turn.
EXAMPLE_TASK = (
    "(An example exchange, to show the form of the reply.)\n\n# Task\ngreet() should end the "
    "greeting with an exclamation mark.\n\n# Code\n\ngreet/hello.py\n```python\n"
    'def greet(name):\n    return "Hello " + name\n```'
)
EXAMPLE_REPLY = (
    'greet() must add "!" after the name.\n\ngreet/hello.py\n<<<<<<< SEARCH\n'
    '    return "Hello " + name\n=======\n    return "Hello " + name + "!"\n'
    ">>>>>>> REPLACE"
)
CLOSING = "Reply with the SEARCH/REPLACE blocks for the change."
#: For a task that asks a question: no edit form and no example exchange to copy (shown the
#: edit example, the 1.5B answered "the dashboard feels slow" with the example's own change).
ANSWER_SYSTEM = (
    "You answer questions about code in a repository. You are given a question and the code "
    "it concerns, each file under its path. Answer in a few sentences, naming the files and "
    "functions that matter; do not rewrite the code. If the code shown does not answer the "
    "question, say so and name what you would look at next."
)

ANSWER_CLOSING = "Answer the question in a few sentences, naming the files and functions."
NO_BLOCKS = (
    "Your reply had no SEARCH/REPLACE block, so nothing was changed. Reply with the blocks for "
    "the change: the file's path, `<<<<<<< SEARCH`, the exact lines, `=======`, the new "
    "lines, `>>>>>>> REPLACE`."
)
_DECLINED = re.compile(r"^\s*CANNOT\b|\b(cannot|can't|can not|unable to|not possible)\b", re.I)
#: A task that asks for the tests themselves to change.
TEST_TASK = re.compile(
    r"\b(add|write|update|change|edit|fix|extend|rename)\s+(?:an?\s+|the\s+)?(?:\w+\s+)?tests?\b",
    re.I,
)
_LANG = {
    ".py": "python",
    ".js": "javascript",
    ".ts": "typescript",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".rb": "ruby",
    ".c": "c",
    ".h": "c",
    ".cpp": "cpp",
    ".sh": "bash",
}


#: A parameter the task adds by name: "a parameter `currency`", "the argument `sep`".
_NEW_PARAM = re.compile(
    r"\b(?:parameter|argument|keyword(?: argument)?|option)s?\s+`([A-Za-z_]\w*)`", re.I
)


def new_parameters(task: str) -> list[str]:
    """The parameters a task says to add, by name."""
    return list(dict.fromkeys(_NEW_PARAM.findall(task)))


def signature_of(text: str, name: str) -> tuple[str, str] | None:
    """The parameter list of ``def name(...)`` in ``text`` and the function's body (the lines
    indented under it), or None when there is no such definition."""
    m = re.search(rf"^([ \t]*)(?:async[ \t]+)?def[ \t]+{re.escape(name)}[ \t]*\(", text, re.M)
    if m is None:
        return None
    depth, i = 1, m.end()
    while i < len(text) and depth:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    body = []
    for line in text[i:].split("\n")[1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= len(m.group(1)):
            break
        body.append(line)
    return text[m.end() : i - 1], "\n".join(body)


def missing_parameters(
    task: str, interface: list[tuple[str, str]], read: Callable[[str], str | None]
) -> list[str]:
    """For a task that adds a named parameter to the functions it names (``interface``: path,
    name): a correction for each whose `def` line does not take it yet, or whose body never
    uses it (an added parameter nobody reads changes nothing) — checked before the tests,
    which may never pass it."""
    out = []
    for param in new_parameters(task):
        word = re.compile(rf"\b{re.escape(param)}\b")
        for path, name in interface:
            found = signature_of(read(path) or "", name)
            if found is None:
                continue
            if not word.search(found[0]):
                out.append(
                    f"`{name}` in {path} does not take `{param}` yet: its `def` line must "
                    "change too (put the `def` line in SEARCH)."
                )
            elif not _uses(read(path) or "", name, param, word.search(found[1]) is not None):
                out.append(
                    f"`{name}` in {path} takes `{param}` but never uses it: its body must use "
                    "it as the task says (or pass it on)."
                )
    return out


def _uses(text: str, name: str, param: str, fallback: bool) -> bool:
    """Whether the body of Python function ``name`` reads ``param`` — as code, not in its
    docstring (a model wrote the parameter into the docstring only, and the tests passed);
    ``fallback`` (the word anywhere in the body) when the file does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return fallback
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return any(
                isinstance(n, ast.Name) and n.id == param
                for stmt in node.body
                for n in ast.walk(stmt)
            )
    return fallback


#: An example the task gives: `name(args) returns "value"` (or `==`, `->`, "gives").
_EXAMPLE = re.compile(
    r"`?\b([A-Za-z_]\w*)(\((?:[^()\n]|\([^()\n]*\))*\))`?\s+(?:returns|gives|should return|"
    r"==|->|is)\s+`?(\"[^\"\n]*\"|'[^'\n]*'|-?\d+(?:\.\d+)?|True|False|None)`?"
)


def example_checks(task: str, module_of: Callable[[str], str | None]) -> list[str]:
    """One Python script per example the task gives, asserting it (``module_of(name)``: the
    module defining ``name``, None when unknown)."""
    out = []
    for name, args, expected in _EXAMPLE.findall(task)[:5]:
        module = module_of(name)
        if module is None:
            continue
        call = f"{name}{args}"
        out.append(
            f"from {module} import {name}\ngot = {call}\nassert got == {expected}, "
            f"'The task says ' + {call!r} + ' returns ' + {expected!r} + ', but it returns ' "
            "+ repr(got)"
        )
    return out


def module_of(index: Index, name: str) -> str | None:
    """The module defining the one function ``name`` outside the tests (None: none or many)."""
    rows = [
        r
        for r in index.graph.find_definitions(name, limit=5)
        if r.name == name and not is_test_file(r.path)
    ]
    if len(rows) != 1 or not rows[0].path.endswith(".py"):
        return None
    return rows[0].path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")


def example_failure(output: str) -> str:
    """The line of a failed example check that says what the task expected."""
    said = [ln for ln in output.splitlines() if "The task says" in ln]
    return said[-1].split("AssertionError: ", 1)[-1].strip() if said else clip(output, 300)


def guard_tests(
    task: str, tests_named: bool, blocks: list[EditBlock], corrections: list[str]
) -> list[EditBlock]:
    """A task that names failing tests states the behaviour wanted through them: blocks
    changing a test file are refused (a correction each) unless the task asks to change
    tests."""
    if not tests_named or TEST_TASK.search(task):
        return blocks
    kept = []
    for b in blocks:
        if b.path and is_test_file(b.path):
            corrections.append(
                f"{b.path} is a test that states the expected behaviour: change the code it "
                "tests, not the test."
            )
        else:
            kept.append(b)
    return kept


class Sampling:
    """The run's model, asked at the temperature the attempt sets."""

    def __init__(self, model: ModelClient) -> None:
        self.model, self.name, self.temperature = model, model.name, None

    def complete(self, messages, tools=(), *, max_tokens=None, temperature=None):  # noqa: ANN001
        t = self.temperature if temperature is None else temperature
        return self.model.complete(messages, tools, max_tokens=max_tokens, temperature=t)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


def rebase(
    blocks: list[EditBlock],
    read: Callable[[str], str | None],
    original: Callable[[str], bytes | None],
) -> tuple[list[EditBlock], dict[str, str]]:
    """Blocks of a new reply on top of an incomplete change kept from earlier attempts: a block
    whose SEARCH is gone and whose REPLACE is there is already applied (dropped); one whose
    SEARCH is gone but in the file as it was before the run is written against the code the
    earlier edits changed: that file goes back to its original text first (``restore``)."""
    kept, restore = [], {}
    for b in blocks:
        if b.search == b.replace:  # a block that changes nothing (small models write them)
            continue
        now = read(b.path) if b.path else None
        if now is None or not b.search or find_search(now, b.search, b.replace).count:
            kept.append(b)
            continue
        if b.replace.strip() and b.replace in now:
            continue
        before = original(b.path)
        text = before.decode("utf-8", "replace") if before is not None else None
        if text is not None and find_search(text, b.search, b.replace).count == 1:
            restore[b.path] = text
        kept.append(b)
    return kept, restore


def declined(text: str) -> bool:
    """Whether a reply without blocks says the model cannot do the task."""
    return bool(_DECLINED.search(text))


def first_prompt(task: str, loc: Localization, closing: str | None = None) -> str:
    """The task and the localized code: the last of the run's fixed messages (``closing``:
    what it asks for, when not the blocks for the whole change)."""
    # The failing tests' output is not shown: it steered the model in tries with
    # Qwen2.5-Coder-1.5B to echo it or to edit the test; its frames chose the code instead.
    parts = [f"# Task\n{task}", "# Code"]
    for s in loc.spans:
        lang = _LANG.get("." + s.path.rsplit(".", 1)[-1], "") if "." in s.path else ""
        body = s.text if s.text.endswith("\n") else s.text + "\n"
        parts.append(f"{s.path}\n```{lang}\n{body}```")
    if not loc.spans:
        parts.append("(no code found for this task)")
    if loc.left_out:
        parts.append("Also related, not shown: " + ", ".join(loc.left_out[:5]))
    parts.append(closing or (CLOSING if asks_for_change(task) else ANSWER_CLOSING))
    return "\n\n".join(parts)


def failures_text(failures: list[Failure], most: int = 3) -> str:
    """The decisive lines of each failure: its id and place, the assertion message, and the
    frames of the code under test (not the whole traceback)."""
    out = []
    for f in failures[:most]:
        lines = [f"FAILED {f.test_id} at {f.location}"]
        lines += [f"  {ln}" for ln in f.message.splitlines()[:4] if ln.strip()]
        frames = [
            ln
            for ln in (f.trace or "").splitlines()
            if re.match(r"^[^\s:]+\.py:\d+: in ", ln) and not is_test_file(ln.split(":")[0])
        ]
        lines += [f"  {ln}" for ln in frames[-2:]]
        text = "\n".join(lines)
        out.append(text if len(text) <= FAILURE_CHARS else text[: FAILURE_CHARS - 1] + "…")
    if len(failures) > most:
        out.append(f"... and {len(failures) - most} more failing test(s)")
    return "\n".join(out)


def shown_paths(fixed: list[Message]) -> list[str]:
    """The paths of the code shown in the first prompt (the line before each fence)."""
    if len(fixed) < 2:
        return []
    return re.findall(r"^(\S+)\n```", fixed[-1].content, re.M)


#: Said after an answer to a question that came with edit blocks: they were not applied.
UNAPPLIED = (
    "\n\n(The task asks a question, so the SEARCH/REPLACE blocks above were not applied: "
    "nothing was changed. To make the change, ask for it, e.g. `repoctx agent run \"Fix …\"`.)"
)


def fixed_messages(task: str, first: str) -> list[Message]:
    """The messages every request of a run starts with: the system prompt, one example
    exchange (for a change) and the task with its code (``first``)."""
    if not asks_for_change(task):
        return [Message.system(ANSWER_SYSTEM), Message.user(first)]
    return [
        Message.system(SYSTEM),
        Message.user(EXAMPLE_TASK),
        Message.assistant(EXAMPLE_REPLY),
        Message.user(first),
    ]


def after_attempts(
    state: str, detail: str, changed: bool, attempts: int, run_id: str
) -> tuple[str, str, str]:
    """(reason, message, status) of a run whose attempts are spent, by what the last one left
    (``state``: tests_failed | unplaced | no_blocks) and whether files are changed."""
    n, detail = attempts, clip(detail, 200)
    if state == "tests_failed" and changed:
        return (
            "tests_failing",
            f"After {n} attempt(s) the tests that reach the change still fail ({detail}). "
            f"The last attempt's change is in place: review it, continue with `repoctx agent "
            f"run --resume {run_id}`, or undo it with `repoctx agent undo {run_id}`.",
            "stopped",
        )
    if changed:
        return (
            "blocks_unplaced",
            f"After {n} attempt(s) some blocks still could not be applied ({detail}); the "
            f"rest is in place, untested — review it, or undo it with `repoctx agent undo "
            f"{run_id}`.",
            "stopped",
        )
    said = (
        f' Its last reply: "{detail}"'
        if state == "no_blocks"
        else (f" The last problem: {detail}" if detail else "")
    )
    return (
        "no_change",
        f"The task asks for a change, but after {n} attempt(s) no file was changed.{said} "
        "Nothing was done: try a stronger model or a more specific task; the exchange is in "
        f"`repoctx agent replay {run_id}`.",
        "no_progress",
    )


def resumed_state(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Where a pipeline run stands by its trace: the fixed messages (step 1's observation), the
    conversation (each kept attempt's), what localization found, the counts, the usage."""
    st: dict[str, Any] = {
        "task": events[0]["task"], "named_tests": [], "failing_before": [], "interface": [],
        "examples": [],
        "test_failures": 0, "attempts_made": 0, "next_step": 1, "prior_s": 0.0,
        "history": [], "usage": Usage(), "calls": 0, "locations": [], "loc_next": 0,
        "swept": False,
    }  # fmt: skip
    fixed: list[Message] = []
    convo: list[Message] = []
    for e in events:
        if e["type"] == "step":
            messages = [message_from_dict(m) for m in e.get("observation", ())]
            st["test_failures"] += bool(e.get("tests_failed"))
            if e.get("localized"):
                fixed = messages
                st["named_tests"] = list(e.get("named_tests", ()))
                st["failing_before"] = list(e.get("failing_before", ()))
                st["interface"] = [tuple(x) for x in e.get("interface", ())]
                st["examples"] = list(e.get("examples", ()))
                st["locations"] = list(e.get("locations", ()))
            else:
                st["attempts_made"] += 1
                # a sample from the fixed messages is not part of the conversation
                convo += messages if e.get("kept") is not False else []
                if "next_location" in e:
                    st["loc_next"], st["swept"] = e["next_location"], bool(e.get("swept"))
            st["next_step"] = e["step"] + 1
            st["history"].append(e.get("summary", ""))
        elif e["type"] == "model_call":
            u = e.get("usage") or {}
            st["usage"] += Usage(**{k: u[k] for k in asdict(Usage()) if k in u})
            st["calls"] += 1
        elif e["type"] == "end":
            st["prior_s"] = float((e.get("summary") or {}).get("elapsed_s", 0))
    if convo and convo[-1].role == "assistant":
        # Interrupted after the reply: the next request must not hold two replies in a row.
        convo.append(Message.user("Go on: reply with the SEARCH/REPLACE blocks."))
    st["msgs"] = (fixed, convo)
    return st
