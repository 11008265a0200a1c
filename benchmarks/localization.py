"""Localization benchmark: given a repository at a commit and an issue text, does search rank
the files and functions that the fix changed?

Each repository is materialized once (outside the project) and moved from task commit to task
commit in commit-date order, with an incremental ``build`` before every task — so the
benchmark also exercises the incremental path. For every task and mode the ranked files are
the files of the ranked chunks (first occurrence, test files dropped) and the ranked units are
the definitions those chunks overlap. A BM25 baseline over whole files runs on the same trees.

    .venv/bin/python -m benchmarks.localization --tasks /work/shared/bench/localization/tasks.jsonl \
        --modes lexical,hybrid --out results.json

Without embeddings (no ``semantic`` mode and no ``--embed-model``) ``hybrid`` fuses lexical
and exact-symbol hits only; the output says so (``vectors: false``).
Prints one JSON object to stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` and the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "benchmarks"

from benchmarks._common import git_revision, log, median  # noqa: E402
from benchmarks.loc_bm25 import FileBM25  # noqa: E402
from benchmarks.loc_metrics import (  # noqa: E402
    FILE_KS,
    FUNC_KS,
    by_source,
    chunk_units,
    file_units,
    first_unique,
    task_scores,
)
from benchmarks.loc_repos import DEFAULT_CACHE, DEFAULT_MIRRORS, is_test_path, materialize  # noqa: E402

#: Chunks retrieved per query: deeper than 10 so that files and units can be ranked to 10.
DEPTH = 50
CONTEXT_BUDGETS = (4000, 8000, 16000)
SMALL_REPOS = (
    "psf/requests",
    "pallets/flask",
    "pallets/click",
    "simonw/sqlite-utils",
    "mwaskom/seaborn",
)


def load_tasks(path: Path, repos: set[str] | None, limit: int | None) -> list[dict]:
    tasks = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if repos:
        tasks = [t for t in tasks if t["repo"] in repos]
    return tasks[:limit] if limit else tasks


def rank(conn, hits) -> tuple[list[str], list[str], int]:
    """(ranked files, ranked units, hits dropped as tests) from search hits."""
    from retrieval.search import rank_files

    kept = [h for h in hits if not is_test_path(h.path)]
    files = [path for path, _ in rank_files(kept)]
    cache: dict[str, list] = {}
    units = []
    for h in kept:
        if h.path not in cache:
            cache[h.path] = file_units(conn, h.path)
        units.extend(chunk_units(cache[h.path], h.start_line, h.end_line))
    return files, first_unique(units), len(hits) - len(kept)


def missing_gold_units(conn, task: dict) -> list[str]:
    """Gold units the index does not define under that name (checks the unit mapping)."""
    known = set()
    for path in {g.split("::", 1)[0] for g in task["gold_functions"]}:
        known.update(u.name for u in file_units(conn, path))
    return [g for g in task["gold_functions"] if g not in known]


# --- context recall hook ---------------------------------------------------------------


def _context_module():
    if importlib.util.find_spec("retrieval.context") is None:
        return None
    import retrieval.context as ctx

    return getattr(ctx, "assemble_context", None)


def context_recall(assemble, conn, searcher, task: dict, root: Path, index_dir: Path):
    """Share of gold units whose whole definition lies inside one full block of the context
    assembled for the task, per budget; None without gold units or `retrieval.context`."""
    if assemble is None or not task["gold_functions"]:
        return None
    gold = []
    for g in task["gold_functions"]:
        path = g.split("::", 1)[0]
        span = next(((u.start, u.end) for u in file_units(conn, path) if u.name == g), None)
        gold.append((path, span))
    out = {}
    for budget in CONTEXT_BUDGETS:
        pack = assemble(
            conn, root, task["problem_statement"], budget, searcher=searcher, index_dir=index_dir
        )
        hit = sum(span is not None and pack.covers(path, *span) for path, span in gold)
        out[f"ctx@{budget // 1000}k"] = hit / len(gold)
        out[f"ctx@{budget // 1000}k_ms"] = pack.timings.get("total")
    return out


# --- main loop --------------------------------------------------------------------------


def run(args) -> dict:
    from indexer import store
    from indexer.build import build
    from indexer.config import load_config
    from retrieval.search import Searcher

    modes = [m for m in args.modes.split(",") if m]
    embed = "semantic" in modes or bool(args.embed_model)
    model = args.embed_model or "all-MiniLM-L6-v2"
    embedder = None
    if embed:
        if importlib.util.find_spec("indexer.vectors") is None:
            raise SystemExit("indexer/vectors.py is missing: semantic search cannot run yet.")
        from indexer.embed import create_embedder

        embedder = create_embedder(model)
    label = f"embed-{model.replace('/', '_').replace(':', '_')}" if embed else "lexical"
    weights = None
    if args.weights:
        weights = {k: float(v) for k, v in (kv.split("=") for kv in args.weights.split(","))}
    tasks = load_tasks(
        Path(args.tasks), set(args.repos.split(",")) if args.repos else None, args.limit
    )
    by_repo: dict[str, list[dict]] = defaultdict(list)
    for t in tasks:
        by_repo[t["repo"]].append(t)
    assemble = _context_module() if args.context else None
    bm25 = FileBM25()
    rows: list[dict] = []
    builds: dict[str, dict] = {}
    errors: dict[str, dict] = {}
    latencies: dict[str, list[float]] = defaultdict(list)
    t_start = time.perf_counter()
    for repo, rtasks in by_repo.items():
        tree = materialize(repo, rtasks[0]["base_commit"], Path(args.cache), Path(args.mirrors))
        rtasks.sort(key=lambda t: tree.commit_time(t["base_commit"]))
        index_dir = tree.index_dir(label)
        config = load_config(tree.tree, index_dir=index_dir, jobs=args.jobs, embed_model=model)
        per_build = []
        for i, task in enumerate(rtasks):
            tree.checkout(task["base_commit"])
            t0 = time.perf_counter()
            stats = build(config, chunks=True, embed=embed, embedder=embedder)
            secs = time.perf_counter() - t0
            per_build.append(
                {
                    "instance_id": task["instance_id"],
                    "seconds": round(secs, 3),
                    "files_parsed": stats.files_parsed,
                    "files_deleted": stats.files_deleted,
                    "embedded": (stats.embedding or {}).get("embedded") if embed else None,
                }
            )
            if stats.failed:
                errors.setdefault(repo, {}).update(stats.failed)
            db = store.open_for_read(index_dir)
            conn = db.conn
            searcher = Searcher(conn, index_dir, tree.tree, embedder=embedder)
            row = {
                "instance_id": task["instance_id"],
                "source": task["source"],
                "repo": repo,
                "build_seconds": round(secs, 3),
                "files_parsed": stats.files_parsed,
                "gold_units_missing": missing_gold_units(conn, task),
            }
            for mode in modes:
                q0 = time.perf_counter()
                res = searcher.search(
                    task["problem_statement"], mode=mode, k=DEPTH, lang="python", weights=weights,
                    exclude_tests=True,
                )
                latencies[mode].append(time.perf_counter() - q0)
                files, units, dropped = rank(conn, res.hits)
                scores = task_scores(files, units, task)
                scores["test_hits_dropped"] = dropped
                scores["top_files"] = files[:5]
                scores["top_units"] = units[:5]
                row[mode] = scores
            if assemble is not None:
                row["context"] = context_recall(
                    assemble, conn, searcher, task, tree.tree, index_dir
                )
            conn.close()
            b0 = time.perf_counter()
            bfiles = bm25.rank(tree, task["problem_statement"], k=10)
            latencies["bm25_files"].append(time.perf_counter() - b0)
            row["bm25_files"] = {**task_scores(bfiles, None, task), "top_files": bfiles[:5]}
            rows.append(row)
            short = " ".join(f"{m}:{int(row[m]['file@1'])}{int(row[m]['file@5'])}" for m in modes)
            log(
                f"{repo} {i + 1}/{len(rtasks)} {task['instance_id']} build {secs:.2f}s "
                f"parsed {stats.files_parsed} | {short} bm25:{int(row['bm25_files']['file@1'])}"
                f"{int(row['bm25_files']['file@5'])}"
            )
        first, rest = per_build[0], per_build[1:]
        builds[repo] = {
            "tasks": len(rtasks),
            "initial": first,
            "incremental_median_seconds": median([b["seconds"] for b in rest]),
            "incremental_max_seconds": max((b["seconds"] for b in rest), default=None),
            "incremental_median_files_parsed": median([b["files_parsed"] for b in rest]),
            "incremental_max_files_parsed": max((b["files_parsed"] for b in rest), default=None),
            "per_task": per_build,
        }
    file_keys = [f"file@{k}" for k in FILE_KS]
    func_keys = [f"func@{k}" for k in FUNC_KS]
    ctx_keys = [f"ctx@{b // 1000}k" for b in CONTEXT_BUDGETS]
    metrics = {}
    for mode in modes:
        mrows = [{"source": r["source"], **r[mode]} for r in rows]
        metrics[mode] = by_source(mrows, file_keys + func_keys)
    # Context recall is per task, not per mode: the assembler seeds itself (lexical, exact
    # names, and vectors when the index has them); units are weighted 1/len(gold) per task.
    crows = [{"source": r["source"], **r["context"]} for r in rows if r.get("context")]
    metrics["context"] = by_source(crows, ctx_keys) if crows else None
    for key in ctx_keys:
        latencies[key] = [r[f"{key}_ms"] / 1000 for r in crows if r.get(f"{key}_ms") is not None]
    metrics["bm25_files"] = by_source(
        [{"source": r["source"], **r["bm25_files"]} for r in rows], file_keys
    )
    return {
        "benchmark": "localization",
        "revision": git_revision(),
        "tasks_file": str(args.tasks),
        "tasks": len(rows),
        "modes": modes,
        "vectors": embed,
        "embed_model": model if embed else None,
        "weights": weights,
        "depth": DEPTH,
        "lang": "python",
        "notes": (
            "hybrid = lexical + symbol (no vectors)" if not embed and "hybrid" in modes else ""
        ),
        "context_recall": "retrieval.context.assemble_context" if assemble else None,
        "metrics": metrics,
        "median_latency_seconds": {m: median(v) for m, v in latencies.items()},
        "builds": builds,
        "indexer_errors": errors,
        "gold_units_missing": [g for r in rows for g in r["gold_units_missing"]],
        "seconds": round(time.perf_counter() - t_start, 1),
        "per_task": rows,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", required=True, help="tasks.jsonl")
    p.add_argument(
        "--repos",
        default="",
        help=f"comma-separated owner/name filter (e.g. {','.join(SMALL_REPOS)})",
    )
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--modes", default="lexical,hybrid")
    p.add_argument(
        "--embed-model", default=None, help="embed with this model (implied by semantic)"
    )
    p.add_argument(
        "--weights", default="", help="RRF weights, e.g. lexical=1,symbol=1.5,semantic=1"
    )
    p.add_argument("--jobs", type=int, default=1, help="parser processes")
    p.add_argument("--cache", default=str(DEFAULT_CACHE), help="work trees and indexes")
    p.add_argument("--mirrors", default=str(DEFAULT_MIRRORS), help="fetched bare mirrors")
    p.add_argument(
        "--no-context",
        dest="context",
        action="store_false",
        help="skip context recall (retrieval.context.assemble_context at 4k/8k/16k tokens)",
    )
    p.add_argument("--out", default=None, help="also write the full result (with per-task rows)")
    args = p.parse_args(argv)
    result = run(args)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    summary = {k: v for k, v in result.items() if k != "per_task"}
    summary["builds"] = {
        r: {k: v for k, v in b.items() if k != "per_task"} for r, b in result["builds"].items()
    }
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
