"""FTS5 segments copied between files (`indexer.graph.fts_segments`): the copy answers every
query with the BM25 scores of a table that tokenized the same documents, passes FTS5's own
integrity check before and after `optimize`, and a connection that cached the table's
structure before the copy writes it correctly after."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from indexer.graph import fts_segments as fs
from indexer.graph import store

WORDS = ["parse", "json", "decoder", "socket", "connect", "timeout", "unicode", "error", "value", "stream", "buffer", "request", "header", "cookie", "token", "cache", "index", "query", "merge", "segment"]
QUERIES = ("json", "parse decoder", "socket OR timeout", '"cookie token"', "merg*", "error NOT value")


def _docs(n: int, seed: int) -> list[tuple[int, str, str, str]]:
    out = []
    for i in range(n):
        k = (i * 7919 + seed) % 104729
        body = " ".join(WORDS[(k + j * j) % len(WORDS)] for j in range(5 + k % 40))
        out.append((seed * 100_000 + i * 3 + 1, f"pkg/m{k % 17}.py", WORDS[k % len(WORDS)], body))
    return out


def _graph(tmp_path: Path, name: str) -> tuple[store.WriteDB, str]:
    db = store.open_for_write(tmp_path / name)
    sql = db.execute("SELECT sql FROM sqlite_master WHERE name = 'chunks_fts'").fetchone()[0]
    return db, sql


def _shard(path: Path, sql: str, docs: list[tuple]) -> None:
    conn = sqlite3.connect(path)
    conn.execute(sql)
    with conn:
        conn.executemany("INSERT INTO chunks_fts(rowid, path, symbol, body) VALUES (?,?,?,?)",
                         sorted(docs))
    conn.close()


def _answers(conn, query: str) -> list[tuple]:
    return conn.execute("SELECT rowid, round(bm25(chunks_fts), 9), path, symbol FROM chunks_fts "
                        "WHERE chunks_fts MATCH ? ORDER BY rank, rowid", [query]).fetchall()


def _check(conn) -> None:
    with conn:  # a command, run as a write: its transaction must end
        conn.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('integrity-check', 1)")


def _copy(db: store.WriteDB, path: Path) -> int:
    db.conn.execute("ATTACH DATABASE ? AS shard", [str(path)])
    with db.conn:
        n = fs.transfer(db.conn, "chunks_fts", "shard")
    db.conn.execute("DETACH DATABASE shard")
    return n


@pytest.fixture
def shards_and_reference(tmp_path):
    db, sql = _graph(tmp_path, "graph")
    parts = [_docs(400, s) for s in (1, 2, 3)]
    paths = []
    for k, docs in enumerate(parts):
        paths.append(tmp_path / f"s{k}.db")
        _shard(paths[-1], sql, docs)
    ref = sqlite3.connect(tmp_path / "reference.db")
    ref.execute(sql)
    with ref:
        ref.executemany("INSERT INTO chunks_fts(rowid, path, symbol, body) VALUES (?,?,?,?)",
                        sorted(d for docs in parts for d in docs))
    yield db, paths, ref
    db.conn.close()
    ref.close()


def test_copied_segments_answer_as_a_tokenized_table(shards_and_reference):
    db, paths, ref = shards_and_reference
    assert sum(_copy(db, p) for p in paths) >= len(paths)
    for stage in ("copied", "optimized"):
        _check(db.conn)
        answered = 0
        for query in QUERIES:
            want = _answers(ref, query)
            answered += bool(want)
            assert _answers(db.conn, query) == want, (stage, query)
        assert answered >= 4  # the queries find something to compare
        fs.optimize(str(db.file), ("chunks_fts",))
    segments = db.execute("SELECT count(DISTINCT segid) FROM chunks_fts_idx").fetchone()[0]
    assert segments == 1


def test_a_connection_that_cached_the_structure_writes_correctly_after(shards_and_reference):
    """The build's own connection may hold FTS5's cached structure from before the copies:
    after `optimize` on another connection it must read the new one, not write the old back."""
    db, paths, ref = shards_and_reference
    assert _answers(db.conn, "json") == []  # FTS5 reads (and caches) the empty structure
    for p in paths:
        _copy(db, p)
    fs.optimize(str(db.file), ("chunks_fts",))
    extra = [(9_999_999, "pkg/new.py", "json", "json decoder stream")]
    for conn in (db.conn, ref):
        with conn:
            conn.executemany("INSERT INTO chunks_fts(rowid, path, symbol, body) VALUES (?,?,?,?)", extra)
            conn.execute("DELETE FROM chunks_fts WHERE rowid = ?", [100_004])
    _check(db.conn)
    for query in QUERIES:
        assert _answers(db.conn, query) == _answers(ref, query), query


def test_a_single_copied_segment_is_seen_by_a_connection_that_cached_the_structure(tmp_path):
    """`optimize` of a table that already has one segment merges nothing: it must still commit,
    or the connection that cached the empty structure writes it back over the copy."""
    db, sql = _graph(tmp_path, "graph")
    docs = _docs(300, 4)
    _shard(tmp_path / "s.db", sql, docs)
    assert _answers(db.conn, "json") == []
    _copy(db, tmp_path / "s.db")
    fs.optimize(str(db.file), ("chunks_fts",))
    with db.conn:
        db.conn.execute("INSERT INTO chunks_fts(rowid, path, symbol, body) VALUES (?,?,?,?)",
                        (9_999_999, "pkg/new.py", "json", "json decoder stream"))
    _check(db.conn)
    found = {r[0] for r in db.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH 'json'")}
    assert 9_999_999 in found and found & {d[0] for d in docs}
    db.conn.close()


def test_a_copy_past_fts5s_segment_limit_is_refused(tmp_path, monkeypatch):
    """FTS5 reads a table of more than 2000 segments as corrupt: a copy that would pass the
    limit raises instead (the load merges its copies long before: `sharded.SEGMENT_BUDGET`)."""
    db, sql = _graph(tmp_path, "graph")
    monkeypatch.setattr(fs, "MAX_SEGMENTS", 2)
    for k in range(3):
        _shard(tmp_path / f"s{k}.db", sql, _docs(50, 10 + k))
    _copy(db, tmp_path / "s0.db")
    _copy(db, tmp_path / "s1.db")
    with pytest.raises(fs.FormatError, match="segments"):
        _copy(db, tmp_path / "s2.db")
    _check(db.conn)  # the refused copy left nothing half-done
    db.conn.close()


def test_a_table_with_documents_of_its_own_keeps_them(tmp_path):
    db, sql = _graph(tmp_path, "graph")
    own, more = _docs(300, 7), _docs(300, 8)
    with db.conn:
        db.conn.executemany("INSERT INTO chunks_fts(rowid, path, symbol, body) VALUES (?,?,?,?)", own)
    _shard(tmp_path / "s.db", sql, more)
    _copy(db, tmp_path / "s.db")
    _check(db.conn)
    found = {r[0] for r in db.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH 'json'")}
    assert found & {d[0] for d in own} and found & {d[0] for d in more}
    db.conn.close()


def test_the_records_read_back_as_written():
    for value in (0, 1, 127, 128, 16_383, 16_384, 2**35, 2**56 - 1):
        data = fs._put(value)
        assert fs._varint(data, 0) == (value, len(data))
    levels = [(0, [(1, 1, 300), (4, 1, 2)]), (3, [(2, 1, 90_000)])]
    data = fs.write_structure(5, 90_302, levels)
    assert fs.read_structure(data) == (5, 90_302, levels)
    with pytest.raises(fs.FormatError):
        fs.read_structure(data[:-1])
    with pytest.raises(fs.FormatError):
        fs.read_structure(data + b"\x00")
    # SQLite 3.43+ writes a second layout for contentless-delete and secure-delete tables: a
    # marker after the cookie, and more fields per segment. It must not read as the first.
    v2 = data[:4] + b"\xff\x00\x00\x01" + data[4:]
    with pytest.raises(fs.FormatError):
        fs.read_structure(v2)


def test_this_sqlite_is_supported_and_another_layout_is_not(tmp_path):
    _, sql = _graph(tmp_path, "graph")
    assert fs.supported(sql)
    # contentless-delete tables write a second layout of the structure (and tombstones)
    other = ("CREATE VIRTUAL TABLE t USING fts5(a, content='', contentless_delete=1)")
    assert not fs.supported(other)  # before SQLite 3.43 the table cannot even be made
    assert not fs.supported("CREATE VIRTUAL TABLE t USING fts4(a)")
