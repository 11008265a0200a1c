"""The embedding phase: vectors for chunks that lack them, reused by content hash.

SQLite says which chunks exist; this phase makes LanceDB agree. It runs after the graph and
lexical index are committed (they are usable while vectors fill in), commits per batch
(a killed run resumes where it stopped) and never embeds the same content twice. On the Ray
engine the actors write the rows as table fragments and this process commits a window of
batches at a time, marking chunks embedded only after the commit (`indexer.vectors.fragments`).

Size: one phase from the table's upkeep (its place, damage, lost rows, a stopped run's
fragments) through reading pending chunks and their texts to the two ways of writing vectors,
in process and through the Ray engine's fragments; they share the pending-row cursor.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from indexer.config import Config
from indexer.errors import ModelMismatchError
from indexer.graph import store
from indexer.graph.reads import GraphReads
from indexer.graph.store import WriteDB
from indexer.models import BuildStats, Progress
from indexer.parse.chunking import chunk_hash
from indexer.parse.testpaths import sql_is_test_path

if TYPE_CHECKING:
    from indexer.changes import ChangeSet
    from indexer.phases import BuildRun

#: Chunks fetched, reused or embedded, and committed together.
BATCH = 256
#: Pending chunks above which an embedding run reads the vector table's keys up front.
KEY_SCAN_MIN = 4 * BATCH
_TEST_PATH_SQL, _TEST_PATH_PARAMS = sql_is_test_path("f.path")


@dataclass(frozen=True, slots=True)
class EmbedStats:
    chunks: int
    embedded: int  # chunks that needed the model
    reused: int  # chunks whose content hash already had a vector
    removed: int  # vectors of chunks that no longer exist
    model: str
    seconds: float
    coverage: float  # share of chunks with a vector, 0..1
    # CPU seconds of this process (the driver, on the Ray engine) and of the embedding
    # workers (0 in process) over the run: how much of the work the driver still does.
    driver_cpu: float = 0.0
    worker_cpu: float = 0.0
    # Why some embedding workers sent their vectors back for the driver to write ('' if none).
    driver_writes: str = ""


def _follow_vectors_uri(config: Config, conn) -> str:
    """The URI this build writes vectors to: the configured one, else where the index keeps
    them (a build or watcher without the flag must not move them). When it moved, every
    chunk is embedded again into the new table (vectors there are still reused by hash);
    `--vectors-uri <index>/vectors.lance` brings them back next to the graph."""
    from indexer.locations import (
        VECTORS_DIR,
        check_uri,
        locate_vectors,
        record_vectors_uri,
        recorded_vectors_uri,
    )

    recorded = recorded_vectors_uri(conn) or ""
    wanted = (
        check_uri(config.vectors_uri, "vectors URI")
        if config.vectors_uri
        else locate_vectors(None, recorded, config.index_path)
    )  # refuses a recorded credential
    if wanted == str(config.index_path / VECTORS_DIR):
        wanted = ""
    if wanted != recorded:
        with conn:
            conn.execute("UPDATE chunks SET embedded = 0")
            record_vectors_uri(conn, wanted)
    return locate_vectors(wanted, None, config.index_path)


def check_model(db: WriteDB, model: str, reembed: bool) -> None:
    """Refuse to mix models in one index unless asked to rebuild the vectors."""
    recorded = store.get_meta(db, "embed_model")
    if recorded and recorded != model and not reembed:
        raise ModelMismatchError(
            f"This index was embedded with {recorded!r}, not {model!r} — rerun with `--reembed` "
            f"to rebuild the vectors with {model!r}, or use `--embed-model {recorded}`."
        )


def embed_pending(config: Config, db: WriteDB, **kw) -> EmbedStats:
    """`_embed_pending`, with a disk or quota that fills up under the vector table (Lance says
    so only in words, with no path) raised as the OSError it is, naming the table's directory:
    the index's own writes are SQLite's, committed batch by batch, and stay as they were."""
    from indexer.vectors.table import exhaustion_errno, local_table_dir

    try:
        return _embed_pending(config, db, **kw)
    except (OSError, RuntimeError) as exc:
        code = exhaustion_errno(exc)
        if code is None:
            raise
        from indexer.locations import vectors_uri

        uri = vectors_uri(config, db.conn)
        raise OSError(code, os.strerror(code), local_table_dir(uri) or uri) from exc


def _embed_pending(
    config: Config,
    db: WriteDB,
    *,
    embedder=None,
    reembed: bool = False,
    progress: Callable | None = None,
    limit: int | None = None,
    engine=None,
    notify: Callable[[str], None] | None = None,
) -> EmbedStats:
    """Give every chunk a vector. ``embedder`` defaults to ``config.embed_model``; it is only
    loaded when some chunk has no vector yet. With ``engine`` (a ``RaySession``) the model
    runs in Ray actors, which write the vectors into table fragments this process commits.
    A damaged local table is set aside and every
    chunk embedded again; ``notify`` receives one line saying so."""
    from indexer.locations import storage_options
    from indexer.vectors.table import VectorStore

    t0 = time.perf_counter()
    conn = db.conn
    model_name = canonical_model_name(config.embed_model) if embedder is None else embedder.name
    check_model(db, model_name, reembed)
    uri = _follow_vectors_uri(config, conn)
    _set_aside_damaged(config, db, uri, notify)  # --reembed too: a file or link in its place
    if reembed:
        with conn:
            conn.execute("UPDATE chunks SET embedded = 0")
    else:
        _forget_lost_vectors(conn, uri)
    _recover_uncommitted(config, conn, uri)  # before any return: also on a no-op build
    pending_total = conn.execute("SELECT count(*) FROM chunks WHERE embedded = 0").fetchone()[0]
    tombstones = [r[0] for r in conn.execute("SELECT chunk_id FROM vector_tombstones")]
    if not pending_total and not tombstones and not reembed:
        _record_stamp(db, uri)
        done, total = GraphReads(conn).vector_coverage()
        return EmbedStats(
            total, 0, 0, 0, model_name, time.perf_counter() - t0, done / total if total else 1.0
        )
    pool = None
    if engine is not None and embedder is None and engine.worth_it(chunks=pending_total):
        pool = embedder = engine.embed_pool(config.embed_model, config.embed_batch_size)
    elif embedder is None:
        from indexer.vectors.embed import create_embedder

        embedder = create_embedder(config.embed_model, batch_size=config.embed_batch_size)
    try:
        options = storage_options(config)
        if reembed:
            vs = VectorStore.reset(uri, embedder.dim, embedder.name, options)
        else:
            vs = VectorStore.open(uri, embedder.dim, embedder.name, options)
            if _forget_missing_rows(conn, vs):
                pending_total = conn.execute(
                    "SELECT count(*) FROM chunks WHERE embedded = 0"
                ).fetchone()[0]
        t_embed, cpu0 = time.perf_counter(), time.process_time()  # after loading the model
        with conn:
            store.set_meta(db, "embed_model", embedder.name)
            store.set_meta(db, "embed_dim", str(embedder.dim))
        total = pending_total if limit is None else min(limit, pending_total)
        if pool is None:
            embedded, reused = _embed_batches(
                config, conn, vs, _Inline(embedder), embedder.name, total, progress
            )
        else:
            embedded, reused = _embed_to_fragments(config, db, vs, pool, uri, total, progress,
                                                   notify)
    finally:
        if pool is not None:
            pool.close()
    driver_cpu = time.process_time() - cpu0
    # Vectors of deleted chunks go last: until now they could still be reused by content hash
    # (a moved function, a renamed file).
    removed = 0
    if tombstones:
        vs.delete_chunk_ids([str(i) for i in tombstones])
        removed = len(tombstones)
        with conn:
            conn.executemany(
                "DELETE FROM vector_tombstones WHERE chunk_id = ?", [(i,) for i in tombstones]
            )
    if embedded > 1000:  # never after a one-file edit: these take seconds on a large table
        vs.maybe_index()
        if vs.needs_optimize():
            vs.optimize()
    _record_stamp(db, uri)
    done_n, total_n = GraphReads(conn).vector_coverage()
    return EmbedStats(
        chunks=total_n,
        embedded=embedded,
        reused=reused,
        removed=removed,
        model=embedder.name,
        seconds=time.perf_counter() - t_embed,
        coverage=done_n / total_n if total_n else 1.0,
        driver_cpu=round(driver_cpu, 3),
        worker_cpu=round(getattr(pool, "worker_cpu", 0.0), 3),
        driver_writes=getattr(pool, "driver_writes", ""),
    )


def _recover_uncommitted(config: Config, conn, uri: str) -> None:
    """Delete the fragments a stopped Ray run wrote and never committed, as its marker in the
    index directory names them (`UncommittedMarker`); one stat when there is none."""
    from indexer.vectors.fragments import UncommittedMarker
    from indexer.vectors.table import VectorStore, raw_dataset, recorded_model

    marker = UncommittedMarker(config.index_path)
    if not os.path.exists(marker.path):
        return
    from indexer.locations import storage_options

    dataset = raw_dataset(config, conn)  # the table as it is, whatever model it holds
    if dataset is None:
        marker.clear()
        return
    model, dim = recorded_model(dataset)
    marker.recover(VectorStore(dataset, uri, dim, model, storage_options(config)))


def _embed_to_fragments(config: Config, db: WriteDB, vs, pool, uri: str, total: int,
                        progress, notify) -> tuple[int, int]:
    """The Ray engine's embedding: its actors embed and write fragments of the table, this
    process reads the texts, commits and marks (`indexer.vectors.fragments`)."""
    from indexer.locations import storage_options
    from indexer.vectors.fragments import UncommittedMarker, embed_to_fragments
    from indexer.vectors.table import absolute_uri

    conn = db.conn

    # Actors run in another working directory (on other machines): a relative path there
    # names another table, so they get it absolute and check that it is this one.
    pool.open_table(absolute_uri(uri), storage_options(config), vs.identity())
    if pool.driver_writes and notify is not None:
        notify(f"Embedding workers write no fragments here, this process writes their rows: "
               f"{pool.driver_writes}")
    # The same order as in process (`_embed_batches`): the first path of a shared content
    # gives it its vector (the path is in the text), so both engines write the same table.
    return embed_to_fragments(vs, pool, _pending_rows(conn, total, by_path=total > KEY_SCAN_MIN),
                              lambda rows: _texts(config.root, rows, {}),
                              lambda ok, failed: _mark(conn, ok, failed), total, progress,
                              UncommittedMarker(config.index_path))


#: Graph meta: the vector table's files (names, sizes, mtimes) when this index last wrote or
#: checked it; a build that finds them so reads nothing of the table (see _set_aside_damaged).
STAMP_META = "vectors_stamp"


def _record_stamp(db: WriteDB, uri: str) -> None:
    from indexer.vectors.table import table_stamp

    stamp = table_stamp(uri)
    if stamp is not None and stamp != store.get_meta(db, STAMP_META):
        with db.conn:
            store.set_meta(db, STAMP_META, stamp)


def _set_aside_damaged(config: Config, db: WriteDB, uri: str, notify) -> None:
    """Set a damaged local vector table aside (kept, renamed) and mark every chunk pending, so
    this build embeds them into a new table instead of reporting full coverage over vectors no
    search can read. A table whose files are as this index last left them is not read (one
    directory listing: a no-op build stays cheap); one changed behind the index's back (a file
    deleted, cut short, overwritten, a manifest gone) is read through (`vectors.table_damage`)."""
    from indexer.locations import storage_options
    from indexer.vectors.table import set_aside, table_damage

    dim = store.get_meta(db, "embed_dim") or ""
    problem = table_damage(uri, storage_options(config), store.get_meta(db, STAMP_META),
                           store.get_meta(db, "embed_model"), int(dim) if dim.isdigit() else 0)
    if problem is None:
        return
    where = set_aside(uri)
    with db.conn:
        db.conn.execute("UPDATE chunks SET embedded = 0 WHERE embedded != 0")
        store.set_meta(db, STAMP_META, "")
    if notify is not None:
        notify(f"The vector table at {uri} was damaged ({problem}): set it aside as {where}; "
               "embedding every chunk again.")


def _forget_lost_vectors(conn, uri: str) -> None:
    """A deleted local table (checked with one stat: a no-op build stays cheap) leaves every
    chunk marked embedded without a vector: mark them pending so this build embeds them."""
    from indexer.vectors.table import table_missing

    if (
        table_missing(uri)
        and conn.execute("SELECT EXISTS(SELECT 1 FROM chunks WHERE embedded = 1)").fetchone()[0]
    ):
        with conn:
            conn.execute("UPDATE chunks SET embedded = 0 WHERE embedded = 1")


def _forget_missing_rows(conn, vs) -> int:
    """Chunks marked embedded whose vector is not in the table (a table recreated or restored
    from an older copy) become pending again; returns how many. Checked when the table is
    open anyway: one row count, and a scan of ids only when it falls short."""
    marked = conn.execute("SELECT count(*) FROM chunks WHERE embedded = 1").fetchone()[0]
    if not marked or vs.count() >= marked:
        return 0
    present = vs.chunk_ids()
    lost = [
        (cid,)
        for (cid,) in conn.execute("SELECT id FROM chunks WHERE embedded = 1")
        if str(cid) not in present
    ]
    if lost:
        with conn:
            conn.executemany("UPDATE chunks SET embedded = 0 WHERE id = ?", lost)
    return len(lost)


class _Inline:
    """Runs the model in this process: each batch is embedded when submitted."""

    window = 0

    def __init__(self, embedder) -> None:
        self.embedder = embedder

    def submit(self, texts: list[str]) -> np.ndarray:
        return self.embedder.embed(texts)

    def result(self, handle: np.ndarray) -> np.ndarray:
        return handle


_PENDING_COLUMNS = ("c.id, c.content_hash, f.path, f.language, c.start_line, c.end_line, "
                    "c.symbol, c.header")
# Ids: a walk of the partial index `chunks_unembedded`, as long as the pending chunks.
_PENDING_BY_ID = (f"SELECT {_PENDING_COLUMNS} FROM chunks c JOIN files f ON f.id = c.file_id "
                  f"WHERE c.embedded = 0 AND {_TEST_PATH_SQL} = ? AND c.id > ? "
                  "ORDER BY c.id LIMIT ?")
# Paths: files in path order, each file's chunks by `chunks_file` (in id order), no sort. The
# CROSS JOIN keeps files outside: statistics that say few chunks are pending would otherwise
# choose the partial index and sort every pending chunk for each batch.
_PENDING_BY_PATH = (f"SELECT {_PENDING_COLUMNS} FROM files f CROSS JOIN chunks c "
                    f"ON c.file_id = f.id WHERE c.embedded = 0 AND {_TEST_PATH_SQL} = ? "
                    "AND (f.path, c.id) > (?, ?) ORDER BY f.path, c.id LIMIT ?")


def _mark(conn, embedded: list[int], unreadable: list[int]) -> None:
    """Mark chunks embedded, and those whose file could not be read now (-1: left for the
    next build, which moves on meanwhile), in one transaction."""
    with conn:
        conn.executemany("UPDATE chunks SET embedded = 1 WHERE id = ?", [(i,) for i in embedded])
        conn.executemany("UPDATE chunks SET embedded = -1 WHERE id = ?", [(i,) for i in unreadable])


def _pending_rows(conn, total: int, by_path: bool) -> Iterator[list]:
    """Chunks without a vector in batches, product code before tests (the coverage that
    matters most fills in first); a cursor, so batches can be in flight before the rows of
    earlier ones are marked. ``by_path``: file by file in path order, so that `_texts` reads a
    file once per run, not once per batch its chunks fall in (8 reads per file on the stdlib
    in id order); that walk passes every chunk of the index, so it is for long runs (above
    `KEY_SCAN_MIN`); a short run (an edit) follows the ids of the pending chunks alone."""
    done = 0
    query = _PENDING_BY_PATH if by_path else _PENDING_BY_ID
    for is_test in (0, 1):
        last: tuple = ("", -1) if by_path else (-1,)
        while done < total:
            rows = conn.execute(
                query, [*_TEST_PATH_PARAMS, is_test, *last, min(BATCH, total - done)]
            ).fetchall()
            if not rows:
                break
            last = (rows[-1][2], rows[-1][0]) if by_path else (rows[-1][0],)
            done += len(rows)
            yield rows


def _embed_batches(
    config: Config, conn, vs, pool, model: str, total: int, progress
) -> tuple[int, int]:
    """Embed pending chunks through ``pool`` (in process; the Ray engine's actors write
    fragments instead: `_embed_to_fragments`), writing vectors and marks batch by batch.
    ``pool.window`` batches may be in flight (none in process).
    Returns (texts embedded, chunks whose vector was reused)."""
    from indexer.vectors.table import VectorRow

    embedded = reused = done = 0
    window: deque = deque()
    inflight: set[str] = set()  # hashes submitted and not yet written
    recent: dict[str, np.ndarray] = {}  # vectors of hashes written by recent batches
    # A long run reads the table's ids and hashes once (one scan of two short columns), then
    # asks the table only for hashes it holds and appends rows for ids it lacks: asked per
    # batch, both cost a pass over a table that the run itself keeps growing. A short run
    # (a few edited files) asks per batch, which is cheaper than that scan.
    known_ids, known_hashes = vs.keys() if total > KEY_SCAN_MIN else (None, None)

    def finish(rows, have, hashes, handle) -> None:
        nonlocal reused, done
        if hashes:
            vectors = pool.result(handle)
            have.update(zip(hashes, vectors, strict=True))
            recent.update(zip(hashes, vectors, strict=True))
            inflight.difference_update(hashes)
        out, ok_ids = [], []
        for cid, h, path, lang, s, e, sym, _ in rows:
            vec = have.get(h)
            if vec is None:
                vec = recent.get(h)  # embedded by an earlier batch still in flight then
            if vec is None:  # the file changed since it was chunked: the next build re-chunks it
                continue
            out.append(VectorRow(str(cid), h, path, lang or "", s, e, sym, model, vec))
            ok_ids.append(cid)
        reused += len(out) - min(len(out), len(hashes))
        if known_ids is None:
            vs.upsert(out)
        else:
            vs.upsert(out, absent=[r.chunk_id for r in out if r.chunk_id not in known_ids])
            known_hashes.update(r.content_hash for r in out)
        ok = set(ok_ids)
        _mark(conn, ok_ids, [r[0] for r in rows if r[0] not in ok])
        done += len(rows)
        if len(recent) > 4 * BATCH * (pool.window + 1):  # only in-flight overlaps need it
            for key in list(recent)[: len(recent) // 2]:
                del recent[key]
        if progress:
            progress(Progress("embed", done, total))

    for rows in _pending_rows(conn, total, by_path=total > KEY_SCAN_MIN):
        want = {r[1] for r in rows} - recent.keys() - inflight
        have = vs.vectors_for_hashes(want if known_hashes is None else want & known_hashes)
        need = _texts(config.root, [r for r in rows if r[1] in want], have)
        hashes = list(need)
        handle = pool.submit([need[h] for h in hashes]) if hashes else None
        embedded += len(hashes)
        inflight.update(hashes)
        window.append((rows, have, hashes, handle))
        while len(window) > pool.window:
            finish(*window.popleft())
    while window:
        finish(*window.popleft())
    return embedded, reused


def _texts(root: Path, rows: list, have: dict) -> dict[str, str]:
    """Embedding input (header + code) for the chunks whose hash has no vector yet, read from
    the files (one read per file), checked against the stored content hash."""
    by_file: dict[str, list] = defaultdict(list)
    for r in rows:
        if r[1] not in have:
            by_file[r[2]].append(r)
    out: dict[str, str] = {}
    for path, items in by_file.items():
        try:
            with open(os.path.join(root, path), encoding="utf-8", errors="replace") as fh:
                lines = fh.read().splitlines()
        except OSError:
            continue
        for _, h, _, _, s, e, _, header in items:
            body = "\n".join(lines[s - 1 : e])
            if chunk_hash(header, body) == h:
                out[h] = header + "\n" + body
    return out


@cache
def canonical_model_name(model: str) -> str:
    """The model id an index records: the default's full id, `hashing:DIM`, or as given."""
    m = re.fullmatch(r"hashing(?::(\d+))?", model)
    if m:
        return f"hashing:{m.group(1) or 64}"
    from indexer.vectors.tokenizer import load_tokenizer

    return load_tokenizer(model).name


class EmbedPhase:
    """The vector phase: vectors for chunks that lack them, after the graph is committed (it is
    usable meanwhile). Its failure leaves the graph complete (`keeps_graph`): a model that
    cannot load costs the vectors, not the rebuild."""

    name = "embed"
    keeps_graph = True

    def __init__(self, embedder=None, reembed: bool = False) -> None:
        self.embedder = embedder
        self.reembed = reembed

    def check(self, config: Config, db: WriteDB) -> None:
        """Refuse, before any phase writes, a model other than the one the index was embedded
        with (`check_model`)."""
        name = self.embedder.name if self.embedder else canonical_model_name(config.embed_model)
        check_model(db, name, self.reembed)

    def run(self, build: BuildRun, changes: ChangeSet, stats: BuildStats | None) -> BuildStats:
        from indexer.phases.graph import stats_dict  # the graph phase's JSON of the stats

        assert stats is not None  # the graph phase runs first
        es = embed_pending(build.config, build.db, embedder=self.embedder, reembed=self.reembed,
                           progress=build.progress, engine=build.engine, notify=build.notify)
        stats = replace(stats, embedding=asdict(es), seconds=time.perf_counter() - build.started,
                        phases={**stats.phases, "embed": round(es.seconds, 3)})
        with build.db.conn:
            store.set_meta(build.db, "last_build", json.dumps(stats_dict(stats)))
        return stats
