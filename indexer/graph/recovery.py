"""What a graph that a build cannot simply continue needs: a bulk load that did not end is
checked before the file is used again, and a damaged file is set aside (kept, renamed) with an
empty generation linked in its place. `indexer.state` decides when.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from indexer.atomic import write_atomic
from indexer.graph.store import (
    DAMAGED_PREFIX,
    SIDECARS,
    WriteDB,
    crash_point,
    graph_file,
    link,
    new_generation,
    read_meta,
    remove_unpublished,
)


@dataclass(frozen=True, slots=True)
class SetAside:
    """A damaged graph moved out of the way (kept for inspection, never deleted)."""

    path: Path  # the database file's new name
    files: tuple[Path, ...]  # everything moved: the file and its -wal/-shm
    reason: str


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
    checks a file the marker still names before it uses it (`interrupted_bulk_load`). An exception
    leaves the marker, and the check, to the next build."""
    if db.file is None:
        yield
        return
    marker = Path(index_dir) / BULK_MARKER
    write_atomic(marker, db.file.name)  # synced, with its directory
    db.execute("PRAGMA synchronous = OFF")
    yield
    db.execute("PRAGMA synchronous = NORMAL")
    # NORMAL syncs the log before a checkpoint and the file after it; FULL waits (busy_timeout)
    # for readers of older snapshots, so that every frame is copied.
    busy = db.execute("PRAGMA wal_checkpoint(FULL)").fetchone()[0]
    crash_point("bulk_load_synced")
    if not busy:
        marker.unlink(missing_ok=True)


def interrupted_bulk_load(index_dir: Path) -> bool | None:
    """Whether a bulk load that did not end (`bulk_load`) left its marker naming the current
    file, which must then be checked (`quick_check`) before it is used again: None without a
    marker; False when it names a file that is no longer current (dropped unchecked). The
    marker stays until `clear_bulk_load`."""
    try:
        name = (Path(index_dir) / BULK_MARKER).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeError):
        name = ""  # unreadable: check whatever is current
    current = graph_file(index_dir)
    return current is not None and current.exists() and name in ("", current.name)


def clear_bulk_load(index_dir: Path) -> None:
    """Drop the marker: its file was found sound, or is no longer current. Under the write lock."""
    (Path(index_dir) / BULK_MARKER).unlink(missing_ok=True)


def set_aside(index_dir: Path, reason: str) -> tuple[SetAside, WriteDB]:
    """Rename the damaged current graph to `graph.db.damaged-<timestamp>` (with its -wal and
    -shm) and link an empty, migrated generation in its place that carries the meta still
    readable (embedding model, vectors location, generation counter). Returns what was moved
    and the writer of the new generation, for a build from scratch. Under the write lock only."""
    remove_unpublished(index_dir)  # what a crashed full rebuild left, as every build does first
    bad = graph_file(index_dir)
    try:
        meta = read_meta(bad) if bad is not None and bad.exists() else {}
    except sqlite3.Error:  # too damaged to read even that: start without it
        meta = {}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dest = Path(index_dir) / f"{DAMAGED_PREFIX}{stamp}"
    i = 1
    while any(Path(f"{dest}{s}").exists() for s in ("", *SIDECARS)):
        i += 1
        dest = Path(index_dir) / f"{DAMAGED_PREFIX}{stamp}-{i}"
    moved = []
    for suffix in ("", *SIDECARS):
        src = Path(f"{bad}{suffix}") if bad is not None else None
        if src is not None and src.exists():
            os.replace(src, f"{dest}{suffix}")
            moved.append(Path(f"{dest}{suffix}"))
    (Path(index_dir) / BULK_MARKER).unlink(missing_ok=True)  # it named the file set aside
    db = new_generation(index_dir, meta)
    link(index_dir, db.file.name)
    return SetAside(dest, tuple(moved), reason), db
