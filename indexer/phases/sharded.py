"""The graph phase's load of a whole index on many cores: workers parse and write shards,
the driver merges them, workers resolve them against the merged names, the driver merges that
(`indexer.graph.shards` says how each step keeps the index sound).

The driver only schedules and merges: every row is built, and written once, by a worker; the
merges are SQLite's own `INSERT … SELECT`. What stays serial is reported per phase, as the
seconds the driver worked while every worker was idle (``serial:<phase>`` in the build's
phases): the last merges, the inherit edges, the final indexes.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from indexer.graph import fts_segments, schema, shards
from indexer.graph import write as graph_write
from indexer.models import Progress
from indexer.parse.helper import parse_batch
from indexer.parse.worker import FileResult, count_outcomes, learned_counts
from indexer.phases.parsing import POOL_THRESHOLD

if TYPE_CHECKING:
    from indexer.changes import ChangeSet
    from indexer.config import Config
    from indexer.phases import BuildRun

#: Below this many files a load is not sharded: no pool either (`phases.parsing`).
SHARD_MIN = POOL_THRESHOLD
#: Shard sizes shrink as the work runs out (guided scheduling): each takes this share of what
#: is left per worker, so the first shards are large (few merges) and the last ones small (the
#: workers end together instead of one waiting for another's last large shard).
SHARDS_PER_JOB = 3
#: The smallest shard, in files.
MIN_SHARD = 8
#: The largest: a worker holds a shard's parsed files and its lexical terms in memory.
MAX_SHARD = 1000
#: Past this many segments in a lexical table (each shard adds one or a few), the copies so far
#: are merged into one before more come: FTS5 holds 2000 (`fts_segments.MAX_SEGMENTS`).
SEGMENT_BUDGET = 500


def shard_sizes(files: int, workers: int, per_job: int | None = None) -> list[int]:
    """The sizes of the shards ``files`` are cut into (guided: see SHARDS_PER_JOB)."""
    per_job = per_job or SHARDS_PER_JOB
    sizes, left = [], files
    while left > 0:
        size = min(left, MAX_SHARD, max(MIN_SHARD, -(-left // (workers * per_job))))
        sizes.append(size)
        left -= size
    return sizes


def use_shards(config: Config, changes: ChangeSet, engine=None) -> bool:
    """Whether this build loads through shards: it writes a graph that holds no file yet (a full
    rebuild, a first build), with a pool of workers here or a cluster's (``engine``). Incremental
    builds write in place, one row of a changed file at a time: an edit costs what it changed,
    and the references elsewhere that its new or removed names reach are found and resolved
    again (`graph_write.write_results`), which a load of new files beside old ones would need
    too."""
    if changes.indexed or len(changes.work) < SHARD_MIN:  # a graph with rows: see above
        return False
    if engine is not None and engine.worth_it(files=len(changes.work)):
        return hasattr(engine, "shard_runner")
    return config.workers > 1


@dataclass
class Load:
    """What a sharded load did: files parsed, failures by path, the driver's merge seconds, its
    serial seconds per phase, and the CPU seconds of the driver and of the workers' tasks."""

    parsed: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    merge_s: float = 0.0
    serial: dict[str, float] = field(default_factory=dict)
    driver_cpu: float = 0.0
    workers_cpu: float = 0.0


def parse_shard(path: str, ddl: tuple[str, ...], root: str, model: str | None, gen: int,
                files: list[tuple[int, tuple]]) -> tuple[shards.ShardReport, float]:
    """A worker's task: parse ``files`` ((id, work item) pairs) and write their shard. Returns
    its report and when the worker finished (the driver's serial time is measured from the last
    one)."""
    cpu = time.process_time()
    results = parse_batch(root, model, [item for _, item in files])
    return write_parsed(path, ddl, gen, model, [fid for fid, _ in files], results, cpu), time.time()


def write_parsed(path: str, ddl: tuple[str, ...], gen: int, model: str | None, ids: list[int],
                 results: list[FileResult], cpu: float) -> shards.ShardReport:
    """Write the shard of parsed ``results`` (files ``ids``) at ``path``: its report, with the
    CPU seconds since ``cpu`` (a `time.process_time()`). The task bodies of every runner end
    here."""
    top = shards.write_shard(path, ddl, gen, list(zip(ids, results, strict=True)))
    return shards.ShardReport(path, [(r.path, r.status, r.error) for r in results], top,
                              learned_counts(model) if model is not None else None,
                              time.process_time() - cpu)


def resolve_shard(db_file: str, key: str, path: str) -> tuple[str, int, float, float]:
    """A worker's task: resolve a shard (`shards.resolve_shard`); (path, references, when done,
    CPU seconds)."""
    cpu = time.process_time()
    n = shards.resolve_shard(db_file, key, path)
    return path, n, time.time(), time.process_time() - cpu


class ShardRunner(Protocol):
    """Where shard tasks run: this machine's pool (`LocalShards`) or a cluster's workers (the
    Ray engine's `shard_runner`). Either way a yielded shard is a file at its ``path`` here, for
    the driver to merge: a runner whose workers are elsewhere brings it back."""

    def parse(self, tasks: Iterator[ParseTask]) -> Iterator[tuple[shards.ShardReport, float]]:
        """`parse_shard` of each task, as they finish: (report, when its worker finished)."""
        ...

    def resolve(self, db_file: str, key: str,
                paths: list[str]) -> Iterator[tuple[str, int, float, float]]:
        """`resolve_shard` of each shard against the graph at ``db_file``, as they finish:
        (path, references, when its worker finished, the task's CPU seconds)."""
        ...


#: A parse task: (shard path, shard schema, root, model, generation, [(file id, work item)]).
ParseTask = tuple[str, tuple[str, ...], str, "str | None", int, list[tuple[int, tuple]]]


class LocalShards:
    """Shard tasks in a pool of this machine's processes, isolated from the tree."""

    def __init__(self, jobs: int, root: str) -> None:
        self.jobs, self.root = jobs, root
        self._stopping = None  # the thread stopping the workers early (`release`)

    def __enter__(self) -> LocalShards:
        from indexer.safety.lifetime import spawn_pool

        self._pool_cm = spawn_pool(self.jobs, self.root)
        self.pool = self._pool_cm.__enter__()
        return self

    def __exit__(self, *exc) -> bool | None:
        if self._stopping is not None:
            self._stopping.join()
        return self._pool_cm.__exit__(*exc)

    def parse(self, tasks: Iterator[ParseTask]) -> Iterator[tuple[shards.ShardReport, float]]:
        from indexer.safety.lifetime import in_flight

        return in_flight(self.pool, parse_shard, tasks, self.jobs * 2)

    def release(self) -> None:
        """Stop the idle workers in the background (`lifetime.stop_pool`: their exit, or a kill
        after a grace period); leaving waits for that."""
        import threading

        from indexer.safety.lifetime import stop_pool

        self._stopping = threading.Thread(target=stop_pool, args=(self.pool,),
                                          name="repoctx-pool-stop", daemon=True)
        self._stopping.start()

    def resolve(self, db_file: str, key: str,
                paths: list[str]) -> Iterator[tuple[str, int, float, float]]:
        from indexer.safety.lifetime import in_flight

        return in_flight(self.pool, resolve_shard, ((db_file, key, p) for p in paths), self.jobs * 2)


def load(build: BuildRun, changes: ChangeSet, gen: int, model: str | None,
         marks: dict[str, float], finalize: Callable[[], None]) -> Load:
    """Parse, write, resolve and index ``changes.work`` into ``build.db`` through shards, then
    ``finalize`` it (the indexes) while the workers exit; ``marks`` gets the end of the parse
    and resolve phases."""
    config, db, progress = build.config, build.db, build.progress
    conn, root, jobs, work = db.conn, str(config.root), config.workers, changes.work
    first = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM files").fetchone()[0]
    numbered = list(enumerate(work, start=first))
    engine = build.engine
    remote = engine is not None and engine.worth_it(files=len(work))
    workers = engine.connect().workers if remote else jobs
    cuts = [0]
    for size in shard_sizes(len(numbered), workers):
        cuts.append(cuts[-1] + size)
    with conn:  # made again, sorted, at the end: ~3x cheaper than kept up row by row
        schema.drop_ref_indexes(db)
        schema.drop_counters(db)
    out = Load()
    ddl = shards.shard_schema(db)
    copy = shards.copies_lexical(ddl)
    starts: dict[str, int] = {}  # each shard's reference ids follow those merged before it
    at = 0
    words: dict[str, int] = {}
    overhead = None
    cpu = time.process_time()
    background = ThreadPoolExecutor(1, thread_name_prefix="repoctx-fts")
    optimizing = None
    directory = shards.shard_dir(config.index_path)
    try:
        with engine.shard_runner() if remote else LocalShards(jobs, root) as runner:
            tasks = ((str(directory / f"{k}.db"), ddl, root, model, gen, numbered[a:b])
                     for k, (a, b) in enumerate(zip(cuts, cuts[1:], strict=False)))
            done = 0
            idle_since = 0.0
            for report, finished in runner.parse(tasks):
                idle_since = max(idle_since, finished)
                t = time.perf_counter()
                segments = shards.merge_parsed(db, report.path, at, copy)
                if segments > SEGMENT_BUDGET:
                    fts_segments.optimize(str(db.file), shards.LEXICAL_TABLES)
                starts[report.path] = at
                at += report.refs
                out.merge_s += time.perf_counter() - t
                out.workers_cpu += report.cpu
                if report.learned is not None:
                    overhead = report.learned[0]
                    words.update(report.learned[1])
                out.parsed += count_outcomes(report.files, out.failed)
                done += len(report.files)
                if progress:
                    progress(Progress("parse", done, len(work)))
            marks["parse"] = time.perf_counter()
            out.serial["parse"] = _since(idle_since)
            graph_write.set_build_phase(conn, "resolve")
            # Base classes are looked up by their class (`SymbolTable.bases`): indexed while the
            # graph holds the inherit edges alone (cheap), dropped before the other references
            # come, and made again, sorted, at the end.
            with conn:
                schema.ensure_ref_indexes(db, schema.RESOLVE_INDEXES)
            graph_write.resolve_inherit(db)
            with conn:
                schema.drop_ref_indexes(db)
            key = f"{db.file}:{os.getpid()}:{time.time_ns()}"  # this build's name table
            inherit_s = time.perf_counter() - marks["parse"]
            if copy:
                # Many copied segments, merged into one each (as a build leaves them) while the
                # workers load the names and resolve: done before the first merge below.
                optimizing = background.submit(fts_segments.optimize, str(db.file),
                                               shards.LEXICAL_TABLES)
            done = 0
            idle_since = 0.0
            for path, n, finished, task_cpu in runner.resolve(str(db.file), key, list(starts)):
                if optimizing is not None:
                    optimizing.result()  # its error, if any, is the build's
                    optimizing = None
                idle_since = max(idle_since, finished)
                out.workers_cpu += task_cpu
                t = time.perf_counter()
                shards.merge_resolved(db, path, starts[path])
                out.merge_s += time.perf_counter() - t
                os.unlink(path)  # merged for good: the disk holds the graph, not a second copy
                done += n
                if progress:
                    progress(Progress("resolve", min(done, at), at))
            if optimizing is not None:  # no shard had references to merge
                optimizing.result()
            if progress:
                progress(Progress("resolve", at, at))
            marks["resolve"] = time.perf_counter()
            out.serial["resolve"] = round(inherit_s + _since(idle_since), 3)
            # The workers are done: they exit (freeing what they held takes them a few tenths
            # of a second) while this process sorts the indexes, instead of before.
            release = getattr(runner, "release", None)
            if release is not None:
                release()
            t = time.perf_counter()
            finalize()
            out.serial["finalize"] = round(time.perf_counter() - t, 3)
    finally:
        background.shutdown(wait=True)  # never a writer left behind the build
        shutil.rmtree(directory, ignore_errors=True)
    out.driver_cpu = time.process_time() - cpu
    if words:
        from indexer.vectors.token_counts import store_counts

        store_counts(config.index_path, model, overhead, words)
    return out


def _since(wall: float) -> float:
    """Seconds from ``wall`` (a `time.time()` of the workers) to now; 0 without one."""
    return round(max(0.0, time.time() - wall), 3) if wall else 0.0
