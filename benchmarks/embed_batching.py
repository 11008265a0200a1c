"""How chunks are batched for the embedding model: chunks/s of the default model on real chunks
of the standard library, per batch order (by characters, as before; by tokens, as now) and batch
size, and with one batch at a time (OpenVINO's LATENCY hint, as before) or several in flight
on throughput streams (now), with each variant's minimum cosine to the old default
(characters, 64, one at a time) per chunk.

The chunks are those `repoctx index build` makes for a random sample of stdlib files (a
throwaway index, no vectors). The variants run in alternating rounds in one process on one
loaded model, so drift of the machine's speed hits them alike; medians are reported.
Prints one JSON object to stdout, progress to stderr.

    .venv/bin/python benchmarks/embed_batching.py [--chunks 1000] [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import STDLIB_ROOT  # noqa: E402

#: order:batch[:latency]. ``latency``: the runtime compiled with OpenVINO's LATENCY hint, one
#: batch at a time on all cores, as before throughput streams; otherwise the shipped runtime
#: (THROUGHPUT: a stream per core, as many batches in flight). ``chars`` is the order before
#: the token sort, so ``chars:64:latency`` is the runtime of stop 26 and ``tokens:16:latency``
#: that of stop 27.
VARIANTS = ("chars:64:latency", "tokens:16:latency", "tokens:64", "tokens:32", "tokens:16")
BASELINE = "chars:64:latency"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def stdlib_chunks(n: int, seed: int = 1) -> list[str]:
    """Embedding inputs (header + code, as the index embeds them) of ``n`` random chunks."""
    from indexer.build import build
    from indexer.config import load_config
    from indexer.graph.store import open_for_read

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(
            STDLIB_ROOT,
            env={},
            index_dir=Path(tmp) / "ix",
            exclude=("site-packages/", "test/", "idlelib/", "lib2to3/"),
        )
        build(cfg)
        conn = open_for_read(cfg.index_path).conn
        rows = conn.execute(
            "SELECT f.path, c.start_line, c.end_line, c.header FROM chunks c "
            "JOIN files f ON f.id = c.file_id WHERE f.language = 'python' ORDER BY c.id"
        ).fetchall()
        conn.close()
    random.Random(seed).shuffle(rows)
    texts, lines = [], {}
    for path, a, b, header in rows[:n]:
        if path not in lines:
            lines[path] = (STDLIB_ROOT / path).read_text(errors="replace").splitlines()
        texts.append(header + "\n" + "\n".join(lines[path][a - 1 : b]))
    return texts


def encode(runtime, texts: list[str], order_by: str, batch: int) -> np.ndarray:
    """``tokens``: the runtime's own loop; ``chars``: the former loop, one batch at a time in
    the former order (on a LATENCY runtime, one request)."""
    if order_by == "tokens":
        return runtime.encode(texts, batch)
    tok = runtime._tokenizer
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    out = np.empty((len(texts), runtime.dim), dtype=np.float32)
    for s in range(0, len(order), batch):
        idx = order[s : s + batch]
        feats = tok.encode([texts[i] for i in idx])
        out[idx] = runtime._request.infer({k: feats[k] for k in runtime._inputs})[runtime._output]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from indexer.vectors.embed import SentenceTransformerEmbedder, _OpenVinoRuntime

    texts = stdlib_chunks(args.chunks)
    log(f"{len(texts)} chunks")
    emb = SentenceTransformerEmbedder().load()
    if emb.backend != "openvino":
        raise SystemExit(f"needs the OpenVINO runtime (got {emb.backend}: {emb.fallback_reason})")
    rt = emb._runtime
    latency = _OpenVinoRuntime(
        emb._key_dir() / "model.xml", rt._tokenizer, rt._inputs, rt.dim, hint="LATENCY"
    )
    runtimes = {"": rt, "latency": latency}
    for r in runtimes.values():
        encode(r, texts[:64], "tokens", 16)  # warm up
    speeds: dict[str, list[float]] = {v: [] for v in VARIANTS}
    vectors: dict[str, np.ndarray] = {}
    for r in range(args.rounds):
        for v in VARIANTS:
            order_by, batch, *hint = v.split(":")
            t = time.perf_counter()
            vectors[v] = encode(runtimes["".join(hint)], texts, order_by, int(batch))
            speeds[v].append(len(texts) / (time.perf_counter() - t))
            log(f"round {r + 1} {v}: {speeds[v][-1]:.1f} chunks/s")
    base = vectors[BASELINE] / np.linalg.norm(vectors[BASELINE], axis=1, keepdims=True)
    out = {}
    for v in VARIANTS:
        vec = vectors[v] / np.linalg.norm(vectors[v], axis=1, keepdims=True)
        med = statistics.median(speeds[v])
        out[v] = {
            "chunks_per_s_median": round(med, 1),
            "runs": [round(x, 1) for x in speeds[v]],
            "vs_baseline": round(med / statistics.median(speeds[BASELINE]), 3),
            "min_cosine_vs_baseline": round(float((vec * base).sum(axis=1).min()), 6),
        }
    lengths = rt._tokenizer.encode(texts)["attention_mask"].sum(axis=1)
    print(
        json.dumps(
            {
                "benchmark": "embed_batching",
                "chunks": len(texts),
                "tokens_median": int(np.median(lengths)),
                "rounds": args.rounds,
                "baseline": BASELINE,
                "default_now": "tokens:16",
                "streams": rt.streams,
                "in_flight": rt._in_flight,
                "variants": out,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
