"""Finding the text a SEARCH/REPLACE block means in a file, by construction: the file's own
exact text comes out, so the `edit` tool still replaces an exact, unique string (never a fuzzy
write). Used by agent/edit_blocks.py.

- :func:`find_search`: SEARCH exactly; then without its final newline at the end of the file;
  then line by line ignoring trailing whitespace; then with every line's indentation shifted by
  the same amount (REPLACE re-indented to match); then without read_span's line numbers. A
  SEARCH found twice is refused, not guessed.
- :func:`find_definition`: a block with no SEARCH part whose REPLACE redefines a Python
  function or class (``def total(self): ...``) — how Qwen2.5-Coder 1.5B was seen to write its
  edits — stands for that definition's lines in the file (decorators when REPLACE has some),
  found once by name; REPLACE is re-indented to the definition's indentation.
- :func:`rewrite`: a file written out whole, as one edit from its first changed line to its
  last; refused when it leaves code out (an elision comment, a top-level definition).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

_DEF = re.compile(r"^(?P<indent>[ \t]*)(?:async[ \t]+)?(?:def|class)[ \t]+(?P<name>\w+)")
_DEF_START = re.compile(r"^[ \t]*(?:@|(?:async[ \t]+)?(?:def|class)[ \t]+\w)")
#: What a loose match returns when REPLACE goes in as written (only trailing spaces differed).
_AS_IS = "\x00as-is"


@dataclass(frozen=True)
class Found:
    """How a SEARCH text was found in one file: the file's exact text to replace and what to
    put there; or how often it occurs (``count`` > 1) or what is nearest (``count`` 0)."""

    count: int
    old: str = ""
    new: str = ""
    lines: tuple[int, ...] = ()


def widen(text: str, start: int, end: int) -> tuple[int, int, str, str]:
    """``text[start:end]`` grown by whole lines until it occurs once in ``text``; also the text
    added before and after (for the replacement to carry the same context)."""
    s, e = start, end
    while text.count(text[s:e]) > 1 and (s > 0 or e < len(text)):
        if s > 0:
            s = text.rfind("\n", 0, s - 1) + 1
        else:
            nl = text.find("\n", e)
            e = len(text) if nl < 0 else nl + 1
    return s, e, text[s:start], text[end:e]


def find_search(text: str, search: str, replace: str) -> Found:
    """Where ``search`` is in ``text`` (see the module docstring for how loosely), as the
    file's exact text and its replacement."""
    nl = "\r\n" if "\r\n" in text else "\n"
    if nl != "\n":
        search, replace = search.replace("\n", nl), replace.replace("\n", nl)
    count = text.count(search)
    if count > 1:
        return Found(count, lines=_starts(text, search))
    if count == 1:
        pos = text.find(search)
        lead = text[text.rfind("\n", 0, pos) + 1 : pos]
        if lead and not lead.strip() and nl in replace.rstrip(nl):
            # SEARCH starts inside a line's indentation and REPLACE has several lines: as
            # whole lines, so that every line of REPLACE gets the file's indentation.
            whole = _by_lines(text, search, replace, nl)
            if whole.count == 1:
                return whole
        return Found(1, search, replace)
    cut = search[: -len(nl)]
    if search.endswith(nl) and cut and text.endswith(cut) and text.count(cut) == 1:
        # The file's last line, which has no final newline.
        return Found(1, cut, replace[: -len(nl)] if replace.endswith(nl) else replace)
    found = _by_lines(text, search, replace, nl)
    if not found.count and _numbered(search):
        # Lines copied from read_span with its line numbers (`   12| code`): without them.
        return find_search(text, _unnumbered(search), _unnumbered(replace))
    return found


_NUMBER = re.compile(r"^[ \t]*\d+\| ?", re.M)


def _numbered(text: str) -> bool:
    filled = [line for line in text.splitlines() if line.strip()]
    return bool(filled) and all(_NUMBER.match(line) for line in filled)


def _unnumbered(text: str) -> str:
    return _NUMBER.sub("", text) if _numbered(text) else text


def _by_lines(text: str, search: str, replace: str, nl: str) -> Found:
    """SEARCH matched line by line: ignoring trailing whitespace, then with the indentation of
    every line shifted by the same amount."""
    lines = text.splitlines(keepends=True)
    want = search.replace("\r\n", "\n").strip("\n").split("\n")
    if not any(w.strip() for w in want):
        return Found(0)
    for loose in (_same_but_trailing, _same_but_indent):
        hits = [
            s
            for s in range(len(lines) - len(want) + 1)
            if loose(lines[s : s + len(want)], want) is not None
        ]
        if len(hits) > 1:
            return Found(len(hits), lines=tuple(s + 1 for s in hits))
        if hits:
            s = hits[0]
            window = lines[s : s + len(want)]
            indent = loose(window, want)
            start = sum(len(x) for x in lines[:s])
            end = start + sum(len(x) for x in window)
            new = _reindent(
                replace.replace("\r\n", "\n"), want, indent, nl, window[-1].endswith("\n")
            )
            start2, end2, before, after = widen(text, start, end)
            return Found(1, text[start2:end2], before + new + after)
    return Found(0)


def _starts(text: str, needle: str) -> tuple[int, ...]:
    out, pos = [], text.find(needle)
    while pos >= 0 and len(out) < 10:
        out.append(text.count("\n", 0, pos) + 1)
        pos = text.find(needle, pos + max(1, len(needle)))
    return tuple(out)


def _same_but_trailing(window: list[str], want: list[str]) -> str | None:
    """``_AS_IS`` when the lines differ only in trailing whitespace, else None."""
    same = all(w.rstrip() == x.rstrip() for w, x in zip(window, want, strict=True))
    return _AS_IS if same else None


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _same_but_indent(window: list[str], want: list[str]) -> str | None:
    """The indentation the file adds to every line of SEARCH (after taking SEARCH's own common
    indentation away), when that is the only difference; else None."""
    pairs = [(w.rstrip(), x.rstrip()) for w, x in zip(window, want, strict=True)]
    if any(bool(w) != bool(x) for w, x in pairs):
        return None
    filled = [(w, x) for w, x in pairs if w]
    if not filled:
        return None
    cut = min(len(_indent(x)) for _, x in filled)
    prefix: str | None = None
    for w, x in filled:
        body = x[cut:]
        if not w.endswith(body) or w[: len(w) - len(body)].strip():
            return None
        lead = w[: len(w) - len(body)]
        if prefix is None:
            prefix = lead
        elif lead != prefix:
            return None
    return prefix


def _reindent(
    replace: str, want: list[str], indent: str | None, nl: str, final_newline: bool
) -> str:
    """REPLACE as it goes into the file: SEARCH's own indentation swapped for ``indent`` (none
    swapped for ``_AS_IS``), the file's line ends, a final newline where the match had one."""
    if not replace:
        return ""
    lines = replace.strip("\n").split("\n") if replace.strip("\n") else [""]
    if indent is not None and indent != _AS_IS:
        cut = min((len(_indent(x)) for x in want if x.strip()), default=0)
        lines = [indent + _dedent(line, cut) if line.strip() else "" for line in lines]
    return nl.join(lines) + (nl if final_newline else "")


def _dedent(line: str, cut: int) -> str:
    lead = len(_indent(line))
    return line[min(lead, cut) :]


# -- a definition rewritten whole -----------------------------------------------------------------


def definitions(code: str) -> list[tuple[str, str]]:
    """The top-level Python definitions in ``code`` (a block's REPLACE), as (name, text), each
    with its decorators; [] when ``code`` is anything else than definitions."""
    lines = code.strip("\n").split("\n")
    if not lines or not lines[0].strip():
        return []
    top = len(_indent(lines[0]))
    starts = [
        n
        for n, line in enumerate(lines)
        if line.strip()
        and len(_indent(line)) == top
        and _DEF_START.match(line)
        and (
            n == 0 or not lines[n - 1].strip().startswith("@") or len(_indent(lines[n - 1])) != top
        )
    ]
    if not starts or starts[0] != 0:
        return []
    out = []
    for k, start in enumerate(starts):
        chunk = lines[start : starts[k + 1] if k + 1 < len(starts) else len(lines)]
        if any(line.strip() and len(_indent(line)) < top for line in chunk):
            return []
        at = next(
            (n for n, ln in enumerate(chunk) if (m := _DEF.match(ln)) and len(m.group(1)) == top),
            None,
        )
        head = _DEF.match(chunk[at]) if at is not None else None
        if at is None or head is None:
            return []
        body_from = _signature_end(chunk, at) + 1
        if any(ln.strip() and len(_indent(ln)) <= top for ln in chunk[body_from:]):
            return []  # a statement after the definitions: not only definitions
        while chunk and not chunk[-1].strip():
            chunk.pop()
        out.append((head.group("name"), "\n".join(chunk) + "\n"))
    return out


def find_definition(text: str, name: str, code: str) -> Found:
    """Where the definition of ``name`` is in ``text``, to be replaced by ``code`` (one
    definition, as :func:`definitions` gives it)."""
    nl = "\r\n" if "\r\n" in text else "\n"
    lines = text.splitlines(keepends=True)
    heads = [
        n for n, line in enumerate(lines) if (m := _DEF.match(line)) and m.group("name") == name
    ]
    if len(heads) != 1:
        return Found(len(heads), lines=tuple(n + 1 for n in heads[:10]))
    head = heads[0]
    indent = _DEF.match(lines[head]).group("indent")  # type: ignore[union-attr]
    start = head
    if code.lstrip().startswith("@"):  # REPLACE brings its decorators: the file's go
        while start > 0 and lines[start - 1].strip().startswith("@"):
            start -= 1
    end = _signature_end(lines, head) + 1
    while end < len(lines) and (
        not lines[end].strip() or len(_indent(lines[end].rstrip("\r\n"))) > len(indent)
    ):
        end += 1
    while end - 1 > head and not lines[end - 1].strip():
        end -= 1
    body = code.strip("\n").split("\n")
    cut = len(_indent(body[0]))
    new = nl.join(indent + _dedent(line, cut) if line.strip() else "" for line in body)
    if lines[end - 1].endswith("\n"):
        new += nl
    s = sum(len(x) for x in lines[:start])
    e = s + sum(len(x) for x in lines[start:end])
    s2, e2, before, after = widen(text, s, e)
    return Found(1, text[s2:e2], before + new + after, (start + 1,))


def _signature_end(lines: list[str], head: int) -> int:
    """The line where the definition's header ends (``def f(\\n a,\\n):`` spans three)."""
    depth = 0
    for n in range(head, min(len(lines), head + 50)):
        code = lines[n].split("#", 1)[0]
        depth += code.count("(") + code.count("[") - code.count(")") - code.count("]")
        if depth <= 0:  # brackets closed: the header ends here (or it is a one-liner)
            return n
    return head


# -- a file written out whole ---------------------------------------------------------------------

#: How alike (difflib ratio of lines) a file written out whole must be to the file it names.
WHOLE_ALIKE = 0.5
_ELIDED = re.compile(
    r"^\s*(?:\.\.\.|(?:#|//)\s*(?:\.\.\.|.*\b(?:rest of|remainder of|unchanged|existing code|"
    r"same as before)\b))",
    re.I,
)


def rewrite(text: str, content: str) -> tuple[Found, str]:
    """``text`` rewritten as ``content`` (a file the model wrote out whole), as one exact edit
    from the first changed line to the last; or Found(0) and why it is not taken: unchanged, too
    unlike the file to be a version of it, or leaving out code (an elision or a definition)."""
    nl = "\r\n" if "\r\n" in text else "\n"
    content = content.replace("\r\n", "\n")
    if text.endswith(("\n", "\r\n")) and not content.endswith("\n"):
        content += "\n"
    if nl != "\n":
        content = content.replace("\n", nl)
    if content == text:
        return Found(0), "it is the file unchanged"
    old, new = text.splitlines(keepends=True), content.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    if matcher.ratio() < WHOLE_ALIKE:
        return Found(
            0
        ), f"it is too unlike the file to be a version of it ({matcher.ratio():.0%} alike)"
    added = [
        line for tag, _, _, j1, j2 in matcher.get_opcodes() if tag != "equal" for line in new[j1:j2]
    ]
    if any(_ELIDED.search(line) and line not in old for line in added):
        return Found(0), 'it leaves part of the file out (`...`, "unchanged")'
    lost = sorted(_top_names(old) - _top_names(new))
    if lost:
        return Found(0), "it leaves out " + ", ".join(f"`{n}`" for n in lost[:5])
    codes = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    i1, j1 = codes[0][1], codes[0][3]
    i2, j2 = codes[-1][2], codes[-1][4]
    start = sum(len(x) for x in old[:i1])
    end = start + sum(len(x) for x in old[i1:i2])
    s, e, before, after = widen(text, start, end)
    return Found(1, text[s:e], before + "".join(new[j1:j2]) + after, (i1 + 1,)), ""


def _top_names(lines: list[str]) -> set[str]:
    return {m.group("name") for line in lines if (m := _DEF.match(line)) and not m.group("indent")}
