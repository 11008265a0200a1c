"""How the full build scales with cores and with the tree (issue 41): the `--jobs-scaling` and
`--tree-growth` parts of `benchmarks/index_build.py`, and the fits they report.

`--jobs-scaling`: `repoctx index build --full --no-embed --jobs N --json` on a corpus for each N,
`--runs` times into fresh index dirs, runs interleaved across N (run 1 of every N, then run 2 …)
so that load from others on a shared machine falls on every N alike. Reported: the whole
command's wall median per N, its speed-up against N=1 of the same run and its ratio to ctags,
the build's own `phases` (medians; `serial:<phase>` keys — the driver's serial seconds — when the
build reports them), and per phase an Amdahl fit t(N) = s + p/N.

`--tree-growth`: subsets of the `large` corpus (stdlib + site-packages) of 1k, 5k, 25k … files,
copied into a temp dir; a full build of each at the default jobs, and how its time grows.

The subsets keep packages whole: the indexable files (repoctx's own discovery, run from the
source the builds run) are grouped into units — a top-level directory, or a package directly
under `site-packages/` — the units are taken in an order fixed by a hash of their names while
whole units fit, and the one unit that would overflow gives a sorted prefix of its files to reach
the size exactly. Whole packages keep imports and calls resolvable within the subset, as in a
real repository, where a sorted prefix of all paths would cut most packages in the middle and
would take the alphabetically first packages only.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks._common import (
    CORPORA,
    Corpus,
    bench_tmpdir,
    build_argv,
    log,
    median,
    rounded,
    run_cmd,
)

DEFAULT_JOBS = (1, 2, 4, 8, 16)
DEFAULT_SIZES = (1000, 5000, 25000)
#: Targets from issue 41.
TARGET_JOBS2_SPEEDUP = 1.8
TARGET_JOBS16_SPEEDUP = 6.0
#: Build / ctags at the highest jobs: no worse than the 34x measured on the 2-core machine
#: (stdlib, --jobs 2); within 6x on the 16-core device (its 25k-file site-packages, --jobs 16).
TARGET_CTAGS_RATIO_SMALL_MACHINE = 34.0
TARGET_CTAGS_RATIO_16_CORES = 6.0
SERIAL_PREFIX = "serial:"


class ScalingError(RuntimeError):
    pass


def int_list(text: str) -> list[int]:
    """`1,2,4` -> [1, 2, 4] (sorted, unique, each at least 1)."""
    values = sorted({int(v) for v in text.split(",") if v.strip()})
    if not values or values[0] < 1:
        raise ValueError(f"expected a comma-separated list of positive integers, got {text!r}")
    return values


def default_jobs(cpus: int | None) -> list[int]:
    """The default jobs values that this machine's cores can run (1 always)."""
    return [j for j in DEFAULT_JOBS if j <= max(cpus or 1, 1)]


# --------------------------------------------------------------------------- fits


def amdahl_fit(points: list[tuple[int, float]]) -> dict | None:
    """Least-squares fit of t(j) = s + p/j to (jobs, seconds) points, with s and p clamped at 0
    (a negative serial part means the data cannot tell one; a negative parallel part, a phase
    that gets no faster with more jobs). ``serial_share`` is s / t(1) of the fit."""
    pts = sorted(points)
    if len({j for j, _ in pts}) < 2:
        return None
    xs = [1.0 / j for j, _ in pts]
    ys = [t for _, t in pts]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    p = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    s = my - p * mx
    clamped = None
    if s < 0:
        s, p, clamped = 0.0, sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs), "serial"
    if p < 0:
        s, p, clamped = my, 0.0, "parallel"
    residuals = [y - (s + p * x) for x, y in zip(xs, ys, strict=True)]
    t1 = s + p
    return {
        "serial_seconds": round(s, 4),
        "parallel_seconds_at_1_job": round(p, 4),
        "serial_share": round(s / t1, 4) if t1 > 0 else None,
        "max_abs_residual_seconds": round(max(abs(r) for r in residuals), 4),
        "clamped": clamped,
        "points": len(pts),
    }


def linear_fit(xs: list[float], ys: list[float]) -> dict | None:
    """y = a + b·x by least squares, with R² (1.0 when the points are on a line)."""
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    a = my - b * mx
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys, strict=True))
    ss_tot = sum((y - my) ** 2 for y in ys)
    return {
        "intercept": round(a, 4),
        "slope": b,
        "r2": round(1.0 - ss_res / ss_tot, 5) if ss_tot > 0 else 1.0,
        "points": len(xs),
    }


def median_phases(runs: list[dict]) -> dict:
    """Each key's median over the runs that report a number for it."""
    keys = sorted({k for r in runs for k in r})
    return {k: median([r[k] for r in runs if isinstance(r.get(k), int | float)]) for k in keys}


def per_run(figure, runs: list[dict]) -> dict | None:
    """``figure`` (`serial_shares`, `driver_cpu`) of each run's phases, then each key's median
    over the runs: a ratio of two medians would pair one run's numerator with another's
    denominator."""
    figures = [f for f in (figure(r) for r in runs) if f]
    return median_phases(figures) if figures else None


def serial_shares(phases: dict[str, float]) -> dict[str, float] | None:
    """serial:<phase> / <phase> for the phases the build reports a serial part of; None when
    the build reports none (a build from before issue 41's sharded path)."""
    out = {}
    for key, serial in phases.items():
        if key.startswith(SERIAL_PREFIX):
            wall = phases.get(key[len(SERIAL_PREFIX) :])
            out[key[len(SERIAL_PREFIX) :]] = round(serial / wall, 4) if wall else None
    return out or None


def driver_cpu(phases: dict[str, float]) -> dict | None:
    """The driver's CPU seconds against its workers' (`cpu:driver`, `cpu:workers`, reported by
    a sharded load): issue 41 asks a Ray driver for at most 10 % of the workers' total."""
    driver, workers = phases.get("cpu:driver"), phases.get("cpu:workers")
    if driver is None or workers is None:
        return None
    return {"driver_seconds": driver, "workers_seconds": workers,
            "driver_to_workers": round(driver / workers, 4) if workers else None}


# --------------------------------------------------------------------------- builds


def _build(root: Path, index_dir: Path, env: dict, jobs: int | None, embed: bool,
           timeout: float) -> tuple[dict, dict]:
    argv = build_argv(root, index_dir, full=True, embed=embed)
    if jobs is not None:
        argv += ["--jobs", str(jobs)]
    res = run_cmd(argv, env=env, cwd=index_dir.parent, timeout=timeout)
    if res.timed_out or res.returncode != 0:
        raise ScalingError(f"build failed (rc {res.returncode}, timed out {res.timed_out}): "
                           f"{res.stderr[-2000:]}")
    stats = json.loads(res.stdout)
    return stats, {"wall": res.wall_s, "cpu": res.cpu_s}


def warm_up(tmp: Path, env: dict, embed: bool) -> None:
    """One untimed build of a two-file tree at 2 jobs, so that the bytecode of the CLI, the
    build and the parser workers is cached before the first timed build (a fresh `--src`
    export has none)."""
    tree = tmp / "warm-tree"
    tree.mkdir()
    (tree / "a.py").write_text("def f():\n    return g()\n")
    (tree / "b.py").write_text("def g():\n    return 1\n")
    _build(tree, tmp / "warm-index", env, 2, embed, 600)
    shutil.rmtree(tree)
    shutil.rmtree(tmp / "warm-index", ignore_errors=True)


def ctags_runs(root: Path, tags: Path, runs: int, excludes: list[str], timeout: float,
               extra: tuple[str, ...] = ()) -> list:
    """``runs`` runs of `ctags -R` over ``root``'s Python into ``tags`` (the last one's left
    there): the anchor of the build benchmarks."""
    results = []
    for _ in range(runs):
        tags.unlink(missing_ok=True)
        res = run_cmd(["ctags", "-R", "-f", str(tags), "--languages=Python", *extra, *excludes,
                       str(root)], timeout=timeout)
        if res.returncode != 0:
            raise ScalingError(f"ctags failed: {res.stderr[-2000:]}")
        results.append(res)
    return results


def ctags_seconds(root: Path, tmp: Path, runs: int, excludes: list[str], timeout: float) -> dict:
    walls = [res.wall_s for res in ctags_runs(root, tmp / "tags", runs, excludes, timeout)]
    (tmp / "tags").unlink(missing_ok=True)
    return {"seconds_median": median(walls), "seconds_runs": rounded(walls)}


def jobs_scaling(corpus: Corpus, jobs: list[int], runs: int, embed: bool, timeout: float,
                 keep: bool) -> dict:
    tmp = bench_tmpdir(f"jobs-{corpus.name}")
    cpus = os.cpu_count() or 1
    log(f"jobs scaling on {corpus.name}: jobs {jobs}, {runs} run(s) each, work dir {tmp}")
    walls: dict[int, list[float]] = {j: [] for j in jobs}
    cpu_s: dict[int, list[float]] = {j: [] for j in jobs}
    phases: dict[int, list[dict]] = {j: [] for j in jobs}
    stats: dict = {}
    try:
        warm_up(tmp, corpus.env(), embed)
        ctags = ctags_seconds(corpus.root, tmp, max(runs, 3), corpus.ctags_excludes(), timeout)
        log(f"  ctags: {ctags['seconds_median']:.2f}s median")
        for r in range(runs):
            for j in jobs:
                index_dir = tmp / f"index-j{j}-r{r}"
                stats, t = _build(corpus.root, index_dir, corpus.env(), j, embed, timeout)
                shutil.rmtree(index_dir, ignore_errors=True)
                walls[j].append(t["wall"])
                cpu_s[j].append(t["cpu"])
                phases[j].append(stats.get("phases") or {})
                log(f"  jobs {j} run {r + 1}/{runs}: {t['wall']:.2f}s wall, {t['cpu']:.2f}s CPU, "
                    f"phases {stats.get('phases')}")
    finally:
        if keep:
            log(f"  kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    wall_med = {j: median(walls[j]) for j in jobs}
    phase_med = {j: median_phases(phases[j]) for j in jobs}
    base = wall_med.get(1)
    ct = ctags["seconds_median"]
    per_jobs = {
        str(j): {
            "wall_seconds_median": wall_med[j],
            "wall_seconds_runs": rounded(walls[j]),
            "cpu_seconds_median": median(cpu_s[j]),
            "speedup_vs_jobs1": round(base / wall_med[j], 3) if base else None,
            "ratio_to_ctags": round(wall_med[j] / ct, 2) if ct else None,
            "phases_median": phase_med[j],
            "serial_share_reported": per_run(serial_shares, phases[j]),
            "driver_cpu": per_run(driver_cpu, phases[j]),
            **({"oversubscribed": f"{j} jobs on {cpus} cores"} if j > cpus else {}),
        }
        for j in jobs
    }
    names = sorted({k for pm in phase_med.values() for k in pm if ":" not in k})
    fits = {
        name: amdahl_fit([(j, phase_med[j][name]) for j in jobs if name in phase_med[j]])
        for name in names
    }
    reported_serial = any(serial_shares(pm) for pm in phase_med.values())
    top = max(jobs)
    return {
        "root": str(corpus.root),
        "exclude": list(corpus.exclude),
        "files": stats.get("files_total"),
        "lines": stats.get("lines"),
        "symbols": stats.get("symbols"),
        "references": stats.get("references"),
        "ctags": ctags,
        "jobs": per_jobs,
        "amdahl": {
            "model": "t(jobs) = s + p/jobs, least squares over the jobs values' medians, s and p "
            "clamped >= 0; serial_share = s / (s + p), the share of the 1-job time that more "
            "jobs cannot shorten",
            "note": (
                "exact from two points (jobs 1 and 2 only, as this machine has "
                f"{cpus} cores): no degrees of freedom to test the model"
                if len(jobs) == 2
                else f"{len(jobs)} points; max_abs_residual says how well the model fits"
            ),
            "build": amdahl_fit([(j, wall_med[j]) for j in jobs]),
            "phases": fits,
        },
        "phases_note": "the build's `phases` are wall seconds per phase as it reports them; "
        "phases that run at once (parse and write) overlap, so they need not add up to the build. "
        "Keys with a colon are not phases: `serial:<phase>` (the driver's serial seconds) and "
        "`cpu:driver`/`cpu:workers` (CPU seconds of a sharded load), left out of the fits",
        "serial_keys_reported": reported_serial,
        "serial_keys_by_jobs": [j for j in jobs if serial_shares(phase_med[j])],
        "serial_keys_note": None if reported_serial else
        "the build's JSON has no `serial:<phase>` keys (a build before issue 41's sharded "
        "path, or the local single-writer path): only the fit estimates serial parts",
        "paths_note": "jobs values without serial keys ran the single-writer path, the others "
        "the sharded one: the fit then spans two designs" if 0 < sum(
            1 for j in jobs if serial_shares(phase_med[j])) < len(jobs) else None,
        "checks": _jobs_checks(wall_med, ct, cpus, top, corpus.name),
    }


def _jobs_checks(wall: dict[int, float], ctags_s: float | None, cpus: int, top: int,
                 corpus: str) -> dict:
    def speedup(j: int) -> float | None:
        return round(wall[1] / wall[j], 3) if 1 in wall and j in wall and wall[j] else None

    def not_measured(j: int) -> str:
        if cpus < j:
            return f"this machine has {cpus} cores: jobs {j} is not measured here"
        return f"jobs 1 and {j} are not both in --jobs-scaling"

    checks = {}
    for j, target, where in ((2, TARGET_JOBS2_SPEEDUP, "stdlib on the 2-core machine"),
                             (16, TARGET_JOBS16_SPEEDUP, "stdlib on the 16-core device")):
        value = speedup(j)
        checks[f"jobs{j}_speedup"] = {
            "value": value,
            "target": f">= {target}",
            "pass": value is not None and value >= target,
            "measure": f"wall median jobs 1 / jobs {j}, whole command",
            "issue_target_for": where,
            **({"measured": False, "reason": not_measured(j)} if value is None else {}),
        }
    if cpus >= 16:
        target, run_for = TARGET_CTAGS_RATIO_16_CORES, ("large", 16)
        target_for = "the 25k-file site-packages tree at --jobs 16 on the 16-core device"
    else:
        target, run_for = TARGET_CTAGS_RATIO_SMALL_MACHINE, ("stdlib", 2)
        target_for = "the stdlib at --jobs 2 on the 2-core machine (today's 34x)"
    ratio = round(wall[top] / ctags_s, 2) if ctags_s else None
    judged = ratio is not None and (corpus, top) == run_for
    checks["ctags_ratio"] = {
        "value": ratio,
        "target": f"<= {target}",
        "pass": ratio <= target if judged else None,
        "measure": f"wall median at jobs {top} / ctags median, corpus {corpus}",
        "issue_target_for": target_for,
        **({} if judged else {"reason": f"the target is for corpus {run_for[0]} at jobs "
                                        f"{run_for[1]}; this ran corpus {corpus} at jobs {top}"}),
    }
    return checks


# --------------------------------------------------------------------------- tree growth


_DISCOVER = (
    "import json, sys\n"
    "from indexer.config import load_config\n"
    "from indexer.parse.discovery import discover\n"
    "d = discover(load_config(sys.argv[1]), skip_unparsable=True)\n"
    "json.dump([f.path for f in d.files], sys.stdout)\n"
)


def indexable_files(corpus: Corpus) -> list[str]:
    """The paths repoctx's discovery lists under the corpus (its exclusions applied), run in a
    subprocess from the source the builds use (``--src`` or the installed tree)."""
    proc = subprocess.run([sys.executable, "-P", "-c", _DISCOVER, str(corpus.root)],
                          capture_output=True, text=True, env=corpus.env(), check=False)
    if proc.returncode != 0:
        raise ScalingError(f"discovery failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def unit_of(path: str) -> str:
    """The package a path belongs to for sampling: its top-level directory, or its directory
    directly under ``site-packages/``; files at either top level form one unit there."""
    parts = path.split("/")
    prefix = ""
    if parts[0] == "site-packages" and len(parts) > 1:
        prefix, parts = "site-packages/", parts[1:]
    return prefix + (parts[0] if len(parts) > 1 else "<files>")


def sample_files(paths: list[str], size: int, seed: str = "repoctx-tree-growth") -> tuple[list[str], dict]:
    """``size`` of ``paths`` (all of them when there are fewer), whole packages first (see the
    module docstring); deterministic for the same paths, size and seed."""
    units: dict[str, list[str]] = {}
    for p in sorted(paths):
        units.setdefault(unit_of(p), []).append(p)
    order = sorted(units, key=lambda u: hashlib.blake2b((seed + u).encode(), digest_size=8).digest())
    chosen: list[str] = []
    n = 0
    for u in order:
        if n + len(units[u]) <= size:
            chosen.append(u)
            n += len(units[u])
    partial, extra = None, []
    if n < size:
        taken = set(chosen)
        partial = next((u for u in order if u not in taken), None)
        if partial is not None:
            extra = units[partial][: size - n]
    files = sorted([f for u in chosen for f in units[u]] + extra)
    return files, {
        "units_whole": len(chosen),
        "units_total": len(units),
        "partial_unit": partial,
        "partial_unit_files": len(extra),
        "capped": size > len(paths),
    }


def copy_files(root: Path, files: list[str], dest: Path) -> int:
    """Copy ``files`` (relative to ``root``) into ``dest`` as regular files: a symlink's
    content is copied, never the link, so the copy cannot reach back into the corpus.
    Returns the bytes copied."""
    total = 0
    for rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / rel, target, follow_symlinks=True)
        total += target.stat().st_size
    return total


def tree_growth(sizes: list[int], runs: int, embed: bool, timeout: float, keep: bool) -> dict:
    corpus = CORPORA["large"]
    tmp = bench_tmpdir("growth")
    log(f"tree growth on subsets of {corpus.root}: sizes {sizes}, work dir {tmp}")
    paths = indexable_files(corpus)
    log(f"  {len(paths)} indexable files in the large corpus")
    rows: dict[str, dict] = {}
    try:
        warm_up(tmp, corpus.env(), embed)
        for size in sizes:
            files, how = sample_files(paths, size)
            tree = tmp / f"tree-{len(files)}"
            copied = copy_files(corpus.root, files, tree)
            sub = Corpus(f"large-{len(files)}", tree)
            ctags = ctags_seconds(tree, tmp, 3, [], timeout)
            walls, cpus, phases, stats = [], [], [], {}
            for r in range(runs):
                index_dir = tmp / f"index-{len(files)}-r{r}"
                stats, t = _build(tree, index_dir, sub.env(), None, embed, timeout)
                shutil.rmtree(index_dir, ignore_errors=True)
                walls.append(t["wall"])
                cpus.append(t["cpu"])
                phases.append(stats.get("phases") or {})
                log(f"  {len(files)} files run {r + 1}/{runs}: {t['wall']:.2f}s wall, "
                    f"{stats.get('files_total')} indexed, {stats.get('lines')} lines")
            if not keep:
                shutil.rmtree(tree, ignore_errors=True)
            pm = median_phases(phases)
            wall = median(walls)
            rows[str(size)] = {
                "requested": size,
                "sampled_files": len(files),
                "sample": how,
                "copied_mb": round(copied / 2**20, 1),
                "files_indexed": stats.get("files_total"),
                "lines": stats.get("lines"),
                "symbols": stats.get("symbols"),
                "references": stats.get("references"),
                "skipped": stats.get("skipped"),
                "wall_seconds_median": wall,
                "wall_seconds_runs": rounded(walls),
                "cpu_seconds_median": median(cpus),
                "seconds_per_1k_files": round(1000 * wall / stats["files_total"], 3)
                if stats.get("files_total") else None,
                "seconds_per_100k_lines": round(1e5 * wall / stats["lines"], 3)
                if stats.get("lines") else None,
                "ctags_seconds_median": ctags["seconds_median"],
                "ratio_to_ctags": round(wall / ctags["seconds_median"], 2)
                if ctags["seconds_median"] else None,
                "phases_median": pm,
                "phase_share_of_build": {k: round(v / wall, 3) for k, v in pm.items()
                                         if ":" not in k and wall},
                "serial_share_reported": per_run(serial_shares, phases),
                "driver_cpu": per_run(driver_cpu, phases),
            }
    finally:
        if keep:
            log(f"  kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return {
        "corpus": f"{corpus.name}: {corpus.root} (stdlib + site-packages)",
        "files_listed_by_discovery": len(paths),
        "unreachable_sizes": [s for s in sizes if s > len(paths)],
        "files_note": "sizes count the files discovery lists; `files_indexed` is what the build "
        "kept (it skips some listed files by content: no_grammar, binary, generated)",
        "sampling": "whole packages (top-level dirs; dirs directly under site-packages/) in an "
        "order fixed by a hash of their names, while they fit; one package's sorted prefix fills "
        "the rest. Copied as regular files (symlinks followed) into a temp dir.",
        "jobs": f"default (one per core: {os.cpu_count()})",
        "sizes": rows,
        "linearity": linearity(rows),
    }


def linearity(rows: dict[str, dict]) -> dict | None:
    """t = a + b·files and t = a + b·lines fits over the sizes, and how much the cost per file
    (per line) at the largest size differs from the smallest (1.0: linear)."""
    pts = [(r["files_indexed"], r["lines"], r["wall_seconds_median"]) for r in rows.values()
           if r.get("files_indexed") and r.get("wall_seconds_median")]
    if len(pts) < 2:
        return None
    pts.sort()
    (f0, l0, t0), (f1, l1, t1) = pts[0], pts[-1]
    by_files = linear_fit([p[0] for p in pts], [p[2] for p in pts])
    by_lines = linear_fit([p[1] for p in pts], [p[2] for p in pts])
    if by_files:
        by_files["seconds_per_1k_files"] = round(1000 * by_files.pop("slope"), 4)
    if by_lines:
        by_lines["seconds_per_100k_lines"] = round(1e5 * by_lines.pop("slope"), 4)
    return {
        "fit_by_files": by_files,
        "fit_by_lines": by_lines,
        "per_file_cost_ratio_largest_to_smallest": round((t1 / f1) / (t0 / f0), 3),
        "per_line_cost_ratio_largest_to_smallest": round((t1 / l1) / (t0 / l0), 3) if l0 and l1 else None,
        "note": "exact from two points" if len(pts) == 2 else
        "R² near 1 and cost ratios near 1 mean linear growth; the subsets differ in content "
        "(packages), so per-line cost is the fairer of the two ratios",
    }
