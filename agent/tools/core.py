"""The tool registry: typed tools with JSON schemas, permission levels, and results that are
always values, never exceptions, so a model can read what went wrong and try again."""

from __future__ import annotations

import difflib
import json
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from indexer import Config, Index, RepoctxError, StoreError, damaged, is_damage

from ..checkpoints import CheckpointStore
from ..errors import AgentError, CheckpointError
from ..models.base import ToolCall, ToolSpec
from ..redact import redact_counted, redact_value
from ..settings import AgentSettings
from ..workspace import Workspace
from .schema import check_schema, drop_null_optionals, validate, with_defaults
from .session import ToolSession

Permission = Literal["read", "write", "execute"]
PERMISSIONS: tuple[Permission, ...] = ("read", "write", "execute")


class ToolPermissionError(AgentError):
    """The run does not grant this tool's permission — rerun with it granted (`--yes`)."""


@dataclass(frozen=True)
class ToolResult:
    """What a tool call produced. ``output`` is the text for the model; ``error`` says what went
    wrong and what to do instead (None when ``ok``); ``data`` holds the same facts as JSON-able
    values for programs (the agent loop, the MCP server, tests)."""

    ok: bool
    output: str = ""
    error: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        """The message to send back to the model."""
        if self.ok:
            return self.output
        return f"Error: {self.error}" + (f"\n\n{self.output}" if self.output else "")


def ok(output: str, **data: Any) -> ToolResult:
    return ToolResult(True, output, None, data)


def fail(error: str, output: str = "", **data: Any) -> ToolResult:
    return ToolResult(False, output, error, data)


Handler = Callable[["ToolContext", dict[str, Any]], ToolResult]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    #: JSON schema of the arguments object (the subset in agent/tools/schema.py).
    parameters: dict[str, Any]
    permission: Permission
    handler: Handler
    #: One line for the confirmation prompt, from the (validated) arguments.
    describe: Callable[[dict[str, Any]], str] | None = None

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)


@dataclass(frozen=True)
class ToolContext:
    """Everything a tool call may use. Make one per step with ``dataclasses.replace(ctx, step=n)``;
    the ``session`` (the index, embedder) is carried over."""

    workspace: Workspace
    config: Config
    #: Permission levels granted without asking.
    granted: frozenset[str] = frozenset({"read"})
    #: Asked before a write or execute tool runs when its level is not granted (interactive
    #: terminals); None means such calls are refused.
    confirm: Callable[[str], bool] | None = None
    #: Where every write is recorded before it happens; write tools refuse to run without one.
    checkpoints: CheckpointStore | None = None
    run_id: str = "run"
    step: int = 0
    settings: AgentSettings | None = None
    session: ToolSession = field(default_factory=ToolSession)

    def __post_init__(self) -> None:
        granted = frozenset(self.granted)
        unknown = granted - set(PERMISSIONS)
        if unknown:
            raise ValueError(f"unknown permission levels {sorted(unknown)}; use {PERMISSIONS}")
        object.__setattr__(self, "granted", granted)
        if self.settings is None:
            object.__setattr__(self, "settings", AgentSettings.from_config(self.config))

    @classmethod
    def create(
        cls,
        config: Config,
        *,
        granted: Iterable[str] = ("read",),
        confirm: Callable[[str], bool] | None = None,
        run_id: str | None = None,
        checkpoints: CheckpointStore | None = None,
        step: int = 0,
    ) -> ToolContext:
        """A context over ``config.root`` with the configured deny lists and a checkpoint store
        under the index directory (`.repoctx/checkpoints`), which no tool may write."""
        store = checkpoints or CheckpointStore(config.index_path / "checkpoints", config.root)
        return cls(
            Workspace.from_config(config, recorder=store),
            config,
            frozenset(granted),
            confirm,
            store,
            run_id or new_run_id(),
            step,
        )

    @property
    def index(self) -> Index:
        """The repository's index, reading its current generation (the session's handle)."""
        return self.session.index(self.config)

    @property
    def agent(self) -> AgentSettings:
        assert self.settings is not None
        return self.settings

    def write_bytes(self, path: str | Path, data: bytes) -> Path:
        """Write through the workspace after checkpointing the file's current state."""
        store = self.checkpoints
        if store is None:
            raise CheckpointError(
                "No checkpoint store in this run — writes must be undoable; create the context "
                "with ToolContext.create or pass checkpoints=CheckpointStore(...)."
            )
        active = store.active
        if active is None or (active.run_id, active.step) != (self.run_id, self.step):
            store.begin_step(self.run_id, self.step)
        real = self.workspace.check_writable(path)
        store.record_before_write(real)
        return self.workspace.write_bytes(real, data)


def new_run_id() -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    return f"{stamp}-{uuid.uuid4().hex[:6]}"


def error_message(exc: BaseException) -> str:
    text = str(exc).strip()
    if text:
        return text
    doc = (type(exc).__doc__ or "").strip()
    return doc or type(exc).__name__


class ToolRegistry:
    """Tools by name. ``call`` validates, checks permission, runs, turns every anticipated
    failure into a ToolResult, and redacts secrets from what it returns."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        if tool.permission not in PERMISSIONS:
            raise ValueError(f"{tool.name}: permission must be one of {PERMISSIONS}")
        if tool.parameters.get("type") != "object":
            raise ValueError(f"{tool.name}: parameters must be an object schema")
        check_schema(tool.parameters, tool.name)
        self._tools[tool.name] = tool

    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def with_tools(self, *tools: Tool) -> ToolRegistry:
        """A new registry with these tools and ``tools`` (e.g. a run's own tools, whose handlers
        hold the run's state)."""
        return ToolRegistry([*self._tools.values(), *tools])

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def specs(self, permissions: Iterable[str] | None = None) -> list[ToolSpec]:
        """ToolSpecs for the model; with ``permissions``, only tools at those levels."""
        allowed = set(permissions) if permissions is not None else set(PERMISSIONS)
        return [t.spec() for t in self._tools.values() if t.permission in allowed]

    def call_tool(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        """Run a model's ToolCall (malformed arguments come back as an error result that
        quotes them: small models copy an example in a correction, not fix their own call)."""
        error = call.error
        if error is not None and call.raw_arguments.strip():
            sent = " ".join(call.raw_arguments.split())
            error += f" (you sent: {sent if len(sent) <= 160 else sent[:159] + '…'})"
        return self.call(call.name, call.arguments, ctx, error=error)

    def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        ctx: ToolContext,
        *,
        error: str | None = None,
    ) -> ToolResult:
        # The one way out of the tools (the agent loop and the MCP server both call here):
        # secrets are redacted before the cap, so a cut never splits a token past detection.
        result = self._run(name, arguments, ctx, error)
        return _capped(redacted(result), ctx.agent.max_result_chars)

    def _run(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        ctx: ToolContext,
        error: str | None,
    ) -> ToolResult:
        tool = self._tools.get(name) if isinstance(name, str) else None
        if tool is None:
            close = difflib.get_close_matches(str(name), self._tools, n=1)
            hint = f" Did you mean `{close[0]}`?" if close else ""
            return fail(
                f"Unknown tool `{name}`.{hint} Available tools: {', '.join(self._tools)}.",
                unknown_tool=str(name),
            )
        if error is not None or arguments is None:
            why = error or "arguments are missing"
            return fail(
                f"Could not read the arguments of `{name}`: {why}. Send one JSON object, "
                f"for example {_example(tool)}.",
                bad_arguments=True,
            )
        if not isinstance(arguments, Mapping):
            return fail(
                f"The arguments of `{name}` must be a JSON object, got "
                f"{type(arguments).__name__}. For example {_example(tool)}.",
                bad_arguments=True,
            )
        args = drop_null_optionals(dict(arguments), tool.parameters)
        problems = validate(args, tool.parameters)
        if problems:
            return fail(
                f"Invalid arguments for `{name}`: " + "; ".join(problems) + ".",
                _signature(tool),
                bad_arguments=True,
                problems=problems,
            )
        args = with_defaults(args, tool.parameters)
        refused = _authorize(tool, args, ctx)
        if refused is not None:
            return refused
        try:
            return tool.handler(ctx, args)
        except (RepoctxError, OSError, StoreError, UnicodeError) as exc:
            if is_damage(exc):
                # SQLite's "database disk image is malformed" names no way out: say the repair.
                exc = damaged(ctx.config.index_path, exc)
            return fail(error_message(exc), exception=type(exc).__name__)


def redacted(result: ToolResult) -> ToolResult:
    """``result`` with every token, key and password in its output, error and data replaced by
    ``[REDACTED:<kind>]`` (agent/redact.py); ``data["secrets_redacted"]`` counts them."""
    output, n_out = redact_counted(result.output)
    error, n_err = redact_counted(result.error) if result.error else (result.error, 0)
    data, n_data = redact_value(result.data)
    total = n_out + n_err + n_data
    if not total:
        return result
    return ToolResult(result.ok, output, error, {**data, "secrets_redacted": total})


def _authorize(tool: Tool, args: dict[str, Any], ctx: ToolContext) -> ToolResult | None:
    if tool.permission in ctx.granted:
        return None
    what = tool.describe(args) if tool.describe else tool.name
    if ctx.confirm is not None:
        if ctx.confirm(f"{tool.name} ({tool.permission}): {what}"):
            return None
        return fail(
            f"The user declined `{tool.name}` ({what}). Do not retry the same call; choose "
            "another approach or call `finish` explaining what you need.",
            declined=True,
            permission=tool.permission,
        )
    return fail(
        error_message(
            ToolPermissionError(
                f"`{tool.name}` needs the `{tool.permission}` permission, which this run does "
                f"not grant (granted: {', '.join(sorted(ctx.granted)) or 'none'}). Use the "
                "read tools, or ask the user to rerun with the permission granted (`--yes`)."
            )
        ),
        refused=True,
        permission=tool.permission,
    )


def _capped(result: ToolResult, limit: int) -> ToolResult:
    if len(result.output) <= limit:
        return result
    head = result.output[: limit * 3 // 4]
    tail = result.output[-limit // 4 :]
    cut = len(result.output) - len(head) - len(tail)
    text = f"{head}\n[... {cut} characters cut; narrow the request to see them ...]\n{tail}"
    return ToolResult(result.ok, text, result.error, {**result.data, "output_truncated": True})


def _signature(tool: Tool) -> str:
    props = tool.parameters.get("properties", {})
    required = set(tool.parameters.get("required", ()))
    parts = []
    for key, sub in props.items():
        kind = sub.get("type", "any")
        kind = "|".join(kind) if isinstance(kind, list) else kind
        if "enum" in sub:
            kind = "|".join(repr(e) for e in sub["enum"])
        parts.append(f"  {key}: {kind}{'' if key in required else ' (optional)'}")
    return f"`{tool.name}` takes:\n" + "\n".join(parts)


def _example(tool: Tool) -> str:
    props = tool.parameters.get("properties", {})
    sample: dict[str, Any] = {}
    for key in tool.parameters.get("required", ()):
        kind = props.get(key, {}).get("type", "string")
        kind = kind[0] if isinstance(kind, list) else kind
        sample[key] = {"string": "...", "integer": 1, "number": 1, "boolean": True}.get(kind, [])
    return json.dumps(sample)
