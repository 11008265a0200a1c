"""The `[agent]` settings the tools read from the configuration (`.repoctx.toml` or
`[tool.repoctx.agent]` in pyproject.toml)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from indexer.config import Config
from indexer.errors import ConfigError

from ..runner import DEFAULT_ENV_ALLOW

#: Programs `run_command` may start. No shells, no `env`/`xargs`/`find` (they run other programs),
#: no `sed`/`tee` (they write files past the checkpoints). `python` is here because tests need it,
#: and it can run anything: the `execute` permission, not this list, is the trust boundary.
DEFAULT_ALLOW_COMMANDS: tuple[str, ...] = (
    "python",
    "python3",
    f"python3.{sys.version_info.minor}",
    "pytest",
    "git",
    "ls",
    "cat",
    "head",
    "tail",
    "wc",
    "grep",
    "rg",
    "diff",
    "echo",
    "pwd",
    "sort",
    "uniq",
    "true",
)

#: git subcommands `run_command` allows unless `agent.git_write` is true: they only read.
GIT_READ_SUBCOMMANDS: frozenset[str] = frozenset(
    {
        "status",
        "diff",
        "log",
        "show",
        "blame",
        "grep",
        "ls-files",
        "ls-tree",
        "rev-parse",
        "shortlog",
        "describe",
        "cat-file",
        "merge-base",
        "rev-list",
        "whatchanged",
        "help",
        "version",
    }
)


@dataclass(frozen=True)
class AgentSettings:
    """Limits and allowlists of the tools. Every field can be set under `[agent]`."""

    allow_commands: tuple[str, ...] = DEFAULT_ALLOW_COMMANDS
    #: Allow git subcommands that change the repository (commit, checkout, reset, push ...).
    git_write: bool = False
    env_allow: tuple[str, ...] = DEFAULT_ENV_ALLOW
    command_timeout_s: float = 120.0
    test_timeout_s: float = 600.0
    #: Per stream, for run_command and run_tests.
    max_output_bytes: int = 64_000
    #: Characters of one tool result shown to the model; the rest is cut with a marker.
    max_result_chars: int = 24_000
    #: Most lines one read_span returns.
    max_read_lines: int = 200
    #: Largest file edit/create_file/rename_symbol will rewrite.
    max_edit_bytes: int = 2_000_000
    #: The test runner, before its arguments; empty means `<python> -m pytest`, where <python>
    #: is the workspace's `.venv/bin/python` if it has one, else the interpreter running repoctx.
    test_command: tuple[str, ...] = ()
    #: Extra environment variables for test runs (e.g. DJANGO_SETTINGS_MODULE); secrets are
    #: still filtered out.
    test_env: tuple[tuple[str, str], ...] = ()
    #: Reference-graph hops from a changed symbol to a test that reaches it.
    test_select_hops: int = 4

    @classmethod
    def from_config(cls, config: Config) -> AgentSettings:
        raw = config.extra.get("agent", {}) if isinstance(config.extra, dict) else {}
        if not isinstance(raw, dict):
            raise ConfigError(
                "`agent` in the repoctx config must be a table — fix the config file."
            )
        values: dict[str, Any] = {}
        for name, conv in _FIELDS.items():
            if name in raw:
                try:
                    values[name] = conv(raw[name])
                except (TypeError, ValueError) as exc:
                    raise ConfigError(
                        f"Invalid `agent.{name}` = {raw[name]!r} ({exc}) — fix the config file."
                    ) from exc
        return cls(**values)


def _strings(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(value.split())
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise TypeError("expected a list of strings")
    return tuple(value)


def _env(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise TypeError("expected a table of string values")
    return tuple(sorted(value.items()))


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError("expected true or false")
    return value


_FIELDS = {
    "allow_commands": _strings,
    "git_write": _bool,
    "env_allow": _strings,
    "command_timeout_s": float,
    "test_timeout_s": float,
    "max_output_bytes": int,
    "max_result_chars": int,
    "max_read_lines": int,
    "max_edit_bytes": int,
    "test_command": _strings,
    "test_env": _env,
    "test_select_hops": int,
}
