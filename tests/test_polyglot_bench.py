"""benchmarks/polyglot.py on a tiny tree: files per language and kind, definitions and
resolution per language, parse timing, and the skipped share as built and as if only the
baseline languages existed — whether or not text formats (Markdown) are indexable yet."""

from __future__ import annotations

import json

from benchmarks import polyglot
from tests.conftest import write_files

FILES = {
    "pkg/app.py": """
        def total(items):
            return sum(price(i) for i in items)


        def price(item):
            return item * 2
        """,
    "web/main.js": """
        function render(x) {
          return format(x);
        }

        function format(x) {
          return String(x);
        }
        """,
    "README.md": "# Demo\n\nA tiny tree.\n",
    "data.bin": "\x00\x01\x02 not text\n",
}


def test_polyglot_counts(tmp_path, capsys):
    root = tmp_path / "repo"
    write_files(root, FILES)
    docs = tmp_path / "docs"
    write_files(
        docs,
        {
            "a/guide.rst": "Guide\n=====\n\nText.\n",
            "b/conf.json": '{"k": 1}\n',
            "c/skip.py": "x = 1\n",
        },
    )
    out = polyglot.main(
        [
            "--repo",
            f"python={root}",
            "--docs",
            str(docs),
            "--docs-limit",
            "5",
            "--baseline-languages",
            "python,javascript",
        ]
    )
    printed = json.loads(capsys.readouterr().out)
    assert printed["summary"] == out["summary"]

    md_ok = "markdown" in out["formats"]["available"]
    assert {"python", "javascript"} <= set(out["formats"]["available"])
    tree = out["trees"]["python:repo"]
    assert tree["files_discovered"] == 4
    by_lang = tree["by_language"]
    for lang, defs in (("python", 2), ("javascript", 2)):
        d = by_lang[lang]
        assert (d["files"], d["indexed"], d["kind"]) == (1, 1, "code")
        assert d["definitions"] == defs
        assert d["references"] > 0 and d["resolved"] > 0
        assert 0 < d["resolved_pct"] <= 100
        assert d["parse"]["files"] == 1 and d["parse"]["cpu_s_per_mb"] > 0
    assert by_lang["markdown"]["files"] == 1
    assert by_lang["markdown"]["kind"] == "docs"
    assert by_lang["markdown"]["indexed"] == (1 if md_ok else 0)
    assert by_lang["(none)"]["files"] == 1  # data.bin: no language
    assert tree["by_kind"]["code"] == {"files": 2, "indexed": 2}

    skipped = tree["skipped"]
    assert skipped["current_recomputed_matches"]
    # baseline: README.md and data.bin are no_grammar whatever exists today
    assert skipped["baseline"]["files_seen"] == 4
    assert skipped["baseline"]["by_reason"] == {"no_grammar": 2}
    assert skipped["baseline"]["skipped_share"] == 0.5
    assert skipped["current"]["skipped_share"] == (0.25 if md_ok else 0.5)
    assert tree["build"]["symbols"] >= 4

    sample = out["trees"]["docs"]["sample"]
    assert (sample["found"], sample["sampled"]) == (2, 2)  # .py is not a docs file
    assert out["trees"]["docs"]["skipped"]["baseline"]["skipped_share"] == 1.0

    summary = out["summary"]
    assert summary["by_language"]["python"]["definitions"] == 2
    assert summary["skipped_all_trees"]["baseline"]["files_seen"] == 6
    assert summary["by_tree"]["python:repo"]["skipped_share_baseline"] == 0.5


def test_baseline_recompute_rules():
    files = [
        ("a.py", "python"),
        ("b.rb", "ruby"),
        ("c.md", "markdown"),
        ("d", None),
        ("e.py", "python"),
    ]
    status = {"a.py": "ok", "b.rb": "syntax_error", "c.md": "ok", "e.py": "skipped:minified"}
    base = polyglot.skipped_as_if({"too_large": 1}, files, status, {"python"})
    assert base["by_reason"] == {"minified": 1, "no_grammar": 3, "too_large": 1}
    assert (base["indexed"], base["files_seen"]) == (1, 6)
    now = polyglot.skipped_as_if({"too_large": 1}, files, status, {"python", "ruby", "markdown"})
    assert now["by_reason"] == {"minified": 1, "no_grammar": 1, "too_large": 1}
    assert now["skipped_share"] == round(3 / 6, 4)


def test_failed_tree_is_recorded(tmp_path, monkeypatch, capsys):
    good, bad = tmp_path / "good", tmp_path / "bad"
    write_files(good, {"a.py": "def f():\n    return 1\n"})
    write_files(bad, {"b.py": "def g():\n    return 2\n"})
    real = polyglot.bench_tree

    def flaky(label, root, *rest):
        if root.name == "bad":
            raise FileNotFoundError("indexer/queries/x.scm")
        return real(label, root, *rest)

    monkeypatch.setattr(polyglot, "bench_tree", flaky)
    out = polyglot.main(
        ["--repo", f"python={good}", "--repo", f"python={bad}", "--no-parse-timing"]
    )
    capsys.readouterr()
    assert "FileNotFoundError" in out["trees"]["python:bad"]["error"]
    assert out["summary"]["by_tree"] == {
        "python:good": {
            "files": 1,
            "skipped_share_baseline": 0.0,
            "skipped_share_current": 0.0,
            "resolved_pct": 0.0,
        }
    }
