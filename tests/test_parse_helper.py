"""The parse helper: a build of a few dozen files parses in a second process beside the writer
(`indexer.parse.helper`), with the same results, and loses nothing when the helper dies."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from indexer.build import build
from indexer.config import load_config
from indexer.parse import helper as parse_helper
from indexer.phases import parsing as build_mod
from indexer.phases.parsing import HELPER_THRESHOLD, POOL_THRESHOLD
from indexer.vectors import token_counts
from tests.conftest import dump_graph, make_repo, write_files


def _files(n: int, step: int = 1) -> dict[str, str]:
    return {
        f"pkg/m{i}.py": (
            "from pkg.base import helper\n\n\n"
            f"def f{i}(x):\n    # zqmark{i}xv\n    return helper(x) * {i + 100 * step}\n\n\n"
            f"class C{i}:\n    def run(self):\n        return f{i}(1)\n"
        )
        for i in range(n)
    } | {"pkg/__init__.py": "", "pkg/base.py": "def helper(x):\n    return x\n"}


def _work(repo, n):
    return [(f"pkg/m{i}.py", "python", f"pkg.m{i}", None) for i in range(n)]


def _by_path(results):
    return {r.path: r for batch in results for r in batch}


@pytest.fixture
def slow_here(monkeypatch):
    """This process parses slowly, so that the helper takes batches; counts its batches."""
    calls = []
    real = parse_helper.parse_batch

    def slow(root, model, items, counter=None):
        calls.append(len(items))
        time.sleep(0.15)
        return real(root, model, items, counter)

    monkeypatch.setattr(parse_helper, "parse_batch", slow)
    return calls


def test_the_helper_parses_batches_with_the_rows_a_serial_parse_gives(tmp_path, slow_here):
    n = 24
    repo = make_repo(tmp_path / "r", _files(n))
    work = _work(repo, n)
    beside = _by_path(parse_helper.parse_beside(str(repo), None, str(tmp_path / "ix"), work))
    serial = {r.path: r for r in build_mod.parse_batch(str(repo), None, work)}  # not slowed
    assert sorted(beside) == sorted(serial)  # every file once
    assert beside == serial


def test_the_helper_takes_work_when_this_process_is_busy(tmp_path, slow_here):
    n = 24
    repo = make_repo(tmp_path / "r", _files(n))
    results = list(parse_helper.parse_beside(str(repo), None, str(tmp_path / "ix"), _work(repo, n)))
    assert sum(len(b) for b in results) == n
    here = sum(slow_here)
    assert here < n, "the helper parsed nothing"


def test_a_helper_that_dies_loses_no_file(tmp_path, monkeypatch):
    n = 24
    repo = make_repo(tmp_path / "r", _files(n))
    killed = []

    class Dying(parse_helper._Helper):
        def feed(self, pending, done):
            real_send = self.conn.send

            def send(batch):  # it dies holding its first batch
                real_send(batch)
                self.proc.kill()
                self.proc.join()
                killed.append(len(batch))

            self.conn.send = send
            super().feed(pending, done)

    monkeypatch.setattr(parse_helper, "_Helper", Dying)
    real = parse_helper.parse_batch
    monkeypatch.setattr(parse_helper, "parse_batch",
                        lambda *a, **k: (time.sleep(0.1), real(*a, **k))[1])
    work = _work(repo, n)
    got = []
    # In a thread: a lost batch would leave the build waiting for it forever.
    t = threading.Thread(target=lambda: got.extend(
        parse_helper.parse_beside(str(repo), None, str(tmp_path / "ix"), work)), daemon=True)
    t.start()
    t.join(120)
    assert not t.is_alive(), "the build waits for a batch the dead helper held"
    beside = _by_path(got)
    assert killed == [parse_helper.BATCH]
    assert beside == {r.path: r for r in real(str(repo), None, work)}


def test_an_edit_of_a_few_dozen_files_with_the_helper_equals_a_clean_build(tmp_path, monkeypatch):
    n = 30
    assert HELPER_THRESHOLD <= n < POOL_THRESHOLD
    repo = make_repo(tmp_path / "r", _files(n))
    cfg = load_config(repo, env={}, jobs=2)
    build(cfg)
    used = []
    real = build_mod.parse_beside

    def spy(*a, **k):
        used.append(len(a[3]))
        yield from real(*a, **k)

    monkeypatch.setattr(build_mod, "parse_beside", spy)
    changed = _files(n, step=3)
    changed["pkg/base.py"] = "def helper(x):\n    return -x\n\n\ndef other():\n    return 0\n"
    write_files(repo, {p: t for p, t in changed.items() if p != "pkg/__init__.py"})
    stats = build(cfg)
    assert used == [n + 1]  # every module and base.py
    assert stats.files_parsed == n + 1
    clean = load_config(repo, env={}, jobs=1, index_dir=str(tmp_path / "clean"))
    build(clean, full=True)
    assert dump_graph(cfg) == dump_graph(clean)


def test_the_words_the_helper_counted_are_kept(tmp_path, slow_here):
    n = 24
    repo = make_repo(tmp_path / "r", _files(n))
    cfg = load_config(repo, env={}, jobs=2)
    build(cfg)
    assert sum(slow_here) < n  # the helper parsed some files
    conn = sqlite3.connect(cfg.index_path / token_counts.FILE)
    words = {w for (w,) in conn.execute("SELECT word FROM words WHERE word LIKE 'zqmark%'")}
    conn.close()
    assert words == {f"zqmark{i}xv" for i in range(n)}
