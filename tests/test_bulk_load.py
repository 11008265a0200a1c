"""A bulk load (a build that writes most of the index) does not wait for the disk; a marker
beside the graph says so until the file is synced, and the next build checks a file that a
load which did not end left behind: sound, it resumes; damaged, it is reported or set aside."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from indexer.build import build
from indexer.config import load_config
from indexer.errors import IndexDamagedError
from indexer.graph import recovery, store
from indexer.phases import graph as build_mod
from tests.conftest import dump_graph, make_repo

ROOT = Path(__file__).resolve().parent.parent


def module(i: int) -> str:
    return (
        f"from pkg.m{(i + 1) % 30} import step_{(i + 1) % 30}\n\n\n"
        f"def step_{i}(value):\n"
        f"    return step_{(i + 1) % 30}(value + {i}) if value < {i} else value\n\n\n"
        f"class Stage{i}:\n"
        f"    def run(self, value):\n"
        f"        return step_{i}(value) * {i + 1}\n"
    )


FILES = {"pkg/__init__.py": ""} | {f"pkg/m{i}.py": module(i) for i in range(30)}


def config(root: Path, name: str = "index"):
    return load_config(root, env={}, jobs=1, embed_model="hashing:64",
                       index_dir=root.parent / name)


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path / "repo", FILES)


def marker(cfg) -> Path:
    return cfg.index_path / recovery.BULK_MARKER


def test_a_bulk_load_marks_the_file_until_it_is_synced(repo, monkeypatch):
    monkeypatch.setattr(build_mod, "BULK_MIN", 0)
    cfg = config(repo)
    seen = []

    def progress(p):
        if p.phase == "parse":
            seen.append(marker(cfg).read_text() if marker(cfg).exists() else None)

    build(cfg, progress=progress)
    assert seen and set(seen) == {store.graph_file(cfg.index_path).name}
    assert not marker(cfg).exists()
    # a small build after it is no bulk load: no marker at any point
    (repo / "pkg/m3.py").write_text(module(3) + "\n\ndef extra():\n    return 1\n")
    seen.clear()
    build(cfg, progress=progress)
    assert seen and set(seen) == {None}
    # the bulk load's graph is the one an ordinary build gives
    monkeypatch.setattr(build_mod, "BULK_MIN", 1000)
    plain = config(repo, "plain")
    build(plain)
    assert dump_graph(cfg) == dump_graph(plain)


def test_a_bulk_load_killed_before_its_end_is_checked_and_resumed(repo, monkeypatch):
    cfg = config(repo)
    script = (
        "import sys; from indexer import build as b; from indexer.config import load_config\n"
        "from indexer.phases import graph; graph.BULK_MIN = 0\n"
        "root = sys.argv[1]\n"
        "b.build(load_config(root, env={}, jobs=1, embed_model='hashing:64', index_dir=sys.argv[2]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(repo), str(cfg.index_path)], cwd=ROOT,
        env={**os.environ, "REPOCTX_CRASH_AT": "bulk_load_synced"}, capture_output=True, text=True,
        timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert marker(cfg).read_text() == store.graph_file(cfg.index_path).name
    checked = []
    real = store.quick_check
    monkeypatch.setattr(store, "quick_check", lambda db, d: (checked.append(d), real(db, d)))
    build(cfg)
    assert checked == [cfg.index_path] and not marker(cfg).exists()
    build(cfg)  # nothing left to check
    assert checked == [cfg.index_path]
    clean = config(repo, "clean")
    build(clean)
    assert dump_graph(cfg) == dump_graph(clean)


def damage_middle(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.seek(size // 2)
        fh.write(random.Random(5).randbytes(min(32768, size // 4)))


def test_a_damaged_file_a_bulk_load_left_is_reported_then_set_aside(repo):
    cfg = config(repo)
    build(cfg)
    path = store.graph_file(cfg.index_path)
    damage_middle(path)
    (cfg.index_path / recovery.BULK_MARKER).write_text(path.name)
    kept = path.read_bytes()
    with pytest.raises(IndexDamagedError, match="index build --full"):
        build(cfg)
    assert path.read_bytes() == kept and marker(cfg).exists()  # nothing changed, still suspect
    notes = []
    stats = build(cfg, full=True, notify=notes.append)
    assert stats.files_parsed == len(FILES) and len(notes) == 1 and "damaged" in notes[0]
    assert not marker(cfg).exists()
    clean = config(repo, "clean")
    build(clean)
    assert dump_graph(cfg) == dump_graph(clean)


def test_a_marker_naming_another_file_is_dropped_without_a_check(repo, monkeypatch):
    cfg = config(repo)
    build(cfg)
    marker(cfg).write_text("graph.7.db")
    monkeypatch.setattr(store, "quick_check", lambda *a: pytest.fail("checked"))
    stats = build(cfg)
    assert stats.files_parsed == 0 and not marker(cfg).exists()
