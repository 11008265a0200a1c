"""The syntax gate: an edit may not introduce tree-sitter ERROR or MISSING nodes.

Errors the file already had are allowed to stay (the gate judges the edit, not the file): an
error of the new text counts as introduced unless an error of the old text starts at the same
place once the replaced regions are accounted for. An edit that lowers the number of errors is
accepted even if recovery moved the remaining ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from indexer.languages import language_for_path, ts_parser

#: Errors reported per file; the first one is usually the cause of the rest.
MAX_REPORTED = 5


@dataclass(frozen=True)
class SyntaxIssue:
    line: int  # 1-based
    column: int  # 1-based, in characters of the line
    message: str
    start_byte: int


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
    language = language_for_path(path)
    if language is None:
        return []
    after = syntax_issues(new, language)
    if not after:
        return []
    before = syntax_issues(old, language) if old else []
    if replacements is None:
        replacements = [Replacement(0, len(old or b""), len(new))]
    kept = {_map_old(i.start_byte, replacements) for i in before}
    fresh = [i for i in after if i.start_byte not in kept]
    if not fresh or len(after) < len(before):
        return []
    return fresh


def describe_issues(path: str, source: bytes, issues: Sequence[SyntaxIssue]) -> str:
    """Human-readable report: ``path:line:col: message`` with the line and a caret."""
    lines = source.decode("utf-8", "replace").splitlines()
    out: list[str] = []
    for issue in issues[:MAX_REPORTED]:
        out.append(f"{path}:{issue.line}:{issue.column}: {issue.message}")
        if 0 < issue.line <= len(lines):
            text = lines[issue.line - 1]
            out.append(f"    {text}")
            out.append("    " + " " * (issue.column - 1) + "^")
    if len(issues) > MAX_REPORTED:
        out.append(f"... and {len(issues) - MAX_REPORTED} more")
    return "\n".join(out)
