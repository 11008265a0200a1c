"""Index snapshots by commit, end to end: real git clones, SQLite, LanceDB, and a real S3 API
(moto) or a local directory. A pulled-then-updated index must equal a full build, and only
what differs from the snapshot's commit may be parsed or embedded."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli.snapshot_cmds import pull_cmd, push_cmd
from indexer.build import build
from indexer.config import load_config
from indexer.errors import RepoctxError
from indexer.ops.snapshot import SnapshotError, adopt, list_snapshots, pull, push
from indexer.vectors.embed import HashingEmbedder
from tests.conftest import dump_graph, git, make_repo, write_files

FILES = {
    "app/__init__.py": "",
    "app/core.py": '''
        """Core arithmetic."""


        def add(a, b):
            """Add two numbers."""
            return a + b


        def scale(values, factor):
            return [v * factor for v in values]
        ''',
    "app/cli.py": """
        from app.core import add, scale


        def main(argv):
            total = add(1, 2)
            return scale([total], 3)
        """,
    "app/old.py": """
        from app.core import add


        def legacy():
            return add(0, 0)
        """,
    "web/util.js": """
        function greet(name) {
          return "hello " + name;
        }
        """,
}
SCALE_V2 = FILES["app/core.py"].replace(
    "return [v * factor for v in values]", "return [round(v * factor, 2) for v in values]"
)
EXTRA = """
    from app.core import scale


    def double(values):
        return scale(values, 2)
    """


def config(root: Path, **kw):
    return load_config(root, env={}, jobs=1, **{"embed_model": "hashing:64", **kw})


def head(root: Path) -> str:
    return git(root, "rev-parse", "HEAD").strip()


def commit(root: Path, message: str) -> str:
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)
    return head(root)


def second_commit(root: Path) -> str:
    """Edit one function, add one file, delete one file."""
    write_files(root, {"app/core.py": SCALE_V2, "app/extra.py": EXTRA})
    (root / "app/old.py").unlink()
    return commit(root, "edit, add, delete")


def clone(src: Path, dest: Path) -> Path:
    git(src.parent, "clone", "-q", str(src), str(dest))
    return dest


def sql(cfg, query: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{cfg.db_path}?mode=ro", uri=True)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


def vectors(cfg) -> dict[str, np.ndarray]:
    import lancedb

    table = lancedb.connect(str(cfg.index_path / "vectors.lance")).open_table("chunks").to_arrow()
    return dict(zip(table["chunk_id"].to_pylist(), table["vector"].to_numpy(zero_copy_only=False),
                    strict=True))


def index_bytes(cfg) -> dict[str, bytes]:
    return {str(p.relative_to(cfg.index_path)): p.read_bytes()
            for p in sorted(cfg.index_path.rglob("*")) if p.is_file()}


def test_pull_on_a_later_clone_equals_a_full_build_and_embeds_only_changes(tmp_path, s3_bucket):
    origin = make_repo(tmp_path / "origin", FILES)
    uri = f"{s3_bucket}/team/snaps"
    cfg1 = config(origin, snapshot_uri=uri)
    build(cfg1, embed=True)
    c1 = head(origin)
    pushed = push(cfg1)
    assert pushed["commit"] == c1 and not pushed["replaced"]
    assert pushed["vectors"]["rows"] == pushed["chunks"] > 0
    manifest = list_snapshots(uri)[0]
    assert manifest["embed_model"] == "hashing:64" and manifest["embed_dim"] == 64
    text = json.dumps(manifest)
    assert str(tmp_path) not in text and "testing" not in text and "s3://" not in text

    c2 = second_commit(origin)
    full = config(origin, index_dir=tmp_path / "full")
    build(full, full=True, embed=True)
    here = clone(origin, tmp_path / "clone")
    assert head(here) == c2
    emb = HashingEmbedder(64)
    pulled_cfg = config(here, snapshot_uri=uri)
    out = pull(pulled_cfg, embedder=emb)

    assert out["commit"] == c1 and out["distance"] == 1 and out["bytes_downloaded"] > 0
    assert dump_graph(pulled_cfg) == dump_graph(full)
    ids = {r[0] for r in sql(full, "SELECT id FROM chunks")}
    assert {r[0] for r in sql(pulled_cfg, "SELECT id FROM chunks")} == ids
    got, want = vectors(pulled_cfg), vectors(full)
    assert set(got) == set(want) == {str(i) for i in ids}
    assert all(np.allclose(got[k], want[k], atol=1e-5) for k in want)
    new_hashes = ({r[0] for r in sql(full, "SELECT content_hash FROM chunks")}
                  - {r[0] for r in sql(cfg1, "SELECT content_hash FROM chunks")})
    assert new_hashes and emb.texts_embedded == len(new_hashes)
    changed = [line for line in git(origin, "diff", "--name-status", c1, c2).splitlines()
               if not line.startswith("D")]
    assert out["files_parsed"] == len(changed) and out["files_deleted"] == 1
    same = set(sql(cfg1, "SELECT path, hash FROM files")) & set(sql(full, "SELECT path, hash FROM files"))
    assert out["files_adopted"] == len(same)
    assert sql(pulled_cfg, "SELECT value FROM meta WHERE key = 'root'") == [(str(here),)]


def test_the_nearest_ancestor_is_pulled_never_another_branch(tmp_path):
    origin = make_repo(tmp_path / "origin", FILES)
    snaps = str(tmp_path / "snaps")
    cfg = config(origin, snapshot_uri=snaps)
    build(cfg)  # no vectors: the snapshots carry none
    c1 = push(cfg)["commit"]
    write_files(origin, {"app/core.py": SCALE_V2})
    c2 = commit(origin, "two")
    assert push(cfg)["vectors"] is None  # push brings the index up to date first
    git(origin, "checkout", "-q", "-b", "other")
    write_files(origin, {"app/branch.py": "def b():\n    return 1\n"})
    other = commit(origin, "elsewhere")
    push(cfg)  # the newest snapshot, but not in main's history
    git(origin, "checkout", "-q", "main")
    write_files(origin, {"app/extra.py": EXTRA})
    commit(origin, "three")

    assert {m["commit"] for m in list_snapshots(snaps)} == {c1, c2, other}
    here = clone(origin, tmp_path / "clone")
    here_cfg = config(here, snapshot_uri=snaps)
    out = pull(here_cfg)
    assert (out["commit"], out["distance"], out["files_parsed"]) == (c2, 1, 1)
    assert out["embedding"] == {}
    full = config(origin, index_dir=tmp_path / "full")
    build(full, full=True)
    assert dump_graph(here_cfg) == dump_graph(full)

    explicit = pull(here_cfg, commit=other[:10])  # any snapshot, when asked for
    assert explicit["commit"] == other and explicit["distance"] is None
    assert dump_graph(here_cfg) == dump_graph(full)


def test_adopt_restamps_only_files_whose_content_matches(tmp_path):
    """Tiny trees cannot show it (the builder hashes a few re-stamped files cheaply), but on a
    large one a fresh checkout without adoption would make the next build a bulk re-parse."""
    origin = make_repo(tmp_path / "origin", FILES)
    cfg = config(origin)
    build(cfg)
    for p in origin.rglob("*.*"):
        if ".git" not in p.parts and ".repoctx" not in p.parts:
            os.utime(p, ns=(1, 1))  # as a fresh checkout would: every mtime differs
    edited = FILES["app/cli.py"].replace("add(1, 2)", "add(2, 1)")  # same size, other bytes
    write_files(origin, {"app/cli.py": edited})
    conn = sqlite3.connect(cfg.db_path)
    try:
        adopted = adopt(conn, origin)
        stamps = dict(conn.execute("SELECT path, mtime_ns FROM files"))
    finally:
        conn.close()
    assert adopted == len(FILES) - 1
    assert stamps["app/core.py"] == 1 and stamps["app/cli.py"] != (origin / "app/cli.py").stat().st_mtime_ns
    assert build(cfg).files_parsed == 1


def test_a_snapshot_of_another_model_is_refused_and_the_index_kept(tmp_path):
    origin = make_repo(tmp_path / "origin", FILES)
    snaps = str(tmp_path / "snaps")
    cfg = config(origin, snapshot_uri=snaps)
    build(cfg, embed=True)
    push(cfg)
    here = clone(origin, tmp_path / "clone")
    mine = config(here, snapshot_uri=snaps, embed_model="hashing:32")
    build(mine, embed=True)
    before = index_bytes(mine)
    for embedder in (None, HashingEmbedder(32)):
        with pytest.raises(RepoctxError) as err:
            pull(mine, embedder=embedder)
        assert "'hashing:64'" in str(err.value) and "'hashing:32'" in str(err.value)
        assert 'embed_model = "hashing:64"' in str(err.value)
    assert index_bytes(mine) == before


def test_refusals_incomplete_snapshots_and_missing_ones(tmp_path):
    import pyarrow as pa

    origin = make_repo(tmp_path / "origin", FILES)
    snaps = tmp_path / "snaps"
    cfg = config(origin, snapshot_uri=str(snaps))
    with pytest.raises(SnapshotError, match="repoctx index build"):
        push(cfg)  # no index yet
    build(cfg)
    with pytest.raises(SnapshotError, match=r"--to URI.*snapshot_uri"):
        push(config(origin))
    c1 = push(cfg)["commit"]
    write_files(origin, {"app/core.py": SCALE_V2})
    with pytest.raises(SnapshotError, match=r"app/core.py.*commit first.*--allow-dirty"):
        push(cfg)
    c2 = commit(origin, "two")
    write_files(origin, {"notes.py": "x = 1\n"})  # untracked counts too
    with pytest.raises(SnapshotError, match="notes.py"):
        push(cfg)
    dirty = push(cfg, allow_dirty=True)
    assert dirty["commit"] == c2 and dirty["dirty"]
    again = push(cfg, allow_dirty=True)
    assert again["replaced"]

    here = clone(origin, tmp_path / "clone")
    here_cfg = config(here, snapshot_uri=str(snaps))
    (snaps / c2 / "manifest.json").unlink()  # as if the push of c2 died before finishing
    assert pull(here_cfg)["commit"] == c1

    graph, before = snaps / c1 / "graph.db.zst", dump_graph(here_cfg)
    good = graph.read_bytes()
    with pa.output_stream(str(graph), compression="zstd") as fh:
        fh.write(b"not the graph")
    with pytest.raises(SnapshotError, match="sha256"):
        pull(here_cfg)
    assert dump_graph(here_cfg) == before and not list(here_cfg.index_path.glob(".pull-*"))
    graph.write_bytes(good)

    manifest = snaps / c1 / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"schema_version": ', '"schema_version": 9'))
    with pytest.raises(SnapshotError, match="another repoctx schema"):
        pull(config(clone(origin, tmp_path / "c2"), snapshot_uri=str(snaps)))
    assert not (tmp_path / "c2" / ".repoctx").exists()

    with pytest.raises(SnapshotError, match=r"No snapshot at .*empty.*repoctx index build"):
        pull(here_cfg, str(tmp_path / "empty"))
    plain = tmp_path / "plain"
    write_files(plain, {"a.py": "x = 1\n"})
    with pytest.raises(SnapshotError, match="git"):
        push(config(plain, snapshot_uri=str(snaps)))


def test_cli_push_and_pull_with_a_local_directory(tmp_path):
    import pyarrow as pa

    origin = make_repo(tmp_path / "origin", FILES)
    snaps = str(tmp_path / "snaps")
    build(config(origin), embed=True)
    r = CliRunner().invoke(push_cmd, [str(origin), "--to", snaps, "--json", "-q"])
    assert r.exit_code == 0, r.output
    pushed = json.loads(r.stdout)
    assert pushed["embed_model"] == "hashing:64" and pushed["files"] == len(FILES)
    with pa.input_stream(f"{snaps}/{pushed['commit']}/graph.db.zst", compression="zstd") as fh:
        (tmp_path / "copy.db").write_bytes(fh.read())
    meta = dict(sqlite3.connect(tmp_path / "copy.db").execute("SELECT key, value FROM meta"))
    assert meta["root"] == "" and str(tmp_path) not in json.dumps(meta)

    second_commit(origin)
    here = clone(origin, tmp_path / "clone")
    r = CliRunner().invoke(pull_cmd, [str(here), "--from", snaps, "--embed-model", "hashing:64",
                                      "--json", "-q"])
    assert r.exit_code == 0, r.output
    pulled = json.loads(r.stdout)
    assert pulled["commit"] == pushed["commit"] and pulled["distance"] == 1
    assert pulled["embedding"]["coverage"] == 1.0 and pulled["files_parsed"] == 2

    r = CliRunner().invoke(pull_cmd, [str(here), "--from", snaps, "--list", "--json"])
    assert [m["commit"] for m in json.loads(r.stdout)] == [pushed["commit"]]
    r = CliRunner().invoke(pull_cmd, [str(here), "--from", snaps, "-q"])  # default model
    assert r.exit_code == 1 and "hashing:64" in r.output
    r = CliRunner().invoke(push_cmd, [str(here), "-q"])
    assert r.exit_code == 1 and "--to URI" in r.output


def test_pull_into_vectors_kept_in_object_storage(tmp_path, s3_bucket):
    import lancedb

    origin = make_repo(tmp_path / "origin", FILES)
    snaps = str(tmp_path / "snaps")
    cfg = config(origin, snapshot_uri=snaps)
    build(cfg, embed=True)
    chunks = push(cfg)["chunks"]
    here = clone(origin, tmp_path / "clone")
    remote = f"{s3_bucket}/vectors"
    here_cfg = config(here, snapshot_uri=snaps, vectors_uri=remote)
    emb = HashingEmbedder(64)
    for _ in range(2):  # the second pull overwrites the remote table
        out = pull(here_cfg, embedder=emb)
        assert out["files_parsed"] == 0 and out["embedding"]["coverage"] == 1.0
        assert lancedb.connect(remote).open_table("chunks").count_rows() == chunks
    assert sql(here_cfg, "SELECT value FROM meta WHERE key = 'vectors_uri'") == [(remote,)]
    assert not (here_cfg.index_path / "vectors.lance").exists()
    build(here_cfg, embed=True, embedder=emb)
    assert emb.texts_embedded == 0  # nothing embedded: the copied vectors are used
