"""A full rebuild builds a new generation file and swaps it in atomically: readers see the old
index or the new one, never a half-built one; a reader holding a connection finishes on the
generation it opened; long-lived readers pick up the new one; a crash at any point leaves the
old index serving and the next build completes. Vectors are shared by the generations and never
embedded again for unchanged code.

Real processes throughout: the rebuild is the `repoctx` console script, killed with SIGKILL
for the crash tests; readers are threads and a separate Python process.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from agent.tools.session import ToolSession
from cli.settings import load_config
from indexer import Index
from indexer.build import build
from indexer.errors import ModelMismatchError, RepoctxError
from indexer.graph import store
from indexer.ops.verify import verify
from indexer.vectors.embed import create_embedder
from retrieval.search import Searcher
from retrieval.symbols import find_symbols, references_to
from tests.conftest import dump_graph, git, make_repo

MODEL = "hashing:64"
REPOCTX = str(Path(sys.executable).with_name("repoctx"))
ENV = {k: v for k, v in os.environ.items() if not k.startswith("REPOCTX_")}


# --------------------------------------------------------------------------- a tree that changes


def module(i: int, n: int, after: bool) -> str:
    renamed = after and i % 30 == 5
    name = f"task_{i}" if renamed else f"work_{i}"
    callee = f"work_{(i + 1) % n}" if not (after and (i + 1) % n % 30 == 5) else f"task_{(i + 1) % n}"
    shifted = "\n# reviewed\n# again\n" if after and i % 10 == 0 else ""
    rare = " Mind the zebra crossing." if i % 50 == (8 if after else 7) else ""  # a few files
    return (
        f'"""Ledger module {i}: totals for account {i} and item {i}."""\n{shifted}\n\n'
        f"def {name}(value):\n"
        f'    """Add up the ledger value of account {i}.{rare}"""\n'
        f"    total = value * {i + 2}\n"
        f"    return {callee}(total) if value > {i} else total\n\n\n"
        f"class Item{i}:\n"
        f'    """An item of account {i}."""\n\n'
        f"    def price_{i}(self, amount):\n"
        f"        return {name}(amount) + {i}\n"
    )


def tree(n: int, after: bool = False) -> dict[str, str]:
    files = {"pkg/__init__.py": ""}
    for i in range(n):
        if after and i % 25 == 3:
            continue  # deleted
        files[f"pkg/m{i}.py"] = module(i, n, after)
    if after:
        for j in range(10):
            files[f"pkg/new{j}.py"] = (
                f'"""Fresh ledger totals {j}."""\n\nfrom pkg.m{j + 1} import work_{j + 1}\n\n\n'
                f"def fresh_{j}(value):\n    return work_{j + 1}(value) + {j}\n"
            )
    return files


def change_tree(root: Path, n: int) -> None:
    after = tree(n, after=True)
    for rel in tree(n):
        if rel not in after:
            (root / rel).unlink()
    for rel, text in after.items():
        path = root / rel
        if not path.exists() or path.read_text() != text:
            path.write_text(text)


QUERIES = [
    ("symbol", "work_10"),
    ("symbol", "work_35"),
    ("symbol", "fresh_3"),
    ("refs", "work_11"),
    ("refs", "work_1"),
    ("lexical", "zebra crossing"),
    ("hybrid", "add up the ledger value"),
]


def ask(index, cfg, kind: str, text: str, embedder) -> object:
    """One query's answer, reduced to what it asserts (no stale flags, no generation); an
    error the user would see (e.g. "No symbol matches") is an answer too."""
    try:
        return _ask(index, cfg, kind, text, embedder)
    except RepoctxError as exc:
        return ("error", type(exc).__name__)


def _ask(index, cfg, kind: str, text: str, embedder) -> object:
    if kind == "symbol":
        return [(s.path, s.qualname, s.kind, s.start_line, s.end_line)
                for s in find_symbols(index, text)]
    if kind == "refs":
        targets, refs = references_to(index, text)
        return ([t.qualname for t in targets],
                [(r.path, r.line, r.kind, r.enclosing, r.resolution, round(r.confidence, 4))
                 for r in refs])
    searcher = Searcher(index, embedder=embedder)
    result = searcher.search(text, kind, 8)
    return [(h.path, h.start_line, h.end_line, h.symbol) for h in result.hits]


def snapshot(cfg, embedder) -> dict[tuple[str, str], object]:
    with Index.open(cfg) as index:
        return {q: ask(index, cfg, *q, embedder) for q in QUERIES}


def config(root: Path):
    return load_config(root, env={}, jobs=1, embed_model=MODEL)


def cli_build(root: Path, *args: str, env: dict | None = None, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [REPOCTX, "index", "build", str(root), "--embed-model", MODEL, "-q", *args],
        env={**ENV, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        **kw,
    )


def generations(index_dir: Path) -> list[str]:
    return sorted(p.name for p in index_dir.glob("graph.*.db"))


# --------------------------------------------------------------------------- layout


def test_generations_swap_and_old_ones_go(tmp_path):
    root = make_repo(tmp_path / "repo", tree(12))
    cfg = config(root)
    build(cfg, embed=True)
    idx = cfg.index_path
    assert os.readlink(idx / "graph.db") == "graph.1.db" and generations(idx) == ["graph.1.db"]
    seen = set()
    for expect in (2, 3, 4):
        build(cfg, full=True, embed=True)
        assert os.readlink(idx / "graph.db") == f"graph.{expect}.db"
        # the new one and the one it replaced (readers may hold it); older ones are deleted
        assert generations(idx) == sorted([f"graph.{expect - 1}.db", f"graph.{expect}.db"])
        assert not [p for p in idx.iterdir() if p.name.startswith(f"graph.{expect - 2}.db")]
        seen.add(os.readlink(idx / "graph.db"))
    assert len(seen) == 3  # a name is never used twice
    assert (idx / ".gitignore").exists() and (idx / "write.lock").exists()
    db = store.open_for_read(idx)
    assert db.file == idx / "graph.4.db" and store.get_meta(db, "generation") == "4"
    db.conn.close()


def test_an_index_from_before_generations_is_converted_by_the_next_full_build(tmp_path):
    root = make_repo(tmp_path / "repo", tree(12))
    cfg = config(root)
    build(cfg, embed=True)
    idx = cfg.index_path
    # the layout of an older repoctx: graph.db is the database itself
    (idx / "graph.db").unlink()
    os.replace(idx / "graph.1.db", idx / "graph.db")
    for leftover in idx.glob("graph.1.db-*"):
        leftover.unlink()
    before = snapshot(cfg, create_embedder(MODEL))
    held = Index.open(cfg)
    assert held.db.file == idx / "graph.db"
    build(cfg, embed=True)  # incremental: in place, still a plain file
    assert not (idx / "graph.db").is_symlink()
    (root / "pkg/m3.py").write_text(module(3, 12, after=True) + "\n\ndef extra_3():\n    pass\n")
    build(cfg, full=True, embed=True)
    assert os.readlink(idx / "graph.db") == "graph.1.db"
    assert find_symbols(held, "extra_3") == []  # still reading the file it opened
    assert snapshot(cfg, create_embedder(MODEL)) != before
    held.close()
    build(cfg, full=True, embed=True)
    assert generations(idx) == ["graph.1.db", "graph.2.db"]
    assert not [p.name for p in idx.iterdir() if p.name.startswith("graph.db-")]


def test_a_failed_full_build_leaves_the_old_generation_serving(tmp_path):
    root = make_repo(tmp_path / "repo", tree(12))
    cfg = config(root)
    build(cfg, embed=True)
    before = snapshot(cfg, create_embedder(MODEL))
    with pytest.raises(ModelMismatchError):
        build(cfg, full=True, embed=True, embedder=create_embedder("hashing:32"))
    assert os.readlink(cfg.index_path / "graph.db") == "graph.1.db"
    assert generations(cfg.index_path) == ["graph.1.db"]
    assert snapshot(cfg, create_embedder(MODEL)) == before


# --------------------------------------------------------------------------- vectors


def test_a_full_rebuild_embeds_nothing_twice_and_keeps_old_vectors_for_old_readers(tmp_path):
    root = make_repo(tmp_path / "repo", tree(20))
    cfg = config(root)
    first = create_embedder(MODEL)
    build(cfg, embed=True, embedder=first)
    assert first.texts_embedded > 0
    again = create_embedder(MODEL)
    stats = build(cfg, full=True, embed=True, embedder=again)
    assert again.texts_embedded == 0 and stats.embedding["embedded"] == 0
    assert stats.embedding["coverage"] == 1.0 and verify(cfg).ok

    old = store.open_for_read(cfg.index_path)
    old_ids = {r[0] for r in old.conn.execute("SELECT id FROM chunks")}
    change_tree(root, 20)
    edit = create_embedder(MODEL)
    build(cfg, full=True, embed=True, embedder=edit)
    new = store.open_for_read(cfg.index_path)
    new_ids = {r[0] for r in new.conn.execute("SELECT id FROM chunks")}
    gone = old_ids - new_ids
    assert gone and 0 < edit.texts_embedded < len(new_ids)  # only the new and changed chunks
    # The dropped chunks' vectors stay until the next build: a reader still on the previous
    # generation gets the same semantic answers meanwhile.
    vectors = Searcher(Index.open(cfg))._vector_store()
    table_ids = {int(c) for c in vectors.chunk_ids()}
    assert gone <= table_ids
    tombstoned = {r[0] for r in new.conn.execute("SELECT chunk_id FROM vector_tombstones")}
    assert gone <= tombstoned
    report = verify(cfg)
    assert report.ok and {n.kind for n in report.notes} == {"tombstoned_vectors"}
    build(cfg, embed=True, embedder=edit)
    assert not gone & {int(c) for c in vectors.chunk_ids()}
    assert verify(cfg).ok and not verify(cfg).notes
    old.conn.close()
    new.conn.close()


# --------------------------------------------------------------------------- concurrent readers


READER_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    from indexer import Index
    from retrieval.symbols import find_symbols, references_to
    root, stop = Path(sys.argv[1]), Path(sys.argv[2])
    while not stop.exists():
        for name in ("work_10", "work_35", "fresh_3"):
            with Index.open(root, env={}) as index:
                rows = [[s.path, s.qualname, s.kind, s.start_line, s.end_line]
                        for s in find_symbols(index, name)]
            print(json.dumps(["symbol", name, rows]), flush=True)
    """
)


def test_readers_see_the_old_index_or_the_new_one_never_a_half_built_one(tmp_path):
    n = 300
    root = make_repo(tmp_path / "repo", tree(n))
    cfg = config(root)
    build(cfg, embed=True)
    change_tree(root, n)  # the tree moves on; the index answers for the old tree until rebuilt
    embedder = create_embedder(MODEL)
    before = snapshot(cfg, embedder)
    assert snapshot(cfg, embedder) == before  # the answers are deterministic

    seen: list[tuple[tuple[str, str], object, str]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def fresh_reader(offset: int) -> None:  # a CLI-like reader: one connection per query
        emb = create_embedder(MODEL)
        i = offset
        while not stop.is_set():
            q = QUERIES[i % len(QUERIES)]
            i += 1
            try:
                with Index.open(cfg) as index:
                    seen.append((q, ask(index, cfg, *q, emb), "fresh"))
            except BaseException as exc:  # noqa: BLE001 - reported by the test below
                errors.append(exc)
                return

    session = ToolSession()
    held = Index.open(cfg)
    held_answers: list[object] = []

    def long_lived_reader() -> None:  # the agent / MCP server: one connection across the swap
        emb = create_embedder(MODEL)
        i = 0
        while not stop.is_set():
            q = QUERIES[i % len(QUERIES)]
            i += 1
            try:
                seen.append((q, ask(session.index(cfg), cfg, *q, emb), "session"))
                if q[0] == "symbol":
                    held_answers.append((q, ask(held, cfg, *q, emb)))
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                return

    stop_file = tmp_path / "stop-readers"
    reader_proc = subprocess.Popen(
        [sys.executable, "-c", READER_SCRIPT, str(cfg.root), str(stop_file)],
        cwd=Path(__file__).resolve().parents[1], env=ENV, stdout=subprocess.PIPE, text=True,
    )
    threads = [threading.Thread(target=fresh_reader, args=(k,)) for k in range(2)]
    threads.append(threading.Thread(target=long_lived_reader))
    for t in threads:
        t.start()
    try:
        while len(seen) < 2 * len(QUERIES):  # readers are running before the build starts
            time.sleep(0.05)
            assert not errors, errors
        during_start = len(seen)
        proc = cli_build(root, "--full", "-j", "2")
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        during = len(seen) - during_start
        time.sleep(1.0)  # and keep reading after the swap
    finally:
        stop.set()
        stop_file.touch()
        for t in threads:
            t.join(timeout=60)
        proc_out, _ = reader_proc.communicate(timeout=60)
    assert not errors, errors
    after = snapshot(cfg, embedder)
    assert all(before[q] != after[q] for q in QUERIES), "the tree change must show in every query"
    assert not [a for a in (*before.values(), *after.values()) if a and a[0] == "error"]
    assert before[("lexical", "zebra crossing")] and after[("lexical", "zebra crossing")]

    mismatches = [(q, how) for q, got, how in seen if got not in (before[q], after[q])]
    for line in proc_out.splitlines():
        kind, name, rows = json.loads(line)
        got = [tuple(r) for r in rows]
        seen.append(((kind, name), got, "process"))
        if got not in (before[(kind, name)], after[(kind, name)]):
            mismatches.append(((kind, name), "process"))
    assert mismatches == [], (
        f"{len(mismatches)} of {len(seen)} answers ({during} during the rebuild) were neither "
        f"the old index's nor the new one's: {sorted(set(mismatches))[:10]}")
    assert during > 20, "readers must have been answering while the rebuild ran"
    for how in ("fresh", "session", "process"):
        got = [(q, a) for q, a, h in seen if h == how]
        assert any(a == before[q] for q, a in got), how
        assert any(a == after[q] for q, a in got), how  # a long-lived reader moves on too
    # A connection opened before the swap keeps answering, from the generation it opened.
    assert held_answers and all(a == before[q] for q, a in held_answers)
    assert all(ask(held, cfg, *q, embedder) == before[q] for q in QUERIES)
    held.close()
    session.close()


def test_a_long_lived_reader_sees_every_build_even_after_a_query_wrote_temp_tables(tmp_path):
    """The agent's and the MCP server's connection: a query that writes a TEMP table (lexical
    search's scratch space) must not pin it to that moment's snapshot (before: every later
    incremental build was invisible to it), and a full rebuild's new file is picked up."""
    root = make_repo(tmp_path / "repo", tree(12))
    cfg = config(root)
    build(cfg, embed=True)
    session = ToolSession()
    first = session.index(cfg)
    first.db.conn.execute("CREATE TEMP TABLE scratch(x)")
    first.db.conn.execute("INSERT INTO temp.scratch VALUES (1)")
    session.searcher(cfg, semantic=False).search("zebra crossing", "lexical", 5)
    (root / "pkg/late.py").write_text("def arrived_late():\n    return 1\n")
    build(cfg, embed=True)
    assert [s.name for s in find_symbols(session.index(cfg), "arrived_late")] == ["arrived_late"]
    assert session.index(cfg) is first  # same generation: same connection
    (root / "pkg/later.py").write_text("def arrived_later():\n    return 2\n")
    build(cfg, full=True, embed=True)
    assert session.index(cfg) is not first
    assert [s.name for s in find_symbols(session.index(cfg), "arrived_later")] == ["arrived_later"]
    session.close()


# --------------------------------------------------------------------------- crashes


@pytest.fixture
def changed_repo(tmp_path):
    n = 120
    root = make_repo(tmp_path / "repo", tree(n))
    cfg = config(root)
    build(cfg, embed=True)
    change_tree(root, n)
    return cfg


@pytest.mark.parametrize("point", ["generation_created", "mid-parse", "before_swap", "after_swap"])
def test_a_full_rebuild_killed_at_any_point_leaves_a_serving_index(changed_repo, point):
    cfg = changed_repo
    idx = cfg.index_path
    embedder = create_embedder(MODEL)
    before = snapshot(cfg, embedder)
    if point == "mid-parse":
        # small batches: the first is committed long before parsing ends
        proc = cli_build(cfg.root, "--full", "-j", "1", env={"REPOCTX_BATCH_SIZE": "4"})
        wal = idx / "graph.2.db-wal"
        deadline = time.monotonic() + 120
        while not (wal.exists() and wal.stat().st_size > 0):  # the first batch is written
            assert proc.poll() is None and time.monotonic() < deadline, "the build finished first"
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    else:
        proc = cli_build(cfg.root, "--full", env={"REPOCTX_CRASH_AT": point})
        proc.communicate(timeout=600)
    assert proc.returncode == -signal.SIGKILL
    if point == "after_swap":
        assert os.readlink(idx / "graph.db") == "graph.2.db"  # the swap happened: new index
    else:
        assert os.readlink(idx / "graph.db") == "graph.1.db"  # the old index keeps serving
        assert (idx / "graph.2.db").exists()  # what the killed build left
        assert snapshot(cfg, embedder) == before
        report = verify(cfg)  # the tree changed since; the index itself is sound
        assert report.kinds() <= {"missing_file", "extra_file", "stale_file"}, report.issues
    # The next build (any kind) cleans up and completes.
    done = cli_build(cfg.root)
    _, err = done.communicate(timeout=600)
    assert done.returncode == 0, err
    current = os.readlink(idx / "graph.db")
    assert not [g for g in generations(idx) if int(g.split(".")[1]) > int(current.split(".")[1])]
    report = verify(cfg)
    assert report.ok, report.issues
    assert snapshot(cfg, embedder) != before
    # ... and the index it leaves is what a clean build of the tree gives
    clean = load_config(cfg.root, env={}, jobs=1, embed_model=MODEL,
                        index_dir=cfg.root.parent / "clean-index")
    build(clean, full=True)
    assert dump_graph(cfg) == dump_graph(clean)


# --------------------------------------------------------------------------- snapshots


def test_pull_installs_a_new_generation_beside_the_one_readers_hold(tmp_path):
    from indexer.ops.snapshot import pull, push

    root = make_repo(tmp_path / "repo", tree(12))
    cfg = config(root)
    build(cfg, embed=True)
    snaps = tmp_path / "snaps"
    push(cfg, to=str(snaps))
    (root / "pkg/m4.py").write_text(module(4, 12, after=True) + "\n\ndef only_here():\n    pass\n")
    git(root, "commit", "-qam", "local change")
    build(cfg, embed=True)
    held = Index.open(cfg)
    assert [s.name for s in find_symbols(held, "only_here")] == ["only_here"]
    pull(cfg, from_=str(snaps))
    link = os.readlink(cfg.index_path / "graph.db")
    assert link != held.db.file.name and link.startswith("graph.") and link.endswith(".db")
    # the pulled index was brought up to date; the held connection still reads its generation
    assert [s.name for s in find_symbols(held, "only_here")] == ["only_here"]
    with Index.open(cfg) as index:
        assert [s.name for s in find_symbols(index, "only_here")] == ["only_here"]
    held.close()
    assert verify(cfg).ok


def test_a_dangling_link_is_no_index_and_the_next_build_starts_over(tmp_path):
    root = make_repo(tmp_path / "repo", tree(6))
    cfg = config(root)
    build(cfg)
    target = store.graph_file(cfg.index_path)
    for p in cfg.index_path.glob(target.name + "*"):
        p.unlink()
    from indexer.errors import NoIndexError

    with pytest.raises(NoIndexError):
        store.open_for_read(cfg.index_path)
    build(cfg)
    index = Index.open(cfg)
    db = index.db
    assert db.file != target and find_symbols(index, "work_2")
    index.close()
    # a reader never creates a database file: nothing appears where the link points
    (cfg.index_path / "graph.db").unlink()
    os.symlink("graph.99.db", cfg.index_path / "graph.db")
    with pytest.raises(NoIndexError):
        store.open_for_read(cfg.index_path)
    assert not (cfg.index_path / "graph.99.db").exists()
    conn = sqlite3.connect(db.file)
    assert conn.execute("SELECT count(*) FROM files").fetchone()[0] > 0
    conn.close()
    shutil.rmtree(cfg.index_path)
