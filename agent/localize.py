"""Where a task's change goes, found with the index and no model (the pipeline's first step):
the test ids, paths and names the task mentions, the frames of the tests it names when they
fail, retrieval (`assemble_context`) for files then functions, and — for a change to a
function's signature — the functions that call it. The result is a short list of spans
(whole functions, or whole small files) to show a small model, within a token budget.

Each candidate says why it is there; the signals are general (a name in the task, a frame of a
failing test, a callee of a failing test, a retrieval rank, a caller of a changed function),
so no task's wording is needed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from indexer import Index
from retrieval.context import FULL, assemble_context

from .tools.testing import Failure, is_test_file

#: pytest ids named in a task: path.py::name(::name)*, with an optional [param].
_TEST_ID = re.compile(r"(?<![\w/.-])([\w./-]+\.py::[\w:]+(?:\[[^\]\s]*\])?)")
_PATH = re.compile(r"(?<![\w/.-])([\w./-]*[\w-]\.[A-Za-z]\w{0,5})\b")
#: Names written as code: `name`, name(, dotted or snake_case or CamelCase identifiers.
_BACKTICK = re.compile(r"`([A-Za-z_][\w.]*)(?:\([^`]*\))?`")
_CALLED = re.compile(r"\b([A-Za-z_][\w.]*)\(")
_CODEY = re.compile(r"\b([a-z]\w*_\w+|[A-Z][a-z0-9]+[A-Z]\w*|[A-Za-z_]\w*\.[A-Za-z_][\w.]*)\b")
_FRAME = re.compile(r"^\s*(?:File \")?(?P<path>[^\s:\"]+\.py)\"?(?:, line |:)(?P<line>\d+)", re.M)
#: A task that changes a function's interface, so its callers change too.
_SIGNATURE = re.compile(
    r"\b(parameters?|arguments?|argument list|signature|keyword|callers?|call sites?|"
    r"rename|renames|renamed)\b",
    re.I,
)
_FUNCS = ("function", "method")

# Scores of the signals (higher first); a candidate keeps its best and every reason.
NAMED, FRAME, CALLER, CALLEE, TEST_NAMED = 10.0, 8.0, 7.0, 6.0, 3.0
RETRIEVED = 5.0  # the first retrieval hit; each later one a point less (see _retrieved)
#: Files shown: those whose best candidate scores at least this share of the best one.
FILE_SHARE = 0.75
#: A word of the task in a candidate's name (`coupon` in apply_coupon): a hint, per word.
NAME_WORD = 0.5
_STOP = frozenset(
    {
        "the",
        "and",
        "for",
        "with",
        "from",
        "that",
        "this",
        "when",
        "what",
        "into",
        "than",
        "then",
        "test",
        "tests",
        "fix",
        "bug",
        "code",
        "fails",
        "failing",
        "should",
        "make",
        "change",
        "add",
    }
)
#: Retrieval hits taken: beyond the first few, a small model reads noise.
RETRIEVED_MOST = 4


@dataclass(frozen=True)
class Mentions:
    """What a task names: pytest ids, paths in the index, and names written as code."""

    tests: tuple[str, ...]
    paths: tuple[str, ...]
    names: tuple[str, ...]


def mentions(task: str, known_paths: Iterable[str]) -> Mentions:
    known = set(known_paths)
    tests = tuple(dict.fromkeys(m for m in _TEST_ID.findall(task) if m.split("::")[0] in known))
    paths = tuple(
        dict.fromkeys(
            p for p in (*(t.split("::")[0] for t in tests), *_PATH.findall(task)) if p in known
        )
    )
    names = [*_BACKTICK.findall(task), *_CALLED.findall(task), *_CODEY.findall(task)]
    # A path or a test id is not a name; a dotted name's last part is looked up too.
    skip = {p for p in paths} | {p.rsplit(".", 1)[0] for p in paths}
    out: list[str] = []
    for n in names:
        n = n.strip(".")
        if not n or n in skip or n.endswith((".py", ".md", ".toml")):
            continue
        out += [n, n.rsplit(".", 1)[-1]] if "." in n else [n]
    for t in tests:
        out += t.split("::")[1:]
    return Mentions(tests, paths, tuple(dict.fromkeys(out)))


@dataclass
class Candidate:
    id: int
    path: str
    qualname: str
    kind: str
    start: int
    end: int
    score: float = 0.0
    reasons: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)

    def add(self, score: float, reason: str) -> None:
        """One more signal: the best counts whole, each other one half (signals that agree
        beat one strong signal alone)."""
        if reason in self.reasons:
            return
        self.reasons.append(reason)
        self.scores.append(score)
        self.score = max(self.scores) + 0.5 * (len(self.scores) - 1)


@dataclass(frozen=True)
class Span:
    """Lines ``start``-``end`` (1-based, inclusive) of ``path`` shown to the model."""

    path: str
    start: int
    end: int
    symbols: tuple[str, ...]
    why: str
    text: str
    tokens: int
    whole_file: bool = False


@dataclass
class Localization:
    spans: list[Span]
    #: Test ids the task names (run before and after the edit).
    named_tests: list[str]
    candidates: list[Candidate]
    #: The change touches a function's interface: its callers are shown too.
    signature_change: bool
    #: Candidates that did not fit the budget (the prompt says they exist).
    left_out: list[str]

    def to_dict(self) -> dict:
        return {
            "spans": [
                {
                    "path": s.path,
                    "lines": f"{s.start}-{s.end}",
                    "symbols": list(s.symbols),
                    "why": s.why,
                    "tokens": s.tokens,
                    "whole_file": s.whole_file,
                }
                for s in self.spans
            ],
            "named_tests": self.named_tests,
            "candidates": [
                {
                    "symbol": c.qualname,
                    "path": c.path,
                    "lines": f"{c.start}-{c.end}",
                    "score": round(c.score, 2),
                    "why": c.reasons,
                }
                for c in self.candidates[:12]
            ],
            "signature_change": self.signature_change,
            "left_out": self.left_out,
        }


def frames(failures: Sequence[Failure]) -> list[tuple[str, int]]:
    """(path, line) of the traceback frames of failing tests, innermost last."""
    out: list[tuple[str, int]] = []
    for f in failures:
        for m in _FRAME.finditer(f.trace or ""):
            out.append((m["path"], int(m["line"])))
        loc = f.location.rsplit(":", 1)
        if len(loc) == 2 and loc[1].isdigit():
            out.append((loc[0], int(loc[1])))
    return list(dict.fromkeys(out))


class _Pool:
    """Candidates by definition id."""

    def __init__(self, index: Index) -> None:
        self.index, self.by_id = index, {}

    def add(self, row: tuple, score: float, reason: str) -> Candidate | None:
        # row: graph.definition_details columns (id, path, name, qualname, kind, start, end, ...)
        sid, path, _name, qualname, kind, start, end = row[:7]
        if kind not in (*_FUNCS, "class"):
            return None
        cand = self.by_id.get(sid) or Candidate(sid, path, qualname, kind, start, end)
        self.by_id[sid] = cand
        cand.add(score, reason)
        return cand

    def innermost(self, path: str, line: int) -> tuple | None:
        rows = [
            r
            for r in self.index.graph.definition_details_between(path, line, line)
            if r[4] in (*_FUNCS, "class")
        ]
        return rows[-1] if rows else None


def localize(
    index: Index,
    task: str,
    *,
    failures: Sequence[Failure] = (),
    searcher: object | None = None,
    counter: Callable[[str], int],
    budget: int = 1500,
    whole_file_tokens: int = 700,
    retrieval_tokens: int = 3000,
    retrieve: bool = True,
    show_tests: bool = False,
) -> Localization:
    """The spans to show for ``task``: candidates from every signal, ranked, then packed whole
    (a small file whole, else each function) until ``budget`` tokens (``counter``)."""
    root = index.root
    paths = index.graph.all_paths()
    said = mentions(task, paths)
    pool = _Pool(index)
    for name in said.names:
        for r in index.graph.find_definitions(name, limit=8):
            if r.name == name.rsplit(".", 1)[-1] or r.qualname.endswith(name):
                details = index.graph.definition_details([r.id])
                for d in details:
                    test = is_test_file(d[1])
                    pool.add(d, TEST_NAMED if test else NAMED, f"named in the task: {name}")
    # Frames of the failing tests: the innermost code frames outside the tests matter most.
    failing_tests: list[Candidate] = []
    for path, line in frames(failures):
        row = pool.innermost(path, line) if path in set(paths) else None
        if row is None:
            continue
        if is_test_file(path):
            cand = pool.add(row, TEST_NAMED, f"failing test at {path}:{line}")
            if cand is not None:
                failing_tests.append(cand)
        else:
            pool.add(row, FRAME, f"frame of a failing test: {path}:{line}")
    # What the failing tests call: the code under test.
    test_ids = [c.id for c in failing_tests] or [
        c.id for c in pool.by_id.values() if is_test_file(c.path)
    ]
    if test_ids:
        targets = [t[0] for t in index.graph.calls_from(test_ids, 50)]
        code = [
            d
            for d in index.graph.definition_details(dict.fromkeys(targets))
            if not is_test_file(d[1])
        ]
        for d in code:
            pool.add(d, CALLEE, "called by the failing test")
        # One call further: what the code under test calls (the bug is often one level down).
        inner = [t[0] for t in index.graph.calls_from([d[0] for d in code], 50)] if code else []
        for d in index.graph.definition_details(dict.fromkeys(inner)):
            if not is_test_file(d[1]):
                pool.add(d, CALLEE - 1, "called by code the failing test calls")
    # Retrieval: the task (and what the tests said) ranks files, then their functions.
    if retrieve:
        query = " ".join([task, *(f.message for f in failures[:3])])
        _retrieved(pool, index, query, searcher, retrieval_tokens)
    for p in said.paths:  # a path the task names: its definitions rank a little higher
        for c in pool.by_id.values():
            if c.path == p:
                c.add(1.0, f"in {p}, named in the task")
    words = {w.lower() for w in re.findall(r"[A-Za-z]{4,}", task)} - _STOP
    for c in pool.by_id.values():
        parts = set(re.split(r"[_.]|(?<=[a-z])(?=[A-Z])", c.qualname.rsplit(".", 1)[-1].lower()))
        hit = sorted(words & parts)
        if hit:
            c.score += NAME_WORD * len(hit)
            c.reasons.append("its name has " + ", ".join(hit))
    signature = bool(_SIGNATURE.search(task))
    if signature:
        targets = [c for c in pool.by_id.values() if c.score >= NAMED and c.kind in _FUNCS]
        _callers(pool, index, targets)
    ranked = sorted(pool.by_id.values(), key=lambda c: (-c.score, c.path, c.start))
    shown = [c for c in ranked if show_tests or not is_test_file(c.path)]
    spans, left_out = _pack(root, shown, counter, budget, whole_file_tokens)
    return Localization(spans, list(said.tests), ranked, signature, left_out)


def _retrieved(
    pool: _Pool, index: Index, query: str, searcher, budget: int
) -> None:
    pack = assemble_context(index, query, budget, searcher=searcher)
    rank = 0
    for item in sorted(pack.items, key=lambda i: -i.score):
        # Tests come in as the task names them or as they fail; retrieval finds the code.
        if item.kind != FULL or is_test_file(item.path) or rank >= RETRIEVED_MOST:
            continue
        rows = index.graph.definition_details_between(item.path, item.start_line, item.end_line)
        inside = [
            r for r in rows if r[4] in _FUNCS and r[5] >= item.start_line and r[6] <= item.end_line
        ] or [r for r in rows if r[4] in (*_FUNCS, "class")][-1:]
        for r in inside:
            pool.add(r, RETRIEVED - rank, f"retrieval rank {rank + 1}")
        rank += 1 if inside else 0


def _callers(pool: _Pool, index: Index, targets: list[Candidate]) -> None:
    for t in targets:
        ids = index.graph.referrer_ids([t.id])
        for d in index.graph.definition_details(ids):
            if d[4] in _FUNCS and not is_test_file(d[1]):
                pool.add(d, CALLER, f"calls {t.qualname.rsplit('.', 1)[-1]}")


def _pack(
    root: Path,
    ranked: list[Candidate],
    counter: Callable[[str], int],
    budget: int,
    whole_file_tokens: int,
) -> tuple[list[Span], list[str]]:
    """Spans in rank order within ``budget``: the file of a candidate whole when it is small,
    else the candidate's whole definition; only files whose best candidate ranks near the
    top one (FILE_SHARE): a small model is led astray by every other file it is shown."""
    spans: list[Span] = []
    used = 0
    left_out: list[str] = []
    covered: dict[str, list[tuple[int, int]]] = {}
    files: dict[str, list[str]] = {}
    # Code first, then the failing tests (context: what is expected), each by score.
    order = [c for c in ranked if not is_test_file(c.path)] + [
        c for c in ranked if is_test_file(c.path)
    ]
    top = max((c.score for c in ranked), default=0.0)
    best: dict[str, float] = {}
    for c in ranked:
        best[c.path] = max(best.get(c.path, 0.0), c.score)
    for c in order:
        # A caller of a function whose interface changes is part of the change: always shown.
        caller = any(r.startswith("calls ") for r in c.reasons)
        if not caller and (c.score < max(1.0, top / 2) or best[c.path] < top * FILE_SHARE):
            continue
        if any(a <= c.start and c.end <= b for a, b in covered.get(c.path, ())):
            continue
        if c.path not in files:
            try:
                files[c.path] = (root / c.path).read_text(encoding="utf-8").splitlines(True)
            except (OSError, UnicodeError):
                continue
        lines = files[c.path]
        whole = "".join(lines)
        n_whole = counter(whole)
        if not covered.get(c.path) and n_whole <= whole_file_tokens and used + n_whole <= budget:
            span = Span(
                c.path, 1, len(lines), (c.qualname,), "; ".join(c.reasons), whole, n_whole, True
            )
            covered[c.path] = [(1, len(lines))]
        else:
            start = _with_decorators(lines, c.start)
            text = "".join(lines[start - 1 : c.end])
            n = counter(text)
            if used + n > budget:
                left_out.append(f"{c.path}:{c.start}-{c.end} {c.qualname}")
                continue
            span = Span(c.path, start, c.end, (c.qualname,), "; ".join(c.reasons), text, n)
            covered.setdefault(c.path, []).append((start, c.end))
        spans.append(span)
        used += span.tokens
    # The code first, each file where its best candidate ranks, its spans top-down; then the
    # tests (what is expected).
    rank = {}
    for n, s in enumerate(spans):
        rank.setdefault(s.path, n)
    spans.sort(key=lambda s: (is_test_file(s.path), rank[s.path], s.start))
    return _merge(spans), left_out


def _with_decorators(lines: list[str], start: int) -> int:
    while start > 1 and lines[start - 2].lstrip().startswith("@"):
        start -= 1
    return start


def _merge(spans: list[Span]) -> list[Span]:
    """Spans of one file that overlap or touch become one."""
    out: list[Span] = []
    for s in spans:
        prev = out[-1] if out else None
        if prev and prev.path == s.path and s.start <= prev.end + 1 and not prev.whole_file:
            if s.end <= prev.end:
                continue
            extra = s.text.splitlines(True)[prev.end - s.start + 1 :]
            out[-1] = Span(
                prev.path,
                prev.start,
                s.end,
                prev.symbols + s.symbols,
                prev.why,
                prev.text + "".join(extra),
                prev.tokens + s.tokens,
            )
        else:
            out.append(s)
    return out
