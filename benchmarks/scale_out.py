"""Scale-out benchmark: the local engine against Ray with 1 and 2 workers, the Ray overhead,
and time to a usable index from a pulled snapshot against a cold build.

1. Graph build (parse + chunk + resolve, no vectors) of the corpus with each engine — the whole
   `repoctx index build` command, with the per-phase seconds the build reports.
2. Embedding throughput with the default model on a subset of the corpus, each engine.
3. Ray overhead: starting a local Ray, and the same build on Ray with 1 worker vs locally with 1.
4. Snapshots through a real S3 API (moto on 127.0.0.1): a cold build with vectors at commit A,
   `index push`, then at commit B (one file edited) in a second clone: `index pull` (download,
   adopt, incremental build) against a cold build of B.

`--driver-share N` (issue 41) measures instead whether the Ray engine's driver only schedules
and merges: a whole-package sample of N files of the `large` corpus (stdlib + site-packages,
`build_scaling.sample_files`), a full `--no-embed` build at `--jobs` with the local engine and with
Ray, the Ray build's `cpu:driver` against `cpu:workers` (target: at most 10 %), and where the
driver's CPU goes (a cProfile of the same Ray build in-process, timed by `time.process_time`).

Every build is the CLI a user runs; the corpus is copied into a temp git repository (never
written in place). Prints one JSON object to stdout, progress to stderr.

    .venv/bin/python benchmarks/scale_out.py --corpus stdlib
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` and the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "benchmarks"

from benchmarks._common import (  # noqa: E402
    CORPORA,
    bench_tmpdir,
    git_revision,
    log,
    median,
    repoctx_command,
    run_cmd,
)

#: Subset of the standard library embedded for the throughput and snapshot figures: a full
#: stdlib embedding takes ~17 minutes per engine on 2 cores.
EMBED_SUBSET = ("json", "email", "http", "urllib", "logging", "asyncio")
GIT_ENV = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "b@example.com",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "b@example.com"}


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                   env={**os.environ, **GIT_ENV})


def make_repo(src: Path, dest: Path, only: tuple[str, ...] = (), exclude: tuple[str, ...] = ()) -> Path:
    """A git repository holding a copy of the Python files of ``src`` (or of its ``only``
    subdirectories)."""
    dest.mkdir(parents=True)
    dirs = [src / d for d in only] if only else [src]
    for d in dirs:
        for path in d.rglob("*.py"):
            rel = path.relative_to(src)
            if any(str(rel).startswith(x.rstrip("/")) for x in exclude) or not path.is_file():
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    _git(dest, "init", "-q", "-b", "main")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", "A")
    return dest


def build(root: Path, index_dir: Path, env: dict, *, engine: str = "local", jobs: int = 2,
          embed: bool = False, model: str | None = None, timeout: float = 3600) -> dict:
    argv = [*repoctx_command(), "index", "build", str(root), "--index-dir", str(index_dir),
            "--json", "-q", "--engine", engine, "--jobs", str(jobs)]
    if model:
        argv += ["--embed-model", model]
    if not embed:
        argv.append("--no-embed")
    res = run_cmd(argv, env=env, timeout=timeout)
    if res.returncode != 0 or res.timed_out:
        raise SystemExit(f"build failed ({engine}, jobs {jobs}): {res.stderr[-3000:]}")
    out = json.loads(res.stdout)
    return {"wall_s": round(res.wall_s, 2), "files": out["files_parsed"], "lines": out["lines"],
            "phases": out.get("phases", {}), "embedding": out.get("embedding") or {}}


def cli_json(args: list[str], env: dict, timeout: float = 3600) -> tuple[dict, float]:
    res = run_cmd([*repoctx_command(), *args], env=env, timeout=timeout)
    if res.returncode != 0 or res.timed_out:
        raise SystemExit(f"`repoctx {' '.join(args)}` failed: {res.stderr[-3000:]}")
    return json.loads(res.stdout), round(res.wall_s, 2)


def ray_start_overhead(runs: int) -> dict:
    """Seconds to start a local 2-CPU Ray and run its first task, in a fresh process each run."""
    code = (
        "import time, ray; t=time.perf_counter(); "
        "ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False);"
        " t1=time.perf_counter(); ray.get(ray.remote(lambda: 1).remote()); t2=time.perf_counter();"
        " ray.shutdown(); print(t1-t, t2-t1)"
    )
    inits, first = [], []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        a, b = map(float, out.stdout.split()[-2:])
        inits.append(a)
        first.append(b)
    return {"ray_init_s": median(inits), "first_task_s": median(first)}


def graph_engines(repo: Path, tmp: Path, env: dict, runs: int) -> dict:
    out = {}
    for label, engine, jobs in (("local_1", "local", 1), ("local_2", "local", 2),
                                ("ray_1", "ray", 1), ("ray_2", "ray", 2)):
        walls, last = [], None
        for i in range(runs):
            idx = tmp / f"graph-{label}-{i}"
            log(f"graph build {label} run {i + 1}/{runs}")
            last = build(repo, idx, env, engine=engine, jobs=jobs)
            walls.append(last["wall_s"])
            shutil.rmtree(idx, ignore_errors=True)
        wall = median(walls)
        out[label] = {"wall_s": wall, "runs": walls, "files": last["files"], "lines": last["lines"],
                      "files_per_s": round(last["files"] / wall, 1),
                      "lines_per_s": round(last["lines"] / wall), "phases": last["phases"]}
    return out


def embed_engines(repo: Path, tmp: Path, env: dict) -> dict:
    """chunks/s of the embedding phase per engine; ``driver_ceiling`` runs a model-free
    embedder (hashing:384) so only the driver's work remains: reading texts, hash lookups,
    Lance and SQLite writes — the rate no number of workers can exceed."""
    out = {}
    for label, engine, jobs, model in (("local_2", "local", 2, None), ("ray_1", "ray", 1, None),
                                       ("ray_2", "ray", 2, None),
                                       ("driver_ceiling", "local", 2, "hashing:384")):
        log(f"embedding build {label}")
        res = build(repo, tmp / f"embed-{label}", env, engine=engine, jobs=jobs, embed=True,
                    model=model)
        e = res["embedding"]
        out[label] = {"wall_s": res["wall_s"], "chunks": e.get("embedded"),
                      "embed_s": round(e.get("seconds", 0), 2),
                      "chunks_per_s": round(e["embedded"] / e["seconds"], 1) if e.get("seconds") else None,
                      "phases": res["phases"]}
    return out


def snapshot_roundtrip(repo: Path, tmp: Path, env: dict, cold_index: Path, embed: bool = True) -> dict:
    """Push the index of commit A; at commit B (one file edited) in a fresh clone, pull vs cold."""
    tmp.mkdir(parents=True, exist_ok=True)
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto logs every request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        s3_env = {**env, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                  "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true"}
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                     aws_access_key_id="bench", aws_secret_access_key="bench").create_bucket(
            Bucket="repoctx-snapshots")
        uri = "s3://repoctx-snapshots/team"
        log("push")
        pushed, push_s = cli_json(["index", "push", str(repo), "--to", uri, "--index-dir",
                                   str(cold_index), "--json", "-q"], s3_env)
        clone = tmp / "clone"
        _git(tmp, "clone", "-q", str(repo), str(clone))
        edit = sorted(clone.rglob("*.py"))[len(list(clone.rglob("*.py"))) // 2]
        with edit.open("a") as fh:
            fh.write("\n\ndef _bench_added_after_snapshot():\n    return 1\n")
        _git(clone, "commit", "-q", "-am", "B")
        log("pull at commit B")
        pulled, pull_s = cli_json(["index", "pull", str(clone), "--from", uri, "--index-dir",
                                   str(tmp / "pulled"), "--json", "-q"], s3_env)
        log("cold build at commit B")
        cold = build(clone, tmp / "cold-B", env, embed=embed)
        pushed = {k: pushed.get(k) for k in ("bytes_uploaded", "files", "symbols", "chunks", "vectors", "graph")}
        return {"push_s": push_s, "pushed": pushed, "pull_s": pull_s, "pulled": pulled,
                "cold_build_s": cold["wall_s"], "cold_chunks_embedded": cold["embedding"].get("embedded"),
                "speedup": round(cold["wall_s"] / pull_s, 1) if pull_s else None,
                "edited_file": str(edit.relative_to(clone))}
    finally:
        server.stop()


#: Issue 41: a Ray build's driver spends at most this share of its workers' CPU.
TARGET_DRIVER_SHARE = 0.10
#: The driver's functions whose CPU seconds `--driver-share` reports (cumulative: a function's
#: figure includes what it calls). (file suffix, function name).
DRIVER_PARTS = {
    "load": ("phases/sharded.py", "load"),
    "merge_parsed": ("graph/shards.py", "merge_parsed"),
    "merge_resolved": ("graph/shards.py", "merge_resolved"),
    "read_files": ("parse/worker.py", "load_file"),
    "task_results": ("phases/ray_shards.py", "_get"),
    "write_shard_bytes": ("phases/ray_shards.py", "_parsed"),
    "write_resolved_bytes": ("phases/ray_shards.py", "_resolved"),
    "name_table": ("phases/ray_shards.py", "name_table"),
    "resolve_inherit": ("graph/write.py", "resolve_inherit"),
    "submit": ("ray/remote_function.py", "_remote"),
}
_PROFILE = r"""
import cProfile, json, pstats, sys, time
from indexer.build import build
from indexer.config import load_config
root, index_dir, jobs, parts = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
cfg = load_config(root, jobs=jobs, engine="ray", index_dir=index_dir)
prof = cProfile.Profile(time.process_time)
prof.enable()
stats = build(cfg, embed=False)
prof.disable()
cpu = {}
for (file, _, name), (_, _, _, cum, _) in pstats.Stats(prof).stats.items():
    for label, (suffix, fn) in parts.items():
        if file.endswith(suffix) and name == fn:
            cpu[label] = round(cpu.get(label, 0.0) + cum, 3)
print(json.dumps({"phases": stats.phases, "cpu_s": cpu}))
"""


def driver_profile(repo: Path, index_dir: Path, env: dict, jobs: int) -> dict:
    """A Ray build of ``repo`` in a fresh process under cProfile: the CPU seconds of each of
    `DRIVER_PARTS` in the driver (the profiler slows Python code, not SQLite's)."""
    res = run_cmd([sys.executable, "-c", _PROFILE, str(repo), str(index_dir), str(jobs),
                   json.dumps(DRIVER_PARTS)], env=env, timeout=3600)
    if res.returncode != 0 or res.timed_out:
        raise SystemExit(f"profiled Ray build failed: {res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def driver_share(files: int, jobs: int, runs: int, tmp: Path) -> dict:
    """`--driver-share`: see the module docstring."""
    from benchmarks.build_scaling import copy_files, indexable_files, median_phases, sample_files

    corpus = CORPORA["large"]
    env = {**corpus.env(), "HF_HUB_OFFLINE": "1"}
    log(f"sampling {files} files of the large corpus")
    paths, sampling = sample_files(indexable_files(corpus), files)
    repo = tmp / "share"
    repo.mkdir()
    copy_files(corpus.root, paths, repo)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "A")
    builds: dict[str, list[dict]] = {"local": [], "ray": []}
    for i in range(runs):  # interleaved: load from others falls on both engines alike
        for engine in builds:
            log(f"{engine} build, jobs {jobs}, run {i + 1}/{runs}")
            idx = tmp / f"share-{engine}-{i}"
            builds[engine].append(build(repo, idx, env, engine=engine, jobs=jobs))
            shutil.rmtree(idx, ignore_errors=True)
    out: dict = {"files": len(paths), "sampling": sampling, "jobs": jobs, "runs": runs}
    # Every figure is the median over the runs of that figure, each run's beside it: a ratio
    # of medians, or one run's phases next to another's ratio, would mix runs.
    for engine, rows in builds.items():
        out[engine] = {"wall_s": median([r["wall_s"] for r in rows]),
                       "runs": [r["wall_s"] for r in rows], "files_parsed": rows[-1]["files"],
                       "phases": median_phases([r["phases"] for r in rows]),
                       "phases_by_run": [r["phases"] for r in rows]}
    per_run = []
    for r in builds["ray"]:
        p = r["phases"]
        if p.get("cpu:workers"):
            driver, write = p["cpu:driver"], p.get("write")
            per_run.append({
                "cpu_driver_s": driver, "cpu_workers_s": p["cpu:workers"],
                "ratio": round(driver / p["cpu:workers"], 4), "merge_write_s": write,
                "merge_share_of_driver": (round(write / driver, 3)
                                          if write is not None and driver else None)})

    def med(key: str) -> float | None:
        return median([run[key] for run in per_run if run[key] is not None])

    ratio = med("ratio")
    out["driver_share"] = {
        "cpu_driver_s": med("cpu_driver_s"), "cpu_workers_s": med("cpu_workers_s"),
        "ratio": ratio, "target": TARGET_DRIVER_SHARE,
        "met": ratio is not None and ratio <= TARGET_DRIVER_SHARE,
        "merge_write_s": med("merge_write_s"),
        "merge_share_of_driver": med("merge_share_of_driver"),
        "runs": per_run,
        "note": "each figure is the median over the Ray runs of that figure (`runs`: each run's); "
                "`write` is the driver's merge seconds (wall, FTS5 tokenization included): "
                "CPU-bound, so its share of cpu:driver is what the merges cost the driver",
    }
    out["ray_over_local_wall"] = (round(out["ray"]["wall_s"] / out["local"]["wall_s"], 3)
                                  if out["local"]["wall_s"] else None)
    log("profiled Ray build (driver CPU by part)")
    prof = driver_profile(repo, tmp / "share-profile", env, jobs)
    cpu = prof["cpu_s"]
    load = cpu.get("load") or 0.0
    out["driver_cpu_by_part"] = {
        "seconds": cpu,
        "share_of_load": {k: round(v / load, 3) for k, v in cpu.items() if load and k != "load"},
        "profiled_phases": prof["phases"],
        "note": "cumulative cProfile CPU seconds of the driver's functions (nested: task_results "
                "includes Ray's deserialization, write_*_bytes include task_results); the profiler "
                "inflates Python-heavy parts",
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", choices=sorted(CORPORA), default="stdlib")
    ap.add_argument("--runs", type=int, default=1, help="graph builds per engine (median)")
    ap.add_argument("--skip", nargs="*", default=[], choices=["graph", "embed", "snapshot"])
    ap.add_argument("--quick", action="store_true",
                    help="smoke run on the `json` package only (checks the script, not a figure)")
    ap.add_argument("--driver-share", type=int, metavar="FILES", default=0,
                    help="only the Ray driver's CPU share on a FILES-file sample of the large corpus")
    ap.add_argument("--jobs", type=int, default=2, help="jobs of the --driver-share builds")
    args = ap.parse_args()
    corpus = CORPORA[args.corpus]
    tmp = bench_tmpdir("scale")
    if args.driver_share:
        try:
            share = driver_share(args.driver_share, args.jobs, args.runs, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(json.dumps({"benchmark": "scale_out:driver_share", "corpus": "large",
                          "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                      "load_avg": os.getloadavg()[0]},
                          "repoctx": git_revision(), **share}, indent=2))
        return
    env = {**corpus.env(), "HF_HUB_OFFLINE": "1"}
    env.pop("REPOCTX_EXCLUDE", None)  # the copy holds only what the corpus indexes
    if args.quick:  # a handful of files would otherwise stay in-process even with --engine ray
        env["REPOCTX_RAY_MIN_WORK"] = "1"
    result: dict = {"benchmark": "scale_out", "corpus": corpus.name, "machine": {
        "cpus": os.cpu_count(), "python": platform.python_version(),
        "load_avg_start": os.getloadavg()[0]}, "repoctx": git_revision()}
    try:
        log("copying the corpus into a git repository")
        only = ("json",) if args.quick else ()
        full = make_repo(corpus.root, tmp / "corpus", only=only, exclude=corpus.exclude)
        result["ray_start"] = ray_start_overhead(1 if args.quick else 3)
        if "graph" not in args.skip:
            g = graph_engines(full, tmp, env, args.runs)
            result["graph_build"] = g
            result["ray_overhead"] = {
                "ray_1_minus_local_1_s": round(g["ray_1"]["wall_s"] - g["local_1"]["wall_s"], 2),
                "ray_2_over_local_2": round(g["ray_2"]["wall_s"] / g["local_2"]["wall_s"], 2),
                "ray_speedup_1_to_2_workers": round(g["ray_1"]["wall_s"] / g["ray_2"]["wall_s"], 2),
            }
        subset = make_repo(corpus.root, tmp / "subset", only=only or EMBED_SUBSET)
        if "embed" not in args.skip:
            result["embedding"] = {"subset": list(EMBED_SUBSET), **embed_engines(subset, tmp, env)}
        if "snapshot" not in args.skip:
            cold_a = tmp / "embed-local_2"
            if not cold_a.exists():
                build(subset, cold_a, env, embed=True)
            result["snapshot"] = snapshot_roundtrip(subset, tmp / "snap-subset", env, cold_a)
            log("graph-only snapshot of the whole corpus")
            cold_full = tmp / "graph-full-A"
            build(full, cold_full, env)
            result["snapshot_graph_only"] = snapshot_roundtrip(
                full, tmp / "snap-full", env, cold_full, embed=False)
        result["machine"]["load_avg_end"] = os.getloadavg()[0]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    log(f"done in {time.perf_counter() - t0:.0f}s")
