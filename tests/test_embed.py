"""Embedders: the hashing test double, the torch-free tokenizer, and the real default model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from indexer.vectors import embed
from indexer.vectors.embed import (
    DEFAULT_MODEL_ID,
    EmbeddingModelError,
    HashingEmbedder,
    ModelTokenizer,
    SentenceTransformerEmbedder,
    canonical_model_name,
    create_embedder,
    have_openvino,
    identifier_tokens,
    load_tokenizer,
)

ROOT = Path(__file__).resolve().parents[1]
STALE = ("sentence-transformers_all-MiniLM-L6-v2-0123456789abcdef", "other-model-0123456789abcdef")
OTHER_INSTALL = "sentence-transformers_all-MiniLM-L6-v2-1111111111111111"
GONE_INSTALL = "sentence-transformers_all-MiniLM-L6-v2-2222222222222222"

TEXTS = [
    "def parse_json(text: str) -> dict:\n    return json.loads(text)",
    "class HTTPServer(socketserver.TCPServer):\n    allow_reuse_address = 1",
    "  indented   text with    spaces\n\n",
    "Ünïcödé naïve café — 日本語 🙂",
    "",
    "x",
    " ".join(f"identifier_{i} camelCase{i}" for i in range(400)),  # far over 256 tokens
]


# --------------------------------------------------------------------------- hashing


def test_identifier_tokens_split_code_names():
    assert identifier_tokens("parseJSONDocument(http_server2)") == [
        "parse",
        "json",
        "document",
        "http",
        "server",
        "2",
    ]


def test_hashing_embedder_is_deterministic_and_normalised():
    a, b = HashingEmbedder(64), HashingEmbedder(64)
    va = a.embed(TEXTS)
    assert va.dtype == np.float32 and va.shape == (len(TEXTS), 64)
    np.testing.assert_array_equal(va, b.embed(TEXTS))
    np.testing.assert_allclose(np.linalg.norm(va, axis=1), 1.0, rtol=1e-6)
    # Same words in another order and case: same vector. Different words: not.
    np.testing.assert_allclose(a.embed(["Parse JSON"])[0], a.embed(["json_parse"])[0], rtol=1e-6)
    assert float(va[0] @ va[1]) < 0.99


def test_hashing_embedder_is_stable_across_processes():
    code = "from indexer.vectors.embed import HashingEmbedder; print(HashingEmbedder(16).embed(['parse json']).tolist())"
    env = {**os.environ, "PYTHONHASHSEED": "123"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    np.testing.assert_allclose(
        json.loads(out.stdout)[0], HashingEmbedder(16).embed(["parse json"])[0], rtol=1e-6
    )


def test_hashing_embedder_counts_calls():
    e = HashingEmbedder(8)
    assert e.embed([]).shape == (0, 8)
    assert (e.calls, e.texts_embedded) == (0, 0)
    e.embed(["a", "b"])
    e.embed(["c"])
    assert (e.calls, e.texts_embedded) == (2, 3)
    assert e.count_tokens(["parse_json doc", ""]) == [3, 0]


def test_create_embedder_and_names():
    assert isinstance(create_embedder("hashing"), HashingEmbedder)
    e = create_embedder("hashing:16", batch_size=8)
    assert (e.dim, e.name) == (16, "hashing:16")
    assert canonical_model_name("hashing") == "hashing:64"
    assert canonical_model_name("all-MiniLM-L6-v2") == DEFAULT_MODEL_ID
    assert canonical_model_name("org/other-model") == "org/other-model"
    with pytest.raises(EmbeddingModelError):
        create_embedder("hashing:lots")
    st = create_embedder("all-MiniLM-L6-v2", batch_size=8)
    assert isinstance(st, SentenceTransformerEmbedder)
    assert (st.name, st.batch_size) == (DEFAULT_MODEL_ID, 8)
    assert st._runtime is None  # nothing loaded until first use
    with pytest.raises(ValueError):
        SentenceTransformerEmbedder(backend="tensorrt")


# --------------------------------------------------------------------------- tokenizer


def test_load_tokenizer_needs_no_torch():
    code = (
        "import sys; from indexer.vectors.embed import load_tokenizer\n"
        "tok = load_tokenizer('all-MiniLM-L6-v2')\n"
        "print(tok.count(['hello world']), tok.max_tokens,"
        " [m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["[4]", "256", "[]"]


def test_load_tokenizer_hashing():
    tok = load_tokenizer("hashing:32")
    assert tok.count(["parse_json"]) == [2]


def test_load_tokenizer_from_local_dir_and_missing_dir(tmp_path):
    model_dir = Path(embed.resolve_model("all-MiniLM-L6-v2").path)
    tok = load_tokenizer(str(model_dir))
    assert isinstance(tok, ModelTokenizer)
    assert tok.count(["hello world"]) == [4]
    # Neither a directory nor a valid hub id: refused before any download is tried.
    with pytest.raises(EmbeddingModelError, match="embed_model"):
        load_tokenizer(str(tmp_path / "no" / "such-model"))


# --------------------------------------------------------------------------- real model


@pytest.fixture(scope="module")
def default_embedder(tmp_path_factory) -> SentenceTransformerEmbedder:
    cache = tmp_path_factory.mktemp("embed-cache")
    for stale in STALE:  # left by an older repoctx / library version, and another model
        (cache / "models" / stale).mkdir(parents=True)
    # exports of this model from other installs: one still there (kept), one gone (pruned)
    for name, source in ((OTHER_INSTALL, cache), (GONE_INSTALL, cache / "deleted-venv")):
        (cache / "models" / name).mkdir(parents=True)
        (cache / "models" / name / "info.json").write_text(json.dumps({"source_path": str(source)}))
    return SentenceTransformerEmbedder(cache_dir=cache).load()


@pytest.fixture(scope="module")
def torch_embedder(tmp_path_factory) -> SentenceTransformerEmbedder:
    cache = tmp_path_factory.mktemp("torch-cache")
    return SentenceTransformerEmbedder(backend="torch", cache_dir=cache).load()


def test_model_tokenizer_matches_sentence_transformers(torch_embedder):
    hf = torch_embedder._runtime.model.tokenizer
    tok = load_tokenizer("all-MiniLM-L6-v2")
    expected = [len(hf(t, add_special_tokens=True, truncation=False)["input_ids"]) for t in TEXTS]
    assert tok.count(TEXTS) == expected
    assert expected[-1] > 256  # counts are not truncated
    assert torch_embedder.count_tokens(TEXTS) == expected
    assert tok.max_tokens == torch_embedder.max_tokens == 256


def test_default_model_ranks_json_parsing_first(default_embedder, torch_embedder):
    e = default_embedder
    assert (e.name, e.dim, e.max_tokens) == (DEFAULT_MODEL_ID, 384, 256)
    query = "parse json document"
    snippets = [
        "def load_config(path):\n    with open(path) as fh:\n        return json.load(fh)",
        "def draw_circle(canvas, x, y, r):\n    canvas.arc(x, y, r, 0, 360)",
    ]
    v = e.embed([query, *snippets])
    assert v.dtype == np.float32 and v.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-5)
    assert float(v[0] @ v[1]) > float(v[0] @ v[2]) + 0.1
    assert (e.calls, e.texts_embedded) == (1, 3)
    assert e.embed([]).shape == (0, 384)
    assert e.calls == 1

    expected_backend = "openvino" if have_openvino() else "torch"
    assert e.backend == expected_backend, e.fallback_reason
    reference = torch_embedder.embed(TEXTS)
    cos = (e.embed(TEXTS) * reference).sum(axis=1)
    assert float(cos.min()) >= embed.MIN_COSINE


@pytest.mark.skipif(not have_openvino(), reason="the optional openvino runtime is not installed")
def test_converted_model_is_cached_and_loads_without_torch(default_embedder):
    key_dir = default_embedder._key_dir()
    info = json.loads((key_dir / "info.json").read_text())
    remaining = {p.name for p in key_dir.parent.iterdir()}
    # the stale export of this model and a gone install's are pruned; another install's stays
    assert remaining == {key_dir.name, STALE[1], OTHER_INSTALL}
    assert info["source_path"] == str(default_embedder.source.path)
    assert info["openvino"]["ok"] and info["dim"] == 384
    assert info["openvino"]["min_cosine_vs_torch"] >= embed.MIN_COSINE
    code = (
        "import sys; from indexer.vectors.embed import SentenceTransformerEmbedder\n"
        "e = SentenceTransformerEmbedder(cache_dir=sys.argv[1])\n"
        "v = e.embed(['parse json document'])\n"
        "mods = ('torch', 'sentence_transformers', 'openvino_telemetry')\n"
        "print(e.backend, v.shape[1], [m for m in mods if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(key_dir.parent.parent)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["openvino", "384", "[]"]


def test_auto_falls_back_to_torch_without_openvino(monkeypatch, tmp_path, torch_embedder):
    monkeypatch.setattr(embed, "have_openvino", lambda: False)
    e = SentenceTransformerEmbedder(cache_dir=tmp_path)
    assert e.backend == "torch"
    np.testing.assert_allclose(e.embed(TEXTS[:2]), torch_embedder.embed(TEXTS[:2]), atol=1e-5)
    with pytest.raises(EmbeddingModelError):
        SentenceTransformerEmbedder(backend="openvino", cache_dir=tmp_path).load()


def test_batches_sorted_by_tokens_keep_each_text_its_own_vector(default_embedder):
    """Texts are embedded longest (in tokens) first, in batches; every vector must still come
    back in its text's place and equal the text embedded alone, whatever the batch size."""
    e = default_embedder
    # (a runtime whose order were wrong would fail its conversion check and fall back to torch)
    assert e.backend == ("openvino" if have_openvino() else "torch"), e.fallback_reason
    texts = [*TEXTS, "def f():\n" + "    x = 1\n" * 40, "a b c", "if (x) { return y; }"]
    alone = np.vstack([e.embed([t]) for t in texts])
    before = e.batch_size
    try:
        for size in (0, 1, 3, 64):
            e.batch_size = size
            cos = (e.embed(texts) * alone).sum(axis=1)
            assert float(cos.min()) >= 0.999, (size, cos)
            shuffled = texts[::-1]
            assert float((e.embed(shuffled) * alone[::-1]).sum(axis=1).min()) >= 0.999
    finally:
        e.batch_size = before
    assert before == 0 and e._runtime.auto_batch == embed.AUTO_BATCH_CPU


@pytest.mark.skipif(not have_openvino(), reason="the OpenVINO runtime is not installed")
def test_batches_in_flight_give_the_vectors_of_one_batch_at_a_time(default_embedder):
    """The runtime keeps several batches running at once (throughput streams); each finished
    batch must land in its own rows, exactly what a runtime running one batch at a time on all
    cores (the LATENCY hint, as before) gives — for every batch size, however many in flight."""
    e = default_embedder
    assert e.backend == "openvino", e.fallback_reason
    rt = e._runtime
    one_at_a_time = embed._OpenVinoRuntime(
        e._key_dir() / "model.xml", rt._tokenizer, rt._inputs, rt.dim, hint="LATENCY"
    )
    assert one_at_a_time._in_flight == 1
    texts = [*TEXTS, *(f"def f{i}(x):\n" + "    x += 1\n" * (i % 13) for i in range(37))]
    want = one_at_a_time.encode(texts, 4)
    before = rt._in_flight
    try:
        for in_flight in (2, 3):  # also on a one-core machine, where the hint gives one stream
            rt._in_flight = in_flight
            for size in (1, 4, 16):
                got = rt.encode(texts, size)
                cos = (embed.normalise(got) * embed.normalise(want)).sum(axis=1)
                assert np.isfinite(got).all() and float(cos.min()) >= 0.99999, (in_flight, size)
    finally:
        rt._in_flight = before
    assert rt._queue is not None  # the batches really went through the async queue


@pytest.mark.skipif(not have_openvino(), reason="the OpenVINO runtime is not installed")
def test_one_runtime_used_from_two_threads_gives_each_its_own_vectors(default_embedder):
    """Batches in flight share one queue whose callback writes into the running submission:
    two threads embedding at once (a watcher and a search in one process) must each get
    their own texts' vectors."""
    import threading

    e = default_embedder
    rt = e._runtime
    a = [f"def alpha_{i}(x):\n    return x + {i}\n" * (1 + i % 5) for i in range(48)]
    b = [f"SELECT name FROM table_{i} WHERE id = {i};" for i in range(48)]
    want = {"a": rt.encode(a, 4), "b": rt.encode(b, 4)}
    got: dict[str, list[np.ndarray]] = {"a": [], "b": []}

    def run(key: str, texts: list[str]) -> None:
        for _ in range(6):
            got[key].append(rt.encode(texts, 4))

    before = rt._in_flight
    rt._in_flight = max(2, before)
    try:
        threads = [threading.Thread(target=run, args=(k, t)) for k, t in (("a", a), ("b", b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        rt._in_flight = before
    for key in ("a", "b"):
        assert len(got[key]) == 6
        for vectors in got[key]:
            cos = (embed.normalise(vectors) * embed.normalise(want[key])).sum(axis=1)
            assert float(cos.min()) >= 0.99999, key
