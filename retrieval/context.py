"""Budgeted context assembly: the code a model needs for a task, within a token budget.

1. Seeds. The best definitions of the one fused ranking (`retrieval.pipeline.rank`: lexical,
   whole-file, names through the graph, paths and traceback frames, error messages, vectors,
   history and the graph signal, weighed by the fitted fusion), in that order, plus focus
   files; the chunks that were hit mark where a definition too long to show whole is cut.
2. Expansion. Two hops over the reference graph (calls, inheritance, type uses, imports,
   nesting; ambiguous references through their candidates), ranked by personalized PageRank
   seeded with step 1 (`retrieval.pagerank`).
3. Packing. In rank order, definitions go in whole (a method grows to its class when the class
   fits in ``expand_share`` of the budget), overlapping spans merge, a definition too large for one item is cut to the chunk
   that was hit; once full items have used ``full_share`` of the budget the rest are
   signature-only skeletons (signature and first doc line). The budget is filled until no
   further skeleton fits, counted with a real tokenizer, and the final text is counted again.
4. Provenance. Every item says why it is there: the hit (source and rank) or the edge
   (relation, neighbour, seed it came from), with its token cost and score.

Tokens are counted with `retrieval.tokens` (o200k BPE from quicktok-v1 when installed, else
the MiniLM WordPiece); see that module for how its counts compare with other LLM tokenizers.

Measured by `benchmarks/localization.py` (context recall: the share of the changed functions
whose whole definition is in the pack; figures in the README, "How the context is chosen").
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from indexer.errors import RepoctxError
from indexer.languages import language_for_path
from indexer.models import CLASS_KINDS

from .pagerank import collect_subgraph, personalized_pagerank
from .pipeline import default_signals
from .tokens import TokenCounter, get_tokenizer

#: Where a seed came from: focus, or a signal of `retrieval.pipeline.default_signals`.
HIT_SOURCES = ("focus", *(s.name for s in default_signals(local_vectors=True)))
FULL, SKELETON = "full", "skeleton"
PREAMBLE = (
    "Repository context selected for the task. Each block starts with `path:start-end` and "
    "holds those lines verbatim; the last section lists related definitions by signature only."
)
SKELETON_HEADER = "Related definitions (signatures only):"
_SEP_FULL, _SEP_SKEL = "\n\n", "\n"
#: No tokenizer here packs code into more bytes per token than this (o200k: at most 6.9 on
#: stdlib definitions; WordPiece skips whitespace): larger definitions are not even read.
MAX_BYTES_PER_TOKEN = 16


class ContextError(RepoctxError):
    """The context cannot be assembled — check the focus paths and the budget."""


@dataclass(frozen=True, slots=True)
class Reason:
    """Why an item is in the pack: a hit (``source`` in HIT_SOURCES, with its rank) or an
    edge of the reference graph (``source`` is the relation, read "<item> <relation> <via>",
    reached from ``seed``)."""

    source: str
    rank: int = 0
    via: str = ""
    seed: str = ""
    confidence: float = 0.0

    def __str__(self) -> str:
        if not self.via:  # a hit of a signal (or focus), not an edge of the graph
            return f"{self.source} hit #{self.rank}" if self.rank else f"{self.source} hit"
        text = f"{self.source} {self.via}"
        if self.seed and self.seed != self.via:
            text += f" (from seed {self.seed})"
        return text


@dataclass(frozen=True, slots=True)
class ContextItem:
    """One block of the pack: ``kind`` full (the lines, verbatim) or skeleton (signature and
    first doc line). ``start_line``-``end_line`` are the lines whose content the item holds:
    for a skeleton only its definition's first line (its text names the whole span)."""

    path: str
    start_line: int
    end_line: int
    symbol: str  # module-qualified definition, '' for module-level lines
    kind: str
    text: str
    tokens: int
    score: float
    reasons: tuple[Reason, ...]

    @property
    def span(self) -> tuple[int, int]:
        return (self.start_line, self.end_line)


@dataclass(frozen=True, slots=True)
class Seed:
    """A starting point: a search hit, a name or path in the task, or a focus file."""

    source: str
    rank: int
    path: str
    start_line: int
    end_line: int
    symbol: str
    score: float


@dataclass(frozen=True)
class ContextPack:
    task: str
    budget: int
    used_tokens: int  # of render(), counted by ``tokenizer``
    items: tuple[ContextItem, ...]
    seeds: tuple[Seed, ...]
    timings: dict[str, float]  # milliseconds per phase
    tokenizer: str = ""
    warnings: tuple[str, ...] = ()
    line_numbers: bool = False
    #: The fused ranking the seeds came from (`retrieval.fusion.Ranking`); not serialized.
    ranking: object | None = field(default=None, repr=False, compare=False)

    def render(self) -> str:
        """The pack as prompt text: full blocks in rank order, then the skeleton list."""
        return _render(
            [i.text for i in self.items if i.kind == FULL],
            [i.text for i in self.items if i.kind == SKELETON],
        )

    def covers(self, path: str, start_line: int, end_line: int) -> bool:
        """Whether a full item holds all of ``path:start_line-end_line``."""
        return any(
            i.kind == FULL
            and i.path == path
            and i.start_line <= start_line
            and end_line <= i.end_line
            for i in self.items
        )

    def to_dict(self) -> dict:
        d = asdict(replace(self, ranking=None))
        d.pop("ranking", None)
        for item, src in zip(d["items"], self.items, strict=True):
            item["reasons"] = [{**asdict(r), "text": str(r)} for r in src.reasons]
        return d


@dataclass(frozen=True)
class PackPolicy:
    """Knobs of assembly; the defaults were set on the localization development set (see the
    module docstring)."""

    #: Rank constant of the seeds' weights (smaller: top units dominate more).
    seed_k: int = 10
    #: Weight of focus seeds against the task's (the ranking's seeds weigh 1).
    source_weights: dict[str, float] = field(default_factory=lambda: {"focus": 3.0})
    #: Units of the fused ranking that seed the graph walk.
    unit_seeds: int = 40
    #: Fusion weights (`retrieval.fusion.FusionModel`); None: the shipped ones.
    model: object | None = None
    use_graph: bool = True  # False: seeds in fused order only (the baseline)
    alpha: float = 0.3  # PageRank restart probability
    hops: int = 2
    fanout: int = 30
    expand: int = 120
    full_share: float = 0.9  # of the budget for full items; the rest for skeletons
    item_share: float = 0.35  # largest single full item
    expand_share: float = 0.5  # a member grows to its top-level class up to this size
    focus_share: float = 0.5  # whole focus files up to this size
    upgrade: bool = True  # room left at the end shows skeletons in full (False: an outline)
    max_candidates: int = 400
    #: Test code rarely is what a task is about: seeds and scores in test files count this much
    #: (focus files excepted).
    test_weight: float = 0.3
    #: Whether test files compete in the ranking that picks the seeds (False: they come in only
    #: through the graph, at ``test_weight``, or as focus), so their many matches on the task's
    #: words do not take the seeds and the second stage's best files from the code.
    rank_tests: bool = True
    full_candidates: int = 200  # only this many of the best are tried in full at first
    line_numbers: bool = False  # prefix every code line with its number


# --------------------------------------------------------------------------- entry point


def assemble_context(
    conn: sqlite3.Connection,
    root: str | Path,
    task: str,
    budget_tokens: int,
    *,
    focus: Sequence[str] = (),
    searcher=None,
    tokenizer: TokenCounter | str | None = None,
    index_dir: str | Path | None = None,
    policy: PackPolicy | None = None,
    ranking=None,
) -> ContextPack:
    """Assemble the context for ``task`` within ``budget_tokens`` tokens of ``tokenizer``.

    ``searcher`` (a `retrieval.search.Searcher`) supplies semantic hits when the index has
    vectors; without one, ``index_dir`` makes one, and with neither the seeds are lexical and
    exact only. ``focus`` entries are paths relative to ``root`` (files or directories, with an
    optional ``:line`` or ``:start-end``). ``ranking`` (a `retrieval.fusion.Ranking` of this
    task, e.g. from an earlier call's ``pack.ranking``) skips ranking again."""
    t0 = time.perf_counter()
    policy = policy or PackPolicy()
    counter = tokenizer if isinstance(tokenizer, TokenCounter) else get_tokenizer(tokenizer)
    root = Path(root)
    if searcher is None and index_dir is not None:
        from .search import Searcher

        searcher = Searcher(conn, Path(index_dir), root)
    if index_dir is None and searcher is not None:  # the history signal reads the index dir
        index_dir = getattr(searcher, "index_dir", None)
    repo = _Repo(conn, root)
    timings: dict[str, float] = {}
    warnings: list[str] = []
    seeds = _Seeds(repo, policy)
    seeds.add_focus(focus, counter, budget_tokens)
    seeds.add_task(task, searcher, warnings, index_dir, ranking)
    timings["seeds"] = _ms(t0)

    t1 = time.perf_counter()
    scores, edge_reasons = _rank(repo, seeds, policy)
    timings["rank"] = _ms(t1)

    t2 = time.perf_counter()
    packer = _Packer(repo, counter, budget_tokens, policy)
    items = packer.pack(seeds, scores, edge_reasons)
    text = _render(
        [i.text for i in items if i.kind == FULL], [i.text for i in items if i.kind == SKELETON]
    )
    used = counter.count(text)
    while used > budget_tokens and items:  # token merges across block boundaries
        drop = max(range(len(items)), key=lambda k: (items[k].kind == SKELETON, k))
        items.pop(drop)
        text = _render(
            [i.text for i in items if i.kind == FULL], [i.text for i in items if i.kind == SKELETON]
        )
        used = counter.count(text) if items else 0
    timings["pack"] = _ms(t2)
    timings["total"] = _ms(t0)
    return ContextPack(
        task=task,
        budget=budget_tokens,
        used_tokens=used,
        items=tuple(items),
        seeds=tuple(seeds.records),
        timings=timings,
        tokenizer=counter.name,
        warnings=tuple(warnings),
        line_numbers=policy.line_numbers,
        ranking=seeds.ranking,
    )


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 2)


def _render(fulls: Sequence[str], skeletons: Sequence[str]) -> str:
    if not fulls and not skeletons:
        return ""
    out = [PREAMBLE, _SEP_FULL]
    for text in fulls:
        out += [text, _SEP_FULL]
    if skeletons:
        out += [SKELETON_HEADER, _SEP_SKEL]
        for text in skeletons:
            out += [text, _SEP_SKEL]
    return "".join(out)


# --------------------------------------------------------------------------- index access


@dataclass(slots=True)
class _Sym:
    id: int
    path: str
    name: str
    qualname: str
    kind: str
    start: int
    end: int
    signature: str
    doc: str
    parent: int | None
    language: str
    module: str
    nbytes: int

    @property
    def local(self) -> str:
        """The qualified name inside its file (``Cart.add``)."""
        if self.module and self.qualname.startswith(self.module + "."):
            return self.qualname[len(self.module) + 1 :]
        return self.qualname


_SYM_SQL = (
    "SELECT s.id, f.path, s.name, s.qualname, s.kind, s.start_line, s.end_line, s.signature, "
    "s.doc, s.parent_id, coalesce(f.language, ''), coalesce(f.module, ''), "
    "s.end_byte - s.start_byte "
    "FROM symbols s JOIN files f ON f.id = s.file_id "
)


class _Repo:
    """Cached reads of the index and of the files on disk."""

    def __init__(self, conn: sqlite3.Connection, root: Path) -> None:
        self.conn = conn
        self.root = root
        self.syms: dict[int, _Sym] = {}
        self._file_syms: dict[str, list[_Sym]] = {}
        self._lines: dict[str, list[str] | None] = {}
        self._paths: set[str] | None = None

    def load(self, ids: Iterable[int]) -> None:
        """Load symbols and their ancestors."""
        want = [i for i in set(ids) if i not in self.syms]
        while want:
            for k in range(0, len(want), 900):
                part = want[k : k + 900]
                rows = self.conn.execute(
                    _SYM_SQL + f"WHERE s.id IN ({','.join('?' * len(part))})", part
                ).fetchall()
                for row in rows:
                    self.syms[row[0]] = _Sym(*row)
            want = list(
                {
                    s.parent
                    for s in self.syms.values()
                    if s.parent is not None and s.parent not in self.syms
                }
            )

    def file_symbols(self, path: str) -> list[_Sym]:
        if path not in self._file_syms:
            rows = self.conn.execute(
                _SYM_SQL + "WHERE f.path = ? ORDER BY s.start_line, s.end_line DESC", [path]
            )
            syms = [_Sym(*row) for row in rows]
            for s in syms:
                self.syms.setdefault(s.id, s)
            self._file_syms[path] = syms
        return self._file_syms[path]

    def symbols_between(self, path: str, start: int, end: int) -> list[_Sym]:
        """Definitions (not modules) that overlap lines ``start``-``end`` of ``path``."""
        if path in self._file_syms:
            return [
                s
                for s in self._file_syms[path]
                if s.kind != "module" and s.start <= end and s.end >= start
            ]
        rows = self.conn.execute(
            _SYM_SQL + "WHERE s.file_id = (SELECT id FROM files WHERE path = ?) "
            "AND s.start_line <= ? AND s.end_line >= ? AND s.kind != 'module' "
            "ORDER BY s.start_line, s.end_line DESC",
            [path, end, start],
        )
        syms = [_Sym(*row) for row in rows]
        for s in syms:
            self.syms.setdefault(s.id, s)
        return syms

    def top(self, sym: _Sym) -> _Sym:
        """The outermost definition around ``sym`` (itself when top-level)."""
        seen = 0
        while sym.parent is not None and sym.parent in self.syms and seen < 32:
            sym = self.syms[sym.parent]
            seen += 1
        return sym

    def lines(self, path: str) -> list[str] | None:
        if path not in self._lines:
            try:
                text = (self.root / path).read_text(encoding="utf-8", errors="replace")
            except OSError:
                self._lines[path] = None
            else:
                self._lines[path] = text.splitlines()
        return self._lines[path]

    def paths(self) -> set[str]:
        if self._paths is None:
            self._paths = {r[0] for r in self.conn.execute("SELECT path FROM files")}
        return self._paths


# --------------------------------------------------------------------------- seeds

Key = int | tuple  # a symbol id, or ("span", path, start, end) for lines outside definitions


class _Seeds:
    """Seed scores (the personalization vector), hit reasons and seed records."""

    def __init__(self, repo: _Repo, policy: PackPolicy) -> None:
        self.repo = repo
        self.policy = policy
        self.weight: dict[Key, float] = defaultdict(float)
        self.reasons: dict[Key, list[Reason]] = defaultdict(list)
        self.hit_spans: dict[int, list[tuple[int, int]]] = defaultdict(list)
        self.pinned: dict[Key, int] = {}  # focus units -> order
        self.records: list[Seed] = []
        self.spans: dict[tuple, tuple[str, int, int]] = {}
        self.ranking = None

    def _credit(self, key: Key, source: str, rank: int, share: float = 1.0) -> None:
        w = self.policy.source_weights.get(source, 1.0) / (self.policy.seed_k + rank) * share
        self.weight[key] += w
        if not any(r.source == source for r in self.reasons[key]):
            self.reasons[key].append(Reason(source, rank))

    def _span_key(self, path: str, start: int, end: int) -> tuple:
        key = ("span", path, start, end)
        self.spans[key] = (path, start, end)
        return key

    # -- focus ----------------------------------------------------------------------------

    def add_focus(self, focus: Sequence[str], counter: TokenCounter, budget: int) -> None:
        order = 0
        for entry in focus:
            for path, span in self._focus_paths(entry):
                lines = self.repo.lines(path)
                if lines is None:
                    raise ContextError(f"Cannot read focus file {path} — check the path.")
                n = max(len(lines), 1)
                syms = [s for s in self.repo.file_symbols(path) if s.kind != "module"]
                if span is not None:
                    start, end = max(1, span[0]), min(n, span[1])
                    if start > end:
                        raise ContextError(
                            f"Focus {entry} is outside {path} ({n} lines) — fix the line range."
                        )
                    units: list[Key] = [self._span_key(path, start, end)]
                else:
                    cost = counter.count("\n".join(lines))
                    if cost <= self.policy.focus_share * budget or not syms:
                        units = [self._span_key(path, 1, n)]
                    else:
                        units = [s.id for s in syms if s.parent is None]
                for key in units:
                    order += 1
                    self.pinned[key] = order
                    self._credit(key, "focus", order)
                self.records.append(
                    Seed(
                        "focus",
                        order,
                        path,
                        span[0] if span else 1,
                        span[1] if span else n,
                        "",
                        1.0,
                    )
                )

    def _focus_paths(self, entry: str) -> list[tuple[str, tuple[int, int] | None]]:
        m = re.fullmatch(r"(.+?):(\d+)(?:-(\d+))?", entry)
        raw, span = (
            (m.group(1), (int(m.group(2)), int(m.group(3) or m.group(2)))) if m else (entry, None)
        )
        p = Path(raw)
        full = p if p.is_absolute() else self.repo.root / p
        try:
            rel = full.resolve().relative_to(self.repo.root.resolve()).as_posix()
        except ValueError as exc:
            raise ContextError(
                f"Focus path {raw} is outside the repository {self.repo.root} "
                "— pass a path inside it."
            ) from exc
        if full.is_dir():
            prefix = "" if rel == "." else rel.rstrip("/") + "/"
            files = sorted(q for q in self.repo.paths() if q.startswith(prefix))
            if not files:
                raise ContextError(
                    f"No indexed files under focus directory {raw} — "
                    "check the path or run `repoctx index build`."
                )
            return [(q, None) for q in files]
        if not full.is_file():
            raise ContextError(f"Focus path {raw} does not exist — check the path.")
        return [(rel, span)]

    # -- the task -------------------------------------------------------------------------

    def add_task(
        self, task: str, searcher, warnings: list[str], index_dir=None, ranking=None
    ) -> None:
        """Seeds from the fused ranking of every signal (`retrieval.pipeline`), in its order:
        the same ranking `search`, the agent and the MCP server use."""
        from .pipeline import rank
        from .signals import Scope, SignalContext

        use_vectors = searcher is not None and searcher.semantic_coverage() > 0
        scope = Scope(exclude_tests=not self.policy.rank_tests)
        ctx = SignalContext(self.repo.conn, self.repo.root, index_dir, scope, searcher=searcher)

        def signals(vectors: bool):
            # without the graph: neither its signal in the ranking nor the walk below
            return [s for s in default_signals(vectors=vectors)
                    if self.policy.use_graph or s.name != "graph"]

        if ranking is None:
            try:
                ranking = rank(ctx, task, signals(use_vectors), self.policy.model)
            except RepoctxError as exc:  # vectors unreadable: rank without them, and say so
                warnings.append(f"semantic search unavailable: {exc}")
                ranking = rank(ctx, task, signals(False), self.policy.model)
        self.ranking = ranking
        self.timings = ctx.cache.get("timings", {})
        n = 0
        for ru in ranking.units:
            if n >= self.policy.unit_seeds:
                break
            u = ru.unit
            if not ru.evidence:  # ranked for its file's sake only: not evidence of its own
                continue
            if u.kind == "module":
                key: Key = self._span_key(u.path, u.start, u.end)
            else:
                sym = self._unit_symbol(u.path, u.qualname, u.start)
                if sym is None:
                    continue
                key = sym.id
            n += 1
            w = 1.0 / (self.policy.seed_k + n)
            self.weight[key] += w
            for e in ru.evidence[:4]:
                if not any(r.source == e.signal for r in self.reasons[key]):
                    self.reasons[key].append(Reason(e.signal, e.rank))
            top = ru.evidence[0].signal if ru.evidence else "fused"
            self.records.append(Seed(top, n, u.path, u.start, u.end, u.qualname, round(w, 6)))
        for hits in ranking.runs.values():
            for h in hits:
                if h.chunk_id is None:
                    continue
                around = [s for s in self.repo.symbols_between(h.path, h.start_line, h.start_line)]
                if around:
                    inner = min(around, key=lambda s: s.end - s.start)
                    self.hit_spans[inner.id].append((h.start_line, h.end_line))

    def _unit_symbol(self, path: str, qualname: str, start: int) -> _Sym | None:
        for s in self.repo.file_symbols(path):
            if s.qualname == qualname and s.start == start:
                return s
        return None

_TEST_DIRS = frozenset({"test", "tests", "testing", "__tests__", "spec"})


def is_test_path(path: str) -> bool:
    """Test code by the usual conventions of the languages repoctx parses."""
    parts = path.split("/")
    name = parts[-1]
    if any(p in _TEST_DIRS for p in parts[:-1]):
        return True
    stem = name.rsplit(".", 1)[0]
    return (
        name.startswith("test_")
        or stem.endswith("_test")
        or name == "conftest.py"
        or stem.endswith((".test", ".spec"))
        or stem.endswith("Test")
        and name.endswith(".java")
    )


# --------------------------------------------------------------------------- ranking


def _key_path(repo: _Repo, seeds: _Seeds, key: Key) -> str:
    if isinstance(key, tuple):
        return key[1]
    sym = repo.syms.get(key)
    return sym.path if sym is not None else ""


def _rank(repo: _Repo, seeds: _Seeds, policy: PackPolicy) -> tuple[dict[Key, float], dict]:
    """Scores of every candidate and edge reasons of those reached through the graph."""
    tw = policy.test_weight

    def damp(key: Key, w: float) -> float:
        if tw == 1.0 or key in seeds.pinned or not is_test_path(_key_path(repo, seeds, key)):
            return w
        return w * tw

    weights = {k: damp(k, w) for k, w in seeds.weight.items()}
    total = sum(weights.values()) or 1.0
    p = {k: w / total for k, w in weights.items()}
    sym_seeds = {k: w for k, w in p.items() if isinstance(k, int)}
    scores: dict[Key, float] = {}
    edge_reasons: dict[int, list[Reason]] = {}
    if policy.use_graph and sym_seeds:
        graph = collect_subgraph(
            repo.conn, sym_seeds, hops=policy.hops, fanout=policy.fanout, expand=policy.expand
        )
        ranking = personalized_pagerank(graph, sym_seeds, alpha=policy.alpha)
        scores.update(ranking.scores)
        # span seeds are outside the graph: give them what a seed keeps after the walk
        for k, w in p.items():
            if not isinstance(k, int):
                scores[k] = policy.alpha * w
        top = sorted(
            (k for k in ranking.scores if k not in sym_seeds), key=lambda k: -ranking.scores[k]
        )[: policy.max_candidates]
        repo.load([*sym_seeds, *top, *(e.src for k in top for e in ranking.via.get(k, ()))])

        def origin(node: int, depth: int = 0) -> int:
            if node in sym_seeds or depth > 3 or not ranking.via.get(node):
                return node
            return origin(ranking.via[node][0].src, depth + 1)

        for node in [*sym_seeds, *top]:
            out = []
            for e in ranking.via.get(node, ()):
                via, seed = repo.syms.get(e.src), repo.syms.get(origin(e.src))
                if via is not None:
                    out.append(
                        Reason(
                            e.relation,
                            via=via.qualname,
                            seed=seed.qualname if seed else "",
                            confidence=round(e.confidence, 3),
                        )
                    )
            edge_reasons[node] = out
        keep = set(top) | set(p)
        scores = {k: damp(k, v) if k not in p else v for k, v in scores.items() if k in keep}
    else:
        scores = dict(p)
        repo.load(sym_seeds)
    return scores, edge_reasons


# --------------------------------------------------------------------------- packing


@dataclass(frozen=True, slots=True)
class _Unit:
    path: str
    start: int
    end: int
    symbol: str  # module-qualified
    local: str  # as written in its file
    lang: str


@dataclass(slots=True, eq=False)  # identity: two drafts may hold equal values
class _Draft:
    unit: _Unit
    kind: str
    text: str
    tokens: int
    score: float
    order: int
    reasons: list[Reason]
    key: Key | None = None


class _Packer:
    """Greedy packing in rank order with exact token accounting."""

    def __init__(self, repo: _Repo, counter: TokenCounter, budget: int, policy: PackPolicy) -> None:
        self.repo = repo
        self.counter = counter
        self.budget = budget
        self.policy = policy
        self.full: list[_Draft] = []
        self.skel: list[_Draft] = []
        self.full_tokens = 0
        self.skel_tokens = 0
        self.preamble = counter.count(PREAMBLE + _SEP_FULL)
        self.skel_header = counter.count(SKELETON_HEADER + _SEP_SKEL)
        self._texts: dict[tuple[str, int, int], tuple[str, int] | None] = {}

    @property
    def used(self) -> int:
        header = self.skel_header if self.skel else 0
        return self.preamble + self.full_tokens + self.skel_tokens + header

    def _add(self, d: _Draft) -> None:
        if d.kind == FULL:
            self.full.append(d)
            self.full_tokens += d.tokens
        else:
            self.skel.append(d)
            self.skel_tokens += d.tokens

    def _remove(self, d: _Draft) -> None:
        if d.kind == FULL:
            self.full.remove(d)
            self.full_tokens -= d.tokens
        else:
            self.skel.remove(d)
            self.skel_tokens -= d.tokens

    def pack(
        self, seeds: _Seeds, scores: dict[Key, float], edge_reasons: dict[int, list[Reason]]
    ) -> list[ContextItem]:
        if self.budget <= self.preamble + self.skel_header:
            return []
        order = sorted(
            scores,
            key=lambda k: (k not in seeds.pinned, seeds.pinned.get(k, 0), -scores[k], str(k)),
        )

        def reasons(key: Key) -> list[Reason]:
            return [*seeds.reasons.get(key, ()), *edge_reasons.get(key, ())][:4]

        later: list[tuple[int, Key]] = []
        full_cap = self.policy.full_share * self.budget
        pinned_cap = max(full_cap, self.policy.focus_share * self.budget)
        for rank, key in enumerate(order):
            unit = self._unit(key, seeds)
            if unit is None:
                continue
            cap = pinned_cap if key in seeds.pinned else full_cap
            is_module = isinstance(key, int) and self.repo.syms[key].kind == "module"
            if (
                is_module
                or rank >= self.policy.full_candidates
                or cap - self.full_tokens < 16
                or not self._try_full(key, unit, seeds, scores[key], rank, reasons(key), cap)
            ):
                if key in seeds.pinned:  # focus goes in before anything else, if only as outline
                    self._try_skeleton(key, unit, seeds, scores[key], rank, reasons(key))
                else:
                    later.append((rank, key))
        for rank, key in later:
            if self.budget - self.used < 4:
                break
            self._try_skeleton(key, self._unit(key, seeds), seeds, scores[key], rank, reasons(key))
        # Room left once every candidate has a place: show skeletons in full, best first.
        for d in sorted(self.skel, key=lambda d: d.order) if self.policy.upgrade else ():
            if self.budget - self.used < 16:
                break
            if not any(d is x for x in self.skel):  # absorbed by an earlier upgrade
                continue
            self._remove(d)
            unit = self._unit(d.key, seeds)
            if not self._try_full(d.key, unit, seeds, d.score, d.order, d.reasons, self.budget):
                self._add(d)
        drafts = sorted(self.full, key=lambda d: d.order) + sorted(self.skel, key=lambda d: d.order)
        # A skeleton holds the first line of its definition (the signature), not the body.
        return [
            ContextItem(
                d.unit.path,
                d.unit.start,
                d.unit.end if d.kind == FULL else d.unit.start,
                d.unit.symbol,
                d.kind,
                d.text,
                d.tokens,
                round(d.score, 8),
                tuple(d.reasons),
            )
            for d in drafts
        ]

    def _unit(self, key: Key, seeds: _Seeds) -> _Unit | None:
        """A candidate's own definition (or span of module-level lines)."""
        if isinstance(key, tuple):
            path, start, end = seeds.spans[key]
            return _Unit(path, start, end, "", "", language_for_path(path) or "")
        sym = self.repo.syms.get(key)
        if sym is None:
            return None
        return _sym_unit(sym)

    def _choose(
        self, key: Key, unit: _Unit, seeds: _Seeds, room: float
    ) -> tuple[_Unit, str, int] | None:
        """The span shown in full: the enclosing class when small, else the definition, else
        the chunk that was hit when the definition is too large for one item."""
        share = self.policy.focus_share if key in seeds.pinned else self.policy.item_share
        item_cap = min(share * self.budget, room)
        sym = self.repo.syms.get(key) if isinstance(key, int) else None
        if sym is not None:
            top = self.repo.top(sym)
            limit = min(self.policy.expand_share * self.budget, room)
            if (
                top.id != sym.id
                and top.kind in CLASS_KINDS
                and top.nbytes <= limit * MAX_BYTES_PER_TOKEN
            ):
                grown = _sym_unit(top)
                got = self._text(grown)
                if got is not None and got[1] <= limit:
                    return grown, *got
            if sym.kind in CLASS_KINDS:  # a large class competes through its members
                item_cap = min(item_cap, self.policy.expand_share * self.budget)
        if sym is None or sym.nbytes <= item_cap * MAX_BYTES_PER_TOKEN:
            got = self._text(unit)
            if got is not None and got[1] <= item_cap:
                return unit, *got
        if sym is not None and sym.kind in CLASS_KINDS:
            return None
        for a, b in seeds.hit_spans.get(key, ()) if isinstance(key, int) else ():
            part = _Unit(
                unit.path, max(a, unit.start), min(b, unit.end), unit.symbol, unit.local, unit.lang
            )
            got = self._text(part)
            if got is not None and got[1] <= item_cap:
                return part, *got
        return None

    def _try_full(
        self,
        key: Key,
        unit: _Unit,
        seeds: _Seeds,
        score: float,
        rank: int,
        reasons: list[Reason],
        cap: float,
    ) -> bool:
        room = min(cap - self.full_tokens, self.budget - self.used)
        for d in self.full:  # room freed by what the new item would absorb is not counted
            if d.unit.path == unit.path and not (
                d.unit.end < unit.start or unit.end < d.unit.start
            ):
                room += d.tokens
        chosen = self._choose(key, unit, seeds, room + self.skel_tokens)
        if chosen is None:
            return False
        unit, text, tokens = chosen
        same = [d for d in self.full if d.unit.path == unit.path]
        for d in same:
            if d.unit.start <= unit.start and unit.end <= d.unit.end:
                _merge_reasons(d.reasons, reasons, d.unit.symbol)
                return True
        overlap = [d for d in same if not (d.unit.end < unit.start or unit.end < d.unit.start)]
        if overlap:
            outer = max([unit, *(d.unit for d in overlap)], key=lambda u: u.end - u.start)
            unit = _Unit(
                unit.path,
                min([unit.start, *(d.unit.start for d in overlap)]),
                max([unit.end, *(d.unit.end for d in overlap)]),
                outer.symbol,
                outer.local,
                unit.lang,
            )
            got = self._text(unit)
            if got is None:
                return False
            text, tokens = got
        covered = [
            d
            for d in self.skel
            if d.unit.path == unit.path and unit.start <= d.unit.start and d.unit.end <= unit.end
        ]
        freed_full = sum(d.tokens for d in overlap)
        freed = freed_full + sum(d.tokens for d in covered)
        if covered and len(covered) == len(self.skel):
            freed += self.skel_header
        if self.full_tokens - freed_full + tokens > cap or self.used - freed + tokens > self.budget:
            return False
        parts = [(rank, reasons)]
        for d in [*overlap, *covered]:
            self._remove(d)
            parts.append((d.order, d.reasons))
            rank = min(rank, d.order) if d.kind == FULL else rank
            score = max(score, d.score)
        merged: list[Reason] = []
        for _, more in sorted(parts, key=lambda p: p[0]):  # the best-ranked part's reasons first
            _merge_reasons(merged, more, unit.symbol)
        if not merged:  # only edges inside the item led here: they are still the reason
            merged = list(reasons)
        self._add(_Draft(unit, FULL, text, tokens, score, rank, merged, key))
        return True

    def _try_skeleton(
        self,
        key: Key,
        unit: _Unit | None,
        seeds: _Seeds,
        score: float,
        rank: int,
        reasons: list[Reason],
    ) -> bool:
        if unit is None:
            return False
        for d in self.full:
            if d.unit.path == unit.path and d.unit.start <= unit.start and unit.end <= d.unit.end:
                _merge_reasons(d.reasons, reasons, d.unit.symbol)
                return True
        text = self._skeleton_text(key, unit)
        tokens = self.counter.count(text + _SEP_SKEL)
        header = 0 if self.skel else self.skel_header
        if self.used + header + tokens > self.budget:
            return False
        self._add(_Draft(unit, SKELETON, text, tokens, score, rank, list(reasons), key))
        return True

    # -- text -----------------------------------------------------------------------------

    def _text(self, unit: _Unit) -> tuple[str, int] | None:
        """The full block of a unit and its token cost (separator included), cached."""
        cache_key = (unit.path, unit.start, unit.end)
        if cache_key not in self._texts:
            lines = self.repo.lines(unit.path)
            if lines is None or unit.start > len(lines):
                self._texts[cache_key] = None
            else:
                end = min(unit.end, len(lines))
                body = lines[unit.start - 1 : end]
                if self.policy.line_numbers:
                    width = len(str(end))
                    body = [f"{unit.start + i:>{width}}| {ln}" for i, ln in enumerate(body)]
                header = f"{unit.path}:{unit.start}-{end}" + (
                    f" ({unit.local})" if unit.local else ""
                )
                text = f"{header}\n```{unit.lang}\n" + "\n".join(body) + "\n```"
                self._texts[cache_key] = (text, self.counter.count(text + _SEP_FULL))
        return self._texts[cache_key]

    def _skeleton_text(self, key: Key, unit: _Unit) -> str:
        if isinstance(key, tuple):
            lines = self.repo.lines(unit.path) or []
            first = next((ln.strip() for ln in lines[unit.start - 1 : unit.end] if ln.strip()), "")
            return f"{unit.path}:{unit.start}-{unit.end}  {_clip(first)}"
        sym = self.repo.syms[key]
        doc = sym.doc.strip().splitlines()[0].strip() if sym.doc.strip() else ""
        if sym.kind == "module":
            text = f"{sym.path}  module {sym.qualname}"
        else:
            sig = _clip(" ".join(sym.signature.split())) or f"{sym.kind} {sym.name}"
            nested = sym.local if "." in sym.local else ""
            text = f"{sym.path}:{sym.start}-{sym.end}  " + (f"{nested}: " if nested else "") + sig
        return text + (f"  — {_clip(doc, 120)}" if doc else "")


def _sym_unit(sym: _Sym) -> _Unit:
    return _Unit(sym.path, sym.start, sym.end, sym.qualname, sym.local, sym.language)


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _merge_reasons(into: list[Reason], more: Sequence[Reason], symbol: str = "") -> None:
    """Add reasons of an absorbed candidate, except edges inside the item (a member's
    "enclosed-by" its class, or calls between its methods, say nothing once the class is the
    item)."""
    for r in more:
        inner = symbol and (r.via == symbol or r.via.startswith(symbol + "."))
        if r in into or inner:
            continue
        if not r.via:  # a hit: one per signal, its best rank (several signals say more)
            same = next((i for i, x in enumerate(into) if not x.via and x.source == r.source), None)
            if same is not None:
                if r.rank and (not into[same].rank or r.rank < into[same].rank):
                    into[same] = r
                continue
        if len(into) < 6:
            into.append(r)
