"""Where an index's parts live: a local directory or any URI LanceDB and Arrow accept.

Credentials and endpoints come from the environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ENDPOINT_URL``, ``AWS_ALLOW_HTTP``, ... — read by
LanceDB and Arrow themselves) or from the ``storage_options`` table of the configuration file.
Never from flags (they end up in shell history and process lists) and never written into the
index: the index records only the URI, and a URI carrying credentials is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_plus, urlsplit

from indexer.errors import ConfigError

if TYPE_CHECKING:  # config.py imports this module for the URI checks
    from indexer.config import Config

__all__ = ["check_uri", "filesystem", "is_remote", "redact_uri",
           "storage_options", "uri_credentials", "vectors_uri"]

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

VECTORS_DIR = "vectors.lance"
#: LanceDB storage-option keys and the Arrow S3FileSystem arguments they map to.
_ARROW_S3 = {
    "aws_endpoint": "endpoint_override",
    "endpoint": "endpoint_override",
    "aws_region": "region",
    "region": "region",
    "aws_access_key_id": "access_key",
    "aws_secret_access_key": "secret_key",
    "aws_session_token": "session_token",
}


def storage_options(config: Config) -> dict[str, str] | None:
    """LanceDB storage options from the configuration (the environment is read by LanceDB)."""
    opts = config.storage_options
    return {str(k): str(v) for k, v in opts.items()} or None


def locate_vectors(configured: str | None, recorded: str | None, index_dir: Path) -> str:
    """Where a vector table lives: the configured URI (flag, file or ``REPOCTX_VECTORS_URI``),
    else the one the index recorded at build time, else ``<index>/vectors.lance``."""
    if configured:
        return check_uri(configured, "vectors URI")
    if recorded:  # written by a repoctx that stored URIs as given
        return check_uri(recorded, "vectors URI", "recorded in the index", fix=(
            "rebuild with `repoctx index build --vectors-uri URI`, a URI without them, and "
            f"{CREDENTIALS_HINT}"))
    return str(Path(index_dir) / VECTORS_DIR)


def recorded_vectors_uri(conn) -> str | None:
    """The vectors URI an index was built with (None: the default, next to the graph)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'vectors_uri'").fetchone()
    return row[0] if row and row[0] else None


def record_vectors_uri(conn, uri: str) -> None:
    """Record where this index's vectors live ('' for the default), with any credential
    redacted: the URI was checked before, and this second layer keeps a secret that got past
    the check out of the graph (which snapshots share)."""
    # zero the replaced value's bytes: one recorded by an older repoctx may hold a secret, and
    # SQLite otherwise leaves deleted cells in the file (and in snapshots copied from it)
    (previous,) = conn.execute("PRAGMA secure_delete").fetchone()
    conn.execute("PRAGMA secure_delete = 1")
    try:
        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('vectors_uri', ?)",
                     [redact_uri(uri) if uri else ""])
    finally:
        conn.execute(f"PRAGMA secure_delete = {int(previous)}")


def vectors_uri(config: Config, conn=None) -> str:
    """The vector table of this index; ``conn`` (the graph) supplies the recorded location."""
    recorded = recorded_vectors_uri(conn) if conn is not None else None
    return locate_vectors(config.vectors_uri, recorded, config.index_path)


def filesystem(uri: str, options: dict[str, str] | None = None) -> tuple[Any, str]:
    """(Arrow filesystem, path in it) for a local path, ``file://`` or object-storage URI.
    S3 endpoints and keys come from the environment or ``options`` (LanceDB's key names)."""
    import pyarrow.fs as pafs

    if not is_remote(uri):
        path = Path(uri.removeprefix("file://")).expanduser().resolve()
        return pafs.LocalFileSystem(), str(path)
    check_uri(uri, "snapshot URI")
    parts = urlsplit(uri)
    if parts.scheme in ("s3", "s3a") and options:
        kw: dict[str, Any] = {}
        for key, value in options.items():
            arg = _ARROW_S3.get(key.lower())
            if arg:
                kw[arg] = value
        if str(options.get("allow_http", "")).lower() == "true":
            kw["scheme"] = "http"
        endpoint = kw.get("endpoint_override", "")
        if "://" in endpoint:
            scheme, kw["endpoint_override"] = endpoint.split("://", 1)
            kw.setdefault("scheme", scheme)
        return pafs.S3FileSystem(**kw), f"{parts.netloc}{parts.path}".rstrip("/")
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except (ValueError, OSError) as exc:
        raise ConfigError(f"Cannot open {uri}: {exc} — check the URI and the storage settings "
                          "in the environment.") from exc
    return fs, path.rstrip("/")
