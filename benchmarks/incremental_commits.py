"""Incremental `index build` between two commits of a real repository: the cost of moving an
index from one commit to another, as a whole command, in both directions.

A work tree of the fetched mirror (`fetch github:OWNER/NAME`, kept outside the project) is
indexed at ``--from``, then checked out alternately at ``--to`` and ``--from``; each checkout is
followed by a timed `repoctx index build --no-embed --json -q` (the graph, not the vectors).
With ``--vs OLD_SRC`` (a `git archive` export of an older commit) every round times both
codes, each on its own index, alternating which goes first: the ratio of medians is the
figure, since these machines are noisy.

    python -m benchmarks.incremental_commits --repo sympy/sympy --runs 5
    python -m benchmarks.incremental_commits --repo sympy/sympy --runs 5 --vs /tmp/old-src

Prints one JSON object: per code and direction the whole-command seconds (runs, median),
the build's own phase seconds (medians), files parsed; and new/old ratios with ``--vs``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

from benchmarks._common import (
    build_argv,
    git_revision,
    log,
    median,
    rounded,
    run_cmd,
    source_label,
    use_source,
    with_source,
)
from benchmarks.loc_repos import DEFAULT_CACHE, _git, materialize

#: sympy 253955e719 (a nsimplify fix) and the commit 280 first-parent steps before master at
#: the time of the issue: 48 files apart, 47 of them Python, with new imports of widely used
#: names (`sin`, `Symbol`, `Mul`) — the shape of change that once re-resolved the whole repo.
DEFAULTS = {"sympy/sympy": ("253955e719", "9aa740f1b33ad095bb913870f0b41fc4cff1f8fd")}


def _build(tree: Path, index_dir: Path, src: Path | None) -> dict:
    use_source(src)
    res = run_cmd(build_argv(tree, index_dir, full=False), env=with_source(dict(os.environ)))
    if res.returncode != 0:
        raise SystemExit(f"index build failed ({res.returncode}): {res.stderr[-2000:]}")
    stats = json.loads(res.stdout)
    return {"wall": res.wall_s, "seconds": stats["seconds"], "parsed": stats["files_parsed"],
            "phases": stats["phases"]}


def _summary(rows: list[dict]) -> dict:
    phases = sorted({k for r in rows for k in r["phases"]})
    return {
        "wall_seconds_median": median([r["wall"] for r in rows]),
        "wall_seconds_runs": rounded([r["wall"] for r in rows], 3),
        "reported_seconds_median": median([r["seconds"] for r in rows]),
        "phases_median": {k: median([r["phases"].get(k, 0.0) for r in rows]) for k in phases},
        "files_parsed": sorted({r["parsed"] for r in rows}),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", default="sympy/sympy", help="owner/name of a fetched mirror")
    ap.add_argument("--from", dest="a", help="first commit (default: the repo's known pair)")
    ap.add_argument("--to", dest="b", help="second commit")
    ap.add_argument("--runs", type=int, default=5, help="rounds; each times both directions")
    ap.add_argument("--src", type=Path, help="run repoctx from this source tree")
    ap.add_argument("--vs", type=Path, help="an older source tree timed beside it, each round")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE / "incremental")
    args = ap.parse_args(argv)
    a, b = args.a, args.b
    if not (a and b):
        if args.repo not in DEFAULTS:
            ap.error(f"--from and --to are needed for {args.repo}")
        a, b = DEFAULTS[args.repo]
    repo = materialize(args.repo, a, cache=args.cache)
    codes = {"new": args.src}
    if args.vs is not None:
        codes["old"] = args.vs
    changed = _git("diff", "--name-only", a, b, git_dir=repo.git_dir).split()
    log(f"{args.repo}: {a[:10]} <-> {b[:10]}, {len(changed)} files apart; tree {repo.tree}")
    rows: dict[str, dict[str, list[dict]]] = {c: {"to": [], "back": []} for c in codes}
    _git("checkout", "-q", "--detach", a, cwd=repo.tree)
    for name, src in codes.items():  # each code brings its own index to `a` first
        _build(repo.tree, repo.index_dir(f"incr-{name}"), src)
    for r in range(args.runs):
        order = list(codes) if r % 2 == 0 else list(reversed(codes))
        for direction, commit in (("to", b), ("back", a)):
            _git("checkout", "-q", "--detach", commit, cwd=repo.tree)
            for name in order:
                row = _build(repo.tree, repo.index_dir(f"incr-{name}"), codes[name])
                rows[name][direction].append(row)
                log(f"round {r + 1}/{args.runs} {direction:4} {name}: {row['wall']:.2f} s "
                    f"({row['parsed']} parsed)")
    use_source(args.src)
    out = {
        "benchmark": "incremental_commits",
        "repoctx": {"source": source_label(), "checkout": git_revision(),
                    "vs": str(args.vs) if args.vs else None},
        "repo": args.repo, "from": a, "to": b, "files_apart": len(changed), "runs": args.runs,
        "cpus": os.cpu_count(), "loadavg_after": list(os.getloadavg()),
        "codes": {name: {d: _summary(v) for d, v in dirs.items()} for name, dirs in rows.items()},
    }
    if "old" in rows:
        out["ratio_new_to_old"] = {
            d: round(statistics.median([r["wall"] for r in rows["new"][d]])
                     / statistics.median([r["wall"] for r in rows["old"][d]]), 3)
            for d in ("to", "back")
        }
    walls = [r["wall"] for d in ("to", "back") for r in rows["new"][d]]
    out["target"] = {"measure": "whole command, median of both directions", "value": median(walls),
                     "target": "<= 3.0", "pass": statistics.median(walls) <= 3.0}
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
