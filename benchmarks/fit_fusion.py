"""Fit the fusion weights (`retrieval/fusion_weights.json`) from a localization dump, with
cross-validation by repository.

    .venv/bin/python -m benchmarks.localization --tasks tasks.jsonl --out loc.jsonl --dump dump.jsonl
    .venv/bin/python -m benchmarks.fit_fusion dump.jsonl --write retrieval/fusion_weights.json

The model is a conditional logit: per task, a softmax over the candidate files (every file some
signal hit) of a weighted sum of their features (`retrieval.fusion`), trained to put the changed
files first; L2-regularised. Units (definitions) get a second model over their own features and
their file's fused standing, fitted after the file model. Each fold holds out one whole
repository: the weights are fitted on the others and scored on it, so the figures say how the
weights do on a repository they never saw (the held-out tasks of a review are exactly that).
Prints one JSON object: the fold-wise and pooled cross-validated figures next to equal-weight
reciprocal rank fusion on the same folds, the regularisation chosen, and the final weights
(fitted on every task).

Refit on your own history: run the benchmark on tasks of your repositories (the same record
format: an issue or commit message and the files and functions the fix changed), then this.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "benchmarks"

import numpy as np  # noqa: E402

from benchmarks._common import log  # noqa: E402
from retrieval.fusion import FusionModel, file_candidates, fuse, unit_candidates  # noqa: E402
from retrieval.signals import Hit  # noqa: E402
from retrieval.units import Unit, UnitCache, holes_of  # noqa: E402

KS = (1, 5, 10)
LAMBDAS = (0.01, 0.03, 0.1, 0.3, 1.0)


class DumpUnits(UnitCache):
    """`retrieval.units.UnitCache` over the units a dump recorded (no index needed)."""

    def __init__(self, units: dict[str, list]) -> None:
        super().__init__(None)
        for path, rows in units.items():
            out = []
            for qual, local, kind, start, end, own in rows:
                holes = None
                if own is not None:  # the lines it owns, as ranges: the holes are the rest
                    gaps, cur = [], start
                    for a, b in own:
                        if a > cur:
                            gaps.append((cur, a - 1))
                        cur = max(cur, b + 1)
                    if cur <= end:
                        gaps.append((cur, end))
                    holes = holes_of(start, end, gaps)
                out.append(Unit(qual, local, path, kind, start, end, holes))
            self._units[path] = out

    def of(self, path: str) -> list[Unit]:
        return self._units.get(path, [])


def load(path: Path, drop: set[str]) -> list[dict]:
    """The dumped tasks (a task dumped twice by a resumed run counts once: the last)."""
    by_id: dict[str, dict] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            d = json.loads(line)
            by_id[d["instance_id"]] = d
    tasks = []
    for d in by_id.values():
        d["runs"] = {
            name: [Hit(lv, p, sc, sym or "", cid, a or 0, b or 0) for lv, p, sc, sym, cid, a, b in hs]
            for name, hs in d["hits"].items()
            if name not in drop
        }
        d["cache"] = DumpUnits(d["units"])
        tasks.append(d)
    return tasks


# -- candidates and orders ------------------------------------------------------------------


def file_cands(task: dict):
    cands = file_candidates(task["runs"])
    gold = set(task["gold_files"])
    labels = np.array([p in gold for p, _, _ in cands], dtype=float)
    return cands, labels


def matrix(feats: list[dict], names: list[str]) -> np.ndarray:
    x = np.zeros((len(feats), len(names)))
    index = {n: i for i, n in enumerate(names)}
    for r, f in enumerate(feats):
        for k, v in f.items():
            j = index.get(k)
            if j is not None:
                x[r, j] = v
    return x


def fit_logit(groups: list[tuple[np.ndarray, np.ndarray]], dim: int, lam: float) -> np.ndarray:
    """Conditional logit: maximise the summed log-probability of the gold candidates under a
    per-group softmax, minus lam * |w|^2."""
    from scipy.optimize import minimize

    usable = [(x, y) for x, y in groups if y.sum() > 0 and len(y) > 1]

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        total, grad = lam * float(w @ w), 2 * lam * w
        for x, y in usable:
            s = x @ w
            s -= s.max()
            p = np.exp(s)
            p /= p.sum()
            gold = y / y.sum()
            total -= float(gold @ np.log(p + 1e-12))
            grad -= x.T @ (gold - p)
        n = max(len(usable), 1)
        return total / n, grad / n

    res = minimize(loss, np.zeros(dim), jac=True, method="L-BFGS-B", options={"maxiter": 500})
    return res.x


def hits_at(order: list[str], gold: set[str]) -> dict[str, bool]:
    return {f"@{k}": any(p in gold for p in order[:k]) for k in KS}


def ranking(task: dict, file_weights, unit_weights):
    return fuse(task["runs"], None, FusionModel(file_weights, unit_weights, "cv"),
                cache=task["cache"])


def unit_cands(task: dict, file_weights):
    r = fuse(task["runs"], None, FusionModel(file_weights, {}, "cv"), cache=task["cache"])
    order = [f.path for f in r.files]
    score = {f.path: f.score for f in r.files}
    cands = [c for c in unit_candidates(task["runs"], task["cache"], order, score) if c[0].kind != "module"]
    gold = set(task["gold_functions"])
    labels = np.array([f"{u.path}::{u.local}" in gold for u, _, _ in cands], dtype=float)
    return cands, labels


# -- cross-validation ------------------------------------------------------------------------


#: Which per-signal features the model may use (``--features``); the rest are left at 0.
KINDS = ("rr", "rel", "n")


def feature_names(tasks: list[dict], level: str, file_weights=None) -> list[str]:
    names: set[str] = set()
    for t in tasks:
        cands = file_cands(t)[0] if level == "file" else unit_cands(t, file_weights)[0]
        for _, f, _ in cands:
            names.update(f)
    per_signal = {n for n in names if not n.startswith(("file.", "kind.", "size"))}
    return sorted(n for n in names if n not in per_signal or n.rsplit(".", 1)[1] in KINDS)


def fit_files(tasks: list[dict], lam: float, names: list[str]) -> dict[str, float]:
    groups = []
    for t in tasks:
        cands, y = file_cands(t)
        groups.append((matrix([f for _, f, _ in cands], names), y))
    w = fit_logit(groups, len(names), lam)
    return {n: round(float(v), 5) for n, v in zip(names, w, strict=True) if abs(v) > 1e-6}


def fit_units(tasks: list[dict], lam: float, names: list[str], file_weights) -> dict[str, float]:
    groups = []
    for t in tasks:
        if not t["gold_functions"]:
            continue
        cands, y = unit_cands(t, file_weights)
        groups.append((matrix([f for _, f, _ in cands], names), y))
    w = fit_logit(groups, len(names), lam)
    return {n: round(float(v), 5) for n, v in zip(names, w, strict=True) if abs(v) > 1e-6}


def score_tasks(tasks, file_weights, unit_weights) -> list[dict]:
    rows = []
    for t in tasks:
        r = ranking(t, file_weights, unit_weights)
        f = hits_at([x.path for x in r.files], set(t["gold_files"]))
        row = {"instance_id": t["instance_id"], "source": t["source"], "repo": t["repo"],
               **{f"file{k}": v for k, v in f.items()}}
        if t["gold_functions"]:
            units = [f"{x.unit.path}::{x.unit.local}" for x in r.units if x.unit.kind != "module"]
            u = hits_at(units, set(t["gold_functions"]))
            row.update({f"func{k}": v for k, v in u.items() if k != "@1"})
        rows.append(row)
    return rows


def pct(rows: list[dict]) -> dict:
    out: dict = {"tasks": len(rows)}
    for key in ("file@1", "file@5", "file@10", "func@5", "func@10"):
        vals = [r[key] for r in rows if key in r]
        out[key] = round(100 * sum(vals) / len(vals), 1) if vals else None
    return out


def report(rows: list[dict]) -> dict:
    out = {src: pct([r for r in rows if r["source"] == src]) for src in sorted({r["source"] for r in rows})}
    out["overall"] = pct(rows)
    return out


def cross_validate(tasks: list[dict], lam_file: float, lam_unit: float) -> tuple[list[dict], dict]:
    repos = sorted({t["repo"] for t in tasks})
    names_f = feature_names(tasks, "file")
    rows, folds = [], {}
    for repo in repos:
        train = [t for t in tasks if t["repo"] != repo]
        test = [t for t in tasks if t["repo"] == repo]
        wf = fit_files(train, lam_file, names_f)
        names_u = feature_names(train, "unit", wf)
        wu = fit_units(train, lam_unit, names_u, wf)
        fold = score_tasks(test, wf, wu)
        folds[repo] = pct(fold)
        rows += fold
    return rows, folds


def main(argv: list[str] | None = None) -> None:
    global KINDS
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dump", help="JSONL written by benchmarks/localization.py --dump")
    p.add_argument("--write", default=None, help="write the final weights here")
    p.add_argument("--drop", default="", help="signals to leave out (comma-separated)")
    p.add_argument("--lambdas", default=",".join(str(x) for x in LAMBDAS))
    p.add_argument("--variants", default="semantic+semantic_local",
                   help="also fit without these signals, for searches that cannot run them "
                        "(comma-separated; a+b drops both in one variant; '' for none; default: "
                        "without vectors, i.e. both vector signals)")
    p.add_argument("--features", default="rr,rel,n",
                   help="per-signal features to fit (of rr, rel, n, top1, top3)")
    args = p.parse_args(argv)
    KINDS = tuple(args.features.split(","))
    tasks = load(Path(args.dump), {s for s in args.drop.split(",") if s})
    log(f"{len(tasks)} tasks")
    lams = [float(x) for x in args.lambdas.split(",")]
    rrf_rows = score_tasks(tasks, {}, {})
    tried = {}
    best = None
    for lam in lams:
        rows, folds = cross_validate(tasks, lam, lam)
        rep = report(rows)
        tried[str(lam)] = {"cv": rep, "folds": folds}
        o = rep["overall"]
        key = (o["file@1"] or 0) + (o["file@5"] or 0) + (o["file@10"] or 0) + (o["func@10"] or 0)
        log(f"lambda {lam}: {o}")
        if best is None or key > best[0]:
            best = (key, lam)
    lam = best[1]
    names_f = feature_names(tasks, "file")
    wf = fit_files(tasks, lam, names_f)
    names_u = feature_names(tasks, "unit", wf)
    wu = fit_units(tasks, lam, names_u, wf)
    result = {
        "tasks": len(tasks),
        "repositories": sorted({t["repo"] for t in tasks}),
        "rrf_same_tasks": report(rrf_rows),
        "lambda": lam,
        "cross_validated": tried[str(lam)]["cv"],
        "folds_by_held_out_repository": tried[str(lam)]["folds"],
        "all_lambdas": {k: v["cv"]["overall"] for k, v in tried.items()},
        "in_sample": report(score_tasks(tasks, wf, wu)),
        "weights": {"file": wf, "unit": wu},
    }
    variants = []
    for spec in [v for v in args.variants.split(",") if v]:
        missing = frozenset(spec.split("+"))
        if not any(m in t["runs"] for t in tasks for m in missing):
            continue  # the dump never ran these signals: the main fit is already without them
        vtasks = [{**t, "runs": {k: v for k, v in t["runs"].items() if k not in missing}}
                  for t in tasks]
        rows, folds = cross_validate(vtasks, lam, lam)
        vf = fit_files(vtasks, lam, feature_names(vtasks, "file"))
        vu = fit_units(vtasks, lam, feature_names(vtasks, "unit", vf), vf)
        result.setdefault("variants", {})["+".join(sorted(missing))] = {
            "cross_validated": report(rows), "folds_by_held_out_repository": folds,
            "in_sample": report(score_tasks(vtasks, vf, vu)), "weights": {"file": vf, "unit": vu},
        }
        log(f"without {spec}: {report(rows)['overall']}")
        variants.append((missing, FusionModel(vf, vu, f"fit_fusion lambda={lam} without {spec}")))
    if args.write:
        model = FusionModel(wf, wu, f"fit_fusion lambda={lam} on {len(tasks)} tasks", tuple(variants))
        data = model.to_json()
        data["fitted_on"] = {"tasks": len(tasks), "repositories": result["repositories"],
                             "cross_validated": result["cross_validated"]}
        for v in data.get("variants", []):
            v["fitted_on"] = {"cross_validated": result["variants"]["+".join(v["missing"])]["cross_validated"]}
        Path(args.write).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
