"""Text embedders for the semantic index (the token counter is in ``embed_tokenizer``).

Nothing heavy is imported at module import: ``sentence_transformers``/``torch`` (seconds) only
when a torch model is loaded, ``openvino`` only when the OpenVINO runtime is used, and the token
counter needs only the ``tokenizers`` package.

On CPU the default runtime is OpenVINO when the optional ``openvino`` wheel is installed: the
sentence-transformers model (transformer, pooling, dense and normalise layers together) is
converted once, checked against torch fp32 on probe texts, and cached under the user cache dir
keyed by model files and library versions; later loads need neither torch nor
sentence-transformers. Without ``openvino`` (or when the check fails) torch fp32 is used.
``benchmarks/embed_runtimes.py`` measures the choice.

Size: the runtimes (torch, OpenVINO) and the conversion cache are chosen together by one check
against torch fp32.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from indexer.atomic import write_atomic
from indexer.config import DEFAULT_EMBED_MODEL
from indexer.errors import EmbeddingModelError
from indexer.vectors.hashing import HashingEmbedder, hashing_dim, identifier_tokens, normalise  # noqa: F401
from indexer.vectors.tokenizer import (  # noqa: F401 (re-exported: the token counter's public names)
    DEFAULT_MODEL_ID,
    ModelSource,
    ModelTokenizer,
    canonical_model_name,
    load_model_tokenizer,
    load_tokenizer,
    read_json,
    resolve_model,
)

BACKENDS = ("auto", "torch", "torch-bf16", "openvino")
#: Chunks per model call when ``batch_size`` is 0 (auto). On a CPU, small batches of chunks
#: sorted by token count pad least: on 1,000 stdlib chunks (OpenVINO, 2 cores, medians of 4
#: alternating rounds, benchmarks/embed_batching.py) 16 ran at 116 chunks/s, against 108 for
#: 64 and 97 for 64 sorted by characters, as before. A GPU is fed larger batches.
AUTO_BATCH_CPU, AUTO_BATCH_GPU = 16, 128
#: A converted runtime is used only if every probe's cosine similarity to torch fp32 reaches this.
MIN_COSINE = 0.99
_UNSET = object()
_EXPORT_FORMAT = "2"  # bump when the exported graph or info.json layout changes


class ChunkTokenCounter(Protocol):
    """Counts tokens the way the embedding model sees them (what the chunker needs)."""

    max_tokens: int

    def count(self, texts: Sequence[str]) -> list[int]: ...


class Embedder(Protocol):
    """What the index needs from a model. (Not runtime-checkable: isinstance would read
    ``dim``, which may load the model.)"""

    name: str  # model id recorded in the index
    dim: int
    max_tokens: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32, shape (len(texts), dim), rows L2-normalised."""
        ...

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Model tokens per text, special tokens included, not truncated."""
        ...


# --------------------------------------------------------------------------- runtimes


class _Runtime(Protocol):
    kind: str
    dim: int
    max_tokens: int
    auto_batch: int

    def encode(self, texts: Sequence[str], batch_size: int) -> np.ndarray: ...


def _torch_device(device: str | None) -> str:
    if device:
        return device
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "cpu"
    if torch_version.endswith("+cpu"):  # a CPU-only build: skip importing torch (1-2 s)
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """No progress bars or load notices from transformers while loading: only cli/ writes to
    the terminal. Restores the caller's settings afterwards."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    level = hf_logging.get_verbosity()
    st_logger = logging.getLogger("sentence_transformers")
    st_level = st_logger.level
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    st_logger.setLevel(logging.ERROR)  # tracing touches deprecated attributes, which warn
    try:
        yield
    finally:
        st_logger.setLevel(st_level)
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


class _TorchRuntime:
    def __init__(self, source: ModelSource, device: str, bf16: bool = False) -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        self.kind = "torch-bf16" if bf16 else "torch"
        kwargs: dict[str, Any] = {"device": device, "local_files_only": source.local}
        if bf16:
            kwargs["model_kwargs"] = {"dtype": torch.bfloat16}
        try:
            with _quiet_transformers():
                self.model = SentenceTransformer(source.load_id, **kwargs)
        except (OSError, ValueError) as exc:
            raise EmbeddingModelError(
                f"Cannot load embedding model {source.name!r}: {exc} — check `embed_model`, "
                "or download the model once with network access."
            ) from exc
        self.dim = int(self.model.get_embedding_dimension())
        self.max_tokens = int(self.model.max_seq_length)
        #: Chunks per model call when none is configured: a GPU wants large batches.
        self.auto_batch = AUTO_BATCH_GPU if str(device).startswith("cuda") else AUTO_BATCH_CPU

    def encode(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        out = self.model.encode(
            list(texts), batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False
        )
        return np.asarray(out, dtype=np.float32)


def have_openvino() -> bool:
    return importlib.util.find_spec("openvino") is not None


def _import_openvino() -> Any:
    """Import openvino with its usage telemetry off: ``import openvino`` otherwise reports
    to Intel (and writes ~/intel). Its tools fall back to a no-op stub when
    ``openvino_telemetry`` cannot be imported, so hide that module while openvino loads."""
    if "openvino" in sys.modules:
        return sys.modules["openvino"]
    hide = "openvino_telemetry" not in sys.modules
    if hide:
        sys.modules["openvino_telemetry"] = None  # type: ignore[assignment]
    try:
        import openvino
    finally:
        if hide:
            sys.modules.pop("openvino_telemetry", None)
    return openvino


class _OpenVinoRuntime:
    kind = "openvino"

    def __init__(
        self,
        model: Any,
        tokenizer: ModelTokenizer,
        inputs: list[str],
        dim: int,
        hint: str = "THROUGHPUT",
    ) -> None:
        """``model``: an ``openvino.Model`` or the path of its saved ``.xml``. ``hint``:
        OpenVINO's performance hint; ``LATENCY`` runs one batch at a time on all cores (the
        runtime before throughput streams, kept for `benchmarks/embed_batching.py`)."""
        ov = _import_openvino()
        core = ov.Core()
        # Throughput streams (one per core on a small machine, each with its own threads) and
        # as many batches in flight: a batch of 16 short chunks cannot keep two threads busy,
        # two such batches side by side can (benchmarks/embed_batching.py: ~1.1x chunks/s on
        # two cores, vectors equal). A single query runs on one stream (~2 ms either way).
        config: dict[str, Any] = {"PERFORMANCE_HINT": hint}
        threads = os.environ.get("REPOCTX_EMBED_THREADS")  # set per actor by the Ray engine
        if threads:
            # Several such processes share the machine: one stream of the given threads each.
            config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": int(threads)}
            # Pinning would put every such process's threads on the same first cores.
            config["ENABLE_CPU_PINNING"] = False
        self._compiled = core.compile_model(model, "CPU", config)
        self._request = self._compiled.create_infer_request()
        self._output = self._compiled.output(0)
        self._in_flight = max(
            1, int(self._compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        )
        self._queue: Any = None  # an AsyncInferQueue, made on the first multi-batch submission
        # One submission at a time: the request and the queue (whose callback writes into the
        # running submission's array) are shared by every caller of this runtime.
        self._lock = threading.Lock()
        #: Streams the hint gave (benchmarks/embed_batching.py reports them).
        self.streams = int(self._compiled.get_property("NUM_STREAMS"))
        self._tokenizer = tokenizer
        self._inputs = inputs
        self.dim = dim
        self.max_tokens = tokenizer.max_tokens
        self.auto_batch = AUTO_BATCH_CPU

    def encode(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        with self._lock:
            return self._encode(texts, batch_size)

    def _encode(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not out.shape[0]:
            return out
        # Longest first by token count, so each batch pads to similar lengths. Characters (as
        # sentence-transformers sorts) are a poor proxy for code: indentation and punctuation
        # tokenise very differently from words, and padding is paid in full by every layer.
        # The submission is tokenised once, padded to its longest text; a batch of the sorted
        # order then takes its rows cut to the batch's longest, which is exactly what
        # tokenising the batch alone gives when padding is on the right. A tokenizer that pads
        # on the left is asked again per batch.
        feats = self._tokenizer.encode(list(texts))
        mask = feats["attention_mask"]
        lengths = mask.sum(axis=1)
        right = bool((mask == (np.arange(mask.shape[1]) < lengths[:, None])).all())
        order = np.argsort(-lengths, kind="stable")

        def batches() -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
            for start in range(0, len(order), batch_size):
                idx = order[start : start + batch_size]
                if right:
                    width = int(lengths[idx[0]])
                    yield idx, {name: feats[name][idx, :width] for name in self._inputs}
                else:
                    part = self._tokenizer.encode([texts[i] for i in idx])
                    yield idx, {name: part[name] for name in self._inputs}

        if self._in_flight == 1 or len(order) <= batch_size:
            for idx, batch in batches():
                out[idx] = self._request.infer(batch)[self._output]
            return out
        return self._encode_async(batches(), out)

    def _encode_async(
        self, batches: Iterator[tuple[np.ndarray, dict[str, np.ndarray]]], out: np.ndarray
    ) -> np.ndarray:
        """Keep ``self._in_flight`` batches running; each callback copies its rows into ``out``.
        A failed request raises from ``wait_all`` (or the next ``start_async``)."""
        if self._queue is None or len(self._queue) != self._in_flight:
            ov = _import_openvino()
            self._queue = ov.AsyncInferQueue(self._compiled, self._in_flight)
        queue = self._queue

        def done(request: Any, idx: np.ndarray) -> None:
            out[idx] = request.get_output_tensor(0).data

        queue.set_callback(done)
        try:
            for idx, batch in batches:
                queue.start_async(batch, idx)
        finally:
            queue.wait_all()
        return out


# Probe texts for checking a converted runtime: code, prose, unicode, whitespace, empty, and
# one longer than any model's limit (truncation).
_PROBES = (
    "def parse_json(text: str) -> dict:\n    return json.loads(text)",
    'class LRUCache:\n    """Least-recently-used cache."""\n\n    def get(self, key):\n        ...',
    "SELECT id, name FROM users WHERE age > 21 ORDER BY name;",
    'fn main() {\n    println!("hello {}", 42);\n}',
    "  leading and trailing whitespace \t\n",
    "Ünïcödé naïve café — 日本語のテキスト 🙂",
    "x",
    "",
    " ".join(f"word{i} camelCase_{i}" for i in range(700)),
)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (normalise(a) * normalise(b)).sum(axis=1)


def _export_openvino(torch_rt: _TorchRuntime, tokenizer: ModelTokenizer) -> tuple[Any, list[str]]:
    """Convert the whole sentence-transformers pipeline to an ``openvino.Model``."""
    import torch

    ov = _import_openvino()
    st = torch_rt.model.to("cpu")
    probes = list(_PROBES[:2])
    feats = st.preprocess(probes) if hasattr(st, "preprocess") else st.tokenize(probes)
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in feats]

    class _Pipeline(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.st = st

        def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
            features: dict[str, Any] = dict(zip(names, tensors, strict=True))
            features["modality"] = "text"
            return self.st(features)["sentence_embedding"]

    example = tuple(feats[n] for n in names)
    # Tracing warns about shape checks frozen to constants; _check_export's probes (other
    # lengths, padding, truncation) catch any that matter, so torch's own re-run check
    # (seconds) is skipped.
    with torch.no_grad(), warnings.catch_warnings(), _quiet_transformers():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(_Pipeline().eval(), example, check_trace=False)
        model = ov.convert_model(traced, example_input=example)
    for port, name in zip(model.inputs, names, strict=True):  # *tensors leaves them unnamed
        port.get_tensor().set_names({name})
    return model, names


def _check_export(
    torch_rt: _TorchRuntime, ov_rt: _OpenVinoRuntime, tokenizer: ModelTokenizer
) -> tuple[str, float]:
    """(why the converted runtime must not be used or "", min cosine vs torch fp32)."""
    probes = list(_PROBES)
    model = torch_rt.model
    st_ids = model.preprocess(probes) if hasattr(model, "preprocess") else model.tokenize(probes)
    ours = tokenizer.encode(probes)
    mask = st_ids["attention_mask"].numpy()
    if mask.shape != ours["attention_mask"].shape or not np.array_equal(
        st_ids["input_ids"].numpy() * mask, ours["input_ids"] * ours["attention_mask"]
    ):
        return "its tokenizer.json tokenises differently from sentence-transformers", 0.0
    cos = float(_cosines(ov_rt.encode(probes, 4), torch_rt.encode(probes, 4)).min())
    if cos < MIN_COSINE:
        return f"its vectors differ from torch fp32 (min cosine {cos:.4f} < {MIN_COSINE})", cos
    return "", cos


def default_cache_dir() -> Path:
    base = os.environ.get("REPOCTX_CACHE_DIR")
    if base:
        return Path(base).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "repoctx"


def _versions(*packages: str) -> dict[str, str]:
    out = {}
    for package in packages:
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = ""
    return out


def _model_fingerprint(path: Path) -> list[tuple[str, int, int]]:
    """Path, size and mtime of every model file: a changed file gives a new cache key."""
    rows = []
    for f in sorted(path.rglob("*")):
        if f.is_file() and ".cache" not in f.relative_to(path).parts:
            st = f.stat()
            rows.append((str(f.relative_to(path)), st.st_size, st.st_mtime_ns))
    return rows


# --------------------------------------------------------------------------- sentence-transformers


class SentenceTransformerEmbedder:
    """A sentence-transformers model. Loads on first use (``embed``, ``dim``, ``backend``).

    ``backend``: ``auto`` (OpenVINO on CPU when installed and checked, else torch fp32; torch on
    CUDA), ``torch``, ``torch-bf16`` or ``openvino``. ``device``: None picks CUDA when torch sees
    one, else CPU. ``cache_dir`` holds converted models (default ``~/.cache/repoctx``, or
    ``$REPOCTX_CACHE_DIR``).
    """

    def __init__(
        self,
        model: str = DEFAULT_EMBED_MODEL,
        device: str | None = None,
        batch_size: int = 0,
        backend: str = "auto",
        cache_dir: str | Path | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
        if batch_size < 0:
            raise ValueError("batch_size must be positive, or 0 for the runtime's own")
        self.source = resolve_model(model)
        self.name = self.source.name
        self.batch_size = batch_size
        self.requested_backend = backend
        self._device = device
        self._cache_root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self._runtime: _Runtime | None = None
        self._key: Path | None | object = _UNSET
        #: Why the OpenVINO runtime is not used, when ``backend="auto"`` fell back to torch.
        self.fallback_reason = ""
        self.calls = 0  # embed() calls that ran the model
        self.texts_embedded = 0

    # -- public ------------------------------------------------------------------------

    @property
    def backend(self) -> str:
        """The runtime in use: ``openvino``, ``torch`` or ``torch-bf16`` (loads the model)."""
        return self._load().kind

    @property
    def dim(self) -> int:
        if self._runtime is None:
            info = self._cached_info()
            if info.get("dim"):
                return int(info["dim"])
        return self._load().dim

    @property
    def max_tokens(self) -> int:
        if self._runtime is None:
            info = self._cached_info()
            if info.get("max_tokens"):
                return int(info["max_tokens"])
        return self._load().max_tokens

    @property
    def tokenizer(self) -> ModelTokenizer:
        return _load_model_tokenizer_cached(self.source)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not len(texts):
            return np.zeros((0, self.dim), dtype=np.float32)
        runtime = self._load()
        self.calls += 1
        self.texts_embedded += len(texts)
        return normalise(runtime.encode(list(texts), self.batch_size or runtime.auto_batch))

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.tokenizer.count(texts)

    def load(self) -> SentenceTransformerEmbedder:
        """Load the model now rather than on first use."""
        self._load()
        return self

    # -- loading -----------------------------------------------------------------------

    def _load(self) -> _Runtime:
        if self._runtime is not None:
            return self._runtime
        device = _torch_device(self._device)
        kind = self.requested_backend
        if kind == "auto":
            kind = "openvino" if device == "cpu" and have_openvino() else "torch"
        if kind == "openvino":
            if not have_openvino():
                raise EmbeddingModelError(
                    "The OpenVINO runtime is not installed — `pip install 'openvino>=2025.1'` "
                    "or use backend `torch`."
                )
            runtime = self._load_openvino(strict=self.requested_backend == "openvino")
        else:
            runtime = _TorchRuntime(self.source, device, bf16=kind == "torch-bf16")
            self._write_info({"dim": runtime.dim, "max_tokens": runtime.max_tokens})
        self._runtime = runtime
        return runtime

    def _key_dir(self) -> Path | None:
        """The cache directory for this model's files and library versions; None when the
        model files are not local yet (a hub model before its first download)."""
        if self._key is _UNSET:
            self._key = self._compute_key_dir()
        return self._key  # type: ignore[return-value]

    def _compute_key_dir(self) -> Path | None:
        if self.source.path is None:
            return None
        key = json.dumps(
            {
                "format": _EXPORT_FORMAT,
                "name": self.name,
                "path": str(self.source.path),
                "files": _model_fingerprint(self.source.path),
                "versions": _versions(
                    "openvino", "torch", "transformers", "sentence-transformers", "tokenizers"
                ),
            },
            sort_keys=True,
        )
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", self.name)[-60:]
        return (
            self._cache_root / "models" / f"{slug}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
        )

    def _cached_info(self) -> dict[str, Any]:
        key_dir = self._key_dir()
        return read_json(key_dir / "info.json") if key_dir is not None else {}

    def _write_info(self, updates: dict[str, Any], files: Path | None = None) -> None:
        """Merge ``updates`` into info.json, and with ``files`` (an exported model) replace
        the cache entry, each by an atomic rename. A cache that cannot be written only costs
        speed, so OSError is ignored."""
        key_dir = self._key_dir()
        if key_dir is None:
            return
        old = self._cached_info()
        info = {**old, "name": self.name, "source_path": str(self.source.path), **updates}
        if files is None and info == old:
            return
        try:
            key_dir.parent.mkdir(parents=True, exist_ok=True)
            if files is None:
                key_dir.mkdir(exist_ok=True)
                write_atomic(key_dir / "info.json", json.dumps(info, indent=1))
                return
            tmp = Path(tempfile.mkdtemp(dir=key_dir.parent, prefix=".tmp-"))
            try:
                for f in files.iterdir():
                    shutil.move(f, tmp / f.name)
                (tmp / "info.json").write_text(json.dumps(info, indent=1), encoding="utf-8")
                if key_dir.is_dir():
                    shutil.rmtree(key_dir)
                os.replace(tmp, key_dir)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            # Older exports of this model from this install (other files or library versions)
            # are dead weight, as are those of installs that are gone. Another install's
            # (a second virtual environment) stays: pruning it made two environments convert
            # the model again, ~10 s with torch's import, each time the other one had run.
            slug = key_dir.name.rsplit("-", 1)[0]
            for old_dir in key_dir.parent.glob(f"{glob.escape(slug)}-*"):
                same_model = old_dir.name.rsplit("-", 1)[0] == slug
                if same_model and old_dir != key_dir and old_dir.is_dir():
                    other = read_json(old_dir / "info.json").get("source_path")
                    if not other or other == info["source_path"] or not Path(other).exists():
                        shutil.rmtree(old_dir, ignore_errors=True)
        except OSError:
            return

    def _load_openvino(self, strict: bool) -> _Runtime:
        tokenizer = self.tokenizer
        key_dir = self._key_dir()
        info = self._cached_info()
        ov_info = info.get("openvino") or {}
        if ov_info.get("ok") and key_dir is not None and (key_dir / "model.xml").is_file():
            return _OpenVinoRuntime(
                key_dir / "model.xml", tokenizer, ov_info["inputs"], info["dim"]
            )
        if ov_info.get("ok") is False and not strict:
            self.fallback_reason = ov_info.get("reason", "")
            return _TorchRuntime(self.source, "cpu")
        # First use: convert from the torch model, check, cache. The torch model is loaded
        # anyway, so it is the fallback if the check fails.
        torch_rt = _TorchRuntime(self.source, "cpu")
        if self.source.path is None:  # downloaded just now: key the cache on the snapshot
            self.source = resolve_model(self.name)
            self._key = _UNSET
        ov_model, inputs = _export_openvino(torch_rt, tokenizer)
        ov_rt = _OpenVinoRuntime(ov_model, tokenizer, inputs, torch_rt.dim)
        reason, cosine = _check_export(torch_rt, ov_rt, tokenizer)
        meta = {"dim": torch_rt.dim, "max_tokens": torch_rt.max_tokens}
        if reason:
            self._write_info({**meta, "openvino": {"ok": False, "reason": reason}})
            if strict:
                raise EmbeddingModelError(
                    f"OpenVINO cannot run {self.name}: {reason} — use backend `torch`."
                )
            self.fallback_reason = reason
            return torch_rt
        with tempfile.TemporaryDirectory() as tmp:
            ov = _import_openvino()
            # Uncompressed, so the cached model is exactly the one just checked (OpenVINO
            # would otherwise store fp16 weights).
            ov.save_model(ov_model, str(Path(tmp) / "model.xml"), compress_to_fp16=False)
            ok = {"ok": True, "inputs": inputs, "min_cosine_vs_torch": round(cosine, 6)}
            self._write_info({**meta, "openvino": ok}, files=Path(tmp))
        return ov_rt


@lru_cache(maxsize=8)
def _load_model_tokenizer_cached(source: ModelSource) -> ModelTokenizer:
    return load_model_tokenizer(source)


def create_embedder(name: str, **kw: Any) -> HashingEmbedder | SentenceTransformerEmbedder:
    """``hashing`` / ``hashing:N`` -> HashingEmbedder (``kw`` other than ``max_tokens`` are
    ignored); anything else -> SentenceTransformerEmbedder(name, **kw)."""
    dim = hashing_dim(name)
    if dim is not None:
        return HashingEmbedder(
            dim, **({"max_tokens": kw["max_tokens"]} if "max_tokens" in kw else {})
        )
    return SentenceTransformerEmbedder(name, **kw)
