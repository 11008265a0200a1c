"""Typed errors raised by the agent's tools. The docstring is the message a user sees."""

from __future__ import annotations

from indexer import RepoctxError


class AgentError(RepoctxError):
    """The agent tool failed."""


class PathEscapeError(AgentError):
    """The path is outside the workspace — paths must stay inside the workspace root."""


class SecretPathError(AgentError):
    """The path matches the secrets deny list — to allow it, add `!<path>` to `agent.deny`."""


class LinkInPathError(PathEscapeError):
    """A link is on the path — nothing was read or written through it; use the real path."""


class ProtectedPathError(AgentError):
    """The path is repoctx's own configuration or index — the agent may not write it."""


class PathNotFoundError(AgentError):
    """No such file or directory in the workspace — list the directory to see what exists."""


class NotAFileError(AgentError):
    """The path is a directory or special file — pass the path of a regular file."""


class BinaryFileError(AgentError):
    """The file is binary — only text files can be read or edited this way."""


class CommandNotAllowedError(AgentError):
    """The command is not in the allowlist — extend `agent.allow_commands` to permit it."""


class InvalidCommandError(AgentError):
    """The command is empty or cannot be parsed — pass a program and its arguments."""


class CheckpointError(AgentError):
    """The checkpoint store cannot record this write — call `begin_step` before writing."""


class RollbackError(AgentError):
    """Some files could not be restored — fix the listed paths and run the undo again."""


class BudgetTooSmallError(AgentError):
    """The prompt budget is smaller than the fixed prompt needs — raise --budget."""

    def __init__(self, message: str, minimum: int) -> None:
        super().__init__(message)
        #: The smallest budget accepted, in the model's tokens.
        self.minimum = minimum
