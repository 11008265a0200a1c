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
import inspect
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
    kept = [h for h in hits if not is_test_path(h.path)]
    files = first_unique(h.path for h in kept)
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


def _spans(result) -> list[tuple[str, int, int]] | None:
    """(path, start, end) of what an assembled context holds, from whichever sequence of
    span-like records it exposes."""
    for attr in ("spans", "items", "blocks", "parts", "snippets", "pieces", "sections"):
        seq = getattr(result, attr, None)
        if seq is None or isinstance(seq, str):
            continue
        out = []
        for it in seq:
            path = getattr(it, "path", None)
            s = getattr(it, "start_line", getattr(it, "start", None))
            e = getattr(it, "end_line", getattr(it, "end", None))
            if path is None or s is None or e is None:
                return None
            out.append((path, int(s), int(e)))
        return out
    return None


def context_recall(assemble, conn, searcher, task: dict, mode: str, root: Path, index_dir: Path):
    """Share of gold units whose whole definition lies inside the assembled context, per
    budget; None when `retrieval.context` is missing or its shape is not understood."""
    if assemble is None or not task["gold_functions"]:
        return None
    gold_spans = {}
    for g in task["gold_functions"]:
        path, qual = g.split("::", 1)
        for u in file_units(conn, path):
            if u.name == g:
                gold_spans[g] = (path, u.start, u.end)
                break
    params = inspect.signature(assemble).parameters
    out = {}
    for budget in CONTEXT_BUDGETS:
        avail = {
            "conn": conn,
            "searcher": searcher,
            "query": task["problem_statement"],
            "budget": budget,
            "token_budget": budget,
            "max_tokens": budget,
            "tokens": budget,
            "mode": mode,
            "root": root,
            "index_dir": index_dir,
        }
        kwargs = {k: v for k, v in avail.items() if k in params}
        result = assemble(**kwargs)
        spans = _spans(result)
        if spans is None:
            return None
        covered = 0
        for g in task["gold_functions"]:
            if g not in gold_spans:
                continue
            path, s, e = gold_spans[g]
            lines = set()
            for p, a, b in spans:
                if p == path:
                    lines.update(range(a, b + 1))
            covered += all(ln in lines for ln in range(s, e + 1))
        out[f"ctx@{budget // 1000}k"] = covered / len(task["gold_functions"])
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
    assemble = _context_module()
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
                    task["problem_statement"], mode=mode, k=DEPTH, lang="python", weights=weights
                )
                latencies[mode].append(time.perf_counter() - q0)
                files, units, dropped = rank(conn, res.hits)
                scores = task_scores(files, units, task)
                scores["test_hits_dropped"] = dropped
                scores["top_files"] = files[:5]
                scores["top_units"] = units[:5]
                if mode == modes[-1] or mode == "hybrid":
                    ctx = context_recall(assemble, conn, searcher, task, mode, tree.tree, index_dir)
                    if ctx is not None:
                        scores.update(ctx)
                row[mode] = scores
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
        has_ctx = any(k in r for r in mrows for k in ctx_keys)
        metrics[mode] = by_source(mrows, file_keys + func_keys + (ctx_keys if has_ctx else []))
        if not has_ctx:
            for v in metrics[mode].values():
                v.update({k: None for k in ctx_keys})
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
