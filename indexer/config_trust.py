"""What a repository's config may not loosen: the ``weakens`` predicates of the settings
tables (each layer's table names one per setting that matters), and the refusal.

Trust: flags, the environment and the user's config file are the user's; the repository's
config is as untrusted as the rest of the repository. A setting whose ``weakens`` says a
repository's value loosens what the trusted sources allow (the sandbox, the allowlists, where the
index writes) is refused with :class:`UntrustedConfigError`, unless the user passes
``--trust-repo-config`` (``trust_repo=True``) or sets REPOCTX_TRUST_REPO_CONFIG=1. Tightening
values are honoured.

A predicate gets the repository's checked value, the trusted one (flags, environment, the user's
config file, else the default) and the resolved root, and says what the value loosens ("gives
commands the network") or None. "Looser" is always measured against the trusted value, so a
repository can narrow what the user allows but never widen it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from indexer.credentials import is_remote
from indexer.errors import ConfigError, UntrustedConfigError
from indexer.settings import BadValue, Setting, Settings, Weakens, clip, env_name, fmt, parse, show

#: The user's own switch (never a setting, so never the repository's): honour every value of
#: the repository's config, loosening ones included, as --trust-repo-config does.
TRUST_ENV = "REPOCTX_TRUST_REPO_CONFIG"

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


def refuse_loosening(settings: Settings, repo: Mapping[str, Any], trusted: Mapping[str, Any],
                     label: str, root: Path, user_file: Path | None) -> None:
    """UntrustedConfigError when a value of the repository's config loosens what the trusted
    sources allow (each setting's ``weakens`` decides); the first one is named, and the rest."""
    found = []
    for key, value in repo.items():
        s = settings[key]
        if s.weakens is not None:
            why = s.weakens(value, trusted.get(key, s.default), root)
            if why:
                found.append((key, value, why))
    if not found:
        return
    key, value, why = found[0]
    s = settings[key]
    shown = (clip(fmt(value)) if s.kind == "list" else
             clip(fmt(os.fspath(value))) if s.kind == "path" else show(s, value))
    also = f" (and {', '.join(f'`{k}`' for k, _, _ in found[1:])})" if found[1:] else ""
    place = user_file or "~/.config/repoctx/config.toml"
    raise UntrustedConfigError(
        f"{label} sets `{key}` = {shown}, which {why}{also}; a repository's config may only "
        f"tighten repoctx's limits — set it in {place} (or {env_name(key)}), or pass "
        "--trust-repo-config to accept this repository's settings."
    )


def trusted_by_env(env: Mapping[str, str]) -> bool:
    """Whether REPOCTX_TRUST_REPO_CONFIG in ``env`` says to trust the repository's config."""
    raw = env.get(TRUST_ENV, "")
    if not raw.strip():
        return False
    try:
        return parse(Setting("bool"), raw, True)
    except BadValue:
        raise ConfigError(f"{TRUST_ENV} = {clip(repr(raw))} is not a boolean — use 1 or 0.") \
            from None
