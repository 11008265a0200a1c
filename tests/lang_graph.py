"""The graph a test builds from a handful of files, and the resolved target of one reference in
it: what the per-language tests (tests/test_lang_*.py) ask of a real index build."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest

from indexer.graph import store
from tests.conftest import index, make_repo, write_files

_RESOLVED = (
    "SELECT t.qualname, r.resolution FROM refs r JOIN files f ON f.id = r.file_id "
    "LEFT JOIN symbols t ON t.id = r.target_id "
    "WHERE f.path = ? AND r.line = ? AND r.name = ? AND r.kind = ?"
)


def graph_of(
    tmp_path_factory: pytest.TempPathFactory, name: str, files: dict[str, str], *, git: bool = True
) -> Iterator[sqlite3.Connection]:
    """Index ``files`` (path -> text) in a fresh folder named after ``name`` and yield a read
    connection to the graph, closed afterwards; for a fixture: ``yield from graph_of(...)``.
    With ``git=False`` the files are only written, not committed: the indexer walks the tree."""
    root = tmp_path_factory.mktemp(name) / "repo"
    if git:
        make_repo(root, files)
    else:
        write_files(root, files)
    conn = store.open_for_read(index(root).index_path).conn
    try:
        yield conn
    finally:
        conn.close()


def resolved(
    conn: sqlite3.Connection, path: str, line: int, name: str, kind: str
) -> tuple[str | None, str]:
    """(target qualname or None, resolution) of the ``kind`` reference to ``name`` at
    ``path:line``; fails the test, saying which, when there is no such reference."""
    row = conn.execute(_RESOLVED, [path, line, name, kind]).fetchone()
    assert row is not None, f"no {kind} reference {name} at {path}:{line}"
    return tuple(row)
