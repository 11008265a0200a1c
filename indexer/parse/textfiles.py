"""Files without a tree-sitter grammar, cut into definitions by their own structure.

Docs (Markdown, reStructuredText) by section: each heading is a definition of kind
``section`` whose qualname is the heading path (``Install.From source``). Configs by key or
``[section]`` (YAML, TOML, JSON, INI), Dockerfiles by stage, Makefiles by target, SQL by
``CREATE`` statement, S-expressions (tree-sitter queries, Scheme, Lisp) by top-level form;
plain text and ignore files are one module cut at paragraphs. The result is the
`ParsedFile` the tree-sitter parser returns, so chunking, search, the graph and incremental
builds treat these files like code. A link (Markdown/RST) or a path in a config that names a
file becomes a reference of kind ``link``: its ``receiver`` is the target as written (relative
to the linking file or, failing that, the repository root) and its ``name`` the name of the
target's module symbol; `indexer.graph.resolve` resolves it to that file's module symbol.

Size: ten small readers (one per format, 20-60 lines each) over one shared line model
(`_Doc`) and one link extractor; they share the entry/definition plumbing, so a format is one
function here plus a line in `languages.TEXT_FORMATS`.
"""

from __future__ import annotations

import posixpath
import re
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import unquote

from indexer.models import Definition, ParsedFile, Reference, Span
from indexer.parse.languages import language_for_path

_MAX_DOC = 500
_MAX_SIGNATURE = 240
_WS = re.compile(r"\s+")


@dataclass
class _Entry:
    name: str
    kind: str
    start: int  # 1-based lines, inclusive
    end: int
    signature: str
    level: int = 1
    doc: str = ""
    qualname: str = ""  # "" : the parent's qualname + "." + name


@dataclass
class _Doc:
    path: str
    text: str
    lines: list[str]
    offsets: list[int]  # byte offset of each line's start, and of the end
    links: list[tuple[str, int, int]] = field(default_factory=list)  # (target, line, col)
    breaks: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, path: str, source: bytes) -> _Doc:
        text = source.decode("utf-8", "replace")
        raw = text.splitlines(keepends=True)
        offsets = [0]
        for line in raw:
            offsets.append(offsets[-1] + len(line.encode("utf-8", "surrogatepass")))
        return cls(path, text, [ln.rstrip("\r\n") for ln in raw], offsets)

    def blank(self, line: int) -> bool:
        return not self.lines[line - 1].strip()

    def trim(self, start: int, end: int) -> int:
        """``end`` moved up past trailing blank lines, not above ``start``."""
        while end > start and self.blank(end):
            end -= 1
        return end

    def paragraph(self, start: int, stop: Callable[[str], bool] | None = None) -> str:
        """The first paragraph at or after line ``start`` (1-based), whitespace collapsed."""
        i, n = start, len(self.lines)
        while i <= n and self.blank(i):
            i += 1
        out = []
        while i <= n and not self.blank(i) and not (stop and stop(self.lines[i - 1])):
            out.append(self.lines[i - 1].strip())
            i += 1
        return _WS.sub(" ", " ".join(out))[:_MAX_DOC]

    def paragraph_breaks(self) -> None:
        prev_blank = True
        for i, line in enumerate(self.lines, 1):
            blank = not line.strip()
            if prev_blank and not blank:
                self.breaks.add(i)
            prev_blank = blank


def parse_text(path: str, source: bytes, language: str, module: str) -> ParsedFile:
    """Parse a file of one of `languages.TEXT_FORMATS`. Never raises on malformed input."""
    doc = _Doc.of(path, source)
    entries, file_doc = _PARSERS[language](doc)
    definitions = _definitions(doc, entries)
    refs = _link_refs(doc, definitions)
    doc.breaks.update(d.span.start_line for d in definitions)
    return ParsedFile(
        path=path,
        language=language,
        module=module,
        definitions=tuple(definitions),
        references=tuple(refs),
        imports=(),
        has_errors=False,  # text formats are indexed as written, not validated
        lines=source.count(b"\n") + (0 if source.endswith(b"\n") or not source else 1),
        doc=file_doc,
        breaks=tuple(sorted(b for b in doc.breaks if 1 <= b <= len(doc.lines))),
    )


def _definitions(doc: _Doc, entries: list[_Entry]) -> list[Definition]:
    """Definitions in start order, parents by level (a lower level that spans the entry)."""
    entries.sort(key=lambda e: (e.start, e.level))
    out: list[Definition] = []
    levels: list[int] = []
    stack: list[int] = []
    n = len(doc.offsets) - 1
    for e in entries:
        end = max(min(e.end, n), e.start)
        while stack and (levels[stack[-1]] >= e.level or out[stack[-1]].span.end_line < e.start):
            stack.pop()
        parent = stack[-1] if stack else -1
        if parent >= 0:
            end = min(end, out[parent].span.end_line)
        qualname = e.qualname or (f"{out[parent].qualname}.{e.name}" if parent >= 0 else e.name)
        span = Span(e.start, end, doc.offsets[e.start - 1], doc.offsets[end])
        sig = _WS.sub(" ", e.signature).strip()[:_MAX_SIGNATURE]
        out.append(Definition(e.name, qualname, e.kind, span, sig, e.doc, parent))
        levels.append(e.level)
        stack.append(len(out) - 1)
    return out


def _ends_at_next(doc: _Doc, entries: list[_Entry], level_aware: bool = False) -> None:
    """Each entry ends before the next one of its level or above (all entries with
    ``level_aware`` off), trailing blank lines left out."""
    last = len(doc.lines)
    for i, e in enumerate(entries):
        end = last
        for nxt in entries[i + 1 :]:
            if not level_aware or nxt.level <= e.level:
                end = nxt.start - 1
                break
        e.end = doc.trim(e.start, max(end, e.start))


def _clean_name(text: str) -> str:
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # [text](url) -> text
    text = text.replace("`", "").replace("**", "").replace("__", "")
    return _WS.sub(" ", text).strip().strip("*_ ") or text.strip()


# --------------------------------------------------------------------------- Markdown

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_NOT_PARAGRAPH = re.compile(r"^\s*(?:[-*+>|]|\d+[.)]\s|#|<)|^ {4}")
_MD_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'(][^)]*)?\s*\)")
_MD_REF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")


def _markdown(doc: _Doc) -> tuple[list[_Entry], str]:
    lines = doc.lines
    heads: list[_Entry] = []
    fence: tuple[str, int] | None = None
    start = 0
    if lines and lines[0].strip() == "---":  # YAML front matter
        for j in range(1, len(lines)):
            if lines[j].strip() in ("---", "..."):
                start = j + 1
                break
    prev_text = False  # the previous line is paragraph text (a setext heading's title)
    for i in range(start, len(lines)):
        line, no = lines[i], i + 1
        if fence is not None:
            m = _FENCE.match(line)
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= fence[1] and not m.group(2).strip():
                fence = None
                doc.breaks.add(no + 1)
            continue
        m = _FENCE.match(line)
        if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
            fence = (m.group(1)[0], len(m.group(1)))
            doc.breaks.add(no)
            prev_text = False
            continue
        m = _ATX.match(line)
        if m and (m.group(2) or "").strip():
            heads.append(_Entry(_clean_name(m.group(2)), "section", no, no, line.strip(), len(m.group(1))))
            prev_text = False
            continue
        m = _SETEXT.match(line)
        if m and prev_text:
            title = lines[i - 1]
            heads.append(_Entry(_clean_name(title), "section", no - 1, no, title.strip(),
                                1 if m.group(1)[0] == "=" else 2))
            prev_text = False
            continue
        prev_text = bool(line.strip()) and not _NOT_PARAGRAPH.match(line)
        for lm in _MD_LINK.finditer(line):
            doc.links.append((lm.group(1), no, lm.start(1)))
        rm = _MD_REF.match(line)
        if rm:
            doc.links.append((rm.group(1), no, rm.start(1)))
    doc.paragraph_breaks()
    body = [h.end + 1 for h in heads]
    _ends_at_next(doc, heads, level_aware=True)
    def stop(s: str) -> bool:
        return bool(_ATX.match(s) or _FENCE.match(s))

    for h, b in zip(heads, body, strict=True):
        h.doc = doc.paragraph(b, stop)
    first_text = next((no for no in range(start + 1, len(lines) + 1) if not doc.blank(no)), 0)
    if heads and heads[0].start == first_text:  # a title: the file is about it
        return heads, (f"{heads[0].name}: {heads[0].doc}" if heads[0].doc else heads[0].name)[:_MAX_DOC]
    return heads, doc.paragraph(start + 1, stop)


# --------------------------------------------------------------------------- reStructuredText

_ADORN = re.compile(r"^([!-/:-@\[-`{-~])\1{2,}\s*$")
_RST_LINK = re.compile(r"`[^`<]*<([^>`]+)>`__?")
_RST_TARGET = re.compile(r"^\s*\.\. _[^:]+:\s*(\S+)\s*$")
_RST_INCLUDE = re.compile(r"^\s*\.\. (?:include|literalinclude)::\s*(\S+)\s*$")


def _rst(doc: _Doc) -> tuple[list[_Entry], str]:
    lines = doc.lines
    n = len(lines)
    styles: list[tuple[str, bool]] = []
    heads: list[_Entry] = []
    i = 0
    while i < n:
        line = lines[i]
        after_blank = i == 0 or not lines[i - 1].strip()
        adorn = _ADORN.match(line)
        if (adorn and after_blank and i + 2 < n and lines[i + 1].strip() and not _ADORN.match(lines[i + 1])
                and lines[i + 2].rstrip() == line.rstrip()):
            style, title, span = (adorn.group(1), True), lines[i + 1].strip(), 3
        elif (not adorn and after_blank and line.strip() and not line[0].isspace() and i + 1 < n
              and (under := _ADORN.match(lines[i + 1])) is not None
              and len(lines[i + 1].rstrip()) >= min(len(line.rstrip()), 4)):
            style, title, span = (under.group(1), False), line.strip(), 2
        else:
            for lm in _RST_LINK.finditer(line):
                doc.links.append((lm.group(1), i + 1, lm.start(1)))
            for rx in (_RST_TARGET, _RST_INCLUDE):
                tm = rx.match(line)
                if tm:
                    doc.links.append((tm.group(1), i + 1, tm.start(1)))
            i += 1
            continue
        if style not in styles:
            styles.append(style)
        heads.append(_Entry(_clean_name(title), "section", i + 1, i + span,
                            title, styles.index(style) + 1))
        i += span
    doc.paragraph_breaks()
    body = [h.end + 1 for h in heads]
    _ends_at_next(doc, heads, level_aware=True)
    for h, b in zip(heads, body, strict=True):
        h.doc = doc.paragraph(b, stop=lambda s: bool(_ADORN.match(s)))
    file_doc = f"{heads[0].name}: {heads[0].doc}"[:_MAX_DOC] if heads else doc.paragraph(1)
    return heads, file_doc


# --------------------------------------------------------------------------- plain text


def _plain(doc: _Doc) -> tuple[list[_Entry], str]:
    doc.paragraph_breaks()
    return [], doc.paragraph(1)


# --------------------------------------------------------------------------- configs

#: A relative path with an extension in a config value: `readme = "README.md"`, `src/app.py`.
_PATH_TOKEN = re.compile(r"(?<![\w./\-:$@%{~\\])((?:\.{1,2}/)?[\w\-]+(?:[./][\w\-]+)*\.[A-Za-z]\w*)(?![\w/\-(@{])")


def _config_paths(doc: _Doc, line: str, no: int) -> None:
    for m in _PATH_TOKEN.finditer(line):
        tok = m.group(1)
        if "://" not in line[max(m.start() - 8, 0) : m.start() + 3] and language_for_path(tok):
            doc.links.append((tok, no, m.start(1)))


def _leading_comment(doc: _Doc, marks: tuple[str, ...] = ("#",)) -> str:
    out = []
    for line in doc.lines:
        s = line.strip()
        if not s.startswith(marks):
            break
        out.append(s.lstrip("#;-/ ").strip())
    return " ".join(x for x in out if x)[:_MAX_DOC]


def _comment_above(doc: _Doc, line: int, marks: tuple[str, ...] = ("#",)) -> str:
    out = []
    i = line - 1
    while i >= 1 and doc.lines[i - 1].lstrip().startswith(marks):
        out.append(doc.lines[i - 1].strip().lstrip("#;-/ ").strip())
        i -= 1
    return " ".join(reversed([x for x in out if x]))[:_MAX_DOC]


_YAML_KEY = re.compile(r"""^( *)(?:"([^"]+)"|'([^']+)'|([^\s#"'\-\[\]{},&*!|>%@`?][^:#]*?|-[^\s:#][^:#]*?))\s*:(?=\s|$)""")
_YAML_DOC = re.compile(r"^(?:---|\.\.\.)(?:\s|$)")


def _yaml(doc: _Doc) -> tuple[list[_Entry], str]:
    """Top-level keys, and the keys one level under each (``jobs.build``)."""
    entries: list[_Entry] = []
    boundaries: list[int] = []
    child_indent: int | None = None
    block: int | None = None  # indentation of a block scalar (`key: |`) being skipped
    for no, line in enumerate(doc.lines, 1):
        if block is not None:
            if not line.strip() or len(line) - len(line.lstrip(" ")) > block:
                continue
            block = None
        if _YAML_DOC.match(line):
            boundaries.append(no)
            child_indent = None
            continue
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        m = _YAML_KEY.match(line)
        indent = len(line) - len(stripped)
        if m:
            key = m.group(2) or m.group(3) or m.group(4)
            if indent == 0:
                entries.append(_Entry(key, "key", no, no, line.strip(), 1, _comment_above(doc, no)))
                child_indent = None
            elif entries and (child_indent is None or indent == child_indent):
                child_indent = indent
                entries.append(_Entry(key, "key", no, no, line.strip(), 2, _comment_above(doc, no)))
            if re.search(r":\s*[|>][-+0-9]*\s*(?:#.*)?$", line):
                block = indent
        _config_paths(doc, line, no)
    for b in boundaries:  # a document separator ends what precedes it
        entries.append(_Entry("", "", b, b, "", 0))
    entries.sort(key=lambda e: (e.start, e.level))
    _ends_at_next(doc, entries, level_aware=True)
    doc.breaks.update(no for no, ln in enumerate(doc.lines, 1) if ln[:1] not in ("", " ", "\t"))
    return [e for e in entries if e.level], _leading_comment(doc)


_TOML_HEADER = re.compile(r"^\s*\[(\[?)\s*([^\[\]]+?)\s*\]\]?\s*(?:#.*)?$")
_TOML_KEY = re.compile(r"""^([A-Za-z0-9_\-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_\-]+|"[^"]*"|'[^']*'))*\s*=""")


def _toml(doc: _Doc) -> tuple[list[_Entry], str]:
    """``[sections]`` (qualname: the dotted header) and the keys before the first one."""
    entries: list[_Entry] = []
    in_string: str | None = None
    seen_header = False
    for no, line in enumerate(doc.lines, 1):
        if in_string is not None:
            if line.count(in_string) % 2:
                in_string = None
            continue
        for q in ('"""', "'''"):
            if line.count(q) % 2:
                in_string = q
        h = _TOML_HEADER.match(line)
        if h and in_string is None:
            qual = re.sub(r"\s*\.\s*", ".", h.group(2)).replace('"', "").replace("'", "")
            entries.append(_Entry(qual.rsplit(".", 1)[-1], "section", no, no, line.strip(),
                                  doc=_comment_above(doc, no), qualname=qual))
            seen_header = True
        elif not seen_header and (k := _TOML_KEY.match(line)):
            name = k.group(0).rstrip("= ").strip().strip("\"'")
            entries.append(_Entry(name, "key", no, no, line.strip(), doc=_comment_above(doc, no),
                                  qualname=name))
        if not line.lstrip().startswith("#"):
            _config_paths(doc, line, no)
    _ends_at_next(doc, entries)
    doc.breaks.update(no for no, ln in enumerate(doc.lines, 1) if ln.strip() and not ln[0].isspace())
    return entries, _leading_comment(doc)


_INI_SECTION = re.compile(r"^\s*\[([^\]]+)\]\s*(?:[#;].*)?$")
_INI_KEY = re.compile(r"^([^\s=:#;\[][^=:]*?)\s*[=:]")


def _ini(doc: _Doc) -> tuple[list[_Entry], str]:
    entries: list[_Entry] = []
    seen_section = False
    for no, line in enumerate(doc.lines, 1):
        s = line.lstrip()
        if s.startswith(("#", ";")):
            continue
        m = _INI_SECTION.match(line)
        if m:
            name = m.group(1).strip()
            entries.append(_Entry(name, "section", no, no, line.strip(), doc=_comment_above(doc, no, ("#", ";")),
                                  qualname=name))
            seen_section = True
        elif not seen_section and (k := _INI_KEY.match(line)):
            entries.append(_Entry(k.group(1), "key", no, no, line.strip(), qualname=k.group(1)))
        _config_paths(doc, line, no)
    _ends_at_next(doc, entries)
    doc.breaks.update(no for no, ln in enumerate(doc.lines, 1) if ln.strip() and not ln[0].isspace())
    return entries, _leading_comment(doc, ("#", ";"))


_JSON_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|[{}\[\]:\n]')


def _json(doc: _Doc) -> tuple[list[_Entry], str]:
    """The keys of the top-level object."""
    entries: list[_Entry] = []
    depth = 0
    line = 1
    last: tuple[str, int] | None = None  # a string token at depth 1 that may be a key
    close_line = 0
    for m in _JSON_TOKEN.finditer(doc.text):
        tok = m.group(0)
        if tok == "\n":
            line += 1
        elif tok in "{[":
            depth += 1
            last = None
        elif tok in "}]":
            depth -= 1
            if depth == 0:
                close_line = line
            last = None
        elif tok == ":":
            if last is not None and (not entries or entries[-1].start != last[1]):
                name = last[0]
                entries.append(_Entry(name, "key", last[1], last[1], doc.lines[last[1] - 1].strip(),
                                      qualname=name))
            last = None
        elif depth == 1:
            last = (tok[1:-1], line)
        else:
            last = None
        if tok.startswith('"') and len(tok) > 4:
            _json_path(doc, tok[1:-1], line, m.start() + 1)
    last_line = close_line - 1 if close_line and doc.lines[close_line - 1].strip() in ("}", "},") else close_line
    _ends_at_next(doc, entries)
    if entries and last_line:
        entries[-1].end = doc.trim(entries[-1].start, max(min(entries[-1].end, last_line), entries[-1].start))
    doc.breaks.update(e.start for e in entries)
    return entries, ""


def _json_path(doc: _Doc, value: str, line: int, at: int) -> None:
    if "/" in value or "." in value:
        m = _PATH_TOKEN.fullmatch(value)
        if m and language_for_path(value):
            doc.links.append((value, line, at - doc.text.rfind("\n", 0, at) - 1))


_DOCKER_INSTR = re.compile(r"^\s*([A-Za-z]+)(?:\s|$)")
_DOCKER_FROM = re.compile(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", re.I)
_HEREDOC = re.compile(r"<<-?\s*[\"']?(\w+)[\"']?")


def _dockerfile(doc: _Doc) -> tuple[list[_Entry], str]:
    """Stages (``FROM image AS name``), their ARG/ENV variables; each instruction a break."""
    entries: list[_Entry] = []
    lines = doc.lines
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        no = i + 1
        s = line.strip()
        if not s or s.startswith("#"):
            i += 1
            continue
        # one instruction: continuation lines and heredocs belong to it
        j = i
        while j < n - 1 and lines[j].rstrip().endswith("\\"):
            j += 1
        hd = _HEREDOC.search(line)
        if hd:
            while j < n - 1 and lines[j + 1].strip() != hd.group(1):
                j += 1
            j = min(j + 1, n - 1)
        doc.breaks.add(no)
        m = _DOCKER_INSTR.match(line)
        word = m.group(1).upper() if m else ""
        text = " ".join(ln.rstrip("\\").strip() for ln in lines[i : j + 1])
        if word == "FROM" and (f := _DOCKER_FROM.match(text)):
            image = f.group(1)
            name = f.group(2) or image.rsplit("/", 1)[-1].split("@")[0].split(":")[0]
            entries.append(_Entry(name, "stage", no, n, s, 1, _comment_above(doc, no)))
        elif word in ("ARG", "ENV"):
            rest = text.split(None, 1)[1] if len(text.split(None, 1)) > 1 else ""
            names = re.findall(r"(?:^|\s)([A-Za-z_]\w*)(?==)", rest) or rest.split()[:1]
            for name in names:
                entries.append(_Entry(name.split("=")[0], "variable", no, j + 1, s, 2, _comment_above(doc, no)))
        elif word in ("COPY", "ADD") and "--from" not in text:
            args = [a for a in text.split()[1:] if not a.startswith("--")]
            for a in args[:-1]:
                if language_for_path(a) and _PATH_TOKEN.fullmatch(a.removeprefix("./")):
                    doc.links.append((a, no, line.find(a)))
        i = j + 1
    stages = [e for e in entries if e.level == 1]
    _ends_at_next(doc, stages)
    return entries, _leading_comment(doc)


_MAKE_VAR = re.compile(r"^(?:export\s+|override\s+)?([A-Za-z_][\w.\-]*)\s*(?::{1,3}=|\?=|!=|=)")
_MAKE_RULE = re.compile(r"^([^:#=\t][^:#=]*?)\s*(?:::?|&:)(?!=)(.*)$")
_MAKE_INCLUDE = re.compile(r"^-?s?include\s+(.+)$")
_MAKE_DEFINE = re.compile(r"^(?:export\s+|override\s+)?define\s+([A-Za-z_][\w.\-]*)")


def _makefile(doc: _Doc) -> tuple[list[_Entry], str]:
    """Targets (kind ``target``, through their recipe) and variables (``NAME = ...``)."""
    entries: list[_Entry] = []
    lines = doc.lines
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        no = i + 1
        j = i
        while j < n - 1 and lines[j].endswith("\\"):
            j += 1
        if not line.strip() or line.startswith(("\t", "#")):
            i = j + 1
            continue
        doc.breaks.add(no)
        if (d := _MAKE_DEFINE.match(line)) is not None:
            while j < n - 1 and lines[j].strip() != "endef":
                j += 1
            entries.append(_Entry(d.group(1), "variable", no, j + 1, line.strip(), doc=_comment_above(doc, no)))
        elif (v := _MAKE_VAR.match(line)) is not None:
            entries.append(_Entry(v.group(1), "variable", no, j + 1, line.strip(), doc=_comment_above(doc, no)))
        elif (inc := _MAKE_INCLUDE.match(line)) is not None:
            for tok in inc.group(1).split():
                if language_for_path(tok) and "$" not in tok:
                    doc.links.append((tok, no, line.find(tok)))
        elif (r := _MAKE_RULE.match(line)) is not None and "=" not in r.group(2).split(";")[0]:
            # the recipe: tab-indented lines, with blank lines and comments between them
            k = j
            while k + 1 < n and (lines[k + 1].startswith("\t") or not lines[k + 1].strip()
                                 or lines[k + 1].startswith("#")):
                k += 1
            while k > j and (not lines[k].strip() or lines[k].startswith("#")):
                k -= 1
            for target in r.group(1).split():
                if target.startswith(".") and target[1:].replace("_", "").isupper():
                    continue  # .PHONY, .SUFFIXES...
                entries.append(_Entry(target, "target", no, k + 1, line.strip(), doc=_comment_above(doc, no)))
            j = k
        i = j + 1
    for e in entries:
        e.qualname = e.name
    return entries, _leading_comment(doc)


_SQL_CREATE = re.compile(
    r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:(?:GLOBAL|LOCAL|TEMP|TEMPORARY|UNLOGGED|MATERIALIZED|UNIQUE"
    r"|VIRTUAL|RECURSIVE)\s+)*(TABLE|VIEW|FUNCTION|PROCEDURE|INDEX|TRIGGER|TYPE|SEQUENCE|SCHEMA|DOMAIN)"
    r"\s+(?:IF\s+NOT\s+EXISTS\s+)?(?:CONCURRENTLY\s+)?"
    r"((?:[`\"\[]?[\w$]+[`\"\]]?\.)*[`\"\[]?[\w$]+[`\"\]]?)",
    re.I,
)
_SQL_KINDS = {"table": "table", "view": "view", "function": "function", "procedure": "function",
              "index": "index", "trigger": "trigger", "type": "type", "domain": "type",
              "sequence": "sequence", "schema": "namespace"}
_SQL_SCAN = re.compile(r"'(?:[^']|'')*'|--[^\n]*|/\*.*?\*/|(\$\w*\$).*?\1|;|\n", re.S)


def _sql(doc: _Doc) -> tuple[list[_Entry], str]:
    """``CREATE TABLE/VIEW/FUNCTION...`` statements, through their closing ``;``."""
    ends: list[int] = []  # lines holding a statement-ending `;`
    line = 1
    for m in _SQL_SCAN.finditer(doc.text):
        tok = m.group(0)
        if tok == ";":
            ends.append(line)
        line += tok.count("\n")
    entries = []
    for no, text in enumerate(doc.lines, 1):
        m = _SQL_CREATE.match(text)
        if m:
            qual = re.sub(r"[`\"\[\]]", "", m.group(2))
            end = ends[bisect_right(ends, no - 1)] if bisect_right(ends, no - 1) < len(ends) else len(doc.lines)
            entries.append(_Entry(qual.rsplit(".", 1)[-1], _SQL_KINDS[m.group(1).lower()], no, end,
                                  text.strip(), doc=_comment_above(doc, no, ("--",)), qualname=qual))
    for a, b in zip(entries, entries[1:], strict=False):
        a.end = min(a.end, b.start - 1)
    doc.paragraph_breaks()
    doc.breaks.update(e + 1 for e in ends)
    return entries, _leading_comment(doc, ("--",))


#: Strings, comments (``;`` to the end of the line, ``#| ... |#``), brackets and newlines.
_SEXP_SCAN = re.compile(r'"(?:\\.|[^"\\])*"|;[^\n]*|#\|.*?\|#|[()\[\]]|\n', re.S)
#: ``(define (name args) ...)``, ``(defun name (args) ...)``, ``(define-syntax name ...)``.
_SEXP_DEFINE = re.compile(
    r"\(\s*(def(?:ine|un|macro|var|parameter|const|class|struct|generic|method|ine-[\w-]+)?)"
    r"\s+(\(?)\s*([^\s()\[\]\"';]+)")
_SEXP_KINDS = {"defun": "function", "defmacro": "macro", "defgeneric": "function",
               "defmethod": "method", "defclass": "class", "defstruct": "class",
               "define-syntax": "macro", "define-record-type": "class"}


def _sexp(doc: _Doc) -> tuple[list[_Entry], str]:
    """Top-level forms: each is a break (a tree-sitter query's patterns, a Lisp's forms), and a
    ``define``/``defun``-like form is a definition named by what it defines."""
    forms: list[tuple[int, int]] = []  # (first line, last line) of each top-level form
    depth, line, start = 0, 1, 0
    for m in _SEXP_SCAN.finditer(doc.text):
        tok = m.group(0)
        if tok in ("(", "["):
            if depth == 0:
                start = line
            depth += 1
        elif tok in (")", "]") and depth > 0:
            depth -= 1
            if depth == 0:
                forms.append((start, line))
        line += tok.count("\n")
    if depth > 0:  # unbalanced at the end: the open form runs to the last line
        forms.append((start, len(doc.lines)))
    entries = []
    for a, b in forms:
        doc.breaks.add(a)
        m = _SEXP_DEFINE.match(doc.lines[a - 1].lstrip())
        if m is None:
            continue
        head, call, name = m.groups()
        kind = _SEXP_KINDS.get(head) or ("function" if call else "variable")
        entries.append(_Entry(name, kind, a, b, doc.lines[a - 1].strip(),
                              doc=_comment_above(doc, a, (";",))))
    return entries, _leading_comment(doc, (";",))


_PARSERS: dict[str, Callable[[_Doc], tuple[list[_Entry], str]]] = {
    "markdown": _markdown,
    "rst": _rst,
    "text": _plain,
    "yaml": _yaml,
    "toml": _toml,
    "json": _json,
    "ini": _ini,
    "dockerfile": _dockerfile,
    "make": _makefile,
    "sql": _sql,
    "sexp": _sexp,
    "ignore": _plain,
}


# --------------------------------------------------------------------------- links


def link_name(target: str) -> str:
    """The name of the module symbol of the file at ``target`` (its last dotted part; a
    package's ``__init__`` is named after its directory), as `build` names module symbols."""
    base = posixpath.basename(target.rstrip("/"))
    stem = base.rsplit(".", 1)[0] if "." in base.lstrip(".") else base
    if stem == "__init__":
        return posixpath.basename(posixpath.dirname(target)) or stem
    return stem.rsplit(".", 1)[-1] or stem


def link_target(target: str) -> str | None:
    """A link as written, cleaned: without anchor or query, URL-decoded; None when it names
    no file repoctx indexes (a URL, an anchor, an image, a directory)."""
    if not target or target.startswith(("#", "mailto:")) or re.match(r"^[A-Za-z][\w+.\-]*:", target):
        return None
    target = unquote(target.split("#", 1)[0].split("?", 1)[0]).strip()
    if not target or target.endswith("/") or language_for_path(target) is None:
        return None
    return target


def _link_refs(doc: _Doc, defs: list[Definition]) -> list[Reference]:
    starts = [d.span.start_line for d in defs]

    def enclosing(line: int) -> int:
        i = bisect_right(starts, line) - 1
        while i >= 0 and defs[i].span.end_line < line:
            i = defs[i].parent
        return i

    out = []
    seen = set()
    for raw, line, col in doc.links:
        target = link_target(raw)
        if target is None or (target, line) in seen:
            continue
        seen.add((target, line))
        out.append(Reference(link_name(target), "link", line, max(col, 0), target, enclosing(line)))
    return out
