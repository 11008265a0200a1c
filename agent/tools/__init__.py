"""Agent tools: one registry of narrow, typed tools with JSON schemas and permission levels.

    from agent.tools import ToolContext, default_registry

    registry = default_registry()
    ctx = ToolContext.create(load_config("."), granted={"read", "write"})  # cli.settings'
    result = registry.call("find_symbol", {"name": "Searcher"}, ctx)

See docs/tools.md.
"""

from __future__ import annotations

from ..settings import DEFAULT_ALLOW_COMMANDS, AgentSettings
from .changes import ChangedSymbol, changed_ranges, changed_symbols, run_originals
from .command_tools import COMMAND_TOOLS, FINISH, GIT_DIFF, GIT_READ_SUBCOMMANDS, RUN_COMMAND
from .core import (
    PERMISSIONS,
    Permission,
    Tool,
    ToolContext,
    ToolPermissionError,
    ToolRegistry,
    ToolResult,
    fail,
    new_run_id,
    ok,
)
from .edit_tools import CREATE_FILE, EDIT, EDIT_TOOLS
from .read_tools import (
    FIND_REFERENCES,
    FIND_SYMBOL,
    LIST_DIR,
    READ_SPAN,
    READ_TOOLS,
    SEARCH_CODE,
)
from .rename import RENAME_SYMBOL
from .session import ReindexReport, ToolSession
from .syntax import SyntaxIssue, introduced_issues, syntax_issues
from .testing import RUN_TESTS, Failure, select_tests

ALL_TOOLS: tuple[Tool, ...] = (
    *READ_TOOLS,
    *EDIT_TOOLS,
    RENAME_SYMBOL,
    RUN_TESTS,
    *COMMAND_TOOLS,
)


def default_registry() -> ToolRegistry:
    """A registry of every built-in tool."""
    return ToolRegistry(ALL_TOOLS)


__all__ = [
    "ALL_TOOLS",
    "COMMAND_TOOLS",
    "CREATE_FILE",
    "DEFAULT_ALLOW_COMMANDS",
    "EDIT",
    "EDIT_TOOLS",
    "FIND_REFERENCES",
    "FIND_SYMBOL",
    "FINISH",
    "GIT_DIFF",
    "GIT_READ_SUBCOMMANDS",
    "LIST_DIR",
    "PERMISSIONS",
    "READ_SPAN",
    "READ_TOOLS",
    "RENAME_SYMBOL",
    "RUN_COMMAND",
    "RUN_TESTS",
    "SEARCH_CODE",
    "AgentSettings",
    "ChangedSymbol",
    "Failure",
    "Permission",
    "ReindexReport",
    "SyntaxIssue",
    "Tool",
    "ToolContext",
    "ToolPermissionError",
    "ToolRegistry",
    "ToolResult",
    "ToolSession",
    "changed_ranges",
    "changed_symbols",
    "default_registry",
    "fail",
    "introduced_issues",
    "new_run_id",
    "ok",
    "run_originals",
    "select_tests",
    "syntax_issues",
]
