"""Hybrid search: lexical (FTS5/BM25), semantic (vectors) and exact-symbol hits fused with
reciprocal rank fusion, deduplicated by chunk, filtered by language and path glob."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from indexer.lexical import fts_match, query_terms

from .freshness import stale_paths

MODES = ("hybrid", "semantic", "lexical")
#: RRF constant and per-source weights (see benchmarks/localization.py for how they were set).
RRF_K = 60
WEIGHTS = {"lexical": 1.0, "semantic": 1.0, "symbol": 1.5}
#: Candidates taken from each source before fusion.
DEPTH = 50
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True, slots=True)
class SearchHit:
    chunk_id: int
    path: str
    start_line: int
    end_line: int
    symbol: str
    language: str
    score: float
    scores: dict[str, float] = field(default_factory=dict)  # source -> its own score
    ranks: dict[str, int] = field(default_factory=dict)  # source -> 1-based rank
    snippet: str = ""
    stale: bool = False  # the file changed on disk since it was indexed


@dataclass(frozen=True, slots=True)
class SearchResult:
    query: str
    mode: str
    hits: tuple[SearchHit, ...]
    semantic_coverage: float  # share of chunks with a vector when the search ran
    generation: int


@dataclass(frozen=True, slots=True)
class _Cand:
    chunk_id: int
    score: float


#: Paths of tests (as in the localization README): excluded from results on request.
TEST_GLOBS = (
    "test/*",
    "tests/*",
    "testing/*",
    "*/test/*",
    "*/tests/*",
    "*/testing/*",
    "test_*.py",
    "*/test_*.py",
    "*_test.py",
    "conftest.py",
    "*/conftest.py",
)


def is_test_path(path: str) -> bool:
    import fnmatch

    return any(fnmatch.fnmatchcase(path, g) for g in TEST_GLOBS)


def _filters(
    lang: str | None, path_glob: str | None, exclude_tests: bool = False
) -> tuple[str, list]:
    sql, params = "", []
    if exclude_tests:
        sql += "".join(" AND f.path NOT GLOB ?" for _ in TEST_GLOBS)
        params.extend(TEST_GLOBS)
    if lang:
        sql += " AND f.language = ?"
        params.append(lang)
    if path_glob:
        sql += " AND f.path GLOB ?"
        params.append(
            path_glob if any(ch in path_glob for ch in "*?[") else path_glob.rstrip("/") + "*"
        )
    return sql, params


def lexical(
    conn: sqlite3.Connection,
    query: str,
    k: int = DEPTH,
    *,
    lang=None,
    path_glob=None,
    exclude_tests: bool = False,
) -> list[_Cand]:
    terms = query_terms(query)
    if not terms:
        return []
    fsql, fparams = _filters(lang, path_glob, exclude_tests)
    rows = conn.execute(
        "SELECT t.rowid, bm25(chunks_fts, 2.0, 4.0, 1.0) AS s FROM chunks_fts t "
        "JOIN chunks c ON c.id = t.rowid JOIN files f ON f.id = c.file_id "
        f"WHERE chunks_fts MATCH ?{fsql} ORDER BY s LIMIT ?",
        [fts_match(terms), *fparams, k],
    ).fetchall()
    return [_Cand(cid, -s) for cid, s in rows]  # bm25() is lower-is-better


#: A name defined in more places than this says little about where to look.
MAX_SYMBOL_DEFS = 3


def symbol_hits(
    conn: sqlite3.Connection,
    query: str,
    k: int = DEPTH,
    *,
    lang=None,
    path_glob=None,
    exclude_tests: bool = False,
) -> list[_Cand]:
    """Chunks holding definitions whose name or qualified-name suffix appears in the query
    as an identifier (issue texts often name the code they are about). Rare names rank first;
    names defined in many places (``run``, ``get``) are dropped unless qualified."""
    idents = dict.fromkeys(m for m in _IDENT.findall(query) if len(m) > 2)
    wanted = [i for i in idents if "_" in i or "." in i or any(c.isupper() for c in i[1:])]
    if not wanted:
        return []
    fsql, fparams = _filters(lang, path_glob, exclude_tests)
    scored: dict[int, float] = {}
    for ident in wanted:
        last = ident.rsplit(".", 1)[-1]
        rows = conn.execute(
            "SELECT c.id, s.qualname FROM symbols s JOIN files f ON f.id = s.file_id "
            "JOIN chunks c ON c.file_id = s.file_id AND c.start_line <= s.start_line "
            "AND c.end_line >= s.start_line "
            f"WHERE s.name = ? AND s.kind != 'module'{fsql} LIMIT ?",
            [last, *fparams, 50],
        ).fetchall()
        if "." in ident:
            rows = [r for r in rows if r[1] == ident or r[1].endswith("." + ident)]
        elif len({q for _, q in rows}) > MAX_SYMBOL_DEFS:
            continue
        for cid, _ in rows:
            scored[cid] = max(scored.get(cid, 0.0), 1.0 / len(rows))
    return [_Cand(cid, sc) for cid, sc in sorted(scored.items(), key=lambda kv: -kv[1])][:k]


def rrf(
    ranked: dict[str, list[_Cand]], weights: dict[str, float] | None = None
) -> list[tuple[int, float]]:
    weights = weights or WEIGHTS
    fused: dict[int, float] = {}
    for source, cands in ranked.items():
        w = weights.get(source, 1.0)
        for rank, c in enumerate(cands, 1):
            fused[c.chunk_id] = fused.get(c.chunk_id, 0.0) + w / (RRF_K + rank)
    return sorted(fused.items(), key=lambda kv: -kv[1])


class Searcher:
    """Search over one index. The embedder (and its ~seconds of import) is loaded on the
    first semantic query only, then reused."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        index_dir: Path,
        root: Path,
        embedder=None,
        vectors_uri: str | None = None,
        storage_options: dict | None = None,
    ) -> None:
        self.conn = conn
        self.index_dir = index_dir
        self.root = root
        self._embedder = embedder
        self._vectors = None
        self._vectors_uri = vectors_uri  # None: where the index says (see _vector_store)
        self._storage_options = storage_options

    @classmethod
    def from_config(cls, conn: sqlite3.Connection, config, embedder=None) -> Searcher:
        """A searcher for ``config``'s index, with its vectors location and storage options."""
        from indexer.storage import storage_options

        return cls(conn, config.index_path, config.root, embedder=embedder,
                   vectors_uri=config.vectors_uri, storage_options=storage_options(config))

    def _meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
        return row[0] if row else None

    def semantic_coverage(self) -> float:
        done, total = self.conn.execute(
            "SELECT coalesce(sum(embedded = 1), 0), count(*) FROM chunks"
        ).fetchone()
        return done / total if total else 0.0

    def _vector_store(self):
        if self._vectors is None:
            model, dim = self._meta("embed_model"), self._meta("embed_dim")
            if not model:
                return None
            from indexer.storage import locate_vectors
            from indexer.vectors import VectorStore

            uri = locate_vectors(self._vectors_uri, self._meta("vectors_uri"), self.index_dir)
            self._vectors = VectorStore.open(uri, int(dim), model, self._storage_options)
        return self._vectors

    def embedder(self):
        if self._embedder is None:
            from indexer.embed import create_embedder

            self._embedder = create_embedder(self._meta("embed_model") or "all-MiniLM-L6-v2")
        return self._embedder

    def semantic(
        self, query: str, k: int = DEPTH, *, lang=None, path_glob=None, exclude_tests: bool = False
    ) -> list[_Cand]:
        vs = self._vector_store()
        if vs is None:
            return []
        vec = self.embedder().embed([query])[0]
        hits = vs.search(vec, k=k * 2 if exclude_tests else k, language=lang, path_glob=path_glob)
        if exclude_tests:
            hits = [h for h in hits if not is_test_path(h.path)]
        return [_Cand(int(h.chunk_id), h.score) for h in hits[:k]]

    def search(
        self,
        query: str,
        mode: str = "hybrid",
        k: int = 10,
        *,
        lang: str | None = None,
        path_glob: str | None = None,
        weights: dict[str, float] | None = None,
        exclude_tests: bool = False,
        depth: int | None = None,
    ) -> SearchResult:
        """Top ``k`` chunks for ``query``; each source contributes ``depth`` candidates."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        depth = max(depth or DEPTH, k)
        opts = {"lang": lang, "path_glob": path_glob, "exclude_tests": exclude_tests}
        ranked: dict[str, list[_Cand]] = {}
        if mode in ("hybrid", "lexical"):
            ranked["lexical"] = lexical(self.conn, query, depth, **opts)
        if mode in ("hybrid", "semantic"):
            ranked["semantic"] = self.semantic(query, depth, **opts)
        if mode == "hybrid":
            ranked["symbol"] = symbol_hits(self.conn, query, depth, **opts)
        fused = rrf(ranked, weights)[:k]
        per_source = {
            src: {c.chunk_id: (rank, c.score) for rank, c in enumerate(cands, 1)}
            for src, cands in ranked.items()
        }
        hits = self._hydrate(fused, per_source)
        gen = int(self._meta("generation") or 0)
        return SearchResult(query, mode, tuple(hits), self.semantic_coverage(), gen)

    def _hydrate(self, fused: Sequence[tuple[int, float]], per_source: dict) -> list[SearchHit]:
        if not fused:
            return []
        ids = [cid for cid, _ in fused]
        rows = {
            r[0]: r[1:]
            for r in self.conn.execute(
                "SELECT c.id, f.path, c.start_line, c.end_line, c.symbol, f.language FROM chunks c "
                f"JOIN files f ON f.id = c.file_id WHERE c.id IN ({','.join('?' * len(ids))})",
                ids,
            )
        }
        out = []
        stale = stale_paths(self.conn, (r[0] for r in rows.values()), str(self.root))
        for cid, score in fused:
            if cid not in rows:
                continue
            path, s, e, sym, lang = rows[cid]
            out.append(
                SearchHit(
                    chunk_id=cid,
                    path=path,
                    start_line=s,
                    end_line=e,
                    symbol=sym,
                    language=lang or "",
                    score=round(score, 6),
                    scores={src: round(v[cid][1], 6) for src, v in per_source.items() if cid in v},
                    ranks={src: v[cid][0] for src, v in per_source.items() if cid in v},
                    snippet=snippet(self.root / path, s, e),
                    stale=path in stale,
                )
            )
        return out


def rank_files(hits: Sequence[SearchHit], per_file: int = 3) -> list[tuple[str, float]]:
    """Files ranked by the summed scores of their best ``per_file`` hits: a file with several
    strong chunks outranks one with a single lucky chunk (whole-file BM25 behaves the same)."""
    by_file: dict[str, list[float]] = {}
    for h in hits:
        by_file.setdefault(h.path, []).append(h.score)
    agg = {p: sum(sorted(v, reverse=True)[:per_file]) for p, v in by_file.items()}
    return sorted(agg.items(), key=lambda kv: -kv[1])


def snippet(path: Path, start: int, end: int, max_lines: int = 8) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()[start - 1 : min(end, start - 1 + max_lines)]
    except OSError:
        return ""
    return "\n".join(lines)
