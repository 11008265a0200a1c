"""The places an `ask` answer cites, found in its prose and checked against the repository.

Large models write ``path:line``; small ones write prose: "line 34 of shop/discount.py",
"in `shop/discount.py` at line 34", "shop/cart.py (lines 3 to 9)", "L34 in shop/cart.py", or a
definition and its file ("the `apply_coupon` function (shop/cart.py)"). Every form is read into
the same :class:`Citation` and checked the same way: the file exists in the repository, the
lines are inside it, and whether the model was shown them. A definition cited by name is
looked up in the index for its lines; a name the file does not hold at all is flagged.

Prose that only looks like a place is not one: a path must be quoted, have a directory, or end
in a common source or text extension (so "e.g." and "v1.x" are no paths), a line number must
come with the word line(s) or ``L`` in the same clause as its path, and version numbers
("Python 3.11", "version 2.5 of the API") have no file extension.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from indexer import Index, StoreError
from retrieval.context import ContextPack

_PATH = r"(?P<path>(?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z][A-Za-z0-9_+]*)"
#: The end of a path in prose: not followed by more of a path (a longer name, a directory).
_PATH_END = r"(?![\w/-]|\.[A-Za-z0-9])"
# path:12, path:12-30, path:L12-L30, path#L12-L30, path:12–30; paths need a dot or a slash.
_CITATION = re.compile(rf"(?<![\w/.-]){_PATH}(?:#L|:L?)(?P<start>\d+)(?:\s*[-–]\s*L?(?P<end>\d+))?")
#: "line 12", "lines 12-30", "line #12", "Line: 12", "lines 3 to 9", "L12", "L12-L30".
_LINES = (
    r"(?:\b[Ll]ines?(?::\s*|\s+)[#L]?|\bL(?=\d))"
    r"(?P<start>\d+)(?:\s*(?:[-–—]|to|through|thru)\s*L?(?P<end>\d+))?\b"
)
# Path first: "`path` line 12", "path lines 12-30", "`pyjson/decoder.py` file at line 20-43",
# "`path` (lines 3 to 9)", "in `path` at line 34": a path, then within the same clause (no
# full stop, semicolon, new line or other backtick) the line(s).
_PROSE_CITATION = re.compile(
    rf"(?<![\w/.-])(?P<tick>`?){_PATH}(?P=tick)(?P<gap>[^`\n.;]{{0,40}}?){_LINES}"
)
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_KIND = r"(?:function|method|class|def|constant|variable|property|attribute)"
# Lines first: "line 34 of shop/discount.py", "lines 3 to 9 in `shop/cart.py`", "L34 in
# shop/cart.py", "lines 10-12 of the `Cart` class in shop/cart.py". No comma or clause between
# the number and its file: in "line 2, in shop/tax.py" the line may belong to something else.
_LINES_FIRST = re.compile(
    rf"{_LINES}\s+(?:(?:of|in)\s+the\s+`?{_IDENT}(?:\(\))?`?\s+{_KIND}\s+)?"
    r"(?:of|in|from|within|inside)\s+(?:the\s+)?(?:(?:file|module)\s+)?"
    rf"(?P<tick>`?){_PATH}(?P=tick){_PATH_END}"
)
# A definition and its file: "`apply_coupon` in shop/cart.py", "the `apply_coupon` function
# (shop/cart.py)", "apply_coupon() in shop/cart.py", "function `apply_coupon` in `cart.py`",
# "the apply_coupon function defined in shop/cart.py". Never one followed by its own lines
# ("(shop/cart.py:24-27)"): those lines are the citation.
_SYMBOL_CITATION = re.compile(
    r"(?:"
    rf"(?P<q1>`)(?P<s1>{_IDENT})(?:\(\))?`(?:\s+{_KIND})?"
    rf"|\b{_KIND}\s+(?P<q3>`?)(?P<s3>{_IDENT})(?P<p3>\(\))?(?P=q3)"
    rf"|(?<![\w.`])(?P<s2>{_IDENT})\(\)(?:\s+{_KIND})?"
    rf"|(?<![\w.`])(?P<s4>{_IDENT})\s+{_KIND}"
    r")"
    r"(?:\s*\(\s*(?:in\s+|from\s+|see\s+)?"
    r"|,?\s+(?:(?:is|are|was)\s+)?(?:(?:defined|implemented|declared|located|found)\s+)?"
    r"(?:in|from|inside|within|of)\s+(?:the\s+)?(?:(?:file|module)\s+)?)"
    rf"(?P<tick>`?){_PATH}(?P=tick)(?![\w/-]|\.[A-Za-z0-9]|:\d|#L)"
)
# Bare words such as "e.g" or "v1.x" look like paths; in prose a path must be quoted, have a
# directory, or end in a common source or text extension.
_PROSE_EXTENSION = re.compile(
    r"pyi?|[cm]?[jt]sx?|go|rs|java|kts?|[ch]|cc|cpp|cxx|hpp|hh|cs|rb|php|swift|scala|mm?|"
    r"sh|bash|zsh|sql|md|rst|txt|toml|ya?ml|json|ini|cfg|html|s?css|vue|lua|pl|r|jl|exs?|erl|"
    r"hs|ml|clj|dart",
    re.I,
)
#: A file read to check a cited name is read up to this size (a name past it is not looked for).
_MAX_READ = 4 << 20


@dataclass(frozen=True, slots=True)
class Citation:
    """A location the answer cites. ``valid``: the file exists in the repository and has those
    lines; ``in_context``: the model was shown them. ``problem`` says what is wrong.
    ``symbol``: the definition cited by name (its lines come from the index), else ''."""

    text: str
    path: str
    start_line: int
    end_line: int
    valid: bool
    in_context: bool
    problem: str = ""
    symbol: str = ""


@dataclass(frozen=True, slots=True)
class _Found:
    """One citation as read from the text, before it is checked."""

    start: int
    end: int
    text: str
    path: str
    first: int
    last: int
    symbol: str = ""
    #: The name is quoted or called (`name`, name()): code, so one the file lacks is flagged;
    #: a bare word ("the helper function in x.py") is a citation only when it is a definition.
    code_name: bool = True


def verify_citations(
    text: str,
    root: Path,
    pack: ContextPack | None = None,
    index: Index | None = None,
) -> tuple[Citation, ...]:
    """Every place ``text`` cites, checked against the repository (and the pack). With
    ``index``, definitions cited by name and file are resolved to their lines."""
    root = Path(root)
    out: list[Citation] = []
    seen: set[tuple[str, int, int]] = set()
    lines_of: dict[str, int | None] = {}
    shown_paths = {i.path for i in pack.items} if pack is not None else set()
    for found in _found(text, root, pack, index, shown_paths):
        path, start, end = found.path, found.first, found.last
        if (path, start, end) in seen:
            continue
        seen.add((path, start, end))
        if path not in lines_of:
            lines_of[path] = _line_count(root, path)
        n = lines_of[path]
        problem = ""
        if n is None:
            problem = "no such file in the repository"
        elif found.symbol and start == 0:
            problem = f"`{found.symbol}` is not in {path}"
        elif start < 1 or end < start:
            problem = f"bad line range {start}-{end}"
        elif end > n:
            problem = f"line {end} is past the end of the file ({n} lines)"
        in_context = pack is not None and not problem and _shown(pack, path, start, end)
        out.append(
            Citation(found.text, path, start, end, not problem, in_context, problem, found.symbol)
        )
    return tuple(out)


def _found(
    text: str,
    root: Path,
    pack: ContextPack | None,
    index: Index | None,
    shown_paths: set[str],
) -> list[_Found]:
    """The citations of ``text`` in the order they appear: ``path:line`` forms first, then the
    prose forms, then definitions by name, each kept only where no earlier form took its text."""
    taken: list[_Found] = []

    def free(start: int, end: int) -> bool:
        return not any(start < f.end and f.start < end for f in taken)

    for m in _CITATION.finditer(text):
        taken.append(_lines_found(m, shown_paths))
    for pattern in (_LINES_FIRST, _PROSE_CITATION):
        for m in pattern.finditer(text):
            if free(*m.span()) and _prose_path(m):
                taken.append(_lines_found(m, shown_paths))
    if index is not None:
        for m in _SYMBOL_CITATION.finditer(text):
            if not (free(*m.span()) and _prose_path(m)):
                continue
            found = _symbol_found(m, root, pack, index, shown_paths)
            if found is not None:
                taken.append(found)
    return sorted(taken, key=lambda f: f.start)


def _prose_path(m: re.Match[str]) -> bool:
    path = m.group("path")
    quoted = bool(m.group("tick"))
    return quoted or "/" in path or bool(_PROSE_EXTENSION.fullmatch(path.rpartition(".")[2]))


def _lines_found(m: re.Match[str], shown_paths: set[str]) -> _Found:
    start = int(m.group("start"))
    end = int(m.group("end") or start)
    path = _resolve(m.group("path").removeprefix("./"), shown_paths)
    return _Found(m.start(), m.end(), m.group(0), path, start, end)


def _symbol_found(
    m: re.Match[str],
    root: Path,
    pack: ContextPack | None,
    index: Index,
    shown_paths: set[str],
) -> _Found | None:
    """A definition cited by name: its lines from the index; ``start == 0`` when the file
    holds no such name at all (flagged); None when it is no citation (a word of prose)."""
    symbol = next(m.group(g) for g in ("s1", "s2", "s3", "s4") if m.group(g))
    code = bool(m.group("q1") or m.group("s2") or m.group("q3") or m.group("p3"))
    path = _resolve(m.group("path").removeprefix("./"), shown_paths)
    spans = _definition_spans(index, path, symbol)
    if spans:
        inside = [s for s in spans if pack is not None and _shown(pack, path, *s)]
        first, last = (inside or spans)[0]
        return _Found(m.start(), m.end(), m.group(0), path, first, last, symbol)
    if not code:
        return None  # "the helper function in x.py": a word, not a definition's name
    n = _line_count(root, path)
    if n is None:  # the file itself is missing: flagged as such
        return _Found(m.start(), m.end(), m.group(0), path, 1, 1, symbol)
    module = path.rpartition(".")[0].replace("/", ".")
    if module == symbol or module.endswith("." + symbol):  # "`shop.cart` in shop/cart.py"
        return _Found(m.start(), m.end(), m.group(0), path, 1, max(1, n), symbol)
    last_part = symbol.rpartition(".")[2]
    if _holds_word(root, path, last_part):
        return None  # a name the file uses (a variable, an import): no definition cited
    return _Found(m.start(), m.end(), m.group(0), path, 0, 0, symbol)


def _definition_spans(index: Index, path: str, symbol: str) -> list[tuple[int, int]]:
    """Lines of the definitions of ``path`` that ``symbol`` names (``name``, ``Class.name``
    or a module-qualified name), in file order."""
    name = symbol.rpartition(".")[2]
    try:
        rows = index.graph.definition_spans_in_file(path)
    except StoreError:  # an index of another shape: the name cannot be resolved here
        return []
    return sorted(
        (start, end)
        for qualname, start, end, short in rows
        if short == name
        and ("." not in symbol or qualname == symbol or qualname.endswith("." + symbol))
    )


def _resolve(path: str, shown: set[str]) -> str:
    """A shortened path (``cart.py``) means the one file of the context it ends, if unique."""
    if path in shown:
        return path
    tails = [p for p in shown if p.endswith("/" + path)]
    return tails[0] if len(tails) == 1 else path


def _inside(root: Path, path: str) -> Path | None:
    full = (root / path).resolve()
    try:
        full.relative_to(root.resolve())
    except ValueError:
        return None  # outside the repository is no location in it
    return full if full.is_file() else None


def _line_count(root: Path, path: str) -> int | None:
    full = _inside(root, path)
    if full is None:
        return None
    with open(full, "rb") as fh:
        data = fh.read()
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


def _holds_word(root: Path, path: str, word: str) -> bool:
    full = _inside(root, path)
    if full is None:
        return False
    with open(full, "rb") as fh:
        data = fh.read(_MAX_READ)
    return re.search(rb"\b" + re.escape(word.encode()) + rb"\b", data) is not None


def _shown(pack: ContextPack, path: str, start: int, end: int) -> bool:
    return any(i.path == path and i.start_line <= start and end <= i.end_line for i in pack.items)
