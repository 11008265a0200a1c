"""What a task or issue text says about the code: tracebacks, file paths, code blocks, names,
error messages — each extracted so that it can be an exact signal of its own, and the prose
separated from the code so a long story does not drown the few words that name the code.

    q = parse_query(issue_text)
    q.frames       # ('sphinx/ext/autodoc/__init__.py', 1234, 'format_signature'), ...
    q.paths        # ('src/_pytest/reports.py', None), ...
    q.identifiers  # 'BaseReport._to_json', 'read1', 'Nominal', ...
    q.errors       # 'list index out of range', ...
    q.code_terms   # lexical terms from code (identifiers, code blocks, tracebacks)
    q.prose_terms  # lexical terms from the rest
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

from indexer import STOPWORDS, split_identifier

_FENCE = re.compile(r"^[ \t]*(```+|~~~+)[^\n]*\n(.*?)(?:^[ \t]*\1[ \t]*$|\Z)", re.M | re.S)
_INLINE = re.compile(r"`([^`\n]{1,300})`")
#: Python traceback frames: File "x.py", line 12, in name
_PY_FRAME = re.compile(r'File "([^"\n]+)", line (\d+)(?:, in ([\w<>.]+))?')
#: pytest / compiler style locations: path/to/x.py:80: or x.py:80:5
_LOCATION = re.compile(
    r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.(?:py|pyi|js|jsx|ts|tsx|go|rs|java|c|h|cc|cpp|hpp|cs|rb))"
    r":(\d+)(?::\d+)?"
)
#: File paths with a directory or a source extension (URLs are removed before this runs).
_PATH = re.compile(
    r"(?<![\w/.:-])((?:[\w.-]+/)+[\w.-]+|[\w-]+(?:\.[\w-]+)*\.(?:py|pyi|js|jsx|ts|tsx|go|rs|java|c|h|cc|cpp|hpp|rb|toml|cfg|ini|rst|txt|md))"
    r"(?::(\d+))?"
)
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.I)
_EXC_LINE = re.compile(
    r"^[ \t>E]*((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Warning|Exit|Interrupt|Failure|Fault))"
    r"(?::[ \t]*(.*))?$",
    re.M,
)
_DOTTED = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?:(?:\.|::)[A-Za-z_]\w*)+(?![\w(])?")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CAMEL = re.compile(r"[a-z][A-Z]|[A-Z][a-z0-9]+[A-Z]")
_IMPORT_AS = re.compile(r"^[ \t>]*import\s+([\w.]+)\s+as\s+(\w+)", re.M)
_FROM_IMPORT = re.compile(r"^[ \t>]*from\s+([\w.]+)\s+import\s+\(?([\w\s,]+?)\)?\s*$", re.M)
_ASSIGN_CALL = re.compile(r"^[ \t>]*(\w+)\s*=\s*([\w.]*[A-Z]\w*)\(", re.M)
_ALNUM = re.compile(r"[A-Za-z]{2,}[0-9]+[A-Za-z0-9]*")
_CALL = re.compile(r"([A-Za-z_][\w.]*)\(")
_DOCTEST = re.compile(r"^[ \t]*(?:>>>|\.\.\.|In \[\d+\]:)[ \t]?(.*)$", re.M)
_INDENTED = re.compile(r"(?:^(?: {4}|\t)[^\n]*\n?)+", re.M)
#: Words that look like identifiers in prose but say nothing about where code is.
_NOT_NAMES = frozenset(
    {"None", "True", "False", "self", "cls", "args", "kwargs", "print", "import", "return",
     "def", "class", "from", "lambda", "yield", "async", "await", "with", "else", "elif",
     "try", "except", "finally", "raise", "pass", "while", "for", "not", "and", "the",
     "This", "The", "When", "What", "How", "Why", "Also", "However", "Currently", "Expected",
     "Actual", "Steps", "Environment", "Version", "Python", "README", "TODO", "FIXME",
     "Traceback", "File", "line", "module", "Thanks", "Please", "Note", "Example", "EDIT"}
)
_SOURCE_EXT = (".py", ".pyi", ".js", ".jsx", ".ts", ".tsx", ".go", ".rs", ".java", ".c", ".h",
               ".cc", ".cpp", ".hpp", ".cs", ".rb")


@dataclass(frozen=True, slots=True)
class Frame:
    """A location in a stack trace or error report: a path as printed (often an installed
    location), its line, and the function when the trace names one."""

    path: str
    line: int | None
    function: str = ""


@dataclass(frozen=True)
class Query:
    text: str
    #: The text without code blocks, tracebacks and URLs.
    prose: str
    #: Code blocks, inline code, doctest lines and traceback source lines.
    code: str
    frames: tuple[Frame, ...]
    #: File paths named anywhere (with a line when given): ``(path, line | None)``.
    paths: tuple[tuple[str, int | None], ...]
    #: Code-like names in order of appearance: dotted (``Plotter._finalize_figure``),
    #: snake/camel case, called (``read1(``), backticked.
    identifiers: tuple[str, ...]
    #: Exception class names (``ValueError``, ``sphinx.errors.ExtensionError``).
    exceptions: tuple[str, ...]
    #: Error messages (text after ``SomeError:``), the words the raising code may contain.
    errors: tuple[str, ...]
    #: Lexical terms from code and from prose (identifiers split; stopwords dropped), in order.
    code_terms: tuple[str, ...]
    prose_terms: tuple[str, ...]
    #: How often each term occurs in the whole text: a word the reporter repeats matters more.
    term_counts: dict[str, int] = field(default_factory=dict)
    #: Names the task's code binds: ``import xarray as xr`` gives ``{"xr": "xarray"}``,
    #: ``from a.b import C`` gives ``{"C": "a.b.C"}``, ``da = xr.DataArray(...)`` gives
    #: ``{"da": "xr.DataArray"}`` (an instance: its methods are the class's).
    aliases: dict[str, str] = field(default_factory=dict)

    @property
    def terms(self) -> tuple[str, ...]:
        """Every lexical term, code first."""
        seen = dict.fromkeys(self.code_terms)
        seen.update(dict.fromkeys(self.prose_terms))
        return tuple(seen)

    @property
    def is_short(self) -> bool:
        """A one-line question or a search box query, rather than an issue."""
        return len(self.text) < 200 and "\n" not in self.text.strip()


def _tokens(text: str) -> list[str]:
    return [
        term
        for ident in _WORD.findall(text)
        for term in split_identifier(ident)
        if len(term) > 1 and term not in STOPWORDS and not term.isdigit()
    ]


def _terms(text: str) -> list[str]:
    return list(dict.fromkeys(_tokens(text)))


def _is_codeish(word: str) -> bool:
    """snake_case, camelCase/CamelCase, or letters with digits (``read1``, ``md5sum``)."""
    core = word.strip("_")
    if not core:
        return False
    return "_" in core or _CAMEL.search(core) is not None or _ALNUM.fullmatch(core) is not None


def _add(seq: dict[str, None], name: str) -> None:
    name = name.replace("::", ".").strip(".")
    if len(name) > 2 and name not in _NOT_NAMES and not name.isdigit():
        seq.setdefault(name, None)


_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
_DETAILS = re.compile(r"<details>(.*?)(?:</details>|\Z)", re.S | re.I)
_HEADING = re.compile(r"^\s*(?:#{1,6}\s*(.+?)\s*#*|\*\*(.+?)\*\*:?|__(.+?)__:?)\s*$")
#: Headings of the parts of an issue template that describe the reporter's machine.
_ENV_HEADING = re.compile(
    r"\b(environment|versions?|system info|installed|platform|setup|output of .*versions?|"
    r"pip (?:list|freeze)|conda (?:list|env)|os|machine)\b", re.I
)
_VERSION_LINE = re.compile(
    r"^\s*[-*]?\s*[\w.\- ]{1,40}\s*(?::|==|>=|<=|~=)\s*"
    r"(?:v?\d+\.\w+(?:\.\w+)*.*|None|N/A|unknown|not installed)\s*$",
    re.I,
)
#: Headings of issue templates: they frame every report alike.
_TEMPLATE_HEADING = re.compile(
    r"^(?:describe the bug|bug description|to reproduce|steps to reproduce|expected (?:behaviou?r|"
    r"output|result)|actual (?:behaviou?r|output|result)|screenshots?|additional (?:context|info.*)|"
    r"your project|mcve code sample|minimal (?:complete )?(?:verifiable )?example|problem description|"
    r"what happened\??|what did you expect to happen\??|relevant log output|anything else.*|"
    r"feature description|proposed solution|alternatives?(?: considered)?|motivation|description|"
    r"summary|reproducer|code for reproduction|current behaviou?r|how to reproduce)\s*:?$",
    re.I,
)
#: Template sentences that reporters leave in place.
_PLACEHOLDER = re.compile(
    r"^\s*(?:a clear and concise description.*|add any other context.*|if applicable, add.*|"
    r"steps to reproduce the behavio(?:u)?r.*|link to your .* project.*|"
    r"-? ?\[[ x]\] .*)$",
    re.I | re.M,
)
_EG = re.compile(r"\[e\.g\.[^\]]*\]", re.I)


def strip_boilerplate(text: str) -> str:
    """The issue without what issue templates add: HTML comments (template instructions),
    environment and version dumps (``INSTALLED VERSIONS``, ``pip freeze``, "Environment info"
    sections, runs of ``name: version`` lines), placeholder sentences and checklists. They
    name the reporter's machine, not the code, and their package and module names would
    otherwise outvote the report itself."""
    text = _COMMENT.sub(" ", text)
    text = _DETAILS.sub(
        lambda m: " " if _looks_like_versions(m.group(1)) else m.group(1), text
    )
    text = _EG.sub(" ", _PLACEHOLDER.sub("", text))
    out: list[str] = []
    skipping = False
    run: list[str] = []

    def flush() -> None:
        if len(run) < 3:  # fewer than three `name: version` lines are ordinary text
            out.extend(run)
        run.clear()

    for line in text.splitlines():
        m = _HEADING.match(line)
        if m:
            title = next(g for g in m.groups() if g is not None)
            skipping = bool(_ENV_HEADING.search(title)) and len(title) < 60
            flush()
            if not skipping and not _TEMPLATE_HEADING.match(title.strip()):
                out.append(line)
            continue
        if skipping:
            continue
        if _VERSION_LINE.match(line) and len(line) < 160:
            run.append(line)
            continue
        flush()
        out.append(line)
    flush()
    return "\n".join(out)


def _looks_like_versions(block: str) -> bool:
    lines = [ln for ln in block.splitlines() if ln.strip()]
    if not lines:
        return True
    if re.search(r"INSTALLED VERSIONS|show_versions|pip (?:list|freeze)|conda (?:list|info)", block, re.I):
        return True
    return sum(bool(_VERSION_LINE.match(ln)) for ln in lines) >= 0.5 * len(lines)


@lru_cache(maxsize=256)
def parse_query(text: str) -> Query:
    """Parse a task or issue text (markdown, pasted tracebacks, doctests, plain words); the
    template boilerplate of issue trackers is left out first (`strip_boilerplate`)."""
    original = text
    text = strip_boilerplate(text)
    code_parts: list[str] = []
    prose = text

    def take_code(m: re.Match) -> str:
        code_parts.append(m.group(2))
        return "\n"

    prose = _FENCE.sub(take_code, prose)
    prose = _URL.sub(" ", prose)
    frames: list[Frame] = []
    for m in _PY_FRAME.finditer(text):
        fn = m.group(3) or ""
        frames.append(Frame(m.group(1), int(m.group(2)), "" if fn.startswith("<") else fn))
    for m in _LOCATION.finditer(_URL.sub(" ", text)):
        frames.append(Frame(m.group(1), int(m.group(2))))
    # A traceback in prose (not fenced) is code too: its frames and source lines.
    tb_lines = []
    kept_prose = []
    in_tb = False
    for line in prose.splitlines():
        s = line.strip()
        if s.startswith("Traceback (most recent call last)"):
            in_tb = True
            tb_lines.append(line)
            continue
        if in_tb:
            if s.startswith("File ") or line.startswith((" ", "\t")) or not s:
                tb_lines.append(line)
                continue
            in_tb = False
            tb_lines.append(line)  # the exception line ends the traceback
            continue
        kept_prose.append(line)
    prose = "\n".join(kept_prose)
    code_parts.extend(tb_lines)
    for m in _DOCTEST.finditer(prose):
        code_parts.append(m.group(1))
    for m in _INDENTED.finditer(prose):
        code_parts.append(m.group(0))
    inline = [m.group(1) for m in _INLINE.finditer(prose)]
    code_parts.extend(inline)
    prose = _INLINE.sub(" ", prose)
    code = "\n".join(code_parts)

    exceptions: dict[str, None] = {}
    errors: dict[str, None] = {}
    for m in _EXC_LINE.finditer(text):
        exceptions.setdefault(m.group(1), None)
        msg = (m.group(2) or "").strip()
        if len(msg) >= 8 and len(_WORD.findall(msg)) >= 2:
            errors.setdefault(msg[:300], None)

    paths: dict[tuple[str, int | None], None] = {}
    for f in frames:
        paths.setdefault((f.path, f.line), None)
    for m in _PATH.finditer(_URL.sub(" ", text)):
        raw = m.group(1).strip(".")
        if raw.count("/") == 0 and not raw.endswith(_SOURCE_EXT):
            continue
        if "/" in raw and "." not in raw.rsplit("/", 1)[-1] and raw.count("/") < 1:
            continue
        paths.setdefault((raw, int(m.group(2)) if m.group(2) else None), None)

    idents: dict[str, None] = {}
    for snippet in inline:
        for d in _DOTTED.findall(snippet):
            _add(idents, d)
        for w in _WORD.findall(_DOTTED.sub(" ", snippet)):
            if len(w) > 2:
                _add(idents, w)
    for f in frames:
        if f.function:
            _add(idents, f.function)
    for source in (text,):
        for m in _DOTTED.finditer(_URL.sub(" ", source)):
            d = m.group(0)
            if d.endswith(_SOURCE_EXT) or re.fullmatch(r"[\d.]+", d):
                continue
            parts = d.replace("::", ".").split(".")
            if all(len(p) > 1 for p in parts) and not all(p.islower() and len(p) < 4 for p in parts):
                _add(idents, d)
        for m in _CALL.finditer(source):
            _add(idents, m.group(1))
        for w in _WORD.findall(source):
            if _is_codeish(w):
                _add(idents, w)
    for w in _WORD.findall(code):
        if len(w) > 2 and (_is_codeish(w) or w[0].isupper()):
            _add(idents, w)

    aliases = _aliases(code)
    for ident in list(idents):
        expanded = _expand(ident, aliases)
        if expanded != ident:
            _add(idents, expanded)
    code_terms = _terms(code + "\n" + "\n".join(idents))
    prose_terms = [t for t in _terms(prose) if t not in set(code_terms)]
    return Query(
        text=original,
        prose=prose,
        code=code,
        frames=tuple(frames),
        paths=tuple(paths),
        identifiers=tuple(idents),
        exceptions=tuple(exceptions),
        errors=tuple(errors),
        code_terms=tuple(code_terms),
        prose_terms=tuple(prose_terms),
        term_counts=dict(Counter(_tokens(text))),
        aliases=aliases,
    )


def _aliases(code: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for m in _IMPORT_AS.finditer(code):
        out[m.group(2)] = m.group(1)
    for m in _FROM_IMPORT.finditer(code):
        for part in m.group(2).split(","):
            words = part.split()
            if len(words) == 3 and words[1] == "as":
                out[words[2]] = f"{m.group(1)}.{words[0]}"
            elif len(words) == 1 and words[0] != "*":
                out.setdefault(words[0], f"{m.group(1)}.{words[0]}")
    for m in _ASSIGN_CALL.finditer(code):
        var, callee = m.group(1), m.group(2)
        if var not in out and callee.rsplit(".", 1)[-1][:1].isupper():
            out[var] = callee
    return out


def _expand(ident: str, aliases: dict[str, str], depth: int = 3) -> str:
    """``xr.where`` -> ``xarray.where``; ``da.quantile`` -> ``xarray.DataArray.quantile``."""
    head, _, rest = ident.partition(".")
    target = aliases.get(head)
    if target is None or depth == 0 or target == head:
        return ident
    full = f"{target}.{rest}" if rest else target
    return _expand(full, aliases, depth - 1) if full != ident else ident
