"""Incremental build of the SQLite graph.

A no-op build only stats files. Changed files are re-parsed (in a process pool when there
are many, with one helper process beside this one when there are a few dozen), written one
transaction per batch (all in one below the pool's threshold), and only references whose
target names were added or removed are re-resolved. Names awaiting re-resolution are stored in the same
transaction as the change, so a build killed at any moment is finished by the next one.

Size: the serial driver of a build (write, delete, resolve, finalize) keeps one transaction
discipline in one place; per-file work is in parse_worker.py, the write statements in
graph_write.py, shared reads in graph.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace

from indexer.blake2 import blake2b
from indexer.changes import unmatched
from indexer.config import Config
from indexer.errors import BuildWorkerError, IndexDamagedError
from indexer.graph import store
from indexer.graph import write as graph_write
from indexer.graph.reads import GraphReads
from indexer.graph.records import BUILD_PHASE
from indexer.graph.store import WriteDB
from indexer.lock import WriteLock
from indexer.models import BuildStats, Progress
from indexer.parse.discovery import discover
from indexer.parse.helper import parse_batch, parse_beside
from indexer.parse.languages import formats_key, kind_of, language_for_file
from indexer.parse.modules import module_name, package_dirs
from indexer.parse.worker import FileResult, learned_counts

#: Below this many changed files, parse in-process: a pool costs more than it saves.
POOL_THRESHOLD = 48
#: From this many, one helper process parses beside this one (`indexer.parse.helper`).
HELPER_THRESHOLD = 16
#: Above this many changed files (and a quarter of the index), a build is a bulk load: the
#: reference indexes are dropped and made again after, and nothing waits for the disk.
BULK_MIN = 1000


ProgressFn = Callable[[Progress], None]


def _parse_batch_in_worker(
    root: str, model: str | None, items: list[tuple[str, str, str, str | None]]
) -> tuple[list[FileResult], tuple[int, list[tuple[str, int]]] | None]:
    """A pool worker's batch: its results, and the word counts its tokenizer learned meanwhile
    (kept beside the index so that later small builds need not load the tokenizer)."""
    return parse_batch(root, model, items), learned_counts(model) if model is not None else None


def _batches(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _parse_all(
    config: Config,
    work: list[tuple[str, str, str, str | None]],
    progress: ProgressFn | None,
    model: str | None,
) -> Iterator[list[FileResult]]:
    """Yield parse results batch by batch, keeping at most 2 batches per worker in flight
    so memory is bounded by the batch size, not the repository size."""
    root = str(config.root)
    jobs = config.jobs or os.cpu_count() or 1
    done = 0
    if len(work) < POOL_THRESHOLD or jobs == 1:
        counter = None
        if model is not None and work:
            # Imported here: a no-op build parses nothing.
            from indexer.vectors.token_counts import open_counter

            counter = open_counter(config.index_path, model)
        try:
            if jobs > 1 and len(work) >= HELPER_THRESHOLD:
                batches = parse_beside(root, model, str(config.index_path), work, counter)
            else:
                batches = (parse_batch(root, model, b, counter) for b in _batches(work, config.batch_size))
            for results in batches:
                done += len(results)
                if progress:
                    progress(Progress("parse", done, len(work)))
                yield results
            if counter is not None:
                counter.save()
        finally:
            if counter is not None:
                counter.close()
        return
    # Small batches at first keep every worker busy while results stream back.
    size = max(8, min(config.batch_size, len(work) // (jobs * 4) or 8))
    # The pool's imports (~25 ms, inside spawn_pool and in_flight) are paid only here: a
    # one-file edit is parsed in-process.
    from indexer.safety.lifetime import in_flight, spawn_pool

    # Workers (and so the resource tracker, which waits for them) exit if this process is
    # killed: a kill -9 of `index build` leaves no orphans.
    overhead, words = None, {}
    with spawn_pool(jobs, root) as pool:  # isolated from the tree (`indexer.safety.isolation`)
        calls = ((root, model, batch) for batch in _batches(work, size))
        for results, learned in in_flight(pool, _parse_batch_in_worker, calls, jobs * 2):
            if learned is not None:
                overhead = learned[0]
                words.update(learned[1])
            done += len(results)
            if progress:
                progress(Progress("parse", done, len(work)))
            yield results
    if words:
        from indexer.vectors.token_counts import store_counts

        store_counts(config.index_path, model, overhead, words)


def build(
    config: Config,
    *,
    full: bool = False,
    progress: ProgressFn | None = None,
    wait_lock: float = 0.0,
    chunks: bool = True,
    embed: bool = False,
    reembed: bool = False,
    embedder=None,
    notify: Callable[[str], None] | None = None,
) -> BuildStats:
    """Bring the index at ``config.index_path`` up to date with the tree at ``config.root``.

    With ``chunks``, changed files are also chunked for lexical search; with ``embed``, chunks
    without a vector then get one (after the graph is committed, so it is usable meanwhile).

    With ``full``, everything is rebuilt into a new generation file that replaces the current
    one atomically when it is complete, vectors included: until then readers get the old index.
    A damaged index is set aside (kept, renamed) and rebuilt from scratch; ``notify`` receives
    one line saying so. Without ``full`` a damaged index raises IndexDamagedError."""
    t0 = time.perf_counter()
    if config.vectors_uri:  # refuse a bad URI before the graph changes, not after
        from indexer.locations import check_uri

        check_uri(config.vectors_uri, "vectors URI")
    engine = None
    if config.engine == "ray":
        from indexer.parse.ray_engine import RaySession

        engine = RaySession(config)  # connects on first use: a no-op build never starts Ray
    with WriteLock(config.index_path).acquire(wait_lock):
        db, staged, aside = _open_target(config, full, notify)
        published = not staged
        try:
            if embed:
                from indexer.phases.semantic import canonical_model_name, check_model

                name = embedder.name if embedder else canonical_model_name(config.embed_model)
                check_model(db, name, reembed)
            try:
                stats = _build_locked(db, config, full, progress, t0, chunks, engine)
            except Exception as exc:
                from concurrent.futures import BrokenExecutor  # only a pool raises it

                if isinstance(exc, BrokenExecutor):  # a parse or resolution worker died
                    raise BuildWorkerError() from exc
                raise
            # commit history: history.db, its own store
            from indexer.history.store import build_phase

            phase_set = store.get_meta(db, BUILD_PHASE) is not None
            if phase_set:
                graph_write.set_build_phase(db.conn, "history")
            stats = build_phase(config, stats, progress)
            if staged:
                store.inherit_embedded(db)
            elif aside is not None:
                _tombstone_stray_vectors(config, db)
            if embed:
                from indexer.phases.semantic import embed_pending

                if phase_set:
                    graph_write.set_build_phase(db.conn, "embed")
                try:
                    es = embed_pending(config, db, embedder=embedder, reembed=reembed,
                                       progress=progress, engine=engine, notify=notify)
                except Exception:
                    if staged:  # the graph is complete: swap it in; the next build embeds the rest
                        store.inherit_tombstones(db)
                        store.publish(config.index_path, db)
                        published = True
                    raise
                stats = replace(stats, embedding=asdict(es), seconds=time.perf_counter() - t0,
                                phases={**stats.phases, "embed": round(es.seconds, 3)})
                with db.conn:
                    store.set_meta(db, "last_build", json.dumps(stats_dict(stats)))
            if phase_set:
                graph_write.set_build_phase(db.conn, None)
            if staged:
                store.inherit_tombstones(db)
                store.publish(config.index_path, db)
                published = True
            return stats
        except sqlite3.DatabaseError as exc:
            if store.is_damage(exc):
                raise store.damaged(config.index_path, exc) from exc
            raise
        finally:
            if published:
                db.conn.close()
            else:  # a full rebuild that failed: the old generation keeps serving
                store.discard(config.index_path, db)
            if engine is not None:
                engine.close()


def _open_target(
    config: Config, full: bool, notify: Callable[[str], None] | None
) -> tuple[WriteDB, bool, store.SetAside | None]:
    """The database this build writes; whether it is a new generation to publish when done (a
    full rebuild of an existing index); and the damaged file set aside, if one was."""
    index_dir = config.index_path
    if not full or store.graph_file(index_dir) is None:
        store.check_bulk_load(index_dir)  # damage: IndexDamagedError, as any damage
        return store.open_for_write(index_dir), False, None
    try:
        store.check_bulk_load(index_dir)
        return store.begin_generation(index_dir), True, None
    except IndexDamagedError as exc:
        # Nothing sound to serve meanwhile: rebuild in place, resumable like a first build.
        aside, db = store.set_aside(index_dir, exc.reason)
        if notify is not None:
            extra = [p.name for p in aside.files if p != aside.path]
            notify(
                f"The index at {index_dir} was damaged ({exc.reason}): set it aside as "
                f"{aside.path}" + (f" (with {', '.join(extra)})" if extra else "")
                + "; rebuilding the index from scratch."
            )
        if not store.get_meta(db, "embed_model"):  # unreadable: the vector table still knows
            found = vector_table_model(config, db.conn)
            if found is not None:
                with db.conn:
                    store.set_meta(db, "embed_model", found[0])
                    store.set_meta(db, "embed_dim", str(found[1]))
        return db, False, aside


def vector_table_model(config: Config, conn=None) -> tuple[str, int] | None:
    """(model, dimension) recorded in the index's vector table itself, None without a table:
    what a graph too damaged to read its own meta was embedded with."""
    from indexer.errors import VectorTableDamagedError
    from indexer.vectors.table import raw_dataset, recorded_model

    try:
        dataset = raw_dataset(config, conn)
        return None if dataset is None else recorded_model(dataset)
    except VectorTableDamagedError:  # damaged too: the embedding phase sets it aside
        return None


def _tombstone_stray_vectors(config: Config, db: WriteDB) -> None:
    """After a damaged graph was set aside, its chunk ids are lost: tombstone the vectors of
    chunks the rebuilt graph lacks (the embedding phase deletes them after reusing by hash)."""
    model, dim = store.get_meta(db, "embed_model"), store.get_meta(db, "embed_dim")
    if not model or not (dim or "").isdigit():
        return
    from indexer.errors import VectorTableDamagedError
    from indexer.locations import vectors_uri
    from indexer.vectors.table import raw_dataset, reading

    try:
        dataset = raw_dataset(config, db.conn)
        if dataset is None:
            return
        with reading(vectors_uri(config, db.conn)):
            ids = dataset.to_table(columns=["chunk_id"])
    except VectorTableDamagedError:  # the embedding phase sets it aside and embeds anew
        return
    known = graph_write.chunk_ids(db.conn)
    stray = {int(i) for i in ids["chunk_id"].to_pylist() if i.isdigit()} - known
    with db.conn:
        graph_write.tombstone(db.conn, sorted(stray))


def _packages_key(packages: frozenset[str]) -> str:
    """A digest of the package directories, to tell whether any module name can differ."""
    return blake2b("\n".join(sorted(packages)).encode(), digest_size=16).hexdigest()


_FILE_ROW = "SELECT id, path, size, mtime_ns, hash, module FROM files"


def _file_rows(conn, paths: list[str], total: int) -> dict[str, tuple]:
    """``files`` rows of ``paths`` by path (all rows read at once when that is most of them)."""
    if len(paths) > max(500, total // 4):
        return {row[1]: row for row in conn.execute(_FILE_ROW)}
    out = {}
    for i in range(0, len(paths), 500):
        part = paths[i : i + 500]
        marks = ",".join("?" * len(part))
        out.update((row[1], row) for row in conn.execute(f"{_FILE_ROW} WHERE path IN ({marks})", part))
    return out


def _build_locked(
    db, config: Config, full: bool, progress: ProgressFn | None, t0: float, chunks: bool, engine=None
) -> BuildStats:
    conn = db.conn
    gen = int(store.get_meta(db, "generation", "0")) + 1
    if full:
        # A full build writes a new, empty generation (see build): nothing to delete first.
        with conn:
            store.drop_counters(db)  # recounted at the end, not incremented row by row
    marks = {"start": time.perf_counter()}
    disc = discover(config, skip_unparsable=True)
    skipped = Counter(disc.skipped)
    # Only the files the index does not hold as they are are named one by one (the no-op and
    # one-edit path of a 25k-file tree); rows no file matches are the changed and deleted ones.
    # A file held unchanged got its language from the same name tables (meta formats_key):
    # when they differ, every file and row is looked at again.
    rows = GraphReads(conn).file_stats()
    n_indexed = len(rows)
    formats = formats_key()
    same_formats = store.get_meta(db, "formats_key") == formats
    if rows and same_formats:
        others, gone = unmatched(disc.files, rows)
    else:
        others, gone = list(disc.files), [r[0] for r in rows]
    n_kept = len(disc.files) - len(others)
    root = os.path.join(str(config.root), "")
    fresh = []
    for f in others:
        lang = language_for_file(f.path, root + f.path)
        if lang is None:
            skipped["no_grammar"] += 1
        else:
            fresh.append((f, lang))
    # Every package marker (__init__.py) has a language: the package set of all files found
    # is that of the files indexed.
    packages = package_dirs(f.path for f in disc.files)
    # Module names follow from the path and the package directories alone: with the same
    # package set as the last complete build, a file whose size and mtime did not change
    # keeps its module, so only the changed files are looked at one by one.
    packages_key = _packages_key(packages)
    same_packages = store.get_meta(db, "packages_key") == packages_key
    if same_packages or not n_kept:
        look_at = fresh
    else:  # every module name may have changed: the kept files are looked at too
        looked_at = set(others)
        look_at = sorted(
            [(f, language_for_file(f.path, root + f.path)) for f in disc.files if f not in looked_at]
            + fresh,
            key=lambda item: item[0].path,
        )
    deleted = sorted(set(gone).difference(f.path for f, _ in fresh)) if gone else []
    existing = _file_rows(conn, [f.path for f, _ in look_at] + deleted, n_indexed)
    work: list[tuple[str, str, str, str | None]] = []
    for f, lang in look_at:
        module = module_name(f.path, lang, packages)
        old = existing.get(f.path)
        if old is not None and old[2] == f.size and old[3] == f.mtime_ns and (old[5] == module or old[5] is None):
            continue
        # a moved package boundary changes the module: re-parse even if the content did not change
        old_hash = old[4] if old is not None and old[5] == module else None
        work.append((f.path, lang, module, old_hash))
    if deleted:
        with conn:
            graph_write.delete_files(db, existing, deleted)
    marks["discover"] = time.perf_counter()
    if work or deleted:  # a no-op build writes nothing
        graph_write.set_build_phase(conn, "parse")
        if store.get_meta(db, "root") != str(config.root):
            with conn:  # readers during a first build check freshness against the tree
                store.set_meta(db, "root", str(config.root))
    bulk = len(work) > max(BULK_MIN, n_indexed // 4)
    # Most of the index is written now: without waiting for the disk (see store.bulk_load).
    with store.bulk_load(db, config.index_path) if bulk else contextlib.nullcontext():
        if bulk:
            with conn:
                store.drop_ref_indexes(db)
                store.drop_counters(db)
        parsed = touched = 0
        failed: dict[str, str] = {}
        model = config.embed_model if chunks else None
        if engine is not None and engine.worth_it(files=len(work)):
            batches = engine.parse_all(str(config.root), work, model, progress)
        else:
            batches = _parse_all(config, work, progress, model)
        write_s = 0.0
        # A few dozen files are written in one transaction: committing each small batch of the
        # parse helper's would rewrite the same index pages many times.
        one = len(work) < POOL_THRESHOLD
        each = contextlib.nullcontext() if one else conn
        with conn if one else contextlib.nullcontext():
            for results in batches:
                tw = time.perf_counter()
                with each:
                    graph_write.write_results(db, results, existing, gen, bulk or full)
                write_s += time.perf_counter() - tw
                for r in results:
                    if r.status == "unchanged":
                        touched += 1
                    elif r.status in ("ok", "syntax_error"):  # skipped and failed files are counted
                        parsed += 1  # by reason in `skipped`, not as parsed
                    if r.status == "failed" or (r.status.startswith("skipped:") and r.error):
                        failed[r.path] = r.error
        if chunks and store.get_meta(db, "files_fts_pending") == "1":  # an index from before m004
            with conn:
                graph_write.index_all_files(conn)
        pending = graph_write.resolution_pending(conn)
        marks["parse"] = time.perf_counter()
        if pending or full:
            graph_write.set_build_phase(conn, "resolve")
            if bulk:
                with conn:
                    store.ensure_ref_indexes(db, store.RESOLVE_INDEXES)
            graph_write.resolve_pending(db, full or bulk, progress,
                                        jobs=config.jobs or os.cpu_count() or 1, tree=config.root)
        marks["resolve"] = time.perf_counter()
        if bulk or full:
            graph_write.set_build_phase(conn, "finalize")
            with conn:
                store.ensure_ref_indexes(db)
                store.ensure_counters(db)
    marks["finalize"] = time.perf_counter()  # the sync at the end of a bulk load included
    phases = {k: round(marks[k] - marks[p], 3)
              for p, k in zip(list(marks), list(marks)[1:], strict=False)}
    phases["write"] = round(write_s, 3)
    changed = bool(work or deleted or pending)
    last = store.get_meta(db, "last_build")
    if not same_packages or not same_formats:
        with conn:  # every file's module and language now follow these tables (see above)
            store.set_meta(db, "packages_key", packages_key)
            store.set_meta(db, "formats_key", formats)
    if not changed and last and not full:
        prev = json.loads(last)
        prev.pop("resolved_pct", None)
        base = BuildStats(**prev)
        # Nothing changed: the counts stored by the last build still hold, and counting
        # millions of references again would cost more than the whole no-op build.
        # Only what this build did: no parse, and no embedding unless build() runs it next.
        # Skipped files are this tree's, though: one no build indexes (a name that is not
        # UTF-8, a file of no known language) may have appeared or gone since.
        return replace(base, files_parsed=0, files_deleted=0, files_unchanged=base.files_total,
                       by_kind=by_kind(base.by_language),
                       failed={}, seconds=time.perf_counter() - t0, generation=gen - 1, full=False,
                       phases=phases, embedding={}, skipped=dict(skipped + _skipped_in_index(conn)))
    with conn:
        store.set_meta(db, "generation", str(gen))
        store.set_meta(db, "root", str(config.root))
    stats = collect_stats(
        db,
        files_parsed=parsed,
        files_deleted=len(deleted),
        discovery_skipped=dict(skipped),
        failed=failed,
        seconds=time.perf_counter() - t0,
        generation=gen,
        full=full,
        phases=phases,
    )
    with conn:
        store.set_meta(db, "last_build", json.dumps(stats_dict(stats)))
    return stats


def collect_stats(db, **kw) -> BuildStats:
    """The index's totals after a build. ``files_total`` (files indexed now) is always
    ``files_parsed`` (indexed by this build) + ``files_unchanged`` (indexed before, kept);
    every other file found is in ``skipped`` by reason (``failed`` among them)."""
    conn = db.conn
    by_lang: Counter = Counter()
    with_errors = lines = 0
    # One pass over `files` (a one-file edit of a 25k-file tree pays for each).
    for language, indexed, n, errors, n_lines in conn.execute(
        "SELECT language, status IN ('ok', 'syntax_error'), count(*), "
        "sum(status = 'syntax_error'), coalesce(sum(lines), 0) FROM files GROUP BY 1, 2"
    ):
        if indexed:
            by_lang[language] += n
        with_errors += errors
        lines += n_lines
    skipped = Counter(kw.pop("discovery_skipped", {})) + _skipped_in_index(conn)
    totals = store.counts(db)
    refs, resolved, ambiguous = totals["refs"], totals["resolved"], totals["ambiguous"]
    files_total = sum(by_lang.values())
    return BuildStats(
        files_total=files_total,
        files_unchanged=files_total - kw.get("files_parsed", 0),
        files_with_errors=with_errors,
        lines=lines,
        symbols=totals["symbols"],
        references=refs,
        resolved=resolved,
        ambiguous=ambiguous or 0,
        by_language=dict(by_lang),
        by_kind=by_kind(by_lang),
        skipped=dict(skipped),
        **kw,
    )


def by_kind(by_language: dict[str, int]) -> dict[str, int]:
    """Files per kind (code | docs | config) from files per language."""
    out: Counter = Counter()
    for lang, n in by_language.items():
        out[kind_of(lang)] += n
    return dict(sorted(out.items()))


def _skipped_in_index(conn) -> Counter:
    """Files the index holds but does not index, by reason (``failed`` among them)."""
    out: Counter = Counter()
    for status, n in conn.execute("SELECT status, count(*) FROM files WHERE status LIKE 'skipped:%' "
                                  "OR status = 'failed' GROUP BY status"):
        out[status.removeprefix("skipped:")] += n
    return out


def stats_dict(stats: BuildStats) -> dict:
    d = asdict(stats)
    d["resolved_pct"] = round(stats.resolved_pct, 1)
    return d


def index_exists(config: Config) -> bool:
    return (config.index_path / "graph.db").exists()
