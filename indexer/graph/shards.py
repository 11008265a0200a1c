"""Shards: the rows of a bulk load written by the workers that parse them, and merged into the
graph by SQLite itself.

A build that writes a whole index (a full rebuild, a first build) would otherwise have one
process insert every row: on the stdlib 3–4 s of `executemany`, serial however many workers
parse, and on 16 cores the build's floor. Here each pool worker parses a batch of files and
writes its rows into a shard of its own, a SQLite file with the graph's tables (their
`CREATE TABLE` text is read from the graph being built, so the columns are the graph's by
construction) and none of its indexes. The driver merges each finished shard with `ATTACH` and
`INSERT … SELECT` (C code, no Python row: ~0.1 s for the stdlib's 360k references) while other
workers still parse. The lexical rows are tokenized by the worker too, into FTS5 tables of the
shard, whose segments the merge copies as they are (`indexer.graph.fts_segments`; where this
SQLite's FTS5 writes records not as that module reads them, the rows travel plain and the merge
tokenizes them). Reads keep one merged file: `benchmarks/shard_reads.py` measures the alternative,
reads fanned out over shards, against it.

References are merged twice. `inherit` ones come with the parse (the member lookups of every
other reference follow base classes, so the driver resolves those few first, as a serial build
does); the rest stay in the shard until a worker has resolved them against the merged file,
opened read-only as the name table, and written the resolutions beside them: then they are
inserted once, resolved, instead of inserted pending and updated. Each shard's reference ids
are moved to a range of their own (``offset``).

A file's row is merged without its content hash and modification time, and gets them with its
references (`merge_resolved`): a first build killed in between (it writes the current graph in
place, so that readers see it grow) leaves files the next build parses again, not files whose
references it would never see.
A killed full rebuild leaves only an unpublished generation, which the next build deletes, as it
deletes every shard directory a killed build left (`store.remove_unpublished`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from indexer.graph import fts_segments
from indexer.graph import write as graph_write
from indexer.graph.lexical import CHUNK_TABLES, FILE_TABLES, fts_table, insert_into
from indexer.graph.store import SHARDS_PREFIX, WriteDB, crash_point
from indexer.parse.languages import language_for_path
from indexer.parse.worker import FileResult

if TYPE_CHECKING:
    from indexer.graph.resolve import SymbolTable

#: The graph's tables a shard holds, created from the graph's own `CREATE TABLE` text.
SHARD_TABLES = ("files", "symbols", "refs", "imports", "chunks")
#: The lexical (FTS5) tables: a shard has them when their segments can be copied.
LEXICAL_TABLES = (*CHUNK_TABLES, *FILE_TABLES)
#: FTS5 flushes its pending terms into a new segment past this many bytes (1 MB by default): most
#: shards' text fits, so they are one segment to copy, never merged inside the shard; a larger
#: one writes a few (memory per worker stays bounded).
SHARD_HASH_BYTES = 64 << 20
#: A shard's own tables: lexical rows to tokenize at the merge (``tbl`` is the FTS5 table they
#: go to), and the resolutions of its references with their candidates.
_OWN_TABLES = (
    "CREATE TABLE lexical (tbl TEXT NOT NULL, id INTEGER NOT NULL, path TEXT NOT NULL, "
    "names TEXT NOT NULL, body TEXT NOT NULL)",
    "CREATE TABLE resolved (ref_id INTEGER PRIMARY KEY, target_id INTEGER, "
    "resolution TEXT NOT NULL, confidence REAL NOT NULL)",
    "CREATE TABLE candidates (ref_id INTEGER NOT NULL, symbol_id INTEGER NOT NULL, "
    "confidence REAL NOT NULL)",
)
_REF_COLS = "file_id, name, kind, line, col, receiver, enclosing_id"
_IMPORT_COLS = "module, name, alias, line, level, file_id"


def shard_dir(index_dir: Path) -> Path:
    """A new directory for this build's shards, inside the index (a killed build's is deleted
    by the next one: `store.remove_unpublished`)."""
    path = Path(index_dir) / f"{SHARDS_PREFIX}{os.getpid()}-{os.urandom(4).hex()}"
    path.mkdir()
    return path


def shard_schema(db: WriteDB) -> tuple[str, ...]:
    """The statements that create a shard: the graph's tables as this graph has them, the
    shard's own, and the graph's lexical tables when their indexes can be copied as they are
    (`fts_segments.supported`): the worker then tokenizes its rows, not the driver."""
    names = (*SHARD_TABLES, *LEXICAL_TABLES)
    sql = dict(db.execute(f"SELECT name, sql FROM sqlite_master WHERE name IN "
                          f"({','.join('?' * len(names))})", names).fetchall())
    lexical = tuple(sql[name] for name in LEXICAL_TABLES)
    copy = all(fts_segments.supported(statement) for statement in lexical)
    return tuple(sql[name] for name in SHARD_TABLES) + _OWN_TABLES + (lexical if copy else ())


def copies_lexical(schema: tuple[str, ...]) -> bool:
    """Whether shards made by ``schema`` hold FTS5 tables whose segments the merge copies."""
    return any(statement.startswith("CREATE VIRTUAL TABLE") for statement in schema)


@dataclass(frozen=True, slots=True)
class ShardReport:
    """What a worker says of the shard it wrote: where it is, each file's outcome, the highest
    reference id in it, the word counts its tokenizer learned meanwhile, and the task's CPU
    seconds."""

    path: str
    files: list[tuple[str, str, str]]  # (path, status, error)
    refs: int
    learned: tuple[int, list[tuple[str, int]]] | None = None
    cpu: float = 0.0


def open_shard(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    # A shard is thrown away, never repaired: a worker killed while writing it never reported
    # it, so nothing reads it. No journal, no waiting for the disk.
    conn.execute("PRAGMA journal_mode = OFF")
    conn.execute("PRAGMA synchronous = OFF")
    return conn


def write_shard(path: str, schema: tuple[str, ...], gen: int,
                files: list[tuple[int, FileResult]]) -> int:
    """Write the rows of parsed ``files`` (with the ids the driver gave them) into a new shard
    at ``path``; returns its highest reference id. The statements are `graph_write`'s."""
    conn = open_shard(path)
    try:
        conn.execute("BEGIN")
        for statement in schema:
            conn.execute(statement)
        fts = copies_lexical(schema)
        if fts and not all(fts_segments.supported(st) for st in schema
                           if st.startswith("CREATE VIRTUAL TABLE")):
            # A worker elsewhere (Ray) with an SQLite whose FTS5 records differ from the driver's:
            # its segments could not be copied, and a load never mixes copies and tokenizing.
            raise fts_segments.FormatError(
                f"this worker's SQLite {sqlite3.sqlite_version} writes FTS5 records the build "
                "cannot copy: give the workers the driver's SQLite, or build with --jobs 1")
        if fts:
            for table in LEXICAL_TABLES:
                with contextlib.suppress(sqlite3.Error):  # an option of FTS5's: more segments without
                    conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('hashsize', ?)",
                                 [SHARD_HASH_BYTES])
        lexical: list[tuple] = []
        for fid, r in files:
            rows = r.rows
            language = rows.language if rows else language_for_path(r.path)
            conn.execute(
                "INSERT INTO files(id, path, language, module, size, mtime_ns, hash, lines, status, "
                "gen) VALUES (?,?,?,?,?,?,?,?,?,?)",
                [fid, r.path, language, rows.module if rows else None, r.size, r.mtime_ns, r.hash,
                 rows.lines if rows else 0, r.status, gen])
            if rows is None:
                continue
            graph_write.insert_rows(conn, fid, rows, counted=False)
            graph_write.insert_chunks(conn, fid, rows.chunks)
            chunk_table = fts_table("chunks_fts", language)
            lexical.extend((chunk_table, *t) for t in rows.chunk_terms)
            if rows.document is not None:
                lexical.append((fts_table("files_fts", language), fid, *rows.document))
        # By table, then rowid: FTS5 flushes what it holds whenever a rowid goes back, and the
        # merge reads plain rows in this order (it then scans, never sorts).
        lexical.sort(key=lambda row: (row[0], row[1]))
        if fts:
            for table in LEXICAL_TABLES:
                conn.executemany(f"{insert_into(table)} VALUES (?,?,?,?)",
                                 [row[1:] for row in lexical if row[0] == table])
        else:
            conn.executemany("INSERT INTO lexical VALUES (?,?,?,?,?)", lexical)
        crash_point("shard_written")  # tests: a worker killed with its shard unreported
        top = conn.execute("SELECT coalesce(max(id), 0) FROM refs").fetchone()[0]
        conn.execute("COMMIT")
        return top
    finally:
        conn.close()


def _attach(db: WriteDB, path: str) -> None:
    if db.conn.in_transaction:  # ATTACH cannot run inside one
        db.conn.commit()
    db.execute("ATTACH DATABASE ? AS shard", [f"file:{quote(path)}?mode=ro"])


def _detach(db: WriteDB) -> None:
    if db.conn.in_transaction:
        db.conn.commit()
    db.execute("DETACH DATABASE shard")


def merge_parsed(db: WriteDB, path: str, offset: int, copy: bool) -> int:
    """Merge a parsed shard: its files (without their hash and mtime yet), symbols, imports,
    chunks, their lexical rows and its ``inherit`` references, moved by ``offset``; one
    transaction. ``copy`` (one choice per load, `copies_lexical`): the shard's FTS5 segments
    are copied as they are, else its plain lexical rows are tokenized here; the two never mix in
    one load (`fts_segments.transfer` says why). Returns the segments the graph's lexical tables
    hold now, at most (0 when tokenizing)."""
    conn = db.conn
    _attach(db, path)
    try:
        with conn:
            conn.execute("INSERT INTO files SELECT * FROM shard.files")
            # Not complete until its references are merged: no stat or hash of it matches.
            conn.execute("UPDATE files SET hash = NULL, mtime_ns = -1 "
                         "WHERE id IN (SELECT id FROM shard.files)")
            conn.execute("INSERT OR REPLACE INTO symbols SELECT * FROM shard.symbols")
            conn.execute(f"INSERT INTO imports({_IMPORT_COLS}) SELECT {_IMPORT_COLS} "
                         "FROM shard.imports ORDER BY id")
            conn.execute("INSERT INTO chunks SELECT * FROM shard.chunks")
            conn.execute("DELETE FROM vector_tombstones WHERE chunk_id IN (SELECT id FROM shard.chunks)")
            shard_copies = conn.execute("SELECT count(*) FROM shard.sqlite_master WHERE name = ?",
                                        [LEXICAL_TABLES[0]]).fetchone()[0] > 0
            if shard_copies != copy:
                raise fts_segments.FormatError(
                    f"shard {path} has {'FTS5 tables' if shard_copies else 'plain lexical rows'}, "
                    "unlike the rest of this load")
            segments = 0
            for table in LEXICAL_TABLES:
                if copy:  # tokenized by the worker: its segments are copied as they are
                    segments = max(segments, fts_segments.transfer(conn, table, "shard"))
                    continue
                # In rowid order (the shard's rows are sorted): FTS5 flushes what it holds
                # whenever a rowid goes back.
                conn.execute(f"{insert_into(table)} SELECT id, path, "
                             "names, body FROM shard.lexical WHERE tbl = ? ORDER BY rowid", [table])
            conn.execute(f"INSERT INTO refs(id, {_REF_COLS}) SELECT id + ?, {_REF_COLS} "
                         "FROM shard.refs WHERE kind = 'inherit'", [offset])
    finally:
        _detach(db)
    return segments


def resolve_shard(db_file: str, key: str, path: str) -> int:
    """A worker's resolution of a shard's references (all but ``inherit`` ones, which the
    graph holds resolved) against the graph at ``db_file``, read-only (`resolve_with`)."""
    return resolve_with(graph_write.worker_table(db_file, key), path)


def resolve_with(table: SymbolTable, path: str) -> int:
    """Resolve a shard's references but ``inherit`` ones against ``table`` (every symbol of
    the graph, its bases loaded); the resolutions are written beside them, page by page
    (memory follows a page, not the shard). Returns how many were resolved."""
    from indexer.graph.resolve import resolution_rows, resolve_refs

    conn = open_shard(path)
    try:
        conn.execute("BEGIN")
        done = 0
        for refs in graph_write.pages(conn, "SELECT id, file_id, name, kind, receiver, "
                                      "enclosing_id FROM refs WHERE kind != 'inherit'",
                                      graph_write.RESOLVE_PAGE):
            resolved, candidates = [], []
            for ref_id, target, how, confidence, cands in resolution_rows(
                    resolve_refs(table.conn, table, refs)):
                resolved.append((ref_id, target, how, confidence))
                candidates.extend((ref_id, sid, share) for sid, share in cands)
            conn.executemany("INSERT INTO resolved VALUES (?,?,?,?)", resolved)
            conn.executemany("INSERT INTO candidates VALUES (?,?,?)", candidates)
            done += len(refs)
        crash_point("shard_resolved")  # tests: killed with some shards merged, some not
        conn.execute("COMMIT")
        return done
    finally:
        conn.close()


def merge_resolved(db: WriteDB, path: str, offset: int) -> None:
    """Merge a resolved shard: its other references with their resolutions and candidates,
    moved by ``offset``, and its files' hashes and mtimes (which say they are complete); one
    transaction."""
    conn = db.conn
    _attach(db, path)
    try:
        with conn:
            conn.execute(
                f"INSERT INTO refs(id, {_REF_COLS}, target_id, resolution, confidence) "
                f"SELECT r.id + ?, {', '.join('r.' + c.strip() for c in _REF_COLS.split(','))}, "
                "x.target_id, x.resolution, x.confidence FROM shard.refs r "
                "JOIN shard.resolved x ON x.ref_id = r.id ORDER BY r.id", [offset])
            conn.execute("INSERT OR REPLACE INTO ref_candidates SELECT ref_id + ?, symbol_id, "
                         "confidence FROM shard.candidates", [offset])
            conn.execute("UPDATE files SET (hash, mtime_ns) = (SELECT s.hash, s.mtime_ns FROM "
                         "shard.files s WHERE s.id = files.id) WHERE id IN (SELECT id FROM shard.files)")
    finally:
        _detach(db)
