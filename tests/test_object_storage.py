"""Vectors on object storage: `--vectors-uri s3://…` against a real S3 server (moto) on
127.0.0.1, with credentials and endpoint from the environment or the config file only."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cli.main import cli
from indexer.build import build
from indexer.config import load_config
from indexer.errors import ConfigError
from indexer.graph import store
from indexer.locations import check_uri, filesystem, is_remote
from tests.conftest import make_repo

FILES = {
    "net/upload.py": '''
        def push_blob_with_backoff(client, blob, attempts=5):
            """Send a blob again after transient connection errors, waiting longer each time."""
            for _ in range(attempts):
                try:
                    return client.put(blob)
                except ConnectionError:
                    pass
        ''',
    "text/render.py": '''
        def render_markdown_table(rows):
            """Format rows as a markdown table."""
            return "| " + " | ".join(rows[0]) + " |"
        ''',
}


def _objects(fs, path: str) -> list[str]:
    import pyarrow.fs as pafs

    return [i.path for i in fs.get_file_info(pafs.FileSelector(path, recursive=True))
            if i.type == pafs.FileType.File]


def test_vectors_on_s3_build_search_and_no_secrets_in_index(s3_bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-never-stored")
    root = make_repo(tmp_path / "repo", FILES)
    uri = f"{s3_bucket}/team/vectors"
    result = CliRunner().invoke(cli, ["index", "build", str(root), "-q", "--json",
                                      "--embed-model", "hashing:64", "--vectors-uri", uri])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.output)
    assert stats["embedding"]["embedded"] > 0 and stats["embedding"]["coverage"] == 1.0
    fs, path = filesystem(uri)
    assert any(p.endswith(".lance") for p in _objects(fs, path))  # the table is in the bucket
    assert not (root / ".repoctx" / "vectors.lance").exists()  # and not on local disk
    # readers find the vectors from what the index recorded: no flag needed
    found = CliRunner().invoke(cli, ["search", "retry sending after connection errors", "-C",
                                     str(root), "--mode", "semantic", "--json"])
    assert found.exit_code == 0, found.output
    hits = json.loads(found.output)["hits"]
    assert hits and hits[0]["path"] == "net/upload.py"
    graph = (root / ".repoctx" / "graph.db").read_bytes()
    assert b"s3cr3t-never-stored" not in graph and b"testing" not in graph
    conn = store.open_for_read(root / ".repoctx").conn
    assert conn.execute("SELECT value FROM meta WHERE key = 'vectors_uri'").fetchone()[0] == uri
    conn.close()
    status = CliRunner().invoke(cli, ["index", "status", str(root), "--json"])
    assert status.exit_code == 0, status.output
    vectors = json.loads(status.output)["vectors"]
    assert vectors["uri"] == uri and vectors["coverage"] == 1.0
    assert vectors["model"] == "hashing:64" and vectors["chunks"] == stats["embedding"]["chunks"]


def test_uri_with_credentials_is_refused(tmp_path):
    root = make_repo(tmp_path / "repo", FILES)
    with pytest.raises(ConfigError, match="carries credentials"):
        load_config(root, env={}, vectors_uri="s3://AKIAEXAMPLE:secret@bucket/vectors")
    result = CliRunner().invoke(cli, ["index", "build", str(root), "-q", "--vectors-uri",
                                      "s3://AKIAEXAMPLE:secret@bucket/vectors"])
    assert result.exit_code == 1 and "carries credentials" in result.output
    assert "secret" not in result.output  # the message does not echo the secret either
    assert not (root / ".repoctx").exists()  # refused before anything was written
    # built from a Config made in code, the build refuses before touching the index
    cfg = load_config(root, env={}, embed_model="hashing:64", jobs=1)
    from dataclasses import replace

    build(cfg, embed=True)
    before = (root / ".repoctx" / "graph.db").read_bytes()
    with pytest.raises(ConfigError, match="carries credentials"):
        build(replace(cfg, vectors_uri="s3://AKIAEXAMPLE:secret@bucket/v"), embed=True)
    graph = (root / ".repoctx" / "graph.db").read_bytes()
    assert b"AKIAEXAMPLE" not in graph and b"secret@" not in graph and len(graph) == len(before)
    assert check_uri("s3://bucket/prefix") == "s3://bucket/prefix"
    assert is_remote("s3://b/p") and is_remote("gs://b/p") and not is_remote(str(tmp_path))
    assert not is_remote("file:///tmp/x")


def test_storage_options_from_config_file(s3_bucket, s3_endpoint, tmp_path, monkeypatch):
    """Endpoint settings in `[tool.repoctx.storage_options]` instead of the environment."""
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    monkeypatch.delenv("AWS_ALLOW_HTTP")
    files = {**FILES, "pyproject.toml": f"""
        [tool.repoctx]
        vectors_uri = "{s3_bucket}/vec"

        [tool.repoctx.storage_options]
        aws_endpoint = "{s3_endpoint}"
        allow_http = "true"
        """}
    root = make_repo(tmp_path / "repo", files)
    # object storage named by a repository's file: the user trusts this one
    cfg = load_config(root, env={}, jobs=1, embed_model="hashing:64", trust_repo=True)
    assert cfg.storage_options["allow_http"] == "true"
    stats = build(cfg, embed=True)
    assert stats.embedding["embedded"] > 0
    fs, path = filesystem(f"{s3_bucket}/vec", {"aws_endpoint": s3_endpoint, "allow_http": "true"})
    assert _objects(fs, path)


def test_moving_the_vectors_reembeds_into_the_new_place(s3_bucket, tmp_path):
    root = make_repo(tmp_path / "repo", FILES)
    local = load_config(root, env={}, jobs=1, embed_model="hashing:64")
    first = build(local, embed=True)
    assert (root / ".repoctx" / "vectors.lance").is_dir()
    remote = load_config(root, env={}, jobs=1, embed_model="hashing:64",
                         vectors_uri=f"{s3_bucket}/moved")
    moved = build(remote, embed=True)
    assert moved.embedding["embedded"] == first.embedding["embedded"] > 0
    assert moved.embedding["coverage"] == 1.0
    again = build(remote, embed=True)
    assert again.embedding["embedded"] == 0


def test_a_build_without_the_flag_keeps_the_vectors_where_they_are(s3_bucket, tmp_path):
    """The index remembers its vectors URI: a later build (or a watcher) without
    `--vectors-uri` updates the table on S3 instead of moving every vector back to disk."""
    root = make_repo(tmp_path / "repo", FILES)
    uri = f"{s3_bucket}/kept"
    first = build(load_config(root, env={}, jobs=1, embed_model="hashing:64", vectors_uri=uri),
                  embed=True)
    (root / "text" / "render.py").write_text(
        'def render_markdown_table(rows):\n    """Rows as a markdown table."""\n    return ""\n')
    again = build(load_config(root, env={}, jobs=1, embed_model="hashing:64"), embed=True)
    assert 0 < again.embedding["embedded"] < first.embedding["embedded"]
    assert again.embedding["coverage"] == 1.0
    assert not (root / ".repoctx" / "vectors.lance").exists()
    conn = store.open_for_read(root / ".repoctx").conn
    assert conn.execute("SELECT value FROM meta WHERE key = 'vectors_uri'").fetchone()[0] == uri
    conn.close()
