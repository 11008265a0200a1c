"""Index configuration: flags > the repository's `.repoctx.toml` / `[tool.repoctx]` >
`REPOCTX_*` env > the user's `~/.config/repoctx/config.toml` > defaults.

Every setting is declared once, in :data:`SETTINGS`: the index's :class:`Config` fields, the keys
other layers read from ``Config.extra`` (``model``, ``tokenizer``, ``context_budget``) and the
``[agent]`` table. Each has a kind, an allowed range or choices and a default, and every source
is checked against it: a bad value is a :class:`ConfigError` naming the key, where it came from
(file, environment variable or flag), the value and what is allowed; an unknown key is one too,
with the closest known key. TOML values must already have the right type (``jobs = "4"`` is an
error); only environment variables are parsed from text. A plain table rather than pydantic:
read commands start in ~100 ms, and importing pydantic alone costs ~35 ms.

Trust: flags, the environment and the user's config file are the user's; the repository's
config is as untrusted as the rest of the repository. A setting whose ``weakens`` says a
repository's value loosens what the trusted sources allow (the sandbox, the allowlists, where the
index writes) is refused with :class:`UntrustedConfigError`, unless the user passes
``--trust-repo-config`` (``trust_repo=True``) or sets REPOCTX_TRUST_REPO_CONFIG=1. Tightening
values are honoured.

Size: SETTINGS is the one table of every setting, with what loosens each, and the loaders of its
five sources sit beside it (reading the files: config_files.py; the predicates: config_trust.py).
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from indexer.config_files import (
    PYPROJECT,
    REPO_CONFIG,
    changes_repo_config,
    is_config_path,
    read_toml,
    user_config_path,
)
from indexer.config_trust import Weakens, adds, differs, drops, looser_sandbox, outside, turns_on
from indexer.errors import ConfigError, NotARepositoryError, UntrustedConfigError
from indexer.locations import CREDENTIALS_HINT, check_uri, is_remote, redact_uri, uri_credentials

__all__ = ["DEFAULT_ALLOW_COMMANDS", "DEFAULT_ENV_ALLOW", "SETTINGS", "TRUST_ENV", "Config",
           "Setting", "changes_repo_config", "check_setting", "check_uri", "env_name",
           "is_config_path", "is_remote", "load_config", "section_settings", "setting",
           "user_config_path"]

DEFAULT_EMBED_MODEL = "all-MiniLM-L6-v2"
ENGINES = ("local", "ray")
SANDBOX_MODES = ("auto", "required", "off")
#: How the agent reads tool calls: the provider's `tool_calls` only, calls written in the reply's
#: text (tools described in the prompt), or native first and text when there is none.
TOOL_FORMATS = ("auto", "native", "text")
#: The user's own switch (never a setting, so never the repository's): honour every value of
#: the repository's config, loosening ones included, as --trust-repo-config does.
TRUST_ENV = "REPOCTX_TRUST_REPO_CONFIG"

#: Programs `run_command` may start (`agent.allow_commands`). No shells, no `env`/`xargs`/`find`
#: (they run other programs), no `sed`/`tee` (they write files past the checkpoints). `python` is
#: here because tests need it, and it can run anything: the `execute` permission and the kernel
#: sandbox, not this list, are the trust boundary. Here, not in agent/, because a repository's
#: list is measured against it (it may only be narrower).
DEFAULT_ALLOW_COMMANDS: tuple[str, ...] = (
    "python", "python3", f"python3.{sys.version_info.minor}", "pytest", "git", "ls", "cat",
    "head", "tail", "wc", "grep", "rg", "diff", "echo", "pwd", "sort", "uniq", "true",
)
#: Environment variables a command inherits (`agent.env_allow`); secrets are filtered anyway.
DEFAULT_ENV_ALLOW: tuple[str, ...] = (
    "PATH", "HOME", "LANG", "LC_ALL", "TERM", "TMPDIR", "VIRTUAL_ENV",
)


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
    #: Embedding batch size (chunks per model call); 0: 16 on a CPU, 128 on a GPU.
    embed_batch_size: int = 0
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
    #: Index the git history (commits, the files and definitions each changed) for search.
    history: bool = True
    #: Newest commits of HEAD's history kept in the history index; 0 = all.
    history_max_commits: int = 0
    #: Settings read by other layers (``model``, ``tokenizer``, ``context_budget``, the
    #: ``agent`` table), checked against SETTINGS by load_config.
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def index_path(self) -> Path:
        return self.index_dir if self.index_dir is not None else self.root / ".repoctx"

    @property
    def db_path(self) -> Path:
        return self.index_path / "graph.db"


# -- the table of settings ----------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """How one setting is checked. ``kind`` is one of int, float, bool, str, choice, list (of
    strings), path, uri (a path or URI without credentials), options (a table of scalars) or
    env (a table of strings)."""

    kind: str
    #: Shown in error messages; None when the default is computed (or described in ``note``).
    default: Any = None
    #: Inclusive bounds of a number.
    lo: float | None = None
    hi: float | None = None
    #: Exclusive lower bound of a number (timeouts must be > 0).
    above: float | None = None
    choices: tuple[str, ...] = ()
    #: The unit or meaning, shown with the range ("bytes", "0 = one per core").
    note: str = ""
    #: A list given as one TOML string is split on this (None: whitespace); a list from an
    #: environment variable is always comma-separated.
    sep: str | None = None
    #: Whether a value from the repository's config loosens what the trusted sources (flags,
    #: environment, user config, else the default) allow: ``weakens(value, trusted, root)`` is
    #: None, or what it loosens ("gives commands the network"). None here: any value is fine.
    weakens: Weakens | None = None


INT32 = 2**31 - 1
DAY_S = 86_400.0


#: Every setting repoctx reads. Keys of a table are dotted (``agent.max_read_lines``);
#: environment variables are ``REPOCTX_`` + the key in capitals, dots as underscores.
SETTINGS: dict[str, Setting] = {
    # Config fields
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
    # read from Config.extra by other layers
    "model": Setting("str", note="provider:model, e.g. openai:gpt-4o-mini"),
    "tokenizer": Setting("str", "auto"),
    "context_budget": Setting("int", 8000, lo=1, hi=10_000_000, note="tokens"),
    # the model client (agent/models): `ask` and `agent run`
    "model_timeout_s": Setting("float", 600.0, above=0, hi=DAY_S,
                               note="seconds of silence from the model server"),
    "model_connect_timeout_s": Setting("float", 10.0, above=0, hi=3600.0, note="seconds"),
    "model_retries": Setting("int", 2, lo=0, hi=20, note="retries of one model call"),
    "model_tokenizer": Setting("str", "auto",
                               note="auto, server, a tokenizer.json path or a tokenizer name"),
    # [agent] (agent/tools/settings.py and agent/workspace.py)
    "agent.allow_commands": Setting("list", DEFAULT_ALLOW_COMMANDS, note="program names",
                                    weakens=adds("allows more programs")),
    "agent.git_write": Setting("bool", False,
                               weakens=turns_on("lets git commands change the repository")),
    "agent.env_allow": Setting("list", DEFAULT_ENV_ALLOW, note="variable names",
                               weakens=adds("passes more environment variables to commands")),
    "agent.command_timeout_s": Setting("float", 120.0, above=0, hi=DAY_S, note="seconds"),
    "agent.test_timeout_s": Setting("float", 600.0, above=0, hi=DAY_S, note="seconds"),
    "agent.max_output_bytes": Setting("int", 64_000, lo=1, hi=64_000_000,
                                      note="bytes per stream"),
    "agent.max_result_chars": Setting("int", 24_000, lo=1, hi=10_000_000, note="characters"),
    "agent.max_read_lines": Setting("int", 200, lo=1, hi=1_000_000, note="lines"),
    "agent.max_edit_bytes": Setting("int", 2_000_000, lo=1, hi=INT32, note="bytes"),
    "agent.test_command": Setting("list", (), note="the runner and its first arguments"),
    "agent.test_env": Setting("env", {}),
    "agent.test_select_hops": Setting("int", 4, lo=0, hi=32, note="reference hops"),
    "agent.deny": Setting("list", (), note="gitignore-style patterns",
                          weakens=drops("drops deny patterns")),
    "agent.write_deny": Setting("list", (), note="gitignore-style patterns",
                                weakens=drops("drops deny patterns")),
    "agent.sandbox": Setting("choice", "auto", choices=SANDBOX_MODES, weakens=looser_sandbox),
    "agent.network": Setting("bool", False, weakens=turns_on("gives commands the network")),
    "agent.sandbox_read": Setting("list", (), note="paths",
                                  weakens=adds("makes more paths readable")),
    "agent.sandbox_write": Setting("list", (), note="paths",
                                   weakens=adds("makes more paths writable")),
    "agent.sandbox_deny_read": Setting("list", (), note="paths",
                                       weakens=drops("drops denied paths")),
    "agent.tool_format": Setting("choice", "auto", choices=TOOL_FORMATS),
    # agent/strategy.py: loop or pipeline (auto: by the model), and the model's context window
    # when known (0: unknown), which `auto` reads
    "agent.strategy": Setting("choice", "auto", choices=("auto", "loop", "pipeline")),
    "agent.context_window": Setting("int", 0, lo=0, hi=10_000_000, note="tokens (0: unknown)"),
}
#: Top-level keys that hold a table of settings.
SECTIONS = ("agent",)
_CONFIG_FIELDS = frozenset(f.name for f in fields(Config)) - {"root", "extra"}
_ENV_PREFIX = "REPOCTX_"


def env_name(key: str) -> str:
    """The environment variable of a setting: ``REPOCTX_JOBS``, ``REPOCTX_AGENT_NETWORK``."""
    return _ENV_PREFIX + key.replace(".", "_").upper()


class _Bad(Exception):
    """A value of the wrong type or out of range; ``problem`` completes "`key` = v ..."."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


def _number(value: Any, text: bool, integer: bool) -> int | float:
    what = "an integer" if integer else "a number"
    if text:
        raw = value.strip().replace("_", "")
        try:
            return int(raw) if integer else float(raw)
        except ValueError:
            if raw.lstrip("+-").isdigit():  # more digits than int() converts
                raise _Bad("is out of range") from None
            raise _Bad(f"is not {what}") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Bad(f"is not {what}")
    if isinstance(value, float) and not math.isfinite(value):
        raise _Bad("is not a finite number")
    if integer and not isinstance(value, int):
        raise _Bad(f"is not {what}")
    return value


def _int(s: Setting, value: Any, text: bool) -> int:
    n = _number(value, text, integer=True)
    if (s.lo is not None and n < s.lo) or (s.hi is not None and n > s.hi):
        raise _Bad("is out of range")
    return int(n)


def _float(s: Setting, value: Any, text: bool) -> float:
    n = float(_number(value, text, integer=False))
    if not math.isfinite(n):
        raise _Bad("is not a finite number")
    if (s.above is not None and n <= s.above) or (s.lo is not None and n < s.lo) or (
            s.hi is not None and n > s.hi):
        raise _Bad("is out of range")
    return n


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _bool(s: Setting, value: Any, text: bool) -> bool:
    if text:
        word = value.strip().lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
    elif isinstance(value, bool):
        return value
    raise _Bad("is not a boolean")


def _str(s: Setting, value: Any, text: bool) -> str:
    if not isinstance(value, str):
        raise _Bad("is not a string")
    if not value.strip():
        raise _Bad("is empty")
    return value.strip()


def _choice(s: Setting, value: Any, text: bool) -> str:
    word = _str(s, value, text).lower()
    if word not in s.choices:
        raise _Bad("is not a known choice")
    return word


def _list(s: Setting, value: Any, text: bool) -> tuple[str, ...]:
    if isinstance(value, str):  # environment: comma-separated; TOML: as `sep` says
        sep = "," if text else s.sep
        items = value.split(sep) if sep else value.split()
        return tuple(i.strip() for i in items if i.strip())
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise _Bad("is not a list of strings")
    return tuple(value)


def _path(s: Setting, value: Any, text: bool) -> Path:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    return Path(_str(s, value, text))


def _uri(s: Setting, value: Any, text: bool) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    uri = _str(s, value, text)
    found = uri_credentials(uri)
    if found:
        raise _Bad(f"carries credentials ({', '.join(found)})")
    return uri


def _table(value: Any, text: bool) -> Mapping[str, Any]:
    if text:
        try:
            value = json.loads(value)
        except ValueError:
            raise _Bad("is not a JSON object") from None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise _Bad("is not a table")
    return value


def _options(s: Setting, value: Any, text: bool) -> dict[str, Any]:
    table = _table(value, text)
    for k, v in table.items():
        if isinstance(v, float) and not math.isfinite(v) or not isinstance(
                v, str | int | float | bool):
            raise _Bad(f"has a value for `{k}` that is not a string, number or boolean")
        found = uri_credentials(v) if isinstance(v, str) else []
        if found:
            raise _Bad(f"has a URI with credentials ({', '.join(found)}) for `{k}`")
    return dict(table)


def _env(s: Setting, value: Any, text: bool) -> tuple[tuple[str, str], ...]:
    if isinstance(value, tuple):  # already checked: ((name, value), ...)
        value = dict(value) if all(isinstance(p, tuple) and len(p) == 2 for p in value) else None
    table = _table(value, text)
    bad = [k for k, v in table.items() if not isinstance(v, str)]
    if bad:
        raise _Bad(f"has a value for `{bad[0]}` that is not a string")
    return tuple(sorted(table.items()))


_CHECKS: dict[str, Callable[[Setting, Any, bool], Any]] = {
    "int": _int, "float": _float, "bool": _bool, "str": _str, "choice": _choice, "list": _list,
    "path": _path, "uri": _uri, "options": _options, "env": _env,
}


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{}" if not value else "{…}"
    return str(value)


def _range(lo: float | None, hi: float | None, above: float | None) -> str:
    if above is not None:
        return f"greater than {_fmt(above)} and at most {_fmt(hi)}" if hi is not None else \
            f"greater than {_fmt(above)}"
    if lo is not None and hi is not None:
        return f"from {_fmt(lo)} to {_fmt(hi)}"
    return f"of at least {_fmt(lo)}" if lo is not None else f"of at most {_fmt(hi)}"


def allowed(key: str, text: bool = False) -> str:
    """What ``key`` accepts, as advice: "use an integer from 0 to 256 (0 = one per core;
    default 0)". ``text``: as written in an environment variable."""
    s = SETTINGS[key]
    use = {
        "int": lambda: f"an integer {_range(s.lo, s.hi, s.above)}",
        "float": lambda: f"a number {_range(s.lo, s.hi, s.above)}",
        "bool": lambda: "1, true, yes or 0, false, no" if text else "true or false",
        "str": lambda: "a non-empty string",
        "choice": lambda: "one of " + ", ".join(s.choices),
        "list": lambda: "strings separated by commas" if text else "a list of strings",
        "path": lambda: "a directory path",
        "uri": lambda: "a directory or a URI such as s3://bucket/prefix",
        "options": lambda: ("a JSON object" if text else "a table")
        + " of string, number or boolean values",
        "env": lambda: ("a JSON object" if text else "a table") + " of string values",
    }[s.kind]()
    details = [d for d in (s.note, None if s.default is None else
                           f"default {_clip(_fmt(s.default), 60)}") if d]
    return f"use {use}" + (f" ({'; '.join(details)})" if details else "")


def _show(s: Setting, value: Any) -> str:
    """The value as the message shows it: never a credential, never a secret-bearing table."""
    if s.kind in ("options", "env"):
        return "{…}" if isinstance(value, Mapping) else _clip(repr(value))
    if s.kind == "uri" and isinstance(value, str):
        return repr(redact_uri(value))
    if isinstance(value, bool):
        return _fmt(value)
    return _clip(repr(value))


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_setting(key: str, value: Any, where: str, *, text: bool = False) -> Any:
    """``value`` of setting ``key`` in its canonical type (tuples for lists), or a ConfigError
    naming the key, ``where`` it came from ("in .repoctx.toml", "from REPOCTX_JOBS"), the value
    and what is allowed. ``text``: the value is an environment variable's string, so numbers,
    booleans, lists and tables are parsed from it."""
    s = SETTINGS.get(key)
    if s is None:
        raise _unknown(key, where)
    try:
        return _CHECKS[s.kind](s, value, text)
    except _Bad as bad:
        advice = (f"remove them from the URI and {CREDENTIALS_HINT}" if "credentials" in
                  bad.problem else allowed(key, text))
        raise ConfigError(f"`{key}` = {_show(s, value)} {where} {bad.problem} — {advice}.") from None


def _unknown(key: str, where: str) -> ConfigError:
    import difflib

    section, dot, _ = key.rpartition(".")
    known = sorted(k for k in [*SETTINGS, *SECTIONS]
                   if (k.rpartition(".")[0] == section if dot else "." not in k))
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f" — did you mean `{close[0]}`?" if close else " —"
    shown = ", ".join(k.rpartition(".")[2] for k in known)
    scope = f"`{section}` settings" if dot else "settings"
    return ConfigError(
        f"Unknown setting `{key}` {where}{hint} Known {scope}: {shown}. "
        "Fix or remove the key."
    )


def section_settings(config: Config, section: str) -> dict[str, Any]:
    """The checked settings of table ``section`` (``agent``) in ``config.extra``, by key without
    the prefix; only the keys that are set. load_config checked them already with where they
    came from; this checks a Config made in code the same way."""
    raw = config.extra.get(section, {}) if isinstance(config.extra, Mapping) else {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"`{section}` in Config.extra is not a table — pass a dict.")
    return {k: check_setting(f"{section}.{k}", v, "in Config.extra") for k, v in raw.items()}


def setting(config: Config, key: str) -> Any:
    """The checked value of a top-level setting kept in ``config.extra`` (``context_budget``,
    ``tokenizer``, ``model``), else its default."""
    extra = config.extra if isinstance(config.extra, Mapping) else {}
    if key not in extra:
        return SETTINGS[key].default
    return check_setting(key, extra[key], "in Config.extra")


# -- the sources --------------------------------------------------------------------------------


def _from_file(root: Path) -> tuple[dict[str, Any], str]:
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
            return _anchored(_from_tables(data, label, prefix), root), label
    return {}, REPO_CONFIG


def _from_user(path: Path | None, root: Path) -> dict[str, Any]:
    """Checked settings of the user's own config file (none: {})."""
    data = read_toml(path, str(path)) if path is not None else None
    return _anchored(_from_tables(data, str(path)), root) if data else {}


def _anchored(values: dict[str, Any], root: Path) -> dict[str, Any]:
    """A relative path in a config file is relative to the repository, as ``index_dir`` is, not
    to whichever directory repoctx runs from (flags and variables keep the working directory)."""
    for key in ("vectors_uri", "snapshot_uri"):
        uri = values.get(key)
        if uri is not None and not is_remote(uri) and not uri.startswith(("/", "~", "file:")):
            values[key] = str(root / uri)
    return values


def _refuse_loosening(repo: Mapping[str, Any], trusted: Mapping[str, Any], label: str,
                      root: Path, user_file: Path | None) -> None:
    """UntrustedConfigError when a value of the repository's config loosens what the trusted
    sources allow (each setting's ``weakens`` decides); the first one is named, and the rest."""
    found = []
    for key, value in repo.items():
        s = SETTINGS[key]
        if s.weakens is not None:
            why = s.weakens(value, trusted.get(key, s.default), root)
            if why:
                found.append((key, value, why))
    if not found:
        return
    key, value, why = found[0]
    s = SETTINGS[key]
    shown = (_clip(_fmt(value)) if s.kind == "list" else
             _clip(_fmt(os.fspath(value))) if s.kind == "path" else _show(s, value))
    also = f" (and {', '.join(f'`{k}`' for k, _, _ in found[1:])})" if found[1:] else ""
    place = user_file or "~/.config/repoctx/config.toml"
    raise UntrustedConfigError(
        f"{label} sets `{key}` = {shown}, which {why}{also}; a repository's config may only "
        f"tighten repoctx's limits — set it in {place} (or {env_name(key)}), or pass "
        "--trust-repo-config to accept this repository's settings."
    )


def _trust_from_env(env: Mapping[str, str]) -> bool:
    raw = env.get(TRUST_ENV, "")
    if not raw.strip():
        return False
    try:
        return _bool(Setting("bool"), raw, True)
    except _Bad:
        raise ConfigError(f"{TRUST_ENV} = {_clip(repr(raw))} is not a boolean — use 1 or 0.") \
            from None


def _from_tables(data: Mapping[str, Any], label: str, prefix: str = "") -> dict[str, Any]:
    """Checked settings of one TOML document (or an ``extra`` mapping) by dotted key."""
    out: dict[str, Any] = {}
    where = f"in {label}"
    for key, value in data.items():
        if key in SECTIONS:
            if not isinstance(value, Mapping):
                raise ConfigError(
                    f"`{key}` {where} is not a table — write its settings under [{prefix}{key}].")
            sub = f"in {label.split(' [')[0]} [{prefix}{key}]"
            for k, v in value.items():
                out[f"{key}.{k}"] = check_setting(f"{key}.{k}", v, sub)
        else:
            out[key] = check_setting(key, value, where)
    return out


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    """Checked settings from ``REPOCTX_*`` variables; an empty variable counts as unset."""
    out: dict[str, Any] = {}
    for key in SETTINGS:
        name = env_name(key)
        raw = env.get(name)
        if raw is not None and raw.strip():
            out[key] = check_setting(key, raw, f"from {name}", text=True)
    return out


def _from_flags(overrides: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        if value is None or key == "root":
            continue
        if key == "extra":
            out.update(_from_tables(_table_or_error(value), "the `extra` argument"))
            continue
        if "." in key or key in SECTIONS:
            raise _unknown(key, "passed to load_config")
        out[key] = check_setting(key, value, f"from --{key.replace('_', '-')}")
    return out


def _table_or_error(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError("The `extra` argument of load_config is not a dict — pass a dict.")
    return value


def load_config(root: str | Path, env: Mapping[str, str] | None = None, *,
                trust_repo: bool = False, **overrides: Any) -> Config:
    """Build the configuration for ``root``. ``overrides`` are the command's flags (errors name
    them ``--key``) and win; ``None`` means unset. Every value from every source is checked
    against SETTINGS, so a bad one anywhere is a ConfigError, even if a flag overrides it.

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
    trusted = _from_user(user_file, root_path)
    trusted.update(_from_env(env))
    repo, label = _from_file(root_path)
    flags = _from_flags(overrides)
    if not (trust_repo or _trust_from_env(env)):
        moot = set(flags)
        _refuse_loosening({k: v for k, v in repo.items() if k not in moot}, trusted, label,
                          root_path, user_file)
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
    return Config(root=root_path, **kwargs, extra=extra)
