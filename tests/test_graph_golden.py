"""A full build of a fixed polyglot corpus gives exactly the graph it gave before: the guard for
build-speed work (the symbols, references and their resolutions, imports, chunks and the rows
of both lexical indexes, compared row for row with a committed digest).

The corpus is every language fixture (tests/fixtures/languages/, 24 languages) plus a README, a
config and a Makefile. When a change is meant to alter the graph, rewrite the digest with
REPOCTX_UPDATE_GOLDEN=1 and say why in the commit; a speed change must leave it alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from indexer.build import build
from indexer.config import load_config
from indexer.graph import store
from indexer.graph.lexical import CHUNK_TABLES, FILE_TABLES
from tests.conftest import dump_graph, index, make_repo

FIXTURES = Path(__file__).parent / "fixtures"
GOLDEN = FIXTURES / "golden" / "graph_digest.json"
UPDATE_ENV = "REPOCTX_UPDATE_GOLDEN"

EXTRA = {
    "README.md": "# Shop\n\nSee [the store](languages/go/store.go).\n\n## Install\n\npip install shop\n",
    "config/app.yaml": "server:\n  port: 8080\nlogging:\n  level: info\n",
    "Makefile": "build:\n\tgo build ./...\n\ntest: build\n\tgo test ./...\n",
}


def _digest(rows: list) -> str:
    return hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()


def _snapshot(cfg) -> dict:
    graph = dump_graph(cfg)
    conn = store.open_for_read(cfg.index_path).conn
    try:
        # code's lexical rows and prose's (`indexer.graph.lexical.fts_table`) together
        chunks = sorted(row for table in CHUNK_TABLES for row in conn.execute(
            "SELECT f.path, c.symbol, c.kind, c.start_line, c.end_line, c.tokens, c.header, "
            "c.content_hash, t.path, t.symbol, t.body FROM chunks c JOIN files f ON f.id = c.file_id "
            f"JOIN {table} t ON t.rowid = c.id"
        ).fetchall())
        files_fts = sorted(row for table in FILE_TABLES for row in conn.execute(
            f"SELECT f.path, t.path, t.names, t.body FROM {table} t JOIN files f ON f.id = t.rowid"
        ).fetchall())
    finally:
        conn.close()
    # ids are hashes of content: stable, but they are not what the graph asserts
    graph["symbols"] = [row[:1] + row[2:] for row in graph["symbols"]]
    parts = {**graph, "chunks": chunks, "files_fts": files_fts}
    return {
        "counts": {k: (len(v) if isinstance(v, list) else v) for k, v in parts.items()},
        "digests": {k: _digest(v) for k, v in parts.items() if isinstance(v, list)},
    }


def _corpus(tmp_path) -> Path:
    files = {
        f"languages/{p.relative_to(FIXTURES / 'languages')}": p.read_text()
        for p in sorted((FIXTURES / "languages").rglob("*"))
        if p.is_file()
    }
    root = make_repo(tmp_path / "corpus", {**files, **EXTRA})
    shutil.rmtree(root / ".git")  # the history index is not part of the graph
    return root


def test_full_build_graph_is_unchanged(tmp_path):
    got = _snapshot(index(_corpus(tmp_path), full=True))  # chunks sized by the default model's tokenizer
    if os.environ.get(UPDATE_ENV) == "1":
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    _assert_golden(got)


def test_resolution_in_worker_processes_gives_the_same_graph(tmp_path, monkeypatch):
    """A full build with many references resolves them in worker processes
    (`graph_write.resolve_pending`): forced here on the small corpus, in small pages, with two
    parse processes too, it writes the graph of the serial build."""
    import indexer.graph.write as gw
    import indexer.safety.lifetime as lifetime

    monkeypatch.setattr(gw, "PARALLEL_MIN", 0)
    monkeypatch.setattr(gw, "PARALLEL_PAGE", 40)
    pages: list[int] = []
    real = lifetime.in_flight

    def in_flight(pool, fn, calls, most):
        for result in real(pool, fn, calls, most):
            if fn is gw.resolve_page:
                pages.append(len(result))
            yield result

    monkeypatch.setattr(lifetime, "in_flight", in_flight)
    cfg = load_config(_corpus(tmp_path), env={}, jobs=2)
    build(cfg, full=True)
    assert len(pages) > 3 and max(pages) == 40  # the workers resolved it, page by page
    _assert_golden(_snapshot(cfg))


def _assert_golden(got: dict) -> None:
    want = json.loads(GOLDEN.read_text())
    assert got["counts"] == want["counts"]
    changed = sorted(k for k in want["digests"] if got["digests"].get(k) != want["digests"][k])
    assert changed == [], (
        f"the graph of the fixture corpus changed in {changed}: a speed change must not do that; "
        f"if the change is meant, rewrite the digest with {UPDATE_ENV}=1 and say why"
    )
