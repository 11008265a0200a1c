"""Past commits vote for what they changed (BugLocator's history score, and after).

The commit messages in ``<index>/history.db`` (`indexer.history.store`) are searched with BM25 for
the task's terms; each of the most similar commits votes for the files it touched that still
exist in the index (renames followed), its vote — its similarity relative to the best commit —
split over those files. `HistorySymbols` sends the same votes to the definitions the commits
changed, mapped to today's definitions of the file by name (and enclosing class when the hunk
showed it). Merges and huge commits (reformatting, vendoring) do not vote.

Only commits reachable from the indexed HEAD are in the store, so no ranking sees the future.

    similar_commits(ctx, "crash when the column is empty", k=5)   # for people
    HistoryFiles().run(ctx, parse_query(text), k=50)               # a file-level signal
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from .query import Query, parse_query
from .signals import Hit, SignalContext

if TYPE_CHECKING:
    from indexer import HistoryReader, Index

_ISSUE_REF = re.compile(r"(?<![\w&])#(\d{1,7})\b")


@dataclass(frozen=True, slots=True)
class HistoryParams:
    """How commits vote. The defaults are the best of `benchmarks/history_signal.py` on the
    localization development tasks (see the History section of docs/search.md)."""

    #: Most similar commits that vote.
    depth: int = 50
    #: Commits touching more files than this do not vote (reformatting, vendoring, releases).
    huge: int = 50
    #: A commit's vote is split as ``similarity / n ** split`` over its n surviving files.
    split: float = 0.5
    #: Votes decay with the commit's age before HEAD: ``exp(-days / decay_days)``; 0: none.
    decay_days: float = 0.0
    #: Query terms kept (the rarest in the commit messages first).
    max_terms: int = 80
    #: Terms in more than this share of the commits are dropped (they cost most, weigh least).
    max_df: float = 1.0
    #: Only the newest this many commits (by commit time) vote; 0: all. (The index can be
    #: capped too: ``history_max_commits``.)
    window: int = 0
    #: BM25 column weights: subject, body, paths of the touched files.
    weights: tuple[float, float, float] = (2.0, 1.0, 0.0)


@dataclass(frozen=True, slots=True)
class CommitHit:
    """A past commit similar to a query, for people and models."""

    sha: str
    #: Author date, ISO 8601 (UTC).
    date: str
    subject: str
    #: BM25 of the message against the query (higher is more similar).
    score: float
    #: Paths as the commit left them (renames: the new path); at most 20.
    files: tuple[str, ...]
    #: How many files it touched in all.
    files_total: int
    #: False for merges and huge commits, which do not vote in the signals.
    votes: bool


@dataclass(slots=True)
class _Sim:
    id: int
    sha: str
    author_time: int
    commit_time: int
    subject: str
    files_total: int
    parents: int
    bm25: float
    weight: float = 0.0  # relative similarity (best = 1), decayed
    files: list[str] = field(default_factory=list)
    defs: list[tuple[str, str, str]] = field(default_factory=list)  # (path, name, parent)


_TOKEN = re.compile(r"[a-z0-9]+")


def _terms(reader: HistoryReader, q: Query, p: HistoryParams) -> str:
    """The FTS5 MATCH for ``q``: issue numbers (``#123``), then its rarest terms in the commit
    messages (IDF, as BM25 weighs them) up to ``p.max_terms``; terms no message has, or more
    than ``p.max_df`` of them have, are dropped. A pasted issue has hundreds of words: every
    term costs a posting list, and BM25 scores every commit any of them matches."""
    refs = [f"issue{n}" for n in dict.fromkeys(_ISSUE_REF.findall(q.text))]
    words = [t for t in dict.fromkeys([*refs, *q.terms]) if _TOKEN.fullmatch(t)]
    if not words:
        return ""
    stems = reader.stems(words)
    uniq = sorted({s for s in stems if s})
    df = reader.doc_counts(uniq)
    n = max(reader.commit_count(), 1)
    picked: dict[str, tuple[float, str]] = {}
    for word, stem in zip(words, stems, strict=True):
        d = df.get(stem)
        if d and stem not in picked and (d <= p.max_df * n or word in refs):
            boost = 100.0 if word in refs else 0.0
            picked[stem] = (boost + math.log(1 + (n - d + 0.5) / (d + 0.5)), word)
    best = sorted(picked.values(), reverse=True)[: p.max_terms]
    return " OR ".join('"' + w + '"' for _, w in best)


def _similar(ctx: SignalContext, q: Query, p: HistoryParams, which: str = "votes") -> list[_Sim]:
    """The ``p.depth`` commits most similar to ``q`` — ``votes``: those that vote; ``commits``:
    any but merges; ``all`` — with their files and changed definitions; shared by the signals
    of one search."""
    key = ("history", q.text, p, which)
    if key in ctx.cache:
        return ctx.cache[key]
    # None: not built, not a git tree, disabled or damaged; or this search leaves it out
    reader = ctx.index.history if ctx.history else None
    out = _query(reader, q, p, which) if reader is not None else []
    ctx.cache[key] = out
    return out


def _query(reader: HistoryReader, q: Query, p: HistoryParams, which: str) -> list[_Sim]:
    match = _terms(reader, q, p)
    if not match:
        return []
    rows = reader.similar(match, p.weights, depth=p.depth, which=which, huge=p.huge, window=p.window)
    sims = [_Sim(*r[:7], bm25=-r[7]) for r in rows]
    if not sims:
        return []
    best = max(s.bm25 for s in sims) or 1.0
    head_time = 0
    if p.decay_days > 0:
        head_time = reader.head_time()
    by_id = {s.id: s for s in sims}
    for s in sims:
        s.weight = s.bm25 / best
        if head_time:
            days = max(0, head_time - s.commit_time) / 86_400
            s.weight *= math.exp(-days / p.decay_days)
    for cid, path in reader.changed_paths(list(by_id)):
        by_id[cid].files.append(path)
    for cid, path, name, parent in reader.changed_definitions(list(by_id)):
        by_id[cid].defs.append((path, name, parent))
    return sims


class _Paths:
    """Paths as a commit knew them → the file the index has today (renames followed)."""

    def __init__(self, ctx: SignalContext) -> None:
        self.ctx = ctx
        self.known: dict[str, str | None] = {}  # path -> language ('' unknown), None: absent
        self.allowed: dict[str, bool] = {}  # existing path -> within the scope
        self.renames: dict[str, list[tuple[str, int]]] = {}
        self._reader: HistoryReader | None | bool = False  # False: not asked for yet

    def load(self, paths: set[str]) -> None:
        todo = [p for p in paths if p not in self.known]
        found = self.ctx.index.graph.indexed_languages(todo)
        for path in todo:
            self.known[path] = found.get(path)

    def current(self, path: str, since: int) -> str | None:
        """Today's path of ``path`` as of commit time ``since``; None if it is gone."""
        if path in self.allowed:  # it exists today: no rename to follow
            return path if self.allowed[path] else None
        seen = set()
        for _hop in range(8):
            self.load({path})
            lang = self.known[path]
            if lang is not None:
                if path not in self.allowed:
                    self.allowed[path] = self.ctx.scope.allows(path, lang or None)
                return path if self.allowed[path] else None
            if path in seen:
                return None
            seen.add(path)
            nxt = self._renamed(path, since)
            if nxt is None:
                return None
            path, since = nxt
        return None

    def _renamed(self, path: str, since: int) -> tuple[str, int] | None:
        """The first rename of ``path`` at or after ``since``: (new path, its commit time)."""
        if path not in self.renames:
            if self._reader is False:
                self._reader = self.ctx.index.history
            reader = self._reader
            self.renames[path] = [] if reader is None else reader.renames_of(path)  # type: ignore[union-attr]
        return next(((p, t) for p, t in self.renames[path] if t >= since), None)


def _note(s: _Sim) -> str:
    return f"commit {s.sha[:10]} {s.subject[:100]}"


class HistoryFiles:
    """Files that past commits similar to the query changed (level ``file``)."""

    name = "history"
    level = "file"

    def __init__(self, params: HistoryParams | None = None, name: str = "history") -> None:
        self.params = params or HistoryParams()
        self.name = name

    def run(self, ctx: SignalContext, query: Query, k: int) -> list[Hit]:
        sims = _similar(ctx, query, self.params)
        if not sims:
            return []
        paths = _Paths(ctx)
        paths.load({f for s in sims for f in s.files})
        scores: dict[str, float] = defaultdict(float)
        top: dict[str, tuple[float, _Sim]] = {}
        for s in sims:
            kept = {cur for f in s.files if (cur := paths.current(f, s.commit_time))}
            if not kept:
                continue
            vote = s.weight / len(kept) ** self.params.split
            for path in kept:
                scores[path] += vote
                if path not in top or vote > top[path][0]:
                    top[path] = (vote, s)
        ranked = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        return [Hit("file", path, sc, note=_note(top[path][1])) for path, sc in ranked]


class HistorySymbols:
    """Definitions that past commits similar to the query changed, as today's module-qualified
    names (level ``symbol``)."""

    name = "history_symbol"
    level = "symbol"

    def __init__(self, params: HistoryParams | None = None, name: str = "history_symbol") -> None:
        self.params = params or HistoryParams()
        self.name = name

    def run(self, ctx: SignalContext, query: Query, k: int) -> list[Hit]:
        sims = _similar(ctx, query, self.params)
        if not sims:
            return []
        paths = _Paths(ctx)
        scores: dict[tuple[str, str], float] = defaultdict(float)
        spans: dict[tuple[str, str], tuple[int, int]] = {}
        top: dict[tuple[str, str], tuple[float, _Sim]] = {}
        paths.load({d[0] for s in sims for d in s.defs})
        located = [[(paths.current(path, s.commit_time), name, parent)
                    for path, name, parent in dict.fromkeys(s.defs)] for s in sims]
        wanted: dict[str, set[str]] = defaultdict(set)
        for cur, name, _parent in (d for ds in located for d in ds):
            if cur is not None:
                wanted[cur].add(name)
        defs_of = {cur: _definitions(ctx.index, cur, names) for cur, names in wanted.items()}
        for s, defs in zip(sims, located, strict=True):
            targets: list[list[tuple[str, str, int, int, str]]] = []
            for cur, name, parent in defs:
                if cur is None:
                    continue
                cands = defs_of[cur].get(name, [])
                if parent:
                    cands = [c for c in cands if c[4] == parent] or cands
                if cands:
                    targets.append(cands)
            if not targets:
                continue
            vote = s.weight / len(targets) ** self.params.split
            for cands in targets:
                for qual, path, start, end, _parent in cands:
                    key = (path, qual)
                    share = vote / len(cands)
                    scores[key] += share
                    spans[key] = (start, end)
                    if key not in top or share > top[key][0]:
                        top[key] = (share, s)
        ranked = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        return [
            Hit("symbol", path, sc, symbol=qual, start_line=spans[(path, qual)][0],
                end_line=spans[(path, qual)][1], note=_note(top[(path, qual)][1]))
            for (path, qual), sc in ranked
        ]


def _definitions(
    index: Index, path: str, names: set[str]
) -> dict[str, list[tuple[str, str, int, int, str]]]:
    """Today's definitions of one file named ``names``: (qualname, path, start, end, parent)."""
    out: dict[str, list[tuple[str, str, int, int, str]]] = defaultdict(list)
    for name, qual, start, end, parent in index.graph.definitions_named_in_file(path, names):
        out[name].append((qual, path, start, end, parent))
    return out


def similar_commits(
    ctx: SignalContext, query: Query | str, k: int = 10, *, merges: bool = False
) -> list[CommitHit]:
    """The ``k`` past commits whose messages are most similar to ``query``, huge commits
    included (``votes`` says whether a commit counts in the signals); merge commits only with
    ``merges`` (they changed nothing of their own). Empty when the index has no history (not a
    git work tree, ``history = false``, not built yet)."""
    q = parse_query(query) if isinstance(query, str) else query
    p = HistoryParams()
    sims = _similar(ctx, q, HistoryParams(depth=k), "all" if merges else "commits")
    return [
        CommitHit(
            sha=s.sha,
            date=datetime.fromtimestamp(s.author_time, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            subject=s.subject,
            score=round(s.bm25, 4),
            files=tuple(s.files[:20]),
            files_total=s.files_total,
            votes=s.parents <= 1 and 1 <= s.files_total <= p.huge,
        )
        for s in sims
    ]


def lookup_commit(index: Index, prefix: str) -> tuple[str, str] | None:
    """(sha, subject) of the one commit of HEAD's history whose sha starts with ``prefix``,
    or None (unknown, ambiguous, or no history index)."""
    if not re.fullmatch(r"[0-9a-f]{4,40}", prefix):
        return None
    reader = index.history
    if reader is None:
        return None
    rows = reader.commits_with_prefix(prefix)
    return (rows[0][0], rows[0][1]) if len(rows) == 1 else None
