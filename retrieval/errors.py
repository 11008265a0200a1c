"""Typed errors of the retrieval layer. The docstring is the message a user sees."""

from __future__ import annotations

from indexer import RepoctxError


class SymbolNotFoundError(RepoctxError):
    """No symbol by that name — try a shorter prefix, or `repoctx search` for words."""
