"""Budgeted context assembly: the code a model needs for a task, within a token budget.

1. Seeds. The best definitions of the one fused ranking (`retrieval.pipeline.rank`: lexical,
   whole-file, names through the graph, paths and traceback frames, error messages, vectors,
   history and the graph signal, weighed by the fitted fusion) of the code — tests, docs and
   configs out unless the task names them or asks about docs — in that order, plus focus
   files; the chunks that were hit mark where a definition too long to show whole is cut.
2. Expansion. One hop (``PackPolicy.hops``) over the reference graph (calls, inheritance, type
   uses, imports, nesting; ambiguous references through their candidates), ranked by
   personalized PageRank seeded with step 1 (`retrieval.pagerank`).
3. Packing. By value per token (score / tokens ** ``PackPolicy.density``), definitions go in
   whole (a method grows to its class when the class fits in ``expand_share`` of the budget),
   overlapping spans merge, a definition too large for one item is cut to the chunk that was
   hit; once full items have used ``full_share`` of the budget the rest are signature-only
   skeletons (signature and first doc line). The budget is filled until no further skeleton
   fits, counted with a real tokenizer, and the final text is counted again.
4. Provenance. Every item says why it is there: the hit (source and rank) or the edge
   (relation, neighbour, seed it came from), with its token cost and score.

Tokens are counted with `retrieval.tokens` (o200k BPE from quicktok-v1 when installed, else
the MiniLM WordPiece); see that module for how its counts compare with other LLM tokenizers.

Measured by `benchmarks/localization.py` (context recall: the share of the changed functions
whose whole definition is in the pack; figures in docs/context.md, "How the context is chosen").
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from indexer import is_test_path

from ..tokens import TokenCounter, get_tokenizer
from .pack import Packer
from .rank import rank_candidates
from .records import (
    FULL,
    HIT_SOURCES,
    MAX_BYTES_PER_TOKEN,
    PREAMBLE,
    SKELETON,
    SKELETON_HEADER,
    ContextError,
    ContextItem,
    ContextPack,
    PackPolicy,
    Reason,
    Seed,
    render_blocks,
)
from .repo import Repo
from .seeds import Seeds

if TYPE_CHECKING:
    from indexer import Index

    from ..fusion import Ranking
    from ..search import Searcher

__all__ = [
    "FULL",
    "HIT_SOURCES",
    "MAX_BYTES_PER_TOKEN",
    "PREAMBLE",
    "SKELETON",
    "SKELETON_HEADER",
    "ContextError",
    "ContextItem",
    "ContextPack",
    "PackPolicy",
    "Reason",
    "Seed",
    "assemble_context",
    "is_test_path",
]


# --------------------------------------------------------------------------- entry point


def assemble_context(
    index: Index,
    task: str,
    budget_tokens: int,
    *,
    focus: Sequence[str] = (),
    searcher: Searcher | None = None,
    tokenizer: TokenCounter | str | None = None,
    policy: PackPolicy | None = None,
    ranking: Ranking | None = None,
    history: bool | None = None,
) -> ContextPack:
    """Assemble the context for ``task`` from ``index`` within ``budget_tokens`` tokens of
    ``tokenizer``.

    ``searcher`` (a `retrieval.search.Searcher` of the same index) supplies semantic hits when
    the index has vectors. ``history``: whether past commits vote (the history signals; by
    default when a searcher is given, so a bare call ranks by the code alone, lexical and
    exact); ``history=True`` without a searcher makes one, so vectors vote too. ``focus`` entries are paths relative to the index's root (files or directories,
    with an optional ``:line`` or ``:start-end``). ``ranking`` (a `retrieval.fusion.Ranking` of
    this task, e.g. from an earlier call's ``pack.ranking``) skips ranking again."""
    t0 = time.perf_counter()
    policy = policy or PackPolicy()
    counter = (
        tokenizer if isinstance(tokenizer, TokenCounter) else get_tokenizer(tokenizer)
    )
    repo = Repo(index)
    timings: dict[str, float] = {}
    warnings: list[str] = []
    seeds = Seeds(repo, policy)
    seeds.add_focus(focus, counter, budget_tokens)
    if history is None:
        history = searcher is not None
    elif history and searcher is None:  # past commits and vectors come together, as they did
        from ..search import Searcher

        searcher = Searcher(index)
    seeds.add_task(task, searcher, warnings, ranking, history)
    timings["seeds"] = _ms(t0)

    t1 = time.perf_counter()
    scores, edge_reasons = rank_candidates(repo, seeds, policy)
    timings["rank"] = _ms(t1)

    t2 = time.perf_counter()
    packer = Packer(repo, counter, budget_tokens, policy)
    items = packer.pack(seeds, scores, edge_reasons)
    text = render_blocks(
        [i.text for i in items if i.kind == FULL],
        [i.text for i in items if i.kind == SKELETON],
    )
    used = counter.count(text)
    while used > budget_tokens and items:  # token merges across block boundaries
        drop = max(range(len(items)), key=lambda k: (items[k].kind == SKELETON, k))
        items.pop(drop)
        text = render_blocks(
            [i.text for i in items if i.kind == FULL],
            [i.text for i in items if i.kind == SKELETON],
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
