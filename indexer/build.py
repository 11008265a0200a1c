"""A build: the index brought up to date with the tree, in one path.

Under the write lock it decides the index's state once (`indexer.state.decide`: missing,
damaged, interrupted bulk load, schema, up to date), opens the graph that state implies
(`open_target`: in place, a new generation, or a fresh one after setting a damaged file aside),
holds the tree against the index (`indexer.changes.change_set`), and runs the phases over that
one change set (`indexer.phases`): the graph (and the lexical index with it), the history, the
vectors. It knows no store's insides. A no-op build only stats files and writes nothing.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from indexer.changes import change_set
from indexer.config import Config
from indexer.graph import store
from indexer.graph import write as graph_write
from indexer.graph.records import BUILD_PHASE
from indexer.lock import WriteLock
from indexer.models import BuildStats, Progress
from indexer.phases import BuildRun
from indexer.phases.graph import GraphPhase
from indexer.phases.history import HistoryPhase
from indexer.state import Target, decide, open_target

if TYPE_CHECKING:
    from indexer.phases import Phase

ProgressFn = Callable[[Progress], None]


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
    phases: list[Phase] = [GraphPhase(chunks), HistoryPhase()]
    if embed:
        from indexer.phases.semantic import EmbedPhase  # numpy and the vector table: only here

        phases.append(EmbedPhase(embedder, reembed))
    engine = None
    if config.engine == "ray":
        from indexer.phases.ray_shards import ShardedRaySession

        engine = ShardedRaySession(config)  # connects on first use: a no-op build never starts Ray
    try:
        with WriteLock(config.index_path).acquire(wait_lock):
            state = decide(config.index_path, full=full)
            target = open_target(state, config, notify)
            try:
                run = BuildRun(config, target.db, full, t0, progress, notify, engine)
                return _run_phases(run, target, phases)
            except sqlite3.DatabaseError as exc:
                if store.is_damage(exc):
                    raise store.damaged(config.index_path, exc) from exc
                raise
            finally:
                target.close()
    finally:
        if engine is not None:
            engine.close()


def _run_phases(run: BuildRun, target: Target, phases: list[Phase]) -> BuildStats:
    """Each phase over one change set, in order; the graph published once all are done (or
    once the graph is, when a phase that `keeps_graph` fails)."""
    for phase in phases:  # an option the index was built with that this build would change
        phase.check(run.config, run.db)
    changes = change_set(run.config, run.db)
    first, *rest = phases
    stats = first.run(run, changes, None)
    target.graph_written()
    # A build that wrote the graph records which phase it is in (readers show it).
    phase_set = store.get_meta(run.db, BUILD_PHASE) is not None
    for phase in rest:
        if phase_set:
            graph_write.set_build_phase(run.db.conn, phase.name)
        try:
            stats = phase.run(run, changes, stats)
        except Exception:
            if phase.keeps_graph:  # the graph is complete: swap it in; the next build does the rest
                target.publish()
            raise
    if phase_set:
        graph_write.set_build_phase(run.db.conn, None)
    target.publish()
    return stats
