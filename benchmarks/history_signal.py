"""The git-history signal alone on the localization development tasks.

For each task the repository is moved to the task's ``base_commit`` and built (graph without
chunks, plus the history index — from scratch for a repository's first task, incrementally
after), then files are ranked by `retrieval.history.HistoryFiles` alone, test files dropped,
and scored like `benchmarks/localization.py` (file@1/5/10; func@5/10 from `HistorySymbols`).
Several parameter variants run on the same builds; BM25 over whole files and its reciprocal
rank fusion with history run beside them for reference.

Checked on every task: the history index holds exactly the commits reachable from
``base_commit`` (nothing from the future), and for commit-message tasks the task's own commit
(a child of ``base_commit``) is absent.

    .venv/bin/python benchmarks/history_signal.py --out /tmp/history.jsonl

Prints one JSON object to stdout; progress goes to stderr; ``--out`` gets one JSON line per
task as it goes (a crash keeps what was measured).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` and the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "benchmarks"

from benchmarks._common import git_revision, log  # noqa: E402
from benchmarks.loc_metrics import by_source, chunk_units, file_units, first_unique, task_scores  # noqa: E402
from benchmarks.loc_repos import DEFAULT_MIRRORS, materialize  # noqa: E402
from indexer.parse.testpaths import is_test_path  # noqa: E402

DEFAULT_CACHE = Path("~/.cache/repoctx-history").expanduser()
DEPTH = 50
KEYS = ("file@1", "file@5", "file@10", "func@5", "func@10")


def variants():
    from retrieval.history import HistoryParams

    base = HistoryParams()
    return {
        "default": base,
        "depth25": replace(base, depth=25),
        "depth100": replace(base, depth=100),
        "split1": replace(base, split=1.0),
        "split0": replace(base, split=0.0),
        "huge20": replace(base, huge=20),
        "huge100": replace(base, huge=100),
        "decay365": replace(base, decay_days=365.0),
        "decay1500": replace(base, decay_days=1500.0),
        "subject1": replace(base, weights=(1.0, 1.0, 0.0)),
        "paths0.5": replace(base, weights=(2.0, 1.0, 0.5)),
        "terms20": replace(base, max_terms=20),
        "terms40": replace(base, max_terms=40),
        "terms160": replace(base, max_terms=160),
        "maxdf0.1": replace(base, max_df=0.1),
        "window2000": replace(base, window=2000),
        "window5000": replace(base, window=5000),
    }


def rrf(*rankings: list[str], k: int = 60) -> list[str]:
    score: dict[str, float] = defaultdict(float)
    for ranking in rankings:
        for i, path in enumerate(ranking, 1):
            score[path] += 1.0 / (k + i)
    return [p for p, _ in sorted(score.items(), key=lambda kv: (-kv[1], kv[0]))]


def units_of(index, hits) -> list[str]:
    """Benchmark units ("path::Qual.name") of symbol hits, by the line each definition starts."""
    cache: dict[str, list] = {}
    out = []
    for h in hits:
        if is_test_path(h.path):
            continue
        if h.path not in cache:
            cache[h.path] = file_units(index, h.path)
        out.extend(chunk_units(cache[h.path], h.start_line, h.start_line))
    return first_unique(out)


def reachable_exactly(tree, index_dir: Path, commit: str) -> bool:
    """The history index holds exactly the commits reachable from ``commit``."""
    import sqlite3

    want = set(
        subprocess.run(
            ["git", "rev-list", commit], cwd=tree, capture_output=True, text=True, check=True
        ).stdout.split()
    )
    conn = sqlite3.connect(index_dir / "history.db")
    try:
        have = {r[0] for r in conn.execute("SELECT sha FROM commits")}
    finally:
        conn.close()
    return want == have


def task_commit_absent(index_dir: Path, task: dict) -> bool | None:
    if task["source"] != "git_history":
        return None
    import sqlite3

    sha12 = task["instance_id"].rsplit("@", 1)[-1]
    conn = sqlite3.connect(index_dir / "history.db")
    try:
        n = conn.execute("SELECT count(*) FROM commits WHERE sha LIKE ?", [sha12 + "%"]).fetchone()[
            0
        ]
    finally:
        conn.close()
    return n == 0


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 2)


def run(args) -> dict:
    from benchmarks.loc_bm25 import FileBM25
    from indexer import Index
    from indexer.build import build
    from indexer.config import load_config
    from indexer.history.store import HistoryStats, history_status
    from retrieval.history import HistoryFiles, HistorySymbols
    from retrieval.query import parse_query
    from retrieval.signals import Scope, SignalContext

    tasks = [json.loads(line) for line in Path(args.tasks).read_text().splitlines() if line.strip()]
    if args.repos:
        tasks = [t for t in tasks if t["repo"] in set(args.repos.split(","))]
    if args.limit:
        tasks = tasks[: args.limit]
    vs = variants()
    if args.variants:
        vs = {k: v for k, v in vs.items() if k in set(args.variants.split(",")) | {"default"}}
    out = open(args.out, "w") if args.out else None  # noqa: SIM115 - written task by task
    rows: list[dict] = []
    builds: dict[str, dict] = {}
    latency_files: list[float] = []
    latency_both: list[float] = []
    bm25 = FileBM25()
    by_repo: dict[str, list[dict]] = defaultdict(list)
    for t in tasks:
        by_repo[t["repo"]].append(t)
    for repo, rtasks in by_repo.items():
        tree = materialize(repo, rtasks[0]["base_commit"], cache=args.cache, mirrors=args.mirrors)
        rtasks.sort(key=lambda t: tree.commit_time(t["base_commit"]))
        index_dir = tree.cache / "index"
        if not args.keep:
            shutil.rmtree(index_dir, ignore_errors=True)
        cfg = load_config(tree.tree, env={}, index_dir=str(index_dir), jobs=args.jobs)
        rb = builds.setdefault(
            repo, {"tasks": 0, "history_s": [], "modes": defaultdict(int), "graph_s": []}
        )
        for n, task in enumerate(rtasks, 1):
            try:
                tree.checkout(task["base_commit"])
            except RuntimeError as exc:  # a snapshot missing a blob: skip, count
                log(f"{task['instance_id']}: checkout failed, skipped ({exc})")
                rows.append(
                    {
                        "instance_id": task["instance_id"],
                        "source": task["source"],
                        "repo": repo,
                        "skipped": "checkout",
                    }
                )
                continue
            stats = build(cfg, chunks=False)  # the graph, then the history (build_phase)
            hstat = history_status(index_dir)
            if hstat["state"] != "ok":
                raise SystemExit(f"{task['instance_id']}: no history: {hstat}")
            hs = HistoryStats(**hstat["last_update"])
            rb["graph_s"].append(stats.seconds)  # the graph phases (history runs after)
            rb["history_s"].append(hs.seconds)
            rb["modes"][hs.mode] += 1
            rb["tasks"] += 1
            if n == 1:
                rb["scratch"] = {
                    "seconds": round(hs.seconds, 2),
                    "commits": hs.commits,
                    "db_mb": round((index_dir / "history.db").stat().st_size / 1e6, 1),
                }
            exact = reachable_exactly(tree.tree, index_dir, task["base_commit"])
            absent = task_commit_absent(index_dir, task)
            index = Index.open(cfg)
            q = parse_query(task["problem_statement"])
            row = {
                "instance_id": task["instance_id"],
                "source": task["source"],
                "repo": repo,
                "graph_s": round(stats.seconds, 3),
                "history_mode": hs.mode,
                "history_s": round(hs.seconds, 3),
                "history_added": hs.added,
                "history_removed": hs.removed,
                "commits": hs.commits,
                "reachable_exactly": exact,
                "task_commit_absent": absent,
            }
            ranked: dict[str, list[str]] = {}
            for name, params in vs.items():
                ctx = SignalContext(index, scope=Scope(exclude_tests=True))
                t0 = time.perf_counter()
                fh = HistoryFiles(params).run(ctx, q, DEPTH)
                t1 = time.perf_counter()
                sh = HistorySymbols(params).run(ctx, q, DEPTH)
                t2 = time.perf_counter()
                if name == "default":
                    latency_files.append((t1 - t0) * 1000)
                    latency_both.append((t2 - t0) * 1000)
                files = [h.path for h in fh if not is_test_path(h.path)]
                ranked[name] = files
                row[name] = task_scores(files, units_of(index, sh), task)
                if name == "default":
                    row["top_files"] = files[:DEPTH]
                    row["top_units"] = units_of(index, sh)[:DEPTH]
            base = bm25.rank(tree, task["problem_statement"], k=DEPTH)
            row["bm25"] = task_scores(base, None, task)
            row["bm25+history"] = task_scores(rrf(base, ranked["default"]), None, task)
            index.close()
            rows.append(row)
            if out:
                out.write(json.dumps(row) + "\n")
                out.flush()
            log(
                f"{repo} {n}/{len(rtasks)} {task['instance_id']}: {hs.mode} +{hs.added}/-{hs.removed} "
                f"in {hs.seconds:.2f}s; default {row['default']}"
            )
    if out:
        out.close()
    done = [r for r in rows if "skipped" not in r]
    result: dict = {
        "revision": git_revision(),
        "tasks": len(rows),
        "skipped": len(rows) - len(done),
        "leaks": {
            "not_exactly_reachable": sum(1 for r in done if not r["reachable_exactly"]),
            "task_commit_present": sum(1 for r in done if r["task_commit_absent"] is False),
        },
        "latency_ms": {
            "history_files": {"p50": pct(latency_files, 0.5), "p95": pct(latency_files, 0.95)},
            "history_files+symbols": {
                "p50": pct(latency_both, 0.5),
                "p95": pct(latency_both, 0.95),
            },
        },
        "builds": {
            repo: {
                "tasks": b["tasks"],
                "scratch": b.get("scratch"),
                "incremental_s": {
                    "median": round(statistics.median(b["history_s"][1:]), 3)
                    if len(b["history_s"]) > 1
                    else None,
                    "max": round(max(b["history_s"][1:]), 3) if len(b["history_s"]) > 1 else None,
                },
                "modes": dict(b["modes"]),
                "graph_build_s_median": round(statistics.median(b["graph_s"]), 2),
            }
            for repo, b in builds.items()
        },
        "methods": {},
    }
    for name in [*vs, "bm25", "bm25+history"]:
        flat = [{"source": r["source"], **r[name]} for r in done]
        result["methods"][name] = by_source(flat, KEYS)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="/work/shared/bench/localization/tasks.jsonl")
    ap.add_argument("--repos", default="", help="Comma-separated owner/name list (default all).")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--variants", default="", help="Comma-separated variant names (default all).")
    ap.add_argument(
        "--cache",
        type=Path,
        default=DEFAULT_CACHE,
        help="Work trees and indexes (outside the project).",
    )
    ap.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument(
        "--keep",
        action="store_true",
        help="Reuse the indexes in --cache (default: history from scratch per repository).",
    )
    ap.add_argument("--out", default="", help="Per-task JSON lines, written as it goes.")
    args = ap.parse_args()
    print(json.dumps(run(args), indent=2))


if __name__ == "__main__":
    main()
