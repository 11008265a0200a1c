"""Symbol queries over the graph: definitions, references, callers and callees."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from indexer.graph.reads import GraphReads
from indexer.models import RefRecord, SymbolRecord

from .errors import SymbolNotFoundError
from .freshness import stale_paths

if TYPE_CHECKING:
    import sqlite3


def mark_stale(conn: sqlite3.Connection, records: list) -> list:
    """The same records, with ``stale`` set on those whose file changed since indexing."""
    stale = stale_paths(conn, (r.path for r in records))
    return [replace(r, stale=True) if r.path in stale else r for r in records]


def find_symbols(
    conn: sqlite3.Connection, name: str, kind: str | None = None, limit: int = 50
) -> list[SymbolRecord]:
    """Definitions matching ``name``: an exact qualified name, an exact name, a qualified-name
    suffix (``Class.method``), then a prefix of the name or qualified name (fuzzy prefix)."""
    hits = GraphReads(conn).find_definitions(name.strip().replace("::", "."), kind, limit)
    return mark_stale(conn, hits) if hits else []


def symbol_by_id(conn: sqlite3.Connection, sym_id: int) -> SymbolRecord | None:
    return GraphReads(conn).definition_record(sym_id)


def _targets(conn: sqlite3.Connection, name: str, kind: str | None = None) -> list[SymbolRecord]:
    hits = find_symbols(conn, name, kind)
    if not hits:
        raise SymbolNotFoundError(
            f"No symbol matches {name!r} — try a shorter prefix, `repoctx symbol {name[:3]}`, "
            "or `repoctx search` for words."
        )
    # Prefer the exact-name tier only: a prefix match on a common word would fan out widely.
    return hits


def references_to(
    conn: sqlite3.Connection, name: str, *, kinds: tuple[str, ...] | None = None, limit: int = 500
) -> tuple[list[SymbolRecord], list[RefRecord]]:
    """References to the definitions ``name`` matches: resolved edges first (highest
    confidence), then ambiguous references that list one of them as a candidate."""
    targets = _targets(conn, name)
    rows = GraphReads(conn).references_to([t.id for t in targets], kinds=kinds, limit=limit)
    refs = [
        RefRecord(
            r.path, r.line, r.col, r.name, r.kind, r.enclosing, r.target_id, r.resolution,
            r.confidence,
        )
        for r in rows[:limit]
    ]
    return targets, mark_stale(conn, refs)


@dataclass(frozen=True, slots=True)
class CallEdge:
    """One caller→callee edge: the symbol at the other end and where the call is."""

    symbol: SymbolRecord
    path: str
    line: int
    confidence: float
    resolution: str


def callers(
    conn: sqlite3.Connection, name: str, limit: int = 200
) -> tuple[list[SymbolRecord], list[CallEdge]]:
    """Definitions that call what ``name`` matches."""
    targets = _targets(conn, name)
    refs = GraphReads(conn).references_to([t.id for t in targets], kinds=("call",), limit=limit)
    refs.sort(key=lambda r: -r.confidence)  # resolved and ambiguous together, by confidence
    rows = [(r.enclosing_id, r.path, r.line, r.confidence, r.resolution) for r in refs[:limit]]
    return targets, _edges(conn, rows)


def callees(
    conn: sqlite3.Connection, name: str, limit: int = 200
) -> tuple[list[SymbolRecord], list[CallEdge]]:
    """What the definitions ``name`` matches call (resolved targets only)."""
    targets = _targets(conn, name)
    rows = GraphReads(conn).calls_from([t.id for t in targets], limit)
    return targets, _edges(conn, rows)


def _edges(conn: sqlite3.Connection, rows: list[tuple]) -> list[CallEdge]:
    out = []
    cache: dict[int, SymbolRecord | None] = {}
    for sym_id, path, line, conf, how in rows:
        if sym_id is None:
            continue
        if sym_id not in cache:
            cache[sym_id] = symbol_by_id(conn, sym_id)
        sym = cache[sym_id]
        if sym is not None:
            out.append(CallEdge(sym, path, line, conf, how))
    return out
