"""Reads of the index that the layers above share: references (resolved and candidate
alike), definitions, and how much of the index has vectors. The agent and the CLI read the
index only through here and through `retrieval`; no SQL of theirs depends on the schema.

A reference is an edge from the definition that encloses it to its target. A reference that
resolved has ``refs.target_id``; one that stayed ambiguous has no target but one row per
candidate in ``ref_candidates`` (with that candidate's confidence). Questions like "what refers
to X" must ask both tables; this module is the one place that does, so `symbol`/`refs`/
`callers`, the graph walk of `context`, test selection and rename cannot drift apart.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: Parameters per statement, below SQLite's default limit.
_CHUNK = 500


@dataclass(frozen=True, slots=True)
class RefRow:
    """One reference to a definition asked about."""

    path: str
    line: int
    col: int
    name: str
    kind: str
    enclosing_id: int | None
    enclosing: str  # the enclosing definition's qualified name ("" at module level)
    target_id: int  # the definition asked about that this reference reaches
    resolution: str
    confidence: float
    ambiguous: bool  # reached as one candidate of an unresolved reference


_ROW = (
    "SELECT f.path, r.line, r.col, r.name, r.kind, r.enclosing_id, coalesce(e.qualname, ''), "
    "{target}, r.resolution, {conf}, {ambiguous} "
    "FROM refs r JOIN files f ON f.id = r.file_id LEFT JOIN symbols e ON e.id = r.enclosing_id "
)


def _marks(n: int) -> str:
    return ",".join("?" * n)


def references_to(
    conn: sqlite3.Connection,
    ids: Sequence[int],
    *,
    kinds: Sequence[str] | None = None,
    limit: int | None = None,
    candidates: bool = True,
) -> list[RefRow]:
    """References to the definitions ``ids``: resolved ones first, then (with ``candidates``)
    ambiguous ones that list one of them as a candidate; each group by confidence, then
    path and line. ``limit`` bounds each group (so the best ``limit`` of both together, by
    any order, are among the rows)."""
    if not ids:
        return []
    marks = _marks(len(ids))
    kind_sql = f" AND r.kind IN ({_marks(len(kinds))})" if kinds else ""
    params = [*ids, *(kinds or ())]
    tail = " LIMIT ?" if limit is not None else ""
    extra = [limit] if limit is not None else []
    rows = conn.execute(
        _ROW.format(target="r.target_id", conf="r.confidence", ambiguous="0")
        + f"WHERE r.target_id IN ({marks}){kind_sql} "
        "ORDER BY r.confidence DESC, f.path, r.line, r.col" + tail,
        params + extra,
    ).fetchall()
    if candidates:
        rows += conn.execute(
            _ROW.format(target="c.symbol_id", conf="c.confidence", ambiguous="1")
            + f"JOIN ref_candidates c ON c.ref_id = r.id WHERE c.symbol_id IN ({marks}) "
            f"AND r.target_id IS NULL{kind_sql} "
            "ORDER BY c.confidence DESC, f.path, r.line, r.col" + tail,
            params + extra,
        ).fetchall()
    return [RefRow(*r[:10], bool(r[10])) for r in rows]


def referrer_ids(conn: sqlite3.Connection, ids: Iterable[int]) -> set[int]:
    """The definitions enclosing some reference to one of ``ids`` (resolved or candidate)."""
    ids = list(ids)
    found: set[int] = set()
    for i in range(0, len(ids), _CHUNK):
        part = ids[i : i + _CHUNK]
        marks = _marks(len(part))
        found.update(
            row[0]
            for row in conn.execute(
                f"SELECT enclosing_id FROM refs WHERE target_id IN ({marks}) "
                "AND enclosing_id IS NOT NULL UNION "
                "SELECT r.enclosing_id FROM ref_candidates c JOIN refs r ON r.id = c.ref_id "
                f"WHERE c.symbol_id IN ({marks}) AND r.enclosing_id IS NOT NULL",
                [*part, *part],
            )
        )
    return found


def reference_counts(conn: sqlite3.Connection, ids: Sequence[int]) -> dict[int, int]:
    """References to each of ``ids``, resolved or as an ambiguous candidate (from the index
    alone: how much of a hub a definition is)."""
    counts: dict[int, int] = dict.fromkeys(ids, 0)
    for k in range(0, len(ids), _CHUNK):
        part = list(ids[k : k + _CHUNK])
        marks = _marks(len(part))
        for sql in (
            f"SELECT target_id, count(*) FROM refs WHERE target_id IN ({marks}) GROUP BY target_id",
            f"SELECT symbol_id, count(*) FROM ref_candidates WHERE symbol_id IN ({marks}) "
            "GROUP BY symbol_id",
        ):
            for node, n in conn.execute(sql, part):
                counts[node] += n
    return counts


def strongest_edges(
    conn: sqlite3.Connection,
    ids: Sequence[int],
    *,
    outgoing: bool,
    fanout: int,
    candidates: bool,
) -> list[tuple[int, int, str, float]]:
    """(enclosing, target, kind, confidence) edges from (``outgoing``) or to the definitions
    ``ids``: resolved references, or (``candidates``) the candidates of ambiguous ones. Pairs
    are grouped (a function calling another ten times is one edge, at its best confidence), and
    per definition and reference kind only the ``fanout`` most confident are kept (ranked in
    SQL: a hub has thousands of callers)."""
    if not ids:
        return []
    marks = _marks(len(ids))
    node = "enc" if outgoing else "tgt"
    resolved = (
        "SELECT enclosing_id AS enc, target_id AS tgt, kind, confidence AS conf FROM refs "
        + (
            f"WHERE enclosing_id IN ({marks}) AND target_id IS NOT NULL"
            if outgoing
            else f"WHERE target_id IN ({marks})"
        )
    )
    candidate = (
        "SELECT r.enclosing_id AS enc, c.symbol_id AS tgt, r.kind AS kind, c.confidence AS conf "
        + (
            f"FROM refs r JOIN ref_candidates c ON c.ref_id = r.id WHERE r.enclosing_id IN ({marks})"
            if outgoing
            else f"FROM ref_candidates c JOIN refs r ON r.id = c.ref_id WHERE c.symbol_id IN ({marks})"
        )
    )
    inner = candidate if candidates else resolved
    return conn.execute(
        f"SELECT enc, tgt, kind, conf FROM (SELECT enc, tgt, kind, max(conf) AS conf, "
        f"row_number() OVER (PARTITION BY {node}, kind ORDER BY max(conf) DESC) AS rn "
        f"FROM ({inner}) GROUP BY enc, tgt, kind) WHERE rn <= ?",
        [*ids, fanout],
    ).fetchall()


# -- definitions --------------------------------------------------------------------------------

#: Columns of `symbol_rows`: id, kind, name, qualname, parent_id, path, module, signature.
_SYMBOL_ROW = (
    "SELECT s.id, s.kind, s.name, s.qualname, s.parent_id, f.path, coalesce(f.module, ''), "
    "s.signature FROM symbols s JOIN files f ON f.id = s.file_id "
)


def symbol_rows(conn: sqlite3.Connection, ids: Iterable[int]) -> list[tuple]:
    """(id, kind, name, qualname, parent_id, path, module, signature) of the definitions ``ids``."""
    ids = list(ids)
    out: list[tuple] = []
    for i in range(0, len(ids), _CHUNK):
        part = ids[i : i + _CHUNK]
        out += conn.execute(_SYMBOL_ROW + f"WHERE s.id IN ({_marks(len(part))})", part).fetchall()
    return out


def python_functions_named_test(conn: sqlite3.Connection) -> list[tuple]:
    """`symbol_rows` of every Python function or method whose name starts with ``test``."""
    # A range, not LIKE: it uses the name index (pytest's prefix is case-sensitive too).
    return conn.execute(
        _SYMBOL_ROW + "WHERE s.name >= 'test' AND s.name < 'tesu' "
        "AND s.kind IN ('function', 'method') AND f.language = 'python'"
    ).fetchall()


def definitions_in_file(conn: sqlite3.Connection, path: str) -> list[tuple]:
    """(id, qualname, kind, path, start_line, end_line, parent_id) of every definition of
    ``path``, its module included."""
    return conn.execute(
        "SELECT s.id, s.qualname, s.kind, f.path, s.start_line, s.end_line, s.parent_id "
        "FROM symbols s JOIN files f ON f.id = s.file_id WHERE f.path = ?",
        [path],
    ).fetchall()


def definition_id(conn: sqlite3.Connection, qualname: str, kind: str) -> int | None:
    row = conn.execute(
        "SELECT id FROM symbols WHERE qualname = ? AND kind = ?", [qualname, kind]
    ).fetchone()
    return row[0] if row else None


def definition_bytes(conn: sqlite3.Connection, symbol_id: int) -> tuple[int, int]:
    """(start_byte, end_byte) of a definition in its file."""
    start, end = conn.execute(
        "SELECT start_byte, end_byte FROM symbols WHERE id = ?", [symbol_id]
    ).fetchone()
    return start, end


def sibling_named(
    conn: sqlite3.Connection, name: str, symbol_id: int, parent_id: int | None
) -> str | None:
    """The qualified name of a definition called ``name`` in the same scope as ``symbol_id``
    (same file, same parent), if there is one."""
    row = conn.execute(
        "SELECT s.qualname FROM symbols s WHERE s.name = ? AND s.file_id = "
        "(SELECT file_id FROM symbols WHERE id = ?) AND s.parent_id IS ?",
        [name, symbol_id, parent_id],
    ).fetchone()
    return row[0] if row else None


def definitions_named(
    conn: sqlite3.Connection, name: str, kind: str, limit: int = 10
) -> list[tuple[str, str, int]]:
    """(qualname, path, start_line) of definitions of ``kind`` called ``name``."""
    return conn.execute(
        "SELECT s.qualname, f.path, s.start_line FROM symbols s JOIN files f "
        "ON f.id = s.file_id WHERE s.name = ? AND s.kind = ? LIMIT ?",
        [name, kind, limit],
    ).fetchall()


def resolved_reference_count(conn: sqlite3.Connection, symbol_id: int) -> int:
    return conn.execute("SELECT count(*) FROM refs WHERE target_id = ?", [symbol_id]).fetchone()[0]


def unresolved_named(
    conn: sqlite3.Connection, name: str, paths: Sequence[str]
) -> set[tuple[str, int, str]]:
    """(path, line, kind) of references called ``name`` in ``paths`` that resolve to nothing
    (unresolved or external)."""
    if not paths:
        return set()
    return set(
        conn.execute(
            "SELECT f.path, r.line, r.kind FROM refs r JOIN files f ON f.id = r.file_id "
            "WHERE r.name = ? AND r.target_id IS NULL AND r.resolution IN "
            f"('unresolved', 'external') AND f.path IN ({_marks(len(paths))})",
            [name, *paths],
        ).fetchall()
    )


def files_with_phrase(conn: sqlite3.Connection, phrase: str, limit: int = 200) -> list[str]:
    """Files whose chunks the lexical index matches for ``phrase`` (as one quoted phrase)."""
    rows = conn.execute(
        "SELECT DISTINCT f.path FROM chunks_fts t JOIN chunks c ON c.id = t.rowid "
        "JOIN files f ON f.id = c.file_id WHERE chunks_fts MATCH ? LIMIT ?",
        ['"' + phrase.replace('"', '""') + '"', limit],
    ).fetchall()
    return [r[0] for r in rows]


# -- vectors ------------------------------------------------------------------------------------


def vector_coverage(conn: sqlite3.Connection) -> tuple[int, int]:
    """(chunks with a vector, all chunks)."""
    # embedded is -1 for a chunk whose file could not be read back: not a vector either.
    done, total = conn.execute(
        "SELECT coalesce(sum(embedded = 1), 0), count(*) FROM chunks"
    ).fetchone()
    return int(done), int(total)


def embed_model(conn: sqlite3.Connection) -> str | None:
    """The model the index's vectors were made with; None for a lexical-only index."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'embed_model'").fetchone()
    return row[0] if row and row[0] else None
