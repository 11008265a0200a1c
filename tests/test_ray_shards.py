"""`--engine ray` loads a whole index through shards its workers write
(`indexer.phases.ray_shards`): the graph of a serial build, row for row, with no row inserted by
the driver; a worker killed mid-build fails the build cleanly and the next build repairs."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import indexer.graph.shards as shards
import indexer.graph.write as graph_write
import indexer.phases.sharded as sharded
from indexer.build import build
from indexer.config import load_config
from indexer.graph import store
from indexer.graph.store import SHARDS_PREFIX
from indexer.ops.verify import verify
from indexer.parse import ray_engine
from indexer.parse.ray_engine import RaySession
from indexer.parse.worker import FileResult
from indexer.phases import ray_shards
from tests.conftest import dump_graph, write_files
from tests.test_ray_engine import ray_local  # noqa: F401 - a fixture
from tests.test_shards import _clean_graph, _corpus

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.usefixtures("ray_local")  # one local Ray for the module

REPOCTX = str(Path(sys.executable).with_name("repoctx"))
#: More files than `ray_engine.MIN_FILES`: Ray takes the load without being forced to.
EXTRA = {f"extra/x{i}.py": f"from pkg.m{i} import Base{i}\n\n\nclass X{i}(Base{i}):\n"
                           f"    def step(self, x):\n        return self.run(x) - {i}\n"
         for i in range(10)}


@pytest.fixture
def root(tmp_path):
    root = _corpus(tmp_path)
    write_files(root, EXTRA)
    return root


@pytest.fixture
def driver_calls(monkeypatch):
    """What this process (the driver) ran: whole-batch parses, the local pool, row inserts,
    shard merges. Ray's workers are other processes: their calls are not counted."""
    calls = {"parse_all": 0, "local_pool": 0, "insert_rows": 0, "merge_parsed": 0,
             "merge_resolved": 0}

    def counted(owner, name, key):
        real = getattr(owner, name)

        def wrapper(*a, **kw):
            calls[key] += 1
            return real(*a, **kw)

        monkeypatch.setattr(owner, name, wrapper)

    counted(RaySession, "parse_all", "parse_all")
    counted(sharded.LocalShards, "parse", "local_pool")
    counted(graph_write, "insert_rows", "insert_rows")
    counted(shards, "merge_parsed", "merge_parsed")
    counted(shards, "merge_resolved", "merge_resolved")
    return calls


@pytest.mark.parametrize("full", [False, True], ids=["first-build", "full-rebuild"])
def test_ray_workers_write_the_shards_of_a_serial_builds_graph(root, tmp_path,
                                                                driver_calls, full):
    cfg = load_config(root, env={}, jobs=2, engine="ray", index_dir=tmp_path / "ray-index")
    if full:
        build(load_config(root, env={}, jobs=1, index_dir=tmp_path / "ray-index"))
    before = dict(driver_calls)
    stats = build(cfg, full=full)
    calls = {k: v - before[k] for k, v in driver_calls.items()}
    assert stats.files_parsed > ray_engine.MIN_FILES
    assert "serial:resolve" in stats.phases and stats.phases["cpu:workers"] > 0
    # Every row came from a worker's shard: the driver merged, it never parsed or inserted.
    assert calls["parse_all"] == calls["local_pool"] == calls["insert_rows"] == 0
    assert calls["merge_parsed"] == calls["merge_resolved"] > 1
    got = dump_graph(cfg)
    assert got == _clean_graph(root, tmp_path)
    assert got["refs"] and any(r[8] == "self" for r in got["refs"])  # the corpus resolves
    assert not list(cfg.index_path.glob(f"{SHARDS_PREFIX}*"))
    report = verify(cfg)
    assert report.ok, report.issues


def test_the_name_table_holds_what_resolution_reads(root, tmp_path):
    """The compact copy the workers resolve against answers `SymbolTable` as the graph does."""
    from indexer.graph.resolve import SymbolTable

    cfg = load_config(root, env={}, jobs=1, index_dir=tmp_path / "idx")
    build(cfg)
    db_file = str(store.graph_file(cfg.index_path))
    names = tmp_path / "names.db"
    names.write_bytes(ray_shards.name_table(db_file))
    assert names.stat().st_size < Path(db_file).stat().st_size / 4
    tables = []
    for path in (db_file, str(names)):
        table = SymbolTable(store.read_file(Path(path)).conn)
        table.preload()
        table.load_bases()
        tables.append(table)
    full, compact = tables
    for attr in ("_files", "_by_path", "_module_file", "_by_id", "_module_sym", "_by_name",
                 "_imports", "_bases"):
        assert getattr(full, attr) == getattr(compact, attr), attr
    assert full._bases  # the corpus's classes inherit
    for table in tables:
        table.conn.close()


@pytest.mark.parametrize("point", ["shard_written", "shard_resolved"])
def test_a_ray_worker_killed_mid_build_is_repaired_by_the_next_build(root, tmp_path,
                                                                     point):
    """kill -9 of every worker that writes a shard, or its resolutions (Ray's retries die too):
    the build stops with the build's worker error, having merged nothing of that shard; the
    next build repairs (a first build in place: files merged without their hash are parsed
    again)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPOCTX_")}
    killed = subprocess.run(
        [REPOCTX, "index", "build", str(root), "--no-embed", "-q", "-j", "2", "--engine", "ray"],
        env={**env, "REPOCTX_CRASH_AT": point}, capture_output=True, text=True, timeout=600)
    assert killed.returncode != 0
    assert "worker process" in killed.stderr and "run the build again" in killed.stderr
    cfg = load_config(root, env={}, jobs=2, engine="ray")
    if point == "shard_resolved":  # parsed shards merged: files without hashes, no references
        conn = store.open_for_read(cfg.index_path).conn
        assert conn.execute("SELECT count(*) FROM files WHERE hash IS NULL").fetchone()[0] > 30
        assert conn.execute("SELECT count(*) FROM refs WHERE kind != 'inherit'").fetchone()[0] == 0
        conn.close()
    build(cfg)  # on the module's Ray, whose workers are not told to die
    assert not list(cfg.index_path.glob(f"{SHARDS_PREFIX}*"))
    assert dump_graph(cfg) == _clean_graph(root, tmp_path)
    report = verify(cfg)
    assert report.ok, report.issues


def _rows(path: Path) -> dict:
    conn = sqlite3.connect(path)
    try:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
                for t in ("files", "symbols", "refs", "lexical", "resolved", "candidates")
                if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", [t]).fetchone()}
    finally:
        conn.close()


def _task_inputs(root: Path, tmp_path: Path) -> tuple[Path, tuple[str, ...], list]:
    """A serial build's graph file, its shard schema, and a parse task's items: a file to
    parse and one the driver settled."""
    cfg = load_config(root, env={}, jobs=1, index_dir=tmp_path / "idx")
    build(cfg)
    db_file = store.graph_file(cfg.index_path)
    reader = store.read_file(db_file)
    ddl = shards.shard_schema(reader)
    reader.conn.close()
    data = (root / "pkg/m3.py").read_bytes()
    items = [(1, ("pkg/m3.py", data, len(data), 1, "h", "python", "pkg.m3")),
             (2, FileResult("gone.py", 0, 0, "", "skipped:unreadable", error="gone"))]
    return db_file, ddl, items


def test_a_worker_that_cannot_see_the_shard_directory_returns_the_file(root, tmp_path):
    """On another machine than the driver's, the task bodies send their files back rather than
    writing them at the driver's path, and the parse its slim copy for the resolution; on the
    driver's they write them there, and the resolution reads the shard there (a resolve task
    given no copy elsewhere says so: the driver then sends `slim_copy`). Same rows."""
    db_file, ddl, items = _task_inputs(root, tmp_path)
    here = tmp_path / "shards"
    here.mkdir()
    shard = str(here / "0.db")
    elsewhere = str(tmp_path / "not-on-this-machine" / "0.db")
    (sent, report, _), slim = ray_shards.parse_task(elsewhere, ddl, None, 1, items)
    (none, _, _), no_slim = ray_shards.parse_task(shard, ddl, None, 1, items)
    assert none is None and no_slim is None  # nothing of it waits in the object store
    assert isinstance(sent, bytes) and isinstance(slim, bytes)
    assert not Path(elsewhere).parent.exists()
    assert [(p, s) for p, s, _ in report.files] == [("pkg/m3.py", "ok"), ("gone.py", "skipped:unreadable")]
    (tmp_path / "sent.db").write_bytes(sent)
    got = _rows(tmp_path / "sent.db")
    assert got == _rows(here / "0.db") and len(got["files"]) == 2 and got["symbols"]
    (tmp_path / "slim.db").write_bytes(slim)
    (tmp_path / "driver-slim.db").write_bytes(ray_shards.slim_copy(shard))  # sent elsewhere
    assert _rows(tmp_path / "driver-slim.db") == _rows(tmp_path / "slim.db")
    table = [ray.put(ray_shards.name_table(str(db_file)))]
    with pytest.raises(ray_shards.ShardUnseen):
        ray_shards.resolve_task(elsewhere, "key-1", table, None)
    resolved, n, _, _ = ray_shards.resolve_task(elsewhere, "key-1", table, slim)
    none, _, _, _ = ray_shards.resolve_task(shard, "key-1", table, None)  # read at its path
    assert none is None and n == report.refs - sum(r[3] == "inherit" for r in got["refs"]) > 0
    (tmp_path / "resolved.db").write_bytes(resolved)
    got = _rows(tmp_path / "resolved.db")
    assert got == _rows(here / "0.db") and len(got["resolved"]) == n
    assert set(got) == {"files", "refs", "resolved", "candidates"}  # the slim copy only
    # A retried task reads the copy an earlier attempt resolved: resolved again, not twice.
    none, again, _, _ = ray_shards.resolve_task(shard, "key-1", table, None)
    assert none is None and again == n and _rows(here / "0.db") == got


@pytest.mark.parametrize("name", ["OutOfMemoryError", "WorkerCrashedError", "NodeDiedError",
                                  "LocalRayletDiedError", "OwnerDiedError", "ObjectLostError",
                                  "TaskUnschedulableError"])
def test_a_task_whose_worker_or_result_is_gone_is_a_worker_death(name):
    """Killed by Ray's memory monitor, crashed, its node gone, its result lost: the build's
    `BuildWorkerError` (run again), not a raw Ray error."""
    cls = getattr(ray.exceptions, name)
    assert isinstance(cls.__new__(cls), ray_shards._worker_deaths(ray))


@pytest.mark.parametrize("name", ["RayTaskError", "OutOfDiskError", "ObjectStoreFullError"])
def test_a_tasks_own_error_or_a_full_disk_is_not_a_worker_death(name):
    cls = getattr(ray.exceptions, name)
    assert not isinstance(cls.__new__(cls), ray_shards._worker_deaths(ray))


def test_a_delivered_file_replaces_the_name_not_the_file_the_driver_has_open(tmp_path):
    """A second attempt's copy never rewrites the file an earlier one put there: whoever has
    that open (the driver, attached) keeps reading it whole."""
    shard = tmp_path / "0.db"
    shard.write_bytes(b"first attempt")
    retry = tmp_path / "retry.db"
    retry.write_bytes(b"the retry's shard, longer")
    with open(shard, "rb") as attached:
        assert ray_shards._deliver(str(retry), str(shard)) is None
        assert attached.read() == b"first attempt"
    assert shard.read_bytes() == b"the retry's shard, longer"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.db", "retry.db"]  # no part left


@pytest.mark.parametrize("fails", ["mkstemp", "copyfile"])
def test_a_directory_the_worker_sees_but_cannot_write_gets_the_bytes(tmp_path, monkeypatch, fails):
    """A read-only mount, another user's directory (root here writes anywhere, so the refusal
    is the OS call's): the shard's bytes travel to the driver instead of failing the task."""
    shard = tmp_path / "0.db"
    local = tmp_path / "local.db"
    local.write_bytes(b"the shard")

    def refused(*args, **kw):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile if fails == "mkstemp" else ray_shards.shutil, fails, refused)
    assert ray_shards._deliver(str(local), str(shard)) == b"the shard"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local.db"]  # no part, no shard


def test_a_worker_leaves_no_scratch_file_and_removes_what_killed_ones_left(root, tmp_path,
                                                                           monkeypatch):
    """Ray kills its workers at the job's end (nothing at their exit runs): the name table's
    file is deleted as soon as it is open, yet read by every task of the build; a task's
    scratch directory goes with the task, and those of killed workers go with the next
    worker's first task. A live process's are left alone."""
    db_file, ddl, items = _task_inputs(root, tmp_path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setattr(ray_shards, "_NAMES", [])
    monkeypatch.setattr(ray_shards, "_SWEPT", [])
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (scratch / f"repoctx-shard-{dead}-x1").mkdir()
    (scratch / f"repoctx-shard-{dead}-x1" / "shard.db").write_bytes(b"left by a killed worker")
    (scratch / f"repoctx-names-{dead}-x2.db").write_bytes(b"paths and names")
    (scratch / f"repoctx-shard-{os.getpid()}-live").mkdir()  # a running task's
    here = tmp_path / "shards"
    here.mkdir()
    (none, report, _), slim = ray_shards.parse_task(str(here / "0.db"), ddl, None, 1, items)
    assert none is None and slim is None
    assert [p.name for p in scratch.iterdir()] == [f"repoctx-shard-{os.getpid()}-live"]
    table = [ray.put(ray_shards.name_table(str(db_file)))]
    counts = []
    for _ in range(2):  # the second task reads the table whose file is gone
        none, n, _, _ = ray_shards.resolve_task(str(here / "0.db"), "key-2", table, slim)
        assert [p.name for p in scratch.iterdir()] == [f"repoctx-shard-{os.getpid()}-live"]
        counts.append(n)
    assert counts[0] == counts[1] > 0
    assert len(_rows(here / "0.db")["resolved"]) == counts[0]


def test_a_shard_the_resolving_worker_cannot_see_is_sent_to_it(root, tmp_path, monkeypatch):
    """A shard at its path on the driver's machine (delivered by its parse, or not parsed by
    this runner) has no slim copy in the object store: a resolve task that runs where its
    directory is not says so, and the driver sends the copy. Here the path is relative to the
    driver's working directory, which Ray's workers do not share."""
    db_file, ddl, items = _task_inputs(root, tmp_path)
    monkeypatch.chdir(tmp_path)
    shard = f"unseen-{os.getpid()}/0.db"
    os.mkdir(os.path.dirname(shard))
    (none, report, _), slim = ray_shards.parse_task(shard, ddl, None, 1, items)
    assert none is None and slim is None
    cfg = load_config(root, env={}, jobs=2, engine="ray", index_dir=tmp_path / "idx")
    session = ray_shards.ShardedRaySession(cfg)
    try:
        with session.shard_runner() as runner:
            (path, n, _, _), = runner.resolve(str(db_file), "key-3", [shard])
    finally:
        session.close()
    assert ray.is_initialized()  # the module's Ray, not the session's
    assert path == shard and n > 0 and len(_rows(Path(shard))["resolved"]) == n
    assert set(_rows(Path(shard))) == {"files", "refs", "resolved", "candidates"}
