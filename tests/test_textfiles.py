"""Docs and configs without a grammar (indexer.parse.textfiles): their sections, keys, targets and
stages as definitions; a real build that makes them searchable by kind; what is still skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from indexer.models import ParsedFile
from indexer.parse.discovery import is_ignored_path
from indexer.parse.languages import KINDS, kind_of, language_for_path
from indexer.parse.parser import parse_source
from tests.conftest import make_repo

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

README = """\
# repoctx

A repository indexer for code search.

## Install

Install the wheel:

```sh
# this comment is not a heading
pip install repoctx
```

### From source

Clone the repository, then see [indexing](docs/indexing.md#what) and
[the site](https://example.org/docs.md).

Usage
-----

Run `repoctx index build` in the repository.
"""


def parse(path: str, text: str) -> ParsedFile:
    lang = language_for_path(path)
    assert lang is not None, path
    return parse_source(path, text.encode(), lang, path.rsplit(".", 1)[0].replace("/", "."))


def defs(pf: ParsedFile) -> list[tuple[str, str, int, int]]:
    return [(d.qualname, d.kind, d.span.start_line, d.span.end_line) for d in pf.definitions]


def links(pf: ParsedFile) -> list[tuple[str, str, int]]:
    return [(r.name, r.receiver, r.line) for r in pf.references if r.kind == "link"]


def test_formats_and_kinds() -> None:
    expect = {
        "README.md": ("markdown", "docs"), "docs/guide.rst": ("rst", "docs"),
        "notes.txt": ("text", "docs"), "LICENSE": ("text", "docs"),
        "ci.yml": ("yaml", "config"), "pyproject.toml": ("toml", "config"),
        "package.json": ("json", "config"), "setup.cfg": ("ini", "config"),
        ".editorconfig": ("ini", "config"), "Dockerfile": ("dockerfile", "config"),
        "docker/Dockerfile.dev": ("dockerfile", "config"), "Makefile": ("make", "config"),
        "rules.mk": ("make", "config"), "schema.sql": ("sql", "code"), "a.py": ("python", "code"),
        "indexer/queries/python.scm": ("sexp", "code"), "lisp/init.el": ("sexp", "code"),
        ".gitignore": ("ignore", "config"), "web/.dockerignore": ("ignore", "config"),
    }
    for path, (lang, kind) in expect.items():
        assert (language_for_path(path), kind_of(language_for_path(path))) == (lang, kind), path
    assert language_for_path("image.png") is None and set(KINDS) == {"code", "docs", "config"}


def test_markdown_sections_by_heading_path_and_fences_are_not_headings() -> None:
    pf = parse("README.md", README)
    assert defs(pf) == [
        ("repoctx", "section", 1, 22),
        ("repoctx.Install", "section", 5, 17),
        ("repoctx.Install.From source", "section", 14, 17),
        ("repoctx.Usage", "section", 19, 22),  # setext heading: title and underline
    ]
    install = pf.definitions[1]
    assert (install.name, install.signature, install.doc) == ("Install", "## Install", "Install the wheel:")
    assert pf.definitions[3].signature == "Usage"
    assert pf.doc == "repoctx: A repository indexer for code search."
    # a link to a file of the repository (anchor dropped); URLs are not files
    assert links(pf) == [("indexing", "docs/indexing.md", 16)]
    assert pf.references[0].enclosing == 2  # inside "From source"
    assert not pf.has_errors and {9, 13} <= set(pf.breaks) and 10 not in pf.breaks  # the fence


def test_markdown_front_matter_and_tilde_fences() -> None:
    pf = parse("docs/post.md", "---\ntitle: x\n---\n\n~~~\n# not\n~~~\n\n## Real\n\ntext\n")
    assert defs(pf) == [("Real", "section", 9, 11)]


def test_rst_sections_with_overline_and_underline_styles() -> None:
    text = """\
=====
Guide
=====

Intro, see `the indexer <indexing.rst>`_.

Install
=======

Run::

    Not a heading
    =============

From source
-----------

Clone.

.. include:: ../README.md
"""
    pf = parse("docs/guide.rst", text)
    assert defs(pf) == [
        ("Guide", "section", 1, 20),
        ("Guide.Install", "section", 7, 20),
        ("Guide.Install.From source", "section", 15, 20),
    ]
    assert pf.definitions[2].doc == "Clone."
    assert links(pf) == [("indexing", "indexing.rst", 5), ("README", "../README.md", 20)]


def test_yaml_top_level_keys_and_one_level_below() -> None:
    text = """\
# CI workflow
name: ci
on:
  push:
    branches: [main]
jobs:
  build:
    steps:
      - run: python scripts/check.py
  docs:
    script: |
      key: inside a block scalar
---
other: 1
"""
    pf = parse(".github/workflows/ci.yml", text)
    assert defs(pf) == [
        ("name", "key", 2, 2), ("on", "key", 3, 5), ("on.push", "key", 4, 5),
        ("jobs", "key", 6, 12), ("jobs.build", "key", 7, 9), ("jobs.docs", "key", 10, 12),
        ("other", "key", 14, 14),
    ]
    assert pf.doc == "CI workflow"
    assert links(pf) == [("check", "scripts/check.py", 9)]


def test_toml_sections_and_top_level_keys() -> None:
    text = """\
title = "x"
readme = "README.md"

[project]
name = "repoctx"
description = \"\"\"
[not.a.section]
\"\"\"

[tool.ruff.lint]
select = ["E"]

[[tool.mypy.overrides]]
module = "x"
"""
    pf = parse("pyproject.toml", text)
    assert defs(pf) == [
        ("title", "key", 1, 1), ("readme", "key", 2, 2), ("project", "section", 4, 8),
        ("tool.ruff.lint", "section", 10, 11), ("tool.mypy.overrides", "section", 13, 14),
    ]
    assert pf.definitions[3].name == "lint"
    assert links(pf) == [("README", "README.md", 2)]


def test_json_top_level_keys() -> None:
    text = '{\n  "name": "app",\n  "main": "src/index.js",\n  "scripts": {\n    "build": "tsc"\n  },\n  "private": true\n}\n'
    pf = parse("package.json", text)
    assert defs(pf) == [("name", "key", 2, 2), ("main", "key", 3, 3), ("scripts", "key", 4, 6),
                        ("private", "key", 7, 7)]
    assert links(pf) == [("index", "src/index.js", 3)]


def test_ini_sections() -> None:
    pf = parse("setup.cfg", "[metadata]\nname = x\n\n[tool:pytest]\naddopts = -q\n")
    assert defs(pf) == [("metadata", "section", 1, 2), ("tool:pytest", "section", 4, 5)]


def test_makefile_targets_and_variables() -> None:
    text = """\
PY ?= python3
SRC := $(wildcard *.py)

.PHONY: test lint
# Run the tests
test: lint
\t$(PY) -m pytest

\t@echo done

lint:
\truff check .
build/%.o: %.c
\tcc -c $<
include common.mk
"""
    pf = parse("Makefile", text)
    assert defs(pf) == [
        ("PY", "variable", 1, 1), ("SRC", "variable", 2, 2), ("test", "target", 6, 9),
        ("lint", "target", 11, 12), ("build/%.o", "target", 13, 14),
    ]
    assert pf.definitions[2].doc == "Run the tests"
    assert pf.definitions[2].signature == "test: lint"
    assert links(pf) == [("common", "common.mk", 15)]


def test_dockerfile_stages_and_variables() -> None:
    text = """\
ARG PY=3.12
FROM python:${PY}-slim AS build
ENV APP_HOME=/app MODE=prod
COPY requirements.txt ./
RUN pip install \\
    -r requirements.txt

FROM gcr.io/distroless/python3
COPY --from=build /app /app
CMD ["python", "app.py"]
"""
    pf = parse("Dockerfile", text)
    assert defs(pf) == [
        ("PY", "variable", 1, 1), ("build", "stage", 2, 6), ("build.APP_HOME", "variable", 3, 3),
        ("build.MODE", "variable", 3, 3), ("python3", "stage", 8, 10),
    ]
    assert {2, 3, 4, 5, 8, 9, 10} <= set(pf.breaks) and 6 not in pf.breaks  # a continuation
    assert links(pf) == [("requirements", "requirements.txt", 4)]


def test_sql_create_statements() -> None:
    text = """\
-- Users of the app
CREATE TABLE IF NOT EXISTS users (
  id INTEGER PRIMARY KEY -- the id; a comment
);

CREATE OR REPLACE FUNCTION public.touch() RETURNS trigger AS $$
BEGIN
  RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE VIEW "active" AS SELECT * FROM users;
"""
    pf = parse("schema.sql", text)
    assert defs(pf) == [("users", "table", 2, 4), ("public.touch", "function", 6, 10),
                        ("active", "view", 11, 11)]
    assert pf.definitions[0].doc == "Users of the app"


def test_sexp_top_level_forms_are_breaks_and_defines_are_definitions() -> None:
    scheme = """\
;; List helpers.
(define (square x)
  "a string with ) and ( and \\" inside"
  (* x x))

; The answer.
(define answer 42) #| a block ( comment |#
(defun add-two (a b) (+ a b))
(display (square 3))
(define (unclosed y
"""
    pf = parse("lib/helpers.scm", scheme)
    assert defs(pf) == [("square", "function", 2, 4), ("answer", "variable", 7, 7),
                        ("add-two", "function", 8, 8), ("unclosed", "function", 10, 10)]
    assert pf.doc == "List helpers." and pf.definitions[1].doc == "The answer."
    assert {2, 7, 8, 9, 10} <= set(pf.breaks) and 3 not in pf.breaks
    query = """\
; tags for a language
(function_definition
  name: (identifier) @name) @definition.function

[
  (call function: (identifier) @name)
  (call function: (attribute attribute: (identifier) @name))
] @reference.call
"""
    pf = parse("queries/x.scm", query)
    assert pf.definitions == () and pf.doc == "tags for a language"
    assert {2, 5} <= set(pf.breaks) and not {3, 6, 7} & set(pf.breaks)


def test_scripts_without_a_suffix_by_their_shebang_line() -> None:
    from indexer.parse.languages import interpreter_language

    heads = {
        b"#!/bin/sh\nset -e\n": "bash", b"#!/usr/bin/env bash": "bash",
        b"#!/usr/bin/env -S python3 -u\n": "python", b"#!/usr/local/bin/python3.12": "python",
        b"#! /usr/bin/env NODE_ENV=prod node": "javascript", b"#!/usr/bin/env lua5.4": "lua",
        b"#!/usr/bin/perl -w": "perl", b"#!/usr/bin/awk -f": None, b"#!/usr/bin/env -i": None,
        b"#!": None,
        b"echo hi\n#!/bin/sh": None, b"": None,
    }
    assert {h: interpreter_language(h) for h in heads} == heads


def test_sections_are_chunks_with_the_heading_path_in_their_header() -> None:
    from indexer.parse.chunking import chunk_file

    def count(texts):  # one token a word, +2 specials
        return [len(t.split()) + 2 for t in texts]

    pf = parse("README.md", README)
    chunks = chunk_file("README.md", README, pf, count, 40)
    by_symbol = {c.symbol: c for c in chunks}
    assert by_symbol["repoctx.Install"].header.startswith("README.md | repoctx.Install")
    assert "pip install repoctx" in by_symbol["repoctx.Install"].text
    assert by_symbol["repoctx.Usage"].start_line == 19
    assert chunks[0].start_line == 1 and chunks[-1].end_line == len(README.splitlines())


def test_plain_text_is_one_module_cut_at_paragraphs() -> None:
    pf = parse("LICENSE", "MIT License\n\nCopyright 2024\n\nPermission is hereby\ngranted.\n")
    assert pf.definitions == () and pf.doc == "MIT License" and pf.breaks == (1, 3, 5)


def test_lock_vendored_and_minified_names_are_ignored_by_path(tmp_path: Path) -> None:
    from indexer.config import load_config

    cfg = load_config(tmp_path, env={})
    assert is_ignored_path(cfg, "package-lock.json") and is_ignored_path(cfg, "sub/poetry.lock")
    assert is_ignored_path(cfg, "vendor/lib/x.go") and is_ignored_path(cfg, "web/node_modules/a.js")
    assert not is_ignored_path(cfg, "README.md")


# --------------------------------------------------------------------------- a real build


def run(*args: str) -> str:
    res = CliRunner().invoke(cli, list(args))
    assert res.exit_code == 0, res.output
    return res.stdout


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    root = make_repo(tmp_path_factory.mktemp("textfiles") / "repo", {
        "README.md": README,
        "docs/indexing.md": "# Indexing\n\nHow files become chunks. Back to [the readme](../README.md).\n",
        "app/__init__.py": "",
        "app/serve.py": "def serve_forever():\n    '''Serve requests until stopped.'''\n    return 1\n",
        "pyproject.toml": '[project]\nname = "repoctx"\nreadme = "README.md"\n\n[tool.widgetizer]\ncolour_depth = 24\n',
        "Makefile": "# Build the wheel\nwheelhouse:\n\tpython -m build --wheel\n",
        "Dockerfile": "FROM python:3.12 AS runtime\nCOPY app/serve.py /srv/\n",
        "package-lock.json": '{"lockfileVersion": 3}\n',
        "yarn.lock": "# yarn lockfile v1\n",
        "vendor/lib/util.py": "def vendored():\n    pass\n",
        "node_modules/left-pad/index.js": "module.exports = 1;\n",
        "static/app.min.js": "var a=1;\n",
        "data/big.json": "[" + ",".join(['{"k": 1}'] * 40_000) + "]\n",
    })
    return root


@pytest.fixture(scope="module")
def built(repo: Path) -> dict:
    return json.loads(run("index", "build", str(repo), "-q", "--json", "--no-embed"))


def search(repo: Path, query: str, *flags: str) -> list[dict]:
    out = run("search", query, "-C", str(repo), "--mode", "lexical", "--json", *flags)
    return json.loads(out)["hits"]


def test_build_counts_by_language_and_kind_and_skips_by_reason(repo: Path, built: dict) -> None:
    assert built["by_language"] == {"markdown": 2, "python": 2, "toml": 1, "make": 1, "dockerfile": 1}
    assert built["by_kind"] == {"code": 2, "config": 3, "docs": 2}
    assert built["skipped"] == {"large_data": 1, "lockfile": 2, "minified": 1, "vendored": 2}
    out = run("index", "build", str(repo), "-q", "--no-embed")
    assert "By kind: code 2, config 3, docs 2." in out
    assert "Skipped (not indexed): large_data 1, lockfile 2, minified 1, vendored 2." in out
    status = json.loads(run("index", "status", str(repo), "--json"))
    assert status["by_kind"] == {"code": 2, "config": 3, "docs": 2}
    assert status["by_language"]["markdown"] == 2
    assert status["pending"] == {"changed": 0, "added": 0, "deleted": 0}
    assert "By kind: code 2, config 3, docs 2; by language: " in run("index", "status", str(repo))


def test_search_finds_docs_configs_and_targets_with_their_kind(repo: Path, built: dict) -> None:
    top = search(repo, "install pip")[0]  # a small file is one chunk, as small code files are
    assert (top["path"], top["kind"]) == ("README.md", "docs")
    assert top["start_line"] <= 11 <= top["end_line"]
    config = search(repo, "colour_depth")
    assert (config[0]["path"], config[0]["kind"]) == ("pyproject.toml", "config")
    make = search(repo, "wheelhouse")
    assert (make[0]["path"], make[0]["kind"]) == ("Makefile", "config")
    out = json.loads(run("symbol", "wheelhouse", "-C", str(repo), "--json"))["symbols"]
    assert [(s["path"], s["kind"], s["qualname"]) for s in out] == [("Makefile", "target", "Makefile.wheelhouse")]
    out = json.loads(run("symbol", "tool.widgetizer", "-C", str(repo), "--json"))["symbols"]
    assert [(s["kind"], s["start_line"]) for s in out] == [("section", 5)]


def test_search_kind_filter(repo: Path, built: dict) -> None:
    everything = {h["path"] for h in search(repo, "serve requests readme")}
    assert "app/serve.py" in everything
    docs = search(repo, "serve requests readme chunks", "--kind", "docs")
    assert docs and {h["kind"] for h in docs} == {"docs"}
    mixed = search(repo, "serve requests readme chunks", "--kind", "docs,code")
    assert {h["kind"] for h in mixed} == {"docs", "code"}
    assert search(repo, "requests", "--kind", "config") == []
    res = CliRunner().invoke(cli, ["search", "x", "-C", str(repo), "--kind", "prose"])
    assert res.exit_code == 2 and "not one of code, docs, config" in res.output


def test_symbol_finds_a_section_by_heading_path(repo: Path, built: dict) -> None:
    out = json.loads(run("symbol", "Install.From source", "-C", str(repo), "--json"))["symbols"]
    assert [(s["path"], s["kind"], s["start_line"]) for s in out] == [("README.md", "section", 14)]


def test_link_edges_resolve_to_the_linked_files_module(repo: Path, built: dict) -> None:
    out = json.loads(run("refs", "docs.indexing", "-C", str(repo), "--json"))
    refs = [(r["path"], r["line"], r["kind"], r["resolution"]) for r in out["references"]]
    assert refs == [("README.md", 16, "link", "link")]
    out = json.loads(run("refs", "README", "-C", str(repo), "--json"))
    refs = sorted((r["path"], r["kind"], r["resolution"]) for r in out["references"])
    assert refs == [("docs/indexing.md", "link", "link"), ("pyproject.toml", "link", "link")]
    out = json.loads(run("refs", "app.serve", "-C", str(repo), "--json"))
    assert [(r["path"], r["resolution"]) for r in out["references"]] == [("Dockerfile", "link")]


def test_incremental_build_reparses_a_changed_doc_and_resolves_a_new_link(repo: Path, built: dict) -> None:
    (repo / "docs" / "indexing.md").write_text(
        "# Indexing\n\n## Chunking\n\nSee [serve](../app/serve.py) and [faq](faq.md).\n")
    stats = json.loads(run("index", "build", str(repo), "-q", "--json", "--no-embed"))
    assert stats["files_parsed"] == 1
    out = json.loads(run("symbol", "Indexing.Chunking", "-C", str(repo), "--json"))["symbols"]
    assert [s["path"] for s in out] == ["docs/indexing.md"]
    (repo / "docs" / "faq.md").write_text("# FAQ\n")
    stats = json.loads(run("index", "build", str(repo), "-q", "--json", "--no-embed"))
    assert stats["files_parsed"] == 1
    out = json.loads(run("refs", "docs.faq", "-C", str(repo), "--json"))
    assert [(r["path"], r["resolution"]) for r in out["references"]] == [("docs/indexing.md", "link")]


def test_docs_do_not_change_how_code_ranks_and_old_indexes_move_their_rows(tmp_path):
    """Prose has its own lexical tables: adding docs that repeat the code's words leaves the
    BM25 of code chunks (code-only scope) exactly as it was, while an unscoped search finds
    both; an index from before the split (schema 4) moves its prose rows on the next build."""
    import sqlite3

    from indexer.graph import store
    from indexer.graph.lexical_reads import LexicalReads, fts_tables
    from indexer.graph.records import FileFilter
    from tests.conftest import git, index, make_repo, write_files

    code = {
        "shop/cart.py": "def checkout_total(cart):\n    \"\"\"Sum the cart with tax.\"\"\"\n"
                        "    return sum(cart) * 1.2\n",
        "shop/tax.py": "def regional_tax(region):\n    return {'eu': 0.2}.get(region, 0.0)\n",
    }
    root = make_repo(tmp_path / "r", code)
    cfg = index(root)
    code_only = FileFilter(lang="python")

    def scores(files=code_only):
        conn = store.open_for_read(cfg.index_path).conn
        try:
            chunks = [(m.path, round(m.bm25, 9)) for t in fts_tables("chunks_fts", files)
                      for m in LexicalReads(conn).chunk_bm25(t, '"tax" OR "cart"', (2.0, 4.0, 1.0), 20, files)]
            whole = [(p, round(s, 9)) for t in fts_tables("files_fts", files)
                     for p, s in LexicalReads(conn).file_bm25(t, '"tax" OR "cart"', (2.0, 2.0, 1.0), 20, files)]
            return chunks, whole
        finally:
            conn.close()

    before = scores()
    assert {p for p, _ in before[0]} == {"shop/cart.py", "shop/tax.py"}
    prose = "".join(f"## Tax rule {i}\n\nThe tax of a cart is computed per region.\n\n" for i in range(30))
    write_files(root, {"docs/tax.md": "# Tax\n\n" + prose, "README.md": "# Shop\n\nA cart.\n"})
    git(root, "add", "-A")
    git(root, "commit", "-qm", "docs")
    index(root)
    assert scores() == before  # same rows, same scores: docs do not shift code's statistics
    everything = {p for p, _ in scores(FileFilter())[0]}
    assert {"docs/tax.md", "shop/cart.py"} <= everything

    # an index of schema 4 held prose in the code's tables: the migration moves it
    conn = sqlite3.connect(cfg.db_path)
    with conn:
        for base, cols in (("chunks_fts", "path, symbol, body"), ("files_fts", "path, names, body")):
            conn.execute(f"INSERT INTO {base}(rowid, {cols}) SELECT rowid, {cols} FROM {base}_text")
            conn.execute(f"DROP TABLE {base}_text")
        conn.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    conn.close()
    index(root)
    assert scores() == before
    conn = sqlite3.connect(cfg.db_path)
    try:
        moved = conn.execute(
            "SELECT count(*) FROM chunks_fts_text t JOIN chunks c ON c.id = t.rowid "
            "JOIN files f ON f.id = c.file_id WHERE f.path = 'docs/tax.md'").fetchone()[0]
        left = conn.execute("SELECT count(*) FROM chunks_fts t JOIN chunks c ON c.id = t.rowid "
                            "JOIN files f ON f.id = c.file_id WHERE f.language = 'markdown'").fetchone()[0]
    finally:
        conn.close()
    assert moved > 0 and left == 0


def test_scripts_are_indexed_by_their_shebang_and_follow_edits(tmp_path: Path) -> None:
    """Suffix-less scripts (bin/deploy) are parsed in the language of their `#!` line; other
    suffix-less files are still skipped as no_grammar. status, verify and incremental builds
    decide the same way."""
    root = make_repo(tmp_path / "scripts", {
        "bin/deploy": "#!/usr/bin/env bash\nrollout_release() {\n  echo deploying\n}\n",
        "tools/lint": "#!/usr/bin/env -S python3 -u\ndef lint_everything():\n    return 0\n",
        "bin/report": "#!/usr/bin/awk -f\n{ print $1 }\n",
        "data/NOTES": "no shebang here\n",
        ".gitignore": "*.log\n",
        "app.py": "def main():\n    return 1\n",
    })
    built = json.loads(run("index", "build", str(root), "-q", "--json", "--no-embed"))
    assert built["by_language"] == {"bash": 1, "python": 2, "ignore": 1}
    assert built["skipped"] == {"no_grammar": 2}
    found = json.loads(run("symbol", "rollout_release", "-C", str(root), "--json"))
    assert [(d["path"], d["kind"]) for d in found["symbols"]] == [("bin/deploy", "function")]
    found = json.loads(run("symbol", "lint_everything", "-C", str(root), "--json"))
    assert [d["path"] for d in found["symbols"]] == ["tools/lint"]
    status = json.loads(run("index", "status", str(root), "--json"))
    assert status["pending"] == {"changed": 0, "added": 0, "deleted": 0}
    assert json.loads(run("index", "verify", str(root), "--json"))["ok"] is True

    (root / "data" / "NOTES").write_text("#!/bin/sh\nrotate_logs() { :; }\n")
    (root / "bin" / "deploy").write_text("#!/bin/bash\nrollback_release() {\n  :\n}\n")
    status = json.loads(run("index", "status", str(root), "--json"))
    assert status["pending"] == {"changed": 1, "added": 1, "deleted": 0}
    again = json.loads(run("index", "build", str(root), "-q", "--json", "--no-embed"))
    assert again["by_language"]["bash"] == 2 and again["skipped"] == {"no_grammar": 1}
    for name, path in (("rotate_logs", "data/NOTES"), ("rollback_release", "bin/deploy")):
        found = json.loads(run("symbol", name, "-C", str(root), "--json"))
        assert [d["path"] for d in found["symbols"]] == [path]
    assert json.loads(run("symbol", "rollout_release", "-C", str(root), "--json"))["symbols"] == []
