"""What a repository's config may not loosen: the ``weakens`` predicates of the settings table
(indexer/config.py SETTINGS names one per setting that matters).

A predicate gets the repository's checked value, the trusted one (flags, environment, the user's
config file, else the default) and the resolved root, and says what the value loosens ("gives
commands the network") or None. "Looser" is always measured against the trusted value, so a
repository can narrow what the user allows but never widen it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from indexer.locations import is_remote

#: ``weakens(value, trusted, root)``: what a repository's ``value`` loosens compared with the
#: ``trusted`` one, or None.
Weakens = Callable[[Any, Any, Path], "str | None"]

#: From the most confined to the least: a repository may pick one at or above the trusted one.
_SANDBOX_STRICTNESS = {"required": 0, "auto": 1, "off": 2}


def looser_sandbox(value: str, trusted: str, root: Path) -> str | None:
    if _SANDBOX_STRICTNESS[value] <= _SANDBOX_STRICTNESS[trusted]:
        return None
    return f'confines commands less than "{trusted}"'


def turns_on(what: str) -> Weakens:
    return lambda value, trusted, root: what if value and not trusted else None


def adds(what: str) -> Weakens:
    """A list that widens something: it may only name what the trusted list names."""

    def weakens(value: tuple[str, ...], trusted: Any, root: Path) -> str | None:
        new = [v for v in value if v not in (trusted or ())]
        return f"{what} ({', '.join(new)})" if new else None

    return weakens


def drops(what: str) -> Weakens:
    """A deny list: it may only add to the trusted one, and (gitignore-style) never re-allow
    with a `!pattern` what the defaults or the trusted list deny."""

    def weakens(value: tuple[str, ...], trusted: Any, root: Path) -> str | None:
        allows = [v for v in value if v.startswith("!") and v not in (trusted or ())]
        if allows:
            return f"re-allows denied paths ({', '.join(allows)})"
        dropped = [t for t in (trusted or ()) if t not in value]
        return f"{what} ({', '.join(dropped)})" if dropped else None

    return weakens


def outside(value: Any, trusted: Any, root: Path) -> str | None:
    """Where the index (or its vectors, or snapshots) is written: inside the repository only,
    every symlink followed; object storage would be written with the user's credentials."""
    text = os.fspath(value)
    if trusted is not None and text == os.fspath(trusted):
        return None
    if is_remote(text):
        return "points at object storage, where repoctx would write with your credentials"
    if text.startswith("file:"):
        text = text.removeprefix("file://")
        if not text.startswith("/"):  # used as given: relative to the working directory
            return "is a file: URI without an absolute path"
    real = (root / Path(text).expanduser()).resolve()
    if real == root or real.is_relative_to(root):
        return None
    return f"points outside the repository ({real})"


def differs(what: str) -> Weakens:
    """Any value but the trusted one (a table: any key it sets differently, or drops — the
    repository's table replaces the trusted one whole)."""

    def weakens(value: Any, trusted: Any, root: Path) -> str | None:
        if isinstance(value, Mapping):
            trusted = trusted or {}
            keys = sorted(k for k in {*value, *trusted} if value.get(k) != trusted.get(k))
            return f"{what} ({', '.join(keys)})" if keys else None
        return what if value != trusted else None

    return weakens
