"""Ranking and scoring for the localization benchmark.

A *unit* (tasks README) is a top-level function, a class, or a method (`Outer.Inner.method`);
functions nested in functions belong to the outermost one. Units come from the index's
symbols table: the module-qualified qualname minus the file's module prefix.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from indexer import Index

FILE_KS = (1, 5, 10)
FUNC_KS = (5, 10)


@dataclass(frozen=True, slots=True)
class Unit:
    name: str  # "path::Qual.name"
    start: int
    end: int
    own: frozenset[int] | None  # for classes: lines not inside a nested unit; None = whole span


def file_units(index: Index, path: str) -> list[Unit]:
    """The units of one indexed file, in line order (`retrieval.units` defines them)."""
    from retrieval.units import file_units as units_of

    return [Unit(f"{path}::{u.local}", u.start, u.end, u.own) for u in units_of(index, path)]


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
