"""Damage and exhaustion end in one line, and lose nothing (issue 38, item 8).

A vector table damaged or replaced the ways disks, people and hostile checkouts do it: searches
answer lexically with a one-line notice (and a flag in --json), `index status` and `index
verify` name the damage and the fix, and `verify --repair`, `build --full` or an ordinary build
set it aside and embed again — semantic search answers afterwards. A disk that fills up (or a
file system gone read-only) under a build is one line naming the directory and what was kept;
the old index is intact and the next build, once there is space, completes. A file far larger
than the parser should take, allowed by a raised --max-file-bytes, is skipped and counted, with
the build's peak memory bounded.
"""

from __future__ import annotations

import glob
import json
import os
import random
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from cli.mcp_server import RepoctxMCP, ServeOptions
from cli.settings import load_config
from indexer.build import build
from tests.conftest import make_repo
from tests.test_index_damage import FILES

MODEL = "hashing:64"
QUERY = "Ledger7"
PROJECT = Path(__file__).resolve().parents[1]


def config(root: Path, **kw):
    return load_config(root, env={}, jobs=1, embed_model=MODEL, **kw)


@pytest.fixture
def indexed(tmp_path):
    root = make_repo(tmp_path / "repo", FILES)
    cfg = config(root)
    build(cfg, embed=True)
    return cfg


def invoke(args: list[str]):
    res = CliRunner().invoke(cli, args)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise AssertionError(f"{args}: uncaught {res.exception!r}\n{res.output}")
    assert "Traceback" not in res.output, res.output
    return res


# --------------------------------------------------------------------------- damage shapes


def _table(vectors: Path) -> Path:
    return vectors / "chunks.lance"


def _data_files(vectors: Path) -> list[str]:
    files = glob.glob(str(_table(vectors) / "data" / "*"))
    assert files
    return files


def data_deleted(v: Path) -> None:
    for f in _data_files(v):
        os.remove(f)


def fragment_truncated(v: Path) -> None:
    for f in _data_files(v):
        os.truncate(f, os.path.getsize(f) // 2)


def fragment_garbage(v: Path) -> None:
    for f in _data_files(v):
        Path(f).write_bytes(random.Random(1).randbytes(os.path.getsize(f)))


def versions_removed(v: Path) -> None:
    shutil.rmtree(_table(v) / "_versions")


def manifest_garbled(v: Path) -> None:
    for f in glob.glob(str(_table(v) / "_versions" / "*")):
        Path(f).write_bytes(b"not a lance manifest" * 8)


def vectors_dir_is_a_file(v: Path) -> None:
    shutil.rmtree(v)
    v.write_text("not a table\n")


def table_dir_is_a_file(v: Path) -> None:
    shutil.rmtree(_table(v))
    _table(v).write_text("not a table\n")


def dangling_symlink(v: Path) -> None:
    shutil.rmtree(v)
    os.symlink("/nonexistent/vectors", v)


def symlink_elsewhere(v: Path) -> None:
    """A link to a directory outside the index: the build must never write through it."""
    elsewhere = v.parent.parent / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(v)
    os.symlink(elsewhere, v)


def empty_table_dir(v: Path) -> None:
    shutil.rmtree(_table(v))
    _table(v).mkdir()


def wrong_dimension(v: Path) -> None:
    import lancedb

    from indexer.vectors.table import _schema

    shutil.rmtree(_table(v))
    lancedb.connect(str(v)).create_table("chunks", schema=_schema(32, MODEL))


def foreign_schema(v: Path) -> None:
    import lancedb
    import pyarrow as pa

    shutil.rmtree(_table(v))
    lancedb.connect(str(v)).create_table("chunks", data=pa.table({"x": [1, 2]}))


DAMAGES = {f.__name__: f for f in (
    data_deleted, fragment_truncated, fragment_garbage, versions_removed, manifest_garbled,
    vectors_dir_is_a_file, table_dir_is_a_file, dangling_symlink, symlink_elsewhere,
    empty_table_dir, wrong_dimension, foreign_schema,
)}
#: What verify calls each: the table read as another model's, or as unreadable.
VERIFY_KIND = {"wrong_dimension": "vector_model_mismatch"}


def damage(cfg, name: str) -> Path:
    vectors = cfg.index_path / "vectors.lance"
    DAMAGES[name](vectors)
    return vectors


def semantic_hits(root: Path) -> list:
    res = invoke(["search", QUERY, "--mode", "semantic", "--json", "--root", str(root)])
    assert res.exit_code == 0, res.output
    hits = json.loads(res.stdout)["hits"]
    assert hits and all("semantic" in h["ranks"] for h in hits)
    return hits


# --------------------------------------------------------------------------- readers


@pytest.mark.parametrize("name", list(DAMAGES))
def test_search_answers_lexically_with_one_notice(indexed, name):
    root = indexed.root
    damage(indexed, name)
    res = invoke(["search", QUERY, "--json", "--root", str(root)])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["vectors_damaged"] is True
    assert out["hits"] and out["hits"][0]["path"] == "pkg/m7.py"
    assert all("semantic" not in h["ranks"] for h in out["hits"])
    notice = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(notice) == 1 and "Semantic search skipped" in notice[0], res.stderr
    assert "damaged" in notice[0] and "index verify --repair" in notice[0], notice
    plain = invoke(["search", QUERY, "--root", str(root)])
    assert plain.exit_code == 0 and "pkg/m7.py" in plain.stdout, plain.output
    # asked for vectors alone: one line that names the repair, no traceback
    sem = invoke(["search", QUERY, "--mode", "semantic", "--root", str(root)])
    assert sem.exit_code == 1 and len(sem.output.strip().splitlines()) == 1, sem.output


@pytest.mark.parametrize("name", ["data_deleted", "vectors_dir_is_a_file", "foreign_schema"])
def test_context_ask_and_mcp_search_answer_without_vectors(indexed, name):
    root = indexed.root
    damage(indexed, name)
    res = invoke(["context", "where is Ledger7 defined", "--root", str(root)])
    assert res.exit_code == 0, res.output
    assert "pkg/" in res.stdout
    assert "semantic search unavailable" in res.stderr and "damaged" in res.stderr, res.stderr
    # ask without a model: the retrieval-only answer, and the same notice
    asked = invoke(["ask", "where is Ledger7 defined", "--root", str(root)])
    assert asked.exit_code == 0, asked.output
    assert "pkg/m7.py" in asked.stdout and "damaged" in asked.stderr, asked.output
    service = RepoctxMCP(indexed, ServeOptions(refresh=False)).start()
    try:
        out = service.call("search_code", {"query": QUERY, "mode": "hybrid", "k": 5})
        assert not out.is_error, out.text
        assert "pkg/m7.py" in out.text and "damaged" in out.text, out.text
    finally:
        service.close()


@pytest.mark.parametrize("name", list(DAMAGES))
def test_status_and_verify_name_the_damage_and_the_fix(indexed, name):
    root = indexed.root
    damage(indexed, name)
    st = invoke(["index", "status", str(root), "--json"])
    assert st.exit_code == 0, st.output
    vec = json.loads(st.stdout)["vectors"]
    assert vec["state"] == "damaged" and vec["coverage"] == 0.0, vec
    assert "index verify --repair" in vec["fix"]
    text = invoke(["index", "status", str(root)])
    [line] = [ln for ln in text.stdout.splitlines() if ln.startswith("Vectors:")]
    assert "damaged" in line and "%" not in line, line
    ver = invoke(["index", "verify", str(root)])
    assert ver.exit_code == 1, ver.output
    assert VERIFY_KIND.get(name, "vector_table_damaged") in ver.stdout, ver.stdout


# --------------------------------------------------------------------------- repair


REPAIRS = {
    "verify --repair": ["index", "verify", "{root}", "--repair"],
    "build --full": ["index", "build", "{root}", "--full", "--embed-model", MODEL, "-q"],
    "build": ["index", "build", "{root}", "--embed-model", MODEL, "-q", "--json"],
}


@pytest.mark.parametrize("how", list(REPAIRS))
@pytest.mark.parametrize("name", list(DAMAGES))
def test_repair_restores_semantic_search(indexed, name, how):
    root = indexed.root
    before = semantic_hits(root)
    vectors = damage(indexed, name)
    elsewhere = root.parent / "elsewhere"
    res = invoke([a.format(root=root) for a in REPAIRS[how]])
    assert res.exit_code == 0, res.output
    if how == "build":  # an ordinary build: never full coverage over a damaged table
        out = json.loads(res.stdout)
        [notice] = out["notices"]
        assert "was damaged" in notice and "set it aside as" in notice, notice
        assert out["embedding"]["embedded"] == out["embedding"]["chunks"] > 0
    assert semantic_hits(root) == before
    ver = invoke(["index", "verify", str(root)])
    assert ver.exit_code == 0, ver.output
    assert vectors.is_dir() and not vectors.is_symlink()
    kept = list(vectors.parent.glob("vectors.lance.damaged-*")) + list(
        vectors.glob("chunks.lance.damaged-*"))
    assert len(kept) == 1, kept  # set aside, not deleted
    if elsewhere.exists():  # nothing was written through the link
        assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("name", ["data_deleted", "vectors_dir_is_a_file", "foreign_schema"])
def test_graph_and_vectors_damaged_together_are_rebuilt_by_one_full_build(indexed, name):
    from tests.test_index_damage import damage as damage_graph

    root = indexed.root
    before = semantic_hits(root)
    damage(indexed, name)
    damage_graph(indexed, "garbage header")
    res = invoke(["index", "build", str(root), "--full", "--embed-model", MODEL, "-q", "--json"])
    assert res.exit_code == 0, res.output
    notices = json.loads(res.stdout)["notices"]
    assert len(notices) == 2 and "was damaged" in notices[0] and "vector table" in notices[1]
    assert semantic_hits(root) == before
    assert invoke(["index", "verify", str(root)]).exit_code == 0


# --------------------------------------------------------------------------- disk full



def repoctx(*args: str, cwd: Path = PROJECT, timeout: float = 300) -> subprocess.CompletedProcess:
    """The real command line in its own process (this checkout's code)."""
    return subprocess.run(
        [sys.executable, "-c", "import sys; from cli.main import main; sys.exit(main())", *args],
        cwd=cwd, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(cwd)},
    )


@pytest.fixture
def small_fs(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(mnt: Path) -> Path:
    filler = mnt / "filler"
    with open(filler, "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass
    assert os.statvfs(mnt).f_bavail == 0
    return filler


#: incremental / full build with the index on the small file system, the same read-only, and
#: the index elsewhere with only the vector table there (Lance's writes, not SQLite's).
EXHAUSTION = ["incremental", "full", "read-only", "vectors"]


@pytest.mark.parametrize("kind", EXHAUSTION)
def test_a_full_disk_is_one_line_and_the_next_build_repairs(tmp_path, small_fs, kind):
    root = make_repo(tmp_path / "repo", FILES)
    if kind == "vectors":
        where, common = small_fs / "vec", []
        placed = ["--vectors-uri", str(where)]
    else:
        where = small_fs / "idx"
        common = placed = ["--index-dir", str(where)]
    first = repoctx("index", "build", str(root), *placed, "--embed-model", MODEL, "-q")
    assert first.returncode == 0, first.stderr
    before = repoctx("symbol", "compute_7", "--json", "--root", str(root), *common)
    assert before.returncode == 0, before.stderr
    (root / "pkg" / "m3.py").write_text(FILES["pkg/m3.py"] + "\n\ndef added_later():\n    return 3\n")
    filler = None
    if kind == "read-only":
        done = subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot remount read-only here ({done.stderr.decode().strip()})")
    else:
        filler = fill(small_fs)
    args = ["index", "build", str(root), *common, "--embed-model", MODEL, "-q"]
    res = repoctx(*args, *(["--full"] if kind == "full" else []))
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
    assert res.returncode == 1, res.stdout + res.stderr
    assert len(lines) == 1 and "Traceback" not in res.stderr, lines
    word = "Read-only file system" if kind == "read-only" else "No space left on device"
    assert lines[0].startswith(f"Error: {word} in {where}"), lines[0]
    assert "free space and run `repoctx index build`" in lines[0], lines[0]
    # free the space: the old index answers as before (nothing half-written was published)
    if filler is not None:
        filler.unlink()
    else:
        subprocess.run(["mount", "-o", "remount,rw", str(small_fs)], check=True)
    again = repoctx("symbol", "compute_7", "--json", "--root", str(root), *common)
    assert again.returncode == 0, again.stderr
    old, now = json.loads(before.stdout), json.loads(again.stdout)
    if kind == "vectors":  # the graph was committed before the vectors: a newer generation
        old.pop("generation"), now.pop("generation")
    assert now == old
    fixed = repoctx(*args)
    assert fixed.returncode == 0, fixed.stderr
    new = repoctx("symbol", "added_later", "--json", "--root", str(root), *common)
    assert new.returncode == 0 and "pkg/m3.py" in new.stdout, new.stdout + new.stderr
    ver = repoctx("index", "verify", str(root), *common)
    assert ver.returncode == 0, ver.stdout + ver.stderr


# --------------------------------------------------------------------------- parse memory

BIG = {
    # one 50 MB line: a string literal (one token: cheap to parse, but every copy is 50 MB)
    "one_line_50mb.py": lambda: b'BLOB = "' + b"a" * 50_000_000 + b'"\n',
    # 6 MB of dense tokens: 3M leaves in the syntax tree (~1 GB before the bound)
    "dense_6mb.py": lambda: b"x = [" + b"aa, " * 1_500_000 + b"]\n",
    # a few huge lines among ordinary ones
    "few_huge_lines.py": lambda: b"def f():\n    return 1\n" + (b"T = [" + b"1," * 1_000_000
                                                                + b"]\n") * 3,
}
SKIPPED = {"one_line_50mb.py": "too_large", "dense_6mb.py": "too_many_tokens",
           "few_huge_lines.py": "too_many_tokens"}


def test_parse_memory_is_bounded_whatever_max_file_bytes_says(tmp_path):
    root = make_repo(tmp_path / "repo", {"ok.py": "def fine():\n    return 1\n"})
    for name, make in BIG.items():
        (root / name).write_bytes(make())
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    res = repoctx("index", "build", str(root), "--max-file-bytes", "300000000", "--jobs", "2",
                  "--embed-model", MODEL, "--json", "-q", timeout=240)
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    want: dict[str, int] = {}
    for reason in SKIPPED.values():
        want[reason] = want.get(reason, 0) + 1
    assert {k: out["skipped"].get(k) for k in want} == want, out["skipped"]
    assert out["files_total"] == 1  # ok.py: the others are counted as skipped
    # the largest process of the build (driver or worker); before: GBs for these files
    if peak_kb > before:
        assert peak_kb < 1_500_000, f"peak RSS {peak_kb / 1e6:.2f} GB"


def test_a_snapshot_push_to_a_full_disk_names_its_target(indexed, small_fs):
    """The write is not the index's: the line names where it went (pyarrow names no file) and
    says to run the command again, not to rebuild an index that is fine."""
    target = small_fs / "snapshots"
    filler = fill(small_fs)
    args = ("index", "push", str(indexed.root), "--to", str(target), "-q", "--allow-dirty")
    res = repoctx(*args)
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
    assert res.returncode == 1 and len(lines) == 1, res.stdout + res.stderr
    assert lines[0] == (f"Error: No space left on device in {target}: free space and run the "
                        "command again."), lines[0]
    filler.unlink()
    assert repoctx(*args).returncode == 0


def test_an_agent_write_on_a_full_disk_fails_in_one_line_and_keeps_the_file(tmp_path, small_fs):
    """The agent's edit tool on a full disk: a tool error the model can read (one line, no
    traceback), the file exactly as it was (written whole or not at all), and the same edit
    succeeds once there is space."""
    from agent.tools import ToolContext, default_registry

    root = make_repo(small_fs / "repo", {"pkg/__init__.py": "", "pkg/m3.py": FILES["pkg/m3.py"]})
    cfg = load_config(root, env={}, jobs=1)
    build(cfg)
    ctx = ToolContext.create(cfg, granted=frozenset({"read", "write", "execute"}), run_id="t1")
    target = root / "pkg" / "m3.py"
    original = target.read_bytes()
    args = {"path": "pkg/m3.py", "old_text": "total = value * 5",
            "new_text": "total = value * 5  # " + "x" * 200_000}
    try:
        filler = fill(small_fs)
        result = default_registry().call("edit", args, ctx)
        assert not result.ok, result
        assert "\n" not in result.error and "No space left on device" in result.error, result.error
        assert target.read_bytes() == original
        filler.unlink()
        assert default_registry().call("edit", args, ctx).ok
        assert b"x" * 200_000 in target.read_bytes()
    finally:
        ctx.session.close()
