"""Structure-aware chunks for embedding and lexical search.

Chunks follow the definition tree: a definition that fits the model is one chunk; one that
does not is split at its children (methods, nested functions) and, inside a leaf, at statement
starts — never mid-line. Small adjacent pieces are merged up to the budget. Together the chunks
of a file cover every line exactly once. Sizes are counted in the embedding model's tokens.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from indexer.blake2 import blake2b
from indexer.models import CLASS_KINDS, ParsedFile
from indexer.parse.languages import is_text_format
from indexer.parse.terms import index_terms

#: Tokens kept free for the header prepended to every chunk.
HEADER_ALLOWANCE = 24


@dataclass(frozen=True, slots=True)
class Chunk:
    start_line: int  # 1-based, inclusive
    end_line: int
    symbol: str  # file-local qualname of the definition it belongs to; "" at module level
    kind: str  # definition | part | group | module
    header: str  # what the embedding sees before the code: path, class, signature
    text: str
    content_hash: str
    tokens: int  # model tokens of header + text, special tokens included
    terms: str = ""  # the text as the lexical index sees it (identifiers split into words)


@dataclass(slots=True)
class _Piece:
    start: int
    end: int
    symbol: str
    kind: str
    tokens: int
    def_index: int = -1


def chunk_file(
    path: str,
    text: str,
    pf: ParsedFile,
    count: Callable[[Sequence[str]], list[int]],
    max_tokens: int,
    line_counts: list[int] | None = None,
) -> list[Chunk]:
    """Chunk one parsed file. ``count`` is the embedding model's token counter;
    ``line_counts`` (tokens per line, when the tokenizer can give them in one pass) saves
    counting every line separately."""
    lines = text.splitlines()
    if not lines:
        return []
    overhead = count([""])[0]
    per_line = line_counts if line_counts is not None and len(line_counts) == len(lines) else None
    if per_line is None:
        per_line = [max(n - overhead, 0) for n in count(lines)]
    prefix = [0]
    for n in per_line:
        prefix.append(prefix[-1] + n)
    budget = max(max_tokens - overhead - HEADER_ALLOWANCE, 16)
    defs = pf.definitions
    children: dict[int, list[int]] = {}
    for i, d in enumerate(defs):
        children.setdefault(d.parent, []).append(i)
    breaks = list(pf.breaks)

    def tokens(start: int, end: int) -> int:
        return prefix[end] - prefix[start - 1]

    even = is_text_format(pf.language)

    def windows(start: int, end: int, symbol: str, kind: str) -> list[_Piece]:
        """Cut [start, end] into pieces under budget, at statement starts when possible. Code
        is cut greedily (full windows, the rest last); prose (docs, configs) into even pieces,
        as few as the budget allows, so a long section leaves no two-line tail to win a search
        on a few words (evened code cuts measured a little worse on the development issues)."""
        out: list[_Piece] = []
        s = start
        while s <= end:
            rest = tokens(s, end)
            if rest <= budget:
                out.append(_Piece(s, end, symbol, kind, rest))
                break
            # the furthest line e with tokens(s, e) <= budget
            far = bisect_right(prefix, prefix[s - 1] + budget, lo=s) - 1
            far = max(min(far, end), s)
            lo = bisect_left(breaks, s + 1)
            hi = bisect_right(breaks, far + 1)
            if not even:  # cut just before the last statement that starts inside the window
                e = breaks[hi - 1] - 1 if hi > lo else far
            else:
                aim = prefix[s - 1] + rest / -(-rest // budget)  # this piece's even share
                if hi > lo:  # cut before the statement starting nearest the aim
                    e = min(breaks[lo:hi], key=lambda b: (abs(prefix[b - 1] - aim), -b)) - 1
                else:  # the line whose end is nearest the aim
                    e = min(bisect_left(prefix, aim, lo=s), far)
                    if e > s and aim - prefix[e - 1] < prefix[e] - aim:
                        e -= 1
            out.append(_Piece(s, e, symbol, kind, tokens(s, e)))
            s = e + 1
        return out

    def emit(start: int, end: int, symbol: str, kids: list[int], kind: str) -> list[_Piece]:
        if tokens(start, end) <= budget:
            return [_Piece(start, end, symbol, kind, tokens(start, end))]
        pieces: list[_Piece] = []
        cur = start
        for k in kids:
            d = defs[k]
            cs, ce = max(d.span.start_line, cur), min(d.span.end_line, end)
            if ce < cs:
                continue
            if cur < cs:
                pieces.extend(windows(cur, cs - 1, symbol, "part"))
            sub = emit(cs, ce, d.qualname, children.get(k, []), "definition")
            for p in sub:
                p.def_index = k
            pieces.extend(sub)
            cur = ce + 1
        if cur <= end:
            pieces.extend(windows(cur, end, symbol, "part"))
        return _merge(pieces, budget, symbol)

    pieces = emit(1, len(lines), "", children.get(-1, []), "module")
    by_qual = {d.qualname: d for d in defs}
    out = []
    for p in pieces:
        body = "\n".join(lines[p.start - 1 : p.end])
        header = _header(path, p, by_qual)
        digest = chunk_hash(header, body)
        out.append(Chunk(p.start, p.end, p.symbol, p.kind, header, body, digest, p.tokens + overhead,
                         index_terms(body)))
    return out


def chunk_hash(header: str, body: str) -> str:
    """Content hash of a chunk: its code and header without the path, so identical code
    anywhere (a moved function, a vendored copy, a branch switch back) shares one vector."""
    body = body.strip()  # blank lines around a definition depend on its neighbours
    key = header.split(" | ", 1)[-1] + "\n" + body if " | " in header else "\n" + body
    return blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _merge(pieces: list[_Piece], budget: int, parent_symbol: str) -> list[_Piece]:
    """Merge runs of small adjacent pieces while they fit the budget together."""
    out: list[_Piece] = []

    def whole(q: _Piece) -> bool:  # pieces of a split child stay apart from its siblings
        return q.kind != "part" or q.symbol == parent_symbol

    for p in pieces:
        last = out[-1] if out else None
        if last is not None and p.tokens == 0:  # blank lines join what precedes them as is
            last.end = p.end
            continue
        if last is not None and last.tokens + p.tokens <= budget and whole(last) and whole(p):
            symbol = last.symbol if last.symbol == p.symbol else parent_symbol
            kind = last.kind if last.symbol == p.symbol and last.kind == p.kind else "group"
            out[-1] = _Piece(last.start, p.end, symbol, kind, last.tokens + p.tokens)
        else:
            out.append(p)
    return out


def _header(path: str, p: _Piece, by_qual: dict) -> str:
    """`path | Outer.name | signature`: the path is not part of the content hash, so a
    definition moved to another file keeps its vector."""
    parts = [path]
    d = by_qual.get(p.symbol)
    if d is not None:
        parts.append(p.symbol)
        if p.kind == "part" or (d.kind in CLASS_KINDS and p.start > d.span.start_line):
            parts.append(d.signature)
    return " | ".join(parts)
