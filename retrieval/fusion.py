"""One fusion for every caller: the hits of all signals (`retrieval.signals`) become ranked
files, ranked units (definitions) and ranked chunks.

Every candidate gets features from each signal — how high the signal ranked it (``rr``), its
score relative to the signal's best (``rel``) and, for signals that hit chunks or definitions,
how many of its parts were hit (``n``) — and its score is a weighted sum of them. The weights are
fitted on the localization development tasks (`benchmarks/fit_fusion.py`, cross-validated by
repository) and ship as `retrieval/fusion_weights.json`; refit them on your own history with the
same script. Signals the weights do not know count through reciprocal rank fusion, so a new
signal works before it is fitted.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from .signals import Hit
from .units import Unit, UnitCache

if TYPE_CHECKING:
    from indexer import Index

WEIGHTS_FILE = Path(__file__).with_name("fusion_weights.json")
#: Reciprocal rank fusion constant for signals without fitted weights.
RRF_K = 60
#: Files whose units are all candidates (not only the hit ones), best first.
UNIT_FILES = 5


@dataclass(frozen=True, slots=True)
class Evidence:
    """What one signal said about a candidate: its best rank (1-based) and score there."""

    signal: str
    rank: int
    score: float
    note: str = ""


@dataclass(frozen=True, slots=True)
class RankedFile:
    path: str
    score: float
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True, slots=True)
class RankedUnit:
    unit: Unit
    score: float
    evidence: tuple[Evidence, ...]

    @property
    def path(self) -> str:
        return self.unit.path


@dataclass(frozen=True, slots=True)
class RankedChunk:
    hit: Hit
    score: float
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class Ranking:
    files: tuple[RankedFile, ...]
    units: tuple[RankedUnit, ...]
    #: Each signal's own hits, as it ranked them (`ranked_chunks` orders chunks from them).
    runs: Mapping[str, Sequence[Hit]] = field(default_factory=dict)


@dataclass(frozen=True)
class FusionModel:
    """Feature weights for files and for units; ``name`` says where they came from.

    ``variants`` are the same fit without some signals — ``(missing, model)``, e.g. without
    ``semantic`` for an index that has no vectors: weights fitted with a signal present lean on
    it, so a search that cannot run it uses the weights fitted without it (`for_signals`)."""

    file: Mapping[str, float]
    unit: Mapping[str, float]
    name: str = "rrf"
    variants: tuple[tuple[frozenset[str], FusionModel], ...] = ()

    def for_signals(self, present: Iterable[str]) -> FusionModel:
        """The variant fitted for the signals that ran: the one missing the most of the signals
        absent from ``present`` (and no signal that is there), else this model."""
        present = set(present)
        usable = [(missing, m) for missing, m in self.variants if not missing & present]
        return max(usable, key=lambda v: len(v[0]))[1] if usable else self

    @classmethod
    def rrf(cls) -> FusionModel:
        """Plain reciprocal rank fusion of every signal (equal weights): the hand baseline."""
        return cls({}, {}, "rrf")

    @classmethod
    def load(cls, path: str | Path | None = None) -> FusionModel:
        return _load(str(path or WEIGHTS_FILE))

    def to_json(self) -> dict:
        out = {"name": self.name, "file": dict(self.file), "unit": dict(self.unit)}
        if self.variants:
            out["variants"] = [
                {**m.to_json(), "missing": sorted(missing)} for missing, m in self.variants
            ]
        return out


@lru_cache(maxsize=8)
def _load(path: str) -> FusionModel:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return FusionModel.rrf()
    return _from_json(data, path)


def _from_json(data: dict, name: str) -> FusionModel:
    variants = tuple(
        (frozenset(v.get("missing", ())), _from_json(v, f"{name} without {', '.join(v.get('missing', ()))}"))
        for v in data.get("variants", ())
    )
    return FusionModel(data.get("file", {}), data.get("unit", {}), data.get("name", name), variants)


# -- features ----------------------------------------------------------------------------------


@dataclass
class _Acc:
    """Per candidate and signal: best rank, best score, count of hits."""

    rank: int = 10**9
    score: float = 0.0
    n: int = 0
    note: str = ""
    scale: str = ""

    def add(self, rank: int, score: float, note: str, scale: str = "") -> None:
        self.n += 1
        if rank < self.rank:
            self.rank, self.score, self.note, self.scale = rank, score, note, scale


def _known(weights: Mapping[str, float]) -> frozenset[str]:
    """The signals ``weights`` has features of."""
    return frozenset(k.split(".", 1)[0] for k in weights)


def _score(
    feats: Mapping[str, float],
    accs: Mapping[str, _Acc],
    weights: Mapping[str, float],
    known: frozenset[str],
) -> float:
    if not weights:
        return sum(1.0 / (RRF_K + a.rank) for a in accs.values())
    s = weights.get("bias", 0.0)
    for k, v in feats.items():
        s += weights.get(k, 0.0) * v
    # a signal the weights have never seen still counts, as in RRF
    s += sum(1.0 / (RRF_K + a.rank) for sig, a in accs.items() if sig not in known)
    return s


def _evidence(accs: Mapping[str, _Acc]) -> tuple[Evidence, ...]:
    return tuple(
        Evidence(sig, a.rank, round(a.score, 6), a.note)
        for sig, a in sorted(accs.items(), key=lambda kv: kv[1].rank)
    )


#: (signal, `Hit.scale`) -> the signal's best score on that scale. A signal's hits are ranked
#: within their scale: prose has lexical tables of its own whose BM25 is not on code's scale, and
#: the weights were fitted on code, so a code candidate gets the features it would get in a
#: search of code alone, prose the same among prose, and neither crowds the other out.
Tops = dict[tuple[str, str], float]


def _tops(runs: Mapping[str, Sequence[Hit]]) -> Tops:
    tops: Tops = {}
    for sig, hits in runs.items():
        for h in hits:
            key = (sig, h.scale)
            if h.score > tops.get(key, -math.inf):
                tops[key] = h.score
    return tops


def _features(accs: Mapping[str, _Acc], tops: Tops) -> dict[str, float]:
    out: dict[str, float] = {}
    for sig, a in accs.items():
        out[f"{sig}.rr"] = 1.0 / (a.rank + 1)
        top = tops.get((sig, a.scale)) or 0.0
        out[f"{sig}.rel"] = max(0.0, min(1.0, a.score / top)) if top > 0 else 0.0
        out[f"{sig}.n"] = math.log1p(a.n)
        out[f"{sig}.top1"] = 1.0 if a.rank == 1 else 0.0
        out[f"{sig}.top3"] = 1.0 if a.rank <= 3 else 0.0
    return out


def file_features(runs: Mapping[str, Sequence[Hit]]) -> tuple[dict[str, dict[str, _Acc]], Tops]:
    """Per file, per signal accumulators (ranks within the hit's scale); and each signal's top
    score per scale."""
    by_file: dict[str, dict[str, _Acc]] = defaultdict(dict)
    for sig, hits in runs.items():
        # rank among files on the scale: a file's second chunk does not push the next one down
        seen_rank: dict[str, dict[str, int]] = defaultdict(dict)
        for h in hits:
            seen = seen_rank[h.scale]
            if h.path not in seen:
                seen[h.path] = len(seen) + 1
            by_file[h.path].setdefault(sig, _Acc()).add(seen[h.path], h.score, h.note, h.scale)
    return by_file, _tops(runs)


def module_span(h: Hit) -> Unit:
    """Lines outside every definition that a chunk signal hit (imports, constants, scripts)."""
    return Unit(h.symbol, "", h.path, "module", h.start_line, h.end_line, None)


def unit_features(
    runs: Mapping[str, Sequence[Hit]], units: UnitCache, files: Iterable[str]
) -> tuple[dict[Unit, dict[str, _Acc]], Tops]:
    wanted = set(files)
    by_unit: dict[Unit, dict[str, _Acc]] = defaultdict(dict)
    for sig, hits in runs.items():
        seen_rank: dict[str, dict[Unit, int]] = defaultdict(dict)
        for h in hits:
            if h.path not in wanted or h.level == "file":
                continue
            if h.level == "symbol":
                u = units.find(h.path, h.symbol, h.start_line, h.end_line)
                hit_units = [u] if u is not None else []
            else:
                hit_units = [u for u in units.of(h.path) if u.overlaps(h.start_line, h.end_line)]
                if not hit_units:  # module-level lines: a unit of their own
                    hit_units = [module_span(h)]
            seen = seen_rank[h.scale]
            for u in hit_units:
                if u not in seen:
                    seen[u] = len(seen) + 1
                by_unit[u].setdefault(sig, _Acc()).add(seen[u], h.score, h.note, h.scale)
    return by_unit, _tops(runs)


# -- fusion ------------------------------------------------------------------------------------


def file_candidates(runs: Mapping[str, Sequence[Hit]]) -> list[tuple[str, dict[str, float], dict[str, _Acc]]]:
    """Every file some signal hit, with its features."""
    accs, tops = file_features(runs)
    return [(p, _features(a, tops), a) for p, a in sorted(accs.items())]


def unit_candidates(
    runs: Mapping[str, Sequence[Hit]],
    cache,
    file_order: Sequence[str],
    file_score: Mapping[str, float],
    unit_files: int = 30,
) -> list[tuple[Unit, dict[str, float], dict[str, _Acc]]]:
    """Units hit in the best ``unit_files`` files, and every unit of the best UNIT_FILES, with
    their features (their own, and their file's standing)."""
    top_files = list(file_order[:unit_files])
    uaccs, utops = unit_features(runs, cache, top_files)
    for path in top_files[:UNIT_FILES]:
        for u in cache.of(path):
            uaccs.setdefault(u, {})
    file_rank = {p: i for i, p in enumerate(file_order, 1)}
    best = file_score[file_order[0]] if file_order else 1.0
    best = best if best > 0 else 1.0
    out = []
    for u, a in uaccs.items():
        feats = _features(a, utops)
        feats["file.rr"] = 1.0 / (file_rank[u.path] + 1)
        feats["file.rel"] = max(0.0, file_score[u.path] / best)
        feats["kind.class"] = 1.0 if u.is_class else 0.0
        feats["kind.module"] = 1.0 if u.kind == "module" else 0.0
        feats["size"] = math.log1p(u.end - u.start + 1)
        out.append((u, feats, a))
    return out


def fuse(
    runs: Mapping[str, Sequence[Hit]],
    index: Index | None,
    model: FusionModel | None = None,
    *,
    unit_files: int = 30,
    cache=None,
) -> Ranking:
    """Rank files and units (definitions, and module-level lines that were hit) from the hits
    of every signal. ``cache`` (a `UnitCache`) defaults to one over ``index``."""
    model = (model or FusionModel.load()).for_signals(runs)
    known_file, known_unit = _known(model.file), _known(model.unit)
    scored_files = [
        RankedFile(path, _score(feats, a, model.file, known_file), _evidence(a))
        for path, feats, a in file_candidates(runs)
    ]
    scored_files.sort(key=lambda f: (-f.score, f.path))
    files = tuple(scored_files)
    order = [f.path for f in files]
    file_score = {f.path: f.score for f in files}
    rank = {p: i for i, p in enumerate(order, 1)}
    cache = cache if cache is not None else UnitCache(index)
    scored_units = []
    for u, feats, a in unit_candidates(runs, cache, order, file_score, unit_files):
        s = _score(feats, a, model.unit, known_unit)
        if not model.unit:  # RRF: the file's standing breaks ties between its units
            s += 0.01 / (rank[u.path] + 1)
        scored_units.append(RankedUnit(u, s, _evidence(a)))
    scored_units.sort(key=lambda r: (-r.score, r.unit.path, r.unit.start))
    return Ranking(files, tuple(scored_units), runs)


def ranked_chunks(ranking: Ranking, index: Index, k: int) -> list[RankedChunk]:
    """The best ``k`` chunks in unit order: for each ranked unit the chunks of it that a signal
    hit (best first), or the chunk where it starts when only its name or file was hit."""
    chunk_ev: dict[int, dict[str, _Acc]] = defaultdict(dict)
    chunk_hit: dict[int, Hit] = {}
    for sig, hs in ranking.runs.items():
        for rank, h in enumerate(hs, 1):
            if h.chunk_id is None:
                continue
            chunk_ev[h.chunk_id].setdefault(sig, _Acc()).add(rank, h.score, h.note)
            chunk_hit.setdefault(h.chunk_id, h)
    order: list[int] = []
    score: dict[int, float] = {}
    merged: dict[int, dict[str, Evidence]] = {}
    for ru in ranking.units:
        if len(order) >= k:
            break
        u = ru.unit
        mine = [
            cid for cid, h in chunk_hit.items()
            if h.path == u.path
            and (u.overlaps(h.start_line, h.end_line) if u.kind != "module"
                 else (h.start_line, h.end_line) == (u.start, u.end))
        ]
        mine.sort(key=lambda c: min((a.rank for a in chunk_ev[c].values()), default=10**9))
        if not mine and u.kind != "module":
            row = index.lexical.chunk_at(u.path, u.start)
            if row is not None:
                chunk_hit.setdefault(row[0], Hit("chunk", u.path, ru.score, row[1], row[0], row[2], row[3]))
                mine = [row[0]]
        for cid in mine[:2]:
            if cid not in merged:  # first reached through its best unit: that unit's score
                order.append(cid)
                score[cid] = ru.score
                merged[cid] = {e.signal: e for e in _evidence(chunk_ev.get(cid) or {})}
            ev = merged[cid]
            for e in ru.evidence:  # what the units around it were found by, best rank kept
                if e.signal not in ev or e.rank < ev[e.signal].rank:
                    ev[e.signal] = e
    out = [RankedChunk(chunk_hit[c], score[c], tuple(sorted(merged[c].values(), key=lambda e: e.rank)))
           for c in order]
    return out[:k]
