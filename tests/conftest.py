"""Shared fixtures: real git repositories in tmp_path and real index builds."""

from __future__ import annotations

import os
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest

from cli.settings import load_config
from indexer.build import build
from indexer.config import Config

# A developer's own user-level config (~/.config/repoctx/config.toml) must not leak into the
# tests: every test, and every process a test starts, sees an empty config directory.
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="repoctx-tests-xdg-")

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
}


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, check=True, capture_output=True, text=True,
        env={**os.environ, **GIT_ENV},
    ).stdout


def write_files(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip("\n"))


def make_repo(root: Path, files: dict[str, str], commit: bool = True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    write_files(root, files)
    if commit:
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "init")
    return root


def index(root: Path, full: bool = False, **overrides) -> Config:
    cfg = load_config(root, env={}, jobs=1, **overrides)
    build(cfg, full=full)
    return cfg


def dump_graph(cfg: Config) -> dict:
    """Everything the graph asserts, keyed by content rather than row ids."""
    from indexer.graph import store

    conn = store.open_for_read(cfg.index_path).conn
    try:
        syms = sorted(conn.execute(
            "SELECT f.path, s.id, s.qualname, s.kind, s.start_line, s.end_line, s.signature, s.doc "
            "FROM symbols s JOIN files f ON f.id = s.file_id"
        ).fetchall())
        refs = sorted(conn.execute(
            "SELECT f.path, r.line, r.col, r.name, r.kind, r.receiver, e.qualname, t.qualname, "
            "r.resolution, r.confidence, (SELECT group_concat(s2.qualname) FROM (SELECT s2.qualname "
            "FROM ref_candidates c JOIN symbols s2 ON s2.id = c.symbol_id WHERE c.ref_id = r.id "
            "ORDER BY s2.qualname) s2) "
            "FROM refs r JOIN files f ON f.id = r.file_id LEFT JOIN symbols e ON e.id = r.enclosing_id "
            "LEFT JOIN symbols t ON t.id = r.target_id"
        ).fetchall(), key=repr)
        files = sorted(conn.execute("SELECT path, language, module, hash, status FROM files").fetchall())
        imports = sorted(conn.execute(
            "SELECT f.path, i.module, i.name, i.alias, i.line FROM imports i JOIN files f ON f.id = i.file_id"
        ).fetchall())
        pending = conn.execute("SELECT count(*) FROM pending_names").fetchone()[0]
        return {"files": files, "symbols": syms, "refs": refs, "imports": imports, "pending": pending}
    finally:
        conn.close()


@pytest.fixture
def repo_factory(tmp_path):
    def factory(files: dict[str, str], name: str = "repo", commit: bool = True) -> Path:
        return make_repo(tmp_path / name, files, commit)

    return factory


@pytest.fixture(scope="session")
def s3_endpoint():
    """A real S3-compatible server (moto) on 127.0.0.1 for the whole session."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_bucket(s3_endpoint, monkeypatch, request):
    """A fresh bucket on the moto server; credentials and endpoint set in the environment the
    way a user would (LanceDB and Arrow read them from there). Returns ``s3://<bucket>``."""
    import re
    import uuid

    import boto3

    env = {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": s3_endpoint, "AWS_ALLOW_HTTP": "true",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    slug = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:30].strip("-")
    bucket = f"t-{slug}-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return f"s3://{bucket}"


@pytest.fixture
def model_server():
    """A fake model server on 127.0.0.1 (tests/model_server.py): scripted replies, every
    request recorded; closed, and its waiting replies released, at teardown."""
    from tests.model_server import ModelServer

    with ModelServer() as server:
        yield server


# --------------------------------------------------------------------------- the fast lane
#: `make test-fast` (pytest -m "not slow", under a minute on 2 cores) leaves out the modules whose
#: tests take seconds each: Ray clusters, the real embedding model, kill -9 and process
#: supervision, sandboxes, rebuilds under concurrent readers, whole agent runs and the pipeline,
#: snapshots, the MCP server, and the benchmarks' own tests (pytest runs, checkouts, whole CLI
#: runs). CI (`make test`) runs everything.
SLOW_MODULES = frozenset({
    "test_ray_engine", "test_ray_cluster", "test_embed", "test_atomic_rebuild",
    "test_hostile_files", "test_watch", "test_index_damage", "test_sandbox", "test_runner",
    "test_object_storage", "test_mcp", "test_incremental", "test_secrets", "test_semantic",
    "test_agent_loop", "test_snapshot", "test_llm_recordings", "test_bulk_load",
    "test_pool_stop", "test_untrusted_interpreter", "test_sandbox_ns", "test_mcp_protocol",
    "test_damage_exhaustion", "test_control_chars", "test_untrusted_git", "test_attack_pass_index",
    "test_attack_pass_agent", "test_hostile_untrusted_bench", "test_attack_pass_more",
    "test_pipeline", "test_prefix_stable", "test_small_windows", "test_plan_rules",
    "test_pipeline_suite", "test_agent_e2e_bench", "test_agent_e2e_tasks",
    "test_localization_bench", "test_vector_fragments", "test_ray_shards",
})

#: Single tests of fast modules that start other processes (pytest runs, a second CLI process,
#: a worker pool) or wait to kill one: a second or more each on 2 busy cores.
SLOW_TESTS = frozenset({
    "test_nofollow::test_run_tests_never_reads_through_what_the_tests_put_at_the_report",
    "test_nofollow::test_cli_undo_from_another_process_refuses_a_swapped_directory",
    "test_graph_golden::test_resolution_in_worker_processes_gives_the_same_graph",
    "test_tools::test_a_command_that_never_ends_is_killed",
})


def _fast_lane(config) -> bool:
    return (config.getoption("markexpr") or "").split() == ["not", "slow"]


def pytest_ignore_collect(collection_path, config):
    # In the fast lane a slow module is not even imported: importing them all took seconds.
    if _fast_lane(config) and collection_path.name.endswith(".py"):
        return collection_path.stem in SLOW_MODULES or None
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1]
        name = getattr(item, "originalname", item.name)
        if module in SLOW_MODULES or f"{module}::{name}" in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
