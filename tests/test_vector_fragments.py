"""Embedding workers write the vector table's fragments; the driver commits them and only then
marks chunks embedded (`indexer.vectors.fragments`): real Lance tables in tmp_path, real
builds on a real local Ray instance."""

from __future__ import annotations

import json
import os
from pathlib import Path

import lance
import numpy as np
import pytest

from indexer.build import build
from indexer.config import load_config
from indexer.graph import store
from indexer.phases import semantic
from indexer.vectors.fragments import (
    FragmentBatch,
    InlineFragments,
    UncommittedMarker,
    embed_to_fragments,
    open_writer,
)
from indexer.vectors.hashing import HashingEmbedder
from indexer.vectors.table import VectorRow, VectorStore, local_table_dir
from tests.conftest import make_repo

ray = pytest.importorskip("ray")

MODEL = "hashing:64"


def _row(i: int, h: str, scale: float = 1.0) -> VectorRow:
    vec = np.full(4, scale * (i + 1), dtype=np.float32)
    return VectorRow(str(i), h, f"f{i}.py", "python", 1, 2, f"s{i}", "m", vec)


def _data_files(uri: str) -> set[str]:
    return set(os.listdir(os.path.join(local_table_dir(uri), "data")))


def _rows(vs: VectorStore) -> dict[str, tuple]:
    t = lance.dataset(os.path.join(local_table_dir(vs.uri))).to_table()
    out: dict[str, tuple] = {}
    for cid, h, path, vec in zip(t["chunk_id"].to_pylist(), t["content_hash"].to_pylist(),
                                 t["path"].to_pylist(), t["vector"].to_pylist(), strict=True):
        assert cid not in out, f"chunk {cid} has two rows"
        out[cid] = (h, path, tuple(round(x, 5) for x in vec))
    return out


# ---------------------------------------------------------------- the table's own operations


def test_a_fragment_never_committed_is_invisible_and_dropped(tmp_path):
    vs = VectorStore.open(str(tmp_path / "v"), 4, "m")
    vs.upsert([_row(i, f"h{i}") for i in range(3)])
    before, files = _rows(vs), _data_files(vs.uri)
    marker = UncommittedMarker(tmp_path)
    frag = vs.write_fragment([_row(7, "h7"), _row(8, "h8")])  # a worker's write ...
    marker.record(vs, [frag])  # ... named before a commit that never comes
    assert len(_data_files(vs.uri)) == len(files) + 1  # the bytes are there ...
    reader = VectorStore.open(vs.uri, 4, "m")
    assert reader.count() == 3 and _rows(reader) == before  # ... and no reader sees them
    assert reader.vectors_for_hashes(["h7"]) == {}
    assert {h.chunk_id for h in reader.search(np.ones(4), k=10)} == {"0", "1", "2"}
    assert marker.recover(vs) == 1
    assert _data_files(vs.uri) == files and _rows(VectorStore.open(vs.uri, 4, "m")) == before
    assert not os.path.exists(marker.path)


def test_recovery_deletes_only_its_own_uncommitted_files(tmp_path):
    """Two indexes share one table (the same vectors URI): A recovers from a stopped run
    while B's worker has written a fragment B has not committed yet. A deletes its own dead
    file only; B's commit then holds, and the table stays readable."""
    uri = str(tmp_path / "shared")
    a, b = VectorStore.open(uri, 4, "m"), VectorStore.open(uri, 4, "m")
    a.upsert([_row(i, f"h{i}") for i in range(3)])
    marker = UncommittedMarker(tmp_path / "a-index")
    os.makedirs(marker.path.rsplit("/", 1)[0])
    marker.record(a, [a.write_fragment([_row(5, "h5")])])  # A's run stops here
    dead = _data_files(uri)
    b_frag = b.write_fragment([_row(10, "h10")])  # B's worker wrote; B's commit comes next
    assert marker.recover(a) == 1
    b.commit_fragments([b_frag])
    reader = VectorStore.open(uri, 4, "m")
    reader.check_readable()
    assert sorted(_rows(reader)) == ["0", "1", "10", "2"]
    assert len(dead - _data_files(uri)) == 1  # A's own file, nothing else


def test_recovery_keeps_files_a_version_names(tmp_path):
    """Stopped after the commit and before the marker was cleared: the files are the
    table's now, and stay."""
    vs = VectorStore.open(str(tmp_path / "v"), 4, "m")
    marker = UncommittedMarker(tmp_path)
    frag = vs.write_fragment([_row(1, "h1")])
    marker.record(vs, [frag])
    vs.commit_fragments([frag])
    assert marker.recover(vs) == 0
    VectorStore.open(vs.uri, 4, "m").check_readable()
    assert sorted(_rows(vs)) == ["1"]


def test_a_marker_names_only_files_of_the_table(tmp_path):
    """The marker is a file in the index directory (which a clone can ship): a name that is
    not a data file's, or a record for another table, deletes nothing."""
    vs = VectorStore.open(str(tmp_path / "v"), 4, "m")
    victim = tmp_path / "v" / "keep.txt"
    victim.write_text("x")
    marker = UncommittedMarker(tmp_path)
    for uri, files in ((os.path.abspath(vs.uri), ["../keep.txt", "/etc/passwd"]),
                       (str(tmp_path / "other"), ["x.lance"])):
        with open(marker.path, "w") as fh:
            json.dump({"uri": uri, "since": 1, "files": files}, fh)
        assert marker.recover(vs) == 0
    assert victim.exists() and not os.path.exists(marker.path)


def test_a_worker_never_makes_a_table_and_checks_it_is_the_drivers(tmp_path, monkeypatch):
    """A worker in another working directory, given a relative path, finds no table there
    and says so (no table made); a table other than the driver's (same name elsewhere,
    another copy) is refused with the reason."""
    embedder = HashingEmbedder(64)
    driver = VectorStore.open(str(tmp_path / "v"), 64, embedder.name)
    elsewhere = tmp_path / "worker-cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    writer, why = open_writer(embedder, "v", None, driver.identity())
    assert writer is None and "no vector table" in why
    assert os.listdir(elsewhere) == []
    other = VectorStore.open(str(tmp_path / "copy"), 64, embedder.name)
    writer, why = open_writer(embedder, other.uri, None, driver.identity())
    assert writer is None and "not the driver's" in why
    seen = driver.identity()
    driver.upsert([VectorRow("1", "h", "p", "", 1, 2, "", embedder.name, np.ones(64))])
    writer, why = open_writer(embedder, driver.uri, None, seen)
    assert writer is not None and why is None  # the driver's, committed to since: fine
    writer.write(FragmentBatch([("2", "h2", "p", "", 1, 2, "")], {"h2": "text"}))


def test_commit_replaces_rows_and_appends_in_one_version(tmp_path):
    vs = VectorStore.open(str(tmp_path / "v"), 4, "m")
    vs.upsert([_row(i, f"h{i}") for i in range(5)])
    version = vs._latest().version
    frags = [vs.write_fragment([_row(3, "h3x", 10), _row(4, "h4x", 10)]),
             vs.write_fragment([_row(7, "h7")])]
    vs.commit_fragments(frags, replacing=["3", "4"])
    assert vs._latest().version == version + 1  # readers see all of it or none
    rows = _rows(vs)
    assert sorted(rows) == ["0", "1", "2", "3", "4", "7"]
    assert rows["3"][0] == "h3x" and rows["3"][2] == (40.0,) * 4 and rows["1"][0] == "h1"


def test_inline_fragments_embed_each_content_once_and_mark_after_commit(tmp_path):
    """The driver loop in this process: duplicate content across batches is embedded once
    (a row waits for its hash's commit, then reuses the vector), and every mark follows the
    commit holding its row."""
    embedder = HashingEmbedder(64)
    vs = VectorStore.open(str(tmp_path / "v"), 64, embedder.name)
    pool = InlineFragments(embedder, vs.uri)
    # 3 batches of 4 rows; hashes repeat across them
    batches = [[(b * 4 + i, f"h{(b * 4 + i) % 6}", f"p{b}.py", "python", 1, 2, "", "")
                for i in range(4)] for b in range(3)]
    texts_asked: list[str] = []

    def read_texts(rows):
        texts_asked.extend(r[1] for r in rows)
        return {r[1]: f"text {r[1]}" for r in rows}

    seen_at_mark: list[int] = []

    def mark(ok, failed):
        assert not failed
        present = VectorStore.open(vs.uri, 64, embedder.name).chunk_ids()
        assert {str(i) for i in ok} <= present  # committed before marked
        seen_at_mark.extend(ok)

    embedded, reused = embed_to_fragments(vs, pool, iter(batches), read_texts, mark, 12)
    assert (embedded, reused) == (6, 6)
    assert sorted(seen_at_mark) == list(range(12))
    rows = _rows(vs)
    assert sorted(map(int, rows)) == list(range(12))
    want = embedder.embed([f"text h{i % 6}" for i in range(12)])
    for i in range(12):
        np.testing.assert_allclose(rows[str(i)][2], np.round(want[i], 5), atol=1e-5)


def _batches(n: int, size: int) -> list[list[tuple]]:
    return [[(b * size + i, f"h{b * size + i}", f"p{b}.py", "python", 1, 2, "", "")
             for i in range(size)] for b in range(n)]


def test_a_chunk_whose_reused_vector_is_gone_stays_pending_not_unreadable(tmp_path):
    """A vector the driver's scan saw, gone when the worker reads it: the chunk stays pending
    (embedded = 0) for the next build, not marked failed (-1), which no build retries."""
    embedder = HashingEmbedder(64)
    vs = VectorStore.open(str(tmp_path / "v"), 64, embedder.name)
    vec = embedder.embed(["old text"])[0]
    vs.upsert([VectorRow("99", "hx", "old.py", "python", 1, 2, "", embedder.name, vec)])

    class Vanishing(InlineFragments):
        def submit(self, batch):
            vs.delete_chunk_ids(["99"])  # another writer removes it after the scan
            return super().submit(batch)

    marks: list[tuple[list, list]] = []
    batch = [(1, "hx", "new.py", "python", 1, 2, "", "")]
    embedded, reused = embed_to_fragments(vs, Vanishing(embedder, vs.uri), iter([batch]),
                                          lambda rows: {}, lambda ok, failed: marks.append((ok, failed)), 1)
    assert (embedded, reused) == (0, 0)
    assert marks == [([], [])]


class _Stop(BaseException):
    pass


def test_the_marker_names_every_fragment_received_before_its_commit(tmp_path):
    """Stopped with two batches received and none committed: the marker names both batches'
    files, and the next build's recovery deletes them."""
    embedder = HashingEmbedder(64)
    vs = VectorStore.open(str(tmp_path / "v"), 64, embedder.name)

    class Windowed(InlineFragments):
        window = 3  # a batch is collected when 4 are in flight, a commit made every 3

    calls = 0

    def read_texts(rows):
        nonlocal calls
        calls += 1
        if calls == 6:  # before the 6th batch: batches 1 and 2 collected, nothing committed
            raise _Stop
        return {r[1]: f"text {r[1]}" for r in rows}

    marker = UncommittedMarker(tmp_path)
    received = []
    pool = Windowed(embedder, vs.uri)
    write = pool.writer.write

    def writing(batch):
        written = write(batch)
        received.append(VectorStore.data_files([written.fragment]))
        return written

    pool.writer.write = writing
    with pytest.raises(_Stop):
        embed_to_fragments(vs, pool, iter(_batches(8, 2)), read_texts,
                           lambda ok, failed: pytest.fail("nothing was committed"), 16,
                           marker=marker)
    named = json.loads(Path(marker.path).read_text())["files"]
    assert sorted(named) == sorted(received[0] + received[1])
    assert marker.recover(vs) == 2
    assert _data_files(vs.uri).isdisjoint(named)


# ---------------------------------------------------------------- builds on a real Ray


@pytest.fixture(scope="module")
def ray_local():
    """One local Ray instance for the module (~3 s to start here); builds reuse it."""
    if ray.is_initialized():
        pytest.skip("a Ray instance is already running in this process")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture(autouse=True)
def small_batches(monkeypatch):
    """Small batches, and every chunk to Ray: several windows of several batches each."""
    from indexer.parse import ray_engine

    monkeypatch.setattr(ray_engine, "MIN_FILES", 1)
    monkeypatch.setattr(ray_engine, "MIN_CHUNKS", 1)
    monkeypatch.setattr(semantic, "BATCH", 16)


@pytest.fixture
def repo(tmp_path):
    """60 files; files i and i + 30 are identical, so content repeats across batches."""
    files = {}
    for i in range(60):
        body = "".join(f"def f{j}_{i % 30}(x):\n    y = x * {j} + {i % 30}\n    return y\n\n\n"
                       for j in range(4))
        files[f"pkg{i // 30}/m{i:02d}.py"] = body
    return make_repo(tmp_path / "repo", files)


def _cfg(root: Path, index_dir: Path, engine: str):
    return load_config(root, env={}, jobs=2, index_dir=index_dir, engine=engine,
                       embed_model=MODEL)


def _table(cfg) -> dict[str, tuple]:
    conn = store.open_for_read(cfg.index_path).conn
    try:
        ids = {str(r[0]) for r in conn.execute("SELECT id FROM chunks")}
        unmarked = conn.execute("SELECT count(*) FROM chunks WHERE embedded != 1").fetchone()[0]
    finally:
        conn.close()
    rows = _rows(VectorStore.open(str(cfg.index_path / "vectors.lance"), 64, MODEL))
    assert set(rows) == ids and not unmarked  # every chunk has exactly its vector, marked
    return rows


def _marks(cfg) -> int:
    conn = store.open_for_read(cfg.index_path).conn
    try:
        return conn.execute("SELECT count(*) FROM chunks WHERE embedded = 1").fetchone()[0]
    finally:
        conn.close()


def test_ray_fragments_equal_what_the_driver_wrote(ray_local, repo, tmp_path):
    local = _cfg(repo, tmp_path / "local", "local")
    remote = _cfg(repo, tmp_path / "ray", "ray")
    a, b = build(local, embed=True), build(remote, embed=True)
    assert a.embedding["embedded"] == b.embedding["embedded"] > 0
    assert a.embedding["reused"] == b.embedding["reused"] > 0  # the repeated files
    assert b.embedding["worker_cpu"] > 0
    assert _table(local) == _table(remote)


def test_marks_wait_for_the_commit(ray_local, repo, tmp_path, monkeypatch):
    """A commit that fails after the workers wrote their fragments leaves every chunk
    unmarked and the table empty to readers; the next build embeds everything, deletes the
    dead fragments and ends with the table a local build writes."""
    cfg = _cfg(repo, tmp_path / "ray", "ray")
    uri = str(cfg.index_path / "vectors.lance")
    real = lance.LanceDataset.commit

    def refused(*a, **kw):
        raise RuntimeError("commit refused by the test")

    monkeypatch.setattr(lance.LanceDataset, "commit", staticmethod(refused))
    with pytest.raises(RuntimeError, match="refused by the test"):
        build(cfg, embed=True)
    monkeypatch.setattr(lance.LanceDataset, "commit", staticmethod(real))
    dead = _data_files(uri)
    assert dead  # the workers did write
    assert _marks(cfg) == 0
    assert VectorStore.open(uri, 64, MODEL).count() == 0
    again = build(cfg, embed=True)
    assert again.embedding["coverage"] == 1.0
    assert not dead & _data_files(uri)  # never-committed fragments are gone
    local = _cfg(repo, tmp_path / "local", "local")
    build(local, embed=True)
    assert _table(cfg) == _table(local)


def test_rows_committed_but_unmarked_are_replaced_not_doubled(ray_local, repo, tmp_path):
    """A build stopped after a commit and before its marks: the next build embeds those
    chunks again and its commit replaces their rows (one row per chunk)."""
    cfg = _cfg(repo, tmp_path / "ray", "ray")
    build(cfg, embed=True)
    before = _table(cfg)
    db = store.open_for_write(cfg.index_path)
    with db.conn:  # as if killed after the commit, before the marks
        db.execute("UPDATE chunks SET embedded = 0 WHERE id % 3 = 0")
    db.conn.close()
    again = build(cfg, embed=True)
    assert again.embedding["reused"] > 0 and again.embedding["embedded"] == 0
    assert _table(cfg) == before


def test_a_relative_vectors_uri_reaches_the_workers_as_the_drivers_table(
        ray_local, repo, tmp_path, monkeypatch):
    """Ray runs the actors in another working directory: a relative vectors URI must reach
    them as the driver's table, not a new one of their own (whose files the driver would
    commit without having them)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    cfg = load_config(repo, env={}, jobs=2, index_dir=tmp_path / "ray", engine="ray",
                      embed_model=MODEL, vectors_uri="vecs")
    stats = build(cfg, embed=True)
    assert stats.embedding["driver_writes"] == ""  # the actors wrote the fragments
    table = VectorStore.open(str(cwd / "vecs"), 64, MODEL)
    table.check_readable()
    local = _cfg(repo, tmp_path / "local", "local")
    build(local, embed=True)
    assert _rows(table) == _table(local)


class _Killed(BaseException):
    """Stops a build the way kill -9 does for what it leaves: no phase publishes after it."""


def test_a_killed_full_rebuilds_fragments_are_deleted_by_the_next_build(
        ray_local, repo, tmp_path, monkeypatch):
    """The fragments of a full rebuild stopped before its commit: its new graph generation is
    never published (the next build deletes it), so what names the fragments lies in the
    index directory, and the next build that embeds deletes them."""
    cfg = _cfg(repo, tmp_path / "ray", "ray")
    uri = str(cfg.index_path / "vectors.lance")
    build(cfg, embed=True)
    kept = _data_files(uri)
    for path in sorted(repo.rglob("m0*.py")):  # new content for the rebuild to embed
        path.write_text(path.read_text() + "\nX = 1\n")

    def killed(*a, **kw):
        raise _Killed

    real = lance.LanceDataset.commit
    monkeypatch.setattr(lance.LanceDataset, "commit", staticmethod(killed))
    with pytest.raises(_Killed):
        build(cfg, full=True, embed=True)
    monkeypatch.setattr(lance.LanceDataset, "commit", staticmethod(real))
    dead = _data_files(uri) - kept
    assert dead  # the workers wrote
    assert build(cfg, embed=True).embedding["coverage"] == 1.0  # an incremental one
    assert not dead & _data_files(uri)
    VectorStore.open(uri, 64, MODEL).check_readable()


def test_actors_that_cannot_write_the_table_say_why_once(ray_local, repo, tmp_path):
    """Actors shown another table than theirs send vectors back, and the pool says why (the
    build's notify gets it, and its stats)."""
    from indexer.parse.ray_engine import RaySession

    cfg = _cfg(repo, tmp_path / "ray", "ray")
    vs = VectorStore.open(str(tmp_path / "v"), 64, MODEL)
    other = VectorStore.open(str(tmp_path / "w"), 64, MODEL).identity()
    pool = RaySession(cfg).embed_pool(MODEL, 16)
    try:
        pool.open_table(vs.uri, None, other)
        assert "2 of 2 workers" in pool.driver_writes and "not the driver's" in pool.driver_writes
        written = pool.result(pool.submit(FragmentBatch([("1", "h1", "p", "", 1, 2, "")],
                                                        {"h1": "text"})))
        assert written.fragment is None and set(written.vectors) == {"h1"}
    finally:
        pool.close()


# ---------------------------------------------------------------- reading pending chunks


def _plan(conn, sql: str, args: list) -> list[str]:
    return [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, args)]


@pytest.mark.parametrize("analyzed", [False, True])
def test_pending_chunks_are_read_by_id_for_short_runs_and_by_path_without_a_sort(
        repo, tmp_path, analyzed):
    """A short run (an edit) walks only the pending chunks (the partial index); a long one
    walks files in path order with no sort, even when statistics say few chunks are pending
    (which would otherwise sort every pending chunk for each batch)."""
    from indexer.parse.testpaths import sql_is_test_path

    cfg = _cfg(repo, tmp_path / "idx", "local")
    build(cfg)
    db = store.open_for_write(cfg.index_path)
    conn = db.conn
    try:
        with conn:
            conn.execute("UPDATE chunks SET embedded = 1")
            conn.execute("UPDATE chunks SET embedded = 0 WHERE id IN "
                         "(SELECT id FROM chunks ORDER BY id DESC LIMIT 3)")
            if analyzed:
                conn.execute("ANALYZE")
        params = list(sql_is_test_path("f.path")[1])
        by_id = _plan(conn, semantic._PENDING_BY_ID, [*params, 0, -1, 16])
        by_path = _plan(conn, semantic._PENDING_BY_PATH, [*params, 0, "", -1, 16])
        assert "chunks_unembedded" in by_id[0] and not any("TEMP B-TREE" in s for s in by_id)
        assert by_path[0].startswith("SEARCH f USING INDEX") and "chunks_file" in by_path[1]
        assert not any("TEMP B-TREE" in s for s in by_path)
        ids = [r[0] for rows in semantic._pending_rows(conn, 3, by_path=False) for r in rows]
        paths = [(r[2], r[0]) for rows in semantic._pending_rows(conn, 3, by_path=True)
                 for r in rows]
        assert ids == sorted(ids) and len(ids) == 3
        assert paths == sorted(paths) and {i for _, i in paths} == set(ids)
    finally:
        conn.close()
