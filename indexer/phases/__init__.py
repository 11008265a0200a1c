"""The phases of a build: each brings one store up to the tree, fed the same change set.

- ``graph.py``     the graph: parse the changed files (``parsing.py``), write their rows,
                   re-resolve references, finalize. The lexical index rides with it: a file's
                   lexical rows are written in the same transaction as its symbols and chunks
                   (their rowids are the chunk and file ids), so the two never disagree.
- ``history.py``   the commit history (``history.db``): follows HEAD, not the change set.
- ``semantic.py``  the vectors: chunks without one get one (after the graph is committed).

The driver (`indexer.build`) decides the index's state (`indexer.state`), computes the change
set (`indexer.changes.change_set`) and runs the phases in order, knowing none of their insides:
a phase is a `Phase`, and what it needs of the build in progress is a `BuildRun`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from indexer.changes import ChangeSet
    from indexer.config import Config
    from indexer.graph.store import WriteDB
    from indexer.models import BuildStats, Progress


@dataclass(frozen=True, slots=True)
class BuildRun:
    """The build in progress, as its phases see it."""

    config: Config
    db: WriteDB  # the graph generation this build writes
    full: bool  # everything is rebuilt (into a new generation, unless set aside)
    started: float  # time.perf_counter() when the build began
    progress: Callable[[Progress], None] | None = None
    notify: Callable[[str], None] | None = None  # one line for the user (a damaged store set aside)
    engine: object | None = None  # a RaySession, for `engine = "ray"`


class Phase(Protocol):
    #: The build phase recorded in the graph's meta while this one runs (readers show it).
    name: str
    #: A failure of this phase leaves the graph complete: a full rebuild's generation is
    #: published before the error goes on (the next build does the rest of this phase).
    keeps_graph: bool

    def check(self, config: Config, db: WriteDB) -> None:
        """Refuse, before any phase writes, to change an option the index was built with
        (an embedding model other than its own); most phases have none."""
        ...

    def run(self, build: BuildRun, changes: ChangeSet, stats: BuildStats | None) -> BuildStats:
        """Bring this phase's store up to the tree; the build's stats with this phase's part
        (``stats`` is None for the first phase, which counts the graph)."""
        ...
