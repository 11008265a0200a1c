"""FTS5 indexes moved between files as they are: the segments a shard's worker tokenized,
copied into the graph's lexical tables without tokenizing anything again.

Tokenizing is most of what a merge of lexical rows costs (the stdlib: ~2 s of the driver's
~3 s), and FTS5 has no statement that copies an index from another file. But an FTS5 table is
plain tables underneath (https://sqlite.org/fts5.html, "Shadow tables"): ``<t>_data`` holds
the index's pages under rowids that carry their segment's id in bits 37 and up (a segment's
pages are one rowid range), ``<t>_idx`` its page index by segment id, ``<t>_content`` and
``<t>_docsize`` one row per document, and two records of ``<t>_data`` say what there is: the
structure (rowid 10: the segments of each level, their first and last pages) and the averages
(rowid 1: documents and tokens per column, which BM25 weighs by). So a shard's segments are
copied under segment ids the graph does not use, their documents with them, and the two
records rewritten to add them. Documents never share a rowid between shards (chunk and file
ids are the graph's), so no segment hides another's rows. The copy is one transaction with the
rest of the shard's rows; the table is then one FTS5 `optimize` away from what a build that
tokenized it would have (the same BM25 scores, tested row for row), and `optimize` merges
without tokenizing (~4x cheaper).

This reads FTS5's file format, which SQLite keeps stable (an index written by any 3.x reads in
every later one) but does not document record by record. So a build first checks
(`supported`) that this SQLite writes the records the way they are read here — a table made in
memory, its records read and written back byte for byte — and tokenizes at the merge, as
before, when it does not. Nothing here runs outside a sharded load.
"""

from __future__ import annotations

import sqlite3

#: `<t>_data` rowids of the averages and structure records.
AVERAGES, STRUCTURE = 1, 10
#: A segment's pages have rowids in [id << SEGMENT_SHIFT, (id + 1) << SEGMENT_SHIFT):
#: 31 bits of page number, 5 of height, 1 for doclist-index pages.
SEGMENT_SHIFT = 37
#: Segment ids are 16 bits; 0 is never used.
MAX_SEGMENT_ID = 65535
#: FTS5 holds at most 2000 segments in a table (`FTS5_MAX_SEGMENT`): past that it writes no new
#: one and reads the table as corrupt. A load merges its copies (`optimize`) well before.
MAX_SEGMENTS = 2000


class FormatError(ValueError):
    """A record not laid out as this module reads it."""


def _varint(data: bytes, i: int) -> tuple[int, int]:
    """SQLite's varint at ``data[i]``: (value, next offset)."""
    value = 0
    for k in range(9):
        if i >= len(data):
            raise FormatError("truncated varint")
        byte = data[i]
        i += 1
        if k == 8:
            return (value << 8) | byte, i
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value, i
    raise FormatError("varint too long")  # pragma: no cover - the loop returns by k == 8


def _put(value: int) -> bytes:
    """SQLite's varint of ``value`` (below 2**56: 8 bytes at most, all these records need)."""
    if not 0 <= value < 1 << 56:
        raise FormatError(f"varint out of range: {value}")
    out = [value & 0x7F]
    value >>= 7
    while value:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    return bytes(reversed(out))


Segment = tuple[int, int, int]  # (segment id, first page, last page)


def read_structure(data: bytes) -> tuple[int, int, list[tuple[int, list[Segment]]]]:
    """(cookie, leaves written, [(merge progress, segments)] per level) of a structure record."""
    if len(data) < 4:
        raise FormatError("structure record too short")
    cookie, i = int.from_bytes(data[:4], "big"), 4
    levels_n, i = _varint(data, i)
    segments_n, i = _varint(data, i)
    written, i = _varint(data, i)
    levels = []
    for _ in range(levels_n):
        merge, i = _varint(data, i)
        count, i = _varint(data, i)
        segs = []
        for _ in range(count):
            sid, i = _varint(data, i)
            first, i = _varint(data, i)
            last, i = _varint(data, i)
            segs.append((sid, first, last))
        levels.append((merge, segs))
    if i != len(data) or segments_n != sum(len(s) for _, s in levels):
        raise FormatError("structure record not as expected")
    return cookie, written, levels


def write_structure(cookie: int, written: int, levels: list[tuple[int, list[Segment]]]) -> bytes:
    out = bytearray((cookie & 0xFFFFFFFF).to_bytes(4, "big"))
    out += _put(len(levels)) + _put(sum(len(s) for _, s in levels)) + _put(written)
    for merge, segs in levels:
        out += _put(merge) + _put(len(segs))
        for sid, first, last in segs:
            out += _put(sid) + _put(first) + _put(last)
    return bytes(out)


def read_averages(data: bytes) -> list[int]:
    """[documents, tokens of column 0, of column 1, …] of an averages record (empty: none yet)."""
    out, i = [], 0
    while i < len(data):
        value, i = _varint(data, i)
        out.append(value)
    return out


def supported(create_sql: str) -> bool:
    """Whether this SQLite's FTS5 writes its records as this module reads them: a table made by
    ``create_sql`` in memory, with two documents, must give records that read and write back
    byte for byte, and one segment."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute(create_sql)
        table = _table_name(conn)
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        marks = ",".join("?" * len(cols))
        conn.executemany(f"INSERT INTO {table}(rowid, {', '.join(cols)}) VALUES (?, {marks})",
                         [(7, *["alpha beta"] * len(cols)), (9, *["beta gamma"] * len(cols))])
        conn.commit()
        structure = _record(conn, table, STRUCTURE, "main")
        cookie, written, levels = read_structure(structure)
        averages = _record(conn, table, AVERAGES, "main")
        return (write_structure(cookie, written, levels) == structure
                and sum(len(s) for _, s in levels) == 1
                and read_averages(averages)[:1] == [2]
                and b"".join(_put(v) for v in read_averages(averages)) == averages)
    except (sqlite3.Error, FormatError):
        return False
    finally:
        conn.close()


def _table_name(conn: sqlite3.Connection) -> str:
    return conn.execute("SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE%'"
                        ).fetchone()[0]


def _record(conn: sqlite3.Connection, table: str, rowid: int, schema: str) -> bytes:
    row = conn.execute(f"SELECT block FROM {schema}.{table}_data WHERE id = ?", [rowid]).fetchone()
    return bytes(row[0]) if row is not None and row[0] is not None else b""


def transfer(conn: sqlite3.Connection, table: str, source: str) -> int:
    """Copy the FTS5 index of ``source``.``table`` (an attached shard) into ``table`` of the
    main database, inside the caller's transaction; returns the segments the table holds now.

    The caller's connection must not use the table through FTS5 (a query, an insert) from
    before the first copy until `optimize` has run on another connection: FTS5 caches the
    structure record per connection and would read or write back the one it cached."""
    main_cookie, main_written, levels = read_structure(_record(conn, table, STRUCTURE, "main"))
    _, written, theirs = read_structure(_record(conn, table, STRUCTURE, source))
    used = {sid for _, segs in levels for sid, _, _ in segs}
    free = (sid for sid in range(1, MAX_SEGMENT_ID + 1) if sid not in used)
    added: list[Segment] = []
    for _, segs in theirs:
        for sid, first, last in segs:
            new = next(free, None)
            if new is None:
                raise FormatError(f"{table}: no free segment id (optimize it first)")
            conn.execute(f"INSERT INTO main.{table}_data(id, block) SELECT id + ?, block FROM "
                         f"{source}.{table}_data WHERE id >= ? AND id < ?",
                         [(new - sid) << SEGMENT_SHIFT, sid << SEGMENT_SHIFT,
                          (sid + 1) << SEGMENT_SHIFT])
            conn.execute(f"INSERT INTO main.{table}_idx(segid, term, pgno) SELECT ?, term, pgno "
                         f"FROM {source}.{table}_idx WHERE segid = ?", [new, sid])
            added.append((new, first, last))
    if not added:
        return len(used)
    if len(used) + len(added) > MAX_SEGMENTS:
        raise FormatError(f"{table}: {len(used) + len(added)} segments, FTS5 holds {MAX_SEGMENTS}")
    conn.execute(f"INSERT INTO main.{table}_content SELECT * FROM {source}.{table}_content")
    conn.execute(f"INSERT INTO main.{table}_docsize SELECT * FROM {source}.{table}_docsize")
    ours = read_averages(_record(conn, table, AVERAGES, "main"))
    more = read_averages(_record(conn, table, AVERAGES, source))
    ours = ours or [0] * len(more)
    if len(ours) != len(more):
        raise FormatError(f"{table}: averages of {len(ours)} and {len(more)} values")
    totals = b"".join(_put(a + b) for a, b in zip(ours, more, strict=True))
    if not levels:
        levels = [(0, [])]
    levels[0] = (levels[0][0], levels[0][1] + added)
    # The first 4 bytes are FTS5's configuration cookie, kept as they are: nothing of the
    # configuration changed.
    conn.execute(f"INSERT OR REPLACE INTO main.{table}_data(id, block) VALUES (?, ?), (?, ?)",
                 [AVERAGES, totals, STRUCTURE,
                  write_structure(main_cookie, main_written + written, levels)])
    return len(used) + len(added)


def optimize(path: str, tables: tuple[str, ...]) -> None:
    """Merge each table's segments into one, on a connection of its own: FTS5 objects of other
    connections see the file changed (`PRAGMA data_version`) and read the new structure
    instead of one they may have cached before the copies."""
    from indexer.graph.connection import connect

    db = connect(path)
    try:
        with db.conn:
            for table in tables:
                db.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")
            # A commit even when every table already had one segment (`optimize` then writes
            # nothing): other connections learn of the copies only from a change of the file.
            db.execute(f"INSERT OR REPLACE INTO {tables[0]}_data(id, block) "
                       f"SELECT id, block FROM {tables[0]}_data WHERE id = ?", [STRUCTURE])
    finally:
        db.conn.close()
