"""Embedding runtimes for the default model on this machine: chunks/s, load time, and cosine
similarity to torch fp32, on ~200 function-sized chunks cut from the Python stdlib.

Each runtime runs in its own process so load times include imports. OpenVINO runs twice:
with an empty cache (conversion + check) and with the cache it wrote. Prints one JSON object
to stdout, progress to stderr. Usage: ``python benchmarks/embed_runtimes.py [--chunks 200]``.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
STDLIB = Path("/root/.pyenv/versions/3.11.7/lib/python3.11")
RUNTIMES = ("torch", "torch-bf16", "openvino")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sample_chunks(n: int, root: Path = STDLIB) -> list[str]:
    """Up to two 8-40 line functions per top-level stdlib module, in file order, each with
    a path/symbol header like the chunker's."""
    out: list[str] = []
    for path in sorted(root.glob("*.py")):
        source = path.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        lines = source.splitlines()
        taken = 0
        for node in ast.walk(tree):
            is_def = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if is_def and 8 <= node.end_lineno - node.lineno + 1 <= 40:
                body = "\n".join(lines[node.lineno - 1 : node.end_lineno])
                out.append(f"{path.name} {node.name}\n{body}")
                taken += 1
                if taken == 2:
                    break
        if len(out) >= n:
            break
    return out[:n]


def _cpu_s() -> float:
    """CPU seconds used by this process, all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def child(runtime: str, cache: str, n: int, batch_size: int, out: str, reps: int) -> None:
    """Measure one runtime in this (fresh) process."""
    t0 = time.perf_counter()
    sys.path.insert(0, str(REPO))
    from indexer.vectors.embed import SentenceTransformerEmbedder

    emb = SentenceTransformerEmbedder(backend=runtime, batch_size=batch_size, cache_dir=cache)
    emb.load()
    load_s = time.perf_counter() - t0
    texts = sample_chunks(n)
    emb.embed(texts[:16])  # first-call allocations and kernel selection
    best = best_cpu = float("inf")
    vectors = None
    for _ in range(reps):
        t, c = time.perf_counter(), _cpu_s()
        vectors = emb.embed(texts)
        best = min(best, time.perf_counter() - t)
        best_cpu = min(best_cpu, _cpu_s() - c)
    np.save(out, vectors)
    heavy = [m for m in ("torch", "sentence_transformers") if m in sys.modules]
    print(
        json.dumps(
            {
                "backend": emb.backend,
                "load_s": round(load_s, 2),
                "chunks_per_s": round(len(texts) / best, 1),
                # Less sensitive than wall time to other processes on a shared machine.
                "chunks_per_cpu_s": round(len(texts) / best_cpu, 1),
                "imports": heavy,
            }
        )
    )


def run_child(runtime: str, cache: str, args: argparse.Namespace, tmp: str) -> dict:
    out = os.path.join(tmp, f"{runtime}-{time.monotonic_ns()}.npy")
    cmd = [sys.executable, __file__, "--child", runtime, "--cache", cache, "--out", out]
    cmd += ["--chunks", str(args.chunks), "--batch-size", str(args.batch_size)]
    cmd += ["--reps", str(args.reps)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1:]}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["vectors"] = out
    return result


def versions() -> dict[str, str]:
    out = {}
    for pkg in ("torch", "sentence-transformers", "transformers", "openvino", "tokenizers"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--chunks", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--child")
    ap.add_argument("--cache")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.child:
        child(args.child, args.cache, args.chunks, args.batch_size, args.out, args.reps)
        return

    sys.path.insert(0, str(REPO))
    from indexer.vectors.embed import MIN_COSINE, have_openvino, load_tokenizer

    texts = sample_chunks(args.chunks)
    tok = load_tokenizer("all-MiniLM-L6-v2")
    counts = tok.count(texts)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        for runtime in RUNTIMES:
            if runtime == "openvino" and not have_openvino():
                results[runtime] = {"error": "openvino is not installed"}
                continue
            log(f"{runtime} ...")
            results[runtime] = run_child(runtime, cache, args, tmp)
            if runtime == "openvino" and "error" not in results[runtime]:
                log("openvino, cached ...")
                cached = run_child(runtime, cache, args, tmp)
                results[runtime]["first_load_s"] = results[runtime]["load_s"]
                results[runtime]["load_s"] = cached.get("load_s")
                results[runtime]["cached_imports"] = cached.get("imports")
            log(json.dumps(results[runtime]))
        reference = np.load(results["torch"]["vectors"]) if "vectors" in results["torch"] else None
        for r in results.values():
            path = r.pop("vectors", None)
            if path is not None and reference is not None:
                cos = (np.load(path) * reference).sum(axis=1)
                r["cosine_vs_fp32"] = {
                    "min": round(float(cos.min()), 5),
                    "mean": round(float(cos.mean()), 5),
                }
    eligible = [
        (r["chunks_per_s"], name)
        for name, r in results.items()
        if "chunks_per_s" in r and r.get("cosine_vs_fp32", {}).get("min", 0) >= MIN_COSINE
    ]
    report = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "sample": {
            "source": str(STDLIB),
            "chunks": len(texts),
            "mean_tokens": round(float(np.mean(counts)), 1),
            "over_max_tokens": sum(c > tok.max_tokens for c in counts),
            "max_tokens": tok.max_tokens,
        },
        "cpus": os.cpu_count(),
        "load_average_at_end": [round(x, 1) for x in os.getloadavg()],
        "batch_size": args.batch_size,
        "versions": versions(),
        "runtimes": results,
        "fastest_with_min_cosine_ge": {
            "threshold": MIN_COSINE,
            "runtime": max(eligible)[1] if eligible else None,
        },
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
