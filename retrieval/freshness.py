"""Freshness stamps: the generation an answer came from, and which of its files changed on
disk since they were indexed (one stat per distinct file, at query time)."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable


def generation(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
    return int(row[0]) if row else 0


def index_root(conn: sqlite3.Connection) -> str:
    row = conn.execute("SELECT value FROM meta WHERE key = 'root'").fetchone()
    return row[0] if row else ""


def stale_paths(
    conn: sqlite3.Connection, paths: Iterable[str], root: str | None = None
) -> set[str]:
    """Paths whose size or mtime on disk differ from what the index saw (or that are gone)."""
    root = root or index_root(conn)
    out: set[str] = set()
    for path in set(paths):
        row = conn.execute("SELECT size, mtime_ns FROM files WHERE path = ?", [path]).fetchone()
        try:
            st = os.stat(os.path.join(root, path))
        except OSError:
            out.add(path)
            continue
        if row is None or (row[0], row[1]) != (st.st_size, st.st_mtime_ns):
            out.add(path)
    return out
