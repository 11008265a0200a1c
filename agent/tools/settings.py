"""The `[agent]` settings the tools read from the configuration: the user's
`~/.config/repoctx/config.toml`, `REPOCTX_AGENT_*`, flags, and the repository's `.repoctx.toml`
or `[tool.repoctx.agent]` in pyproject.toml — which may only tighten them (indexer/config.py
refuses a repository value that loosens the sandbox, the allowlists or the deny lists before any
of this is read)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from indexer.config import DEFAULT_ALLOW_COMMANDS, DEFAULT_ENV_ALLOW, Config, section_settings

__all__ = ["DEFAULT_ALLOW_COMMANDS", "DEFAULT_ENV_ALLOW", "GIT_READ_SUBCOMMANDS", "AgentSettings"]

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
    #: The kernel sandbox of run_command/run_tests (agent/sandbox.py): "auto" uses what the
    #: kernel offers and says once what it lacks, "required" refuses commands without Landlock,
    #: "off" runs them unconfined (allowlist and argument checks only).
    sandbox: str = "auto"
    #: Let commands use the network (no network namespace, no Landlock TCP rules).
    network: bool = False
    #: Extra paths commands may read / read and write (`~` expanded, relative to the root).
    sandbox_read: tuple[str, ...] = ()
    sandbox_write: tuple[str, ...] = ()
    #: Extra `$HOME`-relative secrets commands may not read (added to sandbox.HOME_SECRETS).
    sandbox_deny_read: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: Config) -> AgentSettings:
        """The `[agent]` settings of ``config``, typed and range-checked by the one table of
        settings (`indexer.config.SETTINGS`, where a new field's type and range go); keys this
        class does not hold (`deny`, `write_deny`: the workspace's) are left to their readers."""
        values = section_settings(config, "agent")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})

