"""Reading the vector table without LanceDB's Python package (see `VectorReader`)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from .vectors import (
    REFINE_FACTOR,
    TABLE,
    VectorHit,
    VectorStore,
    arrow_hits,
    local_table_dir,
    mismatch_error,
    recorded_model,
    table_missing,
)


class VectorReader(VectorStore):
    """Searches and counts the vector table through Lance itself (the ``pylance`` package that
    LanceDB stores its tables with), never writes. Importing ``lancedb`` costs ~1.5-2 s on two
    cores (its namespace client builds pydantic schemas at import); ``lance`` ~0.2 s, so a
    one-shot `repoctx search` or `context` does not pay that. Same table, same ANN index, same
    query (cosine, prefilter, refine factor; exact when asked), same results.

    Every query first moves to the table's latest version, as LanceDB's connection does with
    ``read_consistency_interval=0``: a long-lived reader (the agent, the MCP server) sees what
    a later build wrote and never reads files that ``optimize()`` pruned."""

    def __init__(self, dataset: Any, uri: str, dim: int, model: str) -> None:
        self._dataset = dataset
        self.uri = uri
        self.dim = dim
        self.model = model

    @property
    def _table(self) -> Any:
        raise TypeError("VectorReader is read-only: open the table with VectorStore.open to write")

    @classmethod
    def open(  # type: ignore[override]
        cls, uri: str, dim: int, model: str, storage_options: dict | None = None
    ) -> VectorReader | None:
        """The table at ``uri`` for reading; None when there is none (a reader never creates
        one: an empty new table would hide that the vectors are gone). Raises
        ``ModelMismatchError`` if it holds another model's vectors."""
        if table_missing(uri):
            return None
        # Lance warns on every fork once imported. This process forks only to exec (the
        # agent's tool runs) and the build's workers are spawned, never forked.
        warnings.filterwarnings("ignore", message="lance is not fork-safe")
        import lance

        path = local_table_dir(uri) or f"{uri.rstrip('/')}/{TABLE}.lance"
        try:
            dataset = lance.dataset(path, storage_options=storage_options)
        except (OSError, ValueError):  # no table there (object storage)
            return None
        old = recorded_model(
            dataset.schema,
            lambda: dataset.to_table(columns=["model"], limit=1),
        )
        if old != (model, dim):
            raise mismatch_error(uri, old, model, dim)
        return cls(dataset, uri, dim, model)

    def _latest(self) -> Any:
        ds = self._dataset
        latest = ds.latest_version
        if latest != ds.version:
            ds = self._dataset = ds.checkout_version(latest)
        return ds

    def count(self) -> int:
        return self._latest().count_rows()

    def chunk_ids(self) -> set[str]:
        return set(self._latest().to_table(columns=["chunk_id"])["chunk_id"].to_pylist())

    def _query(
        self, query: np.ndarray, limit: int, where: str | None, exact: bool = False
    ) -> list[VectorHit]:
        nearest = {"column": "vector", "q": query, "k": limit, "metric": "cosine",
                   "refine_factor": REFINE_FACTOR, "use_index": not exact}
        t = self._latest().to_table(
            columns=["chunk_id", "path", "start_line", "end_line", "symbol", "_distance"],
            nearest=nearest,
            filter=where,
            prefilter=bool(where),
        )
        return arrow_hits(t)
