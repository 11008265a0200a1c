"""The built-in signals (see `retrieval.signals`): lexical over chunks and over whole files,
names, paths and traceback frames, error messages, vectors, and the reference graph.

Each one is measured alone and in the fusion by `benchmarks/localization.py`.

Size: each signal is a small class; they sit in one module so their queries can be compared side by
side (the protocol is in signals.py).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from indexer import NamedDefinition, fts_stems, fts_tables

from .query import Query
from .signals import Hit, SignalContext

if TYPE_CHECKING:
    from indexer import Index

#: Lexical queries keep this many of the task's terms, the rarest first: a pasted issue has
#: hundreds of words, and an OR over all of them costs FTS5 one posting list each while the
#: common ones barely move BM25.
MAX_TERMS = 80
#: A term the task repeats is repeated in the query (BM25 sums over query terms), up to this.
MAX_TERM_REPEAT = 3
_TOKEN = re.compile(r"[a-z0-9]+")


# -- lexical term selection --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Term:
    text: str  # as the query has it
    stem: str  # as the index stores it
    idf: float
    weight: float  # query-side weight (repetitions in the MATCH)


#: Occurrences of its terms (summed, times their repetitions) a lexical query may make FTS5
#: read: BM25 costs per occurrence in every matching row, and the rarest terms carry the most
#: weight, so on a large index the commonest terms of a long issue are dropped first. Small
#: repositories stay far below it.
POSTINGS_BUDGET = 50_000


def select_terms(
    index: Index,
    table: str,
    terms: list[str],
    limit: int = MAX_TERMS,
    counts: Mapping[str, int] | frozenset[str] | None = None,
    budget: int = POSTINGS_BUDGET,
) -> list[Term]:
    """The most informative of ``terms`` for the FTS5 ``table``, rarest first: terms the index
    lacks are dropped, and so are terms in more than half of the documents (FTS5's BM25 gives them no
    weight); then terms are taken by IDF while their occurrences fit ``budget``, at most
    ``limit``. Each is weighted by how often the query says it (``counts``, up to
    MAX_TERM_REPEAT)."""
    if isinstance(counts, set | frozenset):  # terms to count twice
        counts = dict.fromkeys(counts, 2)
    clean = [t for t in dict.fromkeys(terms) if _TOKEN.fullmatch(t)]
    if not clean:
        return []
    stems = fts_stems(clean)
    uniq = sorted({s for s in stems if s})
    if not uniq:
        return []
    stats = index.lexical.term_stats(table, uniq)
    n = max(index.lexical.table_docs(table), 1)
    cands: dict[str, tuple[float, str, int, int]] = {}
    for text, stem in zip(clean, stems, strict=True):
        if stem not in stats or stem in cands:
            continue
        d, cnt = stats[stem]
        if d > n / 2 and n > 2:
            continue
        idf = math.log((n - d + 0.5) / (d + 0.5)) if n > 2 else 1.0
        reps = max(1, min((counts or {}).get(text, 1), MAX_TERM_REPEAT))
        cands[stem] = (idf, text, cnt, reps)
    picked: list[Term] = []
    used = 0
    for stem, (idf, text, cnt, reps) in sorted(cands.items(), key=lambda kv: -kv[1][0]):
        if used + cnt * reps > budget and picked:
            continue
        used += cnt * reps
        picked.append(Term(text, stem, idf, float(reps)))
        if len(picked) >= limit:
            break
    return picked


def match_expr(terms: list[Term]) -> str:
    """FTS5 MATCH of any term; a boosted term is repeated (BM25 sums over query phrases)."""
    parts = []
    for t in terms:
        q = '"' + t.text.replace('"', '""') + '"'
        parts.extend([q] * int(t.weight))
    return " OR ".join(parts)


# -- lexical signals ---------------------------------------------------------------------------


class ChunkLexical:
    """BM25 over chunks (path, definition name, text with identifiers split)."""

    level = "chunk"

    def __init__(self, name: str = "lexical", part: str = "all", limit: int = MAX_TERMS) -> None:
        self.name = name
        self.part = part  # all | code | prose
        self.limit = limit

    def _terms(self, q: Query) -> list[str]:
        if self.part == "code":
            return list(q.code_terms)
        if self.part == "prose":
            return list(q.prose_terms)
        return list(q.terms)

    def run(self, ctx: SignalContext, q: Query, k: int) -> list[Hit]:
        return self.hits(ctx, q, k)

    def hits(self, ctx: SignalContext, q: Query, k: int, paths: list[str] | None = None) -> list[Hit]:
        """The ``k`` best chunks of each lexical table the scope reads (code's, prose's: each
        read as if alone, with its own choice of terms); ``paths``: only chunks of those files."""
        if paths == []:
            return []
        out = []
        for table in fts_tables("chunks_fts", ctx.scope.files):
            key = ("chunk_terms", table, self.part, self.limit, q.text)  # the second stage asks again
            picked = ctx.cache.get(key)
            if picked is None:
                picked = ctx.cache[key] = select_terms(
                    ctx.index, table, self._terms(q), self.limit, q.term_counts
                )
            if picked:
                rows = ctx.index.lexical.chunk_bm25(table, match_expr(picked), CHUNK_WEIGHTS, k,
                                  ctx.scope.files, paths)
                out += [
                    Hit("chunk", path, -s, symbol=sym, chunk_id=cid, start_line=a, end_line=b,
                        scale=table)
                    for cid, s, path, sym, a, b in rows
                ]
        return sorted(out, key=lambda h: -h.score)


#: Column weights of chunk BM25: path, definition name, text.
CHUNK_WEIGHTS = (2.0, 4.0, 1.0)
#: Column weights of whole-file BM25: path words, defined names, text.
FILE_WEIGHTS = (2.0, 2.0, 1.0)


class FileLexical:
    """BM25 over whole files: a file whose relevance is spread over many chunks is seen at once."""

    level = "file"

    def __init__(self, name: str = "file_lexical", limit: int = MAX_TERMS) -> None:
        self.name = name
        self.limit = limit

    def run(self, ctx: SignalContext, q: Query, k: int) -> list[Hit]:
        out = []
        for table in fts_tables("files_fts", ctx.scope.files):  # each alone, as in ChunkLexical
            picked = select_terms(ctx.index, table, list(q.terms), self.limit, q.term_counts)
            if picked:
                rows = ctx.index.lexical.file_bm25(table, match_expr(picked), FILE_WEIGHTS, k, ctx.scope.files)
                out += [Hit("file", path, -s, scale=table) for path, s in rows]
        return sorted(out, key=lambda h: -h.score)


# -- names, paths, frames, errors --------------------------------------------------------------

#: A plain name defined in more places than this says little about where to look.
MAX_NAME_DEFS = 8


def _exports(ctx: SignalContext, module: str, name: str, depth: int = 4) -> list[str]:
    """Qualified names ``module.name`` means: a definition there, or what the module imports
    under that name (``xarray/__init__.py``'s ``from .core.computation import where``),
    followed through re-exports and ``*`` imports."""
    if ctx.index.graph.qualname_exists(f"{module}.{name}"):
        return [f"{module}.{name}"]
    if depth == 0:
        return []
    out: list[str] = []
    for m, n in ctx.index.graph.module_imports_named(module, name):
        if (m, n) != (module, name):
            out += _exports(ctx, m, name if n == "*" else n, depth - 1)
    return out


def _resolve_through_modules(ctx: SignalContext, parts: list[str]) -> list[NamedDefinition]:
    """``xarray.DataArray.quantile``: the longest prefix that is an indexed module, its export
    named by the next part, then the rest as members."""
    files = ctx.scope.files
    for i in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:i])
        if not ctx.index.graph.module_exists(module):
            continue
        rows: list[NamedDefinition] = []
        for qual in _exports(ctx, module, parts[i]):
            full = ".".join([qual, *parts[i + 1 :]])
            rows += ctx.index.graph.definitions_with_qualname(full, files)
        if rows:
            return rows
    return []


def resolve_name(ctx: SignalContext, ident: str, limit: int = 200) -> list[NamedDefinition]:
    """Definitions ``ident`` names: a plain name, ``Class.method``, or a dotted qualified name
    (a trailing suffix of a module-qualified name)."""
    parts = ident.replace("::", ".").split(".")
    last = parts[-1]
    rows = ctx.index.graph.definitions_with_name(last, ctx.scope.files, limit)
    if len(parts) == 1:
        return rows
    dotted = ".".join(parts)
    exact = [r for r in rows if r[0] == dotted or r[0].endswith("." + dotted)]
    if exact:
        return exact
    through = _resolve_through_modules(ctx, parts)
    if through:
        return through
    # `so.Nominal`, `np.foo`: an alias prefix; `module.func` where the module is a file.
    tail = ".".join(parts[-2:])
    return [r for r in rows if r[0].endswith("." + tail)] or (
        rows if len(rows) <= 2 and len(parts) == 2 and len(parts[0]) <= 3 else []
    )


class Names:
    """Definitions named in the task: ``Plotter._finalize_figure``, ``read1``, ``so.Nominal``.
    A name with few definitions counts more (one in 40 places says little)."""

    name = "symbol"
    level = "symbol"

    def run(self, ctx: SignalContext, q: Query, k: int) -> list[Hit]:
        scored: dict[tuple, float] = {}
        for order, ident in enumerate(q.identifiers):
            rows = resolve_name(ctx, ident)
            if not rows:
                continue
            quals = {r[0] for r in rows}
            if "." not in ident and len(quals) > MAX_NAME_DEFS:
                continue
            share = 1.0 / len(quals)
            dotted = 1.5 if "." in ident else 1.0
            early = 1.0 / (1.0 + 0.05 * order)
            for qual, _kind, a, b, path, _lang in rows:
                key = (qual, path, a, b)
                scored[key] = max(scored.get(key, 0.0), share * dotted * early)
        ranked = sorted(scored.items(), key=lambda kv: -kv[1])[:k]
        return [Hit("symbol", path, s, symbol=qual, start_line=a, end_line=b)
                for (qual, path, a, b), s in ranked]


def _path_index(ctx: SignalContext) -> dict[str, list[str]]:
    """Indexed paths by file name, for suffix matching of paths as printed."""
    cached = ctx.cache.get("paths_by_name")
    if cached is None:
        cached = defaultdict(list)
        for path in ctx.index.graph.all_paths():
            cached[path.rsplit("/", 1)[-1]].append(path)
        ctx.cache["paths_by_name"] = cached
    return cached


def match_path(ctx: SignalContext, raw: str) -> list[str]:
    """Indexed files a path as written refers to: the longest matching suffix wins
    (``/usr/lib/python3/site-packages/sphinx/util/x.py`` is ``sphinx/util/x.py``); a dotted
    module (``sphinx.ext.autodoc``) is its file or package."""
    raw = raw.replace("\\", "/").strip("/").lstrip("./")
    if not raw:
        return []
    cands = _path_index(ctx).get(raw.rsplit("/", 1)[-1], [])
    best, best_len = [], 0
    parts = raw.split("/")
    for path in cands:
        pp = path.split("/")
        n = 0
        while n < min(len(pp), len(parts)) and pp[-1 - n] == parts[-1 - n]:
            n += 1
        if n > best_len:
            best, best_len = [path], n
        elif n == best_len and n:
            best.append(path)
    if best_len == 1 and len(best) > 3:
        return []  # `__init__.py`, `utils.py`: too many to mean one
    return best


def module_paths(ctx: SignalContext, dotted: str) -> list[str]:
    return ctx.index.graph.module_paths(dotted)


class Paths:
    """Files the task names: paths, traceback frames, dotted module names."""

    name = "path"
    level = "file"

    def run(self, ctx: SignalContext, q: Query, k: int) -> list[Hit]:
        scored: dict[str, float] = {}
        frame_paths = {f.path for f in q.frames}
        n = 0
        for raw, _line in q.paths:
            found = match_path(ctx, raw)
            n += 1
            for p in found:
                if not ctx.scope.allows(p):
                    continue
                # Frames deeper in a trace are nearer the failure; a path in prose is explicit.
                w = (1.0 if raw in frame_paths else 1.5) / len(found)
                scored[p] = scored.get(p, 0.0) + w
        for ident in q.identifiers:
            if "." in ident and ident.count(".") >= 1:
                for p in module_paths(ctx, ident):
                    if ctx.scope.allows(p):
                        scored[p] = scored.get(p, 0.0) + 0.75
        ranked = sorted(scored.items(), key=lambda kv: -kv[1])[:k]
        return [Hit("file", p, s) for p, s in ranked]


class Frames:
    """The definitions traceback frames point into: by the function name the frame prints, else
    the innermost definition around the line (lines drift between versions; names less so)."""

    name = "frame"
    level = "symbol"

    def run(self, ctx: SignalContext, q: Query, k: int) -> list[Hit]:
        out: dict[tuple, float] = {}
        frames = list(q.frames)
        for depth, f in enumerate(reversed(frames)):  # innermost frame first
            w = 1.0 / (1 + depth)
            for path in match_path(ctx, f.path):
                if not ctx.scope.allows(path):
                    continue
                rows = ctx.index.graph.definition_spans_in_file(path)
                pick = [r for r in rows if f.function and r[3] == f.function]
                if not pick and f.line:
                    around = [r for r in rows if r[1] <= f.line <= r[2]]
                    pick = [min(around, key=lambda r: r[2] - r[1])] if around else []
                for qual, a, b, _ in pick:
                    key = (qual, path, a, b)
                    out[key] = max(out.get(key, 0.0), w)
        ranked = sorted(out.items(), key=lambda kv: -kv[1])[:k]
        return [Hit("symbol", path, s, symbol=qual, start_line=a, end_line=b, note="traceback frame")
                for (qual, path, a, b), s in ranked]


_MSG_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Errors:
    """The code that raises or prints an error message the task quotes: the message's words
    as phrases (format placeholders break a message into runs of literal words)."""

    name = "error"
    level = "chunk"

    def run(self, ctx: SignalContext, q: Query, k: int) -> list[Hit]:
        phrases: list[str] = []
        for msg in q.errors:
            # quoted values in a message are data, not the format string
            literal = re.sub(r"'[^']*'|\"[^\"]*\"|<[^>]*>|\d+(\.\d+)?", " | ", msg)
            for run in literal.split("|"):
                words = [w.lower() for w in _MSG_WORD.findall(run)]
                if len(words) >= 3:
                    phrases.append(" ".join(words[:8]))
        if not phrases:
            return []
        expr = " OR ".join('"' + p.replace('"', '""') + '"' for p in dict.fromkeys(phrases))
        out = [
            Hit("chunk", path, -s, symbol=sym, chunk_id=cid, start_line=a, end_line=b,
                note="error message", scale=table)
            for table in fts_tables("chunks_fts", ctx.scope.files)
            for cid, s, path, sym, a, b in ctx.index.lexical.chunk_bm25(table, f"body : ({expr})", (0.0, 0.0, 1.0), k, ctx.scope.files
            )
        ]
        return sorted(out, key=lambda h: -h.score)


# -- vectors -----------------------------------------------------------------------------------


class Vectors:
    """Nearest chunks by embedding (the index's model); nothing when the index has no vectors."""

    name = "semantic"
    level = "chunk"

    def run(self, ctx: SignalContext, q: Query, k: int) -> list[Hit]:
        return self.hits(ctx, q, k)

    def hits(self, ctx: SignalContext, q: Query, k: int, paths: list[str] | None = None) -> list[Hit]:
        """The ``k`` nearest chunks; ``paths``: only chunks of those files."""
        searcher = ctx.searcher
        if searcher is None or paths == [] or searcher.semantic_coverage() <= 0:
            return []
        text = q.text if len(q.text) < 2000 else q.text[:2000]
        cands = searcher.semantic(
            text, k, lang=ctx.scope.lang, path_glob=ctx.scope.path_glob,
            exclude_tests=ctx.scope.exclude_tests, paths=paths, kinds=ctx.scope.kinds,
        )
        if not cands:
            return []
        rows = ctx.index.lexical.chunk_spans([c.chunk_id for c in cands])
        out = []
        for c in cands:
            if c.chunk_id in rows:
                path, sym, a, b = rows[c.chunk_id]
                out.append(Hit("chunk", path, c.score, symbol=sym, chunk_id=c.chunk_id,
                               start_line=a, end_line=b))
        return out
