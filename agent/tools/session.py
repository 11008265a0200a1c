"""State shared by every call of one run: the index, the searcher, the embedder, and the
re-index that makes a write visible to the next read."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from indexer import Config, Index
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
    concurrent reader: the index's connection is opened with check_same_thread=False."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._index: Index | None = None
        self._index_for: str | None = None
        self._embedder: Any = None

    def index(self, config: Config) -> Index:
        """The index, connected (NoIndexError says how to build one). After a full rebuild (or
        a repair, or a pull) swapped in another generation file, the next call reads that one:
        one readlink per call tells."""
        with self._lock:
            key = str(config.index_path)
            if self._index is not None and self._index_for == key:
                if self._index.current():
                    return self._index
                # Not closed here: a searcher of the call in progress may still read it (its
                # connection is closed when the last reference goes); it reads its own, older
                # generation.
                self._index = None
            else:
                self.close()
            self._index, self._index_for = Index(config).connect(), key
            return self._index

    def embed_model(self, config: Config) -> str | None:
        """The model the index's vectors were made with; None for a lexical-only index."""
        return self.index(config).graph.embed_model()

    def embedder(self, config: Config) -> Any:
        """The embedder matching the index (loaded once per run); None without vectors."""
        model = self.embed_model(config)
        if model is None:
            return None
        with self._lock:
            if self._embedder is None or self._embedder.name != model:
                from indexer import create_embedder  # loads the embedding stack: only here

                self._embedder = create_embedder(model, batch_size=config.embed_batch_size)
            return self._embedder

    def searcher(self, config: Config, *, semantic: bool) -> Searcher:
        """A searcher over the index; with ``semantic`` the embedder is loaded (once per run)
        first, so later searchers reuse it. Cheap to make: the vector table opens lazily."""
        embedder = self.embedder(config) if semantic else self._embedder
        return Searcher(self.index(config), embedder=embedder)

    def reindex(self, config: Config) -> ReindexReport:
        """Bring the index up to date with the tree: only changed files are parsed, and their
        chunks get vectors when the index keeps vectors."""
        t0 = time.perf_counter()
        embedder = self.embedder(config) if Index(config).exists() else None
        # A handle of its own: the session's keeps its connection open for a read in progress
        # (an incremental build writes the generation it reads; a full one is seen by `index`).
        with self._lock:
            if embedder is not None:
                stats = Index(config).build(wait_lock=LOCK_WAIT_S, embed=True, embedder=embedder)
            else:
                stats = Index(config).build(wait_lock=LOCK_WAIT_S)
        return ReindexReport(
            time.perf_counter() - t0, stats.files_parsed, stats.files_deleted, embedder is not None
        )

    def close(self) -> None:
        with self._lock:
            if self._index is not None:
                self._index.close()
            self._index = None
            self._index_for = None
