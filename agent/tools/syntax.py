"""The syntax gate: an edit may not introduce a syntax error.

Python is judged by the interpreter's own compiler, ``compile(source, path, "exec",
dont_inherit=True)``: every SyntaxError, IndentationError and TabError, and the compiler's own
errors (a duplicate argument, ``'return' outside function``, ``await`` outside an async
function, ``nonlocal`` without a binding …), at the line and column Python reports (an unclosed
bracket is reported where it was opened). The text is compiled, never run.

Other languages (and Python files that did not compile before the edit either) are judged by
tree-sitter: an ERROR or MISSING node of the new text counts as introduced unless an error of
the old text starts at the same place once the replaced regions are accounted for, and an edit
that lowers the number of errors is accepted even if recovery moved the remaining ones. So
errors a file already had do not block an edit; a compile error inside the edited lines does.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from indexer import is_text_format, language_for_content, ts_parser

#: Errors reported per file; the first one is usually the cause of the rest.
MAX_REPORTED = 5


@dataclass(frozen=True)
class SyntaxIssue:
    line: int  # 1-based
    column: int  # 1-based, in characters of the line
    message: str
    start_byte: int
    #: How the issue was judged, when that is worth saying (the tree-sitter fallback).
    note: str = ""


@dataclass(frozen=True)
class Replacement:
    """``old[start:end]`` became ``length`` bytes of the new text."""

    start: int
    end: int
    length: int


def syntax_issues(source: bytes, language: str) -> list[SyntaxIssue]:
    """ERROR and MISSING nodes of ``source``, outermost first, in source order."""
    tree = ts_parser(language).parse(source)
    issues: list[SyntaxIssue] = []
    if not tree.root_node.has_error:
        return issues
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.is_missing:
            issues.append(_issue(source, node, f"missing `{node.type}`"))
            continue
        if node.type == "ERROR":
            text = source[node.start_byte : node.end_byte].decode("utf-8", "replace")
            first = text.strip().splitlines()[0] if text.strip() else text
            near = first if len(first) <= 40 else first[:37] + "..."
            issues.append(_issue(source, node, f"unexpected `{near}`" if near else "syntax error"))
            # Nested ERROR nodes only repeat the outer one.
            continue
        stack.extend(c for c in reversed(node.children) if c.has_error or c.is_missing)
    issues.sort(key=lambda i: i.start_byte)
    return issues


def _issue(source: bytes, node, message: str) -> SyntaxIssue:
    row, col_bytes = node.start_point
    line_start = node.start_byte - col_bytes
    column = len(source[line_start : node.start_byte].decode("utf-8", "replace")) + 1
    return SyntaxIssue(row + 1, column, message, node.start_byte)


@lru_cache(maxsize=8)
def compile_error(path: str, source: bytes) -> SyntaxIssue | None:
    """The first error Python's compiler finds in ``source`` (compiled, not run), or None.

    The bytes are compiled as the interpreter would import them (BOM and coding cookie
    honoured); its column (bytes into the line) becomes characters."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning / DeprecationWarning: not errors
            compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as exc:  # IndentationError and TabError included
        name = type(exc).__name__
        if exc.lineno is None:  # NUL bytes (no position given): point at the first one
            at = max(source.find(b"\x00"), 0)
            line_start = source.rfind(b"\n", 0, at) + 1
            line = source.count(b"\n", 0, at) + 1
            return _at_byte(source, line, at - line_start, f"{name}: {exc.msg}")
        return _at_byte(source, exc.lineno, max((exc.offset or 1) - 1, 0), f"{name}: {exc.msg}")
    except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes (3.11), deep nesting
        return SyntaxIssue(1, 1, f"Python cannot compile this file: {exc}", 0)
    return None


def _at_byte(source: bytes, line: int, col_bytes: int, message: str) -> SyntaxIssue:
    starts = [0]
    for _ in range(line - 1):
        nl = source.find(b"\n", starts[-1])
        if nl < 0:
            break
        starts.append(nl + 1)
    line_start = starts[-1]
    line_end = source.find(b"\n", line_start)
    line_end = len(source) if line_end < 0 else line_end
    at = min(line_start + col_bytes, line_end)
    column = len(source[line_start:at].decode("utf-8", "replace")) + 1
    return SyntaxIssue(len(starts), column, message, at)


def _map_old(offset: int, replacements: Sequence[Replacement]) -> int | None:
    """Where byte ``offset`` of the old text is in the new text; None if it was replaced."""
    shift = 0
    for r in replacements:
        if offset < r.start:
            break
        if offset < r.end:
            return None
        shift += r.length - (r.end - r.start)
    return offset + shift


def _edited_lines(
    text: bytes, replacements: Sequence[Replacement], side: str
) -> list[tuple[int, int]]:
    """Byte ranges of ``text`` (the ``side`` "old" or "new" of the edit) covering the whole
    lines that hold replaced text."""
    out, shift = [], 0
    for r in replacements:
        if side == "old":
            start, end = r.start, r.end
        else:
            start = r.start + shift
            end = start + r.length
            shift += r.length - (r.end - r.start)
        line_start = text.rfind(b"\n", 0, start) + 1
        line_end = text.find(b"\n", end)
        out.append((line_start, len(text) if line_end < 0 else line_end))
    return out


def _within(issue: SyntaxIssue, ranges: list[tuple[int, int]]) -> bool:
    return any(s <= issue.start_byte <= e for s, e in ranges)


def introduced_issues(
    path: str,
    old: bytes | None,
    new: bytes,
    replacements: Sequence[Replacement] | None = None,
) -> list[SyntaxIssue]:
    """Syntax errors ``new`` has that ``old`` did not; [] for languages without a grammar.

    ``replacements`` (sorted, non-overlapping) say which regions of ``old`` were rewritten;
    without them the whole file counts as rewritten.
    """
    language = language_for_content(path, new)  # a suffix-less script by its `#!` line
    if language is None or is_text_format(language):  # docs and configs: no grammar to check
        return []
    if replacements is None:
        replacements = [Replacement(0, len(old or b""), len(new))]
    note = ""
    if language == "python":
        error = compile_error(path, new)
        if error is None:
            return []
        before = compile_error(path, old) if old is not None else None
        if old is None or before is None:
            return [error]
        same = error.message == before.message and _within(
            before, _edited_lines(old, replacements, "old")
        )
        if not same and _within(error, _edited_lines(new, replacements, "new")):
            return [error]  # a compile error in the edited lines, not the one there before
        note = (
            f"{path} did not compile before this edit either ({before.line}:{before.column}: "
            f"{before.message}), so the edit was judged by tree-sitter's errors"
        )
    issues = _tree_sitter_introduced(language, old, new, replacements)
    return [SyntaxIssue(i.line, i.column, i.message, i.start_byte, note) for i in issues]


def _tree_sitter_introduced(
    language: str, old: bytes | None, new: bytes, replacements: Sequence[Replacement]
) -> list[SyntaxIssue]:
    after = syntax_issues(new, language)
    if not after:
        return []
    before = syntax_issues(old, language) if old else []
    kept = {_map_old(i.start_byte, replacements) for i in before}
    fresh = [i for i in after if i.start_byte not in kept]
    if not fresh or len(after) < len(before):
        return []
    return fresh


def still_broken(path: str, new: bytes) -> str:
    """For a Python file the gate let through although it does not compile (it did not
    before the edit either): one line saying so; "" otherwise."""
    if language_for_content(path, new) != "python":
        return ""
    error = compile_error(path, new)
    if error is None:
        return ""
    return (
        f"Note: {path} still does not compile ({error.line}:{error.column}: {error.message}); "
        "it did not before this edit either."
    )


def describe_issues(path: str, source: bytes, issues: Sequence[SyntaxIssue]) -> str:
    """Human-readable report: ``path:line:col: message`` with the line and a caret."""
    lines = source.decode("utf-8", "replace").splitlines()
    out: list[str] = []
    for issue in issues[:MAX_REPORTED]:
        out.append(f"{path}:{issue.line}:{issue.column}: {issue.message}")
        if 0 < issue.line <= len(lines):
            text = lines[issue.line - 1]
            out.append(f"    {text}")
            # The caret keeps the line's own tabs, so it lines up wherever tabs stop.
            lead = "".join(c if c == "\t" else " " for c in text[: issue.column - 1])
            out.append(f"    {lead}^")
    if len(issues) > MAX_REPORTED:
        out.append(f"... and {len(issues) - MAX_REPORTED} more")
    notes = dict.fromkeys(i.note for i in issues if i.note)
    out += [f"({n})" for n in notes]
    return "\n".join(out)
