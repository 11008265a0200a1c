"""Step 2 of assembly: the seeds and their graph neighbourhood ranked by personalized PageRank,
with the edges that explain each candidate."""

from __future__ import annotations

from indexer import is_test_path

from ..pagerank import collect_subgraph, personalized_pagerank
from .records import NAMING_SOURCES, Key, PackPolicy, Reason
from .repo import Repo
from .seeds import Seeds

# --------------------------------------------------------------------------- ranking


def key_path(repo: Repo, seeds: Seeds, key: Key) -> str:
    if isinstance(key, tuple):
        return key[1]
    sym = repo.syms.get(key)
    return sym.path if sym is not None else ""


def rank_candidates(
    repo: Repo, seeds: Seeds, policy: PackPolicy
) -> tuple[dict[Key, float], dict]:
    """Scores of every candidate and edge reasons of those reached through the graph."""
    tw = policy.test_weight

    def damp(key: Key, w: float) -> float:
        if (
            tw == 1.0
            or key in seeds.pinned
            or not is_test_path(key_path(repo, seeds, key))
            or any(r.source in NAMING_SOURCES for r in seeds.reasons.get(key, ()))
        ):
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
            repo.index,
            sym_seeds,
            hops=policy.hops,
            fanout=policy.fanout,
            expand=policy.expand,
        )
        ranking = personalized_pagerank(graph, sym_seeds, alpha=policy.alpha)
        scores.update(ranking.scores)
        # span seeds are outside the graph: give them what a seed keeps after the walk
        for k, w in p.items():
            if not isinstance(k, int):
                scores[k] = policy.alpha * w
        top = sorted(
            (k for k in ranking.scores if k not in sym_seeds),
            key=lambda k: -ranking.scores[k],
        )[: policy.max_candidates]
        repo.load(
            [*sym_seeds, *top, *(e.src for k in top for e in ranking.via.get(k, ()))]
        )

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
        scores = {
            k: damp(k, v) if k not in p else v for k, v in scores.items() if k in keep
        }
    else:
        scores = dict(p)
        repo.load(sym_seeds)
    return scores, edge_reasons
