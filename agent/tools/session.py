"""State shared by every call of one run: the index connection, the searcher, the embedder, and
the re-index that makes a write visible to the next read."""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass
from typing import Any

from indexer.build import build
from indexer.config import Config
from indexer.graph import store
from indexer.graph.reads import GraphReads
from retrieval.search import Searcher

#: Seconds a re-index waits for another writer (an `index build` running alongside).
LOCK_WAIT_S = 30.0


@dataclass(frozen=True)
class ReindexReport:
    seconds: float
    files_parsed: int
    files_deleted: int
    #: True when the index keeps vectors and the changed chunks were embedded again.
    embedded: bool


class ToolSession:
    """Caches that outlive one tool call. Thread-safe enough for one caller at a time plus a
    concurrent reader: the connection is opened with check_same_thread=False."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._conn_for: str | None = None
        self._file: Any = None  # the generation file the connection reads
        self._embedder: Any = None

    def conn(self, config: Config) -> sqlite3.Connection:
        """A read connection to the index (NoIndexError says how to build one). After a full
        rebuild (or a repair, or a pull) swapped in another generation file, the next call
        opens that one: one readlink per call tells."""
        with self._lock:
            key = str(config.index_path)
            if self._conn is not None and self._conn_for == key:
                current = store.graph_file(config.index_path)
                if current is None or current == self._file:
                    return self._conn
                # Not closed here: a searcher of the call in progress may still hold it (it is
                # closed when the last reference goes); it reads its own, older generation.
                self._conn = None
            else:
                self.close()
            db = store.open_for_read(config.index_path)
            self._conn, self._conn_for, self._file = db.conn, key, db.file
            return self._conn

    def embed_model(self, config: Config) -> str | None:
        """The model the index's vectors were made with; None for a lexical-only index."""
        return GraphReads(self.conn(config)).embed_model()

    def embedder(self, config: Config) -> Any:
        """The embedder matching the index (loaded once per run); None without vectors."""
        model = self.embed_model(config)
        if model is None:
            return None
        with self._lock:
            if self._embedder is None or self._embedder.name != model:
                from indexer.vectors.embed import create_embedder

                self._embedder = create_embedder(model, batch_size=config.embed_batch_size)
            return self._embedder

    def searcher(self, config: Config, *, semantic: bool) -> Searcher:
        """A searcher over the index; with ``semantic`` the embedder is loaded (once per run)
        first, so later searchers reuse it. Cheap to make: the vector table opens lazily."""
        embedder = self.embedder(config) if semantic else self._embedder
        return Searcher.from_config(self.conn(config), config, embedder=embedder)

    def reindex(self, config: Config) -> ReindexReport:
        """Bring the index up to date with the tree: only changed files are parsed, and their
        chunks get vectors when the index keeps vectors."""
        t0 = time.perf_counter()
        embedder = (
            self.embedder(config) if config.index_path.joinpath("graph.db").exists() else None
        )
        with self._lock:
            if embedder is not None:
                stats = build(config, wait_lock=LOCK_WAIT_S, embed=True, embedder=embedder)
            else:
                stats = build(config, wait_lock=LOCK_WAIT_S)
        return ReindexReport(
            time.perf_counter() - t0, stats.files_parsed, stats.files_deleted, embedder is not None
        )

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            self._conn_for = None
            self._file = None
