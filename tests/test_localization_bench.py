"""benchmarks/localization.py survives real repositories and keeps what it measured: rows are
written task by task with the full top-50 lists, a task whose commit cannot be checked out is
skipped and counted, and --resume carries on where a run stopped."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from benchmarks import localization
from tests.conftest import git, make_repo, write_files

FILES = {
    "pkg/__init__.py": "",
    "pkg/tax.py": '''
        def compute_tax(amount, region):
            """Tax owed on an amount in a region."""
            return round(amount * rate_for(region), 2)


        def rate_for(region):
            return {"eu": 0.2}[region]
        ''',
    "pkg/cart.py": '''
        from pkg.tax import compute_tax


        def checkout_total(items, region):
            return sum(items) + compute_tax(sum(items), region)
        ''',
    "tests/test_tax.py": "from pkg.tax import compute_tax\n\n\ndef test_tax():\n    assert compute_tax(10, 'eu') == 2\n",
}


def _mirror(tmp_path: Path) -> tuple[Path, str, str]:
    src = make_repo(tmp_path / "src", FILES)
    first = git(src, "rev-parse", "HEAD").strip()
    write_files(src, {"pkg/tax.py": (src / "pkg/tax.py").read_text() + "\n\ndef exempt(region):\n    return False\n"})
    git(src, "commit", "-qam", "Add tax exemptions")
    second = git(src, "rev-parse", "HEAD").strip()
    mirrors = tmp_path / "mirrors"
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(mirrors / "acme+shop" / "repo")], check=True)
    return mirrors, first, second


def _task(iid: str, commit: str, text: str) -> dict:
    return {
        "instance_id": iid,
        "source": "git_history",
        "repo": "acme/shop",
        "base_commit": commit,
        "problem_statement": text,
        "gold_files": ["pkg/tax.py"],
        "gold_functions": ["pkg/tax.py::rate_for"],
        "gold_module_level_files": [],
        "gold_new_files": [],
    }


def test_rows_stream_with_full_lists_and_a_bad_checkout_is_skipped(tmp_path, capsys):
    mirrors, first, second = _mirror(tmp_path)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(json.dumps(t) for t in [
        _task("ok-1", first, "The tax rate for a region is wrong: rate_for raises KeyError"),
        _task("missing", "0" * 40, "A commit the mirror does not have (a snapshot without its blob)"),
        _task("ok-2", second, "compute_tax rounds the tax rate of the region"),
    ]) + "\n")
    out = tmp_path / "rows.jsonl"
    dump = tmp_path / "dump.jsonl"
    args = ["--tasks", str(tasks), "--no-vectors", "--no-context", "--models", "rrf",
            "--cache", str(tmp_path / "cache"), "--mirrors", str(mirrors),
            "--out", str(out), "--dump", str(dump)]
    localization.main(args)
    summary = json.loads(capsys.readouterr().out)
    assert summary["tasks"] == 2
    assert [s["instance_id"] for s in summary["skipped"]] == ["missing"]
    assert "checkout" in summary["skipped"][0]["reason"]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["instance_id"] for r in rows] == ["ok-1", "ok-2"]
    row = rows[0]
    # every ranking keeps its full lists (not only a top 5), tests left out
    assert row["fused"]["rrf"]["files"][0] == "pkg/tax.py" and row["fused"]["rrf"]["file@1"]
    assert "pkg/tax.py::rate_for" in row["fused"]["rrf"]["units"]
    assert all(not f.startswith("tests/") for f in row["fused"]["rrf"]["files"])
    assert row["bm25_files"]["files"] and "lexical" in row["signals"]
    assert len(dump.read_text().splitlines()) == 2

    # --resume runs only what is not in --out yet
    lines = out.read_text().splitlines()
    out.write_text(lines[0] + "\n")
    localization.main([*args, "--resume"])
    summary = json.loads(capsys.readouterr().out)
    assert summary["tasks_run_now"] == 1 and summary["tasks"] == 2
    assert [json.loads(line)["instance_id"] for line in out.read_text().splitlines()] == ["ok-1", "ok-2"]

    # without --out the summary still counts what ran
    plain = [a for a in args if a not in ("--out", str(out), "--dump", str(dump))]
    localization.main(plain)
    summary = json.loads(capsys.readouterr().out)
    assert summary["tasks"] == 2 and summary["metrics"]["fused:rrf"]["overall"]["tasks"] == 2


def test_embedding_cache_returns_the_models_vectors_and_embeds_each_text_once(tmp_path):
    import numpy as np

    from benchmarks.embed_cache import CachedEmbedder
    from indexer.vectors.embed import HashingEmbedder

    class Counting(HashingEmbedder):
        def __init__(self):
            super().__init__()
            self.seen: list[str] = []

        def embed(self, texts):
            self.seen += list(texts)
            return super().embed(texts)

    inner = Counting()
    texts = ["def a(): pass", "class B: ...", "def a(): pass"]
    cached = CachedEmbedder(inner, tmp_path / "c" / "cache.sqlite")
    first = cached.embed(texts)
    assert np.allclose(first, HashingEmbedder().embed(texts))
    assert sorted(inner.seen) == sorted(texts)  # nothing cached yet
    again = CachedEmbedder(inner, tmp_path / "c" / "cache.sqlite")  # a later run
    inner.seen.clear()
    got = again.embed(["class B: ...", "new text", "def a(): pass"])
    assert inner.seen == ["new text"]
    assert np.allclose(got, HashingEmbedder().embed(["class B: ...", "new text", "def a(): pass"]))
    assert (again.hits, again.misses) == (2, 1)
    assert again.name == inner.name and again.embed([]).shape == (0, inner.dim)
    other = HashingEmbedder(dim=32)  # another model never reads this one's vectors
    assert CachedEmbedder(other, tmp_path / "c" / "cache.sqlite").embed(["class B: ..."]).shape == (1, 32)


def test_context_policy_specs_and_their_cross_validated_choice(tmp_path, capsys):
    import pytest

    from benchmarks import context_cv

    name, pol = localization.parse_policy("tight:expand_share=0.25,use_graph=false,unit_seeds=20")
    assert (name, pol.expand_share, pol.use_graph, pol.unit_seeds) == ("tight", 0.25, False, 20)
    for bad in ("tight:nope=1", "no name:seed_k=2", "m:model=x"):
        with pytest.raises(SystemExit):
            localization.parse_policy(bad)
    # policy "a" wins on repositories r1 and r2 but loses badly on r3: held out, r3 gets the
    # policy the others chose and its figures say so; the choice is made without the held-out repo
    rows = []
    for repo, (d, a) in {"r1": (0.5, 1.0), "r2": (0.5, 1.0), "r3": (1.0, 0.0)}.items():
        rows += [{"repo": repo, "source": "s", "context": {"ctx@8k": d, "ctx@8k_a": a}}] * 2
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    context_cv.main([str(path)])
    got = json.loads(capsys.readouterr().out)
    assert got["policies"] == ["a", "default"]
    # held out r1: the rest (r2 a=1.0, r3 a=0.0 -> 0.5; default 0.75) choose default
    assert got["chosen_by_held_out_repository"] == {"r1": "default", "r2": "default", "r3": "a"}
    assert got["cross_validated"]["overall"]["ctx@8k"] == 0.0 + round(100 * (0.5 + 0.5 + 0.0) / 3, 1)
    assert got["in_sample"]["a"]["overall"]["ctx@8k"] == round(100 * 2 / 3, 1)


def test_context_rows_say_where_each_gold_unit_ranked_and_which_packs_hold_it(tmp_path, capsys):
    mirrors, first, _ = _mirror(tmp_path)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(
        _task("ok-1", first, "The tax rate for a region is wrong: rate_for raises KeyError")) + "\n")
    out = tmp_path / "rows.jsonl"
    localization.main(["--tasks", str(tasks), "--no-vectors", "--no-history", "--models", "rrf",
                       "--cache", str(tmp_path / "cache"), "--mirrors", str(mirrors),
                       "--out", str(out)])
    summary = json.loads(capsys.readouterr().out)
    (gold,) = json.loads(out.read_text())["context"]["gold"]
    # named in the task: the seeding ranking has it first, and every budget's pack holds it
    assert gold == {"unit": "pkg/tax.py::rate_for", "rank": 1, "held": [True, True, True]}
    assert summary["metrics"]["context_by_rank"] == {
        "git_history": {b: {"1-10": {"gold": 1, "held": 1}} for b in ("4k", "8k", "16k")}}


def test_context_by_rank_counts_held_gold_units_per_rank_range():
    def row(source, *gold):
        return {"source": source, "context": {"gold": [
            {"unit": f"u{i}", "rank": rank, "held": held} for i, (rank, held) in enumerate(gold)]}}

    rows = [
        row("a", (3, [False, True, True]), (30, [False, False, True]), (None, [False] * 3)),
        row("a", (31, [False, False, False]), (250, [False, False, True])),
        row("b", (10, [True, True, True])),
        {"source": "b", "context": None},  # a task without gold units
    ]
    got = localization.context_by_rank(rows)
    assert got["a"]["8k"] == {"1-10": {"gold": 1, "held": 1}, "11-30": {"gold": 1, "held": 0},
                              "31-50": {"gold": 1, "held": 0}, "101+": {"gold": 1, "held": 0},
                              "unranked": {"gold": 1, "held": 0}}
    assert got["a"]["16k"]["11-30"] == {"gold": 1, "held": 1}
    assert got["a"]["4k"]["1-10"] == {"gold": 1, "held": 0}
    assert got["b"] == {b: {"1-10": {"gold": 1, "held": 1}} for b in ("4k", "8k", "16k")}
    assert localization.context_by_rank([{"source": "a", "context": None}]) is None
