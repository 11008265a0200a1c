"""Second-stage signals inside the best files: which definitions of the files the first fusion
ranked highest the task is about.

A file can rank first while the definition that must change gets no hit of its own: the
repository-wide lexical and vector searches return their best 50 chunks, and those crowd into a
few large definitions or other files. Localization research ranks hierarchically for this reason
(files first, then functions within them). These signals do the second step: the same lexical
query and the same query vector, restricted to the chunks of the first stage's best
``LOCAL_FILES`` files, so every definition there is ranked against the others of its file.
Like the graph they run after the first fusion (``stage = 2``); the fusion weighs their hits as
it does every signal's.
"""

from __future__ import annotations

from .fusion import UNIT_FILES
from .query import Query
from .signals import Hit, SignalContext
from .sources import ChunkLexical, Vectors

#: Files of the first-stage ranking whose definitions are ranked again: those whose every
#: definition the fusion makes a candidate.
LOCAL_FILES = UNIT_FILES


def best_files(ctx: SignalContext, n: int = LOCAL_FILES) -> list[str]:
    """The first stage's ``n`` best files (none before the first fusion ran)."""
    ranking = ctx.cache.get("seed_ranking")
    if ranking is None:
        return []
    return [f.path for f in ranking.files[:n] if ctx.scope.allows(f.path)]


#: Matches read (over all the best files together) before each file's best are taken.
_READ = 400


def per_file(hits: list[Hit], paths: list[str], k: int) -> list[Hit]:
    """The best ``k // len(paths)`` hits of each file, in rounds: every file's best, then every
    file's second best... (files in the first stage's order). A large file's many matches do not
    crowd out the others', and a hit's rank says first how good it is within its file."""
    by_file: dict[str, list[Hit]] = {p: [] for p in paths}
    for h in hits:  # best first
        if h.path in by_file:
            by_file[h.path].append(h)
    each = max(1, k // len(paths))
    out = []
    for i in range(each):
        out += [hs[i] for hs in by_file.values() if i < len(hs)]
    return out[:k]


class _InBestFiles:
    """A signal of the first stage, run again inside the first stage's best files only."""

    level = "chunk"
    stage = 2

    def __init__(self, files: int = LOCAL_FILES) -> None:
        self.files = files

    def run(self, ctx: SignalContext, q: Query, k: int) -> list[Hit]:
        paths = best_files(ctx, self.files)
        return per_file(self.hits(ctx, q, _READ, paths), paths, k) if paths else []

    def hits(self, ctx: SignalContext, q: Query, n: int, paths: list[str]) -> list[Hit]:
        raise NotImplementedError


class LocalLexical(_InBestFiles):
    """BM25 over the chunks of the first stage's best files, with the task's lexical query."""

    name = "lexical_local"

    def hits(self, ctx: SignalContext, q: Query, n: int, paths: list[str]) -> list[Hit]:
        return ChunkLexical("lexical", "all").hits(ctx, q, n, paths)


class LocalVectors(_InBestFiles):
    """The chunks of the first stage's best files nearest the task's vector (the query vector
    of the `semantic` signal, embedded once); nothing when the index has no vectors."""

    name = "semantic_local"

    def hits(self, ctx: SignalContext, q: Query, n: int, paths: list[str]) -> list[Hit]:
        return Vectors().hits(ctx, q, n, paths)
