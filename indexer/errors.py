"""Typed errors raised by the indexer. The docstring is the message a user sees."""

from __future__ import annotations

import sqlite3

#: What a read of the graph raises when SQLite itself fails (damaged, locked, out of disk): the
#: layers above catch it by this name and never import sqlite3 (`is_damage` tells a damaged file).
StoreError = sqlite3.Error
#: Its kinds the CLI tells apart: the file cannot be used as a database, and an operation failed
#: (busy, out of disk, I/O).
DatabaseError = sqlite3.DatabaseError
OperationalError = sqlite3.OperationalError


class RepoctxError(Exception):
    """repoctx failed."""

    def __init__(self, message: str | None = None) -> None:
        # a docstring's line breaks and indentation are not the message's: one line
        super().__init__(message or " ".join((self.__doc__ or "").split()))


class NoIndexError(RepoctxError):
    """No index here — run `repoctx index build` first."""


class NotARepositoryError(RepoctxError):
    """The path is not a directory — pass the root of the repository to index."""


class ConfigError(RepoctxError):
    """The repoctx configuration is invalid — fix `.repoctx.toml` or `[tool.repoctx]`."""


class SchemaError(RepoctxError):
    """The index was built by an incompatible repoctx — run `repoctx index build --full`."""


class IndexLockedError(RepoctxError):
    """Another process is writing this index — wait for it or stop it."""


class BuildWorkerError(RepoctxError):
    """A worker process of the build stopped abruptly (killed, or out of memory) — run the
    build again: it keeps what was written and finishes the rest (`--jobs 1` builds in one
    process)."""


class IndexDamagedError(RepoctxError):
    """The index is damaged — run `repoctx index build --full` to set it aside and rebuild."""

    def __init__(self, index_dir: object = None, reason: str = "") -> None:
        self.index_dir = index_dir
        self.reason = " ".join(reason.split()) or "unreadable"  # one line, whatever SQLite said
        where = f"The index at {index_dir}" if index_dir is not None else "The index"
        super().__init__(
            f"{where} is damaged ({self.reason}) — run `repoctx index build --full` to set it "
            "aside and rebuild."
        )


class ModelMismatchError(RepoctxError):
    """The index was embedded with another model — rerun with `--reembed` to rebuild vectors."""


class EmbeddingModelError(RepoctxError):
    """The embedding model could not be loaded — check `embed_model` (a sentence-transformers
    name or a local model directory) and that the model is downloaded."""


class VectorsMissingError(RepoctxError):
    """This index has no vectors to search — run `repoctx index build` to embed the chunks, or
    search with `--mode lexical`."""


class UntrustedConfigError(ConfigError):
    """A repository's config may only tighten repoctx's limits — set the key in
    ~/.config/repoctx/config.toml or pass --trust-repo-config."""


class UnsafeIndexDirError(RepoctxError):
    """The index directory holds a link or special file repoctx never makes — remove it and
    build again."""


class VectorTableDamagedError(RepoctxError):
    """The vector table is damaged — run `repoctx index verify --repair` to set it aside and
    embed the chunks again; searches answer lexically meanwhile."""

    def __init__(self, where: object = None, reason: str = "") -> None:
        self.where = where
        self.reason = " ".join(reason.split())[:300] or "unreadable"  # one line, whatever Lance said
        at = f"The vector table at {where}" if where is not None else "The vector table"
        super().__init__(
            f"{at} is damaged ({self.reason}) — run `repoctx index verify --repair` to set it "
            "aside and embed the chunks again."
        )

