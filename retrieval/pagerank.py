"""Ranking over the reference graph: the local subgraph around seed definitions (``hops`` hops of
calls, inheritance, type uses, imports and nesting) and personalized PageRank on it.

Every reference found adds an edge each way, weighted by its resolution confidence and by how
much the relation says about relevance: what a seed calls matters more than who calls it.
Ambiguous references contribute each candidate with its split confidence.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from indexer import Index

#: ref kind -> (relation of the target seen from the referrer, of the referrer seen from the
#: target). Read "<node> <relation> <via>": compute_tax called-by checkout_total.
REF_RELATIONS = {
    "call": ("called-by", "calls"),
    "inherit": ("inherited-by", "inherits"),
    "import": ("imported-by", "imports"),
    "type": ("used-by", "uses"),
    "attribute": ("used-by", "uses"),
}
#: Weight of moving along each relation (multiplied by the edge's confidence).
RELATION_WEIGHTS = {
    "called-by": 1.0,  # from a caller to what it calls
    "calls": 0.5,  # from a callee back to its callers
    "inherited-by": 0.8,  # to a base class
    "inherits": 0.3,  # to a subclass
    "used-by": 0.5,
    "uses": 0.25,
    "imported-by": 0.3,
    "imports": 0.1,
    "encloses": 0.6,  # from a member to its class (or a definition to its module)
    "enclosed-by": 0.4,  # from a class to its members
}


#: Relations that lead from a definition to what it refers to (damped at popular targets).
FORWARD = frozenset({"called-by", "inherited-by", "used-by", "imported-by"})
#: Above this many references, a definition's referrers are not expanded (``len``-like hubs
#: say nothing about a task, and reading their 30,000 callers costs a second).
HUB_DEGREE = 400


@dataclass(frozen=True, slots=True)
class Edge:
    """``dst`` reached from ``src``: "<dst> <relation> <src>"."""

    src: int
    dst: int
    relation: str
    confidence: float
    weight: float = 0.0  # transition weight before normalisation


def _damp(degree: int) -> float:
    """How much an edge into a definition referenced ``degree`` times is worth: 1 for a
    helper used a few times, 0.1 for one used a thousand times."""
    return (1.0 + degree / 10.0) ** -0.5


@dataclass(frozen=True)
class Subgraph:
    """Nodes (symbol ids) with their hop distance from the seeds, and edges between them."""

    hops: Mapping[int, int]
    edges: tuple[Edge, ...]


def _neighbours(
    index: Index, frontier: list[int], fanout: int, degree: dict[int, int]
) -> list[tuple[int, int, str, float]]:
    """Edges touching the frontier, both directions: per node, relation kind and direction
    only the ``fanout`` most confident (ranked in SQL: a hub has thousands of callers)."""
    quiet = [n for n in frontier if degree.get(n, 0) <= HUB_DEGREE]
    best: dict[tuple[int, int, str], float] = {}

    def add(src: int | None, dst: int | None, relation: str, conf: float) -> None:
        if src is None or dst is None or src == dst or conf <= 0:
            return
        key = (src, dst, relation)
        if conf > best.get(key, 0.0):
            best[key] = conf

    def refs(outgoing: bool, candidates: bool) -> None:
        ids = frontier if outgoing else quiet
        for enc, tgt, kind, conf in index.graph.strongest_edges(ids, outgoing=outgoing, fanout=fanout, candidates=candidates
        ):
            fwd, back = REF_RELATIONS.get(kind, ("used-by", "uses"))
            if outgoing:
                add(enc, tgt, fwd, conf)
            else:
                add(tgt, enc, back, conf)

    refs(outgoing=True, candidates=False)
    refs(outgoing=False, candidates=False)
    refs(outgoing=True, candidates=True)
    refs(outgoing=False, candidates=True)
    # Nesting: members and their classes; top-level definitions and their module.
    rows = index.graph.nesting_rows(frontier)
    top_files = sorted({f for _, parent, f, kind in rows if parent is None and kind != "module"})
    modules = index.graph.module_ids(top_files)
    for sid, parent, file_id, kind in rows:
        up = parent if parent is not None else (modules.get(file_id) if kind != "module" else None)
        add(sid, up, "encloses", 1.0)
        add(up, sid, "enclosed-by", 1.0)
    return [(s, d, rel, conf) for (s, d, rel), conf in best.items()]


def collect_subgraph(
    index: Index,
    seeds: Mapping[int, float],
    *,
    hops: int = 2,
    fanout: int = 30,
    expand: int = 120,
) -> Subgraph:
    """The seeds plus ``hops`` hops around them. Each node keeps its ``fanout`` strongest edges
    per relation (a helper called from 2,000 places adds 30 callers, not 2,000); only the
    ``expand`` most promising nodes of a hop are expanded further, and the referrers of hubs
    not at all. Edges into popular definitions are damped by their reference count."""
    dist: dict[int, int] = dict.fromkeys(seeds, 0)
    degree: dict[int, int] = {}
    raw: dict[tuple[int, int, str], float] = {}
    frontier = sorted(seeds, key=lambda n: -seeds[n])[:expand]
    mass = dict(seeds)
    for hop in range(1, hops + 1):
        if not frontier:
            break
        degree.update(index.graph.reference_counts([n for n in frontier if n not in degree]))
        by_group: dict[tuple[int, str], list[tuple[int, int, str, float]]] = defaultdict(list)
        for e in _neighbours(index, frontier, fanout, degree):
            src, dst = e[0], e[1]
            if dist.get(src) == hop - 1:
                by_group[(src, e[2])].append(e)
            elif dst in dist and src in dist:
                raw[(src, dst, e[2])] = e[3]
        reached: dict[int, float] = defaultdict(float)
        for group in by_group.values():
            group.sort(key=lambda e: -e[3] * RELATION_WEIGHTS[e[2]])
            for src, dst, rel, conf in group[:fanout]:
                raw[(src, dst, rel)] = conf
                if dst not in dist:
                    reached[dst] += mass.get(src, 0.0) * conf * RELATION_WEIGHTS[rel]
        for node in reached:
            dist[node] = hop
        mass.update(reached)
        frontier = sorted(reached, key=lambda n: -reached[n])[:expand]
    degree.update(index.graph.reference_counts([n for n in dist if n not in degree]))
    # Edges back towards the seeds make the walk symmetric inside the subgraph.
    for (src, dst, rel), conf in list(raw.items()):
        raw.setdefault((dst, src, _INVERSE[rel]), conf)
    edges = []
    for (src, dst, rel), conf in raw.items():
        if src in dist and dst in dist:
            w = (
                RELATION_WEIGHTS[rel]
                * conf
                * (_damp(degree.get(dst, 0)) if rel in FORWARD else 1.0)
            )
            edges.append(Edge(src, dst, rel, conf, w))
    return Subgraph(dist, tuple(edges))


_INVERSE = {
    "called-by": "calls",
    "calls": "called-by",
    "inherited-by": "inherits",
    "inherits": "inherited-by",
    "used-by": "uses",
    "uses": "used-by",
    "imported-by": "imports",
    "imports": "imported-by",
    "encloses": "enclosed-by",
    "enclosed-by": "encloses",
}


@dataclass(frozen=True)
class Ranking:
    """PageRank scores per node and its strongest incoming edges from nodes nearer the seeds
    (for seeds: from other seeds), for provenance."""

    scores: Mapping[int, float]
    via: Mapping[int, tuple[Edge, ...]]


def personalized_pagerank(
    graph: Subgraph,
    personalization: Mapping[int, float],
    *,
    alpha: float = 0.3,
    iterations: int = 40,
    tol: float = 1e-9,
    reasons: int = 2,
) -> Ranking:
    """Power iteration of r = alpha * p + (1 - alpha) * W^T r on the subgraph, W the
    row-normalised edge weights; dangling mass returns to the seeds."""
    nodes = list(graph.hops)
    if not nodes:
        return Ranking({}, {})
    index = {n: i for i, n in enumerate(nodes)}
    n = len(nodes)
    p = np.zeros(n)
    for node, w in personalization.items():
        if node in index:
            p[index[node]] += w
    if p.sum() <= 0:
        p[:] = 1.0
    p /= p.sum()
    edges = graph.edges
    src = np.fromiter((index[e.src] for e in edges), dtype=np.int64, count=len(edges))
    dst = np.fromiter((index[e.dst] for e in edges), dtype=np.int64, count=len(edges))
    w = np.fromiter((e.weight for e in edges), dtype=np.float64, count=len(edges))
    out = np.bincount(src, weights=w, minlength=n)
    norm = np.divide(w, out[src], out=np.zeros_like(w), where=out[src] > 0)
    dangling = out == 0
    r = p.copy()
    for _ in range(iterations):
        spread = np.bincount(dst, weights=r[src] * norm, minlength=n)
        new = alpha * p + (1 - alpha) * (spread + r[dangling].sum() * p)
        done = np.abs(new - r).sum() < tol
        r = new
        if done:
            break
    scores = {node: float(r[i]) for node, i in index.items()}
    flow = r[src] * norm
    incoming: dict[int, list[tuple[float, Edge]]] = defaultdict(list)
    hops = graph.hops
    for k, e in enumerate(edges):
        # from nearer the seeds, or between seeds (a seed can also be a callee of another)
        if hops[e.src] < hops[e.dst] or hops[e.src] == hops[e.dst] == 0:
            incoming[e.dst].append((float(flow[k]), e))
    via = {
        node: tuple(e for _, e in sorted(cands, key=lambda t: -t[0])[:reasons])
        for node, cands in incoming.items()
    }
    return Ranking(scores, via)
