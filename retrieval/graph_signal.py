"""The reference graph as a signal: from the strongest definitions of the first-stage fusion,
one hop over resolved edges — what they call and what calls them — weighted by the seed's
score and the edge's resolution confidence, damped at popular definitions."""

from __future__ import annotations

import math
from collections import defaultdict

from .query import Query
from .signals import Hit, SignalContext

#: Seeds taken from the first-stage ranking.
SEEDS = 8
#: Edges followed per seed and direction.
FANOUT = 40
#: A callee counts more than a caller: what the seed uses is part of its behaviour.
CALLEE, CALLER = 1.0, 0.6


class Graph:
    name = "graph"
    level = "symbol"
    stage = 2

    def run(self, ctx: SignalContext, q: Query, k: int) -> list[Hit]:
        ranking = ctx.cache.get("seed_ranking")
        if ranking is None or not ranking.units:
            return []
        graph = ctx.index.graph
        seeds = ranking.units[:SEEDS]
        top = seeds[0].score or 1.0
        seed_ids: dict[int, float] = {}
        for r in seeds:
            u = r.unit
            w = max(r.score / top, 0.05) if top > 0 else 1.0
            for sid in graph.definition_ids_within(u.path, u.start, u.end):
                seed_ids[sid] = max(seed_ids.get(sid, 0.0), w)
        if not seed_ids:
            return []
        scores: dict[int, float] = defaultdict(float)
        ids = list(seed_ids)
        for sid, tid, conf in graph.resolved_out_edges(ids):
            if tid not in seed_ids:
                scores[tid] += seed_ids[sid] * CALLEE * (conf or 0.5)
        for sid, eid, conf in graph.resolved_in_edges(ids, FANOUT * len(ids)):
            if eid not in seed_ids:
                scores[eid] += seed_ids[sid] * CALLER * (conf or 0.5)
        if not scores:
            return []
        cand = sorted(scores.items(), key=lambda kv: -kv[1])[: k * 3]
        cids = [c for c, _ in cand]
        rows = graph.definitions_with_popularity(cids)
        out = []
        for sid, s in cand:
            if sid not in rows:
                continue
            qual, path, a, b, kind, lang, popularity = rows[sid]
            if kind == "module" or not ctx.scope.allows(path, lang or None):
                continue
            out.append(Hit("symbol", path, s / math.log2(2 + popularity), symbol=qual,
                           start_line=a, end_line=b))
        out.sort(key=lambda h: -h.score)
        return out[:k]
