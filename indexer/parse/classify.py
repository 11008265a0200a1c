"""Why a file is left out of the index, by its name, the directory it lies in or its content:
minified assets and lock files by name, vendored and cache directories, large data files, names
that are not UTF-8; binary, UTF-16/32, generated and minified content (`classify_content`, read
by the parse workers, which have the bytes)."""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable

#: Bundled or minified assets, recognised by name alone (reason ``minified``).
MINIFIED_SUFFIXES = (".min.js", ".min.css", ".bundle.js", ".map")
#: Where minification is practised: only these are ever ``minified`` by content. Elsewhere a
#: very long line is data (a table, an embedded blob) and the file is indexed.
MINIFIABLE_SUFFIXES = (".js", ".mjs", ".cjs", ".jsx", ".ts", ".mts", ".cts", ".tsx")
#: Dependency lock files: generated pins, never read by a person (reason ``lockfile``).
LOCK_FILES = frozenset({
    "package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml", "bun.lockb",
    "poetry.lock", "Pipfile.lock", "uv.lock", "pdm.lock", "Cargo.lock", "Gemfile.lock",
    "composer.lock", "go.sum", "mix.lock", "pubspec.lock", "Podfile.lock", "flake.lock",
    "packages.lock.json", "gradle.lockfile", "Package.resolved",
})
LOCK_SUFFIXES = (".lock", ".lockfile")
#: Directories of third-party code checked into the tree (reason ``vendored``, counted once
#: per directory: nothing below it is listed).
VENDORED_DIRS = frozenset({"vendor", "node_modules", "third_party", "third-party", "bower_components"})
#: Directories tools write caches to (bytecode, type checkers, test runners), never source
#: (reason ``cache``, counted once per directory: a plain tree of installed packages has one
#: ``__pycache__`` per package, a third of its files).
CACHE_DIRS = frozenset({"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"})
#: Directory name -> the reason nothing below it is listed.
SKIPPED_DIRS = {**dict.fromkeys(VENDORED_DIRS, "vendored"), **dict.fromkeys(CACHE_DIRS, "cache")}
_SKIPPED_DIR = re.compile(r"(?:^|/)(" + "|".join(re.escape(d) for d in sorted(SKIPPED_DIRS)) + r")/")
#: Data formats: above this size a JSON/YAML file is data (fixtures, dumps, API captures), not
#: configuration (reason ``large_data``). Other files go up to ``Config.max_file_bytes``.
DATA_SUFFIXES = (".json", ".yaml", ".yml")
MAX_DATA_BYTES = 256 * 1024

_SNIFF_BYTES = 8192
_MAX_NON_TEXT = 0.30
_MINIFIED_LINE = 1000
#: Minified: lines over _MINIFIED_LINE bytes hold at least this share of the file...
_MINIFIED_SHARE = 0.5
#: ...and, string literals left out, are code: at least this many `;` per byte (real bundles:
#: 0.7-2.4 %; a long data literal, a number table or 10k nested brackets: ~0).
_MINIFIED_SEMICOLONS = 0.003
# A string literal on one line ("...", '...', `...`), escapes included; unrolled-loop form.
_STRING_LITERAL = re.compile(
    rb'"[^"\\\n]*(?:\\.[^"\\\n]*)*"|\'[^\'\\\n]*(?:\\.[^\'\\\n]*)*\'|`[^`\\]*(?:\\.[^`\\]*)*`'
)
#: Legacy 8-bit text (Latin-1 and the like) is mostly printable ASCII; noise is not.
_MIN_ASCII_TEXT = 0.7
_ASCII_TEXT = bytes([*range(0x20, 0x7F), 0x09, 0x0A, 0x0C, 0x0D, 0x1B])
#: UTF-16 text without a byte-order mark: NUL in every other byte (ASCII code points).
_MIN_WIDE_NULS = 0.7
_GENERATED_MARKERS = (b"@generated", b"DO NOT EDIT")
_GENERATED_LINES = 5
# Whitespace and ESC are legitimate in text files; other C0 controls are not.
_CONTROL = re.compile("[\x01-\x08\x0e-\x1a\x1c-\x1f\x7f\ufffd]")
# C1 controls (U+0080-U+009F) almost never occur in real text, but make up 1/8 of random bytes
# decoded as Latin-1 and saved as UTF-8 (noise that is valid UTF-8).
_C1 = re.compile("[\x80-\x9f]")
_MAX_C1 = 0.05


def name_skip(name: str) -> str | None:
    """A skip reason given by a file name alone: ``minified`` or ``lockfile``."""
    if name.endswith(MINIFIED_SUFFIXES):
        return "minified"
    if name in LOCK_FILES or name.endswith(LOCK_SUFFIXES):
        return "lockfile"
    return None


def plain_suffixes(parsable: Iterable[str]) -> frozenset[str]:
    """The ``parsable`` suffixes no name that ends with them is skipped for (no minified or
    lock-file suffix or name ends with them): ``.py`` is one, ``.js`` (``x.min.js``) is not."""
    named = (*MINIFIED_SUFFIXES, *LOCK_SUFFIXES, *LOCK_FILES)
    return frozenset(s for s in parsable if not any(n.endswith(s) for n in named))


def in_skipped_dir(path: str) -> tuple[str, str] | None:
    """(reason, directory) of the outermost vendored or cache directory ``path`` lies in."""
    m = _SKIPPED_DIR.search(path)
    return (SKIPPED_DIRS[m.group(1)], path[: m.end() - 1]) if m else None


#: Skip reason of a name that is not valid UTF-8 (see ``decodable``).
UNDECODABLE_NAME = "undecodable_name"


def decodable(path: str) -> bool:
    """Whether ``path`` (as ``os.fsdecode`` gives it) was valid UTF-8. File names are bytes
    on Linux; one that is not UTF-8 decodes to lone surrogates, which no text store (SQLite,
    FTS, LanceDB, JSON) accepts, so discovery skips it (reason ``undecodable_name``)."""
    if path.isascii():
        return True
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable_path(path: str) -> str:
    """``path`` as text that can be printed and stored: bytes that are not UTF-8 are written
    as ``\\xNN`` (``latin1_\\xe9.py``)."""
    if decodable(path):
        return path
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def classify_content(path: str, data: bytes) -> str | None:
    """Return a skip reason for file content, or None to index it: 'binary', 'utf16' (UTF-16
    or UTF-32 text: the index reads and shows files as UTF-8), 'generated' or 'minified'.

    A very long line alone is no reason: outside JavaScript/TypeScript, and in them unless the
    long lines are most of the file and read as code (not one string, table or bracket nest),
    the file is indexed — its definitions after the long line are found like any others."""
    if path.endswith(MINIFIED_SUFFIXES):
        return "minified"
    if not data:
        return None
    sample = data[:_SNIFF_BYTES]
    truncated = len(data) > _SNIFF_BYTES
    if _looks_wide_text(sample, truncated):
        return "utf16"
    if _looks_binary(sample, truncated):
        return "binary"
    head = data.split(b"\n", _GENERATED_LINES)[:_GENERATED_LINES]
    if any(marker in line for line in head for marker in _GENERATED_MARKERS):
        return "generated"
    if path.endswith(MINIFIABLE_SUFFIXES) and _looks_minified(data):
        return "minified"
    return None


def _text_ok(text: str) -> bool:
    return not text or len(_CONTROL.findall(text)) <= _MAX_NON_TEXT * len(text)


def _looks_wide_text(sample: bytes, truncated: bool) -> bool:
    """UTF-16 or UTF-32 text: a byte-order mark, or (UTF-16 without one) NUL bytes in every
    other position, and the sample decodes to text."""
    if sample.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        encoding = "utf-32"
    elif sample.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    elif len(sample) >= 4 and b"\0" in sample:
        even, odd = sample[0::2], sample[1::2]
        half = len(sample) // 2
        if odd.count(0) >= _MIN_WIDE_NULS * half and even.count(0) < (1 - _MIN_WIDE_NULS) * half:
            encoding = "utf-16-le"
        elif even.count(0) >= _MIN_WIDE_NULS * half and odd.count(0) < (1 - _MIN_WIDE_NULS) * half:
            encoding = "utf-16-be"
        else:
            return False
    else:
        return False
    decoder = codecs.getincrementaldecoder(encoding)("strict")
    try:
        text = decoder.decode(sample, final=not truncated)
    except UnicodeDecodeError:
        return False
    return "\0" not in text and _text_ok(text)


def _looks_binary(sample: bytes, truncated: bool) -> bool:
    if b"\0" in sample:
        return True
    # Not final when the sample was cut: a multi-byte character split at the cut is not an
    # error, the decoder just holds its first bytes back.
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    try:
        text = decoder.decode(sample, final=not truncated)
    except UnicodeDecodeError:
        pass
    else:
        return len(_C1.findall(text)) > _MAX_C1 * len(text)
    # Not UTF-8: legacy 8-bit text (Latin-1, cp1252) is mostly printable ASCII; noise is not.
    return len(sample.translate(None, _ASCII_TEXT)) > (1 - _MIN_ASCII_TEXT) * len(sample)


def _looks_minified(data: bytes) -> bool:
    """Most of the file is in very long lines, and they are code: string literals left out,
    what remains is long and dense with statement separators."""
    long_lines = [line for line in data.split(b"\n") if len(line) > _MINIFIED_LINE]
    if sum(map(len, long_lines)) < _MINIFIED_SHARE * len(data):
        return False
    code_bytes = semicolons = 0
    for line in long_lines:
        code = _STRING_LITERAL.sub(b"", line)
        code_bytes += len(code)
        semicolons += code.count(b";")
    return code_bytes > _MINIFIED_LINE and semicolons >= _MINIFIED_SEMICOLONS * code_bytes
