"""Index configuration: flags > the repository's `.repoctx.toml` / `[tool.repoctx]` >
`REPOCTX_*` env > the user's `~/.config/repoctx/config.toml` > defaults.

:data:`INDEX_SETTINGS` is the indexer's section of the settings table: the fields of
:class:`Config` and the `agent.deny` list discovery honours too. The layers above declare their
own sections (retrieval/settings.py, agent/settings.py) and cli composes them (cli/settings.py);
:func:`load_config` checks every source against the table it is given, the indexer's alone by
default, and keeps what is not a Config field in ``Config.extra`` for the layer that declared it.
The table's machinery is indexer/settings.py; reading the files, config_files.py; what a
repository's config may not loosen, config_trust.py.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from indexer.config_files import PYPROJECT, REPO_CONFIG, read_toml, user_config_path
from indexer.config_trust import differs, drops, outside, refuse_loosening, trusted_by_env
from indexer.credentials import is_remote
from indexer.errors import ConfigError, NotARepositoryError
from indexer.settings import Setting, Settings, env_name

__all__ = ["DEFAULT_EMBED_MODEL", "INDEX_SETTINGS", "Config", "load_config"]

DEFAULT_EMBED_MODEL = "all-MiniLM-L6-v2"
ENGINES = ("local", "ray")
INT32 = 2**31 - 1

#: The indexer's settings. Keys of a table are dotted (``agent.deny``); environment variables
#: are ``REPOCTX_`` + the key in capitals, dots as underscores.
INDEX_SETTINGS = Settings({
    "index_dir": Setting("path", note="default <root>/.repoctx", weakens=outside),
    "max_file_bytes": Setting("int", 1_000_000, lo=1, hi=INT32, note="bytes"),
    "jobs": Setting("int", 0, lo=0, hi=256, note="0 = one per core"),
    "batch_size": Setting("int", 256, lo=1, hi=1_000_000, note="files per batch"),
    "exclude": Setting("list", (), sep=","),
    "embed_model": Setting("str", DEFAULT_EMBED_MODEL),
    "embed_batch_size": Setting("int", 0, lo=0, hi=65_536, note="chunks per batch, 0 = 16 on a CPU, 128 on a GPU"),
    # Where the vectors and snapshots are written, and how object storage is reached: a
    # repository pointing them at a bucket or a path outside itself would have repoctx write
    # (or `--full` replace) there with the user's credentials.
    "vectors_uri": Setting("uri", note="default <index>/vectors.lance", weakens=outside),
    "storage_options": Setting("options", {}, weakens=differs("changes object-storage options")),
    "snapshot_uri": Setting("uri", weakens=outside),
    "engine": Setting("choice", "local", choices=ENGINES),
    # A Ray cluster gets the repository's files and returns pickled results to this process.
    "ray_address": Setting("uri", note="`auto` or ray://host:10001",
                           weakens=differs("sends the build to a Ray cluster")),
    "history": Setting("bool", True),
    "history_max_commits": Setting("int", 0, lo=0, hi=INT32, note="0 = all"),
    # Files hidden from the agent's tools (agent/workspace.py), which discovery does not index
    # through a link either: the indexer is the first to read it, so it is declared here.
    "agent.deny": Setting("list", (), note="gitignore-style patterns",
                          weakens=drops("drops deny patterns")),
})


def _default(key: str) -> Any:
    return INDEX_SETTINGS[key].default


@dataclass(frozen=True)
class Config:
    """Settings for one repository's index."""

    root: Path
    #: Where the index lives; `<root>/.repoctx` unless set (needed for read-only trees).
    index_dir: Path | None = None
    #: Files larger than this many bytes are skipped (reason `too_large`).
    max_file_bytes: int = _default("max_file_bytes")
    #: Parser worker processes; 0 means one per core.
    jobs: int = _default("jobs")
    #: Files parsed per batch; bounds memory independently of repository size.
    batch_size: int = _default("batch_size")
    #: Extra gitignore-style patterns to exclude, on top of `.gitignore` and `.repoctxignore`.
    exclude: tuple[str, ...] = _default("exclude")
    #: sentence-transformers model name or path used for embeddings.
    embed_model: str = _default("embed_model")
    #: Embedding batch size (chunks per model call); 0: 16 on a CPU, 128 on a GPU.
    embed_batch_size: int = _default("embed_batch_size")
    #: Where the vector table lives: a directory or any LanceDB URI (``s3://bucket/prefix``);
    #: default ``<index>/vectors.lance``.
    vectors_uri: str | None = None
    #: LanceDB storage options (endpoint, region, ...); secrets belong in the environment.
    storage_options: dict[str, Any] = field(default_factory=dict)
    #: Where `index push` / `index pull` keep snapshots (a directory or object-storage URI).
    snapshot_uri: str | None = None
    #: Build engine: ``local`` (a process pool) or ``ray`` (tasks on a Ray cluster).
    engine: str = _default("engine")
    #: Ray cluster address (``auto``, ``ray://host:10001``); none starts a local Ray.
    ray_address: str | None = None
    #: Index the git history (commits, the files and definitions each changed) for search.
    history: bool = _default("history")
    #: Newest commits of HEAD's history kept in the history index; 0 = all.
    history_max_commits: int = _default("history_max_commits")
    #: The settings of the other layers' sections (``context_budget``, ``model``, the ``agent``
    #: table), by key (a table's as a dict), checked by load_config; each layer reads its own
    #: back through its section (retrieval/settings.py, agent/settings.py).
    extra: dict[str, Any] = field(default_factory=dict)
    #: The keys load_config read the sources with (None: made in code). A layer reading back a
    #: key this table did not hold gets an error, not its default: the indexer alone leaves
    #: other layers' keys unread, and a tightening the user wrote must not be dropped unseen.
    read_keys: frozenset[str] | None = field(default=None, compare=False, repr=False)

    @property
    def index_path(self) -> Path:
        return self.index_dir if self.index_dir is not None else self.root / ".repoctx"

    @property
    def db_path(self) -> Path:
        return self.index_path / "graph.db"

    @property
    def workers(self) -> int:
        """How many processes parse and resolve: ``jobs``, or one per core when it is 0."""
        return self.jobs or os.cpu_count() or 1


# -- the sources --------------------------------------------------------------------------------


def _from_file(table: Settings, root: Path) -> tuple[dict[str, Any], str]:
    """Checked settings (dotted keys) of `.repoctx.toml`, else `[tool.repoctx]` of
    pyproject.toml (the first of them that holds any), and the name to show for it."""
    for name, prefix in ((REPO_CONFIG, ""), (PYPROJECT, "tool.repoctx.")):
        data = read_toml(root / name, name)
        if data is None:
            continue
        if prefix:
            tool = data.get("tool", {})
            data = tool.get("repoctx", {}) if isinstance(tool, dict) else {}
            if not isinstance(data, dict):
                raise ConfigError(
                    "`tool.repoctx` in pyproject.toml is not a table — write [tool.repoctx].")
        if data:
            label = f"{name} [{prefix.rstrip('.')}]" if prefix else name
            return _anchored(_from_tables(table, data, label, prefix), root), label
    return {}, REPO_CONFIG


def _from_user(table: Settings, path: Path | None, root: Path) -> dict[str, Any]:
    """Checked settings of the user's own config file (none: {})."""
    data = read_toml(path, str(path)) if path is not None else None
    return _anchored(_from_tables(table, data, str(path)), root) if data else {}


def _anchored(values: dict[str, Any], root: Path) -> dict[str, Any]:
    """A relative path in a config file is relative to the repository, as ``index_dir`` is, not
    to whichever directory repoctx runs from (flags and variables keep the working directory)."""
    for key in ("vectors_uri", "snapshot_uri"):
        uri = values.get(key)
        if uri is not None and not is_remote(uri) and not uri.startswith(("/", "~", "file:")):
            values[key] = str(root / uri)
    return values


def _from_tables(table: Settings, data: Mapping[str, Any], label: str,
                 prefix: str = "") -> dict[str, Any]:
    """Checked settings of one TOML document (or an ``extra`` mapping) by dotted key."""
    out: dict[str, Any] = {}
    where = f"in {label}"
    for key, value in data.items():
        if key in table.sections:
            if not isinstance(value, Mapping):
                raise ConfigError(
                    f"`{key}` {where} is not a table — write its settings under [{prefix}{key}].")
            sub = f"in {label.split(' [')[0]} [{prefix}{key}]"
            for k, v in value.items():
                if table.declares(f"{key}.{k}"):
                    out[f"{key}.{k}"] = table.check(f"{key}.{k}", v, sub)
        elif table.declares(key):
            out[key] = table.check(key, value, where)
    return out


def _from_env(table: Settings, env: Mapping[str, str]) -> dict[str, Any]:
    """Checked settings from ``REPOCTX_*`` variables; an empty variable counts as unset."""
    out: dict[str, Any] = {}
    for key in table:
        name = env_name(key)
        raw = env.get(name)
        if raw is not None and raw.strip():
            out[key] = table.check(key, raw, f"from {name}", text=True)
    return out


def _from_flags(table: Settings, overrides: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        if value is None or key == "root":
            continue
        if key == "extra":
            out.update(_from_tables(table, _table_or_error(value), "the `extra` argument"))
            continue
        if "." in key or key in table.sections:
            raise table.unknown(key, "passed to load_config")
        out[key] = table.check(key, value, f"from --{key.replace('_', '-')}")
    return out


def _table_or_error(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError("The `extra` argument of load_config is not a dict — pass a dict.")
    return value


_CONFIG_FIELDS = frozenset(f.name for f in fields(Config)) - {"root", "extra"}


def load_config(root: str | Path, env: Mapping[str, str] | None = None, *,
                settings: Settings = INDEX_SETTINGS, trust_repo: bool = False,
                **overrides: Any) -> Config:
    """Build the configuration for ``root``. ``overrides`` are the command's flags (errors name
    them ``--key``) and win; ``None`` means unset. Every value from every source is checked
    against ``settings`` (the indexer's section by default; cli/settings.py composes every
    layer's), so a bad one anywhere is a ConfigError, even if a flag overrides it.

    Precedence: flags > the repository's `.repoctx.toml` / `[tool.repoctx]` > ``env``
    (``REPOCTX_*``; default os.environ) > the user's config file (:func:`user_config_path` of
    ``env``) > defaults. A repository value that loosens what the others allow is an
    UntrustedConfigError unless ``trust_repo`` (--trust-repo-config) or REPOCTX_TRUST_REPO_CONFIG
    is set; a flag that sets the same key makes the repository's value moot."""
    root_path = Path(root).resolve()
    if not root_path.is_dir():
        raise NotARepositoryError(f"{root} is not a directory — pass the repository root.")
    user_file = user_config_path(env)
    env = os.environ if env is None else env
    trusted = _from_user(settings, user_file, root_path)
    trusted.update(_from_env(settings, env))
    repo, label = _from_file(settings, root_path)
    flags = _from_flags(settings, overrides)
    if not (trust_repo or trusted_by_env(env)):
        moot = set(flags)
        refuse_loosening(settings, {k: v for k, v in repo.items() if k not in moot}, trusted,
                         label, root_path, user_file)
    merged = {**trusted, **repo, **flags}
    kwargs: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in merged.items():
        section, dot, name = key.partition(".")
        if dot:
            extra.setdefault(section, {})[name] = value
        elif key in _CONFIG_FIELDS:
            kwargs[key] = value
        else:
            extra[key] = value
    if "index_dir" in kwargs:
        idx = kwargs["index_dir"].expanduser()
        kwargs["index_dir"] = idx if idx.is_absolute() else root_path / idx
    return Config(root=root_path, **kwargs, extra=extra, read_keys=frozenset(settings))
