"""`--engine ray --ray-address`: a build on an existing Ray cluster (a real `ray start --head`
on 127.0.0.1) equals a local build and leaves the cluster running."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from indexer.config import load_config
from indexer.errors import ConfigError
from indexer.parse.ray_engine import RaySession
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


@pytest.fixture(autouse=True)
def small_work_goes_to_ray(monkeypatch):
    """The fixture repository is small: send its files and chunks to Ray anyway."""
    from indexer.parse import ray_engine

    monkeypatch.setattr(ray_engine, "MIN_FILES", 1)
    monkeypatch.setattr(ray_engine, "MIN_CHUNKS", 1)


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
    # The command a user runs, in its own process (as on a cluster's driver); small work is
    # sent to Ray anyway (REPOCTX_RAY_MIN_WORK=1), so parse tasks and actors run on the cluster.
    env = {**os.environ, "REPOCTX_RAY_MIN_WORK": "1", "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "repoctx"), "index", "build", str(root), "--engine",
         "ray", "--ray-address", cluster, "--embed-model", "hashing:64", "--index-dir",
         str(tmp_path / "remote"), "--json", "-q"],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["embedding"]["coverage"] == 1.0 and out["files_parsed"] == len(FILES)
    remote = load_config(root, env={}, index_dir=tmp_path / "remote")
    assert dump_graph(local) == dump_graph(remote)
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


GPU_CHECK = """
import json, sys
import ray
from indexer.build import build
from indexer.config import load_config
from indexer.parse.ray_engine import RaySession

ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False,
         configure_logging=False)
cfg = load_config(sys.argv[1], env={}, engine="ray", embed_model="hashing:64")
session = RaySession(cfg).connect()
pool = session.embed_pool("hashing:64", 8)
out = {"gpus": session.gpus, "workers": session.workers, "actors": len(pool.actors),
       "gpu_ids": ray.get(pool.actors[0].gpu_ids.remote()),
       "shape": list(pool.embed(["def alpha(): pass", "class Beta: pass"]).shape)}
pool.close()
stats = build(cfg, embed=True)
out.update(coverage=stats.embedding["coverage"], embedded=stats.embedding["embedded"],
           still_up=ray.is_initialized())
print(json.dumps(out))
"""


def test_embedding_actors_one_per_gpu(tmp_path):
    """A cluster with GPUs gets one embedding actor per GPU, each holding one. The GPU here is
    a declared resource (this machine has none): placement is what is checked, the model
    falls back to the CPU inside the actor. Its own process: one Ray start per process."""
    root = make_repo(tmp_path / "repo", FILES)
    proc = subprocess.run([sys.executable, "-c", GPU_CHECK, str(root)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "REPOCTX_RAY_MIN_WORK": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (out["gpus"], out["workers"], out["actors"]) == (1, 2, 1)
    assert out["gpu_ids"] == [0] and out["shape"] == [2, 64]
    assert out["coverage"] == 1.0 and out["embedded"] > 0
    assert out["still_up"]  # a Ray the build did not start is left running
