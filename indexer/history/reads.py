"""Reads of the git-history index (``<index>/history.db``, written by `indexer.history.store`): commit
messages by BM25, the files and definitions each commit changed, renames.

    reader = HistoryReader.open(index_dir)   # None: no history index (or an unusable one)
    try:
        rows = reader.similar('"crash" OR "empty"', (2.0, 1.0, 0.0), depth=50)
    finally:
        reader.close()

The ranking that uses them is `retrieval.history`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from indexer.history.store import DB_NAME, SCHEMA_VERSION

#: Porter stems of query words (the history index's tokenizer), shared by all readers.
_STEMS: dict[str, str] = {}


class CommitRow(NamedTuple):
    """A commit matched by `HistoryReader.similar`; ``bm25`` is FTS5's (lower is better)."""

    id: int
    sha: str
    author_time: int
    commit_time: int
    subject: str
    files: int  # files it touched
    parents: int
    bm25: float


class HistoryReader:
    """A read-only connection to the history store."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    @classmethod
    def open(cls, index_dir: Path | str | None) -> HistoryReader | None:
        """The history store of ``index_dir`` read-only, or None (no index dir, not built, not
        a git tree, damaged, another schema version, or a build that did not finish)."""
        if index_dir is None:
            return None
        path = Path(index_dir) / DB_NAME
        if not path.exists():
            return None
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta"))
        except sqlite3.DatabaseError:  # damaged: the next build replaces it; until then no votes
            conn.close()
            return None
        if meta.get("schema_version") != str(SCHEMA_VERSION) or meta.get("state") != "ok":
            conn.close()
            return None
        return cls(conn)

    def close(self) -> None:
        self.conn.close()

    # -- terms ----------------------------------------------------------------------------------

    def stems(self, words: list[str]) -> list[str]:
        """Each word as the commit index's tokenizer (porter, unicode61) stores it ("" for one
        it drops)."""
        todo = [w for w in words if w not in _STEMS]
        if todo:
            hconn = self.conn
            hconn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.hq USING fts5(x, tokenize = 'porter unicode61')")
            hconn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.hq_v USING fts5vocab(temp, hq, 'instance')")
            hconn.execute("DELETE FROM temp.hq")
            hconn.execute("INSERT INTO temp.hq(rowid, x) VALUES (1, ?)", [" ".join(todo)])
            found = dict.fromkeys(todo, "")
            for term, offset in hconn.execute("SELECT term, offset FROM temp.hq_v"):
                if 0 <= offset < len(todo):
                    found[todo[offset]] = term
            if len(_STEMS) > 100_000:
                _STEMS.clear()
            _STEMS.update(found)
        return [_STEMS[w] for w in words]

    def doc_counts(self, stems: Sequence[str]) -> dict[str, int]:
        """stem -> commit messages that have it, for those of ``stems`` some message has."""
        return dict(
            self.conn.execute(
                f"SELECT term, doc FROM vocab WHERE term IN ({','.join('?' * len(stems))})", list(stems)
            )
        )

    def commit_count(self) -> int:
        return self.conn.execute("SELECT count(*) FROM commits").fetchone()[0]

    def head_time(self) -> int:
        """Commit time of the indexed HEAD (0 if unknown)."""
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'head_time'").fetchone()
        return int(row[0]) if row else 0

    # -- commits --------------------------------------------------------------------------------

    def similar(
        self,
        match: str,
        weights: tuple[float, float, float],
        *,
        depth: int,
        which: str = "votes",
        huge: int = 0,
        window: int = 0,
    ) -> list[CommitRow]:
        """The ``depth`` commits whose messages best match the FTS5 expression ``match`` (BM25
        with column ``weights``: subject, body, paths), best first. ``which``: ``votes`` — those
        touching 1 to ``huge`` files and not merges; ``commits`` — not merges; ``all``.
        ``window`` > 0: only the newest ``window`` commits by commit time."""
        w = weights
        cond = {"votes": " AND c.files BETWEEN 1 AND ? AND c.parents <= 1",
                "commits": " AND c.parents <= 1"}.get(which, "")
        if window > 0:
            cond += (" AND c.commit_time >= coalesce((SELECT commit_time FROM commits "
                     f"ORDER BY commit_time DESC LIMIT 1 OFFSET {int(window) - 1}), 0)")
        return [
            CommitRow(*r)
            for r in self.conn.execute(
                f"SELECT c.id, c.sha, c.author_time, c.commit_time, c.subject, c.files, c.parents, "
                f"bm25(commits_fts, {w[0]}, {w[1]}, {w[2]}) AS s FROM commits_fts t "
                f"JOIN commits c ON c.id = t.rowid WHERE commits_fts MATCH ?{cond} ORDER BY s LIMIT ?",
                [match, *([huge] if which == "votes" else []), depth],
            ).fetchall()
        ]

    def changed_paths(self, commit_ids: Sequence[int]) -> list[tuple[int, str]]:
        """(commit id, path as the commit left it) of the files the commits touched, in the
        order they were stored."""
        return self.conn.execute(
            f"SELECT commit_id, path FROM changes WHERE commit_id IN ({','.join('?' * len(commit_ids))}) "
            "ORDER BY rowid",
            list(commit_ids),
        ).fetchall()

    def changed_definitions(self, commit_ids: Sequence[int]) -> list[tuple[int, str, str, str]]:
        """(commit id, path, name, enclosing name or "") of the definitions the commits changed."""
        return self.conn.execute(
            f"SELECT commit_id, path, name, parent FROM defs WHERE commit_id IN ({','.join('?' * len(commit_ids))})",
            list(commit_ids),
        ).fetchall()

    def renames_of(self, path: str) -> list[tuple[str, int]]:
        """(new path, commit time) of every rename of ``path``, oldest first."""
        return self.conn.execute(
            "SELECT ch.path, c.commit_time FROM changes ch JOIN commits c ON c.id = ch.commit_id "
            "WHERE ch.old_path = ? AND ch.status = 'R' ORDER BY c.commit_time", [path],
        ).fetchall()

    def commits_with_prefix(self, prefix: str) -> list[tuple[str, str]]:
        """(sha, subject) of at most two commits whose sha starts with ``prefix`` (lower-case hex)."""
        return self.conn.execute(
            "SELECT sha, subject FROM commits WHERE sha >= ? AND sha < ? LIMIT 2",
            [prefix, prefix + "g"],
        ).fetchall()
