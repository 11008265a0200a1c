"""The history phase: the commit history (`indexer.history.store`) brought to HEAD after the
graph, before the vectors. It follows commits, not the change set; a history failure is
recorded in the store's meta (``index status`` shows it) and does not fail the build."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from indexer.history.store import HistoryError, disable_history, record_error, update_history
from indexer.safety.gitsafe import GitConfigError

if TYPE_CHECKING:
    from indexer.changes import ChangeSet
    from indexer.config import Config
    from indexer.graph.store import WriteDB
    from indexer.models import BuildStats
    from indexer.phases import BuildRun


class HistoryPhase:
    """Its seconds go to ``stats.phases["history"]``; ``history = false`` removes the store."""

    name = "history"
    keeps_graph = False

    def check(self, config: Config, db: WriteDB) -> None:
        pass  # no option of its own: the change set says what changed

    def run(self, build: BuildRun, changes: ChangeSet, stats: BuildStats | None) -> BuildStats:
        assert stats is not None  # the graph phase runs first
        config = build.config
        t0 = time.perf_counter()
        if not config.history:
            disable_history(config.index_path)
            return stats
        try:
            update_history(config.root, config.index_path,
                           max_commits=config.history_max_commits,
                           progress=build.progress)
        except (HistoryError, GitConfigError) as exc:
            record_error(config.index_path, str(exc))
        return replace(stats, phases={**stats.phases, "history": round(time.perf_counter() - t0, 3)})
