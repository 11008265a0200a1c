"""The SQLite graph: schema, numbered migrations, connections.

`graph.db` is the source of truth for which files, symbols, references and chunks exist.
WAL mode lets any number of readers query while one writer builds.

Size: the schema, its numbered migrations, generations and connection handling change together (a
migration and the code that reads its tables are reviewed as one); shared reads of the reference
graph are in graph.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:  # imported by writers only: it costs ~130 ms, more than a whole `symbol` query
    import sqlite_utils

from indexer.errors import IndexDamagedError, NoIndexError, SchemaError

SCHEMA_VERSION = 5


def _m001_initial(db: sqlite_utils.Database) -> None:
    db.executescript(
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
        CREATE TABLE files (
            id INTEGER PRIMARY KEY,
            path TEXT NOT NULL UNIQUE,
            language TEXT,
            module TEXT,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            hash TEXT,
            lines INTEGER NOT NULL DEFAULT 0,
            status TEXT NOT NULL,          -- ok | syntax_error | skipped:<reason> | failed
            gen INTEGER NOT NULL
        );
        CREATE INDEX files_module ON files(module);
        CREATE TABLE symbols (
            id INTEGER PRIMARY KEY,         -- stable: hash of path, qualname, kind, occurrence
            file_id INTEGER NOT NULL,
            name TEXT NOT NULL,
            qualname TEXT NOT NULL,         -- module-qualified
            kind TEXT NOT NULL,
            start_line INTEGER NOT NULL,
            end_line INTEGER NOT NULL,
            start_byte INTEGER NOT NULL,
            end_byte INTEGER NOT NULL,
            signature TEXT NOT NULL DEFAULT '',
            doc TEXT NOT NULL DEFAULT '',
            parent_id INTEGER
        );
        CREATE INDEX symbols_name ON symbols(name);
        CREATE INDEX symbols_qualname ON symbols(qualname);
        CREATE INDEX symbols_file ON symbols(file_id);
        CREATE INDEX symbols_parent ON symbols(parent_id);
        CREATE TABLE refs (
            id INTEGER PRIMARY KEY,
            file_id INTEGER NOT NULL,
            name TEXT NOT NULL,
            kind TEXT NOT NULL,             -- call | import | inherit | type | attribute
            line INTEGER NOT NULL,
            col INTEGER NOT NULL,
            receiver TEXT NOT NULL DEFAULT '',
            enclosing_id INTEGER,
            target_id INTEGER,              -- best target; NULL when unresolved or ambiguous
            resolution TEXT NOT NULL DEFAULT 'pending',
            confidence REAL NOT NULL DEFAULT 0
        );
        -- candidates of ambiguous references: the name is kept, confidence split
        CREATE TABLE ref_candidates (
            ref_id INTEGER NOT NULL,
            symbol_id INTEGER NOT NULL,
            confidence REAL NOT NULL,
            PRIMARY KEY (ref_id, symbol_id)
        ) WITHOUT ROWID;
        CREATE INDEX ref_candidates_symbol ON ref_candidates(symbol_id);
        CREATE TABLE imports (
            id INTEGER PRIMARY KEY,
            file_id INTEGER NOT NULL,
            module TEXT NOT NULL,
            name TEXT NOT NULL,
            alias TEXT NOT NULL,
            line INTEGER NOT NULL,
            level INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX imports_file ON imports(file_id);
        CREATE INDEX imports_module ON imports(module);
        -- names whose definitions changed; references to them await re-resolution.
        -- Written in the same transaction as the change, so a crash cannot lose them.
        CREATE TABLE pending_names (name TEXT PRIMARY KEY) WITHOUT ROWID;
        """
    )


# Secondary indexes on refs: dropped during bulk loads (a full build inserts and updates
# millions of rows ~3x faster without them) and recreated by `ensure_ref_indexes`, which every
# writer runs on open, so a build killed mid-load leaves nothing a reader lacks for long.
REF_INDEXES = {
    "refs_name": "refs(name)",
    "refs_file": "refs(file_id)",
    "refs_target": "refs(target_id)",
    "refs_enclosing": "refs(enclosing_id)",
    "refs_pending": "refs(file_id) WHERE resolution = 'pending'",
}
#: Ref indexes that resolution reads (base classes by their class) and never writes: a bulk
#: build creates them before resolving, where they cost no more than after.
RESOLVE_INDEXES = ("refs_enclosing",)


def drop_ref_indexes(db: WriteDB) -> None:
    for name in REF_INDEXES:
        db.execute(f"DROP INDEX IF EXISTS {name}")


def ensure_ref_indexes(db: WriteDB, names: Iterable[str] = REF_INDEXES) -> None:
    for name in names:
        db.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {REF_INDEXES[name]}")


def _m002_chunks(db: sqlite_utils.Database) -> None:
    db.executescript(
        """
        CREATE TABLE chunks (
            id INTEGER PRIMARY KEY,         -- stable: hash of path, span and content
            file_id INTEGER NOT NULL,
            symbol TEXT NOT NULL,           -- module-qualified definition, '' at module level
            kind TEXT NOT NULL,             -- definition | part | group | module
            start_line INTEGER NOT NULL,
            end_line INTEGER NOT NULL,
            tokens INTEGER NOT NULL,
            header TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            embedded INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX chunks_file ON chunks(file_id);
        CREATE INDEX chunks_unembedded ON chunks(id) WHERE embedded = 0;
        -- identifiers split into words (see indexer/graph/lexical.py); rowid = chunks.id
        CREATE VIRTUAL TABLE chunks_fts USING fts5(
            path, symbol, body, tokenize = 'porter unicode61'
        );
        -- chunk ids whose vectors must leave the vector store (written with the deletion)
        CREATE TABLE vector_tombstones (chunk_id INTEGER PRIMARY KEY);
        """
    )


def _m003_counts(db: sqlite_utils.Database) -> None:
    db.executescript(
        """
        -- running totals kept by triggers (see ensure_counters): a build's summary must not
        -- scan millions of references
        CREATE TABLE counts (key TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
        """
    )


def _m004_file_text(db: sqlite_utils.Database) -> None:
    """Whole-file lexical documents (see indexer/graph/lexical.py `index_files`); an index that had
    chunks gets them on the next build (its files are re-indexed lexically, not re-parsed)."""
    db.executescript(
        """
        CREATE VIRTUAL TABLE files_fts USING fts5(
            path, names, body, tokenize = 'porter unicode61'
        );
        INSERT INTO meta(key, value) SELECT 'files_fts_pending', '1' WHERE EXISTS (SELECT 1 FROM files)
            ON CONFLICT(key) DO UPDATE SET value = '1';
        """
    )


def _m005_text_fts(db: sqlite_utils.Database) -> None:
    """Docs and configs get lexical tables of their own (see indexer/graph/lexical.py `fts_table`);
    their rows move there from the code's tables."""
    from indexer.parse.languages import TEXT_FORMATS

    langs = sorted(TEXT_FORMATS)
    marks = ",".join("?" * len(langs))
    text_files = f"SELECT id FROM files WHERE language IN ({marks})"
    text_chunks = f"SELECT c.id FROM chunks c WHERE c.file_id IN ({text_files})"
    db.executescript(
        """
        CREATE VIRTUAL TABLE chunks_fts_text USING fts5(
            path, symbol, body, tokenize = 'porter unicode61'
        );
        CREATE VIRTUAL TABLE files_fts_text USING fts5(
            path, names, body, tokenize = 'porter unicode61'
        );
        """
    )
    for table, cols, ids in (("chunks_fts", "path, symbol, body", text_chunks),
                             ("files_fts", "path, names, body", text_files)):
        db.execute(f"INSERT INTO {table}_text(rowid, {cols}) SELECT rowid, {cols} FROM {table} "
                   f"WHERE rowid IN ({ids})", langs)
        db.execute(f"DELETE FROM {table} WHERE rowid IN ({ids})", langs)


MIGRATIONS: list[tuple[int, Callable[[sqlite_utils.Database], None]]] = [
    (1, _m001_initial),
    (2, _m002_chunks),
    (3, _m003_counts),
    (4, _m004_file_text),
    (5, _m005_text_fts),
]

#: Per-row triggers keep the totals of deletions and resolutions. Inserts are counted by
#: their one writer instead (`graph_write._insert_rows`, one UPDATE per file): an insert
#: trigger tripled the cost of writing a file's references (33k of sympy's: 1.0 s against
#: 0.35 s), and a new reference is always pending, so it adds to `refs` alone.
_COUNTER_TRIGGERS = {
    "refs_count_del": """AFTER DELETE ON refs BEGIN
        UPDATE counts SET n = n - 1 WHERE key = 'refs';
        UPDATE counts SET n = n - 1 WHERE key = 'resolved' AND OLD.target_id IS NOT NULL;
        UPDATE counts SET n = n - 1 WHERE key = 'ambiguous' AND OLD.resolution = 'ambiguous';
    END""",
    "refs_count_upd": """AFTER UPDATE OF target_id, resolution ON refs BEGIN
        UPDATE counts SET n = n + (NEW.target_id IS NOT NULL) - (OLD.target_id IS NOT NULL)
            WHERE key = 'resolved';
        UPDATE counts SET n = n + (NEW.resolution = 'ambiguous') - (OLD.resolution = 'ambiguous')
            WHERE key = 'ambiguous';
    END""",
    "symbols_count_del": """AFTER DELETE ON symbols WHEN OLD.kind != 'module' BEGIN
        UPDATE counts SET n = n - 1 WHERE key = 'symbols';
    END""",
}


#: Insert triggers of indexes written before inserts were counted by their writer; exact
#: until dropped (`ensure_counters`), so dropping them needs no recount.
_OLD_TRIGGERS = ("refs_count_ins", "symbols_count_ins")


def drop_counters(db: WriteDB) -> None:
    """Bulk loads go without the per-row triggers; `ensure_counters` recounts afterwards."""
    for name in (*_COUNTER_TRIGGERS, *_OLD_TRIGGERS):
        db.execute(f"DROP TRIGGER IF EXISTS {name}")


def count_inserts(conn: sqlite3.Connection, refs: int, symbols: int) -> None:
    """Add newly inserted (pending) references and non-module symbols to the totals."""
    conn.execute(
        "UPDATE counts SET n = n + CASE key WHEN 'refs' THEN ?1 ELSE ?2 END "
        "WHERE key IN ('refs', 'symbols')",
        [refs, symbols],
    )


def ensure_counters(db: WriteDB) -> None:
    """Create the counting triggers; when any was missing (after a bulk load or a crash during
    one), recount from the tables first so the totals are exact."""
    present = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    if present >= _COUNTER_TRIGGERS.keys():
        for name in present.intersection(_OLD_TRIGGERS):
            db.execute(f"DROP TRIGGER {name}")
        return
    drop_counters(db)
    refs, resolved, ambiguous = db.execute(
        "SELECT count(*), count(target_id), coalesce(sum(resolution = 'ambiguous'), 0) FROM refs"
    ).fetchone()
    symbols = db.execute("SELECT count(*) FROM symbols WHERE kind != 'module'").fetchone()[0]
    db.conn.executemany(
        "INSERT OR REPLACE INTO counts(key, n) VALUES (?, ?)",
        [("refs", refs), ("resolved", resolved), ("ambiguous", ambiguous), ("symbols", symbols)],
    )
    for name, body in _COUNTER_TRIGGERS.items():
        db.execute(f"CREATE TRIGGER {name} {body}")


def counts(db: ReadDB) -> dict[str, int]:
    return dict(db.execute("SELECT key, n FROM counts").fetchall())


class ReadDB:
    """A read-only connection with the small part of sqlite_utils.Database readers use.
    ``file`` is the generation file it reads (a full rebuild swaps in another one)."""

    def __init__(self, conn: sqlite3.Connection, file: Path | None = None) -> None:
        self.conn = conn
        self.file = file

    def execute(self, sql: str, params=()) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)

    def table_names(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]


class WriteDB(ReadDB):
    """The writer's connection. Builds need only ``execute``/``executescript``; sqlite_utils
    (~0.3 s of imports, numpy included: half of a one-file edit) is loaded to run migrations.
    ``previous`` is, for a generation being built by a full rebuild, the one it will replace."""

    previous: Path | None = None

    def executescript(self, sql: str) -> sqlite3.Cursor:
        return self.conn.executescript(sql)


# --------------------------------------------------------------------------- generations
#
# `graph.db` is a symlink to the current generation's file, `graph.<n>.db`. SQLite resolves
# the link when it opens the file, so each generation has its own -wal and -shm
# (`graph.<n>.db-wal`). An incremental build writes the current generation in place, one
# transaction per batch. A full rebuild writes `graph.<n+1>.db` beside it and swaps the link
# (`os.replace`, atomic): a connection keeps reading the file it opened, so readers see the old
# index or the new one, never a half-built one. The replaced generation is kept until the next
# full rebuild (for readers that resolved the link just before the swap); older ones are
# deleted. File numbers only grow, so a name (and its WAL) is never reused. An index from
# before generations has a plain `graph.db`: it is read and written as it is until the next full
# rebuild replaces it with the link.

GRAPH = "graph.db"
_GENERATION = re.compile(r"graph\.(\d+)\.db")
_SIDECARS = ("-wal", "-shm", "-journal")
#: A damaged graph is renamed to this prefix plus a timestamp (with its -wal/-shm), never deleted.
DAMAGED_PREFIX = "graph.db.damaged-"
#: Primary SQLite result codes that mean the file is not a sound database (not a busy or
#: missing one): SQLITE_CORRUPT, SQLITE_FORMAT, SQLITE_NOTADB.
_DAMAGE_CODES = frozenset({11, 24, 26})
#: Meta keys a new generation does not inherit: its migrations or its own build write them.
#: Every other key (generation counter, embedding model and dimension, vectors location, …)
#: describes the index rather than one file, and carries over.
_OWN_META = frozenset({"schema_version", "last_build"})


@dataclass(frozen=True, slots=True)
class SetAside:
    """A damaged graph moved out of the way (kept for inspection, never deleted)."""

    path: Path  # the database file's new name
    files: tuple[Path, ...]  # everything moved: the file and its -wal/-shm
    reason: str


def graph_file(index_dir: Path) -> Path | None:
    """The database file `graph.db` names now (`graph.<n>.db`, or `graph.db` itself in an index
    from before generations), whether or not it exists; None when there is no `graph.db`."""
    link = Path(index_dir) / GRAPH
    try:
        target = os.readlink(link)
    except FileNotFoundError:
        return None
    except OSError:  # not a symlink: the plain file of an older index
        return link
    return link.parent / target


def is_damage(exc: BaseException) -> bool:
    """Whether a SQLite error says the database file is damaged or not a database at all."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.DatabaseError) and code is not None and (
        code & 0xFF) in _DAMAGE_CODES


def damaged(index_dir: Path, exc: BaseException | str) -> IndexDamagedError:
    """The error to raise for a damaged index, from SQLite's error or a reason."""
    return IndexDamagedError(index_dir, exc if isinstance(exc, str) else str(exc) or type(exc).__name__)


def _number(name: str) -> int | None:
    m = _GENERATION.fullmatch(name)
    return int(m.group(1)) if m else None


def _generation_files(index_dir: Path) -> dict[int, list[Path]]:
    """Every generation file and sidecar in ``index_dir``, by generation number."""
    out: dict[int, list[Path]] = {}
    try:
        names = os.listdir(index_dir)
    except FileNotFoundError:
        return out
    for name in names:
        n = _number(_base(name))
        if n is not None:
            out.setdefault(n, []).append(Path(index_dir) / name)
    return out


def _unlink_all(paths) -> None:
    for p in paths:
        Path(p).unlink(missing_ok=True)


def _link(index_dir: Path, name: str) -> None:
    """Point `graph.db` at ``name`` atomically (a symlink renamed over the old one)."""
    tmp = Path(index_dir) / f".{GRAPH}.{os.getpid()}.tmp"
    tmp.unlink(missing_ok=True)
    os.symlink(name, tmp)
    os.replace(tmp, Path(index_dir) / GRAPH)
    _sync_dir(index_dir)  # the rename itself survives a crash of the machine, not only of repoctx


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _crash_point(name: str) -> None:
    """For tests only: ``REPOCTX_CRASH_AT=<name>`` kills this process here, as kill -9 would,
    to show that a full rebuild interrupted at that point leaves the old index serving."""
    if os.environ.get("REPOCTX_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


#: Beside the graph while a bulk load writes it without waiting for the disk (`bulk_load`):
#: holds the name of the file being loaded.
BULK_MARKER = "bulk-load"


@contextlib.contextmanager
def bulk_load(db: WriteDB, index_dir: Path) -> Iterator[None]:
    """Write ``db`` without waiting for the disk (``synchronous = OFF``) while a build loads
    most of the index. With WAL and ``NORMAL``, SQLite fsyncs at every checkpoint (every 4 MB
    of log): 3–6 % of a full build. A killed process loses nothing committed either way; a
    machine that stops in the middle may leave the file damaged, so a marker naming it is
    written (and synced) first and removed once the file is synced at the end: the next build
    checks a file the marker still names before it uses it (`check_bulk_load`). An exception
    leaves the marker, and the check, to the next build."""
    if db.file is None:
        yield
        return
    marker = Path(index_dir) / BULK_MARKER
    _write_synced(marker, db.file.name)
    db.execute("PRAGMA synchronous = OFF")
    yield
    db.execute("PRAGMA synchronous = NORMAL")
    # NORMAL syncs the log before a checkpoint and the file after it; FULL waits (busy_timeout)
    # for readers of older snapshots, so that every frame is copied.
    busy = db.execute("PRAGMA wal_checkpoint(FULL)").fetchone()[0]
    _crash_point("bulk_load_synced")
    if not busy:
        marker.unlink(missing_ok=True)


def check_bulk_load(index_dir: Path) -> None:
    """IndexDamagedError when a bulk load that did not end (`bulk_load`) left the current
    file damaged (`quick_check`); the marker is removed once the file is found sound, or
    when it names a file that is no longer current. Under the write lock only."""
    marker = Path(index_dir) / BULK_MARKER
    try:
        name = marker.read_text(encoding="utf-8")
    except FileNotFoundError:
        return
    except (OSError, UnicodeError):
        name = ""  # unreadable: check whatever is current
    current = graph_file(index_dir)
    if current is not None and current.exists() and name in ("", current.name):
        db = open_for_read(index_dir, check_version=False)
        try:
            quick_check(db, index_dir)
        finally:
            db.conn.close()
    marker.unlink(missing_ok=True)


def _write_synced(path: Path, text: str) -> None:
    """Write ``path`` and sync it and its directory: it exists after the machine stops."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    _sync_dir(path.parent)


def _remove_unpublished(index_dir: Path) -> None:
    """Delete what crashed full rebuilds left: generations newer than the current one (never
    linked, so never read) and temporary links. Under the write lock only."""
    current = graph_file(index_dir)
    # No index, or a plain graph.db: every generation file is a leftover.
    n = (_number(current.name) if current is not None else None) or 0
    for k, paths in _generation_files(index_dir).items():
        if k > n:
            _unlink_all(paths)
    for name in os.listdir(index_dir):
        if name.startswith(f".{GRAPH}.") and name.endswith(".tmp"):
            (Path(index_dir) / name).unlink(missing_ok=True)


def _next_file(index_dir: Path) -> Path:
    """The name of the next generation's file. Numbers only grow: a published name (and so
    its -wal) is never used again. (A crashed rebuild's number comes back once its file is
    removed: no reader ever opened that one.)"""
    numbers = set(_generation_files(index_dir))
    current = graph_file(index_dir)
    if current is not None and _number(current.name) is not None:
        numbers.add(_number(current.name))
    return Path(index_dir) / f"graph.{max(numbers, default=0) + 1}.db"


def unpublished_chunk_ids(index_dir: Path) -> set[int]:
    """Chunk ids of generations newer than the current one: a full rebuild running, or one
    that was killed (the next build removes its file). Their vectors may already be in the
    shared vector table."""
    current = graph_file(index_dir)
    n = (_number(current.name) if current is not None else None) or 0
    out: set[int] = set()
    for k, paths in _generation_files(index_dir).items():
        db_file = Path(index_dir) / f"graph.{k}.db"
        if k <= n or db_file not in paths:
            continue
        try:
            conn = sqlite3.connect(f"file:{quote(str(db_file))}?mode=ro", uri=True)
            try:
                out.update(r[0] for r in conn.execute("SELECT id FROM chunks"))
            finally:
                conn.close()
        except sqlite3.Error:  # just created (no tables yet), or being removed
            continue
    return out


def _new_generation(index_dir: Path, meta: dict[str, str]) -> WriteDB:
    """A new, migrated generation file (not linked yet) with ``meta`` carried over."""
    path = _next_file(index_dir)
    _unlink_all(Path(f"{path}{s}") for s in ("", *_SIDECARS))
    db = _open_writer(path, index_dir)
    if meta:
        with db.conn:  # keys the migrations wrote win
            db.conn.executemany("INSERT OR IGNORE INTO meta(key, value) VALUES (?, ?)",
                                sorted(meta.items()))
    return db


def _read_meta(path: Path) -> dict[str, str]:
    """The meta of a repoctx graph file, without the keys a new generation writes itself;
    empty when the file is not a repoctx graph (raises sqlite3.Error when unreadable)."""
    conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
    try:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone():
            return {}
        rows = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    finally:
        conn.close()
    if "schema_version" not in rows:
        return {}
    return {k: v for k, v in rows.items() if k not in _OWN_META and isinstance(k, str)}


def disk_usage(index_dir: Path) -> dict[str, object]:
    """Bytes on disk of the graph: the current generation file (with its -wal); the other
    generation files (the previous one, kept for readers until the next full rebuild, and a
    full rebuild's while it runs); damaged files set aside (until the user deletes them)."""
    current = graph_file(index_dir)
    own = {current.name} if current is not None else set()

    def size(p: Path) -> int:
        try:
            return p.stat().st_size
        except FileNotFoundError:  # deleted by a rebuild meanwhile
            return 0

    used = kept = damaged_bytes = 0
    try:
        names = os.listdir(index_dir)
    except FileNotFoundError:
        names = []
    for name in names:
        base = _base(name)
        if base in own and not os.path.islink(Path(index_dir) / name):
            used += size(Path(index_dir) / name)
        elif _number(base) is not None:
            kept += size(Path(index_dir) / name)
        elif name.startswith(DAMAGED_PREFIX):
            damaged_bytes += size(Path(index_dir) / name)
    return {"file": current.name if current is not None else None, "bytes": used,
            "previous_bytes": kept, "damaged_bytes": damaged_bytes}


def readable_meta(index_dir: Path) -> dict[str, str]:
    """What can still be read of the current graph's meta (empty when nothing can): a repair
    of a damaged index learns from it which embedding model to use."""
    path = graph_file(index_dir)
    if path is None or not path.exists():
        return {}
    try:
        return _read_meta(path)
    except sqlite3.Error:
        return {}


def quick_check(db: ReadDB, index_dir: Path) -> None:
    """IndexDamagedError unless SQLite's `PRAGMA quick_check` finds the file sound (every page
    read and its b-tree structure checked: ~1 s on a 220 MB graph, so full rebuilds and
    `index verify` run it, queries do not — they report damage when they meet it)."""
    try:
        rows = db.execute("PRAGMA quick_check(5)").fetchall()
    except sqlite3.DatabaseError as exc:
        if is_damage(exc):
            raise damaged(index_dir, exc) from exc
        raise
    problems = [line.strip() for r in rows if r[0] != "ok" for line in str(r[0]).splitlines()
                if line.strip() and not line.startswith("*** in database")]
    if problems:
        more = f" and {len(problems) - 1} more problems" if len(problems) > 1 else ""
        raise damaged(index_dir, f"quick_check: {problems[0][:150]}{more}")


def begin_generation(index_dir: Path) -> WriteDB:
    """The file a full rebuild writes: `graph.<n+1>.db`, migrated, with the current
    generation's meta carried over, invisible to readers until `publish`. The current file is
    checked first (`quick_check`): IndexDamagedError when it is damaged (see `set_aside`),
    SchemaError when a newer repoctx wrote it. Under the write lock only."""
    _remove_unpublished(index_dir)
    old = graph_file(index_dir)
    meta: dict[str, str] = {}
    if old is not None and old.exists():
        current = open_for_read(index_dir, check_version=False)
        try:
            version = _check_ours(current, index_dir)
            if version > SCHEMA_VERSION:
                raise _newer(index_dir, version)
            quick_check(current, index_dir)
            old = current.file
        finally:
            current.conn.close()
        meta = _read_meta(old)
    else:
        old = None
    db = _new_generation(index_dir, meta)
    db.previous = old
    _crash_point("generation_created")
    return db


def publish(index_dir: Path, db: WriteDB) -> None:
    """Swap the generation ``db`` holds in: readers that open the index from now on read it,
    readers of the one it replaces finish on that (kept until the next full rebuild), older
    generations are deleted (unlinking a file a reader still holds is safe for the reader)."""
    _publish(index_dir, db.file.name)


def install(index_dir: Path, src: Path) -> None:
    """Swap a complete graph file made elsewhere (a pulled snapshot) in as the next generation,
    like a full rebuild: ``src`` is moved (same file system) and published. Under the write lock."""
    _remove_unpublished(index_dir)
    dest = _next_file(index_dir)
    _unlink_all(Path(f"{dest}{s}") for s in _SIDECARS)
    os.replace(src, dest)
    _publish(index_dir, dest.name)


def _publish(index_dir: Path, name: str) -> None:
    previous = graph_file(index_dir)
    _crash_point("before_swap")
    _link(index_dir, name)
    _crash_point("after_swap")
    keep = {name} | ({previous.name} if previous is not None else set())
    for _, paths in _generation_files(index_dir).items():
        _unlink_all(p for p in paths if _base(p.name) not in keep)
    if GRAPH not in keep:  # the -wal/-shm of a plain graph.db that an earlier rebuild replaced
        _unlink_all(Path(index_dir) / f"{GRAPH}{s}" for s in _SIDECARS)


def _base(name: str) -> str:
    return next((name[: -len(s)] for s in _SIDECARS if name.endswith(s)), name)


def discard(index_dir: Path, db: WriteDB) -> None:
    """Close and delete a generation that was never published (a failed full rebuild)."""
    db.conn.close()
    if db.file is None or graph_file(index_dir) == db.file:
        return
    _unlink_all(Path(f"{db.file}{s}") for s in ("", *_SIDECARS))


def set_aside(index_dir: Path, reason: str) -> tuple[SetAside, WriteDB]:
    """Rename the damaged current graph to `graph.db.damaged-<timestamp>` (with its -wal and
    -shm) and link an empty, migrated generation in its place that carries the meta still
    readable (embedding model, vectors location, generation counter). Returns what was moved
    and the writer of the new generation, for a build from scratch. Under the write lock only."""
    bad = graph_file(index_dir)
    try:
        meta = _read_meta(bad) if bad is not None and bad.exists() else {}
    except sqlite3.Error:  # too damaged to read even that: start without it
        meta = {}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dest = Path(index_dir) / f"{DAMAGED_PREFIX}{stamp}"
    i = 1
    while any(Path(f"{dest}{s}").exists() for s in ("", *_SIDECARS)):
        i += 1
        dest = Path(index_dir) / f"{DAMAGED_PREFIX}{stamp}-{i}"
    moved = []
    for suffix in ("", *_SIDECARS):
        src = Path(f"{bad}{suffix}") if bad is not None else None
        if src is not None and src.exists():
            os.replace(src, f"{dest}{suffix}")
            moved.append(Path(f"{dest}{suffix}"))
    (Path(index_dir) / BULK_MARKER).unlink(missing_ok=True)  # it named the file set aside
    db = _new_generation(index_dir, meta)
    _link(index_dir, db.file.name)
    return SetAside(dest, tuple(moved), reason), db


@contextlib.contextmanager
def _previous_attached(db: WriteDB) -> Iterator[bool]:
    """The previous generation attached read-only as ``prev`` (False: none to read)."""
    prev = db.previous
    if prev is None or not prev.exists():
        yield False
        return
    db.conn.execute("ATTACH DATABASE ? AS prev", [f"file:{quote(str(prev))}?mode=ro"])
    try:
        tables = db.conn.execute(
            "SELECT count(*) FROM prev.sqlite_master WHERE name IN ('chunks', 'vector_tombstones')"
        ).fetchone()[0]
        yield tables == 2  # an index from before chunks has no vectors to carry
    finally:
        db.conn.execute("DETACH DATABASE prev")


def inherit_embedded(db: WriteDB) -> int:
    """Mark embedded the chunks of a new generation whose vector the previous one had: chunk
    ids are stable (path, span and content) and the vector table is shared, so a full rebuild
    embeds only chunks that are new. Returns how many were marked."""
    with _previous_attached(db) as ok:
        if not ok:
            return 0
        with db.conn:
            return db.conn.execute(
                "UPDATE main.chunks SET embedded = 1 WHERE embedded = 0 "
                "AND id IN (SELECT id FROM prev.chunks WHERE embedded = 1)"
            ).rowcount


def inherit_tombstones(db: WriteDB) -> int:
    """Tombstone the vectors of the previous generation's chunks that the new one lacks (and
    those the previous one still had to remove). Run after the rebuild's own embedding phase,
    just before `publish`: the next build deletes them, so readers still on the previous
    generation keep their vectors meanwhile. Returns how many."""
    with _previous_attached(db) as ok:
        if not ok:
            return 0
        with db.conn:
            return db.conn.execute(
                "INSERT OR IGNORE INTO main.vector_tombstones(chunk_id) "
                "SELECT id FROM prev.chunks WHERE id NOT IN (SELECT id FROM main.chunks) UNION "
                "SELECT chunk_id FROM prev.vector_tombstones "
                "WHERE chunk_id NOT IN (SELECT id FROM main.chunks)"
            ).rowcount


# --------------------------------------------------------------------------- connections


def _connect(path: Path, readonly: bool = False):
    # A URI for both modes: the path is quoted (a `?` or `#` in a directory name stays part of
    # it), read-only opens never create a file, and the writer can ATTACH a file read-only.
    uri = f"file:{quote(str(path))}" + ("?mode=ro" if readonly else "")
    # A reader is in autocommit mode: a write to a TEMP table (a query's scratch space) must
    # not open a transaction that pins a long-lived connection (agent, MCP server) to the
    # snapshot of that moment, blind to every later build.
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False,
                           isolation_level=None if readonly else "")
    try:
        conn.execute("PRAGMA busy_timeout = 10000")
        if not readonly:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA cache_size = -65536")
        conn.execute("PRAGMA temp_store = MEMORY")
    except BaseException:
        conn.close()
        raise
    return ReadDB(conn, Path(path)) if readonly else WriteDB(conn, Path(path))


def read_file(path: Path) -> ReadDB:
    """A reader of the graph file at ``path`` itself: a generation a full rebuild is still
    writing, which `graph.db` does not name yet (`open_for_read` follows the link)."""
    return _connect(path, readonly=True)


def schema_version(db: ReadDB) -> int:
    if "meta" not in db.table_names():
        return 0
    row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else 0


def _check_ours(db: ReadDB, index_dir: Path) -> int:
    """The schema version of a repoctx graph (0: an empty file); IndexDamagedError for a SQLite
    database that is something else."""
    tables = db.table_names()
    if not tables:
        return 0
    row = None
    if "meta" in tables:
        row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None or not str(row[0]).isdigit():
        shown = ", ".join(sorted(tables)[:4]) + (", …" if len(tables) > 4 else "")
        raise damaged(index_dir, f"not a repoctx index: a SQLite database of tables {shown}")
    # An index can come with the repository (a shipped `.repoctx/`, a pulled snapshot): a
    # trigger or view repoctx did not write would run its own SQL inside every build's writes.
    # Only the counters' exact text passes (the old insert triggers are dropped, unrun, when a
    # writer opens the file: `ensure_counters`).
    for kind, name, sql in db.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE type IN ('trigger', 'view')"):
        body = _COUNTER_TRIGGERS.get(name)
        if not (kind == "trigger" and (name in _OLD_TRIGGERS
                                       or sql == f"CREATE TRIGGER {name} {body}")):
            raise damaged(index_dir, f"not a repoctx index: it holds a {kind} repoctx never "
                          f"makes ({name!r})")
    return int(row[0])


def _newer(index_dir: Path, version: int) -> SchemaError:
    return SchemaError(
        f"The index at {index_dir} has schema {version}, newer than this repoctx "
        f"({SCHEMA_VERSION}) — upgrade repoctx or delete the index and rebuild."
    )


def _open_writer(path: Path, index_dir: Path) -> WriteDB:
    """Connect to ``path`` for writing and migrate it; damage becomes IndexDamagedError."""
    try:
        db = _connect(path)
    except sqlite3.DatabaseError as exc:
        if is_damage(exc):
            raise damaged(index_dir, exc) from exc
        raise
    try:
        current = _check_ours(db, index_dir)
        if current > SCHEMA_VERSION:
            raise _newer(index_dir, current)
        pending = [(v, m) for v, m in MIGRATIONS if v > current]
        if pending:
            import sqlite_utils

            mdb = sqlite_utils.Database(db.conn)
        for version, migrate in pending:
            with db.conn:
                migrate(mdb)
                db.execute(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', ?)",
                    [str(version)],
                )
        with db.conn:
            ensure_ref_indexes(db)
            ensure_counters(db)
    except sqlite3.DatabaseError as exc:
        db.conn.close()
        if is_damage(exc):
            raise damaged(index_dir, exc) from exc
        raise
    except BaseException:
        db.conn.close()
        raise
    return db


def open_for_write(index_dir: Path) -> WriteDB:
    """Open the current generation for a writer (incremental builds write it in place),
    creating and migrating as needed; what a crashed full rebuild left is removed first.
    Under the write lock (tests may poke at an index without it)."""
    index_dir.mkdir(parents=True, exist_ok=True)
    gitignore = index_dir / ".gitignore"
    if not gitignore.exists():
        gitignore.write_text("# repoctx index: never commit\n*\n")
    _remove_unpublished(index_dir)
    path = graph_file(index_dir)
    if path is None or not path.exists():  # no index yet (or its file was set aside)
        db = _new_generation(index_dir, {})
        _link(index_dir, db.file.name)
        return db
    return _open_writer(path, index_dir)


def open_for_read(index_dir: Path, *, check_version: bool = True) -> ReadDB:
    """Open the graph for queries: the generation `graph.db` names now, which the connection
    keeps reading after a full rebuild swaps in the next one. Never creates a database file
    (`mode=ro`); if the file vanishes between reading the link and opening it (a rebuild
    finished meanwhile), the link is read once more. A missing index says how to build one, a
    damaged one how to repair it."""
    for attempt in (1, 2):
        path = graph_file(index_dir)
        if path is None or not path.exists():
            if attempt == 1 and path is not None:
                continue
            raise NoIndexError(f"No index at {index_dir} — run `repoctx index build` first.")
        try:
            db = _connect(path, readonly=True)
            try:
                version = _check_ours(db, index_dir)
            except BaseException:
                db.conn.close()
                raise
        except sqlite3.DatabaseError as exc:
            if is_damage(exc):
                raise damaged(index_dir, exc) from exc
            if attempt == 1 and getattr(exc, "sqlite_errorcode", 0) & 0xFF == 14:  # CANTOPEN
                continue
            raise
        break
    if check_version and version != SCHEMA_VERSION:
        db.conn.close()
        raise SchemaError(
            f"The index at {index_dir} has schema {version}, this repoctx reads {SCHEMA_VERSION} "
            "— run `repoctx index build` to migrate it."
        )
    return db


def get_meta(db: ReadDB, key: str, default: str | None = None) -> str | None:
    row = db.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
    return row[0] if row else default


def set_meta(db: WriteDB, key: str, value: str) -> None:
    db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", [key, value])
