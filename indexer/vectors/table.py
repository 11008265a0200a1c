"""Chunk vectors in a LanceDB table, reusable by content hash.

SQLite is the source of truth for which chunks exist; this table only holds their vectors
(``chunk_ids()`` lets the builder reconcile the two). The embedding model and dimension are
recorded in the table's schema metadata, so an index is never silently searched with vectors
from another model.

Search is exact (flat) until ``maybe_index()`` builds an IVF_SQ cosine index; rows added after
that are still searched exactly (LanceDB scans unindexed fragments) until ``optimize()`` folds
them into the index. IVF_SQ with a refine step was the best measured trade-off (100k x 384
synthetic vectors: recall@10 1.0 at ~8 ms/query, against ~200 ms flat; IVF_PQ, IVF_RQ and
IVF_HNSW_SQ reached recall 0.1-0.4 with default settings).

Size: one handle, `VectorStore`, holds the table's writes, reads, searches and index upkeep,
which share its dataset, schema and filters; the table as it lies on disk (damage, setting it
aside) is `vector_damage.py`.
"""

from __future__ import annotations

import fnmatch
import os
import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa

from indexer.errors import ModelMismatchError, VectorTableDamagedError

# The table on disk; re-exported, callers import these from here.
from indexer.vectors.damage import (  # noqa: F401
    TABLE,
    exhaustion_errno,
    first_line,
    local_table_dir,
    reading,
    set_aside,
    table_missing,
    table_problem,
    table_stamp,
)

VECTOR_INDEX = "vector_idx"
#: Rows before an ANN index is worth building; below it a flat scan is fast and exact.
INDEX_THRESHOLD = 50_000
#: Candidates re-scored with full vectors per result when the ANN index is used.
REFINE_FACTOR = 5
#: Columns with a BTree index once the table is large (`maybe_index`): lookups by chunk and by
#: content hash, and searches inside named files (``search(paths=...)``).
SCALAR_INDEXED = ("chunk_id", "content_hash", "path")
_META_MODEL = b"repoctx.model"
_META_DIM = b"repoctx.dim"
_IN_CHUNK = 500  # values per `IN (...)` filter
_MIN_INDEX_ROWS = 256  # fewer rows cannot train IVF partitions; flat search is instant anyway
_DATA_FILE = re.compile(r"[0-9A-Za-z_-]{1,128}\.lance")  # a name Lance gives a data file


@dataclass(frozen=True, slots=True)
class VectorRow:
    """One chunk's vector and the fields search results and filters need."""

    chunk_id: str
    content_hash: str
    path: str
    language: str
    start_line: int
    end_line: int
    symbol: str
    model: str
    vector: np.ndarray = field(compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class VectorHit:
    chunk_id: str
    path: str
    start_line: int
    end_line: int
    symbol: str
    score: float  # cosine similarity, higher is better


def _schema(dim: int, model: str) -> pa.Schema:
    return pa.schema(
        [
            pa.field("chunk_id", pa.string(), nullable=False),
            pa.field("content_hash", pa.string()),
            pa.field("path", pa.string()),
            pa.field("language", pa.string()),
            pa.field("start_line", pa.int32()),
            pa.field("end_line", pa.int32()),
            pa.field("symbol", pa.string()),
            pa.field("model", pa.string()),
            pa.field("vector", pa.list_(pa.float32(), dim)),
        ],
        metadata={_META_MODEL: model.encode(), _META_DIM: str(dim).encode()},
    )


def open_vectors(config, conn, dim: int, model: str) -> VectorStore:
    """The index's VectorStore, wherever its table lives (``config``: an `indexer.config.Config`;
    ``conn``, the graph, supplies the recorded location)."""
    from indexer.locations import storage_options, vectors_uri

    return VectorStore.open(vectors_uri(config, conn), dim, model, storage_options(config))


def table_damage(
    uri: str, storage_options: dict | None, stamp: str | None, model: str | None, dim: int
) -> str | None:
    """Why the local table at ``uri`` is damaged; None when it is sound, absent, or on object
    storage. A table whose files match ``stamp`` (what the index recorded when it last wrote
    or checked it: one directory listing) is not read; one changed behind the index's back is
    opened and read through, and must hold ``model`` with ``dim`` dimensions."""
    if table_missing(uri) is not False:
        return None
    problem = table_problem(uri)
    if problem is not None or (stamp and table_stamp(uri) == stamp):
        return problem
    try:
        dataset = VectorStore._open_dataset(uri, storage_options, missing_ok=True)
        if dataset is None:
            return None
        found = recorded_model(dataset)
        if model and dim and found != (model, dim):
            return f"it holds {found[0]} ({found[1]} dims), not the index's {model} ({dim} dims)"
        VectorStore(dataset, uri, found[1], found[0]).check_readable()
    except VectorTableDamagedError as exc:
        return exc.reason
    return None


def recorded_model(dataset: Any) -> tuple[str, int]:
    """(model, dim) a table's Lance dataset was built with: schema metadata, else its rows.
    A table without a fixed-size ``vector`` column is not ours: `VectorTableDamagedError`."""
    schema = dataset.schema
    try:
        vtype = schema.field("vector").type
        dim = vtype.list_size
        schema.field("chunk_id")
    except (KeyError, AttributeError) as exc:
        raise VectorTableDamagedError(
            getattr(dataset, "uri", None), f"not a repoctx vector table: {first_line(exc)}"
        ) from exc
    meta = schema.metadata or {}
    if _META_MODEL in meta:
        return meta[_META_MODEL].decode(), int(meta.get(_META_DIM, dim))
    with reading(getattr(dataset, "uri", "")):
        rows = dataset.to_table(columns=["model"], limit=1)
    return (rows["model"][0].as_py() if rows.num_rows else "unknown model"), dim


def raw_dataset(config, conn=None) -> Any:
    """The index's vector table as a Lance dataset, whatever model it holds (repair and
    verify read it as it is); None without a table."""
    from indexer.locations import storage_options, vectors_uri

    uri = vectors_uri(config, conn)
    return VectorStore._open_dataset(uri, storage_options(config), missing_ok=True)


def dataset_path(uri: str) -> str:
    """Where the table's Lance dataset lies under a vectors ``uri`` (a directory or an object
    store URI): what Lance itself opens, and what embedding workers write fragments to."""
    return local_table_dir(uri) or f"{uri.rstrip('/')}/{TABLE}.lance"


def absolute_uri(uri: str) -> str:
    """``uri`` with a local path made absolute (here, where this process runs): what goes to
    workers, which run in another working directory."""
    if local_table_dir(uri) is None:
        return uri
    return os.path.abspath(os.path.expanduser(uri.removeprefix("file://")))


def _dir_id(uri: str) -> tuple[int, int] | None:
    """(device, inode) of a local table's ``_versions`` directory; None on object storage."""
    table = local_table_dir(uri)
    if table is None:
        return None
    st = os.stat(os.path.join(table, "_versions"))
    return st.st_dev, st.st_ino


def sql_str(value: str) -> str:
    """A SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def _like_escape(text: str) -> str:
    return re.sub(r"([\\%_])", r"\\\1", text)


def glob_filter(path_glob: str) -> tuple[str, bool]:
    """A SQL prefilter for an fnmatch-style glob (``*`` also matches ``/``), and whether rows
    still need checking with ``fnmatch`` (globs with ``[...]`` classes, which LIKE lacks)."""
    if "[" not in path_glob:
        pattern = "".join(
            "%" if ch == "*" else "_" if ch == "?" else _like_escape(ch) for ch in path_glob
        )
        return f"path LIKE {sql_str(pattern)}", False
    prefix = re.split(r"[*?\[]", path_glob, maxsplit=1)[0]
    return f"path LIKE {sql_str(_like_escape(prefix) + '%')}", True


def _in_list(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(sql_str(v) for v in values)})"


def _chunks(values: Iterable[str], size: int = _IN_CHUNK) -> Iterable[list[str]]:
    batch: list[str] = []
    for value in values:
        batch.append(value)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def arrow_hits(t: pa.Table) -> list[VectorHit]:
    return [
        VectorHit(c, p, s, e, sym or "", 1.0 - float(d))
        for c, p, s, e, sym, d in zip(
            t["chunk_id"].to_pylist(),
            t["path"].to_pylist(),
            t["start_line"].to_pylist(),
            t["end_line"].to_pylist(),
            t["symbol"].to_pylist(),
            t["_distance"].to_pylist(),
            strict=True,
        )
    ]


class VectorStore:
    """The ``chunks`` vector table of one index. Create with ``open`` or ``reset``.

    Rows are read and written through Lance itself (``pylance``, the format LanceDB stores its
    tables in): importing ``lancedb`` costs ~1.5-2 s on two cores (its namespace client builds
    pydantic schemas at import), more than an edit's whole embedding run. LanceDB is imported
    only to create or drop the table and to build, inspect and optimize its indexes.

    Every operation first moves to the table's latest version (as a LanceDB connection with
    ``read_consistency_interval=0`` does): a long-lived reader (the agent, the MCP server) sees
    what a later build wrote and never reads files that ``optimize()`` pruned."""

    def __init__(
        self, dataset: Any, uri: str, dim: int, model: str, storage_options: dict | None = None
    ) -> None:
        self._dataset = dataset
        self._storage_options = storage_options
        self._lancedb: Any = None
        self.uri = uri
        self.dim = dim
        self.model = model

    # -- opening -----------------------------------------------------------------------

    @staticmethod
    def _connect(uri: str, storage_options: dict | None) -> Any:
        import lancedb  # ~1.5-2 s: only to create the table or work on its indexes

        # Check for new versions on every read: a long-running reader (agent) must see what
        # a concurrent `index build` wrote, and never read files that optimize() pruned.
        return lancedb.connect(
            uri, storage_options=storage_options, read_consistency_interval=timedelta(0)
        )

    @staticmethod
    def _has_table(db: Any) -> bool:
        return TABLE in db.list_tables().tables

    @staticmethod
    def _open_dataset(uri: str, storage_options: dict | None, missing_ok: bool) -> Any:
        """The table's Lance dataset; None when there is none and ``missing_ok``."""
        problem = table_problem(uri)
        if problem is not None:
            raise VectorTableDamagedError(uri, problem)
        if missing_ok and table_missing(uri):
            return None
        # Lance warns on every fork once imported. repoctx forks only to exec (the agent's
        # tool runs); the build's workers are spawned.
        warnings.filterwarnings("ignore", message="lance is not fork-safe")
        import lance

        try:
            return lance.dataset(dataset_path(uri), storage_options=storage_options)
        except (OSError, ValueError) as exc:
            # On object storage only opening tells that there is no table; a local table that
            # exists but cannot be opened is an error, not a missing table.
            if missing_ok and table_missing(uri) is None:
                return None
            if local_table_dir(uri) is not None and table_missing(uri) is False:
                raise VectorTableDamagedError(uri, first_line(exc)) from exc
            raise

    @classmethod
    def _checked(
        cls, dataset: Any, uri: str, dim: int, model: str, storage_options: dict | None
    ) -> Any:
        old_model, old_dim = recorded_model(dataset)
        if (old_model, old_dim) != (model, dim):
            raise ModelMismatchError(
                f"The vectors at {uri} were embedded with {old_model} ({old_dim} dims), "
                f"but this run uses {model} ({dim} dims) — rerun with `--reembed` to rebuild "
                f"them with {model}."
            )
        return cls(dataset, uri, dim, model, storage_options)

    @classmethod
    def open_existing(
        cls, uri: str, dim: int, model: str, storage_options: dict | None = None
    ) -> VectorStore | None:
        """The table at ``uri`` as `open` gives it, or None when there is none: a writer that
        must add to someone else's table (an embedding worker) never makes one of its own."""
        dataset = cls._open_dataset(uri, storage_options, missing_ok=True)
        return None if dataset is None else cls._checked(dataset, uri, dim, model,
                                                         storage_options)

    @classmethod
    def open(
        cls, uri: str, dim: int, model: str, storage_options: dict | None = None
    ) -> VectorStore:
        """Open the table at ``uri`` (a directory or any LanceDB URI such as ``s3://...``),
        creating it if missing. Raises ``ModelMismatchError`` if it holds another model's
        vectors."""
        dataset = cls._open_dataset(uri, storage_options, missing_ok=True)
        if dataset is None:
            db = cls._connect(uri, storage_options)
            if not cls._has_table(db):
                db.create_table(TABLE, schema=_schema(dim, model))
            dataset = cls._open_dataset(uri, storage_options, missing_ok=False)
        return cls._checked(dataset, uri, dim, model, storage_options)

    @classmethod
    def reset(
        cls, uri: str, dim: int, model: str, storage_options: dict | None = None
    ) -> VectorStore:
        """Drop every vector and start an empty table for ``model`` (``--reembed``)."""
        db = cls._connect(uri, storage_options)
        if cls._has_table(db):
            db.drop_table(TABLE)
        db.create_table(TABLE, schema=_schema(dim, model))
        return cls(cls._open_dataset(uri, storage_options, missing_ok=False), uri, dim, model,
                   storage_options)

    def _latest(self) -> Any:
        ds = self._dataset
        with reading(self.uri):
            latest = ds.latest_version
            if latest != ds.version:
                ds = self._dataset = ds.checkout_version(latest)
        return ds

    def _writable(self) -> Any:
        return self._latest()

    @property
    def _table(self) -> Any:
        """The LanceDB table (imports lancedb): for building and inspecting indexes."""
        self._writable()
        if self._lancedb is None:
            self._lancedb = self._connect(self.uri, self._storage_options).open_table(TABLE)
        return self._lancedb

    # -- writing -----------------------------------------------------------------------

    def upsert(self, rows: Sequence[VectorRow], absent: Iterable[str] = ()) -> None:
        """Insert or replace rows by ``chunk_id`` (the last row wins within one call).

        ``absent``: chunk ids the caller knows have no row in the table (it scanned the ids
        with `keys()` and wrote none of them since). Those rows are appended; only the rest
        go through a merge, which joins against the whole table: per batch of a full build
        that cost grew with the table (quadratic over the build)."""
        if not rows:
            return
        ds = self._writable()
        latest = {r.chunk_id: r for r in rows}
        absent = set(absent)
        fresh = [r for cid, r in latest.items() if cid in absent]
        merge = [r for cid, r in latest.items() if cid not in absent]
        if fresh:
            ds.insert(self._arrow(fresh))
        if merge:
            (
                ds.merge_insert("chunk_id")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute(self._arrow(merge))
            )

    def write_fragment(self, rows: Sequence[VectorRow]) -> Any:
        """Write ``rows`` as a new data file of the table without committing it: no reader
        sees them until `commit_fragments` names the returned `lance.FragmentMetadata`.
        Embedding workers call this, so that the rows' bytes never pass through the driver."""
        from lance.fragment import LanceFragment

        ds = self._latest()
        return LanceFragment.create(
            dataset_path(self.uri), self._arrow(rows), schema=ds.schema,
            storage_options=self._storage_options, data_storage_version=ds.data_storage_version,
        )

    def commit_fragments(self, fragments: Sequence[Any], replacing: Iterable[str] = ()) -> None:
        """One new table version holding ``fragments`` (from `write_fragment`, possibly written
        by other processes) and no longer the rows whose ``chunk_id`` is in ``replacing``:
        readers see all of it or none. The rows to drop are found through their row
        addresses, so only the fragments holding them get a deletion file."""
        import lance

        if not fragments:
            return
        ds = self._writable()
        removed, updated = [], []
        replacing = list(replacing)
        if replacing:
            holding: set[int] = set()
            for batch in _chunks(replacing):
                with reading(self.uri):
                    hits = ds.to_table(columns=["chunk_id"], filter=_in_list("chunk_id", batch),
                                       with_row_address=True)
                holding.update(a >> 32 for a in hits["_rowaddr"].to_pylist())
            where = " OR ".join(f"({_in_list('chunk_id', b)})" for b in _chunks(replacing))
            for fid in sorted(holding):
                kept = ds.get_fragment(fid).delete(where)
                (updated.append(kept) if kept is not None else removed.append(fid))
        op = (lance.LanceOperation.Update(removed_fragment_ids=removed, updated_fragments=updated,
                                          new_fragments=list(fragments))
              if removed or updated else lance.LanceOperation.Append(list(fragments)))
        self._dataset = lance.LanceDataset.commit(
            ds, op, read_version=ds.version, storage_options=self._storage_options)

    def version(self) -> int:
        """The table's latest version."""
        return self._latest().version

    def identity(self) -> dict:
        """What tells this table from another at the same name (a worker whose relative path
        or credentials reach another one): its latest version, that version's timestamp and,
        for a local table, the device and inode of its ``_versions`` directory."""
        ds = self._latest()
        return {"version": ds.version, "stamp": str(ds.get_version()["timestamp"]),
                "dir": _dir_id(self.uri)}

    def differs_from(self, expected: dict) -> str | None:
        """Why this is not the table whose `identity` is ``expected`` (None: it is). Its
        version may be later (another writer committed since), never earlier."""
        ds = self._latest()
        if expected["dir"] is not None and _dir_id(self.uri) != tuple(expected["dir"]):
            return f"{local_table_dir(self.uri)} is another directory than the driver's"
        version = expected["version"]
        if ds.version < version:
            return f"it is at version {ds.version}, the driver's at {version}"
        try:
            with reading(self.uri):
                stamp = str(ds.checkout_version(version).get_version()["timestamp"])
        except (OSError, ValueError) as exc:
            return f"its version {version} cannot be read: {first_line(exc)}"
        return None if stamp == expected["stamp"] else f"its version {version} is another one"

    def drop_uncommitted(self, files: Iterable[str], since_version: int) -> int:
        """Delete the data ``files`` (names in the table's ``data/``, from `data_files` of
        fragments written for a commit made on ``since_version`` or later) that no version
        since then names: a build stopped between writing them and committing them; returns
        how many. Only these files: a table shared by several indexes holds other writers'
        uncommitted fragments too, which look the same (so never Lance's unverified cleanup)."""
        files = {f for f in files if _DATA_FILE.fullmatch(f)}  # the marker is a file on disk
        if not files:
            return 0
        ds = self._latest()
        with reading(self.uri):
            named = ds.tracked_files(min_version=min(since_version, ds.version)).read_all()
        named_data = {p.removeprefix("data/") for p, kind in zip(
            named["path"].to_pylist(), named["type"].to_pylist(), strict=True)
            if kind == "data file"}
        from indexer.locations import filesystem

        fs, data = filesystem(f"{dataset_path(self.uri)}/data", self._storage_options)
        removed = 0
        for name in sorted(files - named_data):
            try:
                fs.delete_file(f"{data}/{name}")
                removed += 1
            except FileNotFoundError:
                pass
        return removed

    @staticmethod
    def data_files(fragments: Iterable[Any]) -> list[str]:
        """The names of the data files of ``fragments`` (`write_fragment`'s results)."""
        return [d.path for frag in fragments for d in frag.files]

    def _arrow(self, rows: Sequence[VectorRow]) -> pa.Table:
        vectors = np.asarray([r.vector for r in rows], dtype=np.float32)
        if vectors.shape != (len(rows), self.dim):
            raise ValueError(f"vectors must have shape (n, {self.dim}), got {vectors.shape}")
        wrong = {r.model for r in rows} - {self.model}
        if wrong:
            raise ValueError(f"rows embedded with {sorted(wrong)} in a {self.model} table")
        return pa.table(
            {
                "chunk_id": [r.chunk_id for r in rows],
                "content_hash": [r.content_hash for r in rows],
                "path": [r.path for r in rows],
                "language": [r.language for r in rows],
                "start_line": pa.array([r.start_line for r in rows], pa.int32()),
                "end_line": pa.array([r.end_line for r in rows], pa.int32()),
                "symbol": [r.symbol for r in rows],
                "model": [r.model for r in rows],
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), self.dim),
            },
            schema=self._dataset.schema,
        )

    def delete_paths(self, paths: Iterable[str]) -> None:
        for batch in _chunks(paths):
            self._writable().delete(_in_list("path", batch))

    def delete_chunk_ids(self, chunk_ids: Iterable[str]) -> None:
        for batch in _chunks(chunk_ids):
            self._writable().delete(_in_list("chunk_id", batch))

    # -- reading -----------------------------------------------------------------------

    def count(self) -> int:
        ds = self._latest()
        with reading(self.uri):
            return ds.count_rows()

    def chunk_ids(self) -> set[str]:
        ds = self._latest()
        with reading(self.uri):
            return set(ds.to_table(columns=["chunk_id"])["chunk_id"].to_pylist())

    def keys(self) -> tuple[set[str], set[str]]:
        """(chunk ids, content hashes) of every row: one scan of two short columns, so that a
        long embedding run asks the table only about hashes it holds and appends new ids."""
        ds = self._latest()
        with reading(self.uri):
            cols = ds.to_table(columns=["chunk_id", "content_hash"])
        return set(cols["chunk_id"].to_pylist()), set(cols["content_hash"].to_pylist())

    def vectors_for_hashes(self, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """Stored vectors by content hash, so unchanged text is never embedded twice."""
        out: dict[str, np.ndarray] = {}
        for batch in _chunks(set(hashes)):
            ds = self._latest()
            with reading(self.uri):
                rows = ds.to_table(
                    columns=["content_hash", "vector"], filter=_in_list("content_hash", batch)
                )
            if not rows.num_rows:
                continue
            vectors = rows["vector"].combine_chunks().flatten().to_numpy()
            vectors = vectors.reshape(rows.num_rows, self.dim)
            for i, h in enumerate(rows["content_hash"].to_pylist()):
                out[h] = vectors[i]
        return out

    def search(
        self,
        vector: Sequence[float] | np.ndarray,
        k: int = 10,
        *,
        language: str | None = None,
        path_glob: str | None = None,
        paths: Sequence[str] | None = None,
        languages: Sequence[str] | None = None,
    ) -> list[VectorHit]:
        """The ``k`` chunks most similar to ``vector``. ``path_glob`` is fnmatch-style,
        matched against the repository-relative path (``*`` also matches ``/``); ``paths``
        keeps only chunks of those files, and scores every one of them exactly (the ANN index
        would only see those in the partitions it probes)."""
        query = np.asarray(vector, dtype=np.float32)
        if query.shape != (self.dim,):
            raise ValueError(f"query vector must have shape ({self.dim},), got {query.shape}")
        if k <= 0:
            return []
        filters, check = [], None
        if language is not None:
            filters.append(f"language = {sql_str(language)}")
        if languages is not None:  # the languages of the kinds a search asks for
            if not languages:
                return []
            filters.append(_in_list("language", list(languages)))
        if path_glob:
            sql, needs_check = glob_filter(path_glob)
            filters.append(sql)
            if needs_check:
                check = path_glob
        if paths is not None:
            if not paths:
                return []
            filters.append(_in_list("path", list(paths)))
        where = " AND ".join(filters) or None
        limit = k if check is None else max(4 * k, 50)
        while True:
            hits = self._query(query, limit, where, exact=paths is not None)
            kept = [h for h in hits if check is None or fnmatch.fnmatchcase(h.path, check)]
            if len(kept) >= k or len(hits) < limit:
                return kept[:k]
            limit *= 4  # the glob's [...] class rejected too many: fetch deeper

    def _query(
        self, query: np.ndarray, limit: int, where: str | None, exact: bool = False
    ) -> list[VectorHit]:
        nearest = {"column": "vector", "q": query, "k": limit, "metric": "cosine",
                   "refine_factor": REFINE_FACTOR, "use_index": not exact}
        ds = self._latest()
        with reading(self.uri):
            t = ds.to_table(
                columns=["chunk_id", "path", "start_line", "end_line", "symbol", "_distance"],
                nearest=nearest,
                filter=where,
                prefilter=bool(where),
            )
        return arrow_hits(t)

    def check_readable(self) -> None:
        """Read every data file's ``chunk_id`` column (one short column: a fraction of the
        table) and check that each file the manifest names is there: a table whose data was
        deleted, cut short or overwritten raises `VectorTableDamagedError` here rather than in
        the middle of a search."""
        ds = self._latest()
        with reading(self.uri):
            table = local_table_dir(self.uri)
            if table is not None:
                for frag in ds.get_fragments():
                    for data in frag.data_files():
                        path = os.path.join(table, "data", data.path)
                        if not os.path.isfile(path):
                            raise VectorTableDamagedError(self.uri, f"{path} is missing")
            ds.to_table(columns=["chunk_id"])

    # -- maintenance -------------------------------------------------------------------

    def has_vector_index(self) -> bool:
        return any(ix.columns == ["vector"] for ix in self._table.list_indices())

    def index_coverage(self) -> tuple[int, int]:
        """(rows in the ANN index, rows searched exactly outside it); (0, count) when none."""
        stats = self._table.index_stats(VECTOR_INDEX) if self.has_vector_index() else None
        if stats is None:
            return 0, self.count()
        return stats.num_indexed_rows, stats.num_unindexed_rows

    def maybe_index(self, threshold: int = INDEX_THRESHOLD) -> bool:
        """Build the ANN index (and scalar indexes for lookups: by chunk id, content hash and
        path) once the table has ``threshold`` rows. Returns whether it built the ANN index.
        Seconds at 100k rows: call it at the end of a large build, not after each edit."""
        from lancedb.index import BTree, IvfSq

        if self.count() < max(threshold, _MIN_INDEX_ROWS):
            return False
        built = False
        if not self.has_vector_index():
            self._table.create_index(
                "vector", config=IvfSq(distance_type="cosine"), name=VECTOR_INDEX, replace=True
            )
            built = True
        names = {ix.name for ix in self._table.list_indices()}
        for column in SCALAR_INDEXED:  # an older table gets the ones it lacks
            if f"{column}_idx" not in names:
                self._table.create_index(column, config=BTree(), name=f"{column}_idx")
        return built

    def needs_optimize(self, max_small_fragments: int = 32, max_unindexed: int = 10_000) -> bool:
        """Whether many small writes (one per incremental build) or many rows outside the
        ANN index have piled up, so ``optimize()`` is worth its cost."""
        stats = self._table.stats()
        if stats["fragment_stats"]["num_small_fragments"] >= max_small_fragments:
            return True
        indexed, unindexed = self.index_coverage()
        return indexed > 0 and unindexed > max(max_unindexed, indexed // 10)

    def optimize(self, cleanup_older_than: timedelta | None = None) -> None:
        """Compact small fragments, add new rows to the indexes, and prune old versions
        (LanceDB keeps 7 days unless ``cleanup_older_than`` says otherwise). Seconds on a
        large table: the builder calls it at the end of a large build."""
        self._table.optimize(cleanup_older_than=cleanup_older_than)
