"""Names from the repository, made safe to show as text: one name, one line, no terminal codes.

A file name may hold any byte but ``/`` and NUL, so a name with a newline would forge extra
result lines (``a.py:1  function ok\\nsecrets.py:1 …``), a carriage return or ESC sequence could
rewrite the terminal, and a bidi override reorder what a reader sees. Every place that prints a
path, or a name made from one (module, qualname), as text goes through ``shown`` or ``place``:
control characters (C0, DEL, C1), Unicode line and paragraph separators, bidi controls and
lone surrogates become visible escapes (``\\n``, ``\\x1b``, ``\\u2028``). ``--json`` and the
tools' structured data keep the exact name: JSON escapes it already.
"""

from __future__ import annotations

_NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
#: Unicode separators and bidi controls that reflow or reorder a line.
_UNICODE = (
    [0x061C, 0x200E, 0x200F, 0x2028, 0x2029]
    + list(range(0x202A, 0x202F))
    + list(range(0x2066, 0x206A))
)


def _escape(code: int) -> str:
    if code in _NAMED:
        return _NAMED[code]
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


_TABLE = {
    code: _escape(code)
    for code in [
        *range(0x20),
        *range(0x7F, 0xA0),
        *_UNICODE,
        *range(0xD800, 0xE000),  # lone surrogates (os.fsdecode of an undecodable name)
    ]
}


#: What JSON leaves raw but a terminal or a line splitter acts on: DEL, C1 (0x9b is CSI on some
#: terminals), separators and bidi controls. As JSON escapes, the text round-trips exactly.
_JSON_TABLE = {code: f"\\u{code:04x}" for code in [*range(0x7F, 0xA0), *_UNICODE]}


def json_safe(document: str) -> str:
    """A JSON document with those characters escaped (outside strings JSON has none)."""
    return document.translate(_JSON_TABLE)


def shown(text: str) -> str:
    """``text`` on one line, every control character visible as an escape."""
    return text.translate(_TABLE)


#: File *contents* keep their tabs and line breaks; every other control still becomes visible.
_CONTENT_TABLE = {code: esc for code, esc in _TABLE.items() if code not in (0x09, 0x0A)}


def content(text: str) -> str:
    """File contents (or model output) made safe for a terminal: lines and tabs kept, CRLF read
    as a line break, every other control visible as an escape. Without it a repository's file
    shown by `search`, `context` or `ask` could set the terminal's title, write the clipboard
    (OSC 52), hide or rewrite lines, or reorder them (bidi controls, "Trojan Source")."""
    return text.replace("\r\n", "\n").translate(_CONTENT_TABLE)


def place(path: str, start: int | None = None, end: int | None = None) -> str:
    """``path``, ``path:start`` or ``path:start-end``, the path shown safely."""
    where = shown(path)
    if start is None:
        return where
    return f"{where}:{start}" if end is None else f"{where}:{start}-{end}"
