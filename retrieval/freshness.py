"""Freshness stamps: the generation an answer came from, and which of its files changed on
disk since they were indexed (one stat per distinct file, at query time)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from indexer import graph

if TYPE_CHECKING:
    import sqlite3


def generation(conn: sqlite3.Connection) -> int:
    return graph.generation(conn)


def index_root(conn: sqlite3.Connection) -> str:
    return graph.index_root(conn)


def stale_paths(
    conn: sqlite3.Connection, paths: Iterable[str], root: str | None = None
) -> set[str]:
    """Paths whose size or mtime on disk differ from what the index saw (or that are gone)."""
    root = root or index_root(conn)
    out: set[str] = set()
    unique = set(paths)
    seen = graph.file_stats_of(conn, unique) if unique else {}
    for path in unique:
        row = seen.get(path)
        try:
            st = os.stat(os.path.join(root, path))
        except OSError:
            out.add(path)
            continue
        if row is None or (row[0], row[1]) != (st.st_size, st.st_mtime_ns):
            out.add(path)
    return out
