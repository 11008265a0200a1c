"""What changed since the run started: line ranges per file (from the checkpoints, else from git),
and the innermost definitions those ranges touch."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from indexer import Index, RepoctxError

from ..checkpoints import CheckpointStore
from ..runner import run_command
from .command_tools import sandbox_policy
from .core import ToolContext

Ranges = dict[str, list[tuple[int, int]]]
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")
_WHOLE_FILE = 10**9


@dataclass(frozen=True)
class ChangedSymbol:
    id: int
    qualname: str
    kind: str
    path: str
    start_line: int
    end_line: int
    parent_id: int | None


def run_originals(store: CheckpointStore, run_id: str) -> dict[str, bytes | None]:
    """Each file's bytes before its first change in ``run_id`` (None: it did not exist), read
    from the checkpoint manifests (layout in agent/checkpoints.py); rolled-back steps skipped."""
    originals: dict[str, bytes | None] = {}
    for step in store.steps(run_id):
        entries, rolled_back = store.load(run_id, step)
        if rolled_back:
            continue
        for entry in entries:
            path = entry["path"]
            if path in originals:
                continue
            if entry["kind"] == "file":
                originals[path] = store.blob(run_id, step, entry["blob"])
            elif entry["kind"] == "absent":
                originals[path] = None
    return originals


def diff_ranges(old: bytes | None, new: bytes) -> list[tuple[int, int]]:
    """Line ranges of ``new`` (1-based, inclusive) that differ from ``old``; a deletion is the
    line before it."""
    new_lines = new.decode("utf-8", "replace").splitlines()
    if old is None:
        return [(1, max(1, len(new_lines)))]
    old_lines = old.decode("utf-8", "replace").splitlines()
    ranges = []
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, _i1, _i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        ranges.append((j1 + 1, j2) if j2 > j1 else (max(1, j1), max(1, j1)))
    return ranges


def changed_ranges(ctx: ToolContext) -> tuple[Ranges, str]:
    """Changed line ranges per workspace-relative path, and where they came from."""
    store = ctx.checkpoints
    if store is not None and store.steps(ctx.run_id):
        ranges: Ranges = {}
        for abs_path, original in run_originals(store, ctx.run_id).items():
            try:
                rel = ctx.workspace.relative(abs_path)
                current = ctx.workspace.read_bytes(rel)  # no link followed, no FIFO waited on
            except (OSError, RepoctxError):
                continue  # deleted since, or no longer inside the workspace
            if current != original:
                ranges[rel] = diff_ranges(original, current)
        return ranges, "checkpoints"
    return _git_ranges(ctx), "git"


def _git(ctx: ToolContext, *args: str) -> str | None:
    try:
        res = run_command(
            ["git", *args],
            ctx.workspace.root,
            timeout_s=30,
            max_output_bytes=4_000_000,
            sandbox=sandbox_policy(ctx, hide_secrets=False),  # only line numbers are used
        )
    except RepoctxError:
        return None
    return res.stdout if res.exit_code == 0 and not res.truncated else None


def _git_ranges(ctx: ToolContext) -> Ranges:
    ranges: Ranges = {}
    diff = _git(ctx, "diff", "-U0", "--no-ext-diff", "--no-color", "HEAD")
    current: str | None = None
    for line in (diff or "").splitlines():
        if line.startswith("+++ "):
            target = line[4:]
            current = target[2:] if target.startswith("b/") else None
        elif current and (m := _HUNK.match(line)):
            start, count = int(m.group(1)), int(m.group(2) or 1)
            ranges.setdefault(current, []).append(
                (start, start + count - 1) if count else (max(1, start), max(1, start))
            )
    untracked = _git(ctx, "ls-files", "--others", "--exclude-standard", "-z")
    for path in (untracked or "").split("\0"):
        if path:
            ranges[path] = [(1, _WHOLE_FILE)]
    return ranges


def changed_symbols(index: Index, ranges: Ranges) -> list[ChangedSymbol]:
    """The innermost definitions overlapping each range; a range inside no definition means
    the module itself changed."""
    out: dict[int, ChangedSymbol] = {}
    for path, spans in ranges.items():
        rows = [
            ChangedSymbol(*row)
            for row in index.graph.definitions_in_file(path)
        ]
        module = next((r for r in rows if r.kind == "module"), None)
        defs = [r for r in rows if r.kind != "module"]
        for lo, hi in spans:
            hit = [d for d in defs if d.start_line <= hi and d.end_line >= lo]
            inner = [
                d
                for d in hit
                if not any(
                    o is not d
                    and d.start_line <= o.start_line
                    and o.end_line <= d.end_line
                    and (o.start_line, o.end_line) != (d.start_line, d.end_line)
                    for o in hit
                )
            ]
            for d in inner or ([module] if module else []):
                out[d.id] = d
    return list(out.values())
