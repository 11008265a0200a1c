"""What a parse worker does with one file, in the local engine's processes and in Ray's
actors alike: read it, skip it if unchanged or unreadable, classify it (binary, minified,
generated...), parse it with tree-sitter, cut it into chunks sized by the embedding model's
tokenizer and turn all that into the rows the graph stores (`indexer.parse.rows`). Errors become
results, never exceptions. The build's driver (`indexer.build`) writes the rows.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from indexer.blake2 import blake2b
from indexer.parse.chunking import Chunk, chunk_file
from indexer.parse.classify import classify_content
from indexer.parse.parser import parse_source
from indexer.parse.rows import FileRows, file_rows
from indexer.safety.denylist import denied_by_default
from indexer.safety.nofollow import open_regular


@dataclass(frozen=True, slots=True)
class FileResult:
    path: str
    size: int
    mtime_ns: int
    hash: str
    status: str  # ok | syntax_error | unchanged | skipped:<reason> | failed
    rows: FileRows | None = None
    error: str = ""


def count_outcomes(outcomes, failed: dict[str, str]) -> int:
    """Of (path, status, error) ``outcomes``: how many were parsed (with or without syntax
    errors); the others are counted by reason in the build's `skipped`, and those with a
    message (failed, unreadable…) are added to ``failed``."""
    parsed = 0
    for path, status, error in outcomes:
        if status in ("ok", "syntax_error"):
            parsed += 1
        if status == "failed" or (status.startswith("skipped:") and error):
            failed[path] = error
    return parsed


#: Parsing costs memory by the syntax tree's nodes, not by the bytes: tree-sitter kept ~320
#: bytes per token of `x = [aa, aa, ...]` (20 MB: 3.2 GB), and the rows, chunks and copies of
#: the text add ~25 bytes per byte. So whatever ``max_file_bytes`` allows, no file above
#: MAX_PARSE_BYTES is read into memory (``skipped:too_large``), and none with more than
#: MAX_PARSE_TOKENS tokens is parsed (``skipped:too_many_tokens``): ~0.7 GB at worst per worker.
#: Real sources fit: sqlite3.c, a 9 MB amalgamation, has ~1.6M tokens.
MAX_PARSE_BYTES = 16 * 1024 * 1024
MAX_PARSE_TOKENS = 2_000_000
#: Below this size a file cannot hold MAX_PARSE_TOKENS tokens: not counted.
_COUNT_TOKENS_ABOVE = MAX_PARSE_TOKENS // 2
#: A word or one punctuation character: about one syntax-tree leaf each.
_TOKEN = re.compile(rb"\w+|[^\w\s]")
_HASH_BLOCK = 1 << 20


def content_hash(data: bytes) -> str:
    return blake2b(data, digest_size=16).hexdigest()


def too_many_tokens(data: bytes) -> bool:
    """Whether ``data`` has more than MAX_PARSE_TOKENS tokens; counting stops there (C speed,
    one copy of at most the file)."""
    if len(data) <= _COUNT_TOKENS_ABOVE:
        return False
    return _TOKEN.subn(b"", data, count=MAX_PARSE_TOKENS + 1)[1] > MAX_PARSE_TOKENS


def _streamed_hash(fh) -> str:
    """`content_hash` of a file read in blocks: a file too large to parse never sits in memory."""
    h = blake2b(digest_size=16)
    while block := fh.read(_HASH_BLOCK):
        h.update(block)
    return h.hexdigest()


def _tokenizer(model: str):
    # loaded on the first chunk, not at import: a worker that only hashes never pays for it
    from indexer.vectors.tokenizer import process_tokenizer

    return process_tokenizer(model)


#: How many of this process's word counts `learned_counts` has handed out.
_handed = 0


def learned_counts(model: str) -> tuple[int, list[tuple[str, int]]] | None:
    """(tokens of an empty text, the word counts learned since the last call) of this
    process's tokenizer, for the build to keep beside the index (`indexer.vectors.token_counts`);
    None when it was not loaded here or does not count by words."""
    global _handed
    from indexer.vectors.tokenizer import process_tokenizer

    if process_tokenizer.cache_info().currsize == 0:
        return None
    tok = _tokenizer(model)
    if not getattr(tok, "bert_like", lambda: False)():
        return None
    words = tok.learned(_handed)
    _handed += len(words)
    return tok.count([""])[0], words


def parse_file(
    root: str, path: str, language: str, module: str, old_hash: str | None, model: str | None = None,
    counter=None,
) -> FileResult:
    """Read, classify, parse and chunk one file. Errors become results, never exceptions.
    ``model`` names the embedding model whose tokenizer sizes the chunks (None: no chunks);
    ``counter`` counts its tokens instead of the tokenizer (`indexer.vectors.token_counts`)."""
    loaded = load_file(root, path, old_hash)
    if isinstance(loaded, FileResult):
        return loaded
    return parse_content(path, *loaded, language, module, model, counter)


def load_file(
    root: str, path: str, old_hash: str | None
) -> FileResult | tuple[bytes, int, int, str]:
    """(bytes, size, mtime_ns, hash) of a file to parse, or its final result when it is
    unreadable or its content is unchanged."""
    try:
        # Not open(): a link swapped in after discovery must not bring a secret in under this
        # name, and a FIFO put there must not hang the worker (indexer/safety/nofollow.py).
        with os.fdopen(open_regular(root, path, refuse=denied_by_default), "rb") as fh:
            st = os.fstat(fh.fileno())
            if st.st_size > MAX_PARSE_BYTES:  # whatever max_file_bytes allows
                digest = _streamed_hash(fh)
                status = "unchanged" if digest == old_hash else "skipped:too_large"
                return FileResult(path, st.st_size, st.st_mtime_ns, digest, status)
            data = fh.read(MAX_PARSE_BYTES + 1)
    except OSError as exc:
        return FileResult(path, 0, 0, "", "skipped:unreadable", error=str(exc))
    if len(data) > MAX_PARSE_BYTES:  # grew since the stat
        return FileResult(path, st.st_size, st.st_mtime_ns, "", "skipped:too_large")
    digest = content_hash(data)
    if digest == old_hash:
        return FileResult(path, st.st_size, st.st_mtime_ns, digest, "unchanged")
    return data, st.st_size, st.st_mtime_ns, digest


def parse_content(
    path: str,
    data: bytes,
    size: int,
    mtime_ns: int,
    digest: str,
    language: str,
    module: str,
    model: str | None,
    counter=None,
) -> FileResult:
    """Classify, parse and chunk the bytes of one changed file (wherever they were read)
    into its rows."""
    reason = "too_large" if len(data) > MAX_PARSE_BYTES else classify_content(path, data)
    if not reason and too_many_tokens(data):
        reason = "too_many_tokens"
    if reason:
        return FileResult(path, size, mtime_ns, digest, f"skipped:{reason}")
    try:
        parsed = parse_source(path, data, language, module)
        status = "syntax_error" if parsed.has_errors else "ok"
        chunks: tuple[Chunk, ...] = ()
        if model is not None:
            tok = counter if counter is not None else _tokenizer(model)
            text = data.decode("utf-8", "replace")
            fast = getattr(tok, "count_lines", None)
            line_counts = fast(text) if fast is not None else None
            chunks = tuple(chunk_file(path, text, parsed, tok.count, tok.max_tokens, line_counts))
    except RecursionError as exc:  # nesting deeper than the parser's depth cap accounts for
        return FileResult(path, size, mtime_ns, digest, "skipped:too_deep", error=repr(exc))
    except (ValueError, UnicodeError) as exc:  # a grammar or query failure
        return FileResult(path, size, mtime_ns, digest, "failed", error=repr(exc))
    return FileResult(path, size, mtime_ns, digest, status, file_rows(path, parsed, chunks))
