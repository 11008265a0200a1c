"""Audit an index against the tree and against itself, and repair what the audit finds.

`verify` checks that the files table matches the tree (by stat, like a build), that every row
points at rows that exist (symbols, references, candidates, chunks, the lexical index), that no
name or reference is left awaiting resolution, and, when the index has vectors, that every
embedded chunk has exactly one vector of the recorded model and that no vector is orphaned.

`repair` never patches results in place: it turns each finding into work for the normal
incremental path (a file to re-parse, a reference to re-resolve, a chunk to re-embed, a vector
to delete) and runs a build, so a repaired index is what a build would have produced.

Damage below that level is detected too: a graph file SQLite cannot read (`PRAGMA quick_check`,
and any SQLite "malformed"/"not a database" error on the way) or one that is not a repoctx
index makes `verify` raise IndexDamagedError, and `repair` set the file aside and rebuild from
scratch (vectors are reused by content hash); a vector table LanceDB cannot read is reported as
`vector_table_damaged`, and `repair` sets it aside and embeds every chunk again.

Run against a live index, findings can be transient (a build in progress, a file saved a moment
ago); each check reads one consistent SQLite snapshot, but the tree moves on its own.

Size: every check has its repair beside it, so a new check cannot ship without the way to fix what
it finds.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from indexer.build import build
from indexer.config import Config
from indexer.errors import IndexDamagedError, VectorTableDamagedError
from indexer.graph import store
from indexer.graph.generations import unpublished_chunk_ids
from indexer.graph.lexical import CHUNK_TABLES
from indexer.lock import WriteLock
from indexer.models import BuildStats
from indexer.parse.discovery import discover
from indexer.parse.languages import language_for_file
from indexer.parse.modules import module_name, package_dirs
from indexer.state import vector_table_model

MAX_EXAMPLES = 5
_IN = 500  # ids per `IN (...)`


@dataclass(frozen=True, slots=True)
class Issue:
    """One kind of inconsistency, how many rows or files show it, and what repair does."""

    kind: str
    count: int
    message: str
    repair: str
    examples: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class VerifyReport:
    index_dir: str
    generation: int
    #: Inconsistencies: `ok` is False while there are any.
    issues: tuple[Issue, ...]
    #: Consistent states that are still waiting for work (e.g. chunks not embedded yet).
    notes: tuple[Issue, ...]
    #: Rows (or files) each check looked at.
    checked: dict[str, int] = field(default_factory=dict)
    vectors_checked: bool = False
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.issues

    def kinds(self) -> set[str]:
        return {i.kind for i in self.issues}


@dataclass(frozen=True, slots=True)
class RepairReport:
    before: VerifyReport
    after: VerifyReport
    actions: tuple[str, ...]
    build: BuildStats | None = None


# --------------------------------------------------------------------------- findings

_TEXT = {
    "missing_file": ("indexable files on disk have no row in the index", "parse them"),
    "extra_file": ("indexed files no longer exist (or are now ignored)", "drop their rows"),
    "stale_file": ("files changed on disk since they were indexed", "re-parse them"),
    "orphan_symbol": (
        "symbols of files that are not in the index",
        "delete; re-resolve their names",
    ),
    "orphan_ref": ("references of files that are not in the index", "delete them"),
    "orphan_import": ("imports of files that are not in the index", "delete them"),
    "orphan_chunk": ("chunks of files that are not in the index", "delete them and their vectors"),
    "dangling_target": ("references resolved to symbols that do not exist", "re-resolve them"),
    "dangling_candidate": (
        "ambiguous-reference candidates naming missing symbols or references",
        "re-resolve the references",
    ),
    "missing_enclosing": (
        "references whose enclosing symbol does not exist",
        "re-parse their files",
    ),
    "pending_names": ("names left awaiting re-resolution (a build was interrupted)", "resolve"),
    "pending_refs": ("references left unresolved (a build was interrupted)", "resolve"),
    "fts_missing": ("chunks missing from the lexical index", "re-chunk their files"),
    "fts_orphan": ("lexical-index rows of chunks that do not exist", "delete them"),
    "vector_model_mismatch": (
        "the vector table holds another model or dimension than the index records",
        "re-embed every chunk",
    ),
    "missing_vector": ("chunks marked embedded have no vector", "embed them again"),
    "duplicate_vector": ("chunks have more than one vector", "replace them with one"),
    "wrong_model_vector": ("vectors of another model than the index records", "re-embed them"),
    "orphan_vector": ("vectors of chunks that do not exist", "delete them"),
    "vector_table_damaged": (
        "the vector table cannot be read",
        "set it aside and embed every chunk again",
    ),
    "damaged_index": (
        "the graph database is damaged",
        "set it aside and rebuild from scratch (vectors are reused by content hash)",
    ),
    # notes: consistent, waiting for work
    "unembedded_chunks": ("chunks have no vector yet", "run the embedding phase"),
    "tombstoned_vectors": ("vectors of deleted chunks await removal", "run the embedding phase"),
    "rebuild_vectors": (
        "vectors of a full rebuild not swapped in yet (running, or interrupted)",
        "run a build: it uses them",
    ),
}


class _Findings:
    def __init__(self) -> None:
        self.issues: list[Issue] = []
        self.notes: list[Issue] = []
        self.ids: dict[str, list] = {}  # kind -> affected ids/paths (all of them, for repair)

    def add(self, kind: str, items: Iterable, note: bool = False) -> None:
        items = list(items)
        if not items:
            return
        message, repair = _TEXT[kind]
        examples = tuple(str(x) for x in sorted(items, key=str)[:MAX_EXAMPLES])
        (self.notes if note else self.issues).append(
            Issue(kind, len(items), message, repair, examples)
        )
        self.ids[kind] = items


# --------------------------------------------------------------------------- verify


def verify(config: Config) -> VerifyReport:
    """Audit the index at ``config.index_path`` (read-only; never waits for a writer)."""
    report, _ = _audit(config)
    return report


def _audit(config: Config) -> tuple[VerifyReport, _Findings]:
    t0 = time.perf_counter()
    db = store.open_for_read(config.index_path)
    conn = db.conn
    found = _Findings()
    checked: dict[str, int] = {}
    try:
        store.quick_check(db, config.index_path)  # every page: damage the queries below skip
        conn.execute("BEGIN")  # one snapshot for every query below, even while a build commits
        generation = int(store.get_meta(db, "generation", "0") or 0)
        _check_files(config, conn, found, checked)
        _check_graph(conn, found, checked)
        _check_chunks(conn, found, checked)
        vectors_checked = _check_vectors(config, db, found, checked)
        conn.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        if store.is_damage(exc):
            raise store.damaged(config.index_path, exc) from exc
        raise
    finally:
        conn.close()
    report = VerifyReport(
        index_dir=str(config.index_path),
        generation=generation,
        issues=tuple(found.issues),
        notes=tuple(found.notes),
        checked=checked,
        vectors_checked=vectors_checked,
        seconds=round(time.perf_counter() - t0, 3),
    )
    return report, found


def _check_files(config: Config, conn, found: _Findings, checked: dict) -> None:
    disc = discover(config, skip_unparsable=True)
    root = os.path.join(str(config.root), "")
    candidates = [(f, lang) for f in disc.files if (lang := language_for_file(f.path, root + f.path))]
    packages = package_dirs(f.path for f, _ in candidates)
    indexed = {
        path: (size, mtime, module)
        for path, size, mtime, module in conn.execute(
            "SELECT path, size, mtime_ns, module FROM files"
        )
    }
    missing, stale = [], []
    for f, lang in candidates:
        row = indexed.get(f.path)
        if row is None:
            missing.append(f.path)
        elif (row[0], row[1]) != (f.size, f.mtime_ns) or (
            row[2] is not None and row[2] != module_name(f.path, lang, packages)
        ):
            stale.append(f.path)
    on_disk = {f.path for f, _ in candidates}
    found.add("missing_file", missing)
    found.add("extra_file", [p for p in indexed if p not in on_disk])
    found.add("stale_file", stale)
    checked["files"] = len(indexed)


def _ids(conn, sql: str) -> list:
    return [r[0] for r in conn.execute(sql)]


def _check_graph(conn, found: _Findings, checked: dict) -> None:
    no_file = "file_id NOT IN (SELECT id FROM files)"
    found.add("orphan_symbol", _ids(conn, f"SELECT id FROM symbols WHERE {no_file}"))
    found.add("orphan_ref", _ids(conn, f"SELECT id FROM refs WHERE {no_file}"))
    found.add("orphan_import", _ids(conn, f"SELECT id FROM imports WHERE {no_file}"))
    found.add("orphan_chunk", _ids(conn, f"SELECT id FROM chunks WHERE {no_file}"))
    found.add(
        "dangling_target",
        _ids(
            conn,
            "SELECT id FROM refs WHERE target_id IS NOT NULL "
            "AND target_id NOT IN (SELECT id FROM symbols)",
        ),
    )
    found.add(
        "dangling_candidate",
        _ids(
            conn,
            "SELECT DISTINCT ref_id FROM ref_candidates WHERE "
            "symbol_id NOT IN (SELECT id FROM symbols) OR ref_id NOT IN (SELECT id FROM refs)",
        ),
    )
    found.add(
        "missing_enclosing",
        _ids(
            conn,
            "SELECT id FROM refs WHERE enclosing_id IS NULL "
            "OR enclosing_id NOT IN (SELECT id FROM symbols)",
        ),
    )
    found.add("pending_names", _ids(conn, "SELECT name FROM pending_names"))
    found.add("pending_refs", _ids(conn, "SELECT id FROM refs WHERE resolution = 'pending'"))
    checked["symbols"] = conn.execute("SELECT count(*) FROM symbols WHERE kind != 'module'").fetchone()[0]
    checked["references"] = conn.execute("SELECT count(*) FROM refs").fetchone()[0]


def _check_chunks(conn, found: _Findings, checked: dict) -> None:
    chunk_ids = set(_ids(conn, "SELECT id FROM chunks"))
    fts_ids = set(_ids(conn, " UNION ALL ".join(f"SELECT rowid FROM {t}" for t in CHUNK_TABLES)))
    found.add("fts_missing", chunk_ids - fts_ids)
    found.add("fts_orphan", fts_ids - chunk_ids)
    checked["chunks"] = len(chunk_ids)


def _check_vectors(config: Config, db, found: _Findings, checked: dict) -> bool:
    """Compare embedded chunks with the vector table; False when the index has no vectors."""
    conn = db.conn
    model = store.get_meta(db, "embed_model")
    dim_text = store.get_meta(db, "embed_dim")
    embedded = set(_ids(conn, "SELECT id FROM chunks WHERE embedded = 1"))
    if not model:
        if embedded:  # marked embedded, but no vector store was ever recorded
            found.add("missing_vector", embedded)
        return False
    dim = int(dim_text or 0)
    try:
        rows = _vector_rows(config, conn)
    except VectorTableDamagedError as exc:  # a data file or manifest lost or garbled, a file
        found.add("vector_table_damaged", [exc.reason[:200]])  # or link in its place...
        return True
    except (RuntimeError, ValueError, OSError) as exc:  # object storage: what Lance said
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        found.add("vector_table_damaged", [first[:200]])
        return True
    if rows is None:  # the table is gone
        found.add("missing_vector", embedded)
        return True
    table_model, table_dim, ids, models = rows
    if (table_model, table_dim) != (model, dim):
        found.add(
            "vector_model_mismatch", [f"{table_model} ({table_dim} dims) != {model} ({dim} dims)"]
        )
        return True
    all_chunks = set(_ids(conn, "SELECT id FROM chunks"))
    counts = Counter(ids)
    present = {int(i) for i in counts if i.isdigit()}
    tombstoned = set(_ids(conn, "SELECT chunk_id FROM vector_tombstones"))
    found.add("missing_vector", embedded - present)
    found.add("duplicate_vector", [i for i, n in counts.items() if n > 1])
    found.add(
        "wrong_model_vector", sorted({i for i, m in zip(ids, models, strict=True) if m != model})
    )
    orphans = [i for i in counts if not i.isdigit() or int(i) not in all_chunks]
    # A full rebuild embeds its new chunks before it swaps its graph in (or was killed after
    # that): their vectors are not orphans, the next build uses them.
    rebuilding = unpublished_chunk_ids(config.index_path) if orphans else set()
    found.add("rebuild_vectors", [i for i in orphans if i.isdigit() and int(i) in rebuilding],
              note=True)
    orphans = [i for i in orphans if not i.isdigit() or int(i) not in rebuilding]
    found.add("orphan_vector", [i for i in orphans if not i.isdigit() or int(i) not in tombstoned])
    found.add(
        "tombstoned_vectors",
        [i for i in orphans if i.isdigit() and int(i) in tombstoned],
        note=True,
    )
    found.add("unembedded_chunks", all_chunks - embedded, note=True)
    checked["vectors"] = len(ids)
    return True


def _vector_rows(config: Config, conn) -> tuple[str, int, list[str], list[str]] | None:
    """(model, dim, chunk id per row, model per row) read from the raw table, so duplicate rows
    (which `VectorStore.chunk_ids()` folds into a set) show; None when there is no table."""
    from indexer.locations import vectors_uri
    from indexer.vectors.table import raw_dataset, reading, recorded_model

    dataset = raw_dataset(config, conn)
    if dataset is None:
        return None
    model, dim = recorded_model(dataset)
    with reading(vectors_uri(config, conn)):  # reads every data file: damage shows here
        data = dataset.to_table(columns=["chunk_id", "model"])
    return model, dim, data["chunk_id"].to_pylist(), data["model"].to_pylist()


# --------------------------------------------------------------------------- repair


def repair(
    config: Config,
    *,
    wait_lock: float = 30.0,
    embedder=None,
    progress: Callable | None = None,
) -> RepairReport:
    """Fix what `verify` finds through the incremental path, then verify again. A damaged
    graph is set aside (renamed, kept) and rebuilt from scratch instead."""
    try:
        return _repair(config, wait_lock, embedder, progress)
    except IndexDamagedError as exc:
        return _rebuild_damaged(config, exc, wait_lock, embedder, progress)


def _repair(config: Config, wait_lock: float, embedder, progress: Callable | None) -> RepairReport:
    actions: list[str] = []
    store.open_for_read(config.index_path).conn.close()  # no index: say so before locking
    # Audit under the write lock, so no build changes the index between finding and fixing.
    with WriteLock(config.index_path).acquire(wait_lock):
        before, found = _audit(config)
        if before.ok and not found.notes:
            return RepairReport(before, before, ())
        db = store.open_for_write(config.index_path)
        try:
            with db.conn:
                actions += _repair_graph(db.conn, found)
            vec_actions, reembed = _repair_vectors(config, db, found)
            actions += vec_actions
            model = store.get_meta(db, "embed_model")
        finally:
            db.conn.close()
    # The write lock is not reentrant: `build` takes it again itself.
    embed = bool(model)
    if embed and embedder is None:
        from indexer.vectors.embed import create_embedder

        embedder = create_embedder(model, batch_size=config.embed_batch_size)
    stats = build(
        config,
        wait_lock=wait_lock,
        progress=progress,
        embed=embed,
        embedder=embedder,
        reembed=reembed,
    )
    actions.append(
        f"incremental build: {stats.files_parsed} files parsed, {stats.files_deleted} removed"
        + (f", {stats.embedding.get('embedded', 0)} chunks embedded" if stats.embedding else "")
    )
    after = verify(config)
    return RepairReport(before, after, tuple(actions), stats)


def _rebuild_damaged(
    config: Config, exc: IndexDamagedError, wait_lock: float, embedder, progress: Callable | None
) -> RepairReport:
    """Set the damaged graph aside and build the index again from scratch, with vectors when it
    had them (reused by content hash: nothing already embedded is embedded again)."""
    message, fix = _TEXT["damaged_index"]
    before = VerifyReport(
        index_dir=str(config.index_path),
        generation=0,
        issues=(Issue("damaged_index", 1, f"{message} ({exc.reason})", fix, (exc.reason,)),),
        notes=(),
    )
    model = store.readable_meta(config.index_path).get("embed_model")
    if not model:  # the graph is too damaged to say: its vector table says (or there is none)
        model = (vector_table_model(config) or (None, 0))[0]
    if model and embedder is None:
        from indexer.vectors.embed import create_embedder

        embedder = create_embedder(model, batch_size=config.embed_batch_size)
    notices: list[str] = []
    stats = build(
        config,
        full=True,
        wait_lock=wait_lock,
        progress=progress,
        embed=bool(model),
        embedder=embedder,
        notify=notices.append,
    )
    e = stats.embedding
    actions = [
        *notices,
        f"full build: {stats.files_parsed} files parsed"
        + (f", {e.get('embedded', 0)} chunks embedded, {e.get('reused', 0)} vectors reused"
           if e else ""),
    ]
    return RepairReport(before, verify(config), tuple(actions), stats)


def _batched(ids: list, size: int = _IN) -> Iterable[list]:
    for i in range(0, len(ids), size):
        yield ids[i : i + size]


def _force_reparse(conn, file_ids: Iterable[int]) -> int:
    """Make the next build re-read these files (a stat that never matches, no content hash)."""
    ids = sorted(set(file_ids))
    conn.executemany("UPDATE files SET size = -1, hash = NULL WHERE id = ?", [(i,) for i in ids])
    return len(ids)


def _files_of(conn, table: str, ids: list) -> set[int]:
    out: set[int] = set()
    for batch in _batched(ids):
        marks = ",".join("?" * len(batch))
        out.update(
            r[0] for r in conn.execute(f"SELECT file_id FROM {table} WHERE id IN ({marks})", batch)
        )
    return out


def _delete_chunks(conn, ids: list) -> None:
    rows = [(i,) for i in ids]
    conn.executemany("DELETE FROM chunks WHERE id = ?", rows)
    for table in CHUNK_TABLES:
        conn.executemany(f"DELETE FROM {table} WHERE rowid = ?", rows)
    conn.executemany("INSERT OR IGNORE INTO vector_tombstones VALUES (?)", rows)


def _mark_pending(conn, ref_ids: list) -> None:
    rows = [(i,) for i in ref_ids]
    conn.executemany("DELETE FROM ref_candidates WHERE ref_id = ?", rows)
    conn.executemany(
        "UPDATE refs SET target_id = NULL, resolution = 'pending', confidence = 0 WHERE id = ?",
        rows,
    )


def _repair_graph(conn, found: _Findings) -> list[str]:
    ids = found.ids
    actions = []
    if "orphan_symbol" in ids:
        sym = ids["orphan_symbol"]
        names = set()
        for batch in _batched(sym):
            marks = ",".join("?" * len(batch))
            names.update(
                r[0] for r in conn.execute(f"SELECT name FROM symbols WHERE id IN ({marks})", batch)
            )
        conn.executemany("DELETE FROM symbols WHERE id = ?", [(i,) for i in sym])
        # References that pointed at them resolve to what remains.
        conn.executemany(
            "INSERT OR IGNORE INTO pending_names(name) VALUES (?)", [(n,) for n in names]
        )
        actions.append(f"deleted {len(sym)} orphan symbols; {len(names)} names to re-resolve")
    if "orphan_ref" in ids:
        refs = [(i,) for i in ids["orphan_ref"]]
        conn.executemany("DELETE FROM ref_candidates WHERE ref_id = ?", refs)
        conn.executemany("DELETE FROM refs WHERE id = ?", refs)
        actions.append(f"deleted {len(refs)} orphan references")
    if "orphan_import" in ids:
        conn.executemany("DELETE FROM imports WHERE id = ?", [(i,) for i in ids["orphan_import"]])
        actions.append(f"deleted {len(ids['orphan_import'])} orphan imports")
    if "orphan_chunk" in ids:
        _delete_chunks(conn, ids["orphan_chunk"])
        actions.append(f"deleted {len(ids['orphan_chunk'])} orphan chunks")
    dangling = sorted(set(ids.get("dangling_target", [])) | set(ids.get("dangling_candidate", [])))
    if dangling:
        conn.execute("DELETE FROM ref_candidates WHERE ref_id NOT IN (SELECT id FROM refs)")
        _mark_pending(conn, dangling)
        actions.append(f"marked {len(dangling)} references with missing targets for re-resolution")
    if "missing_enclosing" in ids:
        n = _force_reparse(conn, _files_of(conn, "refs", ids["missing_enclosing"]))
        actions.append(f"{n} files with references outside any symbol to re-parse")
    if "fts_missing" in ids:
        chunk_ids = ids["fts_missing"]
        files = _files_of(conn, "chunks", chunk_ids)
        _delete_chunks(conn, chunk_ids)
        n = _force_reparse(conn, files)
        actions.append(f"{n} files with chunks missing from the lexical index to re-chunk")
    if "fts_orphan" in ids:
        for table in CHUNK_TABLES:
            conn.executemany(f"DELETE FROM {table} WHERE rowid = ?", [(i,) for i in ids["fts_orphan"]])
        actions.append(f"deleted {len(ids['fts_orphan'])} orphan lexical-index rows")
    return actions


def _repair_vectors(config: Config, db, found: _Findings) -> tuple[list[str], bool]:
    """Delete bad vectors and mark their chunks unembedded; the build's embedding phase then
    gives every chunk exactly one vector. Returns (actions, whether to re-embed everything)."""
    ids = found.ids
    conn = db.conn
    if "vector_model_mismatch" in ids:  # kept, like a damaged one: it may be someone's
        where = _set_aside_vectors(config, conn)
        return [f"the vector table holds another model: set it aside ({where}); "
                "re-embedding every chunk"], True
    if "vector_table_damaged" in ids:
        where = _set_aside_vectors(config, conn)
        with conn:
            n = conn.execute("UPDATE chunks SET embedded = 0").rowcount
        return [f"set the unreadable vector table aside ({where}); {n} chunks to embed again"], False
    actions: list[str] = []
    drop = sorted(
        set(ids.get("orphan_vector", []))
        | set(ids.get("duplicate_vector", []))
        | set(ids.get("wrong_model_vector", []))
    )
    if drop:
        from indexer.vectors.table import open_vectors

        model = store.get_meta(db, "embed_model") or ""
        dim = int(store.get_meta(db, "embed_dim", "0") or 0)
        open_vectors(config, db.conn, dim, model).delete_chunk_ids(drop)
        actions.append(f"deleted the vectors of {len(drop)} chunk ids")
    reembed = sorted({int(i) for i in drop if i.isdigit()} | set(ids.get("missing_vector", [])))
    if reembed:
        with conn:
            conn.executemany("UPDATE chunks SET embedded = 0 WHERE id = ?", [(i,) for i in reembed])
        actions.append(f"{len(reembed)} chunks to embed again")
    return actions, False


def _set_aside_vectors(config: Config, conn) -> str:
    """Move an unreadable local vector table out of the way (kept for inspection), or drop
    one on object storage; says which."""
    from indexer.locations import is_remote, storage_options, vectors_uri
    from indexer.vectors.table import TABLE, set_aside

    uri = vectors_uri(config, conn)
    if not is_remote(uri):
        return f"moved to {set_aside(uri)}"
    import lancedb

    lancedb.connect(uri, storage_options=storage_options(config)).drop_table(TABLE)
    return f"dropped at {uri}"
