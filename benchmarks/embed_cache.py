"""A benchmark-side cache of embeddings by text, so a rerun of the localization benchmark
embeds only text it has never seen.

The index reuses a vector by content hash only while some chunk of the current table still has
that text; the benchmark walks each repository from its oldest task commit to its newest, so a
second run starts from the newest state and embeds most of the history again (about an hour of
the 198 development tasks on 2 cores). This wrapper keeps every vector it ever computed in a
SQLite file beside the benchmark's work trees, keyed by the model and the exact text. The vectors
are the model's own: a cached run ranks exactly as an uncached one.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np


class CachedEmbedder:
    """Wraps an `indexer.vectors.embed.Embedder`: ``embed`` answers from the cache where it can and
    embeds (and stores) the rest; everything else is the wrapped embedder's."""

    def __init__(self, inner, path: Path) -> None:
        self.inner = inner
        path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(str(path), isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("CREATE TABLE IF NOT EXISTS vec (key BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")
        self.hits = self.misses = 0

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def _key(self, text: str) -> bytes:
        return hashlib.sha256(f"{self.inner.name}\0{text}".encode()).digest()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        keys = [self._key(t) for t in texts]
        found: dict[bytes, np.ndarray] = {}
        for i in range(0, len(keys), 500):
            batch = keys[i : i + 500]
            for k, v in self.conn.execute(
                f"SELECT key, v FROM vec WHERE key IN ({','.join('?' * len(batch))})", batch
            ):
                found[k] = np.frombuffer(v, dtype=np.float32)
        todo = [i for i, k in enumerate(keys) if k not in found]
        self.hits += len(keys) - len(todo)
        self.misses += len(todo)
        if todo:
            fresh = np.asarray(self.inner.embed([texts[i] for i in todo]), dtype=np.float32)
            with self.conn:
                self.conn.executemany(
                    "INSERT OR REPLACE INTO vec VALUES (?, ?)",
                    [(keys[i], fresh[j].tobytes()) for j, i in enumerate(todo)],
                )
            for j, i in enumerate(todo):
                found[keys[i]] = fresh[j]
        if not keys:
            return np.zeros((0, self.inner.dim), dtype=np.float32)
        return np.stack([found[k] for k in keys])
