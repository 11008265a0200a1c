"""What a parse worker does with one file, in the local engine's processes and in Ray's
actors alike: read it, skip it if unchanged or unreadable, classify it (binary, minified,
generated...), parse it with tree-sitter, cut it into chunks sized by the embedding model's
tokenizer and turn all that into the rows the graph stores (`indexer.rows`). Errors become
results, never exceptions. The build's driver (`indexer.build`) writes the rows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache

from .blake2 import blake2b
from .chunking import Chunk, chunk_file
from .discovery import classify_content
from .parser import parse_source
from .rows import FileRows, file_rows


@dataclass(frozen=True, slots=True)
class FileResult:
    path: str
    size: int
    mtime_ns: int
    hash: str
    status: str  # ok | syntax_error | unchanged | skipped:<reason> | failed
    rows: FileRows | None = None
    error: str = ""


def content_hash(data: bytes) -> str:
    return blake2b(data, digest_size=16).hexdigest()


@cache
def _tokenizer(model: str):
    from .embed_tokenizer import load_tokenizer

    return load_tokenizer(model)


#: How many of this process's word counts `learned_counts` has handed out.
_handed = 0


def learned_counts(model: str) -> tuple[int, list[tuple[str, int]]] | None:
    """(tokens of an empty text, the word counts learned since the last call) of this
    process's tokenizer, for the build to keep beside the index (`indexer.token_counts`);
    None when it was not loaded here or does not count by words."""
    global _handed
    if _tokenizer.cache_info().currsize == 0:
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
    ``counter`` counts its tokens instead of the tokenizer (`indexer.token_counts`)."""
    loaded = load_file(root, path, old_hash)
    if isinstance(loaded, FileResult):
        return loaded
    return parse_content(path, *loaded, language, module, model, counter)


def load_file(
    root: str, path: str, old_hash: str | None
) -> FileResult | tuple[bytes, int, int, str]:
    """(bytes, size, mtime_ns, hash) of a file to parse, or its final result when it is
    unreadable or its content is unchanged."""
    full = os.path.join(root, path)
    try:
        st = os.stat(full)
        with open(full, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        return FileResult(path, 0, 0, "", "skipped:unreadable", error=str(exc))
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
    reason = classify_content(path, data)
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
