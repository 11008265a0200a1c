"""Freshness stamps: the generation an answer came from, and which of its files changed on
disk since they were indexed (one stat per distinct file, at query time)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from indexer.graph.reads import GraphReads
from indexer.graph.records import BUILD_PHASE, PHASES

if TYPE_CHECKING:
    import sqlite3


def generation(conn: sqlite3.Connection) -> int:
    return GraphReads(conn).generation()


def index_root(conn: sqlite3.Connection) -> str:
    return GraphReads(conn).index_root()


def stale_paths(
    conn: sqlite3.Connection, paths: Iterable[str], root: str | None = None
) -> set[str]:
    """Paths whose size or mtime on disk differ from what the index saw (or that are gone)."""
    root = root or index_root(conn)
    out: set[str] = set()
    unique = set(paths)
    seen = GraphReads(conn).file_stats_of(unique) if unique else {}
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


def build_progress(index_dir, conn) -> dict[str, Any] | None:
    """A build running on this index (or one that stopped before its end), from the phase it
    records in the graph and the pid in the write lock: ``phase``, ``pid``, ``running``,
    ``ready`` (what can be relied on meanwhile) and, when it stopped, ``fix``. None when no
    build is running and the last one finished."""
    from indexer.lock import WriteLock

    pid = WriteLock(index_dir).holder()
    alive = False
    if pid:
        try:
            os.kill(pid, 0)
            alive = True
        except ProcessLookupError:
            alive = False
        except PermissionError:  # another user's live process
            alive = True
    raw = GraphReads(conn).meta_value(BUILD_PHASE)
    state = json.loads(raw) if raw else None
    if state is None:
        if not alive:
            return None
        # writing a new generation (readers keep this one until it is complete) or starting
        return {"phase": "rebuild", "pid": pid, "running": True,
                "ready": "this index stays as it is until the new one replaces it"}
    running = alive and state.get("pid") == pid
    out = {"phase": state["phase"], "pid": state.get("pid"), "running": running,
           "since": state.get("since"), "ready": PHASES.get(state["phase"], "")}
    if not running:
        out["fix"] = "the build stopped before its end: run `repoctx index build` to finish it"
    return out
