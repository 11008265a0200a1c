"""The word-count cache beside the index (`indexer.vectors.token_counts`): the chunks it sizes are the
tokenizer's own, a build that knows every word of its files never loads the tokenizer, and a
stale or damaged cache only costs the tokenizer load."""

from __future__ import annotations

import sqlite3

import pytest

from indexer.parse import worker as parse_worker
from indexer.vectors import token_counts
from tests.conftest import index, make_repo

FILES = {
    "pkg/__init__.py": "",
    "pkg/shapes.py": (
        '"""Shapes and their areas."""\n\n'
        "class Square:\n"
        "    def __init__(self, side: float) -> None:\n"
        "        self.side = side\n\n"
        "    def area(self) -> float:\n"
        "        return self.side ** 2  # the área, naïvely\n"
    ),
    "pkg/main.py": "from .shapes import Square\n\n\ndef total(xs):\n    return sum(Square(x).area() for x in xs)\n",
    "README.md": "# Shapes\n\nCompute the area of squares.\n",
}


def chunks(cfg) -> list[tuple]:
    conn = sqlite3.connect(cfg.index_path / "graph.db")
    try:
        return conn.execute(
            "SELECT f.path, c.start_line, c.end_line, c.symbol, c.kind, c.tokens, c.header, "
            "c.content_hash FROM chunks c JOIN files f ON f.id = c.file_id ORDER BY 1, 2"
        ).fetchall()
    finally:
        conn.close()


def _no_tokenizer(model):
    raise AssertionError(f"the tokenizer of {model} was loaded")


def test_cached_counts_equal_the_tokenizers_and_spare_its_load(tmp_path, monkeypatch):
    plain = make_repo(tmp_path / "plain", FILES)
    monkeypatch.setattr(token_counts, "open_counter", lambda *a: None)
    expected = chunks(index(plain))
    monkeypatch.undo()

    repo = make_repo(tmp_path / "cached", FILES)
    cfg = index(repo)  # fills the cache
    assert (cfg.index_path / token_counts.FILE).exists()
    assert chunks(cfg) == expected

    # Every word is known now: a full rebuild never needs the tokenizer, and counts the same.
    monkeypatch.setattr(parse_worker, "_tokenizer", _no_tokenizer)
    assert chunks(index(repo, full=True)) == expected

    # A new word does load it, and is counted like the tokenizer counts it.
    monkeypatch.undo()
    (repo / "pkg/main.py").write_text(FILES["pkg/main.py"] + "\n\ndef zygomorphic(): pass\n")
    (plain / "pkg/main.py").write_text(FILES["pkg/main.py"] + "\n\ndef zygomorphic(): pass\n")
    monkeypatch.setattr(token_counts, "open_counter", lambda *a: None)
    expected = chunks(index(plain))
    monkeypatch.undo()
    assert chunks(index(repo)) == expected


@pytest.mark.parametrize("damage", ["garbage", "stale_key"])
def test_a_damaged_or_stale_cache_costs_only_the_tokenizer_load(tmp_path, damage):
    repo = make_repo(tmp_path / "r", FILES)
    cfg = index(repo)
    expected = chunks(cfg)
    path = cfg.index_path / token_counts.FILE
    if damage == "garbage":
        path.write_bytes(b"not a database" * 100)
    else:  # another tokenizer's counts, all wrong: they must not be used
        conn = sqlite3.connect(path)
        with conn:
            conn.execute("UPDATE words SET n = n + 7")
            conn.execute("UPDATE meta SET value = 'another tokenizer' WHERE key = 'key'")
        conn.close()
    assert chunks(index(repo, full=True)) == expected
    assert chunks(index(repo, full=True)) == expected  # and the cache works again


def test_a_pool_build_keeps_its_workers_counts(tmp_path, monkeypatch):
    from indexer.build import build
    from indexer.config import load_config
    from indexer.phases.parsing import POOL_THRESHOLD

    files = {f"m{i}.py": f"def f{i}(x):\n    return x * {i}  # step {i}\n" for i in range(POOL_THRESHOLD)}
    repo = make_repo(tmp_path / "r", files)
    cfg = load_config(repo, env={}, jobs=2)
    build(cfg)  # parsed by two worker processes
    conn = sqlite3.connect(cfg.index_path / token_counts.FILE)
    assert conn.execute("SELECT count(*) FROM words").fetchone()[0] > 0
    conn.close()
    # Their words are known: a one-file edit (parsed here) does not load the tokenizer.
    monkeypatch.setattr(parse_worker, "_tokenizer", _no_tokenizer)
    (repo / "m1.py").write_text("def f1(x):\n    return x * 2  # step 2\n")
    expected = chunks(cfg)
    build(cfg)
    after = chunks(cfg)
    assert [c for c in after if c[0] != "m1.py"] == [c for c in expected if c[0] != "m1.py"]
    assert [c[5] for c in after if c[0] == "m1.py"] == [c[5] for c in expected if c[0] == "m1.py"]
