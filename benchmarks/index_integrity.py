"""What index integrity costs: opening the graph for a query (readlink of the generation link,
the schema check) and `PRAGMA quick_check` (every page read), on an existing index.

    python benchmarks/index_integrity.py --index-dir /tmp/stdlib/.repoctx --name HTTPConnection

Prints one JSON object: open+`symbol` query latency (median and p90 over --runs, after a
warm-up), the same without opening (the query alone, on a held connection), quick_check seconds
(median of --checks), the graph file and its size. Readers never run quick_check (full rebuilds
and `index verify` do); the open figure is what every read command pays.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from indexer import Index, load_config  # noqa: E402
from indexer.graph import store  # noqa: E402
from retrieval.symbols import find_symbols  # noqa: E402


def _ms(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"median_ms": round(statistics.median(xs) * 1000, 3),
            "p90_ms": round(xs[int(0.9 * (len(xs) - 1))] * 1000, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index-dir", type=Path, required=True)
    ap.add_argument("--name", default="main", help="symbol to look up")
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--checks", type=int, default=3)
    args = ap.parse_args()
    idx = args.index_dir
    config = load_config(idx.parent, index_dir=idx)

    def open_and_query() -> float:
        t = time.perf_counter()
        with Index.open(config) as index:
            find_symbols(index, args.name)
        return time.perf_counter() - t

    for _ in range(20):
        open_and_query()
    opened = [open_and_query() for _ in range(args.runs)]
    held = Index.open(config)
    query_only = []
    for _ in range(args.runs):
        t = time.perf_counter()
        find_symbols(held, args.name)
        query_only.append(time.perf_counter() - t)
    checks = []
    for _ in range(args.checks):
        t = time.perf_counter()
        store.quick_check(held.db, idx)
        checks.append(time.perf_counter() - t)
    held.close()
    usage = store.disk_usage(idx)
    print(json.dumps({
        "index_dir": str(idx),
        "graph_file": usage["file"],
        "graph_mb": round(usage["bytes"] / 1e6, 1),
        "open_and_symbol": _ms(opened),
        "symbol_on_held_connection": _ms(query_only),
        "quick_check_s": round(statistics.median(checks), 3),
        "runs": args.runs,
    }, indent=2))


if __name__ == "__main__":
    main()
