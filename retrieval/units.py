"""Units: the definitions a change is located in — a top-level function, a class, or a method
(``Outer.Inner.method``); a function nested in a function belongs to the outermost one. A class
owns only its own lines (header, attributes), not its methods'.

Ranking definitions means ranking units: a hit inside a nested helper points at the function
that holds it, which is what a person (or the localization benchmark) would name.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from indexer import CLASS_KINDS, FUNCTION_KINDS

if TYPE_CHECKING:
    from indexer import Index


@dataclass(frozen=True, slots=True)
class Unit:
    qualname: str  # module-qualified
    local: str  # without the module ("Class.method")
    path: str
    kind: str
    start: int
    end: int
    #: For classes: the spans of the units nested in it (methods, nested classes), merged and
    #: sorted; the class owns the other lines. None: the unit owns its whole span.
    holes: tuple[tuple[int, int], ...] | None

    @property
    def is_class(self) -> bool:
        return self.holes is not None

    @property
    def own(self) -> frozenset[int] | None:
        """The lines a class owns (None: the whole span)."""
        if self.holes is None:
            return None
        lines = set(range(self.start, self.end + 1))
        for a, b in self.holes:
            lines.difference_update(range(a, b + 1))
        return frozenset(lines)

    def overlaps(self, start: int, end: int) -> bool:
        if self.end < start or self.start > end:
            return False
        if self.holes is None:
            return True
        cur, last = max(start, self.start), min(end, self.end)
        for a, b in self.holes:  # is some line of cur..last outside every hole?
            if a > cur:
                return True
            if b >= cur:
                cur = b + 1
                if cur > last:
                    return False
        return cur <= last


def holes_of(start: int, end: int, nested: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """``nested`` spans (sorted by start) merged into disjoint holes within start..end."""
    out: list[list[int]] = []
    for a, b in nested:
        a, b = max(a, start), min(b, end)
        if a > b:
            continue
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out)


#: Units per (path, content hash, module): a file's units change only with its content.
_UNITS: OrderedDict[tuple, list[Unit]] = OrderedDict()
_UNITS_MAX = 4096


def file_units(index: Index, path: str) -> list[Unit]:
    """The units of one indexed file, in line order."""
    row = index.graph.file_identity(path)
    if row is None:
        return []
    fid, module, digest = row
    key = (path, digest, module)
    if digest is not None:
        got = _UNITS.get(key)
        if got is not None:
            _UNITS.move_to_end(key)
            return got
    syms = index.graph.definitions_of_file_id(fid)
    out = _units_of(path, module, syms)
    if digest is not None:
        _UNITS[key] = out
        if len(_UNITS) > _UNITS_MAX:
            _UNITS.popitem(last=False)
    return out


def _units_of(path: str, module: str, syms: list[tuple]) -> list[Unit]:
    by_id = {s[0]: s for s in syms}
    prefix = module + "." if module else ""
    owners: dict[int, tuple] = {}

    def owner(s: tuple) -> tuple:
        """The outermost function around ``s`` (itself included), else ``s``."""
        got = owners.get(s[0])
        if got is None:
            parent = by_id.get(s[5]) if s[5] is not None else None
            above = owner(parent) if parent is not None else None
            got = owners[s[0]] = above if above is not None and above[2] in FUNCTION_KINDS else s
        return got

    units: dict[int, tuple[str, str, int, int, str]] = {}
    for s in syms:
        if s[2] not in FUNCTION_KINDS and s[2] not in CLASS_KINDS:
            continue
        o = owner(s)
        if o[0] not in units:
            qual = o[1]
            local = qual[len(prefix) :] if prefix and qual.startswith(prefix) else qual
            units[o[0]] = (qual, local, o[3], o[4], o[2])
    spans = sorted(units.values(), key=lambda u: (u[2], -u[3]))
    out = []
    for i, (qual, name, start, end, kind) in enumerate(spans):
        holes = None
        if kind in CLASS_KINDS:
            nested = []
            # sorted by start: the units nested in this one follow it directly
            for _, _, s2, e2, _k in spans[i + 1 :]:
                if s2 > end:
                    break
                if (s2, e2) != (start, end) and e2 <= end:
                    nested.append((s2, e2))
            holes = holes_of(start, end, nested)
        out.append(Unit(qual, name, path, kind, start, end, holes))
    return out


class UnitCache:
    """file_units per path, loaded once per search."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self._units: dict[str, list[Unit]] = {}

    def of(self, path: str) -> list[Unit]:
        got = self._units.get(path)
        if got is None:
            got = self._units[path] = file_units(self.index, path)
        return got

    def find(self, path: str, qualname: str, start: int = 0, end: int = 0) -> Unit | None:
        """The unit a definition belongs to (itself, or the outermost function around it)."""
        units = self.of(path)
        for u in units:
            if u.qualname == qualname:
                return u
        if start:
            around = [u for u in units if u.start <= start and end <= u.end and not u.is_class]
            if around:
                return min(around, key=lambda u: u.end - u.start)
            inside = [u for u in units if u.overlaps(start, max(start, end))]
            if inside:
                return inside[0]
        return None
