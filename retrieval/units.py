"""Units: the definitions a change is located in — a top-level function, a class, or a method
(``Outer.Inner.method``); a function nested in a function belongs to the outermost one. A class
owns only its own lines (header, attributes), not its methods'.

Ranking definitions means ranking units: a hit inside a nested helper points at the function
that holds it, which is what a person (or the localization benchmark) would name.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from indexer.models import CLASS_KINDS, FUNCTION_KINDS


@dataclass(frozen=True, slots=True)
class Unit:
    qualname: str  # module-qualified
    local: str  # without the module ("Class.method")
    path: str
    kind: str
    start: int
    end: int
    #: For classes: the lines not inside a nested unit; None means the whole span.
    own: frozenset[int] | None

    def overlaps(self, start: int, end: int) -> bool:
        if self.end < start or self.start > end:
            return False
        return self.own is None or any(start <= ln <= end for ln in self.own)


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

    units: dict[int, tuple[str, str, int, int, str]] = {}
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
        units.setdefault(owner[0], (owner[1], local(owner[1]), owner[3], owner[4], owner[2]))
    spans = sorted(units.values(), key=lambda u: (u[2], -u[3]))
    out = []
    for i, (qual, name, start, end, kind) in enumerate(spans):
        own = None
        if kind in CLASS_KINDS:
            lines = set(range(start, end + 1))
            # sorted by start: the units nested in this one follow it directly
            for _, _, s2, e2, _k in spans[i + 1 :]:
                if s2 > end:
                    break
                if (s2, e2) != (start, end) and e2 <= end:
                    lines.difference_update(range(s2, e2 + 1))
            own = frozenset(lines)
        out.append(Unit(qual, name, path, kind, start, end, own))
    return out


def units_in(units: list[Unit], start: int, end: int) -> list[Unit]:
    """Units lines ``start``-``end`` overlap (a class only through its own lines)."""
    return [u for u in units if u.overlaps(start, end)]


class UnitCache:
    """file_units per path, loaded once per search."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self._units: dict[str, list[Unit]] = {}

    def of(self, path: str) -> list[Unit]:
        got = self._units.get(path)
        if got is None:
            got = self._units[path] = file_units(self.conn, path)
        return got

    def find(self, path: str, qualname: str, start: int = 0, end: int = 0) -> Unit | None:
        """The unit a definition belongs to (itself, or the outermost function around it)."""
        units = self.of(path)
        for u in units:
            if u.qualname == qualname:
                return u
        if start:
            around = [u for u in units if u.start <= start and end <= u.end and u.own is None]
            if around:
                return min(around, key=lambda u: u.end - u.start)
            inside = [u for u in units if u.overlaps(start, max(start, end))]
            if inside:
                return inside[0]
        return None
