"""Token counts of words, kept beside the index so that a build parsing a few files does not
load the embedding model's tokenizer (~35 ms of a one-file edit's ~250) for words seen before.

Chunks are sized in the model's tokens (`indexer.parse.chunking`). A BERT-style tokenizer counts a
line as the sum of its pre-tokens' counts (`ModelTokenizer.count_lines`), and the count of a
pre-token never changes while the tokenizer does not. `<index>/token_counts.db` keeps them,
keyed by the identity of the tokenizer file and of the `tokenizers` library; builds that parse
in this process fill it. It is a cache: a missing, stale or unreadable file costs the tokenizer
load, never a different count.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sqlite3
from pathlib import Path

from indexer.vectors.tokenizer import (
    ModelTokenizer,
    _max_tokens,
    _model_file,
    line_counts,
    resolve_model,
)

FILE = "token_counts.db"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS words(word TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
"""


def _library_identity() -> str:
    """The compiled `tokenizers` extension's name, size and mtime (an upgrade changes it),
    found without importing the package."""
    spec = importlib.util.find_spec("tokenizers")
    if spec is None or not spec.submodule_search_locations:
        return ""
    pkg = spec.submodule_search_locations[0]
    parts = []
    for name in sorted(os.listdir(pkg)):
        if name.startswith("tokenizers.") and name.endswith((".so", ".pyd")):
            st = os.stat(os.path.join(pkg, name))
            parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
    return ",".join(parts)


class CachedCounter:
    """The token counter `parse_content` uses (``count``, ``count_lines``, ``max_tokens``),
    answering from the stored counts and loading the tokenizer only for a word it lacks (or
    for what it cannot answer: texts other than ``""`` counted whole, another tokenizer kind)."""

    def __init__(self, model: str, max_tokens: int, conn: sqlite3.Connection, key: str) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self._conn = conn
        self._key = key
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        if meta.get("key") != key:  # another tokenizer (or none yet): start afresh
            with conn:
                conn.execute("DELETE FROM words")
                conn.execute("DELETE FROM meta")
            meta = {}
        self._overhead = int(meta["overhead"]) if "overhead" in meta else None
        self._bert = json.loads(meta["bert"]) if "bert" in meta else None
        self._counts: dict[str, int] = {}
        self._new: dict[str, int] = {}
        self._tokenizer: ModelTokenizer | None = None

    def _real(self) -> ModelTokenizer:
        if self._tokenizer is None:
            from indexer.vectors.tokenizer import process_tokenizer

            self._tokenizer = process_tokenizer(self.model)
            self._overhead = self._tokenizer.count([""])[0]
            self._bert = self._tokenizer.bert_like()
        return self._tokenizer

    def count(self, texts: list[str]) -> list[int]:
        if list(texts) == [""] and self._overhead is not None:  # chunk_file's overhead
            return [self._overhead]
        return self._real().count(texts)

    def count_lines(self, text: str) -> list[int] | None:
        if self._bert is None:
            self._real()
        if not self._bert:
            return self._real().count_lines(text)
        return line_counts(text, self._counts, self._learn)

    def _learn(self, unknown: list[str]) -> None:
        """Counts of words this process has not seen: stored ones, else the tokenizer's."""
        counts = self._counts
        # Keyed by the stored word (a text SQLite reads otherwise can only miss); an
        # unreadable cache leaves the words to the tokenizer.
        with contextlib.suppress(sqlite3.Error):
            counts.update(self._conn.execute(
                "SELECT word, n FROM words WHERE word IN (SELECT value FROM json_each(?))",
                [json.dumps(unknown)],
            ))
        missing = [w for w in unknown if w not in counts]
        if missing:
            found = dict(zip(missing, self._real().piece_counts(missing), strict=True))
            counts.update(found)
            self._new.update(found)

    def save(self) -> None:
        """Store the words counted by the tokenizer in this build (one transaction)."""
        if self._tokenizer is not None or self._new:
            self._write()

    def take_learned(self) -> tuple[int, dict[str, int]] | None:
        """(tokens of an empty text, the words the tokenizer counted since the last call) when
        it counts by words, for another process's counter to `merge`; None otherwise."""
        if self._tokenizer is None or not self._bert or not self._new:
            return None
        new, self._new = self._new, {}
        return self._overhead, new

    def merge(self, overhead: int, words: dict[str, int]) -> None:
        """Take what another process's counter learned (`take_learned`); `save` stores it."""
        self._overhead, self._bert = overhead, True
        self._counts.update(words)
        self._new.update(words)

    def keep(self, overhead: int, words: dict[str, int]) -> None:
        """Store what another process's BERT-style tokenizer counted (a pool worker's)."""
        self.merge(overhead, words)
        self._write()

    def _write(self) -> None:
        try:
            with self._conn:
                self._conn.executemany("INSERT OR REPLACE INTO words VALUES (?, ?)",
                                       self._new.items())
                self._conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", [
                    ("key", self._key), ("overhead", str(self._overhead)),
                    ("bert", json.dumps(self._bert)),
                ])
        except sqlite3.Error:
            pass  # a cache: the next build counts these words again
        self._new = {}

    def close(self) -> None:
        self._conn.close()


def open_counter(index_dir: Path, model: str) -> CachedCounter | None:
    """The cached counter of ``model`` for the index at ``index_dir``; None when the model's
    tokenizer is not a local ``tokenizer.json`` (the `hashing` test model, a hub model not
    downloaded yet, one without that file) or the cache cannot be opened: then the
    tokenizer counts everything, as it would without this module."""
    if model == "hashing" or model.startswith("hashing:"):
        return None
    try:
        source = resolve_model(model)
        tokenizer_json = _model_file(source, "tokenizer.json")
        if tokenizer_json is None:
            return None
        st = tokenizer_json.stat()
        key = json.dumps([source.name, str(tokenizer_json.resolve()), st.st_size, st.st_mtime_ns,
                          _library_identity()])
        conn = sqlite3.connect(Path(index_dir) / FILE, isolation_level="")
    except (OSError, sqlite3.Error):
        return None
    try:
        conn.execute("PRAGMA busy_timeout = 10000")
        conn.executescript(_SCHEMA)
        return CachedCounter(model, _max_tokens(source), conn, key)
    except sqlite3.Error:  # damaged: drop it, the next build starts a new one
        conn.close()
        for suffix in ("", "-journal", "-wal", "-shm"):
            Path(str(Path(index_dir) / FILE) + suffix).unlink(missing_ok=True)
        return None


def store_counts(index_dir: Path, model: str, overhead: int, words: dict[str, int]) -> None:
    """Keep the word counts a build's pool workers learned (see `CachedCounter.keep`)."""
    counter = open_counter(index_dir, model)
    if counter is not None:
        try:
            counter.keep(overhead, words)
        finally:
            counter.close()
