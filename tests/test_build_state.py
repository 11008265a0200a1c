"""The build decides the index's state once, before it writes (`indexer.state.decide`), and acts
on it: each state made for real on disk (no index, a damaged file, a foreign database, a bulk
load that did not end, a newer and an older schema, a link to a file that is gone, a sound
index), detected, and what a build then does with it."""

from __future__ import annotations

import os
import random
import sqlite3
from pathlib import Path

import pytest

from indexer.build import build
from indexer.changes import change_set
from indexer.config import load_config
from indexer.errors import IndexDamagedError, ModelMismatchError, SchemaError
from indexer.graph import recovery, store
from indexer.graph.schema import SCHEMA_VERSION
from indexer.graph.store import DAMAGED_PREFIX, graph_file
from indexer.parse.languages import formats_key
from indexer.state import decide
from tests.conftest import dump_graph, make_repo

FILES = {"pkg/__init__.py": ""} | {
    f"pkg/m{i}.py": f"from pkg.m{(i + 1) % 6} import f{(i + 1) % 6}\n\n\ndef f{i}(x):\n"
                    f"    return f{(i + 1) % 6}(x) if x > {i} else x\n"
    for i in range(6)
}


def config(root: Path, name: str = "index", model: str = "hashing:64"):
    return load_config(root, env={}, jobs=1, embed_model=model, index_dir=root.parent / name)


@pytest.fixture
def built(tmp_path):
    root = make_repo(tmp_path / "repo", FILES)
    cfg = config(root)
    build(cfg)
    return cfg


def settle(path: Path) -> None:
    """Everything in the file itself (no -wal), as a machine that stopped would find it."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def damage_middle(path: Path) -> None:
    settle(path)
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.seek(size // 2)
        fh.write(random.Random(7).randbytes(min(32768, size // 3)))


def set_schema(path: Path, version: int) -> None:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(version)])
    conn.close()


def test_no_index_is_missing_and_a_build_creates_it_in_place(tmp_path):
    root = make_repo(tmp_path / "repo", FILES)
    cfg = config(root)
    for full in (False, True):
        state = decide(cfg.index_path, full=full)
        assert (state.kind, state.action, state.linked) == ("missing", "create", False)
    stats = build(cfg, full=True)
    assert stats.files_parsed == len(FILES)
    assert graph_file(cfg.index_path).name == "graph.1.db"  # built in place: nothing to replace
    assert decide(cfg.index_path, full=False).kind == "current"


def test_a_sound_index_is_current_updated_in_place_or_rebuilt_into_a_new_generation(built):
    first = graph_file(built.index_path)
    state = decide(built.index_path, full=False)
    assert (state.kind, state.action, state.schema) == ("current", "update", SCHEMA_VERSION)
    assert decide(built.index_path, full=True).action == "rebuild"
    (built.root / "pkg/m1.py").write_text("def f1(x):\n    return 1\n")
    build(built)
    assert graph_file(built.index_path) == first  # written in place
    build(built, full=True)
    assert graph_file(built.index_path) != first  # a new generation, published
    clean = config(built.root, "clean")
    build(clean)
    assert dump_graph(built) == dump_graph(clean)


@pytest.mark.parametrize("how", ["garbage in the middle", "another program's database"])
def test_a_damaged_index_is_refused_without_full_and_set_aside_with_it(built, how):
    path = graph_file(built.index_path)
    if how == "garbage in the middle":
        damage_middle(path)
        full_only = True  # only a full build's quick_check reads every page
    else:
        for p in path.parent.glob(path.name + "*"):
            p.unlink()
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        conn.commit()
        conn.close()
        full_only = False
    kept = path.read_bytes()
    state = decide(built.index_path, full=False)
    if full_only:
        assert state.kind == "current"  # an incremental build checks what opening costs
    else:
        assert (state.kind, state.action) == ("damaged", "refuse")
        assert "not a repoctx index" in state.error.reason
        with pytest.raises(IndexDamagedError, match="index build --full"):
            build(built)
        assert path.read_bytes() == kept  # refused: nothing written
    state = decide(built.index_path, full=True)
    assert (state.kind, state.action) == ("damaged", "set_aside")
    notes: list[str] = []
    stats = build(built, full=True, notify=notes.append)
    assert len(notes) == 1 and "set it aside" in notes[0]
    assert stats.files_parsed == len(FILES)
    aside = [p for p in built.index_path.iterdir() if p.name.startswith(DAMAGED_PREFIX)
             and not p.name.endswith(("-wal", "-shm"))]
    assert [p.read_bytes() for p in aside] == [kept]  # kept as it was
    clean = config(built.root, "clean")
    build(clean)
    assert dump_graph(built) == dump_graph(clean)
    assert decide(built.index_path, full=True).kind == "current"


def test_an_interrupted_bulk_load_is_checked_once(built):
    marker = built.index_path / recovery.BULK_MARKER
    path = graph_file(built.index_path)
    marker.write_text(path.name)  # a bulk load of a sound file that did not reach its end
    state = decide(built.index_path, full=False)
    assert (state.kind, state.bulk_load_checked) == ("current", True)
    assert not marker.exists()  # found sound: the check is not repeated
    assert not decide(built.index_path, full=False).bulk_load_checked
    damage_middle(path)
    marker.write_text(path.name)  # and one that left its file damaged
    state = decide(built.index_path, full=False)
    assert (state.kind, state.action, state.bulk_load_checked) == ("damaged", "refuse", True)
    assert "quick_check" in state.error.reason or "malformed" in state.error.reason
    assert marker.exists()  # still suspect until a full build sets the file aside
    build(built, full=True, notify=lambda _: None)
    assert not marker.exists() and decide(built.index_path, full=False).kind == "current"


def test_a_newer_schema_is_refused_by_every_build(built):
    path = graph_file(built.index_path)
    set_schema(path, SCHEMA_VERSION + 1)
    kept = path.read_bytes()
    for full in (False, True):
        state = decide(built.index_path, full=full)
        assert (state.kind, state.action, state.schema) == ("newer", "refuse", SCHEMA_VERSION + 1)
        with pytest.raises(SchemaError, match="newer than this repoctx"):
            build(built, full=full)
    assert path.read_bytes() == kept
    assert sorted(p.name for p in built.index_path.glob("graph.*.db")) == [path.name]


def test_an_older_schema_is_migrated_in_place(built):
    path = graph_file(built.index_path)
    settle(path)
    conn = sqlite3.connect(path)  # schema 4: before docs and configs had lexical tables of their own
    with conn:
        for table in ("chunks_fts", "files_fts"):
            cols = "path, symbol, body" if table == "chunks_fts" else "path, names, body"
            conn.execute(f"INSERT INTO {table}(rowid, {cols}) SELECT rowid, {cols} FROM {table}_text")
            conn.execute(f"DROP TABLE {table}_text")
        conn.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    conn.close()
    with pytest.raises(SchemaError, match="to migrate it"):
        store.open_for_read(built.index_path)
    state = decide(built.index_path, full=False)
    assert (state.kind, state.action, state.schema) == ("outdated", "update", 4)
    build(built)
    assert graph_file(built.index_path) == path  # migrated in place
    assert decide(built.index_path, full=False).kind == "current"
    clean = config(built.root, "clean")
    build(clean)
    assert dump_graph(built) == dump_graph(clean)


def test_a_link_to_a_file_that_is_gone(built):
    path = graph_file(built.index_path)
    for p in built.index_path.glob(path.name + "*"):
        p.unlink()
    assert os.path.islink(built.index_path / "graph.db")
    state = decide(built.index_path, full=False)
    assert (state.kind, state.action, state.linked) == ("missing", "create", True)
    assert decide(built.index_path, full=True).action == "rebuild"
    stats = build(built, full=True)
    assert stats.files_parsed == len(FILES)
    assert graph_file(built.index_path).exists()


def test_an_embedding_model_the_index_was_not_built_with_is_refused_before_any_write(tmp_path):
    root = make_repo(tmp_path / "repo", FILES)
    cfg = config(root)
    build(cfg, embed=True)
    (root / "pkg/m2.py").write_text("def f2(x):\n    return 2\n")
    before = dump_graph(cfg)
    other = config(root, model="hashing:32")
    with pytest.raises(ModelMismatchError, match="--reembed"):
        build(other, embed=True)
    assert dump_graph(cfg) == before  # the edit waits: nothing was written
    stats = build(other, embed=True, reembed=True)
    assert stats.files_parsed == 1 and stats.embedding["model"] == "hashing:32"


def test_the_change_set_looks_at_every_file_again_when_the_name_tables_changed(built):
    db = store.open_for_write(built.index_path)
    try:
        changes = change_set(built, db)
        assert (changes.work, changes.deleted, changes.keys) == ([], [], {})  # a no-op
        assert changes.existing == {}  # no file looked at one by one
        with db.conn:
            store.set_meta(db, "formats_key", "the tables of an older repoctx")
        changes = change_set(built, db)
        assert changes.keys["formats_key"] == formats_key()
        # every file looked at again (its row read), none changed
        assert len(changes.existing) == changes.indexed > 0
        assert changes.work == [] and changes.deleted == []
        (built.root / "pkg/m3.py").write_text("def f3(x):\n    return 3\n")
        (built.root / "pkg/m4.py").unlink()
        changes = change_set(built, db)
        assert [w[0] for w in changes.work] == ["pkg/m3.py"] and changes.deleted == ["pkg/m4.py"]
    finally:
        db.conn.close()
