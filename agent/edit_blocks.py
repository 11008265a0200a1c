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
line at all. A block with no file line right after another (blank lines between) belongs to
the same file (as in Aider); otherwise it is placed by its text (see :func:`block_calls`).

An empty SEARCH follows Aider: it creates the file when it does not exist, and appends REPLACE
to the end of the file when it does.

A block written without its ``<<<<<<< SEARCH`` line (in a fence: the file line, ``=======``,
the new code, the fence's end or ``>>>>>>> REPLACE``), as Qwen2.5-Coder 1.5B writes them, is
read too: with old lines above ``=======`` they are its SEARCH; with none, REPLACE rewrites the
Python definitions it holds, each replacing the one of the same name in the file, or is the
file written out whole. So is a fence with no marker under a file line, when it is a version of
that file (one edit from its first changed line to its last; refused when it leaves code out,
ignored when it is no version of the file or changes nothing — code shown, not an edit).

Matching is by construction, never a fuzzy write (agent/edit_matching.py): the SEARCH text is
looked for exactly, then line by line ignoring trailing whitespace, then with every line's
indentation shifted by the same amount (REPLACE re-indented to match), then without the line
numbers read_span shows (copied along with the lines). Whatever matched is
turned back into the file's own exact text, so the `edit` tool still replaces an exact, unique
string; a SEARCH that matches twice is refused, not guessed.

Reading blocks from a reply is agent/block_reading.py (re-exported here); finding what a
block means in a file is agent/edit_matching.py; this module places blocks in files and says
why when it cannot.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable

from indexer import RepoctxError, StoreError

from .block_reading import (
    EditBlock,
    EditBlockError,
    ScannedBlocks,
    has_edit_blocks,
    parse_edit_blocks,
    scan_edit_blocks,
)
from .edit_matching import Found, definitions, find_definition, find_search, rewrite, widen
from .models.base import ToolCall
from .tools import ToolContext
from .tools.edit_tools import nearest_block

__all__ = [
    "EditBlock",
    "EditBlockError",
    "ScannedBlocks",
    "WorkspaceFiles",
    "block_calls",
    "block_number",
    "block_result",
    "has_edit_blocks",
    "parse_edit_blocks",
    "scan_edit_blocks",
]

#: Most files read when placing a block that names none (the rest are not looked at).
MAX_SCAN = 3000
#: Characters of a block's SEARCH text quoted back in a correction.
QUOTE_CHARS = 200
#: Prefix of the ids given to the calls made from blocks (see :func:`block_number`).
ID_PREFIX = "block"
#: How a block is written, for corrections (no value in it a model could take for its own).
WHOLE_BLOCK = (
    "Write each block whole: the file's path on its own line, then `<<<<<<< SEARCH`, the exact "
    "lines now in the file, `=======`, the new lines, `>>>>>>> REPLACE`."
)


# -- from blocks to calls ------------------------------------------------------------------------


def block_number(call_id: str) -> int | None:
    """The block a call was made from (1-based), or None for a call the model made itself."""
    m = re.fullmatch(rf"{ID_PREFIX}-\d+-(\d+)(?:\.\d+)?", call_id)
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
    earlier blocks of the same reply will have left them. A block that redefines Python
    definitions with no SEARCH part gives one call per definition."""
    files = _Files(known_paths, read, repo_paths)
    calls: list[ToolCall] = []
    corrections: list[str] = []
    for number, block in enumerate(blocks, 1):
        call_id = f"{ID_PREFIX}-{step}-{number}"
        if block.kind == "file":
            made = _whole(number, call_id, block, files)
        elif block.kind == "definitions":
            made = _redefinition(number, call_id, block, files)
        else:
            made = _replacement(number, call_id, block, files)
        if isinstance(made, str):
            corrections.append(made)
        else:
            calls += made
    return calls, corrections


class _Files:
    """The files blocks are placed in, as the reply's earlier blocks will have left them."""

    def __init__(
        self,
        known: Iterable[str],
        read: Callable[[str], str | None],
        listing: Iterable[str] | Callable[[], Iterable[str]],
    ) -> None:
        self.known = list(dict.fromkeys(known))
        self._read, self._listing = read, listing
        self._texts: dict[str, str | None] = {}
        self._listed: list[str] | None = None

    def text(self, path: str) -> str | None:
        if path not in self._texts:
            self._texts[path] = self._read(path)
        return self._texts[path]

    def changed(self, path: str, text: str) -> None:
        self._texts[path] = text

    def listed(self) -> list[str]:
        if self._listed is None:
            source = self._listing() if callable(self._listing) else self._listing
            self._listed = list(dict.fromkeys(source))
        return self._listed

    def existing(self, path: str) -> tuple[str, str | None]:
        """``path`` and its text; for a path that cannot be read, the one known or indexed file
        it names by its ending (`cart.py`, `/shop/cart.py` for `shop/cart.py`) if any."""
        text = self.text(path)
        if text is None:
            tail = "/" + path.lstrip("/")
            same = [p for p in dict.fromkeys([*self.known, *self.listed()]) if p != path]
            same = [p for p in same if ("/" + p).endswith(tail)]
            if len(same) == 1 and self.text(same[0]) is not None:
                return same[0], self.text(same[0])
        return path, text

    def place(self, probe: str, holds: Callable[[str], int]) -> dict[str, int]:
        """The files holding what ``holds`` counts (screened by ``probe``): the known files
        first, then the others (the first group holding it answers)."""
        for group in (self.known, None):
            paths = (
                group if group is not None else [p for p in self.listed() if p not in self.known]
            )
            holding: dict[str, int] = {}
            for path in paths[:MAX_SCAN]:
                text = self.text(path)
                if text is not None and probe in text and (n := holds(text)):
                    holding[path] = n
            if holding:
                return holding
        return {}


def _replacement(
    number: int, call_id: str, block: EditBlock, files: _Files
) -> list[ToolCall] | str:
    path = block.path
    if path is None:
        if not block.search:
            return (
                f"Block {number} has an empty SEARCH and no file name, so it cannot create "
                "a file: write the new file's path on the line before `<<<<<<< SEARCH`."
            )
        probe = next(line.strip() for line in block.search.splitlines() if line.strip())
        holding = files.place(probe, lambda t: find_search(t, block.search, block.replace).count)
        path = _one(holding)
        if path is None:
            return _unplaced(number, holding, "its SEARCH text", block.search, files)
    path, text = files.existing(path) if block.search else (path, files.text(path))
    if text is None:
        if block.search:  # the tool says why it cannot (missing, denied, outside)
            return [
                ToolCall.from_raw(call_id, "edit", _edit_args(path, block.search, block.replace))
            ]
        files.changed(path, block.replace)
        return [ToolCall.from_raw(call_id, "create_file", {"path": path, "content": block.replace})]
    if not block.search:
        call, after = _append(call_id, path, text, block.replace)
        files.changed(path, after)
        return [call]
    found = find_search(text, block.search, block.replace)
    if found.count == 1:
        files.changed(path, text.replace(found.old, found.new, 1))
        return [ToolCall.from_raw(call_id, "edit", _edit_args(path, found.old, found.new))]
    if found.count > 1:
        return _ambiguous(number, path, found)
    return _not_found(number, path, text, block.search)


def _redefinition(
    number: int, call_id: str, block: EditBlock, files: _Files
) -> list[ToolCall] | str:
    """A block with no SEARCH part whose REPLACE rewrites whole Python definitions: one edit per
    definition, each replacing the definition of the same name (found once)."""
    defs = definitions(block.replace)
    if not defs and block.path is not None and files.existing(block.path)[1] is not None:
        # Not only definitions: the file written out whole, when it is a version of the file.
        path, text = files.existing(block.path)
        found, why = rewrite(text or "", block.replace)
        if found.count == 1:
            files.changed(path, (text or "").replace(found.old, found.new, 1))
            return [ToolCall.from_raw(call_id, "edit", _edit_args(path, found.old, found.new))]
        if why.startswith("it leaves"):
            return (
                f"Block {number} writes {path} out whole, but {why}: nothing was changed. "
                + WHOLE_BLOCK
            )
    if not defs:
        return (
            f"Block {number} has no `<<<<<<< SEARCH` part, so it is not known what to replace. "
            + WHOLE_BLOCK
        )
    name, code = defs[0]
    path = block.path
    if path is None:
        holding = files.place(name, lambda t: find_definition(t, name, code).count)
        path = _one(holding)
        if path is None:
            return _unplaced(number, holding, f"a definition of `{name}`", code, files)
    path, text = files.existing(path)
    if text is None:  # a new file: its definitions are its content (the gate decides)
        files.changed(path, block.replace)
        return [ToolCall.from_raw(call_id, "create_file", {"path": path, "content": block.replace})]
    calls = []
    for k, (name, code) in enumerate(defs):
        found = find_definition(text, name, code)
        if found.count != 1:
            where = f"{found.count} times (lines {', '.join(map(str, found.lines))})"
            return (
                f"Block {number} has no `<<<<<<< SEARCH` part, and {path} defines `{name}` "
                + (where if found.count else "nowhere")
                + ", so it is not known what to replace: nothing was changed. "
                + WHOLE_BLOCK
            )
        if _lines_of(found.old) == _lines_of(found.new):
            continue  # the definition as it is (code quoted, not changed): no edit
        text = text.replace(found.old, found.new, 1)
        calls.append(
            ToolCall.from_raw(
                call_id + (f".{k}" if k else ""), "edit", _edit_args(path, found.old, found.new)
            )
        )
    files.changed(path, text)
    return calls


def _lines_of(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip("\r\n").splitlines()]


def _whole(number: int, call_id: str, block: EditBlock, files: _Files) -> list[ToolCall] | str:
    """A file written out whole: one edit from its first changed line to its last. Code that
    is not a version of an existing file is shown code, not an edit: nothing is said of it,
    unless it holds whole definitions of that file, which it then rewrites."""
    path, text = files.existing(block.path or "")
    if text is None:
        return []
    found, why = rewrite(text, block.replace)
    if found.count == 1:
        files.changed(path, text.replace(found.old, found.new, 1))
        return [ToolCall.from_raw(call_id, "edit", _edit_args(path, found.old, found.new))]
    if why.startswith("it leaves"):  # meant as the whole file, but code would be lost
        return (
            f"Block {number} writes {path} out whole, but {why}: nothing was changed. "
            + WHOLE_BLOCK
        )
    defs = definitions(block.replace)
    if defs and all(find_definition(text, n, c).count == 1 for n, c in defs):
        return _redefinition(
            number, call_id, dataclasses.replace(block, path=path, kind="definitions"), files
        )
    return []


def _one(holding: dict[str, int]) -> str | None:
    return next(iter(holding)) if len(holding) == 1 and set(holding.values()) == {1} else None


def _edit_args(path: str, old: str, new: str) -> dict[str, str]:
    return {"path": path, "old_text": old, "new_text": new}


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
    start, end, before, after = widen(text, start, len(text))
    old = text[start:end]
    new = before + old + glue + added + after
    return ToolCall.from_raw(call_id, "edit", _edit_args(path, old, new)), text + glue + added


# -- corrections ---------------------------------------------------------------------------------


def _clip(text: str, limit: int = QUOTE_CHARS) -> str:
    flat = " ⏎ ".join(line.strip() for line in text.strip("\n").splitlines())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _unplaced(number: int, holding: dict[str, int], what: str, wanted: str, files: _Files) -> str:
    if holding:
        return (
            f"Block {number} names no file, and {what} is in more than one place ("
            + ", ".join(
                f"{p}" + (f" {n} times" if n > 1 else "") for p, n in list(holding.items())[:5]
            )
            + "): write the file's path on the line before the block, and include enough lines "
            "to match once."
        )
    near = ""
    best = max(
        ((p, nearest_block(t, wanted)) for p in files.known[:5] if (t := files.text(p))),
        key=lambda pn: pn[1][2] if pn[1] else -1.0,
        default=None,
    )
    if best and best[1]:
        near = _nearest_text(best[0], files.text(best[0]) or "", best[1])
    return (
        f"Block {number} names no file, and no file of the repository holds {what} "
        f"(`{_clip(wanted)}`). Write the file's path on the line before the block and copy the "
        "lines to change exactly into SEARCH." + near
    )


def _ambiguous(number: int, path: str, found: Found) -> str:
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


#: The `edit`/`create_file` words in a result, as a model that wrote blocks knows them.
_BLOCK_WORDS = (
    ("old_text and new_text are the same", "SEARCH and REPLACE are the same"),
    (", or set replace_all: true", ""),
    (
        "use create_file to make it, or list_dir to find the file",
        "leave SEARCH empty to create it, or name a file that exists",
    ),
    ("old_text", "SEARCH text"),
    ("new_text", "REPLACE text"),
)


def block_result(text: str) -> str:
    """A tool result for a call made from a block, in the words of blocks (SEARCH, REPLACE)
    rather than of the `edit` tool's arguments, which the model never saw."""
    for tool_words, block_words in _BLOCK_WORDS:
        text = text.replace(tool_words, block_words)
    return text


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
            paths = self.ctx.index.graph.all_paths()
        except (RepoctxError, StoreError, OSError):
            return []  # no index: blocks without a file line are placed in known files only
        ws = self.ctx.workspace
        return [p for p in paths if not ws.is_hidden(p)]
