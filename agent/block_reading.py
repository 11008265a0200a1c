"""Reading SEARCH/REPLACE blocks from a model's reply, in every shape small models write them
(see agent/edit_blocks.py for what they become). Nothing here reads or writes a file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import AgentError

_HEAD = re.compile(r"^\s*<{5,9}\s*(?:SEARCH|ORIGINAL)\s*>?\s*$", re.I)
_DIVIDER = re.compile(r"^\s*={5,9}\s*$")
_TAIL = re.compile(r"^\s*>{5,9}\s*(?:REPLACE|UPDATED)\s*<?\s*$", re.I)
_FENCE = re.compile(r"^\s*(?:`{3,}|~{3,})(?P<info>.*)$")
_LABEL = re.compile(r"^(?:file(?:name)?|path)\s*[:=-]?\s*", re.I)
_PATH = re.compile(r"^[\w.\-/\\+@~]+$")
_QUOTED = re.compile(r"`([^`\s]+)`")
_EMPTY_FENCE = re.compile(r"^[ \t]*(?:```|~~~)[^\n]*\n(?:[ \t]*\n)*[ \t]*(?:```|~~~)[ \t]*$", re.M)


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
    #: ``replace``: SEARCH is replaced by REPLACE (an empty SEARCH creates or appends).
    #: ``definitions``: no SEARCH part was written (only `=======` and the new code); REPLACE
    #: rewrites whole Python definitions, each replacing the one of the same name.
    #: ``file``: a fenced file under its path with no markers, the file written out whole.
    kind: str = "replace"


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
    """Whether ``text`` may hold a SEARCH/REPLACE block (a cheap check)."""
    return bool(text) and any(_HEAD.match(ln) or _DIVIDER.match(ln) for ln in _lines(text))


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
    fence: int | None = None  # the line that opened the code fence we are in
    marked = False  # whether that fence holds a block marker
    while i < len(lines):
        if _DIVIDER.match(lines[i]):
            marked = True  # a fence with a marker in it is no file written out whole
            floor = (
                max(fence + 1, last_tail + 1 if last_tail is not None else 0)
                if fence is not None
                else None
            )
            headless = _headless(lines, i, floor)
            if headless is not None:
                start, last, edit = headless
                blocks.append(edit)
                dropped.update(range(start, last + 1))
                last_tail, last_path, i = last, edit.path, last + 1
                continue
        if not _HEAD.match(lines[i]):
            opened = _FENCE.match(lines[i])
            if opened:
                closing = fence is not None and not opened.group("info").strip()
                whole = _whole_file(lines, fence, i) if closing and not marked else None
                if whole is not None:
                    blocks.append(whole[1])
                    dropped.update(range(whole[0], i + 1))
                    last_tail, last_path = i, whole[1].path
                fence, marked = (None if closing else i), False
            i += 1
            continue
        marked = True
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


def _headless(
    lines: list[str], divider: int, floor: int | None
) -> tuple[int, int, EditBlock] | None:
    """A block written without its `<<<<<<< SEARCH` line, as Qwen2.5-Coder 1.5B writes them:
    in a fence (from ``floor``: its first line, or the line after the block before), the file
    line, maybe the old lines, `=======`, the new lines, and the fence's end or `>>>>>>>
    REPLACE`. Outside a fence (``floor`` None) only a file line right above `=======` and a
    `>>>>>>> REPLACE` below make one. (first line, last line, the block), or None."""
    end, tail = divider + 1, False
    while end < len(lines):
        line = lines[end]
        if _TAIL.match(line):
            tail = True
            break
        if _HEAD.match(line) or _DIVIDER.match(line):
            break
        if floor is not None and re.fullmatch(r"\s*(?:`{3,}|~{3,})\s*", line):
            break
        end += 1
    last = end if tail else end - 1
    replace = _join(lines[divider + 1 : end])
    if floor is None:
        path = _path_in(lines[divider - 1]) if divider > 0 else None
        if path is None or not tail or not replace:
            return None
        return divider - 1, last, EditBlock(path, "", replace, "definitions")
    filled = [n for n in range(floor, divider) if lines[n].strip()]
    path = _path_in(lines[filled[0]]) if filled else None
    if path is not None:
        start, search = filled[0], _join(lines[filled[0] + 1 : divider])
    else:
        start, search = floor, _join(lines[floor:divider])
        path, path_line = _file_line(lines, floor)
        if path_line is not None:
            start = path_line
    if (path is None and not tail) or not (search or replace):
        return None  # a `=======` in code shown (a heading's underline), not a block
    return start, last, EditBlock(path, search, replace, "replace" if search else "definitions")


def _whole_file(lines: list[str], fence: int | None, close: int) -> tuple[int, EditBlock] | None:
    """A fence holding a file written out whole under its path (the line before the fence or
    the first inside it), as small models write an edit when they write no block: (first
    line, the block), or None. Calls in a fence (JSON, tags) and diffs are not files."""
    if fence is None:
        return None
    opened = _FENCE.match(lines[fence])
    info = opened.group("info").strip().lower() if opened else ""
    filled = [n for n in range(fence + 1, close) if lines[n].strip()]
    if not filled or info in ("json", "diff", "patch", "console", "shell-session"):
        return None
    path = _path_in(lines[filled[0]])
    if path is not None:
        start, content = fence, _join(lines[filled[0] + 1 : close])
    else:
        path, path_line = _file_line(lines, fence)
        if path is None or path_line is None:
            return None
        start, content = min(path_line, fence), _join(lines[fence + 1 : close])
    if not content or content.lstrip().startswith(("{", "[", "<", "$ ")):
        return None
    return start, EditBlock(path, "", content, "file")


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
    filled = [n for n, line in enumerate(lines) if line.strip()]
    first, last = filled[0], filled[-1]
    if (
        first < last
        and _FENCE.match(lines[first])
        and re.fullmatch(r"\s*(`{3,}|~{3,})\s*", lines[last])
    ):
        # SEARCH or REPLACE wrapped in a fence of its own inside the block.
        lines = lines[first + 1 : last]
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
            words = fence.group("info").replace(":", " ").split()  # ```python:shop/a.py
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
    words = line.strip().split()
    if len(line) <= 80 and line.rstrip().endswith(":") and len(words) > 1:
        # "In shop/cart.py:", "Update shop/cart.py:": a short lead-in ending with the path.
        last = _as_path(words[-1].rstrip(":").strip("*_`'\""))
        if last and ("/" in last or re.search(r"\.\w{1,8}$", last)):
            return last
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
