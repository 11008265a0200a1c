"""`verify` finds each kind of corruption of a real index (SQLite graph and LanceDB vectors), and
`repair` fixes it through the incremental path: afterwards verify finds nothing and the graph
equals a clean build."""

from __future__ import annotations

import glob
import json
import os
import shutil
import time

import pytest
from click.testing import CliRunner

from cli.main import cli
from indexer.build import build
from indexer.config import load_config
from indexer.graph import store
from indexer.locations import vectors_uri
from indexer.ops.verify import repair, verify
from indexer.vectors.embed import create_embedder
from indexer.vectors.table import VectorRow, VectorStore
from tests.conftest import dump_graph, make_repo, write_files

FILES = {
    "pkg/__init__.py": "from .a import alpha\n",
    "pkg/a.py": "def alpha():\n    return beta()\n\n\ndef beta():\n    return 1\n",
    "pkg/b.py": "from pkg import alpha\n\n\nclass B:\n    def go(self):\n        return alpha()\n",
    "pkg/c.py": "from .b import B\n\n\nclass C(B):\n    def run(self):\n        return self.go()\n",
    "tool.py": "import pkg.a\n\n\ndef main():\n    pkg.a.beta()\n",
}
EMBEDDER = create_embedder("hashing")


def config_for(root, **kw):
    return load_config(root, env={}, jobs=1, embed_model="hashing", **kw)


@pytest.fixture
def indexed(tmp_path):
    root = make_repo(tmp_path / "repo", FILES)
    cfg = config_for(root)
    build(cfg, embed=True, embedder=EMBEDDER)
    return cfg


def clean_dump(cfg, tmp_path):
    clean = config_for(cfg.root, index_dir=tmp_path / f"clean-{time.monotonic_ns()}")
    build(clean, full=True)
    return dump_graph(clean)


def sql(cfg, statement: str, params=()) -> None:
    db = store.open_for_write(cfg.index_path)
    with db.conn:
        db.conn.execute(statement, params)
    db.conn.close()


def scalar(cfg, query: str, params=()):
    db = store.open_for_read(cfg.index_path)
    try:
        return db.conn.execute(query, params).fetchone()[0]
    finally:
        db.conn.close()


def vectors(cfg) -> VectorStore:
    return VectorStore.open(vectors_uri(cfg), EMBEDDER.dim, EMBEDDER.name)


def some_chunk(cfg, path: str = "pkg/a.py") -> int:
    return scalar(
        cfg,
        "SELECT c.id FROM chunks c JOIN files f ON f.id = c.file_id WHERE f.path = ? "
        "ORDER BY c.id LIMIT 1",
        [path],
    )


def test_a_fresh_index_verifies_clean(indexed):
    report = verify(indexed)
    assert report.ok and not report.notes and report.vectors_checked, report
    assert (
        report.checked["files"] == 5 and report.checked["vectors"] == report.checked["chunks"] > 0
    )


def _delete_file_row(cfg):
    sql(cfg, "DELETE FROM files WHERE path = 'pkg/b.py'")


def _dangling_target(cfg):
    sql(cfg, "UPDATE refs SET target_id = 4242 WHERE name = 'alpha' AND kind = 'call'")


def _dangling_candidate(cfg):
    ref = scalar(cfg, "SELECT id FROM refs LIMIT 1")
    sql(cfg, "INSERT INTO ref_candidates VALUES (?, 4243, 0.5)", [ref])


def _missing_enclosing(cfg):
    sql(cfg, "DELETE FROM symbols WHERE qualname = 'pkg.b.B.go'")


def _leftover_pending(cfg):
    sql(cfg, "INSERT INTO pending_names VALUES ('alpha')")
    sql(cfg, "UPDATE refs SET resolution = 'pending', target_id = NULL WHERE name = 'beta'")


def _fts_missing(cfg):
    sql(cfg, "DELETE FROM chunks_fts WHERE rowid = ?", [some_chunk(cfg)])


def _fts_orphan(cfg):
    sql(cfg, "INSERT INTO chunks_fts(rowid, path, symbol, body) VALUES (77, 'x', 'y', 'z')")


def _stale_file(cfg):
    write_files(cfg.root, {"pkg/a.py": "def alpha():\n    return 2\n"})


def _extra_file(cfg):
    (cfg.root / "pkg/c.py").unlink()


def _missing_vector(cfg):
    vectors(cfg).delete_chunk_ids([str(some_chunk(cfg))])


def _orphan_vector(cfg):
    vec = EMBEDDER.embed(["stray"])[0]
    vectors(cfg).upsert([VectorRow("999", "h", "gone.py", "python", 1, 2, "", EMBEDDER.name, vec)])


def _duplicate_vector(cfg):
    cid = str(some_chunk(cfg))
    table = vectors(cfg)._table  # the store itself never writes duplicates: add one behind it
    row = table.search().where(f"chunk_id = '{cid}'").limit(1).to_arrow()
    table.add(row.select([f.name for f in table.schema]))


def _table_dir(cfg):
    return vectors_uri(cfg) + "/chunks.lance"


def _vector_table_deleted(cfg):
    shutil.rmtree(_table_dir(cfg))


def _vector_manifest_garbled(cfg):
    for manifest in glob.glob(_table_dir(cfg) + "/_versions/*"):
        with open(manifest, "wb") as fh:
            fh.write(b"not a lance manifest" * 8)


def _vector_data_lost(cfg):
    for data in glob.glob(_table_dir(cfg) + "/data/*"):
        os.remove(data)


CORRUPTIONS = {
    "delete a file row": (
        _delete_file_row,
        {"missing_file", "orphan_symbol", "orphan_ref", "orphan_import", "orphan_chunk"},
    ),
    "orphan ref target": (_dangling_target, {"dangling_target"}),
    "orphan candidate": (_dangling_candidate, {"dangling_candidate"}),
    "lost enclosing symbol": (_missing_enclosing, {"missing_enclosing"}),
    "leftover pending": (_leftover_pending, {"pending_names", "pending_refs"}),
    "chunk missing from fts": (_fts_missing, {"fts_missing"}),
    "orphan fts row": (_fts_orphan, {"fts_orphan"}),
    "file edited": (_stale_file, {"stale_file"}),
    "file deleted": (_extra_file, {"extra_file"}),
    "vector deleted": (_missing_vector, {"missing_vector"}),
    "orphan vector": (_orphan_vector, {"orphan_vector"}),
    "duplicate vector": (_duplicate_vector, {"duplicate_vector"}),
    "vector table deleted": (_vector_table_deleted, {"missing_vector"}),
    "vector table manifest garbled": (_vector_manifest_garbled, {"vector_table_damaged"}),
    "vector table data files lost": (_vector_data_lost, {"vector_table_damaged"}),
}


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_verify_reports_and_repair_fixes(indexed, tmp_path, name):
    corrupt, expected = CORRUPTIONS[name]
    corrupt(indexed)
    report = verify(indexed)
    assert not report.ok
    assert expected <= report.kinds(), report.issues
    result = repair(indexed, embedder=EMBEDDER)
    assert result.actions
    assert result.after.ok and not result.after.notes, result.after
    assert verify(indexed).ok
    assert dump_graph(indexed) == clean_dump(indexed, tmp_path)
    assert scalar(indexed, "SELECT count(*) FROM chunks") == vectors(indexed).count()


def test_graph_only_index_is_verified_without_vectors(tmp_path):
    root = make_repo(tmp_path / "repo", FILES)
    cfg = config_for(root)
    build(cfg)
    report = verify(cfg)
    assert report.ok and not report.vectors_checked
    _dangling_target(cfg)
    assert not repair(cfg).before.ok and verify(cfg).ok


def test_cli_verify_exit_status_and_json(indexed):
    runner = CliRunner()
    ok = runner.invoke(cli, ["index", "verify", str(indexed.root), "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["ok"] is True
    _dangling_target(indexed)
    bad = runner.invoke(cli, ["index", "verify", str(indexed.root)])
    assert bad.exit_code == 1 and "dangling_target" in bad.output
    fixed = runner.invoke(cli, ["index", "verify", str(indexed.root), "--repair", "--json"])
    assert fixed.exit_code == 0, fixed.output
    out = json.loads(fixed.output)
    assert out["before"]["ok"] is False and out["after"]["ok"] is True
