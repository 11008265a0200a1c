"""Lexical search terms: identifiers split so words find code.

`parseHTTPResponse` and `parse_http_response` both yield parse, http, response (plus the whole
identifier), for the indexed text and for queries alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z]|[0-9]|\b|_)|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "our",
        "should",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "this",
        "to",
        "was",
        "we",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
        "code",
        "function",
        "method",
        "class",
        "file",
        "files",
    ]
)


@lru_cache(maxsize=200_000)
def _split(ident: str) -> tuple[str, ...]:
    parts = [p.lower() for p in _PARTS.findall(ident)]
    low = ident.lower().strip("_")
    if len(parts) > 1:
        return (low, *parts)
    return tuple(parts) or ((low,) if low else ())


def split_identifier(ident: str) -> list[str]:
    """Lower-case parts of an identifier; the identifier itself first when it has several."""
    return list(_split(ident))


@lru_cache(maxsize=200_000)
def _terms(ident: str) -> str:
    return " ".join(_split(ident))


def index_terms(text: str) -> str:
    """The text as FTS5 sees it: every identifier followed by its parts."""
    return " ".join(map(_terms, _IDENT.findall(text)))


def file_document(path: str, names: Iterable[str], bodies: Iterable[str]) -> tuple[str, str, str]:
    """The (path, names, body) columns of a file's document: ``names`` are those it defines
    (by symbol id), ``bodies`` its chunks' terms in line order."""
    return index_terms(path), index_terms(" ".join(dict.fromkeys(names))), " ".join(bodies)
