"""The SQLite graph's files and connections: which generation file is current, a reader of it,
a writer that creates and migrates, the meta, and what damage is.

`graph.db` is the source of truth for which files, symbols, references and chunks exist.
WAL mode lets any number of readers query while one writer builds. The schema and its
migrations are `indexer.graph.schema`; full rebuilds' generations `indexer.graph.generations`;
an interrupted bulk load and a damaged file set aside `indexer.graph.recovery`.

`graph.db` is a symlink to the current generation's file, `graph.<n>.db`. SQLite resolves
the link when it opens the file, so each generation has its own -wal and -shm
(`graph.<n>.db-wal`). An incremental build writes the current generation in place, one
transaction per batch. A full rebuild writes `graph.<n+1>.db` beside it and swaps the link
(`os.replace`, atomic): a connection keeps reading the file it opened, so readers see the old
index or the new one, never a half-built one. The replaced generation is kept until the next
full rebuild (for readers that resolved the link just before the swap); older ones are
deleted. File numbers only grow, so a name (and its WAL) is never reused. An index from
before generations has a plain `graph.db`: it is read and written as it is until the next full
rebuild replaces it with the link.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote

from indexer.atomic import replace_durably, temp_name, write_atomic
from indexer.errors import IndexDamagedError, NoIndexError, SchemaError
from indexer.graph.connection import ReadDB, WriteDB
from indexer.graph.connection import connect as _connect
from indexer.graph.schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    ensure_counters,
    ensure_ref_indexes,
    own_trigger,
)

# --------------------------------------------------------------------------- files

GRAPH = "graph.db"
_GENERATION = re.compile(r"graph\.(\d+)\.db")
SIDECARS = ("-wal", "-shm", "-journal")
#: A damaged graph is renamed to this prefix plus a timestamp (with its -wal/-shm), never deleted.
DAMAGED_PREFIX = "graph.db.damaged-"
#: A build's shard directory (`indexer.graph.shards`): ``shards-<pid>-<random>``.
SHARDS_PREFIX = "shards-"


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


def number(name: str) -> int | None:
    """The generation number of a file name (`graph.<n>.db`), None for any other name."""
    m = _GENERATION.fullmatch(name)
    return int(m.group(1)) if m else None


def base_name(name: str) -> str:
    """The database file a sidecar (`-wal`, `-shm`, `-journal`) belongs to."""
    return next((name[: -len(s)] for s in SIDECARS if name.endswith(s)), name)


def generation_files(index_dir: Path) -> dict[int, list[Path]]:
    """Every generation file and sidecar in ``index_dir``, by generation number."""
    out: dict[int, list[Path]] = {}
    try:
        names = os.listdir(index_dir)
    except FileNotFoundError:
        return out
    for name in names:
        n = number(base_name(name))
        if n is not None:
            out.setdefault(n, []).append(Path(index_dir) / name)
    return out


def unlink_all(paths: Iterable[Path | str]) -> None:
    for p in paths:
        Path(p).unlink(missing_ok=True)


def link(index_dir: Path, name: str) -> None:
    """Point `graph.db` at ``name`` atomically (a symlink renamed over the old one); the rename
    itself survives a crash of the machine, not only of repoctx (`indexer.atomic`)."""
    tmp = Path(index_dir) / temp_name(GRAPH)
    os.symlink(name, tmp)
    replace_durably(tmp, Path(index_dir) / GRAPH)


def crash_point(name: str) -> None:
    """For tests only: ``REPOCTX_CRASH_AT=<name>`` kills this process here, as kill -9 would,
    to show that a full rebuild interrupted at that point leaves the old index serving."""
    if os.environ.get("REPOCTX_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


def current_number(index_dir: Path) -> int:
    """The current generation's number; 0 with no index, or a plain `graph.db`."""
    current = graph_file(index_dir)
    return (number(current.name) if current is not None else None) or 0


def remove_unpublished(index_dir: Path) -> None:
    """Delete what crashed builds left: generations newer than the current one (never linked,
    so never read), temporary links, and shard directories (`indexer.graph.shards`). Under the
    write lock only."""
    # No index, or a plain graph.db: every generation file is a leftover.
    n = current_number(index_dir)
    for k, paths in generation_files(index_dir).items():
        if k > n:
            unlink_all(paths)
    for name in os.listdir(index_dir):
        if name.startswith(f".{GRAPH}.") and name.endswith(".tmp"):
            (Path(index_dir) / name).unlink(missing_ok=True)
        elif name.startswith(SHARDS_PREFIX):  # a killed build's shards: never merged, or merged
            import shutil

            shutil.rmtree(Path(index_dir) / name, ignore_errors=True)


def next_file(index_dir: Path) -> Path:
    """The name of the next generation's file. Numbers only grow: a published name (and so
    its -wal) is never used again. (A crashed rebuild's number comes back once its file is
    removed: no reader ever opened that one.)"""
    numbers = set(generation_files(index_dir))
    current = graph_file(index_dir)
    if current is not None and number(current.name) is not None:
        numbers.add(number(current.name))
    return Path(index_dir) / f"graph.{max(numbers, default=0) + 1}.db"


# --------------------------------------------------------------------------- connections

#: Primary SQLite result codes that mean the file is not a sound database (not a busy or
#: missing one): SQLITE_CORRUPT, SQLITE_FORMAT, SQLITE_NOTADB.
_DAMAGE_CODES = frozenset({11, 24, 26})
#: Meta keys a new generation does not inherit: its migrations or its own build write them.
#: Every other key (generation counter, embedding model and dimension, vectors location, …)
#: describes the index rather than one file, and carries over.
_OWN_META = frozenset({"schema_version", "last_build"})


def is_damage(exc: BaseException) -> bool:
    """Whether a SQLite error says the database file is damaged or not a database at all."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.DatabaseError) and code is not None and (
        code & 0xFF) in _DAMAGE_CODES


def damaged(index_dir: Path, exc: BaseException | str) -> IndexDamagedError:
    """The error to raise for a damaged index, from SQLite's error or a reason."""
    return IndexDamagedError(index_dir, exc if isinstance(exc, str) else str(exc) or type(exc).__name__)


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


def new_generation(index_dir: Path, meta: dict[str, str]) -> WriteDB:
    """A new, migrated generation file (not linked yet) with ``meta`` carried over."""
    path = next_file(index_dir)
    unlink_all(Path(f"{path}{s}") for s in ("", *SIDECARS))
    db = _open_writer(path, index_dir)
    if meta:
        with db.conn:  # keys the migrations wrote win
            db.conn.executemany("INSERT OR IGNORE INTO meta(key, value) VALUES (?, ?)",
                                sorted(meta.items()))
    return db


def read_meta(path: Path) -> dict[str, str]:
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
        base = base_name(name)
        if base in own and not os.path.islink(Path(index_dir) / name):
            used += size(Path(index_dir) / name)
        elif number(base) is not None:
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
        return read_meta(path)
    except sqlite3.Error:
        return {}


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
        if not own_trigger(kind, name, sql):
            raise damaged(index_dir, f"not a repoctx index: it holds a {kind} repoctx never "
                          f"makes ({name!r})")
    return int(row[0])


def newer_schema(index_dir: Path, version: int) -> SchemaError:
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
            raise newer_schema(index_dir, current)
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
    if not gitignore.exists():  # whole or absent: a cut-short one could let the index be committed
        write_atomic(gitignore, "# repoctx index: never commit\n*\n")
    remove_unpublished(index_dir)
    path = graph_file(index_dir)
    if path is None or not path.exists():  # no index yet (or its file was set aside)
        db = new_generation(index_dir, {})
        link(index_dir, db.file.name)
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
