"""A whole index loaded through shards (`indexer.graph.shards`, `indexer.phases.sharded`): the
graph a serial build writes, row for row; a shard writer killed mid-build leaves nothing the
next build does not repair; edits after it write in place, in O(change)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import indexer.phases.sharded as sharded
import indexer.safety.lifetime as lifetime
from indexer.build import build
from indexer.config import load_config
from indexer.graph import shards, store
from indexer.graph.store import SHARDS_PREFIX
from indexer.ops.verify import verify
from tests.conftest import dump_graph, make_repo, write_files

REPOCTX = str(Path(sys.executable).with_name("repoctx"))
ENV = {k: v for k, v in os.environ.items() if not k.startswith("REPOCTX_")}
#: Files in the corpus: above `sharded.SHARD_MIN`, so a CLI build with two jobs shards it.
N = sharded.SHARD_MIN + 12


def _corpus(tmp_path: Path, name: str = "repo") -> Path:
    """Packages whose classes inherit across files, call each other and import each other:
    every resolution strategy has something to do, and most of it crosses shards."""
    files = {"pkg/__init__.py": "from pkg.m0 import Base0\n"}
    for i in range(N):
        prev = max(i - 1, 0)
        files[f"pkg/m{i}.py"] = (
            f"from pkg.m{prev} import Base{prev}, helper{prev}\n"
            f"import pkg.m{(i * 7) % N} as other\n\n\n"
            f"class Base{i}(Base{prev}):\n"
            f'    """Base number {i}."""\n\n'
            f"    def run(self, x):\n"
            f"        return self.step(x) + helper{prev}(x) + other.helper{(i * 7) % N}(x)\n\n"
            f"    def step(self, x):\n"
            f"        return x * {i}\n\n\n"
            f"def helper{i}(x):\n"
            f"    return Base{i}().run(x) if x else {i}\n"
        )
    files["README.md"] = "# pkg\n\nSee [the first module](pkg/m0.py).\n"
    return make_repo(tmp_path / name, files)


def _count_shards(monkeypatch) -> list[int]:
    """Sizes of the shards parsed in worker processes, as the build's driver receives them."""
    sizes: list[int] = []
    real = lifetime.in_flight

    def in_flight(pool, fn, calls, most):
        for result in real(pool, fn, calls, most):
            if fn is sharded.parse_shard:
                sizes.append(len(result[0].files))
            yield result

    monkeypatch.setattr(lifetime, "in_flight", in_flight)
    return sizes


def _clean_graph(root: Path, tmp_path: Path) -> dict:
    """The graph a serial build (one process, one writer) writes of ``root``."""
    cfg = load_config(root, env={}, jobs=1, index_dir=tmp_path / "serial-index")
    build(cfg, full=True)
    return dump_graph(cfg)


@pytest.mark.parametrize("full", [False, True], ids=["first-build", "full-rebuild"])
def test_a_sharded_load_writes_the_graph_of_a_serial_build(tmp_path, monkeypatch, full):
    root = _corpus(tmp_path)
    sizes = _count_shards(monkeypatch)
    cfg = load_config(root, env={}, jobs=2)
    if full:
        build(load_config(root, env={}, jobs=1))  # a serial first build, then a rebuild
    stats = build(cfg, full=full)
    assert len(sizes) > 3 and sum(sizes) == stats.files_parsed + sum(stats.skipped.values())
    assert "serial:resolve" in stats.phases  # the sharded path's own figures
    want = _clean_graph(root, tmp_path)
    got = dump_graph(cfg)
    assert got == want
    assert got["refs"] and any(r[8] == "self" for r in got["refs"])  # the fixture resolves
    assert not list(cfg.index_path.glob(f"{SHARDS_PREFIX}*"))  # shards go with the build
    report = verify(cfg)
    assert report.ok, report.issues


def test_an_edit_after_a_sharded_load_rewrites_only_its_file(tmp_path, monkeypatch):
    root = _corpus(tmp_path)
    cfg = load_config(root, env={}, jobs=2)
    build(cfg)
    sizes = _count_shards(monkeypatch)
    write_files(root, {"pkg/m3.py": "from pkg.m2 import Base2\n\n\nclass Base3(Base2):\n"
                                    "    def step(self, x):\n        return -x\n"})
    stats = build(cfg)
    assert stats.files_parsed == 1 and sizes == []  # in place, no shard
    assert dump_graph(cfg) == _clean_graph(root, tmp_path)


def _cli_build(root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([REPOCTX, "index", "build", str(root), "--no-embed", "-q", "-j", "2", *args],
                          env={**ENV, **(env or {})}, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("point", ["shard_written", "shard_resolved"])
@pytest.mark.parametrize("full", [False, True], ids=["first-build", "full-rebuild"])
def test_a_shard_writer_killed_mid_build_is_repaired_by_the_next_build(tmp_path, point, full):
    """kill -9 of a worker (`crash_point`): as it wrote its shard, before any was merged; or as it
    wrote its resolutions, after every parsed shard was merged into the graph (in place, for a
    first build: its files are there without their hash, so the next build parses them again)."""
    root = _corpus(tmp_path)
    idx = root / ".repoctx"
    if full:
        assert _cli_build(root, "-j", "1").returncode == 0
        before = dump_graph(load_config(root, env={}))
        write_files(root, {"pkg/m5.py": "def helper5(x):\n    return x\n"})
    killed = _cli_build(root, *(["--full"] if full else []), env={"REPOCTX_CRASH_AT": point})
    assert killed.returncode != 0
    assert "worker process" in killed.stderr and "run the build again" in killed.stderr
    cfg = load_config(root, env={})
    if full:  # the old generation kept serving, untouched
        assert os.readlink(idx / "graph.db") == "graph.1.db"
        assert dump_graph(cfg) == before
    elif point == "shard_resolved":  # parsed shards merged: files without hashes, no references
        conn = store.open_for_read(idx).conn
        assert conn.execute("SELECT count(*) FROM files WHERE hash IS NULL").fetchone()[0] > N // 2
        conn.close()
    done = _cli_build(root)
    assert done.returncode == 0, done.stderr
    assert not list(idx.glob(f"{SHARDS_PREFIX}*"))  # the killed build's shards went too
    assert dump_graph(cfg) == _clean_graph(root, tmp_path)
    report = verify(cfg)
    assert report.ok, report.issues


def test_a_killed_builds_shards_are_deleted_by_the_next_build(tmp_path):
    root = _corpus(tmp_path)
    assert _cli_build(root).returncode == 0
    left = root / ".repoctx" / f"{SHARDS_PREFIX}999-dead"
    left.mkdir()
    (left / "0.db").write_bytes(b"half a shard")
    write_files(root, {"pkg/m1.py": "X = 1\n"})
    assert _cli_build(root).returncode == 0
    assert not left.exists()


def test_the_shard_tables_are_the_graphs(tmp_path):
    """A shard is created from the graph's own CREATE TABLE text: a migration that adds a column
    reaches the shards with no second copy to keep in step."""
    from indexer.graph import shards

    root = _corpus(tmp_path)
    cfg = load_config(root, env={}, jobs=1)
    build(cfg)
    db = store.open_for_write(cfg.index_path)
    try:
        ddl = shards.shard_schema(db)
        path = tmp_path / "s.db"
        shards.write_shard(str(path), ddl, 1, [])
        import sqlite3

        shard = sqlite3.connect(path)
        for table in shards.SHARD_TABLES:
            want = db.execute(f"PRAGMA table_info({table})").fetchall()
            assert shard.execute(f"PRAGMA table_info({table})").fetchall() == want
        shard.close()
    finally:
        db.conn.close()


def test_a_sharded_load_of_every_language_writes_the_golden_graph(tmp_path, monkeypatch):
    """The polyglot corpus of `test_graph_golden` (24 languages, docs, configs), forced through
    shards of a few files each: the committed digest of the serial build."""
    from tests.test_graph_golden import _assert_golden, _corpus, _snapshot

    monkeypatch.setattr(sharded, "SHARD_MIN", 0)
    monkeypatch.setattr(sharded, "SHARDS_PER_JOB", 64)  # the smallest shards
    sizes = _count_shards(monkeypatch)
    cfg = load_config(_corpus(tmp_path), env={}, jobs=2)
    build(cfg, full=True)
    assert len(sizes) > 3
    _assert_golden(_snapshot(cfg))


def test_where_fts5_segments_cannot_be_copied_the_merge_tokenizes(tmp_path, monkeypatch):
    """A SQLite whose FTS5 records are not laid out as `fts_segments` reads them: the shards
    carry plain lexical rows and the merge tokenizes them, to the same graph."""
    from indexer.graph import fts_segments

    monkeypatch.setattr(fts_segments, "supported", lambda sql: False)
    copies: list[bool] = []
    merge = shards.merge_parsed

    def recording(db, path, offset, copy):
        copies.append(copy)
        return merge(db, path, offset, copy)

    monkeypatch.setattr(shards, "merge_parsed", recording)
    root = _corpus(tmp_path)
    cfg = load_config(root, env={}, jobs=2)
    stats = build(cfg)
    assert "serial:resolve" in stats.phases
    assert copies and not any(copies)  # every shard's lexical rows were tokenized at the merge
    assert dump_graph(cfg) == _clean_graph(root, tmp_path)
    conn = store.open_for_read(cfg.index_path).conn
    hits = conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'helper3'").fetchone()[0]
    conn.close()
    assert hits >= 2


def test_many_new_files_beside_indexed_ones_are_written_in_place(tmp_path, monkeypatch):
    """Only a graph with no file of its own is loaded through shards: new files beside indexed
    ones define names that references already in the graph must now resolve to, which the
    in-place writer finds (pending names) and a shard would not."""
    root = make_repo(tmp_path / "repo", {"app.py": "from pkg.m0 import helper0\n\n\n"
                                                  "def main():\n    return helper0(1)\n",
                                       "pkg/__init__.py": "from pkg.m0 import Base0\n"})
    cfg = load_config(root, env={}, jobs=2)
    build(cfg)
    sizes = _count_shards(monkeypatch)
    new = _corpus(tmp_path, "new")
    for path in new.rglob("m*.py"):  # the same packages: only the new files are looked at
        target = root / path.relative_to(new)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    stats = build(cfg)
    assert stats.files_parsed > sharded.SHARD_MIN and sizes == []
    assert dump_graph(cfg) == _clean_graph(root, tmp_path)
    refs = [r for r in dump_graph(cfg)["refs"] if r[0] == "app.py" and r[3] == "helper0"]
    assert refs and all(r[7] == "pkg.m0.helper0" for r in refs)  # resolved to the new file


def test_a_load_of_many_shards_merges_its_lexical_copies_before_fts5s_limit(tmp_path, monkeypatch):
    """Each shard adds a segment per lexical table; past `SEGMENT_BUDGET` the copies so far are
    merged into one (FTS5 holds 2000 segments, and reads a table with more as corrupt)."""
    from indexer.graph import fts_segments

    monkeypatch.setattr(sharded, "SHARD_MIN", 0)
    monkeypatch.setattr(sharded, "MIN_SHARD", 1)
    monkeypatch.setattr(sharded, "SEGMENT_BUDGET", 3)
    merges: list[int] = []
    real = fts_segments.optimize
    monkeypatch.setattr(fts_segments, "optimize",
                        lambda path, tables: (merges.append(1), real(path, tables))[1])
    sizes = _count_shards(monkeypatch)
    root = _corpus(tmp_path)
    cfg = load_config(root, env={}, jobs=2)
    build(cfg)
    assert len(sizes) > 12 and len(merges) >= 3  # merged during the load, and once at its end
    assert dump_graph(cfg) == _clean_graph(root, tmp_path)
    conn = store.open_for_write(cfg.index_path).conn
    for table in ("chunks_fts", "files_fts"):
        with conn:
            conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
        assert conn.execute(f"SELECT count(DISTINCT segid) FROM {table}_idx").fetchone()[0] == 1
    conn.close()
