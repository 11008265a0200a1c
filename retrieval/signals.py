"""Ranking signals: each turns a parsed query into ranked hits at one level, and
`retrieval.fusion.fuse` combines them. `search`, `context`, the agent and the MCP server all rank
through the same signals and the same fusion, so a new signal is one class and is measured the
same way everywhere (`benchmarks/localization.py` runs each alone and fused).

Levels: ``file`` hits name a file (whole-file BM25, a path in the task, past commits that changed
it); ``symbol`` hits name a definition by its module-qualified name (an identifier in the task,
a traceback frame, a definition a past commit changed); ``chunk`` hits name an indexed chunk
(lexical and vector search over chunks).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from indexer import FileFilter, is_test_path, kind_of, language_for_path, languages_of_kind

if TYPE_CHECKING:
    from indexer import Index

    from .query import Query

Level = Literal["file", "symbol", "chunk"]


@dataclass(frozen=True, slots=True)
class Hit:
    """One ranked result of a signal. ``score`` is the signal's own (higher is better)."""

    level: Level
    path: str
    score: float
    #: Module-qualified definition for ``symbol`` hits (and the chunk's definition for chunks).
    symbol: str = ""
    chunk_id: int | None = None
    start_line: int = 0
    end_line: int = 0
    #: Provenance for people and models ("commit 1a2b3c4 Fix ...", "traceback frame").
    note: str = ""
    #: What ``score`` is measured against, where one signal reads sources whose scores are not
    #: comparable: the lexical table (code's and prose's FTS5 BM25 each weigh terms by their own
    #: statistics). Fusion ranks a signal's hits within each scale.
    scale: str = ""


@dataclass(frozen=True, slots=True)
class Scope:
    """Filters every signal applies: a language, a path glob, tests left out, file kinds
    (code | docs | config: only files of these kinds; empty: any)."""

    lang: str | None = None
    path_glob: str | None = None
    exclude_tests: bool = False
    kinds: tuple[str, ...] = ()

    @property
    def glob(self) -> str | None:
        g = self.path_glob
        if not g:
            return None
        return g if any(ch in g for ch in "*?[") else g.rstrip("/") + "*"

    def allows(self, path: str, language: str | None = None) -> bool:
        if self.exclude_tests and is_test_path(path):
            return False
        if self.lang and language is not None and language != self.lang:
            return False
        if self.kinds and kind_of(language or language_for_path(path) or "") not in self.kinds:
            return False
        g = self.glob
        return g is None or fnmatch.fnmatchcase(path, g)

    @property
    def files(self) -> FileFilter:
        """The same filters, for reads of the index."""
        langs = languages_of_kind(self.kinds) if self.kinds else ()
        return FileFilter(self.lang, self.glob, self.exclude_tests, langs)


class VectorSearch(Protocol):
    """What the semantic signals ask of a searcher (`retrieval.search.Searcher`, which owns the
    embedder and the vector table): a Protocol, so the signals need not import the search that
    runs them."""

    def semantic_coverage(self) -> float: ...

    def semantic(self, query: str, k: int = ..., *, lang: str | None = None,
                 path_glob: str | None = None, exclude_tests: bool = False,
                 paths: Sequence[str] | None = None, kinds: Sequence[str] = ()) -> list: ...


@dataclass
class SignalContext:
    """What signals read: the index (its graph, lexical index and history), the filters, and
    resources shared by the signals of one search."""

    index: Index
    scope: Scope = field(default_factory=Scope)
    #: When vectors may be used: the searcher owns the embedder and the vector table.
    searcher: VectorSearch | None = None
    #: False: past commits do not vote (the history signals answer nothing).
    history: bool = True
    #: Per-search cache for signals that share work (e.g. the parsed history query).
    cache: dict = field(default_factory=dict)


class Signal(Protocol):
    """A source of ranked hits. ``name`` is how fusion weights, benchmarks and provenance
    refer to it; ``run`` returns at most ``k`` hits of each `Hit.scale`, best first."""

    name: str
    level: Level

    def run(self, ctx: SignalContext, query: Query, k: int) -> list[Hit]: ...
