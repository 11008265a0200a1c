"""Background watcher benchmark: edit-to-searchable latency, burst convergence, idle CPU.

On a copy of the standard library (site-packages left out): a full `repoctx index build`, then a
detached `repoctx index watch`. Single edits append a new function to a random file and poll the
index (read-only, as `repoctx symbol` does) every 10 ms until the new identifier is found, and,
with embeddings, until its chunk has a vector. A burst writes 1,000 new files at once and waits
until every one is searchable; it is compared with a full rebuild of the same tree. Finally the
watcher's CPU time is read from /proc over a quiet interval. Prints one JSON object to stdout,
progress to stderr.

    .venv/bin/python benchmarks/watch_latency.py                    # graph only
    .venv/bin/python benchmarks/watch_latency.py --embed-model all-MiniLM-L6-v2 --subset email,json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import sys
import time
from pathlib import Path

from _common import (
    REPO,
    STDLIB_ROOT,
    bench_tmpdir,
    git_revision,
    log,
    repoctx_command,
    rounded,
    run_cmd,
    source_label,
    use_source,
    with_source,
)

TARGET_EDIT_P50_S = 1.0
POLL_S = 0.01


class BenchError(RuntimeError):
    pass


def copy_corpus(dest: Path, subset: list[str] | None) -> Path:
    root = dest / "stdlib"

    def skip(directory: str, names: list[str]) -> list[str]:
        top = Path(directory) == STDLIB_ROOT
        return [n for n in names if n == "__pycache__" or (top and n == "site-packages")]

    if subset:
        root.mkdir(parents=True)
        for name in subset:
            src = STDLIB_ROOT / name
            if src.is_dir():
                shutil.copytree(src, root / name, ignore=skip)
            else:
                shutil.copy2(src, root / name)
    else:
        shutil.copytree(STDLIB_ROOT, root, ignore=skip)
    return root


def cli(args: list[str], env: dict, timeout: float = 3600.0):
    res = run_cmd([*repoctx_command(), *args], env=env, timeout=timeout)
    if res.returncode != 0 or res.timed_out:
        raise BenchError(
            f"repoctx {' '.join(args)} failed (rc {res.returncode}): {res.stderr[-2000:]}"
        )
    return res


def open_ro(index: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{index / 'graph.db'}?mode=ro", uri=True)
    conn.execute("PRAGMA busy_timeout = 10000")
    return conn


def wait_for(check, timeout: float) -> float:
    """Seconds until ``check()`` is true (polled every 10 ms)."""
    t0 = time.perf_counter()
    while not check():
        if time.perf_counter() - t0 > timeout:
            raise BenchError(f"not searchable within {timeout:.0f}s")
        time.sleep(POLL_S)
    return time.perf_counter() - t0


def open_index(root: Path, index: Path):
    """The index as the read commands hold it (one read connection, as ``open_ro``'s)."""
    sys.path.insert(0, str(REPO))
    from indexer import Index

    return Index.open(root, index_dir=index)


def symbol_found(held, name: str):
    sys.path.insert(0, str(REPO))
    from retrieval.symbols import find_symbols

    return lambda: any(h.name == name for h in find_symbols(held, name, limit=5))


def vector_found(conn: sqlite3.Connection, path: str, line: int):
    """The chunk holding ``line`` of ``path`` has a vector (small definitions share a chunk with
    their neighbours, so the chunk is found by position, not by symbol name)."""
    sql = (
        "SELECT 1 FROM chunks c JOIN files f ON f.id = c.file_id WHERE f.path = ? "
        "AND c.start_line <= ? AND c.end_line >= ? AND c.embedded = 1 LIMIT 1"
    )
    return lambda: conn.execute(sql, [path, line, line]).fetchone() is not None


def watcher_state(index: Path) -> dict:
    try:
        return json.loads((index / "watch.json").read_text())
    except (OSError, ValueError):
        return {}


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as fh:
        fields = fh.read().rsplit(b")", 1)[1].split()
    # fields[11], [12] = utime, stime (clock ticks) after the command name
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pick_files(root: Path, n: int, rng: random.Random) -> list[Path]:
    files = sorted(
        p
        for p in root.rglob("*.py")
        if 2_000 < p.stat().st_size < 60_000 and "test" not in p.parts and "lib2to3" not in p.parts
    )
    return rng.sample(files, min(n, len(files)))


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return round(values[lo] + (values[hi] - values[lo]) * (k - lo), 4)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--edits", type=int, default=20)
    ap.add_argument("--burst", type=int, default=1000)
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--debounce-ms", type=int, default=200)
    ap.add_argument(
        "--embed-model",
        default=None,
        help="Also keep vectors fresh with this model (default: graph only).",
    )
    ap.add_argument(
        "--subset",
        default=None,
        help="Comma-separated top-level stdlib entries to copy (default: all).",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", action="store_true", help="Keep the temporary copy.")
    ap.add_argument("--src", type=Path, default=None, help="Run repoctx from this source tree.")
    args = ap.parse_args()
    use_source(args.src)
    rng = random.Random(args.seed)
    embed = args.embed_model is not None
    tmp = bench_tmpdir("watch")
    env = with_source({k: v for k, v in os.environ.items() if not k.startswith("REPOCTX_")})
    out: dict = {
        "benchmark": "watch_latency",
        "mode": "graph+vectors" if embed else "graph only",
        "embed_model": args.embed_model,
        "corpus": f"copy of {STDLIB_ROOT} without site-packages"
        + (f", subset {args.subset}" if args.subset else ""),
        "source": source_label(),
        "revision": git_revision(),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        },
        "settings": {
            "debounce_ms": args.debounce_ms,
            "max_latency_ms": 2000,
            "poll_ms": POLL_S * 1000,
            "edits": args.edits,
            "burst_files": args.burst,
        },
    }
    pid = None
    try:
        log("copying the corpus")
        root = copy_corpus(tmp, args.subset.split(",") if args.subset else None)
        index = root / ".repoctx"
        out["corpus_py_files"] = sum(1 for _ in root.rglob("*.py"))
        embed_args = ["--embed-model", args.embed_model] if embed else ["--no-embed"]
        log("initial full build")
        first = cli(["index", "build", str(root), "--json", "-q", *embed_args], env)
        out["initial_build_s"] = round(first.wall_s, 3)
        log("starting the watcher")
        started = cli(
            [
                "index",
                "watch",
                str(root),
                "--detach",
                "--json",
                "--debounce",
                str(args.debounce_ms),
                *embed_args,
            ],
            env,
        )
        pid = json.loads(started.stdout)["pid"]
        wait_for(lambda: watcher_state(index).get("state") == "idle", 600)
        conn = open_ro(index)
        held = open_index(root, index)

        log(f"{args.edits} single edits")
        graph_lat, vector_lat = [], []
        for i, path in enumerate(pick_files(root, args.edits, rng)):
            name = f"watch_probe_{i}_{rng.randrange(10**9)}"
            def_line = len(path.read_bytes().splitlines()) + 3
            t0 = time.perf_counter()
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(f'\n\ndef {name}(value):\n    """Probe {i}."""\n    return value * {i}\n')
            wait_for(symbol_found(held, name), 120)
            graph_lat.append(time.perf_counter() - t0)
            if embed:
                rel = path.relative_to(root).as_posix()
                wait_for(vector_found(conn, rel, def_line), 120)
                vector_lat.append(time.perf_counter() - t0)
            wait_for(lambda: watcher_state(index).get("state") == "idle", 120)
            time.sleep(0.3)  # apart from the next edit: one build each, not coalesced
        headline = vector_lat if embed else graph_lat
        out["single_edit"] = {
            "symbol_searchable_s": {
                "p50": percentile(graph_lat, 0.5),
                "p95": percentile(graph_lat, 0.95),
                "all": rounded(graph_lat, 3),
            },
            "vector_searchable_s": (
                {
                    "p50": percentile(vector_lat, 0.5),
                    "p95": percentile(vector_lat, 0.95),
                    "all": rounded(vector_lat, 3),
                }
                if embed
                else None
            ),
            "target_p50_s": TARGET_EDIT_P50_S,
            "pass": bool(headline) and statistics.median(headline) < TARGET_EDIT_P50_S,
        }

        log(f"burst of {args.burst} files")
        builds_before = int(watcher_state(index).get("builds", 0))
        burst_dir = root / "watch_burst"
        names = [f"burst_probe_{i}" for i in range(args.burst)]
        t0 = time.perf_counter()
        burst_dir.mkdir()
        for i, name in enumerate(names):
            (burst_dir / f"m{i:04d}.py").write_text(
                f"from json import dumps\n\n\ndef {name}(obj):\n    return dumps(obj)\n"
            )
        written = time.perf_counter() - t0

        def all_found() -> bool:
            sql = "SELECT count(*) FROM symbols WHERE name LIKE 'burst\\_probe\\_%' ESCAPE '\\'"
            if embed:  # burst files all of whose chunks have vectors
                sql = (
                    "SELECT count(*) FROM files f WHERE f.path LIKE 'watch_burst/%' "
                    "AND EXISTS (SELECT 1 FROM chunks c WHERE c.file_id = f.id) "
                    "AND NOT EXISTS (SELECT 1 FROM chunks c WHERE c.file_id = f.id "
                    "AND c.embedded != 1)"
                )
            return conn.execute(sql).fetchone()[0] >= args.burst

        wait_for(all_found, 1800)
        converged = time.perf_counter() - t0
        wait_for(lambda: watcher_state(index).get("state") == "idle", 600)
        burst_builds = int(watcher_state(index).get("builds", 0)) - builds_before

        log("full rebuild of the same tree, for comparison")
        full = cli(
            [
                "index",
                "build",
                str(root),
                "--full",
                "--json",
                "-q",
                *embed_args,  # the same work as the watcher: with vectors when it embeds
                "--index-dir",
                str(tmp / "full-index"),
            ],
            env,
        )
        out["burst"] = {
            "files": args.burst,
            "write_s": round(written, 3),
            "converge_s": round(converged, 3),
            "builds": burst_builds,
            "full_rebuild_s": round(full.wall_s, 3),
            "pass": converged < full.wall_s,
        }

        log(f"idle CPU over {args.idle_seconds:.0f}s")
        time.sleep(2.0)  # let a post-burst settle build finish
        c0, t0 = cpu_seconds(pid), time.perf_counter()
        time.sleep(args.idle_seconds)
        c1, t1 = cpu_seconds(pid), time.perf_counter()
        pct = 100.0 * (c1 - c0) / (t1 - t0)
        out["idle"] = {
            "seconds": round(t1 - t0, 2),
            "cpu_s": round(c1 - c0, 3),
            "cpu_percent": round(pct, 3),
            "pass": pct < 1.0,
        }
        out["watcher"] = watcher_state(index)
        conn.close()
        held.close()
    finally:
        if pid is not None:
            try:
                cli(["index", "watch", str(tmp / "stdlib"), "--stop"], env, timeout=120)
            except BenchError as exc:
                log(f"could not stop the watcher: {exc}")
        out["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        if args.keep:
            out["tmp"] = str(tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    json.dump(out, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
