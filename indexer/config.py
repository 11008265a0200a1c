"""Index configuration: flags > `.repoctx.toml` / `[tool.repoctx]` > `REPOCTX_*` env > defaults."""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .errors import ConfigError, NotARepositoryError

DEFAULT_EMBED_MODEL = "all-MiniLM-L6-v2"
ENGINES = ("local", "ray")


@dataclass(frozen=True)
class Config:
    """Settings for one repository's index."""

    root: Path
    #: Where the index lives; `<root>/.repoctx` unless set (needed for read-only trees).
    index_dir: Path | None = None
    #: Files larger than this many bytes are skipped (reason `too_large`).
    max_file_bytes: int = 1_000_000
    #: Parser worker processes; 0 means one per core.
    jobs: int = 0
    #: Files parsed per batch; bounds memory independently of repository size.
    batch_size: int = 256
    #: Extra gitignore-style patterns to exclude, on top of `.gitignore` and `.repoctxignore`.
    exclude: tuple[str, ...] = ()
    #: sentence-transformers model name or path used for embeddings.
    embed_model: str = DEFAULT_EMBED_MODEL
    #: Embedding batch size.
    embed_batch_size: int = 64
    #: Where the vector table lives: a directory or any LanceDB URI (``s3://bucket/prefix``);
    #: default ``<index>/vectors.lance``.
    vectors_uri: str | None = None
    #: LanceDB storage options (endpoint, region, ...); secrets belong in the environment.
    storage_options: dict[str, Any] = field(default_factory=dict)
    #: Where `index push` / `index pull` keep snapshots (a directory or object-storage URI).
    snapshot_uri: str | None = None
    #: Build engine: ``local`` (a process pool) or ``ray`` (tasks on a Ray cluster).
    engine: str = "local"
    #: Ray cluster address (``auto``, ``ray://host:10001``); none starts a local Ray.
    ray_address: str | None = None
    #: Extra settings not interpreted by the indexer (model adapters, agent).
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def index_path(self) -> Path:
        return self.index_dir if self.index_dir is not None else self.root / ".repoctx"

    @property
    def db_path(self) -> Path:
        return self.index_path / "graph.db"


def is_remote(uri: str) -> bool:
    """Whether ``uri`` names object storage (``s3://``, ``gs://``, ``az://``, ...), not a path."""
    scheme = urlsplit(uri).scheme
    return len(scheme) > 1 and scheme != "file"


def check_uri(uri: str, what: str = "storage URI") -> str:
    """``uri`` unchanged, or a ConfigError if it carries credentials (``s3://key:secret@...``)."""
    parts = urlsplit(uri)
    if is_remote(uri) and (parts.username or parts.password):
        raise ConfigError(
            f"The {what} {parts.scheme}://…@{parts.hostname}{parts.path} carries credentials — "
            "remove them from the URI and set them in the environment (AWS_ACCESS_KEY_ID, "
            "AWS_SECRET_ACCESS_KEY, ...) or in the `storage_options` table of .repoctx.toml."
        )
    return uri


_ENV_PREFIX = "REPOCTX_"
_CONVERTERS = {"max_file_bytes": int, "jobs": int, "batch_size": int, "embed_batch_size": int}


def _from_file(root: Path) -> dict[str, Any]:
    for candidate, section in ((root / ".repoctx.toml", None), (root / "pyproject.toml", "tool")):
        if not candidate.is_file():
            continue
        try:
            data = tomllib.loads(candidate.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"Cannot read {candidate}: {exc} — fix the file's TOML syntax.") from exc
        if section:
            data = data.get("tool", {}).get("repoctx", {})
        if data:
            return dict(data)
    return {}


def _from_env(env: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(Config):
        key = _ENV_PREFIX + f.name.upper()
        if key in env and f.name != "root":
            out[f.name] = env[key]
    return out


def load_config(root: str | Path, env: dict[str, str] | None = None, **overrides: Any) -> Config:
    """Build the configuration for ``root``. ``overrides`` (flags) win; ``None`` means unset."""
    root_path = Path(root).resolve()
    if not root_path.is_dir():
        raise NotARepositoryError(f"{root} is not a directory — pass the repository root.")
    env = dict(os.environ) if env is None else env
    merged: dict[str, Any] = {}
    merged.update(_from_env(env))
    file_values = _from_file(root_path)
    known = {f.name for f in fields(Config)}
    extra = {k: v for k, v in file_values.items() if k not in known}
    merged.update({k: v for k, v in file_values.items() if k in known})
    merged.update({k: v for k, v in overrides.items() if v is not None})
    merged.pop("root", None)
    try:
        for key, conv in _CONVERTERS.items():
            if key in merged:
                merged[key] = conv(merged[key])
        if isinstance(merged.get("storage_options"), str):  # REPOCTX_STORAGE_OPTIONS (JSON)
            merged["storage_options"] = json.loads(merged["storage_options"])
        if merged.get("engine", "local") not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {merged['engine']!r}")
        if "exclude" in merged:
            val = merged["exclude"]
            merged["exclude"] = tuple(val.split(",") if isinstance(val, str) else val)
        if merged.get("index_dir") is not None:
            idx = Path(merged["index_dir"]).expanduser()
            merged["index_dir"] = idx if idx.is_absolute() else (root_path / idx)
    except (TypeError, ValueError) as exc:  # json.JSONDecodeError is a ValueError
        raise ConfigError(f"Invalid repoctx setting: {exc} — check flags, config file and REPOCTX_* variables.") from exc
    for key in ("vectors_uri", "snapshot_uri"):
        if merged.get(key):
            check_uri(str(merged[key]), key.replace("_", " ").replace("uri", "URI"))
    cfg = Config(root=root_path, **merged)
    return replace(cfg, extra={**extra, **cfg.extra})
