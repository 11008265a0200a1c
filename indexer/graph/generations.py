"""Full rebuilds' generations: a new graph file written beside the current one, swapped in
whole when complete (`indexer.graph.store` says how the files are named and linked), the
vectors of chunks it carries over, and what a failed rebuild leaves (nothing).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from urllib.parse import quote

from indexer.graph.store import (
    GRAPH,
    SIDECARS,
    WriteDB,
    base_name,
    crash_point,
    current_number,
    generation_files,
    graph_file,
    link,
    new_generation,
    next_file,
    read_meta,
    remove_unpublished,
    unlink_all,
)


def begin_generation(index_dir: Path) -> WriteDB:
    """The file a full rebuild writes: `graph.<n+1>.db`, migrated, with the current
    generation's meta carried over, invisible to readers until `publish`. The current file was
    checked first (`indexer.state`: damaged, or written by a newer repoctx). Under the write
    lock only."""
    remove_unpublished(index_dir)
    old = graph_file(index_dir)
    if old is not None and not old.exists():
        old = None
    db = new_generation(index_dir, read_meta(old) if old is not None else {})
    db.previous = old
    crash_point("generation_created")
    return db


def publish(index_dir: Path, db: WriteDB) -> None:
    """Swap the generation ``db`` holds in: readers that open the index from now on read it,
    readers of the one it replaces finish on that (kept until the next full rebuild), older
    generations are deleted (unlinking a file a reader still holds is safe for the reader)."""
    _publish(index_dir, db.file.name)


def install(index_dir: Path, src: Path) -> None:
    """Swap a complete graph file made elsewhere (a pulled snapshot) in as the next generation,
    like a full rebuild: ``src`` is moved (same file system) and published. Under the write lock."""
    remove_unpublished(index_dir)
    dest = next_file(index_dir)
    unlink_all(Path(f"{dest}{s}") for s in SIDECARS)
    os.replace(src, dest)
    _publish(index_dir, dest.name)


def _publish(index_dir: Path, name: str) -> None:
    previous = graph_file(index_dir)
    crash_point("before_swap")
    link(index_dir, name)
    crash_point("after_swap")
    keep = {name} | ({previous.name} if previous is not None else set())
    for _, paths in generation_files(index_dir).items():
        unlink_all(p for p in paths if base_name(p.name) not in keep)
    if GRAPH not in keep:  # the -wal/-shm of a plain graph.db that an earlier rebuild replaced
        unlink_all(Path(index_dir) / f"{GRAPH}{s}" for s in SIDECARS)


def discard(index_dir: Path, db: WriteDB) -> None:
    """Close and delete a generation that was never published (a failed full rebuild)."""
    db.conn.close()
    if db.file is None or graph_file(index_dir) == db.file:
        return
    unlink_all(Path(f"{db.file}{s}") for s in ("", *SIDECARS))


def _with_previous(db: WriteDB, sql: str) -> int:
    """Run ``sql`` with the previous generation attached read-only as ``prev``; the rows it
    changed (0 when there is no previous generation with vectors to carry)."""
    prev = db.previous
    if prev is None or not prev.exists():
        return 0
    db.conn.execute("ATTACH DATABASE ? AS prev", [f"file:{quote(str(prev))}?mode=ro"])
    try:
        tables = db.conn.execute(
            "SELECT count(*) FROM prev.sqlite_master WHERE name IN ('chunks', 'vector_tombstones')"
        ).fetchone()[0]
        if tables != 2:  # an index from before chunks has no vectors to carry
            return 0
        with db.conn:
            return db.conn.execute(sql).rowcount
    finally:
        db.conn.execute("DETACH DATABASE prev")


def inherit_embedded(db: WriteDB) -> int:
    """Mark embedded the chunks of a new generation whose vector the previous one had: chunk
    ids are stable (path, span and content) and the vector table is shared, so a full rebuild
    embeds only chunks that are new. Returns how many were marked."""
    return _with_previous(
        db,
        "UPDATE main.chunks SET embedded = 1 WHERE embedded = 0 "
        "AND id IN (SELECT id FROM prev.chunks WHERE embedded = 1)",
    )


def inherit_tombstones(db: WriteDB) -> int:
    """Tombstone the vectors of the previous generation's chunks that the new one lacks (and
    those the previous one still had to remove). Run after the rebuild's own embedding phase,
    just before `publish`: the next build deletes them, so readers still on the previous
    generation keep their vectors meanwhile. Returns how many."""
    return _with_previous(
        db,
        "INSERT OR IGNORE INTO main.vector_tombstones(chunk_id) "
        "SELECT id FROM prev.chunks WHERE id NOT IN (SELECT id FROM main.chunks) UNION "
        "SELECT chunk_id FROM prev.vector_tombstones "
        "WHERE chunk_id NOT IN (SELECT id FROM main.chunks)",
    )


def unpublished_chunk_ids(index_dir: Path) -> set[int]:
    """Chunk ids of generations newer than the current one: a full rebuild running, or one
    that was killed (the next build removes its file). Their vectors may already be in the
    shared vector table."""
    n = current_number(index_dir)
    out: set[int] = set()
    for k, paths in generation_files(index_dir).items():
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
