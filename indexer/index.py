"""`Index`: one repository's index as the layers above hold it.

Retrieval, the agent and the CLI never see a connection, a generation file or a vector URI:
they hold an `Index` and ask it. ``index.graph`` and ``index.lexical`` read the SQLite graph
(`GraphReads`, `LexicalReads` over one read-only connection to the generation that was current
when it opened), ``index.history`` reads the commit history, ``index.open_vectors()`` the
vector table, ``index.status()``, ``index.stale_paths()`` and ``index.build_progress()`` say
how complete and fresh it is, and ``index.build()`` brings it up to date with the tree (then
reads the new generation).

Opening is cheap and reads nothing until asked: `Index.open` connects to the graph at once (so
a missing or damaged index is said where the command starts), `Index(config)` waits for the
first read or for `build`.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from indexer.config import Config, load_config

if TYPE_CHECKING:
    from indexer.graph.lexical_reads import LexicalReads
    from indexer.graph.reads import GraphReads
    from indexer.graph.store import ReadDB
    from indexer.history.reads import HistoryReader
    from indexer.models import BuildStats
    from indexer.vectors.reader import VectorReader


class Index:
    """One repository's index: its configuration and, once read, one read connection."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._db: ReadDB | None = None
        self._history: HistoryReader | None = None
        self._history_file: tuple[int, int] | None = None  # (device, inode) it reads

    @classmethod
    def open(cls, where: Config | Path | str, *, index_dir: Path | str | None = None,
             trust_repo: bool = False, **overrides: Any) -> Index:
        """The index of ``where`` (a repository root, or a `Config`), connected: raises
        `NoIndexError` (with what to run) when there is none, `IndexDamagedError` or
        `SchemaError` when it cannot be read as it is."""
        if isinstance(where, Config):
            config = where
        else:
            if index_dir is not None:
                overrides["index_dir"] = index_dir
            config = load_config(Path(where), trust_repo=trust_repo, **overrides)
        index = cls(config)
        index.connect()
        return index

    # -- where -------------------------------------------------------------------------------

    @property
    def root(self) -> Path:
        """The repository root the index is of."""
        return self.config.root

    @property
    def dir(self) -> Path:
        """Where the index lives (``<root>/.repoctx`` unless configured)."""
        return self.config.index_path

    def exists(self) -> bool:
        """Whether a build has made this index (`graph.db` is on disk)."""
        return self.config.db_path.exists()

    # -- reads -------------------------------------------------------------------------------

    def connect(self) -> Index:
        """Open the read connection now (the current generation); a second call keeps it."""
        if self._db is None:
            from indexer.graph.store import open_for_read

            self._db = open_for_read(self.dir)
        return self

    @property
    def db(self) -> ReadDB:
        """The read connection with the small part of sqlite_utils readers use (the indexer's
        own modules take it; the layers above read through `graph` and `lexical`)."""
        return self.connect()._db  # type: ignore[return-value]

    @cached_property
    def graph(self) -> GraphReads:
        """Definitions, references, files and metadata of the graph."""
        from indexer.graph.reads import GraphReads

        return GraphReads(self.db.conn)

    @cached_property
    def lexical(self) -> LexicalReads:
        """BM25 over chunks and whole files, term statistics, where chunks are."""
        from indexer.graph.lexical_reads import LexicalReads

        return LexicalReads(self.db.conn)

    @property
    def history(self) -> HistoryReader | None:
        """The commit history, or None (not a git tree, not built yet, disabled, damaged, or an
        update under way). Looked at on every access, since builds change the history index
        apart from the graph's generations (updated in place, a damaged one replaced): the open
        reader is kept while its file is the same and says it is complete, else opened anew."""
        from indexer.history.reads import HistoryReader
        from indexer.history.store import DB_NAME

        try:
            st = os.stat(self.dir / DB_NAME)
            file: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except OSError:
            file = None
        reader = self._history
        if reader is not None and (file != self._history_file or not _complete(reader)):
            # not closed: a search in progress may still read it (closed when it is let go)
            reader = self._history = None
        if reader is None and file is not None:
            reader = self._history = HistoryReader.open(self.dir)
            self._history_file = file
        return reader

    def vectors_uri(self) -> str:
        """Where the vector table is: configured, else recorded at build time, else beside
        the graph."""
        from indexer.locations import vectors_uri

        return vectors_uri(self.config, self.db.conn)

    def open_vectors(self) -> VectorReader | None:
        """The vector table for reading; None when the index was built without vectors or the
        table is missing. Raises `VectorTableDamagedError` / `ModelMismatchError`."""
        model, dim = self.graph.embed_model(), self.graph.meta_value("embed_dim")
        if not model:
            return None
        from indexer.locations import storage_options
        from indexer.vectors.reader import VectorReader

        return VectorReader.open(self.vectors_uri(), int(dim or 0), model,
                                 storage_options(self.config))

    # -- status and freshness ----------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """What the index holds and how fresh it is against the tree (``repoctx index status``):
        read afresh from the generation current now, whichever this handle reads."""
        from indexer.graph.store import open_for_read
        from indexer.ops.status import index_status

        db = open_for_read(self.dir)
        try:
            return index_status(self.config, db)
        finally:
            db.conn.close()

    def stale_paths(self, paths: Iterable[str], root: str | Path | None = None) -> set[str]:
        """Which of ``paths`` changed on disk (size or mtime) since they were indexed, or are
        gone: one stat per distinct path under ``root`` (default: this index's root)."""
        from indexer.ops.status import stale_paths

        return stale_paths(self.graph, paths, str(self.root if root is None else root))

    def build_progress(self) -> dict[str, Any] | None:
        """A build running on this index, or one that stopped before its end (``phase``,
        ``pid``, ``running``, ``ready``, ``fix``); None when the last one finished."""
        from indexer.ops.status import build_progress

        return build_progress(self.dir, self.graph)

    # -- writes ------------------------------------------------------------------------------

    def build(self, **options: Any) -> BuildStats:
        """Bring the index up to date with the tree (`indexer.build.build`'s options); reads
        after it see the new generation."""
        from indexer.build import build

        stats = build(self.config, **options)
        self.refresh()
        return stats

    def current(self) -> bool:
        """Whether reads see the generation `graph.db` names now: False once a full rebuild, a
        repair or a pull by any process swapped in another (one readlink; an incremental build
        writes the same generation, which the connection sees)."""
        if self._db is None:
            return True
        from indexer.graph.store import graph_file

        now = graph_file(self.dir)
        return now is None or now == self._db.file

    def refresh(self) -> None:
        """Read the current generation from now on (after a build by this or another process)."""
        self.close()

    def close(self) -> None:
        """Close the read connections; the next read opens them again."""
        if self._db is not None:
            self._db.conn.close()
            self._db = None
        if self._history is not None:
            self._history.close()
        self._history = None
        self.__dict__.pop("graph", None)
        self.__dict__.pop("lexical", None)

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Index({str(self.root)!r}, dir={str(self.dir)!r})"


def _complete(reader: HistoryReader) -> bool:
    """Whether the history index ``reader`` reads says it is complete (no update under way
    or left half done), as `HistoryReader.open` requires."""
    try:
        row = reader.conn.execute("SELECT value FROM meta WHERE key = 'state'").fetchone()
    except sqlite3.DatabaseError:
        return False
    return bool(row) and row[0] == "ok"
