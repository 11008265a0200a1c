"""Writes with checks: load a file for rewriting, gate the new text on syntax, checkpoint, write,
and re-index before returning so the next read sees the change."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from indexer import RepoctxError, shown

from ..errors import BinaryFileError, NotAFileError, PathNotFoundError
from .core import ToolContext, ToolResult, error_message, fail
from .session import ReindexReport
from .syntax import Replacement, describe_issues, introduced_issues

#: Lines of unified diff shown after a write.
DIFF_LINES = 60


@dataclass(frozen=True)
class LoadedFile:
    path: str  # workspace-relative, POSIX
    real: Path
    data: bytes
    text: str


@dataclass(frozen=True)
class FileChange:
    path: str
    old: bytes | None  # None: the file does not exist yet
    new: bytes
    #: Regions of ``old`` that were rewritten (for the syntax gate); None: the whole file.
    replacements: tuple[Replacement, ...] | None = None


@dataclass(frozen=True)
class WriteOutcome:
    paths: tuple[str, ...]
    reindex: ReindexReport | None
    #: Why the index could not be refreshed (the files were written regardless).
    reindex_error: str | None

    def note(self) -> str:
        if self.reindex is not None:
            vec = " and vectors" if self.reindex.embedded else ""
            return f"Index{vec} updated in {self.reindex.seconds:.2f} s; searches see the change."
        return (
            f"Warning: the index could not be updated ({self.reindex_error}); searches may show "
            "the old code until `repoctx index build` runs."
        )

    def data(self) -> dict:
        return {
            "paths": list(self.paths),
            "reindexed": self.reindex is not None,
            "index_seconds": round(self.reindex.seconds, 4) if self.reindex else None,
            "reindex_error": self.reindex_error,
        }


def load_for_edit(ctx: ToolContext, path: str) -> LoadedFile:
    """Read a whole text file that the agent may both read and write."""
    real = ctx.workspace.check_readable(path)
    ctx.workspace.check_writable(path)
    rel = ctx.workspace.relative(real)
    limit = ctx.agent.max_edit_bytes
    try:
        # Opened with no link followed and refused unless a regular file (a FIFO never blocks).
        data = ctx.workspace.read_bytes(real, limit)
    except PathNotFoundError as exc:
        raise PathNotFoundError(
            f"{shown(rel)} does not exist — use create_file to make it, or list_dir to find the file."
        ) from exc
    if len(data) > limit:
        raise NotAFileError(
            f"{shown(rel)} is over the {limit}-byte edit limit (`agent.max_edit_bytes`) — edit it "
            "another way."
        )
    if b"\x00" in data:
        raise BinaryFileError(f"{shown(rel)} is binary — only text files can be edited.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BinaryFileError(
            f"{shown(rel)} is not valid UTF-8 (byte {exc.start}) — only UTF-8 text can be edited."
        ) from exc
    return LoadedFile(rel, real, data, text)


def gate(changes: Sequence[FileChange]) -> ToolResult | None:
    """A failure result naming every syntax error the changes would introduce, or None."""
    reports = []
    errors = []
    for ch in changes:
        issues = introduced_issues(ch.path, ch.old, ch.new, ch.replacements)
        if issues:
            reports.append(describe_issues(ch.path, ch.new, issues))
            errors += [
                {"path": ch.path, "line": i.line, "column": i.column, "message": i.message}
                for i in issues
            ]
    if not reports:
        return None
    first = errors[0]
    return fail(
        f"Rejected: the change would introduce a syntax error at {first['path']}:{first['line']}:"
        f"{first['column']} ({first['message']}). Nothing was written; fix the new text and retry.",
        "\n".join(reports),
        syntax_errors=errors,
        written=False,
    )


def commit(ctx: ToolContext, changes: Sequence[FileChange]) -> WriteOutcome:
    """Checkpoint and write every change, then re-index (graph, lexical, vectors if kept)."""
    for ch in changes:
        ctx.write_bytes(ch.path, ch.new)
    try:
        report = ctx.session.reindex(ctx.config)
    except RepoctxError as exc:
        return WriteOutcome(tuple(c.path for c in changes), None, error_message(exc))
    return WriteOutcome(tuple(c.path for c in changes), report, None)


def unified(path: str, old: str, new: str, limit: int = DIFF_LINES) -> str:
    lines = list(
        difflib.unified_diff(
            old.splitlines(), new.splitlines(), f"a/{shown(str(path))}", f"b/{shown(str(path))}",
            n=2, lineterm="",
        )
    )
    if len(lines) > limit:
        lines = lines[:limit] + [f"[... {len(lines) - limit} more diff lines]"]
    return "\n".join(lines)
