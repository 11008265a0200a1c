"""Signals in, one ranking out: the path every caller takes (`search`, `context`, the agent and
the MCP server).

    ctx = SignalContext(index, scope=Scope(exclude_tests=True), searcher=searcher)
    ranking = rank(ctx, "issue text ...")
    ranking.files[0].path, ranking.units[0].unit.qualname, ranking.chunks[0].hit
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from .fusion import FusionModel, Ranking, fuse
from .query import parse_query
from .signals import Hit, Signal, SignalContext
from .units import UnitCache

#: Hits each signal contributes before fusion: deep enough to rank files and units to 10 and
#: beyond (a file is often hit by several chunks).
DEPTH = 50
#: Files whose definitions the first fusion (the graph signal's seeds) ranks.
SEED_FILES = 8


def default_signals(
    *, vectors: bool = True, history: bool = True, local_vectors: bool = False
) -> list[Signal]:
    """Every built-in signal (vectors and history when the index has them: they answer
    nothing otherwise). ``local_vectors`` adds `semantic_local` (vectors inside the best files):
    off by default — it adds 25–35 ms to a search (an exact scan of those files' vectors) for a
    gain the cross-validated figures do not show on issues (see the ablation in docs/search.md)."""
    from .graph_signal import Graph
    from .local_signals import LocalLexical, LocalVectors
    from .sources import ChunkLexical, Errors, FileLexical, Frames, Names, Paths, Vectors

    signals: list[Signal] = [
        ChunkLexical("lexical", "all"),
        ChunkLexical("lexical_code", "code"),
        FileLexical(),
        Names(),
        Paths(),
        Frames(),
        Errors(),
    ]
    if vectors:
        signals.append(Vectors())
    if history:
        try:
            from .history import HistoryFiles, HistorySymbols
        except ImportError:  # pragma: no cover - the history index is optional
            pass
        else:
            signals += [HistoryFiles(), HistorySymbols()]
    signals.append(Graph())
    signals.append(LocalLexical())
    if vectors and local_vectors:
        signals.append(LocalVectors())
    return signals


def unit_cache(ctx: SignalContext) -> UnitCache:
    """The units of the files one search looks at, read once for all its fusions."""
    got = ctx.cache.get("units")
    if got is None:
        got = ctx.cache["units"] = UnitCache(ctx.index)
    return got


@dataclass(frozen=True)
class Runs:
    hits: dict[str, list[Hit]]
    #: Milliseconds per signal.
    timings: dict[str, float]


def run_signals(
    ctx: SignalContext, text: str, signals: Sequence[Signal], k: int = DEPTH
) -> Runs:
    """Each signal's hits for ``text``. Second-stage signals (``stage = 2``: the graph, the
    signals inside the best files) see the first stage's fusion in ``ctx.cache['seed_ranking']``."""
    q = parse_query(text)
    hits: dict[str, list[Hit]] = {}
    timings: dict[str, float] = {}
    later = [s for s in signals if getattr(s, "stage", 1) == 2]
    for sig in signals:
        if sig in later:
            continue
        t0 = time.perf_counter()
        hits[sig.name] = sig.run(ctx, q, k)
        timings[sig.name] = round((time.perf_counter() - t0) * 1000, 2)
    if later:
        # the graph starts from the best few definitions: they come from the best few files
        ctx.cache["seed_ranking"] = fuse(
            hits, ctx.index, ctx.cache.get("model"), cache=unit_cache(ctx), unit_files=SEED_FILES
        )
        for sig in later:
            t0 = time.perf_counter()
            hits[sig.name] = sig.run(ctx, q, k)
            timings[sig.name] = round((time.perf_counter() - t0) * 1000, 2)
    return Runs(hits, timings)


def rank(
    ctx: SignalContext,
    text: str,
    signals: Sequence[Signal] | None = None,
    model: FusionModel | None = None,
    k: int = DEPTH,
) -> Ranking:
    """Fused ranking of files, units and chunks for ``text``."""
    if signals is None:
        signals = default_signals(vectors=ctx.searcher is not None)
    model = model or FusionModel.load()
    ctx.cache.setdefault("model", model)
    runs = run_signals(ctx, text, signals, k)
    ranking = fuse(runs.hits, ctx.index, model, cache=unit_cache(ctx))
    ctx.cache["timings"] = runs.timings
    return ranking
