"""The graph's schema: its numbered migrations, the reference indexes a bulk load drops and
makes again, and the running totals that triggers keep.

A migration and the code that reads its tables are reviewed as one; `indexer.graph.store`
runs the migrations when a writer opens a file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported by writers only: it costs ~130 ms, more than a whole `symbol` query
    import sqlite_utils

    from indexer.graph.connection import ReadDB, WriteDB

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


def own_trigger(kind: str, name: str, sql: str) -> bool:
    """Whether a trigger or view of ``sqlite_master`` is one repoctx makes: the counters' exact
    text, or an old insert trigger (dropped, unrun, when a writer opens the file)."""
    body = _COUNTER_TRIGGERS.get(name)
    return kind == "trigger" and (name in _OLD_TRIGGERS or sql == f"CREATE TRIGGER {name} {body}")
