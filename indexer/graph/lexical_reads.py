"""Reads of the lexical index: FTS5 term statistics, BM25 over chunks (``chunks_fts``) and over
whole files (``files_fts``, written by `indexer.graph.lexical`), and where chunks are.

Retrieval decides which terms to ask for and how to weigh them (`retrieval.sources`); the SQL
that asks lives here, beside the code that writes the tables.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from typing import NamedTuple

from indexer.graph.lexical import TEXT_SUFFIX, fts_table
from indexer.graph.records import ANY_FILE, FileFilter

# -- term statistics ----------------------------------------------------------------------------


_tokenizer = threading.local()


def fts_stems(terms: list[str]) -> list[str]:
    """Each term as the index's tokenizer (porter, unicode61) stores it ("" for a term it
    drops) — tokenized by FTS5 itself, in a private in-memory database (the reader's own
    connection stays read-only)."""
    conn = getattr(_tokenizer, "conn", None)
    if conn is None:
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        conn.execute("CREATE VIRTUAL TABLE q USING fts5(x, tokenize = 'porter unicode61')")
        conn.execute("CREATE VIRTUAL TABLE qv USING fts5vocab(q, 'instance')")
        _tokenizer.conn = conn
    conn.execute("DELETE FROM q")
    conn.execute("INSERT INTO q(rowid, x) VALUES (1, ?)", [" ".join(terms)])
    out = [""] * len(terms)
    for term, offset in conn.execute("SELECT term, offset FROM qv"):
        if 0 <= offset < len(out):
            out[offset] = term
    return out


def _varint(b: bytes) -> int:
    """SQLite's varint: big-endian 7-bit groups, the ninth byte whole."""
    v = 0
    for k, byte in enumerate(b[:9]):
        if k == 8:
            return (v << 8) | byte
        v = (v << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return v
    return v


def fts_tables(base: str, files: FileFilter = ANY_FILE) -> tuple[str, ...]:
    """The lexical tables (``chunks_fts``/``files_fts`` and their ``_text`` twins, see
    `indexer.graph.lexical.fts_table`) a read over the files ``files`` allows needs: code's when only
    code languages are allowed, prose's when only text formats, else both."""
    langs = (files.lang,) if files.lang else files.langs
    wanted = {fts_table(base, lang) for lang in langs} if langs else None
    return tuple(t for t in (base, base + TEXT_SUFFIX) if wanted is None or t in wanted)


# -- BM25 ---------------------------------------------------------------------------------------


class ChunkMatch(NamedTuple):
    """A chunk BM25 matched; ``bm25`` is FTS5's (lower is better)."""

    chunk_id: int
    bm25: float
    path: str
    symbol: str | None
    start_line: int
    end_line: int


# -- chunks -------------------------------------------------------------------------------------


class ChunkSpan(NamedTuple):
    path: str
    symbol: str | None
    start_line: int
    end_line: int


class LexicalReads:
    """The lexical index's reads over one SQLite connection: `Index.lexical`."""

    __slots__ = ("conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def _vocab(self, table: str) -> str:
        """A temp fts5vocab over ``table`` (works on read-only connections), created once."""
        name = f"{table}_vocab"
        self.conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{name} USING fts5vocab(main, {table}, 'row')")
        return name

    def term_stats(self, table: str, stems: Sequence[str]) -> dict[str, tuple[int, int]]:
        """stem -> (documents with it, occurrences) in the FTS5 table ``table``, for those of
        ``stems`` (as `fts_stems` gives them) that the table has."""
        vocab = self._vocab(table)
        return {
            term: (doc, cnt)
            for term, doc, cnt in self.conn.execute(
                f"SELECT term, doc, cnt FROM temp.{vocab} WHERE term IN ({','.join('?' * len(stems))})",
                list(stems),
            )
        }

    def table_docs(self, table: str) -> int:
        """Rows in an FTS5 table, as its BM25 counts them: the first varint of the table's
        "averages" record (id 1 of ``<table>_data``) — one lookup, where count(*) scans every row."""
        try:
            row = self.conn.execute(f"SELECT block FROM {table}_data WHERE id = 1").fetchone()
        except sqlite3.OperationalError:  # no such table
            return 0
        return _varint(row[0]) if row and row[0] else 0

    def chunk_bm25(self, table: str,
        match: str,
        weights: tuple[float, float, float],
        k: int,
        files: FileFilter = ANY_FILE,
        paths: Sequence[str] | None = None,
    ) -> list[ChunkMatch]:
        """The ``k`` best chunks of the FTS5 ``table`` (one of `fts_tables`) for the expression
        ``match``, BM25 with column ``weights`` (path, name, body); only chunks of files ``files``
        allows and (``paths``) of those paths. One table per read: BM25 of two tables is not on
        one scale (each weighs a term by its own statistics)."""
        fsql, fparams = files.sql()
        if paths is not None:
            fsql += f" AND f.path IN ({','.join('?' * len(paths))})"
            fparams = [*fparams, *paths]
        w = weights
        return [
            ChunkMatch(*r)
            for r in self.conn.execute(
                f"SELECT t.rowid, bm25({table}, {w[0]}, {w[1]}, {w[2]}) AS s, f.path, c.symbol, "
                f"c.start_line, c.end_line FROM {table} t JOIN chunks c ON c.id = t.rowid "
                f"JOIN files f ON f.id = c.file_id WHERE {table} MATCH ?{fsql} ORDER BY s LIMIT ?",
                [match, *fparams, k],
            )
        ]

    def file_bm25(self, table: str,
        match: str,
        weights: tuple[float, float, float],
        k: int,
        files: FileFilter = ANY_FILE,
    ) -> list[tuple[str, float]]:
        """(path, FTS5 BM25 — lower is better) of the ``k`` best whole files of ``table`` for
        ``match``, with column ``weights`` (path words, defined names, text); only files ``files``
        allows. One table per read, as in `chunk_bm25`."""
        fsql, fparams = files.sql()
        w = weights
        return self.conn.execute(
            f"SELECT f.path, bm25({table}, {w[0]}, {w[1]}, {w[2]}) AS s FROM {table} t "
            f"JOIN files f ON f.id = t.rowid WHERE {table} MATCH ?{fsql} ORDER BY s LIMIT ?",
            [match, *fparams, k],
        ).fetchall()

    def chunk_spans(self, ids: Sequence[int]) -> dict[int, ChunkSpan]:
        """chunk id -> where it is, for those of ``ids`` still indexed (one statement: ``ids``
        is a handful of search results)."""
        return {
            r[0]: ChunkSpan(*r[1:])
            for r in self.conn.execute(
                "SELECT c.id, f.path, c.symbol, c.start_line, c.end_line FROM chunks c JOIN files f "
                f"ON f.id = c.file_id WHERE c.id IN ({','.join('?' * len(ids))})",
                list(ids),
            )
        }

    def chunk_at(self, path: str, line: int) -> tuple[int, str | None, int, int] | None:
        """(id, symbol, start_line, end_line) of the first chunk of ``path`` holding ``line``."""
        return self.conn.execute(
            "SELECT c.id, c.symbol, c.start_line, c.end_line FROM chunks c JOIN files f "
            "ON f.id = c.file_id WHERE f.path = ? AND c.start_line <= ? AND c.end_line >= ? "
            "ORDER BY c.start_line LIMIT 1",
            [path, line, line],
        ).fetchone()
