"""Step 3 of assembly: greedy packing by value per token (``PackPolicy.density``: score /
tokens ** density) with exact token accounting — whole definitions, a member grown to its small
class, overlapping spans merged, skeletons after."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from indexer import CLASS_KINDS, language_for_path, place, shown

from ..tokens import TokenCounter
from .records import (
    FULL,
    MAX_BYTES_PER_TOKEN,
    PREAMBLE,
    SEP_FULL,
    SEP_SKEL,
    SKELETON,
    SKELETON_HEADER,
    ContextItem,
    Key,
    PackPolicy,
    Reason,
)
from .repo import Repo, Sym
from .seeds import Seeds

# --------------------------------------------------------------------------- packing

#: Bytes per token of code, to size candidates before they are read (o200k: ~3.5-4.5).
GUESS_BYTES_PER_TOKEN = 4.0


@dataclass(frozen=True, slots=True)
class Unit:
    path: str
    start: int
    end: int
    symbol: str  # module-qualified
    local: str  # as written in its file
    lang: str


@dataclass(slots=True, eq=False)  # identity: two drafts may hold equal values
class Draft:
    unit: Unit
    kind: str
    text: str
    tokens: int
    score: float
    order: int
    reasons: list[Reason]
    key: Key | None = None


class Packer:
    """Greedy packing by value per token with exact token accounting."""

    def __init__(
        self, repo: Repo, counter: TokenCounter, budget: int, policy: PackPolicy
    ) -> None:
        self.repo = repo
        self.counter = counter
        self.budget = budget
        self.policy = policy
        self.full: list[Draft] = []
        self.skel: list[Draft] = []
        self.full_tokens = 0
        self.skel_tokens = 0
        self.preamble = counter.count(PREAMBLE + SEP_FULL)
        self.skel_header = counter.count(SKELETON_HEADER + SEP_SKEL)
        self._texts: dict[tuple[str, int, int], tuple[str, int] | None] = {}

    @property
    def used(self) -> int:
        header = self.skel_header if self.skel else 0
        return self.preamble + self.full_tokens + self.skel_tokens + header

    def _add(self, d: Draft) -> None:
        if d.kind == FULL:
            self.full.append(d)
            self.full_tokens += d.tokens
        else:
            self.skel.append(d)
            self.skel_tokens += d.tokens

    def _remove(self, d: Draft) -> None:
        if d.kind == FULL:
            self.full.remove(d)
            self.full_tokens -= d.tokens
        else:
            self.skel.remove(d)
            self.skel_tokens -= d.tokens

    def pack(
        self,
        seeds: Seeds,
        scores: dict[Key, float],
        edge_reasons: dict[int, list[Reason]],
    ) -> list[ContextItem]:
        if self.budget <= self.preamble + self.skel_header:
            return []
        density = self.policy.density

        def value(k: Key) -> float:
            if not density:
                return scores[k]
            size = max(self._guess_tokens(k, seeds), self.policy.density_floor)
            return scores[k] / size**density

        order = sorted(
            scores,
            key=lambda k: (
                k not in seeds.pinned,
                seeds.pinned.get(k, 0),
                -value(k),
                str(k),
            ),
        )

        def reasons(key: Key) -> list[Reason]:
            return [*seeds.reasons.get(key, ()), *edge_reasons.get(key, ())][:4]

        later: list[tuple[int, Key]] = []
        full_cap = self.policy.full_share * self.budget
        pinned_cap = max(full_cap, self.policy.focus_share * self.budget)
        for rank, key in enumerate(order):
            unit = self._unit(key, seeds)
            if unit is None:
                continue
            cap = pinned_cap if key in seeds.pinned else full_cap
            is_module = isinstance(key, int) and self.repo.syms[key].kind == "module"
            if (
                is_module
                or rank >= self.policy.full_candidates
                or cap - self.full_tokens < 16
                or not self._try_full(
                    key, unit, seeds, scores[key], rank, reasons(key), cap
                )
            ):
                if (
                    key in seeds.pinned
                ):  # focus goes in before anything else, if only as outline
                    self._try_skeleton(
                        key, unit, seeds, scores[key], rank, reasons(key)
                    )
                else:
                    later.append((rank, key))
        for rank, key in later:
            if self.budget - self.used < 4:
                break
            self._try_skeleton(
                key, self._unit(key, seeds), seeds, scores[key], rank, reasons(key)
            )
        # Room left once every candidate has a place: show skeletons in full, best first.
        for d in (
            sorted(self.skel, key=lambda d: d.order) if self.policy.upgrade else ()
        ):
            if self.budget - self.used < 16:
                break
            if not any(d is x for x in self.skel):  # absorbed by an earlier upgrade
                continue
            self._remove(d)
            unit = self._unit(d.key, seeds)
            if not self._try_full(
                d.key, unit, seeds, d.score, d.order, d.reasons, self.budget
            ):
                self._add(d)
        drafts = sorted(self.full, key=lambda d: d.order) + sorted(
            self.skel, key=lambda d: d.order
        )
        # A skeleton holds the first line of its definition (the signature), not the body.
        return [
            ContextItem(
                d.unit.path,
                d.unit.start,
                d.unit.end if d.kind == FULL else d.unit.start,
                d.unit.symbol,
                d.kind,
                d.text,
                d.tokens,
                round(d.score, 8),
                tuple(d.reasons),
            )
            for d in drafts
        ]

    def _guess_tokens(self, key: Key, seeds: Seeds) -> float:
        """A candidate's size in tokens, from its bytes (no tokenizer: every candidate is sized)."""
        if isinstance(key, tuple):
            path, start, end = seeds.spans[key]
            lines = self.repo.lines(path) or []
            nbytes = sum(len(ln) + 1 for ln in lines[start - 1 : end])
        else:
            sym = self.repo.syms.get(key)
            nbytes = sym.nbytes if sym is not None else 0
        return nbytes / GUESS_BYTES_PER_TOKEN

    def _unit(self, key: Key, seeds: Seeds) -> Unit | None:
        """A candidate's own definition (or span of module-level lines)."""
        if isinstance(key, tuple):
            path, start, end = seeds.spans[key]
            return Unit(path, start, end, "", "", language_for_path(path) or "")
        sym = self.repo.syms.get(key)
        if sym is None:
            return None
        return sym_unit(sym)

    def _choose(
        self, key: Key, unit: Unit, seeds: Seeds, room: float
    ) -> tuple[Unit, str, int] | None:
        """The span shown in full: the enclosing class when small, else the definition, else
        the chunk that was hit when the definition is too large for one item."""
        share = (
            self.policy.focus_share if key in seeds.pinned else self.policy.item_share
        )
        item_cap = min(share * self.budget, room)
        sym = self.repo.syms.get(key) if isinstance(key, int) else None
        if sym is not None:
            top = self.repo.top(sym)
            limit = min(self.policy.expand_share * self.budget, room)
            if (
                top.id != sym.id
                and top.kind in CLASS_KINDS
                and top.nbytes <= limit * MAX_BYTES_PER_TOKEN
            ):
                grown = sym_unit(top)
                got = self._text(grown)
                if got is not None and got[1] <= limit:
                    return grown, *got
            if sym.kind in CLASS_KINDS:  # a large class competes through its members
                item_cap = min(item_cap, self.policy.class_share * self.budget)
        if sym is None or sym.nbytes <= item_cap * MAX_BYTES_PER_TOKEN:
            got = self._text(unit)
            if got is not None and got[1] <= item_cap:
                return unit, *got
        if sym is not None and sym.kind in CLASS_KINDS:
            return None
        for a, b in seeds.hit_spans.get(key, ()) if isinstance(key, int) else ():
            part = Unit(
                unit.path,
                max(a, unit.start),
                min(b, unit.end),
                unit.symbol,
                unit.local,
                unit.lang,
            )
            got = self._text(part)
            if got is not None and got[1] <= item_cap:
                return part, *got
        return None

    def _try_full(
        self,
        key: Key,
        unit: Unit,
        seeds: Seeds,
        score: float,
        rank: int,
        reasons: list[Reason],
        cap: float,
    ) -> bool:
        room = min(cap - self.full_tokens, self.budget - self.used)
        for (
            d
        ) in self.full:  # room freed by what the new item would absorb is not counted
            if d.unit.path == unit.path and not (
                d.unit.end < unit.start or unit.end < d.unit.start
            ):
                room += d.tokens
        chosen = self._choose(key, unit, seeds, room + self.skel_tokens)
        if chosen is None:
            return False
        unit, text, tokens = chosen
        same = [d for d in self.full if d.unit.path == unit.path]
        for d in same:
            if d.unit.start <= unit.start and unit.end <= d.unit.end:
                _merge_reasons(d.reasons, reasons, d.unit.symbol)
                return True
        overlap = [
            d for d in same if not (d.unit.end < unit.start or unit.end < d.unit.start)
        ]
        if overlap:
            outer = max(
                [unit, *(d.unit for d in overlap)], key=lambda u: u.end - u.start
            )
            unit = Unit(
                unit.path,
                min([unit.start, *(d.unit.start for d in overlap)]),
                max([unit.end, *(d.unit.end for d in overlap)]),
                outer.symbol,
                outer.local,
                unit.lang,
            )
            got = self._text(unit)
            if got is None:
                return False
            text, tokens = got
        covered = [
            d
            for d in self.skel
            if d.unit.path == unit.path
            and unit.start <= d.unit.start
            and d.unit.end <= unit.end
        ]
        freed_full = sum(d.tokens for d in overlap)
        freed = freed_full + sum(d.tokens for d in covered)
        if covered and len(covered) == len(self.skel):
            freed += self.skel_header
        if (
            self.full_tokens - freed_full + tokens > cap
            or self.used - freed + tokens > self.budget
        ):
            return False
        parts = [(rank, reasons)]
        for d in [*overlap, *covered]:
            self._remove(d)
            parts.append((d.order, d.reasons))
            rank = min(rank, d.order) if d.kind == FULL else rank
            score = max(score, d.score)
        merged: list[Reason] = []
        for _, more in sorted(
            parts, key=lambda p: p[0]
        ):  # the best-ranked part's reasons first
            _merge_reasons(merged, more, unit.symbol)
        if not merged:  # only edges inside the item led here: they are still the reason
            merged = list(reasons)
        self._add(Draft(unit, FULL, text, tokens, score, rank, merged, key))
        return True

    def _try_skeleton(
        self,
        key: Key,
        unit: Unit | None,
        seeds: Seeds,
        score: float,
        rank: int,
        reasons: list[Reason],
    ) -> bool:
        if unit is None:
            return False
        for d in self.full:
            if (
                d.unit.path == unit.path
                and d.unit.start <= unit.start
                and unit.end <= d.unit.end
            ):
                _merge_reasons(d.reasons, reasons, d.unit.symbol)
                return True
        text = self._skeleton_text(key, unit)
        tokens = self.counter.count(text + SEP_SKEL)
        header = 0 if self.skel else self.skel_header
        if self.used + header + tokens > self.budget:
            return False
        self._add(Draft(unit, SKELETON, text, tokens, score, rank, list(reasons), key))
        return True

    # -- text -----------------------------------------------------------------------------

    def _text(self, unit: Unit) -> tuple[str, int] | None:
        """The full block of a unit and its token cost (separator included), cached."""
        cache_key = (unit.path, unit.start, unit.end)
        if cache_key not in self._texts:
            lines = self.repo.lines(unit.path)
            if lines is None or unit.start > len(lines):
                self._texts[cache_key] = None
            else:
                end = min(unit.end, len(lines))
                body = lines[unit.start - 1 : end]
                if self.policy.line_numbers:
                    width = len(str(end))
                    body = [
                        f"{unit.start + i:>{width}}| {ln}" for i, ln in enumerate(body)
                    ]
                # place()/shown(): a file name with a newline cannot forge a block header
                header = place(unit.path, unit.start, end) + (
                    f" ({shown(unit.local)})" if unit.local else ""
                )
                text = f"{header}\n```{unit.lang}\n" + "\n".join(body) + "\n```"
                self._texts[cache_key] = (text, self.counter.count(text + SEP_FULL))
        return self._texts[cache_key]

    def _skeleton_text(self, key: Key, unit: Unit) -> str:
        if isinstance(key, tuple):
            lines = self.repo.lines(unit.path) or []
            first = next(
                (ln.strip() for ln in lines[unit.start - 1 : unit.end] if ln.strip()),
                "",
            )
            return f"{place(unit.path, unit.start, unit.end)}  {_clip(first)}"
        sym = self.repo.syms[key]
        doc = sym.doc.strip().splitlines()[0].strip() if sym.doc.strip() else ""
        if sym.kind == "module":
            text = f"{place(sym.path)}  module {shown(sym.qualname)}"
        else:
            sig = _clip(" ".join(sym.signature.split())) or f"{sym.kind} {sym.name}"
            nested = sym.local if "." in sym.local else ""
            text = (
                f"{place(sym.path, sym.start, sym.end)}  "
                + (f"{shown(nested)}: " if nested else "")
                + sig
            )
        return text + (f"  — {_clip(doc, 120)}" if doc else "")


def sym_unit(sym: Sym) -> Unit:
    return Unit(sym.path, sym.start, sym.end, sym.qualname, sym.local, sym.language)


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _merge_reasons(
    into: list[Reason], more: Sequence[Reason], symbol: str = ""
) -> None:
    """Add reasons of an absorbed candidate, except edges inside the item (a member's
    "enclosed-by" its class, or calls between its methods, say nothing once the class is the
    item)."""
    for r in more:
        inner = symbol and (r.via == symbol or r.via.startswith(symbol + "."))
        if r in into or inner:
            continue
        if not r.via:  # a hit: one per signal, its best rank (several signals say more)
            same = next(
                (i for i, x in enumerate(into) if not x.via and x.source == r.source),
                None,
            )
            if same is not None:
                if r.rank and (not into[same].rank or r.rank < into[same].rank):
                    into[same] = r
                continue
        if len(into) < 6:
            into.append(r)
