"""Third attack pass (issue 38, review time): surfaces the first two passes left alone.

`repoctx index pull --from DIR` installs a snapshot's graph — bytes someone else wrote — and then
*adopts* its files: every path of its `files` table was stat'ed and read on the host to compare
hashes. On 17a1ef1 a path `/dev/zero`, `../../…/dev/zero`, a committed link to it, a FIFO in the
tree or `/proc/self/fd/0` made the pull read forever (memory until the kernel killed it) or block
for good; a NUL byte gave a traceback. Adoption now opens each path as the parse worker does
(`indexer.safety.nofollow.open_regular`: beneath the root, regular files only, nothing that waits).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from indexer.graph import store
from tests.conftest import git, make_repo

CODE_ROOT = Path(__file__).resolve().parents[1]
FILES = {"a.py": "def f():\n    return 1\n"}
DEEP = "../" * 16


def _cli(args: list[str], home: Path, stdin=subprocess.DEVNULL) -> subprocess.CompletedProcess:
    def limit() -> None:  # on 17a1ef1 `/dev/zero` is read until memory runs out: bound it
        resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))

    return subprocess.run(
        [sys.executable, "-c", "from cli.main import cli; cli()", *args], cwd=CODE_ROOT,
        capture_output=True, text=True, timeout=60, stdin=stdin, preexec_fn=limit,
        env={**os.environ, "HOME": str(home), "REPOCTX_INDEX_DIR": ""})


def _craft(snap: Path, paths: list[str]) -> None:
    """Add ``paths`` to the snapshot's graph as files of size 0, and re-sign the manifest."""
    import pyarrow.fs as pafs

    fs = pafs.LocalFileSystem()
    with fs.open_input_stream(str(snap / "graph.db.zst"), compression="zstd") as fh:
        raw = fh.read()
    db_path = snap.parent / "crafted.db"
    db_path.write_bytes(raw)
    conn = sqlite3.connect(db_path)
    cols = [r[1] for r in conn.execute("PRAGMA table_info(files)")]
    row = dict(zip(cols, conn.execute("SELECT * FROM files LIMIT 1").fetchone(), strict=True))
    for i, p in enumerate(paths):
        row.update(id=1000 + i, path=p, size=0, hash="0" * 32)
        conn.execute(f"INSERT INTO files ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                     list(row.values()))
    conn.commit()
    conn.close()
    data = db_path.read_bytes()
    db_path.unlink()
    with fs.open_output_stream(str(snap / "graph.db.zst"), compression="zstd") as fh:
        fh.write(data)
    manifest = json.loads((snap / "manifest.json").read_text())
    manifest["graph"]["sha256"] = hashlib.sha256(data).hexdigest()
    (snap / "manifest.json").write_text(json.dumps(manifest))


SHAPES = {
    "absolute device": lambda clone: "/dev/zero",
    "../ to a device": lambda clone: DEEP + "dev/zero",
    "committed link to a device": lambda clone: "zero",
    "FIFO in the tree": lambda clone: (os.mkfifo(clone / "pipe"), "pipe")[1],
    "own stdin": lambda clone: "/proc/self/fd/0",
    "NUL byte": lambda clone: "a\x00b.py",
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_crafted_snapshot_graph_makes_pull_read_nothing_outside_the_tree(tmp_path, shape):
    home = tmp_path / "home"
    home.mkdir()
    origin = make_repo(tmp_path / "origin", FILES)
    (origin / "zero").symlink_to("/dev/zero")  # git keeps links: a clone gets it as it is
    git(origin, "add", "zero")
    git(origin, "commit", "-q", "-m", "link")
    snaps = tmp_path / "snaps"
    for args in (["index", "build", "--no-embed", "-q", str(origin)],
                 ["index", "push", "--to", str(snaps), "-q", str(origin)]):
        res = _cli(args, home)
        assert res.returncode == 0, res.stderr
    (snap,) = snaps.iterdir()
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    _craft(snap, [SHAPES[shape](clone)])

    # stdin a pipe that stays open and silent: a read of `/proc/self/fd/0` would wait for ever
    r, w = os.pipe()
    try:
        res = _cli(["index", "pull", "--from", str(snaps), "-q", str(clone)], home, stdin=r)
    finally:
        os.close(r)
        os.close(w)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    db = store.open_for_read(clone / ".repoctx")
    try:
        paths = {p for (p,) in db.execute("SELECT path FROM files")}
    finally:
        db.conn.close()
    assert "a.py" in paths and not any(".." in p or p.startswith("/") or "\x00" in p
                                       or p == "pipe" for p in paths), paths


# -- model output nested deeper than the JSON decoder goes --------------------------------------
# On 17a1ef1 a reply (or a native call's arguments) of 50,000 nested objects raised
# RecursionError out of the parser, ending the agent run with a traceback.

DEEP_JSON = '{"a":' * 50_000
DEEP_TEXT = {
    "bare": '{"name": "read_span", "arguments": ' + DEEP_JSON,
    "tagged": '<tool_call>{"name": "read_span", "arguments": ' + DEEP_JSON + "</tool_call>",
    "fenced": '```json\n{"name": "read_span", "arguments": ' + DEEP_JSON + "\n```",
    "list": "[" * 50_000,
    "prose then deep": "I will read it.\n" + DEEP_JSON,
}


@pytest.mark.parametrize("shape", sorted(DEEP_TEXT))
def test_deeply_nested_model_text_is_no_call_and_no_crash(shape):
    from agent.models.text_calls import parse_text_calls

    good = '\n<tool_call>{"name": "read_span", "arguments": {"path": "a.py"}}</tool_call>'
    parsed = parse_text_calls(DEEP_TEXT[shape] + good, names=["read_span"])
    assert [c.arguments for c in parsed.calls] in ([], [{"path": "a.py"}])
    assert all(c.arguments != {} or c.error for c in parsed.calls)


@pytest.mark.parametrize("depth", [2_000, 50_000])
@pytest.mark.parametrize("bracket", ["{\"a\":", "["])
def test_deeply_nested_native_arguments_are_an_error_for_the_model(depth, bracket):
    from agent.models.base import ToolCall

    call = ToolCall.from_raw("1", "read_span", '{"x":' + bracket * depth)
    assert call.arguments is None and call.error


# -- project memory in a shipped index directory -------------------------------------------------
# On 17a1ef1 `repoctx agent memory` read `.repoctx/memory.json` through a committed link (a file
# of the home shown, and fed to every agent run's prompt) and `--edit` wrote `memory.json` into
# whatever directory a committed `.repoctx` link led to.

HOME_MEMORY = '{"format": 1, "entries": {"k": {"value": "HOME-MARKER", "source": "user", "updated": "x"}}}'


def _ship(origin: Path, home: Path, shape: str) -> None:
    (home / "dir").mkdir(parents=True)
    (home / "dir" / "m.json").write_text(HOME_MEMORY)
    if shape == "index dir is a link":
        (origin / ".repoctx").symlink_to(os.path.relpath(home / "dir", origin))
    elif shape == "memory.json is a link":
        (origin / ".repoctx").mkdir()
        (origin / ".repoctx" / "memory.json").symlink_to(home / "dir" / "m.json")
    elif shape == "link beside memory.json":
        (origin / ".repoctx").mkdir()
        (origin / ".repoctx" / "memory.json").write_text(HOME_MEMORY.replace("HOME-", "REPO-"))
        (origin / ".repoctx" / "d").symlink_to(home / "dir")
    git(origin, "add", "-f", ".repoctx")
    git(origin, "commit", "-q", "-m", "ship memory")


@pytest.mark.parametrize("shape", ["index dir is a link", "memory.json is a link",
                                   "link beside memory.json"])
@pytest.mark.parametrize("edit", [False, True])
def test_shipped_project_memory_reads_and_writes_nothing_outside(tmp_path, shape, edit):
    home = tmp_path / "home"
    origin = make_repo(tmp_path / "origin", FILES)
    _ship(origin, home, shape)
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    before = {p.name: p.read_bytes() for p in (home / "dir").iterdir()}
    res = _cli(["agent", "memory", "-C", str(clone), *(["--edit", "k2=v"] if edit else [])], home)
    assert "HOME-MARKER" not in res.stdout + res.stderr
    assert {p.name: p.read_bytes() for p in (home / "dir").iterdir()} == before
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.count("\n") == 1, res.stderr


@pytest.mark.parametrize("shape", ["fifo", "deep"])
def test_a_special_or_deep_memory_file_is_one_line(tmp_path, shape):
    home = tmp_path / "home"
    home.mkdir()
    repo = make_repo(tmp_path / "repo", FILES)
    (repo / ".repoctx").mkdir()
    if shape == "fifo":
        os.mkfifo(repo / ".repoctx" / "memory.json")
    else:
        (repo / ".repoctx" / "memory.json").write_text('{"entries": ' + "[" * 100_000)
    res = _cli(["agent", "memory", "-C", str(repo)], home)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.count("\n") == 1, res.stderr


# -- a crafted vector table in a snapshot --------------------------------------------------------
# On 17a1ef1 each shape below gave a 43-56 line traceback from LanceDB (a file in the table's
# place even made LanceDB try to create directories in the snapshot location).

def _vector_shape(snap: Path, home: Path, shape: str) -> None:
    vectors = snap / "vectors"
    if shape == "file":
        vectors.write_text("x")
    elif shape == "link to the home":
        vectors.symlink_to(home)
    elif shape == "fifo":
        os.mkfifo(vectors)
    elif shape == "garbled table":
        (vectors / "chunks.lance" / "_versions").mkdir(parents=True)
        (vectors / "chunks.lance" / "_versions" / "1.manifest").write_bytes(b"junk\n")


@pytest.mark.parametrize("shape", ["missing", "file", "link to the home", "fifo", "garbled table"])
def test_a_crafted_snapshot_vector_table_is_one_line(tmp_path, shape):
    home = tmp_path / "home"
    home.mkdir()
    origin = make_repo(tmp_path / "origin", FILES)
    snaps = tmp_path / "snaps"
    for args in (["index", "build", "--no-embed", "-q", str(origin)],
                 ["index", "push", "--to", str(snaps), "-q", str(origin)]):
        assert _cli(args, home).returncode == 0
    (snap,) = snaps.iterdir()
    manifest = json.loads((snap / "manifest.json").read_text())
    manifest.update(vectors={"bytes": 1}, embed_dim=4)  # no embed_model: no model to load
    (snap / "manifest.json").write_text(json.dumps(manifest))
    _vector_shape(snap, home, shape)
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    before = sorted(os.listdir(home))
    res = _cli(["index", "pull", "--from", str(snaps), "-q", str(clone)], home)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.count("\n") == 1 and "push that commit again" in res.stderr, res.stderr
    assert sorted(os.listdir(home)) == before


# -- a crafted manifest or graph file ------------------------------------------------------------
# On 17a1ef1: a FIFO as `graph.db.zst` blocked the pull for good; the other shapes were 34-46
# line tracebacks (RecursionError, KeyError, AttributeError, a zstd OSError).

def _snapshot_file_shape(snap: Path, shape: str) -> None:
    manifest, graph = snap / "manifest.json", snap / "graph.db.zst"
    if shape == "deep manifest":
        manifest.write_text('{"a":' * 100_000)
    elif shape == "manifest a list":
        manifest.write_text("[1]")
    elif shape == "manifest without graph":
        data = json.loads(manifest.read_text())
        del data["graph"]
        manifest.write_text(json.dumps(data))
    elif shape == "graph a FIFO":
        graph.unlink()
        os.mkfifo(graph)
    elif shape == "graph a link to a device":
        graph.unlink()
        graph.symlink_to("/dev/zero")
    elif shape == "graph not zstd":
        graph.write_bytes(b"SQLite format 3\x00" + b"\x00" * 4096)


@pytest.mark.parametrize("shape", ["deep manifest", "manifest a list", "manifest without graph",
                                   "graph a FIFO", "graph a link to a device", "graph not zstd"])
def test_a_crafted_snapshot_file_is_one_line_at_once(tmp_path, shape):
    home = tmp_path / "home"
    home.mkdir()
    origin = make_repo(tmp_path / "origin", FILES)
    snaps = tmp_path / "snaps"
    for args in (["index", "build", "--no-embed", "-q", str(origin)],
                 ["index", "push", "--to", str(snaps), "-q", str(origin)]):
        assert _cli(args, home).returncode == 0
    (snap,) = snaps.iterdir()
    _snapshot_file_shape(snap, shape)
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    res = _cli(["index", "pull", "--from", str(snaps), "-q", str(clone)], home)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.count("\n") == 1 and "push that commit again" in res.stderr, res.stderr
