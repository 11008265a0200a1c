"""The index's state, decided once before a build writes to the graph, and the graph it implies.

Like Zoekt's builder, a build first looks at what is on disk and names it, then takes one
path. `decide` runs under the write lock, before the build writes (it only clears the marker
of a bulk load it found sound):

============  ==========================================  ====================================
state         found when                                  the build then
============  ==========================================  ====================================
missing       no `graph.db` (or the file it names is      creates a generation and builds it
              gone)                                       in place, resumable (``create``; a
                                                          full build with a link: ``rebuild``)
damaged       not a database, not a repoctx index, a      ``full``: sets it aside (kept,
              bulk load that did not end left it          renamed) and builds from scratch in
              damaged, or (full builds) `quick_check`     place (``set_aside``); else
              fails                                       IndexDamagedError (``refuse``)
newer         written by a newer repoctx                  SchemaError (``refuse``)
outdated      an older schema                             migrates it, then as ``current``
current       sound, this schema                          ``full``: a new generation, published
                                                          when complete (``rebuild``); else
                                                          writes it in place (``update``)
============  ==========================================  ====================================

Only full builds pay for `quick_check` (~1 s on a 220 MB graph), and a file an interrupted bulk
load names: an incremental build checks what opening the file tells (a repoctx graph, of a
schema this repoctx knows; ~0.3 ms) and reports damage it meets later, where it meets it.

The options the index was built with are held against the build's: the embedding model
(refused on a mismatch unless ``reembed``: `indexer.phases.semantic.EmbedPhase.check`) and the
language tables and package directories (which decide how much of the tree is looked at
again: `indexer.changes.ChangeSet`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from indexer.errors import IndexDamagedError, SchemaError
from indexer.graph import generations, recovery, store
from indexer.graph.schema import SCHEMA_VERSION
from indexer.graph.store import graph_file

if TYPE_CHECKING:
    from indexer.config import Config
    from indexer.graph.store import WriteDB

@dataclass(frozen=True, slots=True)
class IndexState:
    """What is on disk at ``index_dir``, as a build about to write it needs to know."""

    kind: str  # missing | damaged | newer | outdated | current
    index_dir: Path
    full: bool
    linked: bool = False  # `graph.db` exists (a link, or the plain file of an older index)
    schema: int = 0  # the schema version found (0: none)
    bulk_load_checked: bool = False  # a bulk load that did not end was found, its file checked
    error: IndexDamagedError | SchemaError | None = None  # damaged, newer: what to raise

    @property
    def action(self) -> str:
        """What a build does in this state: create, update, rebuild, set_aside or refuse (the
        table above)."""
        if self.kind == "newer" or (self.kind == "damaged" and not self.full):
            return "refuse"
        if self.kind == "damaged":
            return "set_aside"
        if self.full and self.linked:  # a link to a file that is gone included
            return "rebuild"
        return "create" if self.kind == "missing" else "update"


def decide(index_dir: Path, *, full: bool) -> IndexState:
    """The state of the index at ``index_dir`` (see the module's table). Reads only, but for
    the marker of an interrupted bulk load, removed once its file is found sound (or when it
    names a file that is no longer current). Under the write lock only."""
    suspect = recovery.interrupted_bulk_load(index_dir)
    checked = suspect is not None
    if checked and not suspect:
        recovery.clear_bulk_load(index_dir)
    current = graph_file(index_dir)
    linked = current is not None
    if current is None or not current.exists():
        return IndexState("missing", index_dir, full, linked, bulk_load_checked=checked)
    try:
        db = store.open_for_read(index_dir, check_version=False)  # not ours: damaged
        try:
            if suspect:  # every page, before anything else is read of it
                store.quick_check(db, index_dir)
                recovery.clear_bulk_load(index_dir)
            version = store.schema_version(db)
            if version > SCHEMA_VERSION:
                return IndexState("newer", index_dir, full, linked, version, checked,
                                  store.newer_schema(index_dir, version))
            if full and not suspect:
                store.quick_check(db, index_dir)
        finally:
            db.conn.close()
    except IndexDamagedError as exc:
        return IndexState("damaged", index_dir, full, linked, 0, checked, exc)
    kind = "current" if version == SCHEMA_VERSION else "outdated"
    return IndexState(kind, index_dir, full, linked, version, checked)


@dataclass(slots=True)
class Target:
    """The graph a build writes: the current generation in place, or a new one (``staged``)
    published when the build is complete; ``aside`` is the damaged file set aside, if one was."""

    config: Config
    db: WriteDB
    staged: bool = False
    aside: recovery.SetAside | None = None
    published: bool = False

    def graph_written(self) -> None:
        """After the graph phase: the vectors' bookkeeping that follows from how the graph was
        made. A new generation marks embedded the chunks the previous one had vectors for
        (chunk ids are stable and the table is shared); a graph rebuilt after the damaged one
        was set aside tombstones the vectors of chunks it lacks (their ids are lost)."""
        if self.staged:
            generations.inherit_embedded(self.db)
        elif self.aside is not None:
            _tombstone_stray_vectors(self.config, self.db)

    def publish(self) -> None:
        """A new generation, complete: swap it in (readers see it from now on)."""
        if self.staged and not self.published:
            generations.inherit_tombstones(self.db)
            generations.publish(self.config.index_path, self.db)
        self.published = True

    def close(self) -> None:
        """Close the writer; a new generation never published (a full rebuild that failed) is
        deleted, and the old one keeps serving."""
        if self.published or not self.staged:
            self.db.conn.close()
        else:
            generations.discard(self.config.index_path, self.db)


def open_target(state: IndexState, config: Config,
                notify: Callable[[str], None] | None = None) -> Target:
    """Act on ``state``: the graph this build writes (or the state's error raised)."""
    action = state.action
    if action == "refuse":
        raise state.error  # type: ignore[misc]
    index_dir = config.index_path
    if action == "rebuild":
        return Target(config, generations.begin_generation(index_dir), staged=True)
    if action == "set_aside":
        return _set_aside(state, config, notify)
    return Target(config, store.open_for_write(index_dir))


def _set_aside(state: IndexState, config: Config, notify: Callable[[str], None] | None) -> Target:
    """Nothing sound to serve meanwhile: rebuild in place, resumable like a first build."""
    index_dir = config.index_path
    reason = state.error.reason  # type: ignore[union-attr]
    aside, db = recovery.set_aside(index_dir, reason)
    if notify is not None:
        extra = [p.name for p in aside.files if p != aside.path]
        notify(
            f"The index at {index_dir} was damaged ({reason}): set it aside as "
            f"{aside.path}" + (f" (with {', '.join(extra)})" if extra else "")
            + "; rebuilding the index from scratch."
        )
    if not store.get_meta(db, "embed_model"):  # unreadable: the vector table still knows
        found = vector_table_model(config, db.conn)
        if found is not None:
            with db.conn:
                store.set_meta(db, "embed_model", found[0])
                store.set_meta(db, "embed_dim", str(found[1]))
    return Target(config, db, aside=aside)


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
    from indexer.graph import write as graph_write
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
