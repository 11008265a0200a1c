"""Localization benchmark: given a repository at a commit and an issue (or commit message), does
repoctx rank the files and functions that the fix changed, and does the context pack hold them?

Each repository is materialized once (outside the project) and moved from task commit to task
commit in commit-date order, with an incremental ``build`` (graph, lexical, history, and vectors
unless ``--no-vectors``) before every task — so the benchmark also exercises the incremental path.
For every task it runs every signal once (`retrieval.pipeline`), then scores:

- each signal alone (its hits projected to files and units, in its own order);
- the fusion with each model given (``--models``: ``rrf`` = equal-weight reciprocal rank fusion,
  ``shipped`` = `retrieval/fusion_weights.json`, or a path to a weights file);
- with ``--ablation``, the first model with each signal removed;
- context recall of `retrieval.context.assemble_context` at 4k/8k/16k tokens;
- BM25 over whole files (bm25s, every non-test .py file) on the same tree.

Rows are appended to ``--out`` (JSONL) as each task finishes, with the top-50 files and units of
every ranking, so a crash keeps what was measured and anything can be re-scored; ``--resume``
skips tasks already there. ``--dump`` writes each task's raw signal hits and candidate units for
`benchmarks/fit_fusion.py`. A task whose commit cannot be checked out is skipped and counted.
The summary (one JSON object) goes to stdout, progress to stderr.

    .venv/bin/python -m benchmarks.localization --tasks ../shared/bench/localization/tasks.jsonl \
        --out loc.jsonl --dump loc-dump.jsonl --ablation > loc-summary.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections import defaultdict
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` and the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "benchmarks"

from benchmarks._common import git_revision, log, median  # noqa: E402
from benchmarks.loc_bm25 import FileBM25  # noqa: E402
from benchmarks.loc_metrics import FILE_KS, FUNC_KS, by_source, task_scores  # noqa: E402
from benchmarks.loc_repos import (  # noqa: E402
    DEFAULT_CACHE,
    DEFAULT_MIRRORS,
    commit_time,
    materialize,
    mirror_dir,
)

TOP = 50
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


def unit_name(u) -> str:
    return f"{u.path}::{u.local}"


def lists(ranking) -> tuple[list[str], list[str]]:
    return (
        [f.path for f in ranking.files[:TOP]],
        [unit_name(r.unit) for r in ranking.units if r.unit.kind != "module"][:TOP],
    )


def context_recall(assemble, index, searcher, task: dict, cache, policy=None,
                   suffix: str = "") -> dict | None:
    """Share of gold units whose whole definition lies inside one full block of the context
    assembled for the task, per budget; None without gold units. For the default policy also
    ``gold``: each gold unit's rank in the ranking the pack was seeded from (1-based, None when
    unranked) and whether each budget's pack holds it (see `context_by_rank`)."""
    if assemble is None or not task["gold_functions"]:
        return None
    gold = []
    for g in task["gold_functions"]:
        path = g.split("::", 1)[0]
        span = next(((u.start, u.end) for u in cache.of(path) if unit_name(u) == g), None)
        gold.append((path, span))
    out: dict = {}
    held: list[list[bool]] = [[] for _ in gold]
    ranking = None  # the same ranking serves every budget
    for budget in CONTEXT_BUDGETS:
        pack = assemble(index, task["problem_statement"], budget, searcher=searcher,
                        policy=policy, ranking=ranking, history=True)
        ranking = pack.ranking
        covered = [span is not None and pack.covers(path, *span) for path, span in gold]
        for h, c in zip(held, covered, strict=True):
            h.append(c)
        out[f"ctx@{budget // 1000}k{suffix}"] = sum(covered) / len(gold)
        out[f"ctx@{budget // 1000}k{suffix}_ms"] = pack.timings.get("total")
    if not suffix and ranking is not None:
        rank = {}
        for i, r in enumerate(ranking.units, 1):
            rank.setdefault(unit_name(r.unit), i)
        out["gold"] = [{"unit": g, "rank": rank.get(g), "held": h}
                       for g, h in zip(task["gold_functions"], held, strict=True)]
    return out


#: Rank ranges of `context_by_rank`, by the rank of a gold unit in the seeding ranking.
RANK_BUCKETS = ((1, 10), (11, 30), (31, 50), (51, 100), (101, None))
_BUCKET_NAMES = [f"{lo}-{hi}" if hi else f"{lo}+" for lo, hi in RANK_BUCKETS]


def context_by_rank(rows: list[dict]) -> dict | None:
    """Per source, per budget: of the gold units ranked in each range of the ranking the pack
    was seeded from (and of those it does not rank), how many the pack holds — whether context
    recall is lost in packing or in ranking."""
    out: dict = {}
    for r in rows:
        for g in (r.get("context") or {}).get("gold", ()):
            rank = g["rank"]
            bucket = "unranked" if rank is None else next(
                name for (_, hi), name in zip(RANK_BUCKETS, _BUCKET_NAMES, strict=True)
                if hi is None or rank <= hi)
            for budget, held in zip(CONTEXT_BUDGETS, g["held"], strict=True):
                cell = out.setdefault(r["source"], {}).setdefault(f"{budget // 1000}k", {})
                got = cell.setdefault(bucket, {"gold": 0, "held": 0})
                got["gold"] += 1
                got["held"] += int(held)
    order = [*_BUCKET_NAMES, "unranked"]
    return {src: {b: {k: cells[k] for k in order if k in cells} for b, cells in per.items()}
            for src, per in sorted(out.items())} or None


def parse_policy(spec: str):
    """``NAME:field=value,...`` (fields of `retrieval.context.PackPolicy`) -> (NAME, policy)."""
    from retrieval.context import PackPolicy

    name, _, fields = spec.partition(":")
    if not name.isidentifier():
        raise SystemExit(f"--context-policy wants NAME:field=value,..., got {spec!r}")
    base = PackPolicy()
    kw: dict = {}
    for item in filter(None, fields.split(",")):
        key, _, raw = item.partition("=")
        if not hasattr(base, key):
            raise SystemExit(f"--context-policy {spec!r}: PackPolicy has no field {key!r}")
        kind = type(getattr(base, key))
        if kind not in (bool, int, float):
            raise SystemExit(f"--context-policy {spec!r}: {key} is not a number or a flag")
        kw[key] = raw.lower() in ("1", "true", "yes") if kind is bool else kind(raw)
    return name, PackPolicy(**kw)


def context_policies(args) -> dict:
    """Extra pack policies measured beside the default one, by name."""
    specs = list(getattr(args, "context_policy", None) or [])
    if getattr(args, "context_nograph", False):
        specs.insert(0, "nograph:use_graph=false")
    return dict(parse_policy(s) for s in specs)


def dump_row(task: dict, runs, cache) -> dict:
    """Raw material for refitting the fusion offline: every hit, and the units of every file hit."""
    paths = sorted({h.path for hs in runs.hits.values() for h in hs})
    units = {}
    for p in paths:
        units[p] = [
            [u.qualname, u.local, u.kind, u.start, u.end,
             None if u.own is None else _ranges(sorted(u.own))]
            for u in cache.of(p)
        ]
    return {
        "instance_id": task["instance_id"],
        "source": task["source"],
        "repo": task["repo"],
        "gold_files": task["gold_files"],
        "gold_functions": task["gold_functions"],
        "hits": {
            name: [[h.level, h.path, h.score, h.symbol, h.chunk_id, h.start_line, h.end_line]
                   for h in hs]
            for name, hs in runs.hits.items()
        },
        "units": units,
    }


def _ranges(lines: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for ln in lines:
        if out and out[-1][1] == ln - 1:
            out[-1][1] = ln
        else:
            out.append([ln, ln])
    return out


def load_models(spec: str):
    from retrieval.fusion import FusionModel

    models = {}
    for name in [s for s in spec.split(",") if s]:
        if name == "rrf":
            models[name] = FusionModel.rrf()
        elif name == "shipped":
            models[name] = FusionModel.load()
        else:
            models[Path(name).stem] = FusionModel.load(name)
    return models


def run(args) -> dict:
    from cli.settings import load_config
    from indexer import Index
    from indexer.build import build
    from retrieval.context import assemble_context
    from retrieval.fusion import FusionModel, fuse
    from retrieval.pipeline import default_signals, run_signals
    from retrieval.search import Searcher
    from retrieval.signals import Scope, SignalContext
    from retrieval.units import UnitCache

    embed = not args.no_vectors
    model_name = args.embed_model or "all-MiniLM-L6-v2"
    embedder = None
    if embed:
        from indexer.vectors.embed import create_embedder

        embedder = create_embedder(model_name)
        if args.embed_cache:
            from benchmarks.embed_cache import CachedEmbedder

            safe = model_name.replace("/", "_").replace(":", "_")
            embedder = CachedEmbedder(embedder, Path(args.cache) / f"embeddings-{safe}.sqlite")
    label = f"embed-{model_name.replace('/', '_').replace(':', '_')}" if embed else "lexical"
    models = load_models(args.models)
    first_model = next(iter(models.values()), FusionModel.load())
    tasks = load_tasks(Path(args.tasks), set(args.repos.split(",")) if args.repos else None, args.limit)
    done: set[str] = set()
    out_path = Path(args.out) if args.out else None
    if out_path and args.resume and out_path.exists():
        for line in out_path.read_text().splitlines():
            if line.strip():
                done.add(json.loads(line)["instance_id"])
    elif out_path:
        out_path.write_text("")
    dump_fh = open(args.dump, "a" if args.resume else "w") if args.dump else None  # noqa: SIM115
    by_repo: dict[str, list[dict]] = defaultdict(list)
    for t in tasks:
        if t["instance_id"] not in done:
            by_repo[t["repo"]].append(t)
    signals = default_signals(vectors=embed, history=not args.no_history)
    bm25 = FileBM25()
    skipped: list[dict] = []
    builds: dict[str, list[float]] = defaultdict(list)
    latencies: dict[str, list[float]] = defaultdict(list)
    t_start = time.perf_counter()
    n_done = 0
    fresh: list[dict] = []
    for repo, rtasks in by_repo.items():
        try:
            git_dir = mirror_dir(repo, Path(args.mirrors))
        except SystemExit as exc:
            for t in rtasks:
                skipped.append({"instance_id": t["instance_id"], "reason": f"no mirror: {exc}"})
            log(f"{repo}: {exc}; {len(rtasks)} tasks skipped")
            continue
        times = {t["instance_id"]: commit_time(git_dir, t["base_commit"]) for t in rtasks}
        for t in rtasks:
            if times[t["instance_id"]] is None:
                skipped.append({"instance_id": t["instance_id"],
                                "reason": f"checkout: commit {t['base_commit']} is not in the mirror"})
                log(f"{repo} {t['instance_id']}: commit not in the mirror, skipped")
        rtasks = sorted((t for t in rtasks if times[t["instance_id"]] is not None),
                        key=lambda t: times[t["instance_id"]])
        if not rtasks:
            continue
        try:
            tree = materialize(repo, rtasks[0]["base_commit"], Path(args.cache), Path(args.mirrors))
        except (RuntimeError, OSError) as exc:
            for t in rtasks:
                skipped.append({"instance_id": t["instance_id"], "reason": f"materialize: {exc}"})
            log(f"{repo}: cannot materialize ({exc}); {len(rtasks)} tasks skipped")
            continue
        index_dir = tree.index_dir(label)
        config = load_config(tree.tree, index_dir=index_dir, jobs=args.jobs, embed_model=model_name)
        for i, task in enumerate(rtasks):
            try:
                tree.checkout(task["base_commit"])
            except RuntimeError as exc:
                skipped.append({"instance_id": task["instance_id"], "reason": f"checkout: {exc}"[:500]})
                log(f"{repo} {task['instance_id']}: checkout failed, skipped")
                continue
            try:
                row = _one_task(task, tree, config, embed, embedder, signals, models,
                                first_model, args, bm25, builds, latencies, dump_fh,
                                build, Index, Searcher, SignalContext, Scope, run_signals, fuse,
                                FusionModel, UnitCache, assemble_context)
            except Exception as exc:  # noqa: BLE001 - one bad task must not end the run
                skipped.append({"instance_id": task["instance_id"], "reason": f"error: {exc!r}"[:500]})
                log(f"{repo} {task['instance_id']}: failed: {exc!r}\n{traceback.format_exc()}")
                continue
            n_done += 1
            fresh.append(row)
            if out_path:
                with out_path.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
            fused = next(iter(models))
            r = row["fused"][fused]
            log(
                f"{repo} {i + 1}/{len(rtasks)} {task['instance_id']} build {row['build_seconds']:.1f}s"
                f" | {fused} f@1 {int(r['file@1'])} f@5 {int(r['file@5'])} "
                f"fn@10 {int(bool(r.get('func@10')))} | bm25 f@1 {int(row['bm25_files']['file@1'])} "
                f"f@5 {int(row['bm25_files']['file@5'])}"
            )
    if dump_fh:
        dump_fh.close()
    rows = fresh  # with --out, the file's rows: those of earlier runs (--resume) too
    if out_path:
        rows = [json.loads(line) for line in out_path.read_text().splitlines() if line.strip()]
    summary = summarize(rows, args, embed, model_name, models, skipped, builds, latencies,
                        time.perf_counter() - t_start, n_done)
    if hasattr(embedder, "hits"):  # build times are those of a cached run: say so
        summary["embed_cache"] = {"texts_reused": embedder.hits, "texts_embedded": embedder.misses}
    return summary


def _one_task(task, tree, config, embed, embedder, signals, models, first_model, args,
              bm25, builds, latencies, dump_fh, build, Index, Searcher, SignalContext, Scope,
              run_signals, fuse, FusionModel, UnitCache, assemble_context) -> dict:
    t0 = time.perf_counter()
    stats = build(config, chunks=True, embed=embed, embedder=embedder)
    secs = time.perf_counter() - t0
    builds[task["repo"]].append(secs)
    index = Index.open(config)
    try:
        searcher = Searcher(index, embedder=embedder) if embed else None
        scope = Scope(lang="python", exclude_tests=True)
        ctx = SignalContext(index, scope=scope, searcher=searcher)
        ctx.cache["model"] = first_model
        q0 = time.perf_counter()
        runs = run_signals(ctx, task["problem_statement"], signals, TOP)
        for name, ms in runs.timings.items():
            latencies[name].append(ms / 1000)
        row: dict = {
            "instance_id": task["instance_id"],
            "source": task["source"],
            "repo": task["repo"],
            "build_seconds": round(secs, 3),
            "files_parsed": stats.files_parsed,
            "signals": {},
            "fused": {},
            "ablation": {},
        }
        cache = UnitCache(index)
        for name, hits in runs.hits.items():
            ranking = fuse({name: hits}, index, FusionModel.rrf())
            files, units = lists(ranking)
            row["signals"][name] = {**task_scores(files, units, task), "hits": len(hits),
                                    "files": files, "units": units}
        for mname, model in models.items():
            f0 = time.perf_counter()
            ranking = fuse(runs.hits, index, model)
            latencies[f"fuse:{mname}"].append(time.perf_counter() - f0)
            files, units = lists(ranking)
            row["fused"][mname] = {**task_scores(files, units, task), "files": files, "units": units}
        latencies["signals+fusion"].append(time.perf_counter() - q0)
        if args.ablation:
            for name in runs.hits:
                rest = {k: v for k, v in runs.hits.items() if k != name}
                files, units = lists(fuse(rest, index, first_model))
                row["ablation"][name] = task_scores(files, units, task)
        if args.context:
            row["context"] = context_recall(assemble_context, index, searcher, task, cache)
            for pname, policy in context_policies(args).items() if row["context"] else ():
                row["context"].update(context_recall(
                    assemble_context, index, searcher, task, cache, policy, f"_{pname}"))
        if dump_fh is not None:
            dump_fh.write(json.dumps(dump_row(task, runs, cache)) + "\n")
            dump_fh.flush()
    finally:
        index.close()
    b0 = time.perf_counter()
    bfiles = bm25.rank(tree, task["problem_statement"], k=TOP)
    latencies["bm25_files"].append(time.perf_counter() - b0)
    row["bm25_files"] = {**task_scores(bfiles, None, task), "files": bfiles}
    return row


def _metric_rows(rows, pick):
    out = []
    for r in rows:
        got = pick(r)
        if got is not None:
            out.append({"source": r["source"], "repo": r["repo"], **got})
    return out


def _table(mrows, keys) -> dict:
    table = by_source(mrows, keys)
    repos = sorted({r["repo"] for r in mrows})
    table["by_repo"] = {
        repo: by_source([{**r, "source": "all"} for r in mrows if r["repo"] == repo], keys)["all"]
        for repo in repos
    }
    return table


def summarize(rows, args, embed, model_name, models, skipped, builds, latencies, seconds, n_done) -> dict:
    file_keys = [f"file@{k}" for k in FILE_KS]
    func_keys = [f"func@{k}" for k in FUNC_KS]
    ctx_keys = [f"ctx@{b // 1000}k" for b in CONTEXT_BUDGETS]
    metrics: dict = {"bm25_files": _table(_metric_rows(rows, lambda r: r["bm25_files"]), file_keys)}
    for mname in models:
        metrics[f"fused:{mname}"] = _table(
            _metric_rows(rows, lambda r, m=mname: r["fused"].get(m)), file_keys + func_keys
        )
    names = sorted({n for r in rows for n in r["signals"]})
    metrics["signals"] = {
        n: by_source(_metric_rows(rows, lambda r, n=n: r["signals"].get(n)), file_keys + func_keys)
        for n in names
    }
    if args.ablation:
        metrics["ablation"] = {
            n: by_source(_metric_rows(rows, lambda r, n=n: r["ablation"].get(n)), file_keys + func_keys)
            for n in names
        }
    crows = _metric_rows(rows, lambda r: r.get("context"))
    metrics["context"] = by_source(crows, ctx_keys) if crows else None
    metrics["context_by_rank"] = context_by_rank(rows)
    for pname in context_policies(args):
        if any(f"ctx@8k_{pname}" in r for r in crows):
            metrics[f"context_{pname}"] = by_source(crows, [f"{k}_{pname}" for k in ctx_keys])
    return {
        "benchmark": "localization",
        "revision": git_revision(),
        "tasks_file": str(args.tasks),
        "tasks": len(rows),
        "tasks_run_now": n_done,
        "skipped": skipped,
        "vectors": embed,
        "embed_model": model_name if embed else None,
        "models": list(models),
        "depth": TOP,
        "metrics": metrics,
        "median_latency_seconds": {m: median(v) for m, v in latencies.items()},
        "build_seconds": {
            repo: {"first": round(v[0], 2), "incremental_median": median(v[1:])}
            for repo, v in builds.items()
        },
        "seconds": round(seconds, 1),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", required=True, help="tasks.jsonl")
    p.add_argument("--repos", default="", help=f"comma-separated owner/name filter (e.g. {','.join(SMALL_REPOS)})")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--no-vectors", action="store_true", help="graph, lexical and history only")
    p.add_argument("--no-history", action="store_true", help="leave the git-history signal out")
    p.add_argument("--embed-model", default=None, help="embedding model (default all-MiniLM-L6-v2)")
    p.add_argument("--no-embed-cache", dest="embed_cache", action="store_false",
                   help="embed every chunk the index lacks (default: reuse vectors of text any "
                        "earlier run embedded, from a cache under --cache)")
    p.add_argument("--models", default="shipped,rrf",
                   help="fusion models: shipped, rrf, or weights files (comma-separated)")
    p.add_argument("--ablation", action="store_true", help="fuse with each signal left out")
    p.add_argument("--jobs", type=int, default=1, help="parser processes")
    p.add_argument("--cache", default=str(DEFAULT_CACHE), help="work trees and indexes")
    p.add_argument("--mirrors", default=str(DEFAULT_MIRRORS), help="fetched bare mirrors")
    p.add_argument("--no-context", dest="context", action="store_false",
                   help="skip context recall (assemble_context at 4k/8k/16k tokens)")
    p.add_argument("--context-policy", action="append", default=[], metavar="NAME:FIELD=VALUE,...",
                   help="also measure context recall with this pack policy (fields of "
                        "retrieval.context.PackPolicy, e.g. tight:expand_share=0.25); repeatable")
    p.add_argument("--context-nograph", action="store_true",
                   help="also measure context recall without graph expansion (seeds in fused order)")
    p.add_argument("--out", default=None, help="per-task rows (JSONL, appended as tasks finish)")
    p.add_argument("--resume", action="store_true", help="skip tasks already in --out")
    p.add_argument("--dump", default=None, help="raw hits per task for benchmarks/fit_fusion.py")
    args = p.parse_args(argv)
    print(json.dumps(run(args), indent=1))


if __name__ == "__main__":
    main()
