"""`edit` (replace an exact block) and `create_file`."""

from __future__ import annotations

import bisect
import difflib
import re
from typing import Any

from indexer import shown

from .. import redact
from .core import Tool, ToolContext, ToolResult, fail, ok
from .syntax import Replacement, still_broken
from .writing import FileChange, commit, gate, load_for_edit, unified

#: Candidate windows scored when looking for the text nearest to a failed match.
MAX_WINDOWS = 400
_WS = re.compile(r"\s+")


def _occurrences(text: str, needle: str) -> list[int]:
    found, start = [], 0
    while True:
        i = text.find(needle, start)
        if i < 0:
            return found
        found.append(i)
        start = i + len(needle)


def _line_at(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def nearest_block(text: str, wanted: str) -> tuple[int, int, float] | None:
    """(first line, last line, similarity) of the block of ``text`` most like ``wanted``."""
    lines = text.splitlines()
    want = wanted.strip("\n").splitlines()
    if not lines or not want:
        return None
    n = len(want)
    stripped = [ln.strip() for ln in lines]
    index: dict[str, list[int]] = {}
    for i, s in enumerate(stripped):
        if s:
            index.setdefault(s, []).append(i)
    starts: dict[int, None] = {}
    for k, w in enumerate(want):
        for i in index.get(w.strip(), ()) if w.strip() else ():
            starts.setdefault(max(0, i - k), None)
    if not starts:
        # No line matches exactly: anchor on lines close to any wanted line.
        for k, w in enumerate(want[:5]):
            if not w.strip():
                continue
            for close in difflib.get_close_matches(w.strip(), list(index), n=3, cutoff=0.6):
                for i in index[close]:
                    starts.setdefault(max(0, i - k), None)
    if not starts:
        return None
    target = "\n".join(want)
    best: tuple[float, int] | None = None
    for s in list(starts)[:MAX_WINDOWS]:
        window = "\n".join(lines[s : s + n])
        matcher = difflib.SequenceMatcher(None, window, target, autojunk=False)
        if best is not None and matcher.real_quick_ratio() <= best[0]:
            continue
        score = matcher.ratio()
        if best is None or score > best[0]:
            best = (score, s)
    if best is None:
        return None
    score, s = best
    return s + 1, min(s + n, len(lines)), score


def _no_match(loaded, old: str) -> ToolResult:
    text = loaded.text
    hint = ""
    squash = _WS.sub(" ", old).strip()
    if squash:
        first_word = squash.split(" ", 1)[0]
        all_lines = text.splitlines()
        height = old.strip("\n").count("\n") + 1
        for i, line in enumerate(all_lines):
            if first_word not in line:
                continue  # cheap screen before joining a window
            span = "\n".join(all_lines[i : i + height])
            if _WS.sub(" ", span).strip() == squash:
                hint = (
                    f" old_text matches lines {i + 1}-{i + height} if whitespace is ignored: "
                    "copy the exact indentation from read_span."
                )
                break
    near = nearest_block(text, old)
    if near is None:
        return fail(
            f"old_text was not found in {loaded.path}, and no similar block exists.{hint} "
            "Read the file with read_span and copy the text exactly.",
            match_count=0,
        )
    first, last, score = near
    lines = text.splitlines()[first - 1 : last]
    shown = "\n".join(f"{first + i:>5}| {line}" for i, line in enumerate(lines))
    diff = "\n".join(
        list(
            difflib.unified_diff(
                old.strip("\n").splitlines(),
                lines,
                "old_text",
                f"{loaded.path}:{first}-{last}",
                n=1,
                lineterm="",
            )
        )[:40]
    )
    return fail(
        f"old_text was not found in {loaded.path}. The nearest text is lines {first}-{last} "
        f"({score:.0%} similar).{hint} Copy the exact text (see below) and retry.",
        f"Nearest text in {loaded.path}:\n{shown}\n\nDifference (old_text -> file):\n{diff}",
        match_count=0,
        nearest={"start_line": first, "end_line": last, "similarity": round(score, 3)},
    )


_MARKER = re.compile(r"\[REDACTED:[^\]\n]+\]")


def _through_redaction(text: str, old: str, new: str) -> list[tuple[int, int, str]] | str:
    """Where ``old`` — copied from a result in which redaction replaced secrets with
    ``[REDACTED:<kind>]`` — is in ``text``, as (start, end, replacement). A marker stands for
    exactly the secret redaction replaced there; the same markers in ``new`` put those secrets
    back (in order, per kind), so a line holding a secret can be edited without seeing it.
    A string: why the edit cannot be made."""
    found = redact.find_secrets(text)
    if not found:
        return []
    # segments of the redacted text: (redacted start, original start, original end, finding)
    segs: list[tuple[int, int, int, redact.Finding | None]] = []
    parts, rpos, opos = [], 0, 0
    for f in found:
        mark = redact.MARK.format(f.kind)
        segs += [(rpos, opos, f.start, None), (rpos + f.start - opos, f.start, f.end, f)]
        parts += [text[opos : f.start], mark]
        rpos += f.start - opos + len(mark)
        opos = f.end
    segs.append((rpos, opos, len(text), None))
    parts.append(text[opos:])
    redacted = "".join(parts)
    starts = [seg[0] for seg in segs]

    def original(r: int, end: bool) -> int | None:
        i = bisect.bisect_right(starts, r - 1 if end else r) - 1
        rstart, ostart, oend, finding = segs[i]
        if finding is None:
            return ostart + (r - rstart)
        if not end and r == rstart:
            return ostart
        mark_end = rstart + len(redact.MARK.format(finding.kind))
        return oend if end and r == mark_end else None  # never half a marker

    out = []
    for r in _occurrences(redacted, old):
        start, end = original(r, False), original(r + len(old), True)
        if start is None or end is None:
            continue
        secrets: dict[str, list[str]] = {}
        for f in found:
            if start <= f.start and f.end <= end:
                secrets.setdefault(redact.MARK.format(f.kind), []).append(text[f.start : f.end])
        filled = _put_back(new, secrets)
        if filled is None:
            return (
                "new_text has more [REDACTED:…] markers of a kind than the matched old_text: a "
                "marker can only keep a secret that old_text covers. Keep the markers as they "
                "are in old_text, or write the new value (e.g. read from an environment "
                "variable) instead."
            )
        out.append((start, end, filled))
    return out


def _put_back(new: str, secrets: dict[str, list[str]]) -> str | None:
    """``new`` with its n-th marker of each kind replaced by that kind's n-th secret; None if
    it has a marker with no secret to stand for."""
    used: dict[str, int] = {}
    missing = False

    def value(m: re.Match[str]) -> str:
        nonlocal missing
        n = used[m.group(0)] = used.get(m.group(0), -1) + 1
        values = secrets.get(m.group(0), [])
        if n >= len(values):
            missing = True
            return m.group(0)
        return values[n]

    out = _MARKER.sub(value, new)
    return None if missing else out


def edit(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    old, new = args["old_text"], args["new_text"]
    if old == new:
        return fail("old_text and new_text are the same — nothing to change.")
    loaded = load_for_edit(ctx, args["path"])
    text = loaded.text
    hits = _occurrences(text, old)
    if not hits and "\r\n" in text and "\n" in old and "\r\n" not in old:
        # The file has Windows line endings; the model wrote Unix ones.
        old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
        hits = _occurrences(text, old)
    spans = [(h, h + len(old), new) for h in hits]
    if not spans and _MARKER.search(old):
        found = _through_redaction(text, old, new)
        if isinstance(found, str):
            return fail(found)
        spans, hits = found, [s for s, _, _ in found]
    if not hits:
        return _no_match(loaded, args["old_text"])
    if len(hits) > 1 and not args["replace_all"]:
        where = "\n".join(
            f"  line {_line_at(text, h)}: {text[h:].splitlines()[0][:100] if text[h:] else ''}"
            for h in hits[:10]
        )
        return fail(
            f"old_text occurs {len(hits)} times in {loaded.path} (lines "
            + ", ".join(str(_line_at(text, h)) for h in hits[:10])
            + "). Include more surrounding lines so it is unique, or set replace_all: true.",
            where,
            match_count=len(hits),
            lines=[_line_at(text, h) for h in hits],
        )
    pieces, replacements, pos = [], [], 0
    for h, h_end, replacement in spans:
        pieces += [text[pos:h], replacement]
        start = len(text[:h].encode("utf-8"))
        end = start + len(text[h:h_end].encode("utf-8"))
        replacements.append(Replacement(start, end, len(replacement.encode("utf-8"))))
        pos = h_end
    pieces.append(text[pos:])
    new_text = "".join(pieces)
    change = FileChange(loaded.path, loaded.data, new_text.encode("utf-8"), tuple(replacements))
    rejected = gate([change])
    if rejected is not None:
        return rejected
    outcome = commit(ctx, [change])
    first_line = _line_at(text, hits[0])
    last_line = first_line + new.count("\n")
    diff = unified(loaded.path, text, new_text)
    broken = still_broken(loaded.path, change.new)
    return ok(
        f"Edited {shown(loaded.path)}: replaced {len(hits)} occurrence(s) at line(s) "
        + ", ".join(str(_line_at(text, h)) for h in hits[:10])
        + f".\n{diff}\n{outcome.note()}"
        + (f"\n{broken}" if broken else ""),
        path=loaded.path,
        replaced=len(hits),
        start_line=first_line,
        end_line=last_line,
        diff=diff,
        **outcome.data(),
    )


EDIT = Tool(
    "edit",
    "Replace an exact block of text in a file. old_text must match the file exactly (including "
    "indentation) and occur once, unless replace_all is true. Edits that introduce a syntax "
    "error are rejected and leave the file unchanged. A [REDACTED:...] marker copied from a "
    "result stands for the secret hidden there, in old_text and new_text alike.",
    {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "maxLength": 4096},
            "old_text": {
                "type": "string",
                "minLength": 1,
                "description": "The exact text to replace, copied from the file.",
            },
            "new_text": {"type": "string", "description": "The replacement text."},
            "replace_all": {"type": "boolean", "default": False},
        },
        "required": ["path", "old_text", "new_text"],
        "additionalProperties": False,
    },
    "write",
    edit,
    lambda a: f"edit {a['path']} ({a['old_text'].count(chr(10)) + 1} line(s) replaced)",
)


#: A new file's name that ends like a citation (``pkg/calc.py:4-6``, ``a.py#L3``): a small model
#: copied a location into the path. Refused for new files only (an existing file is the user's).
_CITED_PATH = re.compile(r"(?::|#L)\d+(?:[-–:]L?\d+)?$")


def create_file(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    ws = ctx.workspace
    cited = _CITED_PATH.search(args["path"])
    if cited and not ws.lexists(ws.check_writable(args["path"])):
        bare = args["path"][: cited.start()]
        return fail(
            f"{shown(args['path'])} ends with a line location ({cited.group(0)}), which is not "
            f"part of a file name — use the path alone ({shown(bare)}), and `edit` to change "
            "lines of an existing file.",
            bad_arguments=True,
        )
    real = ws.check_writable(args["path"])
    ws.check_readable(args["path"])
    rel = ws.relative(real)
    content = args["content"].encode("utf-8")
    if len(content) > ctx.agent.max_edit_bytes:
        return fail(
            f"content is {len(content)} bytes, over the {ctx.agent.max_edit_bytes}-byte limit."
        )
    old: bytes | None = None
    if ws.lexists(real):
        if not args["overwrite"]:
            return fail(
                f"{shown(rel)} already exists — use edit to change it, or set overwrite: true to "
                "replace it whole."
            )
        old = load_for_edit(ctx, rel).data
    change = FileChange(rel, old, content)
    rejected = gate([change])
    if rejected is not None:
        return rejected
    outcome = commit(ctx, [change])
    lines = args["content"].count("\n") + (0 if args["content"].endswith("\n") else 1)
    verb = "Replaced" if old is not None else "Created"
    broken = still_broken(rel, content)
    return ok(
        f"{verb} {shown(rel)} ({lines} lines, {len(content)} bytes). {outcome.note()}"
        + (f"\n{broken}" if broken else ""),
        path=rel,
        created=old is None,
        bytes=len(content),
        **outcome.data(),
    )


CREATE_FILE = Tool(
    "create_file",
    "Create a new file with the given content (parent directories are created). Refuses to "
    "replace an existing file unless overwrite is true.",
    {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "maxLength": 4096},
            "content": {"type": "string"},
            "overwrite": {"type": "boolean", "default": False},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    },
    "write",
    create_file,
    lambda a: f"create {a['path']} ({len(a['content'])} characters)",
)

EDIT_TOOLS = (EDIT, CREATE_FILE)
