"""`--engine ray`: a Ray-built index equals a local build of the same tree — files, symbols,
references, chunk ids and vectors — on a real local Ray instance."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import cli
from indexer.build import build
from indexer.config import load_config
from indexer.errors import ConfigError
from indexer.graph import store
from indexer.vectors.table import open_vectors
from tests.conftest import dump_graph, git, make_repo, write_files

ray = pytest.importorskip("ray")

FIXTURES = Path(__file__).parent / "fixtures" / "languages"
FILES = {
    "pkg/__init__.py": "from .a import alpha\n",
    "pkg/a.py": "def alpha():\n    return beta()\n\n\ndef beta():\n    return 1\n",
    "pkg/b.py": "from pkg import alpha\n\n\nclass B:\n    def go(self):\n        return alpha()\n",
    "pkg/c.py": "from .b import B\n\n\nclass C(B):\n    def run(self):\n        return self.go()\n",
    "tool.py": "import pkg.a\n\n\ndef main():\n    pkg.a.beta()\n    gamma()\n",
    "broken.py": "def oops(:\n    return 1\n\n\ndef fine():\n    return oops()\n",
}


@pytest.fixture(autouse=True)
def small_work_goes_to_ray(monkeypatch):
    """These fixtures are small; send every changed file and chunk to Ray anyway, and record
    that Ray did the work."""
    from indexer.parse import ray_engine

    monkeypatch.setattr(ray_engine, "MIN_FILES", 1)
    monkeypatch.setattr(ray_engine, "MIN_CHUNKS", 1)
    calls = {"parse": 0, "embed": 0}
    parse, pool = ray_engine.RaySession.parse_all, ray_engine.RaySession.embed_pool

    def parse_all(self, *a, **kw):
        calls["parse"] += 1
        return parse(self, *a, **kw)

    def embed_pool(self, *a, **kw):
        calls["embed"] += 1
        return pool(self, *a, **kw)

    monkeypatch.setattr(ray_engine.RaySession, "parse_all", parse_all)
    monkeypatch.setattr(ray_engine.RaySession, "embed_pool", embed_pool)
    return calls


@pytest.fixture(scope="module")
def ray_local():
    """One local Ray instance for the module (~3 s to start here); builds reuse it."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture
def repo(tmp_path):
    root = make_repo(tmp_path / "repo", FILES, commit=False)
    for lang_dir in FIXTURES.iterdir():
        shutil.copytree(lang_dir, root / "langs" / lang_dir.name)
    (root / "data.py").write_bytes(b"\x00\x01binary\x00" * 100)  # counted as skipped, not parsed
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root


def _build(root: Path, index_dir: Path, engine: str, **kw):
    cfg = load_config(root, env={}, jobs=2, index_dir=index_dir, engine=engine,
                      embed_model="hashing:64")
    return cfg, build(cfg, embed=True, **kw)


def _vectors(cfg, dim: int = 64, model: str = "hashing:64") -> dict[str, np.ndarray]:
    conn = store.open_for_read(cfg.index_path).conn
    try:
        vs = open_vectors(cfg, conn, dim, model)
        ids = {str(r[0]) for r in conn.execute("SELECT id FROM chunks")}
    finally:
        conn.close()
    table = vs._table.search().select(["chunk_id", "vector"]).limit(None).to_arrow()
    out = dict(zip(table["chunk_id"].to_pylist(), np.asarray(table["vector"].to_pylist()), strict=True))
    assert set(out) == ids  # every chunk has exactly its vector
    return out


def _same_index(a, b) -> None:
    assert dump_graph(a) == dump_graph(b)
    va, vb = _vectors(a), _vectors(b)
    assert va.keys() == vb.keys() and va
    for cid, vec in va.items():
        np.testing.assert_allclose(vec, vb[cid], atol=1e-5)


def _ray_processes() -> set[int]:
    """pids of Ray's per-instance daemons (GCS server, raylet) on this machine."""
    out = subprocess.run(["pgrep", "-f", "gcs_server|raylet"], capture_output=True, text=True)
    return {int(p) for p in out.stdout.split()}


def test_ray_engine_starts_and_stops_its_own_ray(repo, tmp_path):
    """Without a cluster address the command starts a private Ray and stops it after: the
    command a user runs, in its own process (one Ray start per process keeps Ray reliable)."""
    before = _ray_processes()
    env = {**os.environ, "REPOCTX_RAY_MIN_WORK": "1"}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "repoctx"), "index", "build", str(repo), "--engine",
         "ray", "--jobs", "2", "--embed-model", "hashing:64", "--index-dir", str(tmp_path / "own"),
         "--json", "-q"],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["files_parsed"] > 10 and out["embedding"]["coverage"] == 1.0
    deadline = time.monotonic() + 20
    while _ray_processes() - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _ray_processes() - before  # nothing of its Ray is left running


def test_an_edit_with_engine_ray_stays_local(repo, tmp_path, monkeypatch, small_work_goes_to_ray):
    """A few changed files (a watcher's usual build) never start Ray: same index, no ~3 s."""
    from indexer.parse import ray_engine

    if ray.is_initialized():
        pytest.skip("a Ray instance is already running in this process")
    monkeypatch.setattr(ray_engine, "MIN_FILES", 64)
    monkeypatch.setattr(ray_engine, "MIN_CHUNKS", 512)
    local_cfg, _ = _build(repo, tmp_path / "local", "local")
    ray_cfg, first = _build(repo, tmp_path / "ray", "ray")  # 20-odd files: below the threshold
    write_files(repo, {"pkg/a.py": "def alpha():\n    return 3\n"})
    _build(repo, tmp_path / "local", "local")
    _, edit = _build(repo, tmp_path / "ray", "ray")
    assert edit.files_parsed == 1 and edit.embedding["embedded"] > 0
    assert small_work_goes_to_ray == {"parse": 0, "embed": 0} and not ray.is_initialized()
    _same_index(local_cfg, ray_cfg)


def test_ray_build_equals_local_build(ray_local, repo, tmp_path, small_work_goes_to_ray):
    local_cfg, local = _build(repo, tmp_path / "local", "local")
    assert small_work_goes_to_ray == {"parse": 0, "embed": 0}
    ray_cfg, remote = _build(repo, tmp_path / "ray", "ray")
    assert small_work_goes_to_ray == {"parse": 1, "embed": 1}
    assert remote.files_parsed == local.files_parsed > 10
    assert (remote.symbols, remote.references, remote.resolved) == (
        local.symbols, local.references, local.resolved)
    assert remote.skipped == local.skipped and remote.skipped.get("binary") == 1
    assert remote.files_with_errors == local.files_with_errors >= 1
    assert remote.embedding["embedded"] == local.embedding["embedded"] > 0
    _same_index(local_cfg, ray_cfg)
    assert ray.is_initialized()  # a cluster the build did not start is left running


def test_ray_incremental_build_equals_local(ray_local, repo, tmp_path):
    local_cfg, _ = _build(repo, tmp_path / "local", "local")
    ray_cfg, _ = _build(repo, tmp_path / "ray", "ray")
    write_files(repo, {"pkg/a.py": "def alpha():\n    return delta()\n\n\ndef delta():\n    return 2\n",
                       "pkg/new.py": "from pkg.a import delta\n\n\ndef use():\n    return delta()\n"})
    (repo / "tool.py").unlink()
    _, local = _build(repo, tmp_path / "local", "local")
    _, remote = _build(repo, tmp_path / "ray", "ray")
    assert remote.files_parsed == local.files_parsed == 2
    assert remote.files_deleted == local.files_deleted == 1
    assert remote.embedding["embedded"] == local.embedding["embedded"] > 0
    _same_index(local_cfg, ray_cfg)
    # nothing changed: no parse task, no embedding actor
    _, again = _build(repo, tmp_path / "ray", "ray")
    assert again.files_parsed == 0 and again.embedding["embedded"] == 0


def test_cli_engine_flag_and_bad_engine(ray_local, repo, tmp_path):
    result = CliRunner().invoke(cli, ["index", "build", str(repo), "--engine", "ray", "--json", "-q",
                                      "--embed-model", "hashing:64", "--index-dir",
                                      str(tmp_path / "cli")])
    assert result.exit_code == 0, result.output
    assert '"files_parsed"' in result.output
    with pytest.raises(ConfigError, match="`engine` = 'spark' from REPOCTX_ENGINE .* one of local, ray"):
        load_config(repo, env={"REPOCTX_ENGINE": "spark"})


def test_ray_build_with_vectors_on_s3(ray_local, repo, tmp_path, s3_bucket):
    """Ray workers parse and embed; the driver writes the vectors to object storage."""
    local_cfg, _ = _build(repo, tmp_path / "local", "local")
    cfg = load_config(repo, env={}, jobs=2, index_dir=tmp_path / "ray-s3", engine="ray",
                      embed_model="hashing:64", vectors_uri=f"{s3_bucket}/vectors")
    stats = build(cfg, embed=True)
    assert stats.embedding["coverage"] == 1.0
    assert not (tmp_path / "ray-s3" / "vectors.lance").exists()
    _same_index(local_cfg, cfg)


def test_ray_actors_embed_with_the_default_model(ray_local, tmp_path):
    """The real default model in Ray actors gives the vectors a local build gives."""
    root = make_repo(tmp_path / "small", FILES)
    cfgs = []
    for engine in ("local", "ray"):
        cfg = load_config(root, env={}, jobs=2, index_dir=tmp_path / engine, engine=engine)
        stats = build(cfg, embed=True)
        assert stats.embedding["model"].endswith("all-MiniLM-L6-v2")
        cfgs.append((cfg, stats.embedding["model"]))
    (a, model), (b, _) = cfgs
    assert dump_graph(a) == dump_graph(b)
    vectors = [_vectors(cfg, 384, model) for cfg in (a, b)]
    assert vectors[0].keys() == vectors[1].keys() and vectors[0]
    for cid, vec in vectors[0].items():
        assert float(np.dot(vec, vectors[1][cid])) > 0.9999
