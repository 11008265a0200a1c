"""What the vector table costs an embedding run, per way of talking to it (JSON on stdout).

An embedding run writes its vectors in batches of `indexer.phases.semantic.BATCH` chunks. Before each
batch it asks the table for vectors it already holds (reuse by content hash), and after it
writes the batch. Two ways, each on a fresh LanceDB table filled to ``--rows`` rows:

- ``per_batch`` (before): every batch asks the table for all of its hashes and merges its rows
  by chunk id; both are a pass over a table the run keeps growing.
- ``keys_once`` (now, for runs above `indexer.phases.semantic.KEY_SCAN_MIN` chunks): the table's ids
  and hashes are read once; a batch asks only for hashes the table holds and appends the rows
  of ids it lacks.

No model runs: the vectors are random, the hashes distinct (a full build of new code). Both
tables must end equal (ids, hashes and vectors). The model itself embeds ~100 chunks/s on two
cores (`benchmarks/semantic_build.py`), so a batch of 256 costs it ~2.5 s: read the table's
share against that.

    .venv/bin/python benchmarks/vector_writes.py [--rows 61440] [--rounds 2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from indexer.phases.semantic import BATCH  # noqa: E402
from indexer.vectors.table import VectorRow, VectorStore  # noqa: E402

DIM = 384
WAYS = ("per_batch", "keys_once")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def fill(way: str, rows: int, seed: int = 0) -> tuple[dict, VectorStore]:
    rng = np.random.default_rng(seed)
    vs = VectorStore.open(tempfile.mkdtemp(prefix="repoctx-vw-") + "/v.lance", DIM, "m")
    t = time.perf_counter()
    ids, hashes = vs.keys() if way == "keys_once" else (None, None)
    keys_s = time.perf_counter() - t
    lookup = write = 0.0
    last_tenth: list[float] = []
    for start in range(0, rows, BATCH):
        n = min(BATCH, rows - start)
        batch_hashes = [hashlib.blake2b(str(start + i).encode(), digest_size=16).hexdigest()
                        for i in range(n)]
        t0 = time.perf_counter()
        vs.vectors_for_hashes(batch_hashes if hashes is None else set(batch_hashes) & hashes)
        t1 = time.perf_counter()
        vecs = rng.standard_normal((n, DIM)).astype(np.float32)
        out = [VectorRow(str(start + i), h, f"pkg/m{(start + i) // 40}.py", "python", 1, 9,
                         "f", "m", vecs[i]) for i, h in enumerate(batch_hashes)]
        if ids is None:
            vs.upsert(out)
        else:
            vs.upsert(out, absent=[r.chunk_id for r in out if r.chunk_id not in ids])
            hashes.update(batch_hashes)
        t2 = time.perf_counter()
        lookup += t1 - t0
        write += t2 - t1
        if start >= rows * 0.9:
            last_tenth.append(t2 - t0)
    figures = {"keys_read_s": round(keys_s, 3), "lookup_s": round(lookup, 2),
               "write_s": round(write, 2), "total_s": round(keys_s + lookup + write, 2),
               "ms_per_batch_last_tenth": round(1000 * statistics.median(last_tenth), 1)}
    return figures, vs


def table_digest(vs: VectorStore) -> str:
    cols = vs._table.search().select(["chunk_id", "content_hash", "vector"]).to_arrow()
    order = np.argsort(np.array(cols["chunk_id"].to_pylist(), dtype=object).astype(str))
    h = hashlib.blake2b(digest_size=16)
    vectors = cols["vector"].combine_chunks().flatten().to_numpy().reshape(-1, DIM)
    for i in order:
        h.update(cols["chunk_id"][int(i)].as_py().encode())
        h.update(cols["content_hash"][int(i)].as_py().encode())
        h.update(vectors[i].tobytes())
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=61_440, help="rows per table (the stdlib: ~60k)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {w: [] for w in WAYS}
    digests: dict[str, set[str]] = {w: set() for w in WAYS}
    for r in range(args.rounds):
        for way in WAYS if r % 2 == 0 else reversed(WAYS):
            figures, vs = fill(way, args.rows)
            runs[way].append(figures)
            digests[way].add(table_digest(vs))
            log(f"round {r + 1} {way}: {figures}")
    med = {w: {k: round(statistics.median(f[k] for f in runs[w]), 3) for k in runs[w][0]} for w in WAYS}
    print(json.dumps({
        "benchmark": "vector_writes", "rows": args.rows, "batch": BATCH, "rounds": args.rounds,
        "medians": med, "runs": runs,
        "total_ratio_keys_once_to_per_batch": round(
            med["keys_once"]["total_s"] / med["per_batch"]["total_s"], 3),
        "tables_equal": len(digests["per_batch"] | digests["keys_once"]) == 1,
    }, indent=2))


if __name__ == "__main__":
    main()
