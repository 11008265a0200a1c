"""Index build benchmark: repoctx's graph build against Universal Ctags on the same tree.

For each corpus: ctags wall time; a cold full build (whole CLI command, peak memory of the main
process and of the parser workers); a no-op rebuild; a one-file edit in a copy of the corpus;
and `repoctx symbol` / `repoctx refs` whole-command latency. Prints one JSON object to stdout,
progress to stderr. The corpus itself is never written: indexes live in a temp directory.

    .venv/bin/python benchmarks/index_build.py --corpus stdlib --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` and the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "benchmarks"

from benchmarks import build_scaling  # noqa: E402
from benchmarks._common import (  # noqa: E402
    CORPORA,
    Corpus,
    bench_tmpdir,
    build_argv,
    git_revision,
    log,
    median,
    repoctx_command,
    rounded,
    run_cmd,
    source_label,
    use_source,
)

EDIT_TEXT = "\n\ndef _bench_added():\n    return 1\n"
DEFAULT_EDIT_FILE = "json/decoder.py"
#: Whether builds also embed chunks (`--embed`); the graph benchmark leaves vectors out.
EMBED = False
DEFAULT_QUERY_NAMES = ("JSONDecoder", "loads", "join")
#: Targets from the issue; each check reports value, target and pass.
TARGET_BUILD_RATIO = 15.0
TARGET_RSS_MB = 1024.0
TARGET_NOOP_S = 1.0
TARGET_EDIT_S = 0.300
TARGET_QUERY_S = 0.150


class BenchError(RuntimeError):
    pass


def _json_out(res, what: str) -> dict | list:
    if res.timed_out or res.returncode != 0:
        raise BenchError(
            f"{what} failed (rc {res.returncode}, timed out {res.timed_out}): {res.stderr[-2000:]}"
        )
    return json.loads(res.stdout)


def run_ctags(corpus: Corpus, tmp: Path, runs: int, timeout: float) -> dict:
    tags = tmp / "tags"
    results = build_scaling.ctags_runs(corpus.root, tags, runs, corpus.ctags_excludes(), timeout,
                                       ("--totals=yes",))
    walls, cpus = [res.wall_s for res in results], [res.cpu_s for res in results]
    totals = (results[-1].stderr + results[-1].stdout).strip().splitlines() if results else []
    log(f"  ctags: {', '.join(f'{w:.2f}s' for w in walls)}")
    n_tags = sum(1 for line in tags.open("rb") if not line.startswith(b"!_TAG_"))
    version = subprocess.run(
        ["ctags", "--version"], capture_output=True, text=True
    ).stdout.splitlines()[0]
    return {
        "command": f"ctags -R -f <tmp> --languages=Python --totals=yes {' '.join(corpus.ctags_excludes())} ROOT",
        "version": version,
        "seconds_median": median(walls),
        "seconds_runs": rounded(walls),
        "cpu_seconds_median": median(cpus),
        "tags": n_tags,
        "totals": totals[0] if totals else "",
        "note": "ctags parses only Python sources (*.py, not *.pyi); repoctx also parses .pyi, "
        "C/C++/JS/… files and resolves references.",
    }


def build_cmd(root: Path, index_dir: Path, full: bool) -> list[str]:
    return build_argv(root, index_dir, full=full, embed=EMBED)


def full_build(corpus: Corpus, index_dir: Path, timeout: float) -> tuple[dict, dict]:
    res = run_cmd(
        build_cmd(corpus.root, index_dir, True),
        env=corpus.env(),
        cwd=index_dir.parent,
        timeout=timeout,
        watch_memory=True,
    )
    stats = _json_out(res, "full build")
    log(
        f"  full build: {res.wall_s:.2f}s wall, {stats['files_total']} files, "
        f"largest process {res.memory['largest_single_process_rss_mb']} MB"
    )
    return stats, {
        "wall_seconds": round(res.wall_s, 3),
        "cpu_seconds": round(res.cpu_s, 3),
        "reported_seconds": round(stats["seconds"], 3),
        "memory": res.memory,
    }


def first_answer(corpus: Corpus, tmp: Path, name: str, timeout: float, poll: float = 1.0) -> dict:
    """Time to first answer: a second cold build into a fresh index, with `repoctx symbol NAME`
    asked every ``poll`` seconds until it answers; each answer's `index status` phase is
    recorded too. A separate build, so the polling never slows the full build measured above
    (it costs ~0.1 s of CPU per poll)."""
    index_dir = tmp / "index-first-answer"
    env = corpus.env()
    argv = [*repoctx_command(), "symbol", name, "--json", "-C", str(corpus.root), "--index-dir", str(index_dir)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(build_cmd(corpus.root, index_dir, True), env=env, cwd=tmp,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    first = phase = None
    polls = 0
    try:
        while proc.poll() is None and time.perf_counter() - t0 < timeout:
            time.sleep(poll)
            polls += 1
            res = run_cmd(argv, env=env, cwd=tmp, timeout=30)
            if res.returncode != 0:
                continue
            data = json.loads(res.stdout)
            if data.get("symbols"):
                first = time.perf_counter() - t0
                phase = (data.get("build") or {}).get("phase", "done")
                break
        proc.wait(timeout=max(1.0, timeout - (time.perf_counter() - t0)))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    total = time.perf_counter() - t0
    log(f"  first answer (`symbol {name}`): {first if first is None else round(first, 2)}s "
        f"of a {total:.2f}s build (phase {phase})")
    return {
        "query": f"symbol {name}",
        "seconds": None if first is None else round(first, 3),
        "build_seconds": round(total, 3),
        "phase_at_answer": phase,
        "poll_seconds": poll,
        "polls": polls,
    }


def timed_builds(
    root: Path, index_dir: Path, env: dict, runs: int, timeout: float, what: str
) -> dict:
    walls, cpus, reported, parsed = [], [], [], []
    for i in range(runs):
        res = run_cmd(
            build_cmd(root, index_dir, False), env=env, cwd=index_dir.parent, timeout=timeout
        )
        stats = _json_out(res, what)
        walls.append(res.wall_s)
        cpus.append(res.cpu_s)
        reported.append(stats["seconds"])
        parsed.append(stats["files_parsed"])
        log(
            f"  {what} run {i + 1}/{runs}: {res.wall_s:.3f}s wall, {res.cpu_s:.3f}s CPU "
            f"({stats['seconds']:.3f}s in build)"
        )
    return {
        "wall_seconds_median": median(walls),
        "wall_seconds_runs": rounded(walls),
        "cpu_seconds_median": median(cpus),
        "reported_seconds_median": median(reported),
        "files_parsed_runs": parsed,
    }


def _ignore_pycache(_dir: str, names: list[str]) -> list[str]:
    return [n for n in names if n == "__pycache__"]


def edit_test(
    corpus: Corpus, tmp: Path, index_dir: Path, edit_file: str, runs: int, timeout: float
) -> dict:
    """Copy the corpus (never edit it) and its fresh index, then time one-file edits."""
    tree, ix = tmp / "tree", tmp / "edit-index"
    t0 = time.perf_counter()
    # copy2 keeps mtimes, so the copied index is up to date for the copied tree.
    shutil.copytree(corpus.root, tree, symlinks=True, ignore=_ignore_pycache)
    shutil.copytree(index_dir, ix)
    copy_s = time.perf_counter() - t0
    log(f"  copied corpus and index in {copy_s:.1f}s")
    env = corpus.env()
    sync = timed_builds(tree, ix, env, 1, timeout, "build on copy")
    target = tree / edit_file
    original = target.read_bytes()
    walls, cpus, reported, parsed, resync = [], [], [], [], []
    try:
        for i in range(runs):
            with target.open("ab") as fh:
                fh.write(EDIT_TEXT.encode())
            res = run_cmd(build_cmd(tree, ix, False), env=env, cwd=tmp, timeout=timeout)
            stats = _json_out(res, "edit build")
            walls.append(res.wall_s)
            cpus.append(res.cpu_s)
            reported.append(stats["seconds"])
            parsed.append(stats["files_parsed"])
            log(
                f"  edit run {i + 1}/{runs}: {res.wall_s:.3f}s wall, {res.cpu_s:.3f}s CPU "
                f"({stats['seconds']:.3f}s in build)"
            )
            target.write_bytes(original)
            # Bring the index back to the original content so the next edit is a real change
            # (appending the same text again would match the stored hash and skip the parse).
            back = run_cmd(build_cmd(tree, ix, False), env=env, cwd=tmp, timeout=timeout)
            resync.append(round(back.wall_s, 4))
            _json_out(back, "restore build")
    finally:
        target.write_bytes(original)
    return {
        "file": edit_file,
        "appended": EDIT_TEXT,
        "copy": "corpus copied without __pycache__/ dirs (shutil.copy2 keeps mtimes) plus the "
        "index of the cold build; the first build on the copy checks it is up to date",
        "copy_seconds": round(copy_s, 2),
        "first_build_on_copy": sync,
        "wall_seconds_median": median(walls),
        "wall_seconds_runs": rounded(walls),
        "cpu_seconds_median": median(cpus),
        "reported_seconds_median": median(reported),
        "files_parsed_runs": parsed,
        "restore_build_wall_seconds": resync,
    }


def _result_size(data: dict | list) -> int | dict:
    """How many results a query printed, whatever the JSON shape of this repoctx version."""
    if isinstance(data, list):
        return len(data)
    return {k: len(v) for k, v in data.items() if isinstance(v, list)}


def query_latency(
    corpus: Corpus, index_dir: Path, names: list[str], runs: int, timeout: float
) -> dict:
    out: dict = {}
    for command in ("symbol", "refs"):
        per_name = {}
        for k, name in enumerate(names):
            argv = [
                *repoctx_command(),
                command,
                name,
                "--json",
                "-C",
                str(corpus.root),
                "--index-dir",
                str(index_dir),
            ]
            if k == 0:  # untimed: the first run of a command fills the bytecode cache
                warm = run_cmd(argv, env=corpus.env(), cwd=index_dir.parent, timeout=timeout)
                _json_out(warm, f"repoctx {command}")
            walls, cpus, size = [], [], None
            for _ in range(runs):
                res = run_cmd(argv, env=corpus.env(), cwd=index_dir.parent, timeout=timeout)
                data = _json_out(res, f"repoctx {command} {name}")
                walls.append(res.wall_s)
                cpus.append(res.cpu_s)
                size = _result_size(data)
            per_name[name] = {
                "wall_seconds_median": median(walls),
                "wall_seconds_runs": rounded(walls),
                "cpu_seconds_median": median(cpus),
                "results": size,
            }
            log(f"  {command} {name}: {median(walls):.3f}s median ({median(cpus):.3f}s CPU)")
        worst = max(v["wall_seconds_median"] for v in per_name.values())
        out[command] = {"worst_median_seconds": worst, "by_name": per_name}
    return out


def _check(value: float | None, target: float, **extra) -> dict:
    return {
        "value": value,
        "target": f"< {target}",
        "pass": value is not None and value < target,
        **extra,
    }


def _phase(name: str, fn, *args) -> dict:
    """Run one measurement; a failure is recorded in its place so the others still report."""
    try:
        return fn(*args)
    except (BenchError, build_scaling.ScalingError, OSError, json.JSONDecodeError) as exc:
        log(f"  {name} failed: {exc}")
        return {"error": str(exc)[-3000:]}


def bench_corpus(corpus: Corpus, args: argparse.Namespace) -> dict:
    tmp = bench_tmpdir(corpus.name)
    load_start = [round(x, 2) for x in os.getloadavg()]
    log(f"{corpus.name}: {corpus.root} (exclude {list(corpus.exclude)}), work dir {tmp}")
    try:
        ctags = run_ctags(corpus, tmp, args.runs, args.timeout)
        index_dir = tmp / "index"
        stats, full = full_build(corpus, index_dir, args.timeout)
        index_mb = sum(p.stat().st_size for p in index_dir.iterdir() if p.is_file()) / 2**20
        noop = _phase(
            "no-op build",
            timed_builds,
            corpus.root,
            index_dir,
            corpus.env(),
            args.runs,
            args.timeout,
            "no-op build",
        )
        queries = _phase(
            "queries",
            query_latency,
            corpus,
            index_dir,
            args.query_names,
            args.query_runs,
            args.timeout,
        )
        edit = _phase(
            "edit", edit_test, corpus, tmp, index_dir, args.edit_file, args.runs, args.timeout
        )
        answer = (
            _phase("first answer", first_answer, corpus, tmp, args.query_names[0], args.timeout)
            if args.first_answer
            else None
        )
    finally:
        if args.keep:
            log(f"  kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    mem = full["memory"]
    ratio = (
        round(full["wall_seconds"] / ctags["seconds_median"], 2)
        if ctags["seconds_median"]
        else None
    )
    return {
        "root": str(corpus.root),
        "exclude": list(corpus.exclude),
        "loadavg_start_end": [load_start, [round(x, 2) for x in os.getloadavg()]],
        "files": stats["files_total"],
        "by_language": stats["by_language"],
        "lines": stats["lines"],
        "symbols": stats["symbols"],
        "references": stats["references"],
        "resolved": stats["resolved"],
        "resolved_pct": stats["resolved_pct"],
        "ambiguous": stats["ambiguous"],
        "files_with_errors": stats["files_with_errors"],
        "skipped": stats["skipped"],
        "failed": stats["failed"],
        "index_size_mb": round(index_mb, 1),
        "ctags": ctags,
        "full_build": full,
        "ratio_build_to_ctags": ratio,
        "noop_rebuild": noop,
        "one_file_edit": edit,
        "first_answer": answer,
        "queries": queries,
        "targets": {
            "full_build_within_15x_ctags": {
                "value": ratio,
                "target": f"<= {TARGET_BUILD_RATIO}",
                "pass": ratio is not None and ratio <= TARGET_BUILD_RATIO,
            },
            "peak_rss_lt_1gb": _check(
                mem["largest_single_process_rss_mb"],
                TARGET_RSS_MB,
                measure="largest single process of the build (main or worker), MB",
                tree_sum_mb=mem["tree_peak_rss_sum_mb"],
                tree_sum_pass=mem["tree_peak_rss_sum_mb"] < TARGET_RSS_MB,
                applies_to="large",
            ),
            "noop_rebuild_lt_1s": _check(
                noop.get("wall_seconds_median"),
                TARGET_NOOP_S,
                measure="whole command, median",
                applies_to="large",
            ),
            "one_file_edit_lt_300ms": _check(
                edit.get("wall_seconds_median"), TARGET_EDIT_S, measure="whole command, median"
            ),
            "symbol_lt_150ms": _check(
                queries.get("symbol", {}).get("worst_median_seconds"),
                TARGET_QUERY_S,
                measure="whole command, worst per-name median",
            ),
            "refs_lt_150ms": _check(
                queries.get("refs", {}).get("worst_median_seconds"),
                TARGET_QUERY_S,
                measure="whole command, worst per-name median",
            ),
        },
    }


def _machine() -> dict:
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "loadavg_before": [round(x, 2) for x in os.getloadavg()],
    }


def scaling_run(args: argparse.Namespace) -> dict:
    """`--jobs-scaling` and/or `--tree-growth` (issue 41), see `benchmarks/build_scaling.py`."""
    started = time.time()
    result: dict = {
        "benchmark": "index_build",
        "mode": [m for m, v in (("jobs_scaling", args.jobs_scaling),
                                ("tree_growth", args.tree_growth)) if v is not None],
        "repoctx": {"source": source_label(), "checkout": git_revision()},
        "machine": _machine(),
        "params": {"runs": args.runs, "growth_runs": args.growth_runs, "embed": EMBED},
    }
    if args.jobs_scaling is not None:
        jobs = (build_scaling.default_jobs(os.cpu_count()) if args.jobs_scaling == "default"
                else build_scaling.int_list(args.jobs_scaling))
        names = ["stdlib", "large"] if args.corpus == "both" else [args.corpus]
        result["params"]["jobs"] = jobs
        result["jobs_scaling"] = {
            name: _phase(f"jobs scaling {name}", build_scaling.jobs_scaling, CORPORA[name], jobs,
                         args.runs, EMBED, args.timeout, args.keep)
            for name in names
        }
    if args.tree_growth is not None:
        sizes = (list(build_scaling.DEFAULT_SIZES) if args.tree_growth == "default"
                 else build_scaling.int_list(args.tree_growth))
        result["params"]["sizes"] = sizes
        result["tree_growth"] = _phase("tree growth", build_scaling.tree_growth, sizes,
                                       args.growth_runs, EMBED, args.timeout, args.keep)
    result["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    result["total_seconds"] = round(time.time() - started, 1)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", choices=["stdlib", "large", "both"], default="stdlib")
    ap.add_argument("--runs", type=int, default=3, help="runs for ctags, no-op and edit medians")
    ap.add_argument("--query-runs", type=int, default=5)
    ap.add_argument("--query-names", type=lambda s: s.split(","), default=list(DEFAULT_QUERY_NAMES))
    ap.add_argument(
        "--edit-file", default=DEFAULT_EDIT_FILE, help="path relative to the corpus root"
    )
    ap.add_argument("--timeout", type=float, default=3600.0, help="per command, seconds")
    ap.add_argument("--keep", action="store_true", help="keep the temp dirs (indexes, copies)")
    ap.add_argument(
        "--src",
        type=Path,
        default=None,
        help="run repoctx from this source tree (e.g. a `git archive HEAD` export)",
    )
    ap.add_argument(
        "--embed",
        action="store_true",
        help="let builds embed chunks too (default: --no-embed where repoctx has it)",
    )
    ap.add_argument(
        "--no-first-answer",
        dest="first_answer",
        action="store_false",
        help="skip the time-to-first-answer build (a second cold build, polled with `symbol`)",
    )
    ap.add_argument(
        "--jobs-scaling",
        nargs="?",
        const="default",
        default=None,
        metavar="LIST",
        help="instead of the default run: full builds at each --jobs value (default "
        "1,2,4,8,16 up to this machine's cores), speed-ups, phases and their Amdahl fit",
    )
    ap.add_argument(
        "--tree-growth",
        nargs="?",
        const="default",
        default=None,
        metavar="LIST",
        help="instead of the default run: full builds of subsets of the `large` corpus "
        "(default 1000,5000,25000 files) and how the build time grows",
    )
    ap.add_argument("--growth-runs", type=int, default=1, help="builds per --tree-growth size")
    args = ap.parse_args()
    use_source(args.src)
    global EMBED
    EMBED = args.embed
    if args.jobs_scaling is not None or args.tree_growth is not None:
        print(json.dumps(scaling_run(args), indent=2))
        return
    names = ["stdlib", "large"] if args.corpus == "both" else [args.corpus]
    started = time.time()
    result = {
        "benchmark": "index_build",
        "repoctx": {"source": source_label(), "checkout": git_revision()},
        "machine": _machine(),
        "params": {
            "runs": args.runs,
            "query_runs": args.query_runs,
            "query_names": args.query_names,
            "edit_file": args.edit_file,
            "jobs": "default (one per core)",
            "build_command": "repoctx "
            + " ".join(build_cmd(Path("ROOT"), Path("DIR"), True)[len(repoctx_command()) :]),
        },
        "corpora": {},
    }
    for name in names:
        result["corpora"][name] = bench_corpus(CORPORA[name], args)
    result["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    result["total_seconds"] = round(time.time() - started, 1)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
