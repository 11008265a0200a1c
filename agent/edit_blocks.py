"""SEARCH/REPLACE blocks a model writes in its reply (Aider's diff form), turned into `edit` and
`create_file` tool calls.

Small models edit best in plain text: asked for a tool call with an exact ``old_text`` they
stall, asked for a block they write one. So a reply holding blocks is read as edits::

    blocks = parse_edit_blocks(reply.content)   # EditBlockError when a block is cut short
    calls, corrections = block_calls(blocks, known_paths, read)

Each call then runs through ``ToolRegistry.call_tool`` exactly like a tool call the model made:
the same permission gate, workspace and deny lists, syntax gate, checkpoints (undo) and trace.
Nothing here writes a file.

Forms read, as small models write them: markers of 5 to 9 characters (``<<<<<<< SEARCH``,
``=======``, ``>>>>>>> REPLACE``; ``ORIGINAL``/``UPDATED`` too), any case, trailing spaces,
CRLF; the file line bare, in backticks, in bold, after ``###``, ``#``, ``File:`` or ``Path:``,
on the line before the block or before its fence, or as the first line inside the fence; no file
line at all. A block with no file line that follows another with nothing but blank lines or
fences between them belongs to the same file (Aider does the same); otherwise it is placed by
its text (see :func:`block_calls`).

An empty SEARCH follows Aider: it creates the file when it does not exist, and appends REPLACE
to the end of the file when it does.

Matching is by construction, never a fuzzy write: the SEARCH text is looked for exactly, then
with the final newline dropped, then line by line ignoring trailing whitespace, then with every
line's indentation shifted by the same amount (REPLACE re-indented to match). Whatever matched
is turned back into the file's own exact text, so the `edit` tool still replaces an exact,
unique string; a SEARCH that matches twice is refused, not guessed.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from indexer import graph
from indexer.errors import RepoctxError

from .errors import AgentError
from .models.base import ToolCall
from .tools import ToolContext
from .tools.edit_tools import nearest_block

_HEAD = re.compile(r"^\s*<{5,9}\s*(?:SEARCH|ORIGINAL)\s*>?\s*$", re.I)
_DIVIDER = re.compile(r"^\s*={5,9}\s*$")
_TAIL = re.compile(r"^\s*>{5,9}\s*(?:REPLACE|UPDATED)\s*<?\s*$", re.I)
_FENCE = re.compile(r"^\s*(?:`{3,}|~{3,})(?P<info>.*)$")
_LABEL = re.compile(r"^(?:file(?:name)?|path)\s*[:=-]?\s*", re.I)
_PATH = re.compile(r"^[\w.\-/\\+@~]+$")
_QUOTED = re.compile(r"`([^`\s]+)`")
_EMPTY_FENCE = re.compile(r"^[ \t]*(?:```|~~~)[^\n]*\n(?:[ \t]*\n)*[ \t]*(?:```|~~~)[ \t]*$", re.M)
#: Most files read when placing a block that names none (the rest are not looked at).
MAX_SCAN = 3000
#: Characters of a block's SEARCH text quoted back in a correction.
QUOTE_CHARS = 200
#: Prefix of the ids given to the calls made from blocks (see :func:`block_number`).
ID_PREFIX = "block"
#: What a loose match returns when REPLACE goes in as written (only trailing spaces differed).
_AS_IS = "\x00as-is"


class EditBlockError(AgentError):
    """A SEARCH/REPLACE block in the reply is incomplete — send the block again whole."""

    def __init__(self, message: str, blocks: list[EditBlock]) -> None:
        super().__init__(message)
        #: The complete blocks read before the broken one.
        self.blocks = blocks


@dataclass(frozen=True)
class EditBlock:
    """One block: the file it names (None: no file line), the text to find, its replacement.
    Both texts use ``\\n`` line ends and end with one unless empty."""

    path: str | None
    search: str
    replace: str


@dataclass(frozen=True)
class ScannedBlocks:
    """What :func:`scan_edit_blocks` found: the complete blocks, one problem per broken one, and
    the reply's text with every block (and its file line) taken out."""

    blocks: list[EditBlock] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    rest: str = ""


def parse_edit_blocks(text: str) -> list[EditBlock]:
    """The SEARCH/REPLACE blocks in ``text``, in order. Raises :class:`EditBlockError` when a
    block is cut short (no ``=======`` or no ``>>>>>>> REPLACE``); its ``blocks`` are the
    complete ones before it."""
    scanned = scan_edit_blocks(text)
    if scanned.problems:
        raise EditBlockError(" ".join(scanned.problems), scanned.blocks)
    return scanned.blocks


def has_edit_blocks(text: str) -> bool:
    """Whether ``text`` holds at least the start of a SEARCH/REPLACE block (a cheap check)."""
    return bool(text) and any(_HEAD.match(line) for line in _lines(text))


def scan_edit_blocks(text: str) -> ScannedBlocks:
    """Like :func:`parse_edit_blocks`, but a broken block is a problem to report, not an error:
    the complete blocks are still returned."""
    lines = _lines(text or "")
    blocks: list[EditBlock] = []
    problems: list[str] = []
    dropped: set[int] = set()
    last_tail: int | None = None
    last_path: str | None = None
    i = 0
    while i < len(lines):
        if not _HEAD.match(lines[i]):
            i += 1
            continue
        number = len(blocks) + len(problems) + 1
        path, path_line = _file_line(lines, i)
        if path is None and last_tail is not None and not "".join(lines[last_tail + 1 : i]).strip():
            # Several blocks in a row under one file line. Across a fence they are not taken
            # for one file: a block in a new fence is placed by its text instead.
            path = last_path
        divider = _next(lines, i + 1, _DIVIDER)
        if divider is None:
            problems.append(
                f"Block {number} has no `=======` line after `<<<<<<< SEARCH` (the reply may "
                "have been cut off): send the block again whole."
            )
            dropped.update(range(i, len(lines)))
            break
        tail = _next(lines, divider + 1, _TAIL)
        if tail is None:
            problems.append(
                f"Block {number} has no `>>>>>>> REPLACE` line at its end (the reply may have "
                "been cut off): send the block again whole, ending with `>>>>>>> REPLACE`."
            )
            dropped.update(range(i, len(lines)))
            break
        blocks.append(
            EditBlock(path, _join(lines[i + 1 : divider]), _join(lines[divider + 1 : tail]))
        )
        dropped.update(range(i, tail + 1))
        if path_line is not None:
            dropped.add(path_line)
        last_tail, last_path, i = tail, path, tail + 1
    rest = "\n".join(line for n, line in enumerate(lines) if n not in dropped)
    return ScannedBlocks(blocks, problems, _EMPTY_FENCE.sub("", rest).strip())


def _lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _next(lines: list[str], start: int, marker: re.Pattern[str]) -> int | None:
    """The line of ``marker`` from ``start``, or None when the text ends first or a new block
    starts first (a block may not hold another's start)."""
    for n in range(start, len(lines)):
        if marker.match(lines[n]):
            return n
        if _HEAD.match(lines[n]):
            return None
    return None


def _join(lines: list[str]) -> str:
    if not any(line.strip() for line in lines):
        return ""
    return "\n".join(lines) + "\n"


def _file_line(lines: list[str], head: int) -> tuple[str | None, int | None]:
    """The path named just before the block at ``head`` and its line: up to three lines back,
    over blank lines and the fence opening the block, stopping at prose or another block."""
    for n in range(head - 1, max(-1, head - 4), -1):
        line = lines[n]
        if not line.strip():
            continue
        if _TAIL.match(line) or _DIVIDER.match(line) or _HEAD.match(line):
            return None, None
        fence = _FENCE.match(line)
        if fence:
            # ```python shop/cart.py: the path in the fence's info string.
            words = fence.group("info").split()
            named = next(
                (p for p in map(_as_path, words) if p and ("/" in p or len(words) > 1)), None
            )
            if named:
                return named, n
            continue
        path = _path_in(line)
        return (path, n) if path else (None, None)
    return None, None


def _path_in(line: str) -> str | None:
    """The path a file line names: bare, in backticks or bold, after `#`, `###`, `//`,
    `File:` or `Path:`, with a trailing colon; or one backticked path in a short line."""
    s = line.strip().lstrip("#/").strip()
    s = s.strip("*_").strip()
    s = _LABEL.sub("", s).strip().strip("*_`'\"").rstrip(":").strip("*_`'\"").strip()
    path = _as_path(s)
    if path:
        return path
    if len(line) <= 120:
        quoted = [p for p in (_as_path(q.rstrip(":")) for q in _QUOTED.findall(line)) if p]
        if len(quoted) == 1 and ("/" in quoted[0] or "." in quoted[0]):
            return quoted[0]
    return None


def _as_path(s: str) -> str | None:
    s = s.strip().replace("\\", "/")
    if not s or len(s) > 255 or not _PATH.match(s) or s.startswith("-"):
        return None
    dotfile = re.fullmatch(r"\.\w[\w.-]*", s) is not None  # .env, .gitignore
    if not re.search(r"[A-Za-z]", s) or ("." not in s.strip(".") and "/" not in s and not dotfile):
        return None
    while s.startswith("./"):
        s = s[2:]
    return s or None


# -- from blocks to calls ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Found:
    """How a SEARCH text was found in one file: the file's exact text to replace and what to
    put there; or how often it occurs (``count`` > 1) or what is nearest (``count`` 0)."""

    count: int
    old: str = ""
    new: str = ""
    lines: tuple[int, ...] = ()


def block_number(call_id: str) -> int | None:
    """The block a call was made from (1-based), or None for a call the model made itself."""
    m = re.fullmatch(rf"{ID_PREFIX}-\d+-(\d+)", call_id)
    return int(m.group(1)) if m else None


def block_calls(
    blocks: Iterable[EditBlock],
    known_paths: Iterable[str],
    read: Callable[[str], str | None],
    *,
    repo_paths: Iterable[str] | Callable[[], Iterable[str]] = (),
    step: int = 0,
) -> tuple[list[ToolCall], list[str]]:
    """One `edit` or `create_file` call per block that can be placed, in order, and one
    correction per block that cannot.

    ``read(path)`` gives a file's text, or None when it cannot be read (missing, outside the
    workspace, denied). A block naming a path that cannot be read still becomes a call, so the
    tool says why (the gate refuses a denied or outside path; a missing one is created when
    SEARCH is empty). A block with no file line goes to the one file of ``known_paths`` (then of
    ``repo_paths``) holding its SEARCH text once. Blocks are matched against the files as the
    earlier blocks of the same reply will have left them."""
    texts: dict[str, str | None] = {}

    def text_of(path: str) -> str | None:
        if path not in texts:
            texts[path] = read(path)
        return texts[path]

    known = list(dict.fromkeys(known_paths))
    listed: list[str] | None = None

    def all_paths() -> list[str]:
        nonlocal listed
        if listed is None:
            source = repo_paths() if callable(repo_paths) else repo_paths
            listed = list(dict.fromkeys(source))
        return listed

    calls: list[ToolCall] = []
    corrections: list[str] = []
    for number, block in enumerate(blocks, 1):
        call_id = f"{ID_PREFIX}-{step}-{number}"
        path = block.path
        if path is None:
            if not block.search:
                corrections.append(
                    f"Block {number} has an empty SEARCH and no file name, so it cannot create "
                    "a file: write the new file's path on the line before `<<<<<<< SEARCH`."
                )
                continue
            placed, why = _place(number, block, known, all_paths, text_of)
            if placed is None:
                corrections.append(why)
                continue
            path = placed
        text = text_of(path)
        if text is None and block.search:
            # `cart.py` for `shop/cart.py`: the one known or indexed file with that ending.
            same = _same_file(path, [*known, *all_paths()])
            if same is not None and text_of(same) is not None:
                path, text = same, text_of(same)
        if text is None:
            if block.search:
                calls.append(
                    ToolCall.from_raw(
                        call_id, "edit", _edit_args(path, block.search, block.replace)
                    )
                )
            else:
                calls.append(
                    ToolCall.from_raw(
                        call_id, "create_file", {"path": path, "content": block.replace}
                    )
                )
                texts[path] = block.replace
            continue
        if not block.search:
            call, after = _append(call_id, path, text, block.replace)
            calls.append(call)
            texts[path] = after
            continue
        found = find_search(text, block.search, block.replace)
        if found.count == 1:
            calls.append(ToolCall.from_raw(call_id, "edit", _edit_args(path, found.old, found.new)))
            texts[path] = text.replace(found.old, found.new, 1)
        elif found.count > 1:
            corrections.append(_ambiguous(number, path, found))
        else:
            corrections.append(_not_found(number, path, text, block.search))
    return calls, corrections


def _edit_args(path: str, old: str, new: str) -> dict[str, str]:
    return {"path": path, "old_text": old, "new_text": new}


def _place(
    number: int,
    block: EditBlock,
    known: list[str],
    all_paths: Callable[[], list[str]],
    text_of: Callable[[str], str | None],
) -> tuple[str | None, str]:
    """The one file holding the block's SEARCH text once, or a correction saying why not."""
    probe = next(line.strip() for line in block.search.splitlines() if line.strip())
    holding: dict[str, int] = {}
    for group in (known, None):
        paths = group if group is not None else [p for p in all_paths() if p not in known]
        for path in paths[:MAX_SCAN]:
            text = text_of(path)
            if text is None or probe not in text:
                continue  # cheap screen before matching
            found = find_search(text, block.search, block.replace)
            if found.count:
                holding[path] = found.count
        once = [p for p, n in holding.items() if n == 1]
        if len(once) == 1 and len(holding) == 1:
            return once[0], ""
        if holding:
            return None, (
                f"Block {number} names no file, and its SEARCH text is in more than one place ("
                + ", ".join(
                    f"{p}" + (f" {n} times" if n > 1 else "") for p, n in list(holding.items())[:5]
                )
                + "): write the file's path on the line before `<<<<<<< SEARCH`, and include "
                "enough lines in SEARCH to match once."
            )
    near = ""
    if known:
        best = max(
            ((p, nearest_block(t, block.search)) for p in known[:5] if (t := text_of(p))),
            key=lambda pn: pn[1][2] if pn[1] else -1.0,
            default=None,
        )
        if best and best[1]:
            near = _nearest_text(best[0], text_of(best[0]) or "", best[1])
    return None, (
        f"Block {number} names no file, and no file of the repository holds its SEARCH text "
        f"(`{_clip(block.search)}`). Write the file's path on the line before "
        "`<<<<<<< SEARCH` and copy the lines to change exactly into SEARCH." + near
    )


def _same_file(path: str, paths: list[str]) -> str | None:
    tail = "/" + path.lstrip("/")
    same = [p for p in dict.fromkeys(paths) if ("/" + p).endswith(tail) and p != path]
    return same[0] if len(same) == 1 else None


def _append(call_id: str, path: str, text: str, added: str) -> tuple[ToolCall, str]:
    """An empty SEARCH on an existing file: REPLACE goes at its end (Aider's behaviour), as an
    edit of the file's last lines, widened until they occur once."""
    if not text:
        call = ToolCall.from_raw(
            call_id, "create_file", {"path": path, "content": added, "overwrite": True}
        )
        return call, added
    glue = "" if text.endswith("\n") else "\n"
    start = text.rfind("\n", 0, len(text.rstrip("\n"))) + 1
    start, end, before, after = _widen(text, start, len(text))
    old = text[start:end]
    new = before + old + glue + added + after
    return ToolCall.from_raw(call_id, "edit", _edit_args(path, old, new)), text + glue + added


def _widen(text: str, start: int, end: int) -> tuple[int, int, str, str]:
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


def find_search(text: str, search: str, replace: str) -> _Found:
    """Where ``search`` is in ``text`` (see the module docstring for how loosely), as the
    file's exact text and its replacement."""
    nl = "\r\n" if "\r\n" in text else "\n"
    if nl != "\n":
        search, replace = search.replace("\n", nl), replace.replace("\n", nl)
    count = text.count(search)
    if count > 1:
        return _Found(count, lines=_starts(text, search))
    if count == 1:
        pos = text.find(search)
        lead = text[text.rfind("\n", 0, pos) + 1 : pos]
        if lead and not lead.strip() and nl in replace.rstrip(nl):
            # SEARCH starts inside a line's indentation and REPLACE has several lines: as
            # whole lines, so that every line of REPLACE gets the file's indentation.
            whole = _by_lines(text, search, replace, nl)
            if whole.count == 1:
                return whole
        return _Found(1, search, replace)
    cut = search[: -len(nl)]
    if search.endswith(nl) and cut and text.endswith(cut) and text.count(cut) == 1:
        # The file's last line, which has no final newline.
        return _Found(1, cut, replace[: -len(nl)] if replace.endswith(nl) else replace)
    return _by_lines(text, search, replace, nl)


def _by_lines(text: str, search: str, replace: str, nl: str) -> _Found:
    """SEARCH matched line by line: ignoring trailing whitespace, then with the indentation of
    every line shifted by the same amount."""
    lines = text.splitlines(keepends=True)
    want = search.replace("\r\n", "\n").strip("\n").split("\n")
    if not any(w.strip() for w in want):
        return _Found(0)
    for loose in (_same_but_trailing, _same_but_indent):
        hits = [
            s
            for s in range(len(lines) - len(want) + 1)
            if loose(lines[s : s + len(want)], want) is not None
        ]
        if len(hits) > 1:
            return _Found(len(hits), lines=tuple(s + 1 for s in hits))
        if hits:
            s = hits[0]
            window = lines[s : s + len(want)]
            indent = loose(window, want)
            start = sum(len(x) for x in lines[:s])
            end = start + sum(len(x) for x in window)
            new = _reindent(
                replace.replace("\r\n", "\n"), want, indent, nl, window[-1].endswith("\n")
            )
            start2, end2, before, after = _widen(text, start, end)
            return _Found(1, text[start2:end2], before + new + after)
    return _Found(0)


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


# -- corrections ---------------------------------------------------------------------------------


def _clip(text: str, limit: int = QUOTE_CHARS) -> str:
    flat = " ⏎ ".join(line.strip() for line in text.strip("\n").splitlines())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _ambiguous(number: int, path: str, found: _Found) -> str:
    where = ", ".join(map(str, found.lines))
    return (
        f"The SEARCH text of block {number} occurs {found.count} times in {path} (lines "
        f"{where}): nothing was changed. Include more of the lines around the one to change in "
        "SEARCH, so that it matches once."
    )


def _not_found(number: int, path: str, text: str, search: str) -> str:
    near = nearest_block(text, search)
    if near is None:
        return (
            f"The SEARCH text of block {number} was not found in {path}, and no lines there are "
            f"like it: nothing was changed. Read {path} and copy the lines to change exactly "
            "into SEARCH."
        )
    return (
        f"The SEARCH text of block {number} was not found in {path}: nothing was changed."
        + _nearest_text(path, text, near)
    )


def _nearest_text(path: str, text: str, near: tuple[int, int, float]) -> str:
    first, last, _ = near
    lines = text.splitlines()[first - 1 : last]
    body = "\n".join(lines)
    return (
        f" The nearest lines of {path} are {first}-{last}:\n```\n{body}\n```\n"
        "Copy them exactly into SEARCH (the same indentation), and write the changed lines in "
        "REPLACE."
    )


# -- the files of a run --------------------------------------------------------------------------


class WorkspaceFiles:
    """The files blocks may be placed in, seen as the tools see them: read through the
    workspace (deny lists hold, nothing outside it), listed from the index."""

    def __init__(self, ctx: ToolContext) -> None:
        self.ctx = ctx

    def read(self, path: str) -> str | None:
        ws, limit = self.ctx.workspace, self.ctx.agent.max_edit_bytes
        try:
            real = ws.check_readable(path)
            data = ws.read_bytes(real, limit)
        except (RepoctxError, OSError, ValueError):
            return None  # the call is still made: the tool says why (see block_calls)
        if len(data) > limit or b"\x00" in data:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def paths(self) -> list[str]:
        try:
            paths = graph.all_paths(self.ctx.session.conn(self.ctx.config))
        except (RepoctxError, sqlite3.Error, OSError):
            return []  # no index: blocks without a file line are placed in known files only
        ws = self.ctx.workspace
        return [p for p in paths if not ws.is_hidden(p)]
