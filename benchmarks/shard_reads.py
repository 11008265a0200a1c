"""Shard reads benchmark (issue 41): read one merged graph file, or fan out over N shard files?

A real graph (`--index-dir`, or a fresh `repoctx index build --full --no-embed` of `--corpus`) is
split by path into N shard files (N = `--shards`, default 2,4,8,16): the files sorted by path and
cut into N runs of equal file count (contiguous paths keep packages together, as the build's
path-ordered batches do, and every shard gets the same share of files, where a hash of the top
directory would put the stdlib's `test/` — half its files — in one shard). Each shard holds its
files' rows of every table (files, symbols, refs, ref_candidates, imports, chunks), their FTS5
rows (virtual tables recreated, rows inserted), `meta`, and the graph's secondary indexes.

Then, in this process with every connection open and warm (the query alone, median of
`--runs`, merged and fan-out runs interleaved):

(a) symbol lookup: `GraphReads.find_definitions` (what `repoctx symbol` runs); fan-out asks every
    shard one name tier at a time (exact qualified name, exact name, suffix, prefix) and stops
    at the first tier any shard answers, then orders and cuts as the SQL does;
(b) references: `find_definitions` then `GraphReads.references_to` (what `repoctx refs` runs);
    fan-out merges each group (resolved, candidates) by confidence, path, line;
(c) lexical: `LexicalReads.chunk_bm25` top-k over `chunks_fts` for ~20 queries; fan-out takes
    each shard's top k and merges by score. Per-shard BM25 uses per-shard statistics (document
    count, term frequencies, average length), so its ranking differs: overlap@k against the
    merged ranking is reported;
(d) the cost of making the merged file from the shards: `ATTACH` + `INSERT … SELECT` per table,
    the FTS5 rows re-tokenized (an upper bound: a build copies FTS5 segments), then the indexes. Fan-out needs
    no merge.

Fan-out runs the shards one after another, and on a thread pool (sqlite3 releases the GIL).
SQLite attaches at most 10 databases to a connection by default (SQLITE_MAX_ATTACHED), so
fan-out here holds one connection per shard; the merge attaches one shard at a time.
Prints one JSON object to stdout, progress to stderr. The corpus and `--index-dir` are only read.

    .venv/bin/python benchmarks/shard_reads.py --corpus stdlib
    .venv/bin/python benchmarks/shard_reads.py --index-dir /path/to/.repoctx --shards 4,16
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sqlite3
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` and the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "benchmarks"

from benchmarks._common import (  # noqa: E402
    CORPORA,
    bench_tmpdir,
    build_argv,
    git_revision,
    log,
    median,
    repoctx_command,
    run_cmd,
    source_label,
    use_source,
)

DEFAULT_SHARDS = (2, 4, 8, 16)
DEFAULT_NAMES = ("JSONDecoder", "loads", "join", "Thread", "JSONDecoder.decode",
                 "HTTPConnection")
DEFAULT_QUERIES = (
    "parse json decoder", "http request header", "thread lock acquire", "decimal rounding context",
    "zip file extract", "socket timeout connect", "email message header encode",
    "sqlite cursor execute", "regular expression compile pattern", "tar archive member",
    "unicode normalize", "csv writer dialect", "asyncio event loop run", "logging handler format",
    "path glob match", "xml element tree parse", "subprocess pipe communicate",
    "base64 encode decode", "datetime timezone offset", "random seed shuffle",
)
#: The issue's tolerance for reads: no slower than 1.2x today's (the merged file).
READ_TOLERANCE = 1.2
#: Overlap@k below which fan-out's ranking is called a different search.
MIN_OVERLAP = 0.9
#: Suffixes of the shadow tables FTS5 makes for a virtual table (created with it).
_FTS_SHADOWS = ("_data", "_idx", "_content", "_docsize", "_config")


# --------------------------------------------------------------------------- schema and shards


def schema(conn: sqlite3.Connection, db: str = "main") -> dict[str, list[tuple[str, str]]]:
    """The graph's statements by kind: plain tables, FTS5 virtual tables, indexes (names and
    SQL); FTS5 shadow tables, SQLite's own tables and triggers (the totals) are left out."""
    rows = conn.execute(f"SELECT type, name, sql FROM {db}.sqlite_master WHERE sql IS NOT NULL "
                        "AND name NOT LIKE 'sqlite_%' ORDER BY rowid").fetchall()
    virtual = [(n, s) for t, n, s in rows if t == "table" and s.upper().startswith("CREATE VIRTUAL")]
    shadows = {v + suffix for v, _ in virtual for suffix in _FTS_SHADOWS}
    return {
        "tables": [(n, s) for t, n, s in rows
                   if t == "table" and n not in shadows and (n, s) not in virtual],
        "virtual": virtual,
        "indexes": [(n, s) for t, n, s in rows if t == "index"],
    }


def columns(conn: sqlite3.Connection, table: str, db: str = "main") -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA {db}.table_info({table})")]


def _row_filter(conn: sqlite3.Connection, table: str, db: str) -> str | None:
    """The WHERE that picks a shard's rows of ``table`` (temp.sel holds its file ids; its refs
    and chunks are already in main), or None for a table copied whole or left empty."""
    cols = columns(conn, table, db)
    if table == "files":
        return "id IN (SELECT id FROM temp.sel)"
    if "file_id" in cols:
        return "file_id IN (SELECT id FROM temp.sel)"
    if table == "ref_candidates":
        return "ref_id IN (SELECT id FROM main.refs)"
    if table.startswith("chunks_fts"):
        return "rowid IN (SELECT id FROM main.chunks)"
    if table.startswith("files_fts"):
        return "rowid IN (SELECT id FROM temp.sel)"
    return None


def make_shards(graph: Path, out: Path, n: int) -> dict:
    """Split ``graph`` into ``n`` shard files under ``out`` (see the module docstring)."""
    out.mkdir(parents=True, exist_ok=True)
    src = sqlite3.connect(f"file:{graph}?mode=ro", uri=True)
    ids = [r[0] for r in src.execute("SELECT id FROM files ORDER BY path")]
    src.close()
    bounds = [round(k * len(ids) / n) for k in range(n + 1)]
    t0 = time.perf_counter()
    paths, whole, empty = [], set(), set()
    for k in range(n):
        path = out / f"shard-{k:02d}.db"
        conn = sqlite3.connect(str(path), uri=True, isolation_level=None)
        conn.execute("PRAGMA journal_mode = OFF")
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute(f"ATTACH 'file:{graph}?mode=ro' AS src")
        sch = schema(conn, "src")
        conn.execute("BEGIN")
        conn.execute("CREATE TEMP TABLE sel (id INTEGER PRIMARY KEY)")
        conn.executemany("INSERT INTO temp.sel VALUES (?)", [(i,) for i in ids[bounds[k]:bounds[k + 1]]])
        # files, then the tables keyed by file (refs and chunks before what hangs off them)
        order = sorted(sch["tables"], key=lambda t: (t[0] != "files", t[0] == "ref_candidates"))
        for name, sql in order:
            conn.execute(sql)
            where = _row_filter(conn, name, "src")
            if where is not None:
                conn.execute(f"INSERT INTO main.{name} SELECT * FROM src.{name} WHERE {where}")
            elif name == "meta":
                conn.execute(f"INSERT INTO main.{name} SELECT * FROM src.{name}")
                whole.add(name)
            else:
                empty.add(name)
        for name, sql in sch["virtual"]:
            conn.execute(sql)
            cols = ", ".join(columns(conn, name, "src"))
            conn.execute(f"INSERT INTO main.{name}(rowid, {cols}) SELECT rowid, {cols} "
                         f"FROM src.{name} WHERE {_row_filter(conn, name, 'src')}")
        for _, sql in sch["indexes"]:
            conn.execute(sql)
        conn.execute("COMMIT")
        conn.execute("DETACH src")
        conn.close()
        paths.append(path)
    return {
        "paths": paths,
        "seconds": round(time.perf_counter() - t0, 2),
        "files_per_shard": [bounds[k + 1] - bounds[k] for k in range(n)],
        "mb_per_shard": [round(p.stat().st_size / 2**20, 1) for p in paths],
        "copied_whole": sorted(whole),
        "left_empty": sorted(empty),
    }


def merge_shards(shards: list[Path], graph: Path, dest: Path) -> dict:
    """Make one graph file from ``shards``: the tables (no indexes), then per shard `ATTACH` +
    `INSERT … SELECT` (FTS5 rows re-tokenized), then the indexes. An upper bound of what a build
    pays: the build's own merge copies the workers' FTS5 segments instead of re-tokenizing
    (`indexer/graph/fts_segments.py`: the stdlib's driver merge 1.8 s of CPU against 2.9 s).
    Timed by part; WAL and synchronous=NORMAL as the build's writer."""
    src = sqlite3.connect(f"file:{graph}?mode=ro", uri=True)
    sch = schema(src)
    src.close()
    dest.unlink(missing_ok=True)
    conn = sqlite3.connect(str(dest), uri=True, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    t0 = time.perf_counter()
    for _, sql in sch["tables"] + sch["virtual"]:
        conn.execute(sql)
    plain = fts = 0.0
    for k, shard in enumerate(shards):
        conn.execute(f"ATTACH 'file:{shard}?mode=ro' AS s{k}")
        conn.execute("BEGIN")
        t = time.perf_counter()
        for name, _ in sch["tables"]:
            if name == "meta" and k:
                continue
            conn.execute(f"INSERT INTO main.{name} SELECT * FROM s{k}.{name}")
        t2 = time.perf_counter()
        for name, _ in sch["virtual"]:
            cols = ", ".join(columns(conn, name))
            conn.execute(f"INSERT INTO main.{name}(rowid, {cols}) SELECT rowid, {cols} FROM s{k}.{name}")
        t3 = time.perf_counter()
        conn.execute("COMMIT")
        conn.execute(f"DETACH s{k}")
        plain += t2 - t
        fts += t3 - t2
    t = time.perf_counter()
    conn.execute("BEGIN")
    for _, sql in sch["indexes"]:
        conn.execute(sql)
    conn.execute("COMMIT")
    indexes = time.perf_counter() - t
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    total = time.perf_counter() - t0
    return {
        "seconds": round(total, 3),
        "rows_seconds": round(plain, 3),
        "fts_retokenize_seconds": round(fts, 3),
        "indexes_seconds": round(indexes, 3),
        "other_seconds": round(total - plain - fts - indexes, 3),
        "mb": round(dest.stat().st_size / 2**20, 1),
    }


# --------------------------------------------------------------------------- reads


def _def_key(rec) -> tuple:
    return (rec.kind == "module", len(rec.qualname), rec.qualname)


class Reader:
    """The reads of one design: a merged file (one shard) or several, sequential or threaded."""

    def __init__(self, files: list[Path], threads: int = 0) -> None:
        from indexer.graph.connection import connect
        from indexer.graph.lexical_reads import LexicalReads
        from indexer.graph.reads import GraphReads

        self.dbs = [connect(f, readonly=True) for f in files]
        self.graphs = [GraphReads(db.conn) for db in self.dbs]
        self.lexicals = [LexicalReads(db.conn) for db in self.dbs]
        self.pool = ThreadPoolExecutor(threads) if threads and len(files) > 1 else None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()
        for db in self.dbs:
            db.conn.close()

    def _each(self, fn: Callable, items: list) -> list:
        return list(self.pool.map(fn, items)) if self.pool is not None else [fn(x) for x in items]

    def definitions(self, name: str, limit: int = 50) -> list:
        name = name.strip().replace("::", ".")
        if len(self.graphs) == 1:
            return self.graphs[0].find_definitions(name, None, limit)
        # Every shard is asked one tier at a time: a shard that lacks the exact name would
        # otherwise fall through to the prefix scan on its own, although another answers it.
        from indexer.graph.reads import definition_steps

        for where, params in definition_steps(name):
            hits = [r for part in self._each(lambda g, w=where, p=params: g._records(w, p, limit),
                                             self.graphs) for r in part]
            if hits:
                return sorted(hits, key=_def_key)[:limit]
        return []

    def references(self, name: str, limit: int = 500) -> list:
        ids = [t.id for t in self.definitions(name)]
        rows = self._each(lambda g: g.references_to(ids, limit=limit), self.graphs)
        if len(rows) == 1:
            return rows[0][:limit]
        merged = []
        for ambiguous in (False, True):
            group = [r for part in rows for r in part if r.ambiguous == ambiguous]
            merged += sorted(group, key=lambda r: (-r.confidence, r.path, r.line, r.col))[:limit]
        return merged[:limit]

    def search(self, words: str, k: int) -> list:
        from retrieval.sources import CHUNK_WEIGHTS

        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words.split())
        rows = self._each(lambda lx: lx.chunk_bm25("chunks_fts", match, CHUNK_WEIGHTS, k), self.lexicals)
        return sorted((r for part in rows for r in part), key=lambda r: r.bm25)[:k]


def _same(a: list, b: list, key: Callable) -> bool:
    return sorted(map(key, a)) == sorted(map(key, b))


def _timed(fn: Callable) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t) * 1000.0, out


def compare_reads(merged: Reader, fan: Reader, threaded: Reader, names: list[str],
                  queries: list[str], k: int, runs: int) -> dict:
    """Per query kind: medians (ms) of merged, fan-out and threaded fan-out, interleaved."""
    jobs = (
        [("symbol", n, lambda r, n=n: r.definitions(n)) for n in names]
        + [("refs", n, lambda r, n=n: r.references(n)) for n in names]
        + [("search", q, lambda r, q=q: r.search(q, k)) for q in queries]
    )
    keys = {"symbol": lambda s: (s.path, s.qualname, s.start_line),
            "refs": lambda r: (r.path, r.line, r.col, r.target_id, r.ambiguous),
            "search": lambda c: c.chunk_id}
    by_kind: dict[str, dict] = {}
    for kind, arg, fn in jobs:
        times: dict[str, list[float]] = {"merged": [], "fanout": [], "fanout_threads": []}
        results = {}
        for r in range(runs + 1):  # run 0 untimed: warms each connection's cache and schema
            for label, reader in (("merged", merged), ("fanout", fan), ("fanout_threads", threaded)):
                ms, out = _timed(lambda reader=reader, fn=fn: fn(reader))
                if r:
                    times[label].append(ms)
                results[label] = out
        row = {label: median(v) for label, v in times.items()}
        if kind == "search":
            m = {c.chunk_id for c in results["merged"]}
            f = {c.chunk_id for c in results["fanout"]}
            row["overlap_at_k"] = round(len(m & f) / len(m), 3) if m else None
        else:
            row["same_results"] = _same(results["merged"], results["fanout"], keys[kind])
        row["results"] = len(results["merged"])
        by_kind.setdefault(kind, {})[arg] = row
    out = {}
    for kind, rows in by_kind.items():
        med = {label: round(sum(r[label] for r in rows.values()), 3)
               for label in ("merged", "fanout", "fanout_threads")}
        summary = {
            "merged_ms_sum_of_medians": med["merged"],
            "fanout_ms_sum_of_medians": med["fanout"],
            "fanout_threads_ms_sum_of_medians": med["fanout_threads"],
            "ratio_fanout_to_merged": round(med["fanout"] / med["merged"], 2) if med["merged"] else None,
            "ratio_fanout_threads_to_merged": round(med["fanout_threads"] / med["merged"], 2)
            if med["merged"] else None,
            "queries": len(rows),
            # the sums are dominated by the slowest query (a suffix LIKE scans every row):
            # per query, the ratio's geometric mean and the added milliseconds
            "ratio_geomean_per_query": _geomean([r["fanout"] / r["merged"] for r in rows.values()
                                                 if r["merged"]]),
            "added_ms_median": median([r["fanout"] - r["merged"] for r in rows.values()]),
            "added_ms_max": round(max(r["fanout"] - r["merged"] for r in rows.values()), 3),
        }
        if kind == "search":
            ov = [r["overlap_at_k"] for r in rows.values() if r["overlap_at_k"] is not None]
            summary["overlap_at_k_mean"] = round(sum(ov) / len(ov), 3) if ov else None
            summary["overlap_at_k_min"] = min(ov) if ov else None
        else:
            summary["all_same_results"] = all(r["same_results"] for r in rows.values())
        out[kind] = {**summary, "by_query": rows}
    return out


def _geomean(values: list[float]) -> float | None:
    return round(math.exp(sum(map(math.log, values)) / len(values)), 2) if values else None


def command_estimate(reads: dict, commands: dict | None, open_ms: dict, n: str) -> dict | None:
    """Whole `symbol`/`refs` commands on N shards, estimated per name as the merged file's
    measured command + fan-out's added query ms + opening N files instead of one; the worst
    ratio to the measured command per kind."""
    if not commands:
        return None
    extra_open = (open_ms.get(n) or 0.0) - (open_ms.get("1") or 0.0)
    out = {}
    for kind in ("symbol", "refs"):
        ratios = [
            (cmd + row["fanout"] - row["merged"] + extra_open) / cmd
            for name, row in reads[kind]["by_query"].items()
            if isinstance(cmd := commands.get(kind, {}).get(name), float)
        ]
        out[kind] = round(max(ratios), 3) if ratios else None
    return out


def open_cost(files: list[Path], runs: int) -> float | None:
    """ms to open the files and read one row of each (schema parsed): what a command pays."""
    from indexer.graph.connection import connect

    times = []
    for _ in range(runs):
        t = time.perf_counter()
        dbs = [connect(f, readonly=True) for f in files]
        for db in dbs:
            db.execute("SELECT id FROM symbols LIMIT 1").fetchone()
        times.append((time.perf_counter() - t) * 1000.0)
        for db in dbs:
            db.conn.close()
    return median(times)


def whole_commands(root: Path, index_dir: Path, env: dict, names: list[str], runs: int) -> dict:
    """`repoctx symbol` / `repoctx refs` medians (ms) on the merged file, whole command: what the
    in-process query time is a part of."""
    out = {}
    for command in ("symbol", "refs"):
        per = {}
        for name in names:
            argv = [*repoctx_command(), command, name, "--json", "-C", str(root),
                    "--index-dir", str(index_dir)]
            walls = []
            for r in range(runs + 1):
                res = run_cmd(argv, env=env, timeout=120)
                if res.returncode != 0:
                    per[name] = {"error": res.stderr[-500:]}
                    break
                if r:
                    walls.append(res.wall_s * 1000.0)
            else:
                per[name] = median(walls)
        out[command] = per
    return out


def verdict(per_n: dict, merge: dict, build_s: float | None) -> str:
    """One line from the numbers at the most shards measured: fan-out's query time per query
    (geometric mean of the ratios, and the estimated whole-command ratio where commands were
    timed) against the issue's 1.2x, its search overlap against MIN_OVERLAP, and the merge."""
    n = max(per_n, key=int)
    reads = per_n[n]["reads"]
    geo = {kind: reads[kind]["ratio_geomean_per_query"] for kind in reads}
    est = per_n[n].get("whole_command_estimate") or {}
    overlap = reads.get("search", {}).get("overlap_at_k_mean")
    cost = merge[n]["seconds"]
    share = f" ({100 * cost / build_s:.0f}% of that run's build)" if build_s else ""
    q = ", ".join(f"{k} {v}x" for k, v in geo.items())
    c = ", ".join(f"{k} {v}x" for k, v in est.items() if v is not None) or "not timed"
    slow_queries = max(v for v in geo.values() if v is not None) > READ_TOLERANCE
    slow_commands = any(v is not None and v > READ_TOLERANCE for v in est.values())
    other_rank = overlap is not None and overlap < MIN_OVERLAP
    facts = (f"at {n} shards fan-out queries take {q} the merged file's time (geometric mean per "
             f"query), whole commands an estimated {c}; fan-out search overlaps the merged top k "
             f"{overlap}; the merge costs {cost:.2f} s once per build{share}, FTS5 re-tokenizing "
             f"{merge[n]['fts_retokenize_seconds']:.2f} s of it")
    if other_rank or slow_commands or (slow_queries and not est):
        why = [w for w, bad in (("its BM25 ranking differs (per-shard statistics)", other_rank),
                                (f"commands slower than {READ_TOLERANCE}x", slow_commands),
                                (f"queries slower than {READ_TOLERANCE}x", slow_queries and not est))
               if bad]
        return f"read the merged file ({'; '.join(why)}): {facts}"
    return f"fan-out is within {READ_TOLERANCE}x and ranks alike: {facts}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", choices=["stdlib", "large"], default="stdlib")
    ap.add_argument("--index-dir", type=Path, default=None,
                    help="an existing index (only read) instead of a fresh build of --corpus")
    ap.add_argument("--shards", type=lambda s: [int(v) for v in s.split(",")],
                    default=list(DEFAULT_SHARDS))
    ap.add_argument("--runs", type=int, default=15, help="timed runs per query and design")
    ap.add_argument("--k", type=int, default=10, help="top-k of the lexical search")
    ap.add_argument("--names", type=lambda s: s.split(","), default=list(DEFAULT_NAMES))
    ap.add_argument("--queries", type=lambda s: s.split(";"), default=list(DEFAULT_QUERIES),
                    help="lexical queries separated by ';'")
    ap.add_argument("--no-commands", dest="commands", action="store_false",
                    help="skip the whole `repoctx symbol/refs` commands on the merged file")
    ap.add_argument("--src", type=Path, default=None,
                    help="run repoctx (builds, commands and the reads here) from this source tree")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (shards, index)")
    args = ap.parse_args()
    use_source(args.src)
    if args.src is not None:
        sys.path.insert(0, str(args.src.resolve()))
    corpus = CORPORA[args.corpus]
    started = time.time()
    tmp = bench_tmpdir("shards")
    result: dict = {
        "benchmark": "shard_reads",
        "repoctx": {"source": source_label(), "checkout": git_revision()},
        "machine": {"cpus": os.cpu_count(), "loadavg_before": [round(x, 2) for x in os.getloadavg()],
                    "sqlite": sqlite3.sqlite_version,
                    "sqlite_max_attached": sqlite3.connect(":memory:").getlimit(sqlite3.SQLITE_LIMIT_ATTACHED)},
        "params": {"shards": args.shards, "runs": args.runs, "k": args.k, "names": args.names,
                   "queries": len(args.queries)},
    }
    build_s = None
    try:
        index_dir = args.index_dir
        if index_dir is None:
            index_dir = tmp / "index"
            log(f"building {corpus.name} into {index_dir}")
            res = run_cmd(build_argv(corpus.root, index_dir, full=True), env=corpus.env(),
                          cwd=tmp, timeout=3600)
            if res.returncode != 0:
                raise SystemExit(f"build failed: {res.stderr[-2000:]}")
            stats = json.loads(res.stdout)
            build_s = round(res.wall_s, 2)
            result["build"] = {"wall_seconds": build_s, "files": stats["files_total"],
                               "symbols": stats["symbols"], "references": stats["references"],
                               "phases": stats.get("phases")}
        graph = (index_dir / "graph.db").resolve()
        result["graph"] = {"file": str(graph), "mb": round(graph.stat().st_size / 2**20, 1)}
        result["open_ms"] = {"1": open_cost([graph], args.runs)}
        if args.commands:
            log("whole commands on the merged file")
            result["whole_commands_ms_merged"] = whole_commands(
                corpus.root, index_dir, corpus.env(), args.names, max(3, args.runs // 3))
        per_n: dict[str, dict] = {}
        merges: dict[str, dict] = {}
        for n in args.shards:
            log(f"{n} shards")
            shards = make_shards(graph, tmp / f"shards-{n}", n)
            merges[str(n)] = merge_shards(shards["paths"], graph, tmp / f"merged-{n}.db")
            log(f"  split {shards['seconds']}s, merge {merges[str(n)]['seconds']}s")
            merged = Reader([graph])
            fan = Reader(shards["paths"])
            threaded = Reader(shards["paths"], threads=min(n, os.cpu_count() or 1))
            remerged = Reader([tmp / f"merged-{n}.db"])
            try:
                reads = compare_reads(merged, fan, threaded, args.names, args.queries, args.k, args.runs)
                same = all(_same(merged.search(q, args.k), remerged.search(q, args.k),
                                 lambda c: c.chunk_id) for q in args.queries)
            finally:
                for reader in (merged, fan, threaded, remerged):
                    reader.close()
            result["open_ms"][str(n)] = open_cost(shards["paths"], args.runs)
            per_n[str(n)] = {
                "whole_command_estimate": command_estimate(
                    reads, result.get("whole_commands_ms_merged"), result["open_ms"], str(n)),
                "split": {k: v for k, v in shards.items() if k != "paths"},
                "merge_from_shards": merges[str(n)],
                "merged_from_shards_search_equals_original": same,
                "reads": reads,
            }
            log("  " + ", ".join(f"{k} {v['ratio_fanout_to_merged']}x" for k, v in reads.items()))
            if not args.keep:
                shutil.rmtree(tmp / f"shards-{n}", ignore_errors=True)
                for p in tmp.glob(f"merged-{n}.db*"):
                    p.unlink()
        result["per_shards"] = per_n
        result["verdict"] = verdict(per_n, merges, build_s)
    finally:
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    result["notes"] = [
        "ms are in-process medians of the query alone (connections open and warm); the "
        "*_sum_of_medians figures add each query's median over the names or queries",
        "fan-out BM25 scores use each shard's own statistics, so its top-k is not the merged "
        "one: overlap_at_k is |fan-out top-k ∩ merged top-k| / |merged top-k|",
        "a merged file made from the shards reproduces the original ranking "
        "(merged_from_shards_search_equals_original): FTS5 statistics are global again",
        "merge other_seconds: creating the tables, ATTACH/DETACH, the commits and the final "
        "WAL checkpoint. Its FTS5 tokenizing is work today's single writer does anyway; fan-out "
        "would leave it to the workers that write the shards",
        f"SQLite attaches at most {result['machine']['sqlite_max_attached']} databases per "
        "connection here: fan-out holds one connection per shard; the merge attaches one at a time",
    ]
    result["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    result["total_seconds"] = round(time.time() - started, 1)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
