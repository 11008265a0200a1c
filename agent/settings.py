"""The agent's settings: the model client (`model`, `model_*`) and the `[agent]` table (the
tools' limits and allowlists, the sandbox, the strategy), declared here once with their kinds,
ranges and defaults, and read back typed (:class:`ModelSettings`, :class:`AgentSettings`).

They come from flags, `REPOCTX_*`, the user's `~/.config/repoctx/config.toml` and the
repository's `.repoctx.toml` or `[tool.repoctx]` in pyproject.toml — which may only tighten them:
load_config refuses a repository value that loosens the sandbox, the allowlists or the deny lists
(each record's ``weakens``) before any of this is read. cli composes this section with the
indexer's and retrieval's (cli/settings.py).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields
from typing import Any

from indexer import (
    INDEX_SETTINGS,
    Config,
    Setting,
    Settings,
    adds,
    drops,
    looser_sandbox,
    turns_on,
)

__all__ = ["AGENT_SETTINGS", "DEFAULT_ALLOW_COMMANDS", "DEFAULT_CONNECT_TIMEOUT_S",
           "DEFAULT_ENV_ALLOW", "DEFAULT_RETRIES", "DEFAULT_TIMEOUT_S", "SANDBOX_MODES",
           "STRATEGIES", "TOOL_FORMATS", "AgentSettings", "ModelSettings", "model_spec"]

#: Seconds of silence (no byte from the server) before a request times out. Local CPU models
#: spend minutes on a long prompt before their first token; a streamed reply is never cut
#: while tokens flow, however long it takes in total.
DEFAULT_TIMEOUT_S = 600.0
#: Seconds to open the connection (and the TLS handshake): a server that is not there is
#: known quickly, whatever the request timeout.
DEFAULT_CONNECT_TIMEOUT_S = 10.0
#: Retries of one model call, shared by the adapter and the agent loop (see retry_budget).
DEFAULT_RETRIES = 2

#: Programs `run_command` may start (`agent.allow_commands`). No shells, no `env`/`xargs`/`find`
#: (they run other programs), no `sed`/`tee` (they write files past the checkpoints). `python` is
#: here because tests need it, and it can run anything: the `execute` permission and the kernel
#: sandbox, not this list, are the trust boundary. A repository's list may only be narrower.
DEFAULT_ALLOW_COMMANDS: tuple[str, ...] = (
    "python", "python3", f"python3.{sys.version_info.minor}", "pytest", "git", "ls", "cat",
    "head", "tail", "wc", "grep", "rg", "diff", "echo", "pwd", "sort", "uniq", "true",
)
#: Environment variables a command inherits (`agent.env_allow`); secrets are filtered anyway.
DEFAULT_ENV_ALLOW: tuple[str, ...] = (
    "PATH", "HOME", "LANG", "LC_ALL", "TERM", "TMPDIR", "VIRTUAL_ENV",
)
SANDBOX_MODES = ("auto", "required", "off")
#: How the agent reads tool calls: the provider's `tool_calls` only, calls written in the reply's
#: text (tools described in the prompt), or native first and text when there is none.
TOOL_FORMATS = ("auto", "native", "text")
#: agent/strategy.py: the tool-calling loop or the pipeline, or `auto`: by the model.
STRATEGIES = ("auto", "loop", "pipeline")
_DAY_S = 86_400.0

#: The agent's settings. Keys of the `[agent]` table are dotted; `agent.deny` is the indexer's
#: (discovery honours it too), read here with the rest of the table.
AGENT_SETTINGS = Settings({
    # the model client (agent/models): `ask` and `agent run`
    "model": Setting("str", note="provider:model, e.g. openai:gpt-4o-mini"),
    "model_timeout_s": Setting("float", DEFAULT_TIMEOUT_S, above=0, hi=_DAY_S,
                               note="seconds of silence from the model server"),
    "model_connect_timeout_s": Setting("float", DEFAULT_CONNECT_TIMEOUT_S, above=0, hi=3600.0,
                                       note="seconds"),
    "model_retries": Setting("int", DEFAULT_RETRIES, lo=0, hi=20, note="retries of one model call"),
    "model_tokenizer": Setting("str", "auto",
                               note="auto, server, a tokenizer.json path or a tokenizer name"),
    # [agent]: the tools (agent/tools), the workspace (agent/workspace.py), the sandbox
    "agent.allow_commands": Setting("list", DEFAULT_ALLOW_COMMANDS, note="program names",
                                    weakens=adds("allows more programs")),
    "agent.git_write": Setting("bool", False,
                               weakens=turns_on("lets git commands change the repository")),
    "agent.env_allow": Setting("list", DEFAULT_ENV_ALLOW, note="variable names",
                               weakens=adds("passes more environment variables to commands")),
    "agent.command_timeout_s": Setting("float", 120.0, above=0, hi=_DAY_S, note="seconds"),
    "agent.test_timeout_s": Setting("float", 600.0, above=0, hi=_DAY_S, note="seconds"),
    "agent.max_output_bytes": Setting("int", 64_000, lo=1, hi=64_000_000,
                                      note="bytes per stream"),
    "agent.max_result_chars": Setting("int", 24_000, lo=1, hi=10_000_000, note="characters"),
    "agent.max_read_lines": Setting("int", 200, lo=1, hi=1_000_000, note="lines"),
    "agent.max_edit_bytes": Setting("int", 2_000_000, lo=1, hi=2**31 - 1, note="bytes"),
    "agent.test_command": Setting("list", (), note="the runner and its first arguments"),
    "agent.test_env": Setting("env", {}),
    "agent.test_select_hops": Setting("int", 4, lo=0, hi=32, note="reference hops"),
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
    # loop or pipeline (auto: by the model), and the model's context window when known
    # (0: unknown), which `auto` reads
    "agent.strategy": Setting("choice", "auto", choices=STRATEGIES),
    "agent.context_window": Setting("int", 0, lo=0, hi=10_000_000, note="tokens (0: unknown)"),
})
#: What the agent reads: its own settings and the indexer's (`agent.deny`).
_READ = INDEX_SETTINGS + AGENT_SETTINGS


def _default(key: str) -> Any:
    """The default of ``key`` in the type a checked value has (a list as a tuple)."""
    return _READ.check(key, _READ[key].default, "as the default")


@dataclass(frozen=True)
class AgentSettings:
    """The `[agent]` table, typed: the tools' limits and allowlists, the workspace's deny lists,
    the sandbox and the strategy."""

    allow_commands: tuple[str, ...] = _default("agent.allow_commands")
    #: Allow git subcommands that change the repository (commit, checkout, reset, push ...).
    git_write: bool = _default("agent.git_write")
    env_allow: tuple[str, ...] = _default("agent.env_allow")
    command_timeout_s: float = _default("agent.command_timeout_s")
    test_timeout_s: float = _default("agent.test_timeout_s")
    #: Per stream, for run_command and run_tests.
    max_output_bytes: int = _default("agent.max_output_bytes")
    #: Characters of one tool result shown to the model; the rest is cut with a marker.
    max_result_chars: int = _default("agent.max_result_chars")
    #: Most lines one read_span returns.
    max_read_lines: int = _default("agent.max_read_lines")
    #: Largest file edit/create_file/rename_symbol will rewrite.
    max_edit_bytes: int = _default("agent.max_edit_bytes")
    #: The test runner, before its arguments; empty means `<python> -m pytest`, where <python>
    #: is the workspace's `.venv/bin/python` if it has one, else the interpreter running repoctx.
    test_command: tuple[str, ...] = _default("agent.test_command")
    #: Extra environment variables for test runs (e.g. DJANGO_SETTINGS_MODULE); secrets are
    #: still filtered out.
    test_env: tuple[tuple[str, str], ...] = _default("agent.test_env")
    #: Reference-graph hops from a changed symbol to a test that reaches it.
    test_select_hops: int = _default("agent.test_select_hops")
    #: The kernel sandbox of run_command/run_tests (agent/sandbox.py): "auto" uses what the
    #: kernel offers and says once what it lacks, "required" refuses commands without Landlock,
    #: "off" runs them unconfined (allowlist and argument checks only).
    sandbox: str = _default("agent.sandbox")
    #: Let commands use the network (no network namespace, no Landlock TCP rules).
    network: bool = _default("agent.network")
    #: Extra paths commands may read / read and write (`~` expanded, relative to the root).
    sandbox_read: tuple[str, ...] = _default("agent.sandbox_read")
    sandbox_write: tuple[str, ...] = _default("agent.sandbox_write")
    #: Extra `$HOME`-relative secrets commands may not read (added to home_policy.HOME_SECRETS).
    sandbox_deny_read: tuple[str, ...] = _default("agent.sandbox_deny_read")
    #: Files the tools neither show nor change, and files they may read but not change, on top
    #: of the built-in lists (agent/workspace.py).
    deny: tuple[str, ...] = _default("agent.deny")
    write_deny: tuple[str, ...] = _default("agent.write_deny")
    #: How tool calls are read (TOOL_FORMATS).
    tool_format: str = _default("agent.tool_format")
    #: loop, pipeline or auto (agent/strategy.py).
    strategy: str = _default("agent.strategy")
    #: The model's context window in tokens when known; 0: unknown.
    context_window: int = _default("agent.context_window")

    @classmethod
    def from_config(cls, config: Config) -> AgentSettings:
        """The `[agent]` settings of ``config``, typed and range-checked (a Config made in code
        as load_config checks the files; a key the table does not know is an error)."""
        values = _READ.section(config, "agent")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})


@dataclass(frozen=True)
class ModelSettings:
    """The model client's time limits and retries, flags over the configuration."""

    timeout_s: float
    connect_timeout_s: float
    retries: int
    #: How prompts are counted (agent/models/prompt_tokens.py): auto, a tokenizer.json, a name.
    tokenizer: str = _default("model_tokenizer")

    @classmethod
    def resolve(
        cls,
        config: Config,
        timeout_s: float | None = None,
        connect_timeout_s: float | None = None,
        retries: int | None = None,
        tokenizer: str | None = None,
    ) -> ModelSettings:
        """Each flag given (not None) over the configuration's value, else the default."""

        def value(key: str) -> Any:
            return AGENT_SETTINGS.value(config, key)

        return cls(
            timeout_s if timeout_s is not None else value("model_timeout_s"),
            connect_timeout_s if connect_timeout_s is not None else value("model_connect_timeout_s"),
            retries if retries is not None else value("model_retries"),
            tokenizer or value("model_tokenizer"),
        )


def model_spec(flag: str | None, config: Config) -> str | None:
    """The model to use: the flag, else the `model` setting (the repository's config, then
    REPOCTX_MODEL, then the user's config file); None when neither names one."""
    if flag and flag.strip():
        return flag.strip()
    return AGENT_SETTINGS.value(config, "model")
