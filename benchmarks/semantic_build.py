"""Semantic index figures (JSON on stdout): chunks, embedding throughput and the projected time
to full coverage, edit-to-searchable latency for a one-function change, and query latency
p50/p95 per mode on the standard library and on standard library + site-packages.

    .venv/bin/python benchmarks/semantic_build.py [--sample 2000] [--full-coverage] [--large]
        [--issues TASKS.jsonl] [--query-index ROOT=INDEX_DIR ...]

Query latency is measured for one-line queries and, with --issues (localization tasks: their
problem statements or commit messages), for issue-length texts, with each signal's median time.
--query-index measures the same on an index that already exists, e.g. a repository with git
history (the standard library has none, so its figures carry no history signal).

Embedding the whole standard library takes a long time on a 2-core CPU: by default the
throughput is measured on the first --sample chunks and the full time is projected from it;
--full-coverage embeds everything (resumable: rerun to continue).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cli.settings import load_config  # noqa: E402
from indexer import Index  # noqa: E402
from indexer.build import build  # noqa: E402
from indexer.graph import store
from indexer.phases.semantic import embed_pending  # noqa: E402
from indexer.vectors.embed import create_embedder  # noqa: E402
from retrieval.context import assemble_context  # noqa: E402
from retrieval.search import Searcher, VectorsMissingError  # noqa: E402

STDLIB = Path("/root/.pyenv/versions/3.11.7/lib/python3.11")
QUERIES = [
    "where do we retry failed uploads",
    "parse a json document into python objects",
    "compress data with gzip",
    "read configuration from an ini file",
    "send an email over smtp with authentication",
    "HTTPConnection.request",
    "thread pool executor submit",
    "escape html entities",
    "walk a directory tree recursively",
    "JSONDecoder.raw_decode",
    "handle keyboard interrupt signal",
    "calculate sha256 digest of a file",
]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def issue_queries(path: str | None, n: int = 40) -> list[str]:
    """Issue-length query texts: the first ``n`` task texts of a localization tasks file."""
    if not path or not Path(path).is_file():
        return []
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            task = json.loads(line)
            text = task.get("problem_statement") or task.get("message") or ""
            if text.strip():
                out.append(text)
            if len(out) >= n:
                break
    return out


def _latency(s: Searcher, queries: list[str], mode: str, repeat: int) -> dict:
    times, per_signal = [], {}
    for _ in range(repeat):
        for q in queries:
            t = time.perf_counter()
            if mode == "context_8k":
                assemble_context(s.index, q, 8000, searcher=s)
            else:
                s.search(q, mode=mode, k=10)
            times.append((time.perf_counter() - t) * 1000)
            for name, ms in (getattr(s, "last_timings", None) or {}).items():
                per_signal.setdefault(name, []).append(ms)
    out = {
        "queries": len(queries),
        "p50_ms": round(statistics.median(times), 2),
        "p95_ms": round(pct(times, 95), 2),
    }
    if mode == "hybrid" and per_signal:
        out["signal_p50_ms"] = {k: round(statistics.median(v), 2) for k, v in per_signal.items()}
    return out


def query_latency(
    index_dir: Path,
    root: Path,
    embedder,
    modes=("lexical", "semantic", "hybrid", "context_8k"),
    repeat=3,
    issues: list[str] = (),
) -> dict:
    index = Index.open(root, index_dir=index_dir)
    s = Searcher(index, embedder=embedder)
    s.search("warm up", mode="lexical")
    assemble_context(index, "warm up", 8000, searcher=s)  # loads the tokenizer
    out = {}
    for mode in modes:
        try:
            out[mode] = _latency(s, QUERIES, mode, repeat)
        except VectorsMissingError as e:  # an index built without vectors
            out[mode] = {"error": str(e).splitlines()[0]}
            continue
        if issues and mode in ("lexical", "hybrid", "context_8k"):
            out[f"{mode}_issue_length"] = _latency(s, list(issues), mode, 1)
    index.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--sample", type=int, default=2000, help="chunks embedded to measure throughput"
    )
    ap.add_argument("--full-coverage", action="store_true")
    ap.add_argument("--large", action="store_true", help="also the large corpus (lexical only)")
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--work", default=None, help="index directory to (re)use")
    ap.add_argument(
        "--issues",
        default=str(Path(__file__).resolve().parents[2] / "shared/bench/localization/tasks.jsonl"),
        help="localization tasks whose texts serve as issue-length queries",
    )
    ap.add_argument(
        "--query-index",
        action="append",
        default=[],
        metavar="ROOT=INDEX_DIR",
        help="also measure query latency on this existing index (repeatable)",
    )
    ap.add_argument("--skip-build", action="store_true", help="only the --query-index figures")
    args = ap.parse_args()
    issues = issue_queries(args.issues)
    work = Path(args.work or tempfile.mkdtemp(prefix="repoctx-sem-"))
    result: dict = {"model": args.model, "issue_length_queries": len(issues)}
    if args.query_index:
        embedder = create_embedder(args.model)
        embedder.embed(["warm up"])
        result["indexes"] = {}
        for spec in args.query_index:
            root, _, index_dir = spec.partition("=")
            if not index_dir:
                ap.error(f"--query-index wants ROOT=INDEX_DIR, got {spec!r}")
            log(f"query latency on {index_dir}")
            result["indexes"][root] = query_latency(
                Path(index_dir), Path(root), embedder, issues=issues
            )
        if args.skip_build:
            print(json.dumps(result, indent=2))
            return

    cfg = load_config(STDLIB, env={}, index_dir=work / "stdlib", exclude=("site-packages/",))
    t = time.perf_counter()
    stats = build(cfg)
    conn = store.open_for_read(cfg.index_path).conn
    chunks, unique = conn.execute(
        "SELECT count(*), count(DISTINCT content_hash) FROM chunks"
    ).fetchone()
    tokens = conn.execute("SELECT avg(tokens), max(tokens) FROM chunks").fetchone()
    conn.close()
    result["stdlib"] = {
        "files": stats.files_total,
        "chunks": chunks,
        "unique_contents": unique,
        "avg_tokens": round(tokens[0], 1),
        "graph_and_lexical_s": round(time.perf_counter() - t, 2),
    }
    log(f"stdlib: {chunks} chunks ({unique} unique contents)")

    t = time.perf_counter()
    embedder = create_embedder(args.model)
    embedder.embed(["warm up"])
    load_s = time.perf_counter() - t
    db = store.open_for_write(cfg.index_path)
    limit = None if args.full_coverage else args.sample
    t = time.perf_counter()
    es = embed_pending(cfg, db, embedder=embedder, limit=limit)
    secs = time.perf_counter() - t
    rate = es.embedded / secs if secs else 0.0
    remaining = db.execute("SELECT count(*) FROM chunks WHERE embedded = 0").fetchone()[0]
    db.conn.close()
    result["stdlib"].update(
        {
            "embedder": getattr(embedder, "runtime", type(embedder).__name__),
            "model_load_s": round(load_s, 2),
            "embedded_this_run": es.embedded,
            "reused_this_run": es.reused,
            "embed_chunks_per_s": round(rate, 1),
            "coverage": round(es.coverage, 4),
            "projected_full_coverage_min": round((es.embedded + remaining) / rate / 60, 1)
            if rate
            else None,
            "target_full_coverage_min": 10,
        }
    )
    log(f"embedded {es.embedded} chunks at {rate:.1f}/s")
    result["stdlib"]["query"] = query_latency(cfg.index_path, cfg.root, embedder, issues=issues)
    log(json.dumps(result))  # partial figures, in case a later phase is interrupted

    # one-function edit → searchable, on a copy of a package (the corpus is not modified)
    tree = work / "edit-tree"
    if tree.exists():
        shutil.rmtree(tree)
    shutil.copytree(STDLIB / "json", tree / "json")
    shutil.copytree(STDLIB / "email", tree / "email")
    ecfg = load_config(tree, env={}, index_dir=work / "edit-index", jobs=1)
    build(ecfg, embed=True, embedder=embedder)
    target = tree / "json" / "decoder.py"
    original = target.read_text()
    times = []
    for i in range(5):
        ident = f"zebra_quokka_{i}"
        target.write_text(original.replace("def py_scanstring(", f"def {ident}(", 1))
        t = time.perf_counter()
        build(ecfg, embed=True, embedder=embedder)
        index = Index.open(ecfg)
        s = Searcher(index, embedder=embedder)
        found = any(ident in (h.symbol or "") for h in s.search(ident, mode="hybrid", k=5).hits)
        times.append(time.perf_counter() - t)
        index.close()
        assert found, "edited function not searchable"
    target.write_text(original)
    result["edit_to_searchable_s"] = {
        "median": round(statistics.median(times), 3),
        "max": round(max(times), 3),
        "target": 1.0,
    }

    if args.large:
        lcfg = load_config(STDLIB, env={}, index_dir=work / "large")
        t = time.perf_counter()
        lstats = build(lcfg)
        conn = store.open_for_read(lcfg.index_path).conn
        lchunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        conn.close()
        result["large"] = {
            "files": lstats.files_total,
            "chunks": lchunks,
            "graph_and_lexical_s": round(time.perf_counter() - t, 2),
            "query": query_latency(
                lcfg.index_path, lcfg.root, embedder, modes=("lexical",), issues=issues
            ),
            "note": "no vectors on the large corpus in this run (hours of CPU)",
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
