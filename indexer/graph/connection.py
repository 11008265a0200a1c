"""Connections to a graph file: the reader's (read-only, autocommit) and the writer's (WAL),
with the small part of sqlite_utils.Database the index uses. The bottom of `indexer.graph`:
the schema, the store and the reads all take these."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import quote


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


def connect(path: Path, readonly: bool = False) -> ReadDB:
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
