"""Ranking and scoring for the localization benchmark.

A *unit* (tasks README) is a top-level function, a class, or a method (`Outer.Inner.method`);
functions nested in functions belong to the outermost one. Units come from the index's
symbols table: the module-qualified qualname minus the file's module prefix.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from indexer.models import CLASS_KINDS, FUNCTION_KINDS

FILE_KS = (1, 5, 10)
FUNC_KS = (5, 10)


@dataclass(frozen=True, slots=True)
class Unit:
    name: str  # "path::Qual.name"
    start: int
    end: int
    own: frozenset[int] | None  # for classes: lines not inside a nested unit; None = whole span


def file_units(conn: sqlite3.Connection, path: str) -> list[Unit]:
    """The units of one indexed file, in line order."""
    row = conn.execute(
        "SELECT id, coalesce(module, '') FROM files WHERE path = ?", [path]
    ).fetchone()
    if row is None:
        return []
    fid, module = row
    syms = conn.execute(
        "SELECT id, qualname, kind, start_line, end_line, parent_id FROM symbols "
        "WHERE file_id = ? AND kind != 'module' ORDER BY start_line",
        [fid],
    ).fetchall()
    by_id = {s[0]: s for s in syms}
    prefix = module + "." if module else ""

    def local(qual: str) -> str:
        return qual[len(prefix) :] if prefix and qual.startswith(prefix) else qual

    units: dict[int, tuple[str, int, int, str]] = {}
    for sid, _qual, kind, _start, _end, parent in syms:
        if kind not in FUNCTION_KINDS and kind not in CLASS_KINDS:
            continue
        chain = [by_id[sid]]
        p = parent
        while p is not None and p in by_id:
            chain.append(by_id[p])
            p = by_id[p][5]
        chain.reverse()  # outermost first
        outer_fn = next((s for s in chain if s[2] in FUNCTION_KINDS), None)
        owner = outer_fn if outer_fn is not None else chain[-1]
        units.setdefault(owner[0], (local(owner[1]), owner[3], owner[4], owner[2]))
    spans = sorted(units.values(), key=lambda u: (u[1], -u[2]))
    out = []
    for name, start, end, kind in spans:
        own = None
        if kind in CLASS_KINDS:
            lines = set(range(start, end + 1))
            for _, s2, e2, _k in spans:
                if (s2, e2) != (start, end) and start <= s2 and e2 <= end:
                    lines.difference_update(range(s2, e2 + 1))
            own = frozenset(lines)
        out.append(Unit(f"{path}::{name}", start, end, own))
    return out


def chunk_units(units: Sequence[Unit], start: int, end: int) -> list[str]:
    """Units a chunk [start, end] overlaps: a class only through its own lines (its header,
    attributes), so a hit inside a method names the method, not also its class."""
    out = []
    for u in units:
        if u.end < start or u.start > end:
            continue
        if u.own is not None and not any(start <= ln <= end for ln in u.own):
            continue
        out.append(u.name)
    return out


def first_unique(items: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for it in items:
        seen.setdefault(it, None)
    return list(seen)


def any_at(ranked: Sequence[str], gold: Iterable[str], k: int) -> bool:
    g = set(gold)
    return any(r in g for r in ranked[:k])


def task_scores(files: Sequence[str], units: Sequence[str] | None, task: dict) -> dict:
    out = {f"file@{k}": any_at(files, task["gold_files"], k) for k in FILE_KS}
    if units is not None and task["gold_functions"]:
        out.update({f"func@{k}": any_at(units, task["gold_functions"], k) for k in FUNC_KS})
    return out


def aggregate(rows: Sequence[dict], keys: Sequence[str]) -> dict:
    """Percent of tasks with each metric true, over the tasks where it applies."""
    out: dict = {"tasks": len(rows)}
    for key in keys:
        vals = [r[key] for r in rows if r.get(key) is not None]
        out[key] = round(100.0 * sum(vals) / len(vals), 1) if vals else None
        if key.startswith("func@") or key.startswith("ctx@"):
            out[f"{key}_n"] = len(vals)
    return out


def by_source(rows: Sequence[dict], keys: Sequence[str]) -> dict:
    sources = sorted({r["source"] for r in rows})
    out = {s: aggregate([r for r in rows if r["source"] == s], keys) for s in sources}
    out["overall"] = aggregate(rows, keys)
    return out
