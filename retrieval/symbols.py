"""Symbol queries over the graph: definitions, references, callers and callees."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, replace

from indexer import graph
from indexer.models import RefRecord, SymbolRecord

from .errors import SymbolNotFoundError
from .freshness import stale_paths

_SYMBOL_COLS = (
    "s.id, f.path, s.name, s.qualname, s.kind, s.start_line, s.end_line, s.signature, s.doc, "
    "f.language, s.parent_id"
)


def _symbols(conn: sqlite3.Connection, where: str, params: list, limit: int) -> list[SymbolRecord]:
    sql = (
        f"SELECT {_SYMBOL_COLS} FROM symbols s JOIN files f ON f.id = s.file_id "
        f"WHERE {where} ORDER BY (s.kind = 'module'), length(s.qualname), s.qualname LIMIT ?"
    )
    return [SymbolRecord(*row) for row in conn.execute(sql, [*params, limit])]


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def mark_stale(conn: sqlite3.Connection, records: list) -> list:
    """The same records, with ``stale`` set on those whose file changed since indexing."""
    stale = stale_paths(conn, (r.path for r in records))
    return [replace(r, stale=True) if r.path in stale else r for r in records]


def find_symbols(
    conn: sqlite3.Connection, name: str, kind: str | None = None, limit: int = 50
) -> list[SymbolRecord]:
    """Definitions matching ``name``: an exact qualified name, an exact name, a qualified-name
    suffix (``Class.method``), then a prefix of the name or qualified name (fuzzy prefix)."""
    name = name.strip().replace("::", ".")
    kind_sql, kind_params = (" AND s.kind = ?", [kind]) if kind else ("", [])
    steps: list[tuple[str, list]] = [
        ("s.qualname = ?", [name]),
        ("s.name = ?", [name]),
    ]
    if "." in name:
        steps.append(("s.qualname LIKE ? ESCAPE '\\'", ["%." + _like_escape(name)]))
    steps.append(
        (
            "(s.name LIKE ? ESCAPE '\\' OR s.qualname LIKE ? ESCAPE '\\')",
            [_like_escape(name) + "%", _like_escape(name) + "%"],
        )
    )
    for where, params in steps:
        hits = _symbols(conn, where + kind_sql, params + kind_params, limit)
        if hits:
            return mark_stale(conn, hits)
    return []


def symbol_by_id(conn: sqlite3.Connection, sym_id: int) -> SymbolRecord | None:
    hits = _symbols(conn, "s.id = ?", [sym_id], 1)
    return hits[0] if hits else None


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
    rows = graph.references_to(conn, [t.id for t in targets], kinds=kinds, limit=limit)
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
    refs = graph.references_to(conn, [t.id for t in targets], kinds=("call",), limit=limit)
    refs.sort(key=lambda r: -r.confidence)  # resolved and ambiguous together, by confidence
    rows = [(r.enclosing_id, r.path, r.line, r.confidence, r.resolution) for r in refs[:limit]]
    return targets, _edges(conn, rows)


def callees(
    conn: sqlite3.Connection, name: str, limit: int = 200
) -> tuple[list[SymbolRecord], list[CallEdge]]:
    """What the definitions ``name`` matches call (resolved targets only)."""
    targets = _targets(conn, name)
    ids = [t.id for t in targets]
    marks = ",".join("?" * len(ids))
    rows = conn.execute(
        f"""SELECT r.target_id, f.path, r.line, r.confidence, r.resolution FROM refs r
            JOIN files f ON f.id = r.file_id
            WHERE r.enclosing_id IN ({marks}) AND r.kind = 'call' AND r.target_id IS NOT NULL
            ORDER BY f.path, r.line LIMIT ?""",
        [*ids, limit],
    ).fetchall()
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
