"""Credentials in URIs: found, refused and redacted.

An index records where its vectors and snapshots live, and messages show those places; neither
may carry a secret. A URI's user-info, its fragment and every query parameter whose name looks
like a secret count as credentials: :func:`check_uri` refuses them (naming where each is, never
its value) and :func:`redact_uri` replaces them with ``…``. Credentials belong in the
environment or the ``storage_options`` table (``CREDENTIALS_HINT``). A plain path is never a
URI here: ``?``, ``#`` and ``@`` are ordinary file-name characters.
"""

from __future__ import annotations

from urllib.parse import unquote_plus, urlsplit

from indexer.errors import ConfigError

__all__ = ["CREDENTIALS_HINT", "HIDDEN", "check_uri", "is_remote", "redact_uri", "uri_credentials"]

#: Query parameters whose name contains one of these words carry a credential (AWS, GCS and
#: Azure spellings: ``aws_secret_access_key``, ``access_token``, ``sas_token``, ``account_key``,
#: ``X-Amz-Credential``, ``password`` ...). Compared case-insensitively.
_SECRET_WORDS = ("key", "secret", "token", "passw", "pwd", "signature", "credential", "auth",
                 "sas")
#: Whole names and prefixes that are secrets too: Azure SAS `sig`, presigned URLs' parameters.
_SECRET_NAMES = frozenset({"sig"})
_SECRET_PREFIXES = ("x-amz-", "x-goog-", "x-ms-")
#: What replaces a secret in messages and anything stored.
HIDDEN = "…"
#: Where credentials go instead of a URI.
CREDENTIALS_HINT = (
    "put them in the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, "
    "AZURE_STORAGE_ACCOUNT_KEY, GOOGLE_APPLICATION_CREDENTIALS, ...), where the object-storage "
    "clients of vectors and snapshots read them"
)


def is_remote(uri: str) -> bool:
    """Whether ``uri`` names object storage (``s3://``, ``gs://``, ``az://``, ...), not a path."""
    scheme = urlsplit(uri).scheme
    return len(scheme) > 1 and scheme != "file"


def _secret_param(name: str) -> bool:
    n = unquote_plus(name).strip().lower()
    return n in _SECRET_NAMES or n.startswith(_SECRET_PREFIXES) or any(
        w in n for w in _SECRET_WORDS)


def _parts(uri: str):
    """``urlsplit(uri)`` for a string with a scheme (``s3://``, ``file://``); None for a plain
    path, where ``?``, ``#`` and ``@`` are ordinary file-name characters."""
    try:
        parts = urlsplit(uri)
    except ValueError as exc:  # e.g. an unclosed IPv6 bracket
        raise ConfigError(f"{redact_uri(uri)!r} is not a valid URI ({exc}) — fix it.") from exc
    return parts if len(parts.scheme) > 1 else None


def uri_credentials(uri: str) -> list[str]:
    """Where ``uri`` carries credentials: ``user-info``, ``query parameter `NAME` `` for each
    parameter whose name looks like a secret, ``fragment``; empty when it carries none."""
    parts = _parts(uri)
    if parts is None:
        return []
    found = []
    if "@" in parts.netloc:
        found.append("user-info")
    for piece in parts.query.split("&"):
        name, eq, _ = piece.partition("=")
        if piece and not eq:  # a bare value: a pasted token as often as anything
            found.append("query value without a name")
        elif _secret_param(name):
            found.append(f"query parameter `{unquote_plus(name)}`")
    if parts.fragment:
        found.append("fragment")
    return found


def redact_uri(uri: str) -> str:
    """``uri`` with every credential replaced by ``…``: the user-info, the values of
    secret-looking query parameters and the fragment. Plain paths are returned unchanged."""
    try:
        parts = _parts(uri)
    except ConfigError:
        return HIDDEN
    if parts is None:
        return uri
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{HIDDEN}@{netloc.rsplit('@', 1)[1]}"
    pieces = []
    for piece in parts.query.split("&"):
        name, eq, _ = piece.partition("=")
        if piece and not eq:
            piece = HIDDEN
        elif _secret_param(name):
            piece = f"{name}={HIDDEN}"
        pieces.append(piece)
    out = f"{parts.scheme}://{netloc}{parts.path}" if netloc or "://" in uri else \
        f"{parts.scheme}:{parts.path}"
    if parts.query:
        out += "?" + "&".join(pieces)
    if parts.fragment:
        out += "#" + HIDDEN
    return out


def check_uri(uri: str, what: str = "storage URI", where: str = "", fix: str = "") -> str:
    """``uri`` unchanged, or a ConfigError if it carries credentials anywhere (user-info,
    query string, fragment). The message shows the URI with the secrets replaced by ``…``;
    ``where`` says where it came from, ``fix`` replaces the default advice."""
    found = uri_credentials(uri)
    if found:
        where = f" {where}" if where else ""
        fix = fix or f"remove them from the URI and {CREDENTIALS_HINT}"
        raise ConfigError(
            f"The {what} {redact_uri(uri)}{where} carries credentials ({', '.join(found)}) — "
            f"{fix}."
        )
    return uri
