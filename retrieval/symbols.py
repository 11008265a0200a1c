"""Symbol queries over the graph: definitions, references, callers and callees."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from indexer import RefRecord, SymbolRecord

from .errors import SymbolNotFoundError

if TYPE_CHECKING:
    from indexer import Index


def mark_stale(index: Index, records: list) -> list:
    """The same records, with ``stale`` set on those whose file changed since indexing (looked
    at under the root the index was built from)."""
    stale = index.stale_paths((r.path for r in records), index.graph.index_root())
    return [replace(r, stale=True) if r.path in stale else r for r in records]


def find_symbols(
    index: Index, name: str, kind: str | None = None, limit: int = 50
) -> list[SymbolRecord]:
    """Definitions matching ``name``: an exact qualified name, an exact name, a qualified-name
    suffix (``Class.method``), then a prefix of the name or qualified name (fuzzy prefix)."""
    hits = index.graph.find_definitions(name.strip().replace("::", "."), kind, limit)
    return mark_stale(index, hits) if hits else []


def symbol_by_id(index: Index, sym_id: int) -> SymbolRecord | None:
    return index.graph.definition_record(sym_id)


def _targets(index: Index, name: str, kind: str | None = None) -> list[SymbolRecord]:
    hits = find_symbols(index, name, kind)
    if not hits:
        raise SymbolNotFoundError(
            f"No symbol matches {name!r} — try a shorter prefix, `repoctx symbol {name[:3]}`, "
            "or `repoctx search` for words."
        )
    # Prefer the exact-name tier only: a prefix match on a common word would fan out widely.
    return hits


def references_to(
    index: Index, name: str, *, kinds: tuple[str, ...] | None = None, limit: int = 500
) -> tuple[list[SymbolRecord], list[RefRecord]]:
    """References to the definitions ``name`` matches: resolved edges first (highest
    confidence), then ambiguous references that list one of them as a candidate."""
    targets = _targets(index, name)
    rows = index.graph.references_to([t.id for t in targets], kinds=kinds, limit=limit)
    refs = [
        RefRecord(
            r.path, r.line, r.col, r.name, r.kind, r.enclosing, r.target_id, r.resolution,
            r.confidence,
        )
        for r in rows[:limit]
    ]
    return targets, mark_stale(index, refs)


@dataclass(frozen=True, slots=True)
class CallEdge:
    """One caller→callee edge: the symbol at the other end and where the call is."""

    symbol: SymbolRecord
    path: str
    line: int
    confidence: float
    resolution: str


def callers(
    index: Index, name: str, limit: int = 200
) -> tuple[list[SymbolRecord], list[CallEdge]]:
    """Definitions that call what ``name`` matches."""
    targets = _targets(index, name)
    refs = index.graph.references_to([t.id for t in targets], kinds=("call",), limit=limit)
    refs.sort(key=lambda r: -r.confidence)  # resolved and ambiguous together, by confidence
    rows = [(r.enclosing_id, r.path, r.line, r.confidence, r.resolution) for r in refs[:limit]]
    return targets, _edges(index, rows)


def callees(
    index: Index, name: str, limit: int = 200
) -> tuple[list[SymbolRecord], list[CallEdge]]:
    """What the definitions ``name`` matches call (resolved targets only)."""
    targets = _targets(index, name)
    rows = index.graph.calls_from([t.id for t in targets], limit)
    return targets, _edges(index, rows)


def _edges(index: Index, rows: list[tuple]) -> list[CallEdge]:
    out = []
    cache: dict[int, SymbolRecord | None] = {}
    for sym_id, path, line, conf, how in rows:
        if sym_id is None:
            continue
        if sym_id not in cache:
            cache[sym_id] = symbol_by_id(index, sym_id)
        sym = cache[sym_id]
        if sym is not None:
            out.append(CallEdge(sym, path, line, conf, how))
    return out
