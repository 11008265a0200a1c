"""The vector table for readers: never creates it, never writes (see `VectorReader`)."""

from __future__ import annotations

from typing import Any

from indexer.vectors.table import VectorStore


class VectorReader(VectorStore):
    """`VectorStore` for search, context and the agent: ``open`` returns None when there is no
    table (a reader must not create one: an empty new table would hide that the vectors are
    gone), and every write raises. Like `VectorStore` it reads through Lance, so a one-shot
    `repoctx search` does not pay LanceDB's import."""

    @classmethod
    def open(  # type: ignore[override]
        cls, uri: str, dim: int, model: str, storage_options: dict | None = None
    ) -> VectorReader | None:
        """The table at ``uri`` for reading; None when there is none. Raises
        ``ModelMismatchError`` if it holds another model's vectors."""
        dataset = cls._open_dataset(uri, storage_options, missing_ok=True)
        if dataset is None:
            return None
        return cls._checked(dataset, uri, dim, model, storage_options)

    def _writable(self) -> Any:
        raise TypeError("VectorReader is read-only: open the table with VectorStore.open to write")
