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
