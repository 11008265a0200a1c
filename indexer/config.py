"""Index configuration: flags > `.repoctx.toml` / `[tool.repoctx]` > `REPOCTX_*` env > defaults."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .errors import ConfigError, NotARepositoryError

DEFAULT_EMBED_MODEL = "all-MiniLM-L6-v2"


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
    #: Extra settings not interpreted by the indexer (model adapters, agent).
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def index_path(self) -> Path:
        return self.index_dir if self.index_dir is not None else self.root / ".repoctx"

    @property
    def db_path(self) -> Path:
        return self.index_path / "graph.db"


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
        if "exclude" in merged:
            val = merged["exclude"]
            merged["exclude"] = tuple(val.split(",") if isinstance(val, str) else val)
        if merged.get("index_dir") is not None:
            idx = Path(merged["index_dir"]).expanduser()
            merged["index_dir"] = idx if idx.is_absolute() else (root_path / idx)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"Invalid repoctx setting: {exc} — check flags, config file and REPOCTX_* variables.") from exc
    cfg = Config(root=root_path, **merged)
    return replace(cfg, extra={**extra, **cfg.extra})
