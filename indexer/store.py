"""The SQLite graph: schema, numbered migrations, connections.

`graph.db` is the source of truth for which files, symbols, references and chunks exist.
WAL mode lets any number of readers query while one writer builds.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported by writers only: it costs ~130 ms, more than a whole `symbol` query
    import sqlite_utils

from .errors import NoIndexError, SchemaError

SCHEMA_VERSION = 3


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


def drop_ref_indexes(db: WriteDB) -> None:
    for name in REF_INDEXES:
        db.execute(f"DROP INDEX IF EXISTS {name}")


def ensure_ref_indexes(db: WriteDB) -> None:
    for name, spec in REF_INDEXES.items():
        db.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {spec}")


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
        -- identifiers split into words (see indexer/lexical.py); rowid = chunks.id
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


MIGRATIONS: list[tuple[int, Callable[[sqlite_utils.Database], None]]] = [
    (1, _m001_initial),
    (2, _m002_chunks),
    (3, _m003_counts),
]

_COUNTER_TRIGGERS = {
    "refs_count_ins": """AFTER INSERT ON refs BEGIN
        UPDATE counts SET n = n + 1 WHERE key = 'refs';
        UPDATE counts SET n = n + 1 WHERE key = 'resolved' AND NEW.target_id IS NOT NULL;
        UPDATE counts SET n = n + 1 WHERE key = 'ambiguous' AND NEW.resolution = 'ambiguous';
    END""",
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
    "symbols_count_ins": """AFTER INSERT ON symbols WHEN NEW.kind != 'module' BEGIN
        UPDATE counts SET n = n + 1 WHERE key = 'symbols';
    END""",
    "symbols_count_del": """AFTER DELETE ON symbols WHEN OLD.kind != 'module' BEGIN
        UPDATE counts SET n = n - 1 WHERE key = 'symbols';
    END""",
}


def drop_counters(db: WriteDB) -> None:
    """Bulk loads go without the per-row triggers; `ensure_counters` recounts afterwards."""
    for name in _COUNTER_TRIGGERS:
        db.execute(f"DROP TRIGGER IF EXISTS {name}")


def ensure_counters(db: WriteDB) -> None:
    """Create the counting triggers; when any was missing (after a bulk load or a crash during
    one), recount from the tables first so the totals are exact."""
    present = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    if present >= _COUNTER_TRIGGERS.keys():
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


def stable_id(*parts: str) -> int:
    """A 63-bit id that stays the same while the parts do, so unchanged symbols keep their
    ids across builds and references to them stay valid."""
    digest = hashlib.blake2b("\x1f".join(parts).encode("utf-8", "surrogatepass"), digest_size=8)
    return int.from_bytes(digest.digest(), "big") >> 1


class ReadDB:
    """A read-only connection with the small part of sqlite_utils.Database readers use."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params=()) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)

    def table_names(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]


class WriteDB(ReadDB):
    """The writer's connection. Builds need only ``execute``/``executescript``; sqlite_utils
    (~0.3 s of imports, numpy included: half of a one-file edit) is loaded to run migrations."""

    def executescript(self, sql: str) -> sqlite3.Cursor:
        return self.conn.executescript(sql)


def _connect(path: Path, readonly: bool = False):
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    else:
        conn = sqlite3.connect(str(path), check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 10000")
    if not readonly:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA cache_size = -65536")
    conn.execute("PRAGMA temp_store = MEMORY")
    return ReadDB(conn) if readonly else WriteDB(conn)


def schema_version(db: ReadDB) -> int:
    if "meta" not in db.table_names():
        return 0
    row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else 0


def open_for_write(index_dir: Path) -> WriteDB:
    """Open (creating and migrating as needed) the graph for a writer."""
    index_dir.mkdir(parents=True, exist_ok=True)
    gitignore = index_dir / ".gitignore"
    if not gitignore.exists():
        gitignore.write_text("# repoctx index: never commit\n*\n")
    db = _connect(index_dir / "graph.db")
    current = schema_version(db)
    if current > SCHEMA_VERSION:
        raise SchemaError(
            f"The index at {index_dir} has schema {current}, newer than this repoctx "
            f"({SCHEMA_VERSION}) — upgrade repoctx or delete the index and rebuild."
        )
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
    return db


def open_for_read(index_dir: Path) -> ReadDB:
    """Open the graph for queries; a missing index says how to build one."""
    path = index_dir / "graph.db"
    if not path.exists():
        raise NoIndexError(f"No index at {index_dir} — run `repoctx index build` first.")
    db = _connect(path, readonly=True)
    version = schema_version(db)
    if version != SCHEMA_VERSION:
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
