"""Where an index's parts live: a local directory or any URI LanceDB and Arrow accept.

Credentials and endpoints come from the environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ENDPOINT_URL``, ``AWS_ALLOW_HTTP``, ... — read by
LanceDB and Arrow themselves) or from the ``storage_options`` table of the configuration file.
Never from flags (they end up in shell history and process lists) and never written into the
index: the index records only the URI, and a URI carrying credentials is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from indexer.config import Config
from indexer.credentials import CREDENTIALS_HINT, check_uri, is_remote, redact_uri
from indexer.errors import ConfigError

# check_uri, is_remote and redact_uri are indexer/credentials.py's, named here too because a
# location is where they are applied.
__all__ = ["check_uri", "filesystem", "is_remote", "locate_vectors", "record_vectors_uri",
           "recorded_vectors_uri", "redact_uri", "storage_options", "vectors_uri"]

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
