"""Which context pack policy to ship, chosen honestly: leave-one-repository-out over the rows of
`benchmarks/localization.py --out` measured with ``--context-policy`` alternatives.

For each repository, the policy with the best mean context recall on the *other* repositories'
tasks is applied to its tasks; the figures reported are those held-out ones, per source, next to
each policy's own (in-sample) figures. A policy that only fits some repositories loses here.

    .venv/bin/python -m benchmarks.context_cv ROWS.jsonl [--budget 8k] > cv.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.loc_metrics import by_source  # noqa: E402

DEFAULT = "default"


def policies_of(rows: list[dict], budget: str) -> list[str]:
    """The policies every row with a context measured: the default one and the suffixed ones."""
    names: set[str] | None = None
    for r in rows:
        ctx = r.get("context") or {}
        have = {DEFAULT} | {
            k.split("_", 1)[1] for k in ctx if k.startswith(f"ctx@{budget}_") and not k.endswith("_ms")
        }
        names = have if names is None else names & have
    return sorted(names or ())


def value(row: dict, budget: str, policy: str) -> float:
    key = f"ctx@{budget}" if policy == DEFAULT else f"ctx@{budget}_{policy}"
    return float(row["context"][key])


def cross_validate(rows: list[dict], budget: str, policies: list[str]) -> tuple[list[dict], dict]:
    """Held-out rows (each with the policy chosen without its repository) and the choices."""
    by_repo: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_repo[r["repo"]].append(r)
    out, chosen = [], {}
    for repo, held in by_repo.items():
        train = [r for r in rows if r["repo"] != repo]

        def mean(p: str, train=train) -> float:
            return sum(value(r, budget, p) for r in train) / max(len(train), 1)

        # ties go to the default: a change must earn its place
        best = max(policies, key=lambda p: (round(mean(p), 9), p == DEFAULT))
        chosen[repo] = best
        out += [{"source": r["source"], "repo": repo, f"ctx@{budget}": value(r, budget, best)} for r in held]
    return out, chosen


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("rows", help="--out JSONL of benchmarks/localization.py")
    p.add_argument("--budget", default="8k", help="4k, 8k or 16k (default 8k)")
    args = p.parse_args(argv)
    rows = [json.loads(x) for x in Path(args.rows).read_text().splitlines() if x.strip()]
    rows = [r for r in rows if r.get("context")]
    if not rows:
        raise SystemExit(f"{args.rows}: no rows with context recall (run without --no-context)")
    policies = policies_of(rows, args.budget)
    key = f"ctx@{args.budget}"
    held, chosen = cross_validate(rows, args.budget, policies)
    each = {
        pol: by_source([{"source": r["source"], key: value(r, args.budget, pol)} for r in rows], [key])
        for pol in policies
    }
    print(json.dumps({
        "rows": str(args.rows),
        "budget": args.budget,
        "policies": policies,
        "in_sample": each,
        "cross_validated": by_source(held, [key]),
        "chosen_by_held_out_repository": chosen,
        "chosen_count": dict(Counter(chosen.values())),
    }, indent=1))


if __name__ == "__main__":
    main()
