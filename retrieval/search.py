"""Search over one index: ``hybrid`` ranks chunks through every signal and the fitted fusion
(`retrieval.pipeline`, `retrieval.fusion`); ``lexical`` (FTS5/BM25 over chunks) and ``semantic``
(vectors) are one signal each. Results are filtered by language, path glob and test files."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from indexer import (
    DEFAULT_EMBED_MODEL,
    KINDS,
    ModelMismatchError,
    VectorsMissingError,
    VectorTableDamagedError,
    denied_by_default,
    is_test_path,
    kind_of,
    languages_of_kind,
    read_regular,
)

if TYPE_CHECKING:
    from indexer import Index, VectorReader

MODES = ("hybrid", "semantic", "lexical")
#: Candidates taken from each signal before fusion.
DEPTH = 50


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
    kind: str = ""  # code | docs | config: what the file is for (see indexer.parse.languages.KINDS)


@dataclass(frozen=True, slots=True)
class SearchResult:
    query: str
    mode: str
    hits: tuple[SearchHit, ...]
    semantic_coverage: float  # share of chunks with a vector when the search ran
    generation: int
    #: What the caller must know about these results: semantic search skipped (no vectors)
    #: or based on vectors that lag behind the chunks. Empty when all sources ran in full.
    warnings: tuple[str, ...] = ()
    #: The vector table is damaged: the semantic signal was left out (see ``warnings``).
    vectors_damaged: bool = False


@dataclass(frozen=True, slots=True)
class _Cand:
    chunk_id: int
    score: float


class Searcher:
    """Search over one index. The embedder (and its ~seconds of import) is loaded on the
    first semantic query only, then reused."""

    def __init__(self, index: Index, embedder=None) -> None:
        self.index = index
        self.root = index.root
        self._embedder = embedder
        self._vectors: VectorReader | None = None
        self._unavailable: str | None = None  # why there is no vector table (see _vector_store)
        self._qvecs: dict[str, object] = {}  # query text -> vector (see query_vector)
        #: Why the vector table could not be read, when this searcher met damage (its open or
        #: a read); the semantic signal answers nothing then, and searches say so.
        self.vectors_damaged: str | None = None

    def _meta(self, key: str) -> str | None:
        return self.index.graph.meta_value(key)

    def semantic_coverage(self) -> float:
        """Share of chunks with a vector. The chunk count is read once per generation (a scan
        of the chunks); the chunks still to embed come from their partial index."""
        if not self._meta("embed_model"):  # never embedded: nothing to count
            return 0.0
        gen = self._meta("generation")
        if getattr(self, "_total", (None, 0))[0] != gen:
            self._total = (gen, self.index.graph.chunk_count())
        total = self._total[1]
        if not total:
            return 0.0
        pending = self.index.graph.chunks_to_embed()
        return (total - pending) / total

    def _vector_store(self):
        """The vector table, or None (``_unavailable`` says why). Never creates one: a reader
        must not write, and an empty table would hide that the vectors are gone. Looked for
        again on every call until found, so a long-lived searcher sees a later build's."""
        if self._vectors is None:
            if not self._meta("embed_model"):
                self._unavailable = "this index has no vectors (it was built with `--no-embed`)"
                return None
            uri = self.index.vectors_uri()  # configured, else recorded, else beside the graph
            try:
                self._vectors = self.index.open_vectors()
            except VectorTableDamagedError as exc:
                return self._damaged(exc)
            except ModelMismatchError as exc:  # the graph says one model, the table another
                return self._damaged(VectorTableDamagedError(uri, str(exc).split(" — ")[0]))
            self._unavailable = None if self._vectors else f"the vector table at {uri} is missing"
            self.vectors_damaged = None  # readable again (repaired): met damage says so anew
        return self._vectors

    def _damaged(self, exc: VectorTableDamagedError) -> None:
        """Note damage met opening or reading the vector table: semantic search is off until a
        later call finds the table readable again (a repair while this searcher lives)."""
        self._vectors = None
        self.vectors_damaged = self._unavailable = (
            f"the vector table at {exc.where} is damaged ({exc.reason})"
        )
        return None

    def vectors_unavailable(self) -> str | None:
        """Why semantic search cannot run on this index (no vectors were embedded, or the
        vector table is gone), or None when it can. ``semantic()`` returns nothing then."""
        self._vector_store()
        return self._unavailable

    def vector_warnings(self) -> list[str]:
        """How far the vectors lag behind the chunks: chunks not embedded yet, or chunks
        marked embedded whose vector the table lacks."""
        vs = self._vector_store()
        if vs is None:
            return []
        try:
            rows = vs.count()
        except VectorTableDamagedError as exc:
            self._damaged(exc)
            return []
        done, total = self.index.graph.vector_coverage()
        out = []
        if done < total:
            pct = int(1000 * done / total) / 10  # floor: 99.96% is not "100.0%"
            out.append(
                f"Vectors cover {pct}% of {total} chunks, so semantic results miss the "
                "rest — `repoctx index build` embeds them."
            )
        if rows < done:
            out.append(
                f"The vector table holds {rows} vectors for {done} embedded chunks — "
                "run `repoctx index verify --repair` to embed the missing ones."
            )
        return out

    def query_vector(self, query: str):
        """``query`` embedded, once per searcher for the last few texts (the first and second
        stage of one search ask for the same one)."""
        cache = self._qvecs
        vec = cache.get(query)
        if vec is None:
            vec = self.embedder().embed([query])[0]
            if len(cache) >= 8:
                cache.pop(next(iter(cache)))
            cache[query] = vec
        return vec

    def embedder(self):
        if self._embedder is None:
            from indexer import create_embedder

            self._embedder = create_embedder(self._meta("embed_model") or DEFAULT_EMBED_MODEL)
        return self._embedder

    def _known_chunks(self, chunk_ids) -> set[str]:
        """Which of these vector-table ids are chunks of the graph this searcher reads."""
        ids = [int(c) for c in chunk_ids if c.isdigit()]
        return {str(i) for i in self.index.graph.existing_chunk_ids(ids)}

    def semantic(
        self,
        query: str,
        k: int = DEPTH,
        *,
        lang=None,
        path_glob=None,
        exclude_tests: bool = False,
        paths=None,
        kinds: Sequence[str] = (),
    ) -> list[_Cand]:
        """The ``k`` chunks nearest ``query``; ``paths``: only in those files; ``kinds``: only
        in files of those kinds."""
        vs = self._vector_store()
        if vs is None:
            return []
        vec = self.query_vector(query)
        want = limit = k * 2 if exclude_tests else k
        while True:
            # The vector table is shared by the graph's generations: a full rebuild adds its
            # new chunks' vectors before it swaps its graph in, and the vectors of chunks it
            # dropped go only later. Keep the hits of chunks this generation has; dig deeper
            # when some were another's, so the answer is what this generation alone would give.
            try:
                found = vs.search(vec, k=limit, language=lang, path_glob=path_glob, paths=paths,
                                  languages=languages_of_kind(kinds) if kinds else None)
            except VectorTableDamagedError as exc:  # a data file lost or garbled: no hits
                self._damaged(exc)
                return []
            known = self._known_chunks(h.chunk_id for h in found)
            hits = [h for h in found if h.chunk_id in known]
            if len(hits) >= want or len(found) < limit:
                break
            limit *= 4
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
        model=None,
        kinds: Sequence[str] = (),
    ) -> SearchResult:
        """Top ``k`` chunks for ``query``. ``hybrid`` ranks through every signal and the fusion
        (`retrieval.pipeline`); ``lexical`` and ``semantic`` are one signal each. ``weights``
        (signal -> weight) replaces the fitted fusion by a weighted reciprocal rank fusion."""
        from .fusion import FusionModel, ranked_chunks
        from .pipeline import default_signals, rank
        from .signals import Scope, SignalContext
        from .sources import ChunkLexical, Vectors

        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        bad = [kd for kd in kinds if kd not in KINDS]
        if bad:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {', '.join(bad)}")
        depth = max(depth or DEPTH, k)
        ctx = SignalContext(
            self.index, Scope(lang, path_glob, exclude_tests, tuple(kinds)), searcher=self
        )
        warnings: list[str] = []
        missing = self.vectors_unavailable() if mode != "lexical" else None
        if mode == "semantic" and missing:
            raise VectorsMissingError(
                f"Semantic search cannot run: {missing} — run `repoctx index build` to embed "
                "the chunks, or search with `--mode lexical`."
            )
        if mode == "hybrid" and missing and self._meta("embed_model"):
            warnings.append(_skipped(missing, damaged=bool(self.vectors_damaged)))
        if mode != "lexical" and not missing:
            warnings.extend(self.vector_warnings())
        if mode == "lexical":
            signals = [ChunkLexical()]
        elif mode == "semantic":
            signals = [Vectors()]
        else:
            signals = default_signals(vectors=not missing)
        if weights:
            model = _weighted_rrf(weights)
        elif mode != "hybrid":
            model = FusionModel.rrf()
        ranking = rank(ctx, query, signals, model, k=depth)
        if self.vectors_damaged and not missing and mode != "lexical":  # met while ranking
            if mode == "semantic":
                raise VectorsMissingError(
                    f"Semantic search cannot run: {self.vectors_damaged} — run `repoctx index "
                    "verify --repair`, or search with `--mode lexical`."
                )
            warnings = [_skipped(self.vectors_damaged, damaged=True)]  # coverage notes moot
        chunks = ranked_chunks(ranking, self.index, k)
        self.last_timings = ctx.cache.get("timings", {})
        fused = [(c.hit.chunk_id, c.score) for c in chunks]
        per_source = {
            src: {
                h.chunk_id: (rank_, h.score)
                for rank_, h in enumerate(hits, 1)
                if h.chunk_id is not None
            }
            for src, hits in ranking.runs.items()
        }
        # definitions named or voted for (symbol, history, graph) rank the chunk they start in
        for c in chunks:
            for e in c.evidence:
                per_source.setdefault(e.signal, {}).setdefault(c.hit.chunk_id, (e.rank, e.score))
        hits = self._hydrate(fused, per_source)
        gen = int(self._meta("generation") or 0)
        return SearchResult(
            query, mode, tuple(hits), self.semantic_coverage(), gen, tuple(warnings),
            vectors_damaged=bool(self.vectors_damaged) and mode != "lexical",
        )

    def _hydrate(self, fused: Sequence[tuple[int, float]], per_source: dict) -> list[SearchHit]:
        if not fused:
            return []
        ids = [cid for cid, _ in fused]
        rows = self.index.graph.chunk_locations(ids)
        out = []
        stale = self.index.stale_paths(r[0] for r in rows.values())
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
                    snippet=snippet(self.root, path, s, e),
                    stale=path in stale,
                    kind=kind_of(lang or ""),
                )
            )
        return out


def _skipped(why: str, damaged: bool) -> str:
    """The one-line notice of a hybrid search that ran without its semantic signal."""
    fix = ("`repoctx index verify --repair` sets it aside and re-embeds" if damaged
           else "`repoctx index build` re-embeds")
    return f"Semantic search skipped: {why}; results are lexical and exact only — {fix}."


def _weighted_rrf(weights: dict[str, float]):
    """Reciprocal rank fusion with a weight per signal, over files and units alike."""
    from .fusion import FusionModel

    w = {f"{sig}.rr": float(v) for sig, v in weights.items()}
    return FusionModel(w, w, "weighted-rrf")


def snippet(root: Path, path: str, start: int, end: int, max_lines: int = 8) -> str:
    # Read now, not from the index: no link out of the tree or to a secret is followed, and a
    # FIFO or device put at an indexed path gives no snippet instead of a hang.
    data = read_regular(root, path, refuse=denied_by_default)
    if data is None:
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
    return "\n".join(lines[start - 1 : min(end, start - 1 + max_lines)])
