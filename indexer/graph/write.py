"""Writes to the graph, beside the schema in `schema.py`: a parsed file's rows (symbols,
references, imports, chunks and their lexical rows, prepared by the parse worker in `rows.py`),
the deletion of a file, the names whose references must be re-resolved, and the resolutions
themselves. The build's graph phase (`indexer.phases.graph`) decides what to write and when;
every write statement of a build is here.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from operator import itemgetter
from pathlib import Path

from indexer.graph import schema, store
from indexer.graph.lexical import CHUNK_TABLES, FILE_TABLES, fts_table, index_files, insert_into
from indexer.graph.records import BUILD_PHASE
from indexer.graph.resolve import SymbolTable, resolution_rows, resolve_refs
from indexer.graph.store import WriteDB
from indexer.models import Progress
from indexer.parse.languages import language_for_path
from indexer.parse.rows import FileRows
from indexer.parse.worker import FileResult

#: References resolved per page.
RESOLVE_PAGE = 50_000
#: From this many references, a full build resolves in worker processes (`resolve_pending`);
#: each worker first loads every symbol (~0.3 s for the stdlib's 79k).
PARALLEL_MIN = 100_000
#: References per worker task: small enough that the last ones end together.
PARALLEL_PAGE = 20_000
#: The most resolution workers, whatever --jobs says: each holds every symbol in memory, and
#: the single writer writes a page in about half the time a worker takes to resolve it (on
#: the stdlib), so past two or three workers the writer sets the pace.
MAX_RESOLVE_WORKERS = 3
#: Above this share of references needing resolution, load every symbol up front.
PRELOAD_SHARE = 0.05

ProgressFn = Callable[[Progress], None]


def write_results(
    db: WriteDB, results: Iterable[FileResult], existing: dict, gen: int,
    bulk: bool = False,
) -> None:
    """Replace the rows of each changed file; record names whose definitions moved."""
    conn = db.conn
    pending_names: set[str] = set()
    #: (module, name) whose binding in that module's namespace changed: a Python import added,
    #: removed or redirected (see `_pend_importers`).
    exports: set[tuple[str, str]] = set()
    # Full-text rows of the whole batch, inserted at its end in rowid order: FTS5 flushes its
    # pending terms whenever a rowid is lower than the last one written, and chunk ids are
    # hashes, so inserting file by file flushed at almost every file (~2x the FTS cost).
    documents: dict[str, list[tuple]] = {}
    for r in results:
        old = existing.get(r.path)
        if r.status == "unchanged":
            conn.execute("UPDATE files SET mtime_ns = ?, size = ? WHERE path = ?",
                         [r.mtime_ns, r.size, r.path])
            continue
        old_ids: dict[int, str] = {}
        old_imports: set[tuple] = set()
        if old is not None:
            fid = old[0]
            old_ids = dict(conn.execute("SELECT id, name FROM symbols WHERE file_id = ?", [fid]))
            old_imports = set(conn.execute("SELECT module, name, alias FROM imports WHERE file_id = ?", [fid]))
            _delete_file_rows(conn, fid, keep_file=True)
        rows = r.rows
        language = rows.language if rows else language_for_path(r.path)
        module = rows.module if rows else None
        row = conn.execute(
            "INSERT INTO files(path, language, module, size, mtime_ns, hash, lines, status, gen) "
            "VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT(path) DO UPDATE SET language=excluded.language, "
            "module=excluded.module, size=excluded.size, mtime_ns=excluded.mtime_ns, "
            "hash=excluded.hash, lines=excluded.lines, status=excluded.status, gen=excluded.gen "
            "RETURNING id",
            [r.path, language, module, r.size, r.mtime_ns, r.hash, rows.lines if rows else 0, r.status, gen],
        ).fetchone()
        fid = row[0]
        new_ids: dict[int, str] = {}
        new_imports: set[tuple] = set()
        if rows is not None:
            insert_rows(conn, fid, rows)
            new_ids = {s[0]: s[1] for s in rows.symbols}
            new_imports = {i[:3] for i in rows.imports}
            if rows.document is not None:
                documents.setdefault(fts_table("files_fts", language), []).append((fid, *rows.document))
        _replace_chunks(conn, fid, rows, documents)
        for sid in old_ids.keys() ^ new_ids.keys():
            pending_names.add(old_ids.get(sid) or new_ids[sid])
        changed_aliases = {t[2] for t in old_imports ^ new_imports}
        old_module = old[5] if old is not None else None
        if language == "python" and module and old_module == module:
            exports.update((module, alias) for alias in changed_aliases if alias)
        else:
            pending_names.update(changed_aliases)
        if old_module != module and not bulk:  # a bulk build re-resolves every reference anyway
            _touch_importers(conn, {m for m in (old_module, module) if m})
    for table, docs in documents.items():
        docs.sort(key=itemgetter(0))
        conn.executemany(f"{insert_into(table)} VALUES (?,?,?,?)", docs)
    if pending_names:
        conn.executemany("INSERT OR IGNORE INTO pending_names(name) VALUES (?)",
                         [(n,) for n in pending_names])
    if exports and not bulk:  # a bulk build re-resolves every reference anyway
        _pend_importers(conn, exports)


def _pend_importers(conn, exports: set[tuple[str, str]]) -> None:
    """Mark for re-resolution the references that can see a changed import binding.

    A Python file's own references are re-resolved whenever it changes. Elsewhere, a binding
    ``name`` in ``module`` is seen only through an import of it: ``from module import name``
    (under its alias, and on through modules that re-export it), ``from module import *``, or
    an attribute (``module.name``, and the import statement itself, whose receiver is the
    module). So the references marked are: in each file importing a binding of the closure,
    those of the name it binds; and every reference of a closure name that has a receiver.
    References of the same name elsewhere (a local ``Symbol``, a different module's ``sin``)
    cannot change, and stay as they are: resolution follows what changed, not how common the
    name is. (Re-marking every reference of the name, as for a definition, re-resolved 20k of
    sympy's references for imports added in 47 consumer files.)"""
    seen = set(exports)
    frontier = list(exports)
    names: set[str] = set()
    bound: set[tuple[int, str]] = set()
    while frontier:
        module, name = frontier.pop()
        names.add(name)
        rows = conn.execute(
            "SELECT i.file_id, i.name, i.alias, f.module FROM imports i "
            "JOIN files f ON f.id = i.file_id WHERE i.module = ? AND i.name IN (?, '*')",
            [module, name],
        ).fetchall()
        for fid, imported, alias, importer in rows:
            as_name = name if imported == "*" else (alias or name)
            bound.add((fid, as_name))
            if importer and (importer, as_name) not in seen:
                seen.add((importer, as_name))
                frontier.append((importer, as_name))
    conn.executemany(
        "UPDATE refs SET resolution = 'pending' WHERE file_id = ? AND name = ? "
        "AND resolution != 'pending'",
        sorted(bound),
    )
    conn.executemany(
        "UPDATE refs SET resolution = 'pending' WHERE name = ? AND receiver != '' "
        "AND resolution != 'pending'",
        [(n,) for n in sorted(names)],
    )


def _touch_importers(conn, modules: set[str]) -> None:
    """A module appeared or vanished: references in files that import it (or a package above
    it) may now resolve differently — to it, or to nothing outside the index."""
    for m in modules:
        conn.execute(
            "UPDATE refs SET resolution = 'pending' WHERE resolution != 'pending' AND file_id IN "
            "(SELECT file_id FROM imports WHERE module = ?1 OR module || '.' || name = ?1 "
            "OR ?1 LIKE module || '.%')",
            [m],
        )


def insert_rows(conn, fid: int, rows: FileRows, counted: bool = True) -> None:
    """Insert a parsed file's symbols, references and imports (``counted``: added to the
    running totals; a shard has none, the merged graph is recounted)."""
    conn.executemany(
        "INSERT OR REPLACE INTO symbols(id, name, qualname, kind, start_line, end_line, start_byte, "
        "end_byte, signature, doc, parent_id, file_id) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        [(*s, fid) for s in rows.symbols],
    )
    conn.executemany(
        "INSERT INTO refs(name, kind, line, col, receiver, enclosing_id, file_id) VALUES (?,?,?,?,?,?,?)",
        [(*r, fid) for r in rows.refs],
    )
    conn.executemany(
        "INSERT INTO imports(module, name, alias, line, level, file_id) VALUES (?,?,?,?,?,?)",
        [(*i, fid) for i in rows.imports],
    )
    if counted:
        schema.count_inserts(conn, len(rows.refs), sum(s[3] != "module" for s in rows.symbols))


def insert_chunks(conn, fid: int, chunks: Iterable[tuple]) -> None:
    """Insert chunk rows (as `FileRows.chunks` has them) of file ``fid``."""
    conn.executemany(
        "INSERT INTO chunks(id, symbol, kind, start_line, end_line, tokens, header, content_hash, "
        "file_id) VALUES (?,?,?,?,?,?,?,?,?)",
        [(*c, fid) for c in chunks],
    )


def _replace_chunks(conn, fid: int, rows: FileRows | None, documents: dict[str, list[tuple]]) -> None:
    """Swap a file's chunks, keeping rows (and their vectors) whose id is unchanged and
    tombstoning the vectors of chunks that disappeared. The new chunks' full-text rows go to
    ``documents`` (by table), for the caller to insert."""
    old = {row[0] for row in conn.execute("SELECT id FROM chunks WHERE file_id = ?", [fid])}
    chunks, terms = (rows.chunks, rows.chunk_terms) if rows else ([], [])
    gone = old - {c[0] for c in chunks}
    if gone:
        conn.executemany("DELETE FROM chunks WHERE id = ?", [(i,) for i in gone])
        for table in CHUNK_TABLES:  # a file skipped now has no language to say which
            conn.executemany(f"DELETE FROM {table} WHERE rowid = ?", [(i,) for i in gone])
        conn.executemany("INSERT OR IGNORE INTO vector_tombstones VALUES (?)", [(i,) for i in gone])
    added = [(c, t) for c, t in zip(chunks, terms, strict=True) if c[0] not in old]
    insert_chunks(conn, fid, (c for c, _ in added))
    if added:
        table = fts_table("chunks_fts", rows.language if rows else None)
        documents.setdefault(table, []).extend(t for _, t in added)
        conn.executemany("DELETE FROM vector_tombstones WHERE chunk_id = ?", [(c[0],) for c, _ in added])


def _delete_file_rows(conn, fid: int, keep_file: bool = False) -> None:
    conn.execute("DELETE FROM ref_candidates WHERE ref_id IN (SELECT id FROM refs WHERE file_id = ?)", [fid])
    conn.execute("DELETE FROM refs WHERE file_id = ?", [fid])
    conn.execute("DELETE FROM symbols WHERE file_id = ?", [fid])
    conn.execute("DELETE FROM imports WHERE file_id = ?", [fid])
    for table in FILE_TABLES:  # a rewritten file's document comes with its rows
        conn.execute(f"DELETE FROM {table} WHERE rowid = ?", [fid])
    if not keep_file:
        ids = [(row[0],) for row in conn.execute("SELECT id FROM chunks WHERE file_id = ?", [fid])]
        for table in CHUNK_TABLES:
            conn.executemany(f"DELETE FROM {table} WHERE rowid = ?", ids)
        conn.executemany("INSERT OR IGNORE INTO vector_tombstones VALUES (?)", ids)
        conn.execute("DELETE FROM chunks WHERE file_id = ?", [fid])
        conn.execute("DELETE FROM files WHERE id = ?", [fid])


def delete_files(db: WriteDB, existing: dict, paths: Iterable[str]) -> None:
    conn = db.conn
    names: set[str] = set()
    for path in paths:
        fid = existing[path][0]
        names.update(r[0] for r in conn.execute("SELECT name FROM symbols WHERE file_id = ?", [fid]))
        names.update(r[0] for r in conn.execute("SELECT alias FROM imports WHERE file_id = ?", [fid]))
        _delete_file_rows(conn, fid)
        if existing[path][5]:
            _touch_importers(conn, {existing[path][5]})
    conn.executemany("INSERT OR IGNORE INTO pending_names(name) VALUES (?)", [(n,) for n in names])


def resolve_pending(db: WriteDB, full: bool, progress: ProgressFn | None, jobs: int = 1,
                    tree: str | os.PathLike | None = None) -> None:
    """Resolve new references and those whose target names changed, inherit edges first
    (member lookups through base classes need them).

    A full build with many references resolves the others in ``jobs`` worker processes
    (`resolve_page`, each with every symbol in memory) while this process writes what
    they return: resolution is the build's longest serial phase otherwise (~4 s of the
    stdlib's ~20). The workers read the committed inherit edges; what they return is what
    this process would have computed (the same table, the same resolver). ``tree`` (the
    indexed tree) is kept off the workers' path (`indexer.safety.isolation`)."""
    conn = db.conn
    total = schema.counts(db).get("refs") or conn.execute("SELECT count(*) FROM refs").fetchone()[0]
    cols = "SELECT id, file_id, name, kind, receiver, enclosing_id FROM refs"
    # Two indexed lookups (new references; references to changed names), not one scan.
    select = (
        f"SELECT * FROM ({cols})" if full else
        f"SELECT * FROM ({cols} WHERE resolution = 'pending' UNION "
        f"{cols} WHERE name IN (SELECT name FROM pending_names))"
    )
    count = total if full else conn.execute(f"SELECT count(*) FROM ({select})").fetchone()[0]
    parallel = full and jobs > 1 and count >= PARALLEL_MIN and db.file is not None
    table = SymbolTable(conn)
    # The workers load every symbol themselves; this process resolves only the few inherit
    # edges then, through the lazy table (the same answers, tested by the incremental builds).
    if count and (full or count > total * PRELOAD_SHARE) and not parallel:
        table.preload()
    done = 0

    def step(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress(Progress("resolve", done, count))

    def here(inherit_passes: tuple[bool, ...]) -> None:
        for inherit in inherit_passes:
            where = " WHERE kind = 'inherit'" if inherit else " WHERE kind != 'inherit'"
            for rows in pages(conn, select + where, RESOLVE_PAGE):
                _apply(conn, resolution_rows(resolve_refs(conn, table, rows)))
                step(len(rows))
            if inherit and table.preloaded:
                table.load_bases()

    if not parallel:
        with conn:
            here((True, False))
            conn.execute("DELETE FROM pending_names")
        return
    from indexer.safety.lifetime import (  # only a full build of many references
        in_flight,
        spawn_pool,
    )

    n = min(jobs, MAX_RESOLVE_WORKERS)
    db_file, key = str(db.file), f"{db.file}:{os.getpid()}:{time.time_ns()}"  # this build's
    with spawn_pool(n, tree) as pool:  # first: the workers load the symbols meanwhile
        for _ in range(n):
            pool.submit(resolve_page, db_file, key, [])
        with conn:
            here((True,))
        with conn:  # the inherit edges are committed: the workers read them
            others = pages(conn, select + " WHERE kind != 'inherit'", PARALLEL_PAGE)
            calls = ((db_file, key, rows) for rows in others)
            for resolved in in_flight(pool, resolve_page, calls, n * 2):
                _apply(conn, resolved)
                step(len(resolved))
            conn.execute("DELETE FROM pending_names")


def resolve_inherit(db: WriteDB) -> int:
    """Resolve the graph's pending ``inherit`` references through a lazy table: a sharded load's
    (`indexer.graph.shards`), before its workers resolve the others against these edges, as the
    parallel resolution above does. Returns how many."""
    conn = db.conn
    table = SymbolTable(conn)
    sql = ("SELECT id, file_id, name, kind, receiver, enclosing_id FROM refs "
           "WHERE kind = 'inherit' AND resolution = 'pending'")
    done = 0
    with conn:
        for rows in pages(conn, sql, RESOLVE_PAGE):
            _apply(conn, resolution_rows(resolve_refs(conn, table, rows)))
            done += len(rows)
    return done


def pages(conn, sql: str, size: int) -> Iterator[list[tuple]]:
    """The rows of ``sql`` (whose first column is the id) in pages of ``size``, by id: pages
    keep memory flat (millions of rows would not fit in 1 GB)."""
    sql += " AND id > ? ORDER BY id LIMIT ?"
    last = -1
    while rows := conn.execute(sql, [last, size]).fetchall():
        last = rows[-1][0]
        yield rows


#: A resolution worker's table (`resolve_page`): [key, table, whether its bases are loaded].
_WORKER_TABLE: list = []


def resolve_page(db_file: str, key: str, rows: list[tuple]) -> list[tuple]:
    """A worker process's page of a full build's resolution (`resolve_pending`): ``rows`` as
    `resolve.resolve_refs` takes them, resolved against every symbol of ``db_file`` (read once
    per ``key``, one build's resolution); returns `resolve.resolution_rows`. An empty page
    only loads the symbols: a warm-up sent while the inherit edges, which the first real page
    loads, are still being resolved."""
    if not rows:
        warm_table(db_file, key)
        return []
    table = worker_table(db_file, key)
    return list(resolution_rows(resolve_refs(table.conn, table, rows)))


def warm_table(db_file: str, key: str) -> SymbolTable:
    """This worker's table of every symbol of ``db_file`` for the build ``key`` (read once per
    build), without its base classes (the inherit edges may still be being resolved)."""
    if not _WORKER_TABLE or _WORKER_TABLE[0] != key:
        _WORKER_TABLE.clear()
        table = SymbolTable(store.read_file(Path(db_file)).conn)
        table.preload()
        _WORKER_TABLE.extend((key, table, False))
    return _WORKER_TABLE[1]


def worker_table(db_file: str, key: str) -> SymbolTable:
    """`warm_table` with the base classes loaded: the inherit edges are committed by now."""
    table = warm_table(db_file, key)
    if not _WORKER_TABLE[2]:
        table.load_bases()
        _WORKER_TABLE[2] = True
    return table


def _apply(conn, resolved: Iterable[tuple]) -> None:
    """Write (ref id, target id, resolution, confidence, candidates) rows."""
    updates, cands, ids = [], [], []
    for ref_id, target_id, resolution, confidence, candidates in resolved:
        updates.append((target_id, resolution, confidence, ref_id))
        ids.append((ref_id,))
        cands.extend((ref_id, sid, conf) for sid, conf in candidates)
        if len(updates) >= 50_000:
            _flush(conn, updates, ids, cands)
            updates, cands, ids = [], [], []
    _flush(conn, updates, ids, cands)


def _flush(conn, updates, ids, cands) -> None:
    conn.executemany("DELETE FROM ref_candidates WHERE ref_id = ?", ids)
    conn.executemany("UPDATE refs SET target_id = ?, resolution = ?, confidence = ? WHERE id = ?", updates)
    conn.executemany("INSERT OR REPLACE INTO ref_candidates VALUES (?,?,?)", cands)


def chunk_ids(conn) -> set[int]:
    return {row[0] for row in conn.execute("SELECT id FROM chunks")}


def tombstone(conn, chunk_ids: Iterable[int]) -> None:
    """Mark the vectors of these chunks for deletion (the embedding phase deletes them)."""
    conn.executemany("INSERT OR IGNORE INTO vector_tombstones VALUES (?)", [(i,) for i in chunk_ids])


def index_all_files(conn) -> None:
    """Whole-file lexical rows for every file (an index from before migration m004)."""
    index_files(conn, [row[0] for row in conn.execute("SELECT id FROM files")])
    conn.execute("DELETE FROM meta WHERE key = 'files_fts_pending'")


def resolution_pending(conn) -> bool:
    """Whether names or references await resolution (from this build or a killed one)."""
    return bool(conn.execute(
        "SELECT EXISTS(SELECT 1 FROM pending_names) "
        "OR EXISTS(SELECT 1 FROM refs WHERE resolution = 'pending')"
    ).fetchone()[0])


def set_build_phase(conn, phase: str | None) -> None:
    """Record (in its own transaction, so readers see it at once) the phase a build is in;
    None when it is done."""
    with conn:
        if phase is None:
            conn.execute("DELETE FROM meta WHERE key = ?", [BUILD_PHASE])
        else:
            state = {"phase": phase, "pid": os.getpid(), "since": round(time.time(), 3)}
            conn.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                [BUILD_PHASE, json.dumps(state)],
            )
