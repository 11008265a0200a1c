"""Vectors written by the embedding workers as Lance fragments, committed by the driver.

On the Ray engine the driver does not receive vectors: each batch goes to an actor as the
rows to write (chunk id, content hash, place, symbol) and the texts of the hashes the table
lacks; the actor embeds them, takes the vectors of the other hashes from the table (they are
committed), and writes every row of the batch as one uncommitted fragment (`FragmentWriter`).
The driver gets back only the fragment's metadata and the chunk ids it holds, and commits the
fragments of a window of batches as one table version (`VectorStore.commit_fragments`): readers
see the whole window or nothing of it. SQLite's ``embedded`` marks are written after that
commit, never before, so a build stopped in between leaves rows unmarked that the next build
embeds again (their fragments, never committed, are invisible; the driver names their files
in the index directory before each commit, and the next build deletes those no version
names: `UncommittedMarker`). A chunk id the table already holds (a crash after a commit,
before its marks) is replaced by the same commit.

Content is still embedded once per build: a row whose hash an uncommitted batch is embedding
waits until that batch's commit, then reuses its vector from the table.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from indexer.atomic import write_atomic
from indexer.models import Progress
from indexer.vectors.table import VectorRow, VectorStore, absolute_uri, first_line

#: Rows per batch when deferred rows are sent after the last commit (the phase's own size).
DEFERRED_BATCH = 256
#: A pending chunk as the embedding phase reads it: id, content hash, path, language, start
#: and end line, symbol, header.
Row = tuple


@dataclass(frozen=True, slots=True)
class FragmentBatch:
    """What the driver sends a worker: the rows to write (id, hash, path, language, start,
    end, symbol) and the text of each hash the table lacks; every other hash is in the table."""

    rows: list[tuple]
    texts: dict[str, str]


@dataclass(slots=True)
class Written:
    """What a worker sends back: the uncommitted fragment and the chunk ids it holds, the ids
    whose reused vector it did not find. A worker that cannot reach the table (another
    machine than a local table, no credentials for the bucket) sends ``vectors`` instead,
    those it embedded by hash, and the driver writes the fragment."""

    fragment: Any
    chunk_ids: list[str]
    missing: list[str] = field(default_factory=list)
    vectors: dict[str, Any] | None = None


def batch_rows(batch: FragmentBatch, vectors: dict[str, Any], store: VectorStore,
               model: str) -> tuple[list[VectorRow], list]:
    """The batch's rows with their vectors: ``vectors`` (embedded now, by hash), else the
    table's for the same content. Returns (rows, ids whose vector the table lost since the
    driver looked: the next build embeds them)."""
    reused = {r[1] for r in batch.rows} - vectors.keys()
    if reused:
        vectors = {**vectors, **store.vectors_for_hashes(reused)}
    rows, missing = [], []
    for cid, h, path, lang, s, e, sym in batch.rows:
        vec = vectors.get(h)
        if vec is None:
            missing.append(cid)
        else:
            rows.append(VectorRow(str(cid), h, path, lang or "", s, e, sym, model, vec))
    return rows, missing


def write_batch(store: VectorStore, batch: FragmentBatch, vectors: dict[str, Any]) -> Written:
    """Write the batch's rows as one uncommitted fragment of ``store``'s table."""
    rows, missing = batch_rows(batch, vectors, store, store.model)
    fragment = store.write_fragment(rows) if rows else None
    return Written(fragment, [r.chunk_id for r in rows], missing)


class FragmentWriter:
    """A worker's half: embed a batch's new texts with ``embedder`` and write its rows as one
    fragment of the table at ``uri`` (`write_batch`). Use `open_writer`."""

    def __init__(self, embedder, store: VectorStore) -> None:
        self.embedder = embedder
        self.store = store

    def write(self, batch: FragmentBatch) -> Written:
        return write_batch(self.store, batch, embed_texts(self.embedder, batch))


def open_writer(embedder, uri: str, storage_options: dict | None,
                expected: dict | None = None) -> tuple[FragmentWriter | None, str | None]:
    """(a writer of the driver's table at ``uri``, None) or (None, why this process cannot
    write it). The table is opened, never made (a worker that makes one writes files the
    driver never sees), and must be the driver's (``expected``: `VectorStore.identity`)."""
    try:
        store = VectorStore.open_existing(uri, embedder.dim, embedder.name, storage_options)
        if store is None:
            return None, f"no vector table at {uri} from here"
        problem = store.differs_from(expected) if expected is not None else None
    except Exception as exc:  # noqa: BLE001 - any reason (credentials, network): said, not raised
        return None, f"{type(exc).__name__}: {first_line(exc)}"
    if problem is not None:
        return None, f"the table at {uri} is not the driver's: {problem}"
    return FragmentWriter(embedder, store), None


def embed_texts(embedder, batch: FragmentBatch) -> dict[str, Any]:
    """The batch's new texts embedded, by content hash."""
    hashes = list(batch.texts)
    if not hashes:
        return {}
    return dict(zip(hashes, embedder.embed([batch.texts[h] for h in hashes]), strict=True))


class InlineFragments:
    """A `FragmentWriter` in this process behind the pool interface of `embed_to_fragments`
    (``submit``/``result``/``window``): the same writes and commits as Ray actors make, one
    batch at a time."""

    window = 0

    def __init__(self, embedder, uri: str, storage_options: dict | None = None) -> None:
        self.writer = FragmentWriter(
            embedder, VectorStore.open(uri, embedder.dim, embedder.name, storage_options))

    def submit(self, batch: FragmentBatch) -> Written:
        return self.writer.write(batch)

    def result(self, handle: Written) -> Written:
        return handle


#: In the index directory (not in a graph generation, which a killed full rebuild loses): the
#: data files of the fragments the driver is about to commit, written before each commit.
MARKER = "vectors-uncommitted.json"


class UncommittedMarker:
    """The record of fragments written and not yet committed, for the next build to delete if
    no version names them (`VectorStore.drop_uncommitted`): a run stopped between a worker's
    write and the driver's commit leaves them in the table's directory, invisible to readers.
    The marker is rewritten as each batch's fragment arrives: fragments a worker was still
    writing when the driver stopped were never received, so no marker names them, and at most
    a window of batches (those in flight) stays on disk."""

    def __init__(self, index_dir: str | os.PathLike[str]) -> None:
        self.path = os.path.join(index_dir, MARKER)

    def record(self, vs: VectorStore, fragments: list) -> None:
        """Name ``fragments``' files, durably, before they are committed to ``vs``."""
        files = VectorStore.data_files(fragments)
        if files:
            write_atomic(self.path, json.dumps({"uri": absolute_uri(vs.uri), "files": files,
                                                "since": vs.version()}))

    def clear(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def recover(self, vs: VectorStore) -> int:
        """Delete the recorded files that no version of ``vs``'s table names (a record of
        another table, after the vectors moved, is dropped); returns how many."""
        try:
            with open(self.path, encoding="utf-8") as fh:
                found = json.load(fh)
        except FileNotFoundError:
            return 0
        except (OSError, ValueError):
            found = None  # unreadable: nothing to trust in it
        removed = 0
        if (isinstance(found, dict) and found.get("uri") == absolute_uri(vs.uri)
                and isinstance(found.get("files"), list) and isinstance(found.get("since"), int)):
            removed = vs.drop_uncommitted([str(f) for f in found["files"]], found["since"])
        self.clear()
        return removed


@dataclass(slots=True)
class _Window:
    """Batches written and not yet committed."""

    fragments: list = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    failed: list = field(default_factory=list)  # chunk ids left for the next build (-1)
    hashes: set[str] = field(default_factory=set)  # content of the rows written
    rows: int = 0  # pending rows settled by these batches
    batches: int = 0


def embed_to_fragments(
    vs: VectorStore,
    pool,
    batches: Iterable[list[Row]],
    read_texts: Callable[[list[Row]], dict[str, str]],
    mark: Callable[[list, list], None],
    total: int,
    progress: Callable[[Progress], None] | None = None,
    marker: UncommittedMarker | None = None,
) -> tuple[int, int]:
    """Embed the pending ``batches`` through ``pool``'s workers, which write fragments of
    ``vs``'s table; commit them a window at a time (``pool.window`` batches, at least one) and
    only then ``mark(ok_ids, failed_ids)`` in SQLite; ``marker`` names each window's files
    before its commit and is cleared at the end. ``read_texts`` gives the embedding input
    of rows by content hash (the files are the driver's). Returns (texts embedded, chunks
    whose vector was reused)."""
    # One scan of two short columns: which hashes need the model, which ids a commit replaces.
    # The Ray engine embeds only runs of MIN_CHUNKS or more, where the in-process path scans
    # them too (`KEY_SCAN_MIN`).
    known_ids, known_hashes = vs.keys()
    commit_every = max(1, pool.window)
    inflight: set[str] = set()  # hashes embedded by batches not committed yet
    deferred: list[Row] = []  # rows waiting for such a hash's commit
    window: deque = deque()  # (batch, handle, failed ids, rows read) submitted, not collected
    pending = _Window()
    counts = {"embedded": 0, "reused": 0, "done": 0}

    def submit(rows: list[Row]) -> None:
        waiting = [r for r in rows if r[1] in inflight]
        deferred.extend(waiting)
        rows = [r for r in rows if r[1] not in inflight]
        new = {r[1] for r in rows} - known_hashes
        texts = read_texts([r for r in rows if r[1] in new]) if new else {}
        failed = [r[0] for r in rows if r[1] in new and r[1] not in texts]
        keep = [tuple(r[:7]) for r in rows if r[1] not in new or r[1] in texts]
        batch = FragmentBatch(keep, texts)
        handle = pool.submit(batch) if keep else None
        inflight.update(texts)
        counts["embedded"] += len(texts)
        counts["reused"] += len(keep) - len(texts)
        window.append((batch, handle, failed, len(rows)))

    def collect() -> None:
        batch, handle, failed, n = window.popleft()
        pending.batches += 1
        pending.rows += n
        pending.failed.extend(failed)
        pending.hashes.update(batch.texts)
        if handle is None:
            return
        written = pool.result(handle)
        if written.vectors is not None:  # a worker that cannot reach the table: written here
            written = write_batch(vs, batch, written.vectors)
        if written.fragment is not None:
            pending.fragments.append(written.fragment)
            if marker is not None:
                marker.record(vs, pending.fragments)
        pending.ids.extend(written.chunk_ids)
        # Their vectors left the table since the scan: they stay pending (embedded = 0) for the
        # next build to embed, not marked as unreadable files (-1), which no build retries.
        counts["reused"] -= len(written.missing)

    def commit() -> None:
        nonlocal pending
        w, pending = pending, _Window()
        vs.commit_fragments(w.fragments, [i for i in w.ids if i in known_ids])
        mark([int(i) for i in w.ids], w.failed)  # after the commit: see the module docstring
        known_ids.update(w.ids)
        known_hashes.update(w.hashes)
        inflight.difference_update(w.hashes)
        counts["done"] += w.rows
        if progress:
            progress(Progress("embed", min(counts["done"], total), total))

    def settle(final: bool) -> None:
        while window and (final or len(window) > pool.window):
            collect()
            if pending.batches >= commit_every:
                commit()
        if final and pending.batches:
            commit()

    for rows in _with_deferred(batches, deferred, inflight):
        submit(rows)
        settle(final=False)
    while window or pending.batches or deferred:
        settle(final=True)
        ready = [r for r in deferred if r[1] not in inflight]
        deferred[:] = [r for r in deferred if r[1] in inflight]
        for start in range(0, len(ready), DEFERRED_BATCH):
            submit(ready[start : start + DEFERRED_BATCH])
    if marker is not None:
        marker.clear()
    return counts["embedded"], counts["reused"]


def _with_deferred(
    batches: Iterable[list[Row]], deferred: list[Row], inflight: set[str]
) -> Iterator[list[Row]]:
    """``batches``, each followed by the deferred rows whose hash has been committed since."""
    for rows in batches:
        yield rows
        ready = [r for r in deferred if r[1] not in inflight]
        if ready:
            deferred[:] = [r for r in deferred if r[1] in inflight]
            yield ready

