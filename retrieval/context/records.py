"""What a context pack is made of: its items, seeds and reasons, the packing policy, and how
it renders as prompt text."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

from indexer import RepoctxError

from ..pipeline import default_signals

#: Where a seed came from: focus, or a signal of `retrieval.pipeline.default_signals`.
HIT_SOURCES = ("focus", *(s.name for s in default_signals(local_vectors=True)))
#: Signals that find a definition because the task names it (not for sharing its words).
NAMING_SOURCES = ("focus", "symbol", "frame", "path")
FULL, SKELETON = "full", "skeleton"
PREAMBLE = (
    "Repository context selected for the task. Each block starts with `path:start-end` and "
    "holds those lines verbatim; the last section lists related definitions by signature only."
)
SKELETON_HEADER = "Related definitions (signatures only):"
SEP_FULL, SEP_SKEL = "\n\n", "\n"
#: No tokenizer here packs code into more bytes per token than this (o200k: at most 6.9 on
#: stdlib definitions; WordPiece skips whitespace): larger definitions are not even read.
MAX_BYTES_PER_TOKEN = 16


class ContextError(RepoctxError):
    """The context cannot be assembled — check the focus paths and the budget."""


@dataclass(frozen=True, slots=True)
class Reason:
    """Why an item is in the pack: a hit (``source`` in HIT_SOURCES, with its rank) or an
    edge of the reference graph (``source`` is the relation, read "<item> <relation> <via>",
    reached from ``seed``)."""

    source: str
    rank: int = 0
    via: str = ""
    seed: str = ""
    confidence: float = 0.0

    def __str__(self) -> str:
        if not self.via:  # a hit of a signal (or focus), not an edge of the graph
            return (
                f"{self.source} hit #{self.rank}" if self.rank else f"{self.source} hit"
            )
        text = f"{self.source} {self.via}"
        if self.seed and self.seed != self.via:
            text += f" (from seed {self.seed})"
        return text


@dataclass(frozen=True, slots=True)
class ContextItem:
    """One block of the pack: ``kind`` full (the lines, verbatim) or skeleton (signature and
    first doc line). ``start_line``-``end_line`` are the lines whose content the item holds:
    for a skeleton only its definition's first line (its text names the whole span)."""

    path: str
    start_line: int
    end_line: int
    symbol: str  # module-qualified definition, '' for module-level lines
    kind: str
    text: str
    tokens: int
    score: float
    reasons: tuple[Reason, ...]

    @property
    def span(self) -> tuple[int, int]:
        return (self.start_line, self.end_line)


@dataclass(frozen=True, slots=True)
class Seed:
    """A starting point: a search hit, a name or path in the task, or a focus file."""

    source: str
    rank: int
    path: str
    start_line: int
    end_line: int
    symbol: str
    score: float


@dataclass(frozen=True)
class ContextPack:
    task: str
    budget: int
    used_tokens: int  # of render(), counted by ``tokenizer``
    items: tuple[ContextItem, ...]
    seeds: tuple[Seed, ...]
    timings: dict[str, float]  # milliseconds per phase
    tokenizer: str = ""
    warnings: tuple[str, ...] = ()
    line_numbers: bool = False
    #: The fused ranking the seeds came from (`retrieval.fusion.Ranking`); not serialized.
    ranking: object | None = field(default=None, repr=False, compare=False)

    def render(self) -> str:
        """The pack as prompt text: full blocks in rank order, then the skeleton list."""
        return render_blocks(
            [i.text for i in self.items if i.kind == FULL],
            [i.text for i in self.items if i.kind == SKELETON],
        )

    def covers(self, path: str, start_line: int, end_line: int) -> bool:
        """Whether a full item holds all of ``path:start_line-end_line``."""
        return any(
            i.kind == FULL
            and i.path == path
            and i.start_line <= start_line
            and end_line <= i.end_line
            for i in self.items
        )

    def to_dict(self) -> dict:
        d = asdict(replace(self, ranking=None))
        d.pop("ranking", None)
        for item, src in zip(d["items"], self.items, strict=True):
            item["reasons"] = [{**asdict(r), "text": str(r)} for r in src.reasons]
        return d


@dataclass(frozen=True)
class PackPolicy:
    """Knobs of assembly; the defaults were set on the localization development set (see the
    module docstring)."""

    #: Rank constant of the seeds' weights (smaller: top units dominate more). 1 (was 10): the
    #: share of changed functions falls steeply with rank (docs/context.md, "Packing by value").
    seed_k: int = 1
    #: Weight of focus seeds against the task's (the ranking's seeds weigh 1).
    source_weights: dict[str, float] = field(default_factory=lambda: {"focus": 3.0})
    #: Units of the fused ranking that seed the graph walk (120, was 40: with ``density`` small
    #: definitions ranked deeper can still earn their place; 40, 80, 100, 120 and 160 measured).
    unit_seeds: int = 120
    #: Fusion weights (`retrieval.fusion.FusionModel`); None: the shipped ones.
    model: object | None = None
    use_graph: bool = True  # False: seeds in fused order only (the baseline)
    alpha: float = 0.5  # PageRank restart probability (0.5, was 0.3: the seeds' order counts more)
    #: Hops of the graph walk around the seeds. 1 chosen over 2 by `benchmarks/context_cv.py`
    #: (see docs/context.md): a second hop mostly brought definitions that were not evidence.
    hops: int = 1
    fanout: int = 30
    expand: int = 120
    #: Of the budget full items may take; skeletons get the rest and what full items leave.
    #: 1.0 chosen over 0.9 by `benchmarks/context_cv.py` (see docs/context.md).
    full_share: float = 1.0
    item_share: float = 0.35  # largest single full item
    #: A member grows to its top-level class up to this share of the budget. 0.1 (was 0.5):
    #: packing orders a member by its own size, so growing it into a class of half the budget
    #: spent what its value per token never paid for (0, 0.1, 0.25 and 0.5 measured).
    expand_share: float = 0.1
    class_share: float = (
        0.5  # a class ranked for its own lines goes in whole up to this size
    )
    focus_share: float = 0.5  # whole focus files up to this size
    upgrade: bool = (
        True  # room left at the end shows skeletons in full (False: an outline)
    )
    max_candidates: int = 400
    #: Test code rarely is what a task is about: seeds and scores in test files count this much,
    #: so tests come after the code unless the task names them (a traceback frame, a path or a
    #: name of theirs: `NAMING_SOURCES`) or they are focus. 0.01 chosen over 0.3 by
    #: `benchmarks/context_cv.py` (see docs/context.md).
    test_weight: float = 0.01
    #: Whether test files compete in the ranking that picks the seeds. False (was True): they
    #: come in through the graph at ``test_weight``, as focus, or when the task names them (a
    #: definition's name, a traceback frame, a path: `Seeds._add_named`), so their many
    #: matches on the task's words take neither the seeds nor the second stage's best files
    #: from the code (docs/context.md, "Tests out of the seeding ranking").
    rank_tests: bool = False
    #: Whether docs and configs compete in the seeding ranking when the task does not ask about
    #: docs or setup (`seeds.asks_about_prose`). False (was True): README sections and
    #: changelog entries share an issue's words, and in the ranking they took the best files'
    #: places from the code (sphinx-9673's changed function fell from 2nd to 48th); a task
    #: that names a doc or config file by its path still seeds it (docs/context.md, "Docs out
    #: of the seeding ranking").
    rank_prose: bool = False
    #: Packing order: score / tokens ** density (0: score alone; 1: value per token). 0.5 chosen
    #: over 0, 0.35, 0.65 and 1 on the localization development set (docs/context.md).
    density: float = 0.5
    #: Below this many tokens a candidate counts as this large for ``density`` (a one-line
    #: definition is not worth a hundred times its score).
    density_floor: float = 64.0
    full_candidates: int = 200  # only this many of the best are tried in full at first
    line_numbers: bool = False  # prefix every code line with its number


Key = (
    int | tuple
)  # a symbol id, or ("span", path, start, end) for lines outside definitions


def render_blocks(fulls: Sequence[str], skeletons: Sequence[str]) -> str:
    if not fulls and not skeletons:
        return ""
    out = [PREAMBLE, SEP_FULL]
    for text in fulls:
        out += [text, SEP_FULL]
    if skeletons:
        out += [SKELETON_HEADER, SEP_SKEL]
        for text in skeletons:
            out += [text, SEP_SKEL]
    return "".join(out)
