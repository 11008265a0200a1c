"""Step 1 of assembly: seeds from focus entries and from the task's fused ranking, with the
chunks that were hit (where a definition too long to show whole is cut)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from indexer import RepoctxError, is_test_path

from ..pipeline import DEPTH, default_signals
from ..signals import Scope, SignalContext
from ..tokens import TokenCounter
from .records import ContextError, Key, PackPolicy, Reason, Seed
from .repo import Repo, Sym

if TYPE_CHECKING:
    from ..search import Searcher

#: With ``PackPolicy.rank_prose`` and a task that does not ask about docs or setup, docs and
#: configs (README sections, YAML keys) seed with this share of a code unit's weight, and at most
#: DOCS_SEEDS of them: code comes first.
DOCS_PRIOR = 0.5
DOCS_SEEDS = 2
#: Tests, docs and configs the task names (see `Seeds._add_named`), per naming signal.
NAMED_SEEDS = 10
#: Words only a question about docs or setup uses ("how do I", "the README", "the Makefile").
#: Not "how to reproduce", the heading of the usual issue template.
_ASKS_DOCS = re.compile(
    r"\b(?:readme|changelog|tutorial|dockerfile|makefile|licen[cs]e"
    r"|how (?:do|can|should) (?:i|we|you|one)|how to (?!reproduce)[a-z]+"
    r"|install(?:ation)? (?:guide|instructions|steps))\b",
    re.I,
)
#: Words that ask about docs in a short question but come up in passing in a pasted issue: an
#: issue template's "installed versions", "the docs say", sphinx's "documentation" (the older
#: cue, these words anywhere, fired on 58 of the 98 development issues).
_MENTIONS_DOCS = re.compile(  # as words, not as parts of a path ("docs/x.md" is named)
    r"(?<![/.])\b(?:docs?|documentation|documented|install\w*|guide|ya?ml|toml"
    r"|config(?:uration)? files?)\b(?!/|\.\w)",
    re.I,
)
#: The files of code, not docs or configs (a language repoctx does not know counts as code).
CODE = Scope(kinds=("code",))
#: A task of at most this many words is a question (or a commit message), not a pasted issue.
SHORT_TASK = 30


def asks_about_prose(task: str) -> bool:
    """Whether the task is about docs or setup, so that docs and configs compete with code for
    the seeds (see ``PackPolicy.rank_prose``)."""
    if _ASKS_DOCS.search(task):
        return True
    return len(task.split()) <= SHORT_TASK and bool(_MENTIONS_DOCS.search(task))


def _names_a_test(sym: Sym) -> bool:
    """A test function, method or class (``test_x``, ``TestX``, ``TestX.test_y``), not a
    helper or a class a test defines (an issue's ``Foo.bar`` names ``Foo.bar`` inside sphinx's
    ``test_safe_getattr_with_property_exception``)."""
    return sym.name.lower().startswith("test")


# --------------------------------------------------------------------------- seeds


class Seeds:
    """Seed scores (the personalization vector), hit reasons and seed records."""

    def __init__(self, repo: Repo, policy: PackPolicy) -> None:
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
        w = (
            self.policy.source_weights.get(source, 1.0)
            / (self.policy.seed_k + rank)
            * share
        )
        self.weight[key] += w
        if not any(r.source == source for r in self.reasons[key]):
            self.reasons[key].append(Reason(source, rank))

    def _span_key(self, path: str, start: int, end: int) -> tuple:
        key = ("span", path, start, end)
        self.spans[key] = (path, start, end)
        return key

    # -- focus ----------------------------------------------------------------------------

    def add_focus(
        self, focus: Sequence[str], counter: TokenCounter, budget: int
    ) -> None:
        order = 0
        for entry in focus:
            for path, span in self._focus_paths(entry):
                lines = self.repo.lines(path)
                if lines is None:
                    raise ContextError(
                        f"Cannot read focus file {path} — check the path."
                    )
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
            (m.group(1), (int(m.group(2)), int(m.group(3) or m.group(2))))
            if m
            else (entry, None)
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
        self, task: str, searcher: Searcher | None, warnings: list[str], ranking=None,
        history: bool = True,
    ) -> None:
        """Seeds from the fused ranking of every signal (`retrieval.pipeline`), in its order:
        the same ranking `search`, the agent and the MCP server use."""
        from ..pipeline import rank

        use_vectors = searcher is not None and searcher.semantic_coverage() > 0
        asks_docs = asks_about_prose(task)
        given = ranking

        def signals(vectors: bool):
            # without the graph: neither its signal in the ranking nor the walk below
            return [
                s
                for s in default_signals(vectors=vectors)
                if self.policy.use_graph or s.name != "graph"
            ]

        def ranked(prose: bool):
            scope = Scope(
                exclude_tests=not self.policy.rank_tests, kinds=() if prose else CODE.kinds
            )
            ctx = SignalContext(self.repo.index, scope, searcher=searcher, history=history)
            if given is not None:  # an earlier call's, for the same task
                return ctx, given
            try:
                return ctx, rank(ctx, task, signals(use_vectors), self.policy.model)
            except RepoctxError as exc:  # vectors unreadable: rank without them, and say so
                if (msg := f"semantic search unavailable: {exc}") not in warnings:
                    warnings.append(msg)
                return ctx, rank(ctx, task, signals(False), self.policy.model)

        prose_ranked = asks_docs or self.policy.rank_prose
        ctx, ranking = ranked(prose_ranked)
        damaged = getattr(searcher, "vectors_damaged", None)
        if damaged:  # the semantic signal answered nothing: say why, in one line
            msg = (f"semantic search unavailable: {damaged} — `repoctx index verify --repair` "
                   "sets it aside and re-embeds")
            if msg not in warnings:
                warnings.append(msg)
        if not prose_ranked and (
            not any(ru.evidence for ru in ranking.units)  # the code has nothing to say
            or any(not CODE.allows(ru.unit.path) for ru in ranking.units)  # handed a fallback
        ):  # a repository of docs, or a question only they answer: they answer, as if asked
            asks_docs = prose_ranked = True
            ctx, ranking = ranked(True)
        self.ranking = ranking
        self.timings = ctx.cache.get("timings", {})
        n = 0
        prose = 0  # docs and config units seeded so far (see DOCS_PRIOR)
        for ru in ranking.units:
            if n >= self.policy.unit_seeds:
                break
            u = ru.unit
            if (
                not ru.evidence
            ):  # ranked for its file's sake only: not evidence of its own
                continue
            code = asks_docs or CODE.allows(u.path)
            if not code:
                if prose >= DOCS_SEEDS:
                    continue
                prose += 1
            if u.kind == "module":
                key: Key = self._span_key(u.path, u.start, u.end)
            else:
                sym = self._unit_symbol(u.path, u.qualname, u.start)
                if sym is None:
                    continue
                key = sym.id
            n += 1
            w = (1.0 if code else DOCS_PRIOR) / (self.policy.seed_k + n)
            self.weight[key] += w
            for e in ru.evidence[:4]:
                if not any(r.source == e.signal for r in self.reasons[key]):
                    self.reasons[key].append(Reason(e.signal, e.rank))
            top = ru.evidence[0].signal if ru.evidence else "fused"
            self.records.append(
                Seed(top, n, u.path, u.start, u.end, u.qualname, round(w, 6))
            )
        if not self.policy.rank_tests or not prose_ranked:
            self._add_named(task, ctx)
        for hits in ranking.runs.values():
            for h in hits:
                if h.chunk_id is None:
                    continue
                around = [
                    s
                    for s in self.repo.symbols_between(
                        h.path, h.start_line, h.start_line
                    )
                ]
                if around:
                    inner = min(around, key=lambda s: s.end - s.start)
                    self.hit_spans[inner.id].append((h.start_line, h.end_line))

    def _add_named(self, task: str, ctx) -> None:
        """What the ranking's scope left out but the task names seeds at the weight of its rank
        in the naming signal: a test by a definition's name, a traceback frame or a path (a
        task about a failing test is about that test), a doc or config file by its path (a
        task that names ``docs/usage.rst`` is about it)."""
        from dataclasses import replace

        from ..query import parse_query
        from ..sources import Frames, Names, Paths

        q = parse_query(task)
        # the same per-search cache: these signals keep only the path index there (every
        # indexed path, whatever the scope), which the ranking has already read
        every = replace(ctx, scope=Scope())
        for sig in (Frames(), Names(), Paths()):
            rank = 0
            for h in sig.run(every, q, DEPTH):
                if rank >= NAMED_SEEDS:
                    break
                test = is_test_path(h.path)
                if ctx.scope.allows(h.path) or (not test and sig.name != "path"):
                    continue  # ranked already; or prose named other than by its path
                if h.level == "symbol":
                    sym = self._unit_symbol(h.path, h.symbol, h.start_line)
                    if sym is None or (sig.name == "symbol" and not _names_a_test(sym)):
                        continue
                    key: Key = sym.id
                    start, end, qual = sym.start, sym.end, sym.qualname
                else:
                    n = len(self.repo.lines(h.path) or ()) or 1
                    key, start, end, qual = self._span_key(h.path, 1, n), 1, n, ""
                rank += 1
                self._credit(key, sig.name, rank)
                self.records.append(
                    Seed(sig.name, rank, h.path, start, end, qual, round(self.weight[key], 6))
                )

    def _unit_symbol(self, path: str, qualname: str, start: int) -> Sym | None:
        for s in self.repo.file_symbols(path):
            if s.qualname == qualname and s.start == start:
                return s
        return None
