"""benchmarks/build_scaling.py's logic (issue 41): the Amdahl and linear fits, how subsets of a
tree are sampled and copied, and the serial shares read from a build's phases. No timings."""

from __future__ import annotations

import os

import pytest

from benchmarks import build_scaling as bs
from benchmarks._common import Corpus


def test_amdahl_fit_recovers_serial_and_parallel_parts():
    # t(j) = 2 + 8/j exactly
    fit = bs.amdahl_fit([(j, 2 + 8 / j) for j in (1, 2, 4, 8)])
    assert fit["serial_seconds"] == pytest.approx(2.0)
    assert fit["parallel_seconds_at_1_job"] == pytest.approx(8.0)
    assert fit["serial_share"] == pytest.approx(0.2)
    assert fit["max_abs_residual_seconds"] == pytest.approx(0.0)
    assert fit["clamped"] is None


def test_amdahl_fit_two_points_is_exact():
    fit = bs.amdahl_fit([(2, 7.0), (1, 12.0)])
    assert (fit["serial_seconds"], fit["parallel_seconds_at_1_job"]) == (2.0, 10.0)
    assert fit["points"] == 2


def test_amdahl_fit_clamps_a_negative_serial_part():
    # Faster than linear (10 s -> 4 s on two jobs) would need s = -2: s is 0, p fits alone.
    fit = bs.amdahl_fit([(1, 10.0), (2, 4.0)])
    assert fit["clamped"] == "serial"
    assert fit["serial_seconds"] == 0.0
    assert fit["parallel_seconds_at_1_job"] == pytest.approx((10 * 1 + 4 * 0.5) / (1 + 0.25))
    assert fit["serial_share"] == 0.0


def test_amdahl_fit_clamps_a_phase_that_gets_slower():
    fit = bs.amdahl_fit([(1, 5.0), (2, 6.0)])
    assert fit["clamped"] == "parallel"
    assert fit["serial_seconds"] == pytest.approx(5.5)
    assert fit["serial_share"] == 1.0


def test_amdahl_fit_needs_two_jobs_values():
    assert bs.amdahl_fit([(2, 3.0)]) is None
    assert bs.amdahl_fit([(2, 3.0), (2, 4.0)]) is None


def test_linear_fit_r2():
    line = bs.linear_fit([1000, 5000, 25000], [1 + 0.002 * x for x in (1000, 5000, 25000)])
    assert line["r2"] == pytest.approx(1.0)
    assert line["slope"] == pytest.approx(0.002)
    assert line["intercept"] == pytest.approx(1.0)
    bent = bs.linear_fit([1, 2, 3, 4], [1, 4, 9, 16])
    assert bent["r2"] < 1.0


def test_linearity_compares_cost_per_file_at_both_ends():
    rows = {
        "10": {"files_indexed": 10, "lines": 1000, "wall_seconds_median": 1.0},
        "40": {"files_indexed": 40, "lines": 4000, "wall_seconds_median": 8.0},
    }
    lin = bs.linearity(rows)
    assert lin["per_file_cost_ratio_largest_to_smallest"] == pytest.approx(2.0)
    assert lin["per_line_cost_ratio_largest_to_smallest"] == pytest.approx(2.0)
    assert lin["note"] == "exact from two points"
    assert bs.linearity({"10": rows["10"]}) is None


def test_serial_shares_from_phases():
    assert bs.serial_shares({"parse": 4.0, "write": 2.0}) is None
    shares = bs.serial_shares({"parse": 4.0, "serial:parse": 1.0, "resolve": 2.0,
                               "serial:resolve": 2.0})
    assert shares == {"parse": 0.25, "resolve": 1.0}


def test_jobs_lists():
    assert bs.default_jobs(2) == [1, 2]
    assert bs.default_jobs(12) == [1, 2, 4, 8]
    assert bs.default_jobs(64) == [1, 2, 4, 8, 16]
    assert bs.default_jobs(None) == [1]
    assert bs.int_list("4,1,2,2") == [1, 2, 4]
    with pytest.raises(ValueError):
        bs.int_list("0,2")


def test_units_are_top_dirs_and_site_packages_packages():
    assert bs.unit_of("json/decoder.py") == "json"
    assert bs.unit_of("os.py") == "<files>"
    assert bs.unit_of("site-packages/numpy/core/a.py") == "site-packages/numpy"
    assert bs.unit_of("site-packages/six.py") == "site-packages/<files>"


def _paths() -> list[str]:
    paths = [f"big/m{i}.py" for i in range(50)]
    paths += [f"pkg{k}/m{i}.py" for k in range(10) for i in range(k + 1)]  # 55 files
    paths += [f"site-packages/lib{k}/x{i}.py" for k in range(5) for i in range(3)]
    return paths + ["top.py", "site-packages/six.py"]


def test_sample_keeps_packages_whole_and_hits_the_size():
    paths = _paths()
    files, how = bs.sample_files(paths, 40)
    assert len(files) == 40 and len(set(files)) == 40 and set(files) <= set(paths)
    assert files == sorted(files)
    by_unit: dict[str, int] = {}
    for f in files:
        by_unit[bs.unit_of(f)] = by_unit.get(bs.unit_of(f), 0) + 1
    total = {u: sum(1 for p in paths if bs.unit_of(p) == u) for u in by_unit}
    cut = [u for u in by_unit if by_unit[u] != total[u]]
    # every package is whole but the one whose sorted prefix filled the rest
    assert cut == ([how["partial_unit"]] if how["partial_unit_files"] else [])
    if cut:
        part = sorted(p for p in paths if bs.unit_of(p) == cut[0])[: by_unit[cut[0]]]
        assert set(part) <= set(files)
    assert how["units_whole"] == len(by_unit) - len(cut)
    # deterministic, and independent of the order the paths come in
    assert bs.sample_files(list(reversed(paths)), 40) == (files, how)
    # a different seed picks other packages
    assert bs.sample_files(paths, 40, seed="other")[0] != files or how["units_whole"] == 0


def test_sample_caps_at_what_exists():
    paths = _paths()
    files, how = bs.sample_files(paths, 10_000)
    assert files == sorted(paths) and how["capped"] is True
    assert how["partial_unit"] is None


def test_copy_is_symlink_free_and_leaves_the_corpus(tmp_path):
    root = tmp_path / "corpus"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("def a():\n    return 1\n")
    (root / "real.py").write_text("X = 1\n")
    os.symlink(root / "real.py", root / "pkg" / "link.py")
    before = sorted((p.relative_to(root), p.is_symlink()) for p in root.rglob("*"))
    dest = tmp_path / "copy"
    copied = bs.copy_files(root, ["pkg/a.py", "pkg/link.py"], dest)
    link = dest / "pkg" / "link.py"
    assert link.is_file() and not link.is_symlink()
    assert link.read_text() == "X = 1\n"
    assert copied == len("def a():\n    return 1\n") + len("X = 1\n")
    assert not (dest / "real.py").exists()
    assert sorted((p.relative_to(root), p.is_symlink()) for p in root.rglob("*")) == before


def test_indexable_files_are_what_discovery_lists(tmp_path):
    root = tmp_path / "tree"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("def a():\n    return 1\n")
    (root / "pkg" / "b.py").write_text("import a\n")
    (root / "skip").mkdir()
    (root / "skip" / "c.py").write_text("C = 1\n")
    (root / "pkg" / "__pycache__").mkdir()
    (root / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0\1")
    assert bs.indexable_files(Corpus("t", root)) == ["pkg/a.py", "pkg/b.py", "skip/c.py"]
    assert bs.indexable_files(Corpus("t", root, ("skip/",))) == ["pkg/a.py", "pkg/b.py"]


# --------------------------------------------------------------------------- shard_reads.py

SHARD_FILES = {
    "a/__init__.py": "",
    "b/__init__.py": "",
    "c/__init__.py": "",
    "a/core.py": """
        def helper(x):
            return x + 1


        class Parser:
            def parse(self, text):
                return helper(len(text))
        """,
    "b/util.py": """
        from a.core import helper


        def helper_extra(y):
            \"\"\"Parse the rounding of a decimal context.\"\"\"
            return helper(y) * 2
        """,
    "c/app.py": """
        from a.core import Parser, helper


        def run(text):
            return Parser().parse(text) + helper(3)
        """,
}
TABLES = ("files", "symbols", "refs", "ref_candidates", "imports", "chunks", "chunks_fts",
          "files_fts")


def _counts(path) -> dict[str, int]:
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
    finally:
        conn.close()


def test_shards_split_every_row_once_and_fan_out_reads_as_the_merged_file(tmp_path):
    from benchmarks import shard_reads as sr
    from tests.conftest import index, make_repo

    root = make_repo(tmp_path / "repo", SHARD_FILES)
    cfg = index(root, full=True)
    graph = (cfg.index_path / "graph.db").resolve()
    original = _counts(graph)
    assert original["files"] >= 3 and original["refs"] > 0 and original["chunks_fts"] > 0
    shards = sr.make_shards(graph, tmp_path / "shards", 3)
    assert sum(shards["files_per_shard"]) == original["files"]
    parts = [_counts(p) for p in shards["paths"]]
    assert {t: sum(p[t] for p in parts) for t in TABLES} == original
    assert all(p["files"] for p in parts)
    merged = sr.merge_shards(shards["paths"], graph, tmp_path / "merged.db")
    assert merged["mb"] > 0
    assert _counts(tmp_path / "merged.db") == original
    one, fan = sr.Reader([graph]), sr.Reader(shards["paths"], threads=2)
    remerged = sr.Reader([tmp_path / "merged.db"])
    try:
        # `helper` is an exact name in one shard and only a prefix (helper_extra) in another:
        # fan-out keeps the best tier any shard matched, as the one query does.
        defs = one.definitions("helper")
        assert [d.qualname for d in defs] == [d.qualname for d in fan.definitions("helper")]
        assert defs and all(d.name == "helper" for d in defs)
        assert [d.name for d in fan.definitions("helper_")] == ["helper_extra"]
        suffix = [d.qualname for d in one.definitions("core.helper")]
        assert suffix == ["a.core.helper"] == [d.qualname for d in fan.definitions("core.helper")]
        refs = one.references("helper")
        assert refs and refs == fan.references("helper")
        assert {r.path for r in refs} >= {"b/util.py", "c/app.py"}
        hits = one.search("decimal rounding", 5)
        assert hits and hits == remerged.search("decimal rounding", 5)
        assert {h.chunk_id for h in fan.search("decimal rounding", 5)} >= {hits[0].chunk_id}
    finally:
        for reader in (one, fan, remerged):
            reader.close()


def test_jobs_checks_say_what_was_not_measured():
    checks = bs._jobs_checks({1: 10.0, 2: 5.0}, 0.25, cpus=2, top=2, corpus="stdlib")
    assert checks["jobs2_speedup"]["value"] == 2.0 and checks["jobs2_speedup"]["pass"]
    assert checks["jobs16_speedup"]["measured"] is False
    assert "2 cores" in checks["jobs16_speedup"]["reason"]
    assert checks["ctags_ratio"]["value"] == 20.0 and checks["ctags_ratio"]["target"] == "<= 34.0"
    big = bs._jobs_checks({1: 60.0, 4: 20.0, 16: 12.0}, 1.0, cpus=16, top=16, corpus="large")
    assert big["jobs16_speedup"]["value"] == 5.0 and not big["jobs16_speedup"]["pass"]
    assert "not both" in big["jobs2_speedup"]["reason"]
    assert big["ctags_ratio"] == {**big["ctags_ratio"], "value": 12.0, "target": "<= 6.0", "pass": False}
    other = bs._jobs_checks({1: 60.0, 8: 12.0}, 1.0, cpus=16, top=8, corpus="stdlib")
    assert other["ctags_ratio"]["pass"] is None and "corpus large at jobs 16" in other["ctags_ratio"]["reason"]


def test_ratios_are_taken_per_run_not_of_medians():
    runs = [{"parse": 4.0, "serial:parse": 2.0, "cpu:driver": 1.0, "cpu:workers": 10.0},
            {"parse": 8.0, "serial:parse": 1.0, "cpu:driver": 3.0, "cpu:workers": 12.0},
            {"parse": 2.0, "serial:parse": 1.5, "cpu:driver": 2.0, "cpu:workers": 40.0}]
    # Ratios of the medians would be 2/12 = 0.1667 and 1.5/4 = 0.375; per run 0.1, 0.25, 0.05
    # and 0.5, 0.125, 0.75.
    assert bs.per_run(bs.driver_cpu, runs)["driver_to_workers"] == 0.1
    assert bs.per_run(bs.serial_shares, runs) == {"parse": 0.5}
    assert bs.per_run(bs.driver_cpu, [{"parse": 1.0}]) is None


def test_driver_cpu_share():
    assert bs.driver_cpu({"parse": 3.0}) is None
    got = bs.driver_cpu({"cpu:driver": 1.0, "cpu:workers": 20.0, "serial:parse": 0.1})
    assert got == {"driver_seconds": 1.0, "workers_seconds": 20.0, "driver_to_workers": 0.05}
