"""The graph phase: the change set's files parsed (`indexer.phases.parsing`), their rows
written one transaction per batch (all in one below the pool's threshold), deleted files'
rows removed, and only references whose target names were added or removed re-resolved.
Names awaiting re-resolution are stored in the same transaction as the change, so a build
killed at any moment is finished by the next one. The lexical index is written with the rows
(`indexer.graph.write`). A no-op build writes nothing.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from dataclasses import asdict, replace
from typing import TYPE_CHECKING

from indexer.errors import BuildWorkerError
from indexer.graph import recovery, schema, store
from indexer.graph import write as graph_write
from indexer.models import BuildStats
from indexer.parse.languages import kind_of
from indexer.parse.worker import count_outcomes
from indexer.phases.parsing import POOL_THRESHOLD, parse_work
from indexer.phases.sharded import load as sharded_load
from indexer.phases.sharded import use_shards

if TYPE_CHECKING:
    from indexer.changes import ChangeSet
    from indexer.config import Config
    from indexer.graph.store import ReadDB, WriteDB
    from indexer.phases import BuildRun

#: Above this many changed files (and a quarter of the index), a build is a bulk load: the
#: reference indexes are dropped and made again after, and nothing waits for the disk.
BULK_MIN = 1000


class GraphPhase:
    """Files, symbols, references, imports, chunks and their lexical rows."""

    name = "parse"
    keeps_graph = False

    def __init__(self, chunks: bool = True) -> None:
        self.chunks = chunks  # changed files are also chunked for lexical search

    def check(self, config: Config, db: WriteDB) -> None:
        pass  # no option of its own: the change set says what changed

    def run(self, build: BuildRun, changes: ChangeSet, stats: BuildStats | None = None) -> BuildStats:
        try:
            return self._run(build, changes)
        except Exception as exc:
            from concurrent.futures import BrokenExecutor  # only a pool raises it

            if isinstance(exc, BrokenExecutor):  # a parse or resolution worker died
                raise BuildWorkerError() from exc
            raise

    def _run(self, build: BuildRun, changes: ChangeSet) -> BuildStats:
        config, db, full = build.config, build.db, build.full
        conn = db.conn
        gen = int(store.get_meta(db, "generation", "0")) + 1
        if full:
            # A full build writes a new, empty generation (state.open_target): nothing to delete first.
            with conn:
                schema.drop_counters(db)  # recounted at the end, not incremented row by row
        work, deleted, existing = changes.work, changes.deleted, changes.existing
        marks = {"start": changes.started}
        if deleted:
            with conn:
                graph_write.delete_files(db, existing, deleted)
        marks["discover"] = time.perf_counter()
        if work or deleted:  # a no-op build writes nothing
            graph_write.set_build_phase(conn, "parse")
            if store.get_meta(db, "root") != str(config.root):
                with conn:  # readers during a first build check freshness against the tree
                    store.set_meta(db, "root", str(config.root))
        bulk = len(work) > max(BULK_MIN, changes.indexed // 4)
        model = config.embed_model if self.chunks else None
        sharded = use_shards(config, changes, build.engine)
        serial: dict[str, float] = {}
        # Most of the index is written now: without waiting for the disk (see recovery.bulk_load).
        with recovery.bulk_load(db, config.index_path) if bulk else contextlib.nullcontext():
            if sharded:  # a whole index, on many cores: workers write shards (phases.sharded)
                load = sharded_load(build, changes, gen, model, marks, lambda: _finalize(db))
                parsed, failed, write_s, pending, serial = (
                    load.parsed, load.failed, load.merge_s, True, load.serial)
                cpu = {"cpu:driver": round(load.driver_cpu, 3),
                       "cpu:workers": round(load.workers_cpu, 3)}
            else:
                parsed, failed, write_s, pending = self._write(build, changes, gen, bulk, model, marks)
                if bulk or full:
                    _finalize(db)
        marks["finalize"] = time.perf_counter()  # the sync at the end of a bulk load included
        phases = {k: round(marks[k] - marks[p], 3)
                  for p, k in zip(list(marks), list(marks)[1:], strict=False)}
        phases["write"] = round(write_s, 3)
        if sharded:  # the seconds of each phase that no worker shared, the CPU (phases.sharded)
            phases.update({f"serial:{k}": v for k, v in serial.items()}, **cpu)
        changed = bool(work or deleted or pending)
        last = store.get_meta(db, "last_build")
        if changes.keys:
            with conn:  # every file's module and language now follow these tables (see ChangeSet)
                for key, value in changes.keys.items():
                    store.set_meta(db, key, value)
        skipped = changes.skipped
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
                           failed={}, seconds=time.perf_counter() - build.started, generation=gen - 1,
                           full=False, phases=phases, embedding={},
                           skipped=dict(skipped + _skipped_in_index(conn)))
        with conn:
            store.set_meta(db, "generation", str(gen))
            store.set_meta(db, "root", str(config.root))
        stats = collect_stats(
            db,
            files_parsed=parsed,
            files_deleted=len(deleted),
            discovery_skipped=dict(skipped),
            failed=failed,
            seconds=time.perf_counter() - build.started,
            generation=gen,
            full=full,
            phases=phases,
        )
        with conn:
            store.set_meta(db, "last_build", json.dumps(stats_dict(stats)))
        return stats

    def _write(self, build: BuildRun, changes: ChangeSet, gen: int, bulk: bool, model: str | None,
               marks: dict[str, float]) -> tuple[int, dict[str, str], float, bool]:
        """The single writer: parse (in a pool above its threshold) and write each batch here,
        then resolve what is pending. Returns (files parsed, failures, write seconds, whether
        anything was pending)."""
        config, db, full, progress = build.config, build.db, build.full, build.progress
        conn, work, existing = db.conn, changes.work, changes.existing
        if bulk:
            with conn:
                schema.drop_ref_indexes(db)
                schema.drop_counters(db)
        parsed = 0
        failed: dict[str, str] = {}
        batches = parse_work(config, work, progress, model, build.engine)
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
                parsed += count_outcomes(((r.path, r.status, r.error) for r in results), failed)
        if self.chunks and store.get_meta(db, "files_fts_pending") == "1":  # an index from before m004
            with conn:
                graph_write.index_all_files(conn)
        pending = graph_write.resolution_pending(conn)
        marks["parse"] = time.perf_counter()
        if pending or full:
            graph_write.set_build_phase(conn, "resolve")
            if bulk:
                with conn:
                    schema.ensure_ref_indexes(db, schema.RESOLVE_INDEXES)
            graph_write.resolve_pending(db, full or bulk, progress,
                                        jobs=config.workers, tree=config.root)
        marks["resolve"] = time.perf_counter()
        return parsed, failed, write_s, pending


def _finalize(db: WriteDB) -> None:
    """What a load leaves for the end: the reference indexes, sorted once, and the totals."""
    graph_write.set_build_phase(db.conn, "finalize")
    with db.conn:
        schema.ensure_ref_indexes(db)
        schema.ensure_counters(db)


def collect_stats(db: ReadDB, **kw) -> BuildStats:
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
    totals = schema.counts(db)
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
