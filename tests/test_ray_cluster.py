"""`--engine ray --ray-address`: a build on an existing Ray cluster (a real `ray start --head`
on 127.0.0.1) equals a local build and leaves the cluster running."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from indexer.config import load_config
from indexer.errors import ConfigError
from indexer.ray_engine import RaySession
from tests.conftest import dump_graph, make_repo

ray = pytest.importorskip("ray")

FILES = {
    "pkg/__init__.py": "from .a import alpha\n",
    "pkg/a.py": "def alpha():\n    return beta()\n\n\ndef beta():\n    return 1\n",
    "pkg/b.py": "from pkg import alpha\n\n\nclass B:\n    def go(self):\n        return alpha()\n",
    "web/app.js": "function handle(req) {\n  return render(req);\n}\nfunction render(r) {\n  return r;\n}\n",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A Ray head node in its own process group, stopped with it. Token authentication (on by
    default since Ray 2.5x) is turned off for this private 127.0.0.1 cluster and its driver."""
    if ray.is_initialized():
        pytest.skip("a Ray instance is already running in this process")
    mp = pytest.MonkeyPatch()
    mp.setenv("RAY_AUTH_MODE", "disabled")
    port = _free_port()
    temp = tmp_path_factory.mktemp("ray")
    exe = Path(sys.executable).parent / "ray"
    proc = subprocess.Popen(
        [str(exe), "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
         "--node-ip-address=127.0.0.1", "--include-dashboard=false", f"--temp-dir={temp}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        probe = subprocess.run([str(exe), "status", f"--address={address}"], capture_output=True)
        if probe.returncode == 0:
            break
        time.sleep(1)
    else:
        proc.kill()
        pytest.fail("ray start --head did not come up within 60 s")
    yield address
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
    mp.undo()


def test_build_on_existing_cluster_equals_local_and_leaves_it_running(cluster, tmp_path):
    root = make_repo(tmp_path / "repo", FILES)
    local = load_config(root, env={}, jobs=1, index_dir=tmp_path / "local", embed_model="hashing:64")
    from indexer.build import build

    build(local, embed=True)
    result = CliRunner().invoke(cli, ["index", "build", str(root), "--engine", "ray", "--ray-address",
                                      cluster, "--embed-model", "hashing:64", "--index-dir",
                                      str(tmp_path / "remote"), "--json", "-q"])
    assert result.exit_code == 0, result.output
    remote = load_config(root, env={}, index_dir=tmp_path / "remote")
    assert dump_graph(local) == dump_graph(remote)
    assert not ray.is_initialized()  # the driver disconnected ...
    probe = subprocess.run([str(Path(sys.executable).parent / "ray"), "status",
                            f"--address={cluster}"], capture_output=True)
    assert probe.returncode == 0  # ... and the shared cluster is still up
    shutil.rmtree(tmp_path / "remote")


def test_unreachable_cluster_is_a_clear_error(tmp_path):
    """Refused at once: Ray itself would retry for minutes."""
    cfg = load_config(make_repo(tmp_path / "r", FILES), env={}, engine="ray",
                      ray_address=f"127.0.0.1:{_free_port()}")
    with pytest.raises(ConfigError, match="Cannot reach the Ray cluster"):
        RaySession(cfg).connect()


def test_embedding_actors_one_per_gpu(tmp_path):
    """A cluster with GPUs gets one embedding actor per GPU, each holding one. The GPU here is
    a declared resource (this machine has none): placement is what is checked, the model
    falls back to the CPU inside the actor."""
    if ray.is_initialized():
        pytest.skip("a Ray instance is already running in this process")
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    try:
        root = make_repo(tmp_path / "repo", FILES)
        cfg = load_config(root, env={}, engine="ray", embed_model="hashing:64")
        session = RaySession(cfg).connect()
        assert (session.gpus, session.workers) == (1, 2)
        pool = session.embed_pool("hashing:64", 8)
        assert len(pool.actors) == 1
        assert ray.get(pool.actors[0].gpu_ids.remote()) == [0]
        vectors = pool.result(pool.submit(["def alpha(): pass", "class Beta: pass"]))
        assert vectors.shape == (2, 64)
        pool.close()
        from indexer.build import build

        stats = build(cfg, embed=True)
        assert stats.embedding["coverage"] == 1.0 and stats.embedding["embedded"] > 0
        assert ray.is_initialized()  # not started by the build: left running
    finally:
        ray.shutdown()
