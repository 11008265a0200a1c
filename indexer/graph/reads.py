"""Reads of the graph that the layers above share (`Index.graph`, a `GraphReads` over the
index's read connection): references (resolved and candidate alike), definitions, files and
metadata, and how much of the index has vectors. No SQL above the indexer depends on the schema.

A reference is an edge from the definition that encloses it to its target. A reference that
resolved has ``refs.target_id``; one that stayed ambiguous has no target but one row per
candidate in ``ref_candidates`` (with that candidate's confidence). Questions like "what refers
to X" must ask both tables; this module is the one place that does, so `symbol`/`refs`/
`callers`, the graph walk of `context`, test selection and rename cannot drift apart.

The other reads of the graph tables that retrieval makes are here too (definitions by name, by
span and by file, resolved edges, file identity and metadata), so no layer above writes SQL
against the schema; FTS5 and chunk reads are in `indexer.graph.lexical_reads`, commit history in
`indexer.history.reads`, the records these reads return in `indexer.graph.records`.

Size: one reader per schema: every query of files, symbols, refs, ref_candidates, imports and
meta made above the indexer sits here, so a schema change is checked in one place; the methods
share the filters (`FileFilter`) and row shapes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

from indexer.graph.lexical import CHUNK_TABLES
from indexer.graph.records import ANY_FILE, FileFilter, NamedDefinition, RefRow
from indexer.models import SymbolRecord

#: Parameters per statement, below SQLite's default limit.
_CHUNK = 500


_ROW = (
    "SELECT f.path, r.line, r.col, r.name, r.kind, r.enclosing_id, coalesce(e.qualname, ''), "
    "{target}, r.resolution, {conf}, {ambiguous} "
    "FROM refs r JOIN files f ON f.id = r.file_id LEFT JOIN symbols e ON e.id = r.enclosing_id "
)


def _marks(n: int) -> str:
    return ",".join("?" * n)


#: Columns of `symbol_rows`: id, kind, name, qualname, parent_id, path, module, signature.
_SYMBOL_ROW = (
    "SELECT s.id, s.kind, s.name, s.qualname, s.parent_id, f.path, coalesce(f.module, ''), "
    "s.signature FROM symbols s JOIN files f ON f.id = s.file_id "
)


_NAMED = (
    "SELECT s.qualname, s.kind, s.start_line, s.end_line, f.path, coalesce(f.language, '') "
    "FROM symbols s JOIN files f ON f.id = s.file_id "
)


#: Columns of `definition_details`: id, path, name, qualname, kind, start_line, end_line,
#: signature, doc, parent_id, language, module, size in bytes.
_DETAIL = (
    "SELECT s.id, f.path, s.name, s.qualname, s.kind, s.start_line, s.end_line, s.signature, "
    "s.doc, s.parent_id, coalesce(f.language, ''), coalesce(f.module, ''), "
    "s.end_byte - s.start_byte "
    "FROM symbols s JOIN files f ON f.id = s.file_id "
)


_RECORD = (
    "SELECT s.id, f.path, s.name, s.qualname, s.kind, s.start_line, s.end_line, s.signature, "
    "s.doc, f.language, s.parent_id FROM symbols s JOIN files f ON f.id = s.file_id "
)


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def definition_steps(name: str) -> list[tuple[str, list]]:
    """The tiers `GraphReads.find_definitions` tries in turn, as (WHERE clause, parameters): an
    exact qualified name, an exact name, a qualified-name suffix (dotted names), a prefix."""
    steps: list[tuple[str, list]] = [("s.qualname = ?", [name]), ("s.name = ?", [name])]
    if "." in name:
        steps.append(("s.qualname LIKE ? ESCAPE '\\'", ["%." + _like_escape(name)]))
    prefix = _like_escape(name) + "%"
    steps.append(("(s.name LIKE ? ESCAPE '\\' OR s.qualname LIKE ? ESCAPE '\\')", [prefix, prefix]))
    return steps


class GraphReads:
    """The graph's reads over one SQLite connection: `Index.graph`."""

    __slots__ = ("conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def references_to(self, ids: Sequence[int],
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
        rows = self.conn.execute(
            _ROW.format(target="r.target_id", conf="r.confidence", ambiguous="0")
            + f"WHERE r.target_id IN ({marks}){kind_sql} "
            "ORDER BY r.confidence DESC, f.path, r.line, r.col" + tail,
            params + extra,
        ).fetchall()
        if candidates:
            rows += self.conn.execute(
                _ROW.format(target="c.symbol_id", conf="c.confidence", ambiguous="1")
                + f"JOIN ref_candidates c ON c.ref_id = r.id WHERE c.symbol_id IN ({marks}) "
                # `+`: not through refs_target — NULL is most of the table; start from the
                # candidates' symbol index instead (0.67 s -> 1 ms for `join` on the stdlib)
                f"AND +r.target_id IS NULL{kind_sql} "
                "ORDER BY c.confidence DESC, f.path, r.line, r.col" + tail,
                params + extra,
            ).fetchall()
        return [RefRow(*r[:10], bool(r[10])) for r in rows]

    def referrer_ids(self, ids: Iterable[int]) -> set[int]:
        """The definitions enclosing some reference to one of ``ids`` (resolved or candidate)."""
        ids = list(ids)
        found: set[int] = set()
        for i in range(0, len(ids), _CHUNK):
            part = ids[i : i + _CHUNK]
            marks = _marks(len(part))
            found.update(
                row[0]
                for row in self.conn.execute(
                    f"SELECT enclosing_id FROM refs WHERE target_id IN ({marks}) "
                    "AND enclosing_id IS NOT NULL UNION "
                    "SELECT r.enclosing_id FROM ref_candidates c JOIN refs r ON r.id = c.ref_id "
                    f"WHERE c.symbol_id IN ({marks}) AND r.enclosing_id IS NOT NULL",
                    [*part, *part],
                )
            )
        return found

    def reference_counts(self, ids: Sequence[int]) -> dict[int, int]:
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
                for node, n in self.conn.execute(sql, part):
                    counts[node] += n
        return counts

    def strongest_edges(self, ids: Sequence[int],
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
        return self.conn.execute(
            f"SELECT enc, tgt, kind, conf FROM (SELECT enc, tgt, kind, max(conf) AS conf, "
            f"row_number() OVER (PARTITION BY {node}, kind ORDER BY max(conf) DESC) AS rn "
            f"FROM ({inner}) GROUP BY enc, tgt, kind) WHERE rn <= ?",
            [*ids, fanout],
        ).fetchall()

    def symbol_rows(self, ids: Iterable[int]) -> list[tuple]:
        """(id, kind, name, qualname, parent_id, path, module, signature) of the definitions ``ids``."""
        ids = list(ids)
        out: list[tuple] = []
        for i in range(0, len(ids), _CHUNK):
            part = ids[i : i + _CHUNK]
            out += self.conn.execute(_SYMBOL_ROW + f"WHERE s.id IN ({_marks(len(part))})", part).fetchall()
        return out

    def python_functions_named_test(self) -> list[tuple]:
        """`symbol_rows` of every Python function or method whose name starts with ``test``."""
        # A range, not LIKE: it uses the name index (pytest's prefix is case-sensitive too).
        return self.conn.execute(
            _SYMBOL_ROW + "WHERE s.name >= 'test' AND s.name < 'tesu' "
            "AND s.kind IN ('function', 'method') AND f.language = 'python'"
        ).fetchall()

    def definitions_in_file(self, path: str) -> list[tuple]:
        """(id, qualname, kind, path, start_line, end_line, parent_id) of every definition of
        ``path``, its module included."""
        return self.conn.execute(
            "SELECT s.id, s.qualname, s.kind, f.path, s.start_line, s.end_line, s.parent_id "
            "FROM symbols s JOIN files f ON f.id = s.file_id WHERE f.path = ?",
            [path],
        ).fetchall()

    def definition_id(self, qualname: str, kind: str) -> int | None:
        row = self.conn.execute(
            "SELECT id FROM symbols WHERE qualname = ? AND kind = ?", [qualname, kind]
        ).fetchone()
        return row[0] if row else None

    def definition_bytes(self, symbol_id: int) -> tuple[int, int]:
        """(start_byte, end_byte) of a definition in its file."""
        start, end = self.conn.execute(
            "SELECT start_byte, end_byte FROM symbols WHERE id = ?", [symbol_id]
        ).fetchone()
        return start, end

    def sibling_named(self, name: str, symbol_id: int, parent_id: int | None
    ) -> str | None:
        """The qualified name of a definition called ``name`` in the same scope as ``symbol_id``
        (same file, same parent), if there is one."""
        row = self.conn.execute(
            "SELECT s.qualname FROM symbols s WHERE s.name = ? AND s.file_id = "
            "(SELECT file_id FROM symbols WHERE id = ?) AND s.parent_id IS ?",
            [name, symbol_id, parent_id],
        ).fetchone()
        return row[0] if row else None

    def definitions_named(self, name: str, kind: str, limit: int = 10
    ) -> list[tuple[str, str, int]]:
        """(qualname, path, start_line) of definitions of ``kind`` called ``name``."""
        return self.conn.execute(
            "SELECT s.qualname, f.path, s.start_line FROM symbols s JOIN files f "
            "ON f.id = s.file_id WHERE s.name = ? AND s.kind = ? LIMIT ?",
            [name, kind, limit],
        ).fetchall()

    def resolved_reference_count(self, symbol_id: int) -> int:
        return self.conn.execute("SELECT count(*) FROM refs WHERE target_id = ?", [symbol_id]).fetchone()[0]

    def unresolved_named(self, name: str, paths: Sequence[str]
    ) -> set[tuple[str, int, str]]:
        """(path, line, kind) of references called ``name`` in ``paths`` that resolve to nothing
        (unresolved or external)."""
        if not paths:
            return set()
        return set(
            self.conn.execute(
                "SELECT f.path, r.line, r.kind FROM refs r JOIN files f ON f.id = r.file_id "
                "WHERE r.name = ? AND r.target_id IS NULL AND r.resolution IN "
                f"('unresolved', 'external') AND f.path IN ({_marks(len(paths))})",
                [name, *paths],
            ).fetchall()
        )

    def files_with_phrase(self, phrase: str, limit: int = 200) -> list[str]:
        """Files whose chunks the lexical index matches for ``phrase`` (as one quoted phrase)."""
        out: dict[str, None] = {}
        for table in CHUNK_TABLES:
            rows = self.conn.execute(
                f"SELECT DISTINCT f.path FROM {table} t JOIN chunks c ON c.id = t.rowid "
                f"JOIN files f ON f.id = c.file_id WHERE {table} MATCH ? LIMIT ?",
                ['"' + phrase.replace('"', '""') + '"', limit],
            ).fetchall()
            out.update(dict.fromkeys(r[0] for r in rows))
        return list(out)[:limit]

    def vector_coverage(self) -> tuple[int, int]:
        """(chunks with a vector, all chunks)."""
        # embedded is -1 for a chunk whose file could not be read back: not a vector either.
        done, total = self.conn.execute(
            "SELECT coalesce(sum(embedded = 1), 0), count(*) FROM chunks"
        ).fetchone()
        return int(done), int(total)

    def embed_model(self) -> str | None:
        """The model the index's vectors were made with; None for a lexical-only index."""
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'embed_model'").fetchone()
        return row[0] if row and row[0] else None

    def meta_value(self, key: str) -> str | None:
        """One value of the index's `meta` table (None when absent)."""
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
        return row[0] if row else None

    def chunk_count(self) -> int:
        """All chunks (a scan: read it once per generation)."""
        return self.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]

    def chunks_to_embed(self) -> int:
        """Chunks still without a vector (from their partial index: cheap)."""
        return self.conn.execute("SELECT count(*) FROM chunks WHERE embedded = 0").fetchone()[0]

    def existing_chunk_ids(self, ids: Sequence[int]) -> set[int]:
        """Which of ``ids`` are chunks of this graph."""
        if not ids:
            return set()
        rows = self.conn.execute(f"SELECT id FROM chunks WHERE id IN ({_marks(len(ids))})", list(ids))
        return {r[0] for r in rows}

    def chunk_locations(self, ids: Sequence[int]
    ) -> dict[int, tuple[str, int, int, str, str]]:
        """chunk id -> (path, start_line, end_line, symbol, language) for the chunks of ``ids``."""
        if not ids:
            return {}
        return {
            r[0]: r[1:]
            for r in self.conn.execute(
                "SELECT c.id, f.path, c.start_line, c.end_line, c.symbol, f.language FROM chunks c "
                f"JOIN files f ON f.id = c.file_id WHERE c.id IN ({_marks(len(ids))})",
                list(ids),
            )
        }

    def file_stats(self) -> list[tuple[str, int, int]]:
        """``(path, size, mtime_ns)`` of every indexed file as the index saw it, sorted by path
        (the order of discovery's files: SQLite's BINARY order of UTF-8 is code point order)."""
        return self.conn.execute("SELECT path, size, mtime_ns FROM files ORDER BY path").fetchall()

    def parsed_files_by_language(self) -> list[tuple[str, int]]:
        """(language, files) of the files parsed (with or without syntax errors), most first."""
        return self.conn.execute(
            "SELECT language, count(*) FROM files WHERE status IN ('ok','syntax_error') "
            "GROUP BY language ORDER BY count(*) DESC, language"
        ).fetchall()

    def parsed_file_count(self) -> int:
        """Files parsed (with or without syntax errors)."""
        return self.conn.execute(
            "SELECT count(*) FROM files WHERE status IN ('ok','syntax_error')"
        ).fetchone()[0]

    def generation(self) -> int:
        """The index generation (0 before the first build)."""
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        return int(row[0]) if row else 0

    def index_root(self) -> str:
        """The repository root the index was built from ("" if unknown)."""
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'root'").fetchone()
        return row[0] if row else ""

    def file_stats_of(self, paths: Iterable[str]) -> dict[str, tuple[int, int]]:
        """path -> (size, mtime_ns) as the index saw it, for those of ``paths`` it indexed (one
        query per 900 paths, not one per path)."""
        paths = list(paths)
        out: dict[str, tuple[int, int]] = {}
        for i in range(0, len(paths), 900):
            part = paths[i : i + 900]
            out.update(
                (p, (size, mtime))
                for p, size, mtime in self.conn.execute(
                    f"SELECT path, size, mtime_ns FROM files WHERE path IN ({_marks(len(part))})", part
                )
            )
        return out

    def all_paths(self) -> list[str]:
        """Every indexed path (in the table's order)."""
        return [r[0] for r in self.conn.execute("SELECT path FROM files")]

    def module_exists(self, module: str) -> bool:
        """Whether some indexed file is the module ``module`` (dotted)."""
        return self.conn.execute("SELECT 1 FROM files WHERE module = ? LIMIT 1", [module]).fetchone() is not None

    def module_paths(self, module: str) -> list[str]:
        """Paths of the files that are the module ``module`` (dotted)."""
        return [r[0] for r in self.conn.execute("SELECT path FROM files WHERE module = ?", [module]).fetchall()]

    def file_identity(self, path: str) -> tuple[int, str, str | None] | None:
        """(file id, module or "", content hash) of ``path``; None if it is not indexed."""
        row = self.conn.execute(
            "SELECT id, coalesce(module, ''), hash FROM files WHERE path = ?", [path]
        ).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    def indexed_languages(self, paths: Sequence[str]) -> dict[str, str]:
        """path -> language ("" unknown) of those of ``paths`` indexed with status ok or
        syntax_error; the others are absent."""
        found: dict[str, str] = {}
        for i in range(0, len(paths), _CHUNK):
            part = list(paths[i : i + _CHUNK])
            found.update(
                self.conn.execute(
                    f"SELECT path, coalesce(language, '') FROM files WHERE status IN ('ok', 'syntax_error') "
                    f"AND path IN ({_marks(len(part))})", part,
                ).fetchall()
            )
        return found

    def qualname_exists(self, qualname: str) -> bool:
        return self.conn.execute(
            "SELECT 1 FROM symbols WHERE qualname = ? LIMIT 1", [qualname]
        ).fetchone() is not None

    def module_imports_named(self, module: str, name: str) -> list[tuple[str, str]]:
        """(imported module, imported name) of the imports of ``module`` bound to ``name`` or of
        ``*``; at most 20."""
        return self.conn.execute(
            "SELECT DISTINCT i.module, i.name FROM imports i JOIN files f ON f.id = i.file_id "
            "WHERE f.module = ? AND (i.alias = ? OR i.name = '*') LIMIT 20",
            [module, name],
        ).fetchall()

    def definitions_with_qualname(self, qualname: str, files: FileFilter = ANY_FILE
    ) -> list[NamedDefinition]:
        """Definitions (not modules) whose qualified name is ``qualname``."""
        fsql, fparams = files.sql()
        return [
            NamedDefinition(*r)
            for r in self.conn.execute(
                _NAMED + f"WHERE s.qualname = ? AND s.kind != 'module'{fsql}", [qualname, *fparams]
            ).fetchall()
        ]

    def definitions_with_name(self, name: str, files: FileFilter = ANY_FILE, limit: int = 200
    ) -> list[NamedDefinition]:
        """Definitions (not modules) called ``name``, at most ``limit``."""
        fsql, fparams = files.sql()
        return [
            NamedDefinition(*r)
            for r in self.conn.execute(
                _NAMED + f"WHERE s.name = ? AND s.kind != 'module'{fsql} LIMIT ?", [name, *fparams, limit]
            ).fetchall()
        ]

    def definition_spans_in_file(self, path: str) -> list[tuple[str, int, int, str]]:
        """(qualname, start_line, end_line, name) of the definitions (not the module) of ``path``."""
        return self.conn.execute(
            "SELECT s.qualname, s.start_line, s.end_line, s.name FROM symbols s JOIN files f "
            "ON f.id = s.file_id WHERE f.path = ? AND s.kind != 'module'",
            [path],
        ).fetchall()

    def definition_ids_within(self, path: str, start: int, end: int) -> list[int]:
        """Ids of the definitions (not modules) of ``path`` inside lines ``start``-``end``."""
        return [
            r[0]
            for r in self.conn.execute(
                "SELECT s.id FROM symbols s JOIN files f ON f.id = s.file_id WHERE f.path = ? "
                "AND s.start_line >= ? AND s.end_line <= ? AND s.kind != 'module'",
                [path, start, end],
            )
        ]

    def definitions_of_file_id(self, file_id: int) -> list[tuple[int, str, str, int, int, int | None]]:
        """(id, qualname, kind, start_line, end_line, parent_id) of the definitions (not the
        module) of a file, by start line."""
        return self.conn.execute(
            "SELECT id, qualname, kind, start_line, end_line, parent_id FROM symbols "
            "WHERE file_id = ? AND kind != 'module' ORDER BY start_line",
            [file_id],
        ).fetchall()

    def definitions_named_in_file(self, path: str, names: Iterable[str]
    ) -> list[tuple[str, str, int, int, str]]:
        """(name, qualname, start_line, end_line, enclosing definition's name or "") of the
        definitions (not the module) of ``path`` called one of ``names``; [] if ``path`` is not
        indexed."""
        row = self.conn.execute("SELECT id FROM files WHERE path = ?", [path]).fetchone()
        if row is None:
            return []
        wanted = sorted(names)
        return self.conn.execute(
            "SELECT s.name, s.qualname, s.start_line, s.end_line, coalesce(p.name, '') FROM symbols s "
            "LEFT JOIN symbols p ON p.id = s.parent_id "
            f"WHERE s.file_id = ? AND s.kind != 'module' AND s.name IN ({_marks(len(wanted))})",
            [row[0], *wanted],
        ).fetchall()

    def definitions_with_popularity(self, ids: Sequence[int]
    ) -> dict[int, tuple[str, str, int, int, str, str, int]]:
        """id -> (qualname, path, start_line, end_line, kind, language or "", resolved references
        to it, counted up to 1000) of the definitions ``ids``."""
        return {
            r[0]: r[1:]
            for r in self.conn.execute(
                "SELECT s.id, s.qualname, f.path, s.start_line, s.end_line, s.kind, coalesce(f.language, ''), "
                "(SELECT count(*) FROM (SELECT 1 FROM refs r WHERE r.target_id = s.id LIMIT 1000)) "
                "FROM symbols s "
                f"JOIN files f ON f.id = s.file_id WHERE s.id IN ({_marks(len(ids))})",
                list(ids),
            )
        }

    def nesting_rows(self, ids: Sequence[int]) -> list[tuple[int, int | None, int, str]]:
        """(id, parent_id, file_id, kind) of the definitions ``ids`` and of their members."""
        marks = _marks(len(ids))
        return self.conn.execute(
            f"SELECT id, parent_id, file_id, kind FROM symbols WHERE id IN ({marks}) "
            f"UNION SELECT id, parent_id, file_id, kind FROM symbols WHERE parent_id IN ({marks})",
            [*ids, *ids],
        ).fetchall()

    def module_ids(self, file_ids: Sequence[int]) -> dict[int, int]:
        """file id -> id of its module definition, for ``file_ids``."""
        if not file_ids:
            return {}
        return dict(
            self.conn.execute(
                f"SELECT file_id, id FROM symbols WHERE kind = 'module' AND file_id IN "
                f"({_marks(len(file_ids))})",
                list(file_ids),
            ).fetchall()
        )

    def definition_details(self, ids: Iterable[int]) -> list[tuple]:
        """Rows of ``_DETAIL`` columns (id, path, name, qualname, kind, start_line, end_line,
        signature, doc, parent_id, language, module, nbytes) of the definitions ``ids``."""
        ids = list(ids)
        out: list[tuple] = []
        for k in range(0, len(ids), 900):
            part = ids[k : k + 900]
            out += self.conn.execute(_DETAIL + f"WHERE s.id IN ({_marks(len(part))})", part).fetchall()
        return out

    def definition_details_in_file(self, path: str) -> list[tuple]:
        """`definition_details` rows of every definition of ``path`` (its module included), by
        start line then outermost first."""
        return self.conn.execute(
            _DETAIL + "WHERE f.path = ? ORDER BY s.start_line, s.end_line DESC", [path]
        ).fetchall()

    def definition_details_between(self, path: str, start: int, end: int) -> list[tuple]:
        """`definition_details` rows of the definitions (not the module) of ``path`` overlapping
        lines ``start``-``end``, by start line then outermost first."""
        return self.conn.execute(
            _DETAIL + "WHERE s.file_id = (SELECT id FROM files WHERE path = ?) "
            "AND s.start_line <= ? AND s.end_line >= ? AND s.kind != 'module' "
            "ORDER BY s.start_line, s.end_line DESC",
            [path, end, start],
        ).fetchall()

    def _records(self, where: str, params: list, limit: int) -> list[SymbolRecord]:
        sql = _RECORD + f"WHERE {where} ORDER BY (s.kind = 'module'), length(s.qualname), s.qualname LIMIT ?"
        return [SymbolRecord(*row) for row in self.conn.execute(sql, [*params, limit])]

    def find_definitions(self, name: str, kind: str | None = None, limit: int = 50
    ) -> list[SymbolRecord]:
        """Definitions matching ``name`` (dotted), from the first of these that matches any: an
        exact qualified name, an exact name, a qualified-name suffix (``Class.method``), a prefix
        of the name or qualified name. Modules last, then shorter qualified names first."""
        kind_sql, kind_params = (" AND s.kind = ?", [kind]) if kind else ("", [])
        for where, params in definition_steps(name):
            hits = self._records(where + kind_sql, params + kind_params, limit)
            if hits:
                return hits
        return []

    def definition_record(self, symbol_id: int) -> SymbolRecord | None:
        hits = self._records("s.id = ?", [symbol_id], 1)
        return hits[0] if hits else None

    def calls_from(self, ids: Sequence[int], limit: int
    ) -> list[tuple[int, str, int, float, str]]:
        """(target_id, path, line, confidence, resolution) of the resolved calls made inside the
        definitions ``ids``, by path and line; at most ``limit``."""
        return self.conn.execute(
            f"""SELECT r.target_id, f.path, r.line, r.confidence, r.resolution FROM refs r
                JOIN files f ON f.id = r.file_id
                WHERE r.enclosing_id IN ({_marks(len(ids))}) AND r.kind = 'call' AND r.target_id IS NOT NULL
                ORDER BY f.path, r.line LIMIT ?""",
            [*ids, limit],
        ).fetchall()

    def resolved_out_edges(self, ids: Sequence[int]) -> list[tuple[int, int, float]]:
        """(enclosing_id, target_id, confidence) of every resolved reference made inside ``ids``."""
        return self.conn.execute(
            f"SELECT enclosing_id, target_id, confidence FROM refs WHERE enclosing_id IN ({_marks(len(ids))}) "
            "AND target_id IS NOT NULL",
            list(ids),
        ).fetchall()

    def resolved_in_edges(self, ids: Sequence[int], limit: int
    ) -> list[tuple[int, int, float]]:
        """(target_id, enclosing_id, confidence) of resolved references to ``ids`` made inside a
        definition; at most ``limit`` (in the table's order)."""
        return self.conn.execute(
            f"SELECT target_id, enclosing_id, confidence FROM refs WHERE target_id IN ({_marks(len(ids))}) "
            "AND enclosing_id IS NOT NULL LIMIT ?",
            [*ids, limit],
        ).fetchall()
