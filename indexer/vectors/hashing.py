"""The test embedder: deterministic bag-of-identifier-words vectors, no model, no downloads.

`hashing` / `hashing:N` work wherever a model name does (`embed_model`, `--embed-model`), so
tests and benchmarks run the real embedding pipeline without weights. Its own words are its
tokens, so it is also its own token counter (`indexer.vectors.tokenizer.load_tokenizer`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from indexer.blake2 import blake2b
from indexer.errors import EmbeddingModelError

if TYPE_CHECKING:
    import numpy as np


def hashing_dim(model: str) -> int | None:
    """64 for ``hashing``, N for ``hashing:N``, None for any other model name."""
    if model == "hashing":
        return 64
    if model.startswith("hashing:"):
        try:
            return int(model.split(":", 1)[1])
        except ValueError:
            raise EmbeddingModelError(
                f"Bad embedding model {model!r} — use `hashing` or `hashing:<dim>`."
            ) from None
    return None


def normalise(vectors: np.ndarray) -> np.ndarray:
    import numpy as np  # not at import: `hashing_dim` is on every build's path (~50 ms)

    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


_WORD = re.compile(r"[A-Za-z0-9]+")
_SUBWORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def identifier_tokens(text: str) -> list[str]:
    """Lower-cased words with identifiers split at ``_`` and camelCase: ``parseJSONDoc`` ->
    ``parse json doc``."""
    return [sub.lower() for word in _WORD.findall(text) for sub in _SUBWORD.findall(word)]


@lru_cache(maxsize=65536)
def _bucket(token: str, dim: int) -> tuple[int, float]:
    # blake2b, not hash(): vectors must be identical across processes and runs.
    h = int.from_bytes(blake2b(token.encode(), digest_size=8).digest(), "little")
    return h % dim, (1.0 if (h >> 63) & 1 else -1.0)


class HashingEmbedder:
    """Deterministic bag-of-identifier-words embedder for tests: no model, no downloads."""

    def __init__(self, dim: int = 64, max_tokens: int = 256) -> None:
        if dim < 2:
            raise ValueError("dim must be at least 2")
        self.dim = dim
        self.max_tokens = max_tokens
        self.name = f"hashing:{dim}"
        self.calls = 0  # embed() calls that reached the "model"
        self.texts_embedded = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        self.calls += 1
        self.texts_embedded += len(texts)
        for row, text in enumerate(texts):
            # A text without words still needs a unit vector; give all of them the same one.
            for token in identifier_tokens(text) or ["\0empty"]:
                index, sign = _bucket(token, self.dim)
                out[row, index] += sign
        return normalise(out)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(identifier_tokens(t)) for t in texts]

    count = count_tokens
