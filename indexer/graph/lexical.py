"""The lexical index's tables: FTS5 over chunks and over whole files, code's apart from
prose's, and writing the whole-file documents (the terms are `indexer.parse.terms`)."""

from __future__ import annotations

from indexer.parse.terms import file_document

# -- code and prose apart -----------------------------------------------------------------------
#
# Text formats (docs, configs: `indexer.parse.textfiles`) have their own FTS5 tables, ``<table>_text``:
# BM25 weighs a term by its rarity and a document by its length over the whole table, so a
# repository's prose in the code's table shifts how code is ranked for the same words (on the
# development issues, file@1 without vectors fell 6 points when sphinx's .rst docs joined).

TEXT_SUFFIX = "_text"
#: The lexical tables of chunks and of whole files: code's, then prose's.
CHUNK_TABLES = ("chunks_fts", "chunks_fts" + TEXT_SUFFIX)
FILE_TABLES = ("files_fts", "files_fts" + TEXT_SUFFIX)


def insert_into(table: str) -> str:
    """The head of an insert into lexical ``table``: its rowid and three columns, in the order
    every lexical row is kept (id, path, symbol or names, body)."""
    return f"INSERT INTO {table}(rowid, path, {'symbol' if table in CHUNK_TABLES else 'names'}, body)"


def fts_table(base: str, language: str | None) -> str:
    """The FTS5 table (``chunks_fts`` or ``files_fts``, or its ``_text`` twin) of a file in
    ``language``."""
    from indexer.parse.languages import is_text_format

    return base + TEXT_SUFFIX if language and is_text_format(language) else base


# -- whole files -------------------------------------------------------------------------------
#
# `files_fts` (rowid = files.id) holds every chunked file as one document: its path, the names
# it defines, and its text as `index_terms` sees it (docstrings and comments included). BM25 over
# whole files sees a file whose relevance is spread over many chunks at once, where a ranking of
# chunks would need each chunk to collect votes; the two are separate signals (retrieval/).


def index_files(conn, file_ids) -> None:
    """(Re)write the whole-file lexical documents of ``file_ids`` from their chunks and symbols
    in the database (a build writes those of the files it parses with their other rows); a
    file without chunks gets no document."""
    ids = list(file_ids)
    if not ids:
        return
    for table in FILE_TABLES:
        conn.executemany(f"DELETE FROM {table} WHERE rowid = ?", [(i,) for i in ids])
    rows: dict[str, list[tuple]] = {}
    for fid in ids:
        found = conn.execute("SELECT path, language FROM files WHERE id = ?", [fid]).fetchone()
        if found is None:
            continue
        bodies = conn.execute(
            f"SELECT t.body FROM chunks c JOIN {fts_table('chunks_fts', found[1])} t "
            "ON t.rowid = c.id WHERE c.file_id = ? ORDER BY c.start_line",
            [fid],
        ).fetchall()
        if not bodies:
            continue
        names = conn.execute(
            "SELECT name FROM symbols WHERE file_id = ? AND kind != 'module' ORDER BY id", [fid]
        ).fetchall()
        rows.setdefault(fts_table("files_fts", found[1]), []).append(
            (fid, *file_document(found[0], (n for (n,) in names), (b for (b,) in bodies)))
        )
    for table, docs in rows.items():
        conn.executemany(f"{insert_into(table)} VALUES (?,?,?,?)", docs)
