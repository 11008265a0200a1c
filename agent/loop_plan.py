"""The loop's plan and project memory, and the two tools the model keeps them with: `update_plan`
(agent/plan.py: a step may be marked complete only with the evidence its kind needs) and
`remember` (agent/memory.py). Both go through the tool registry like every other tool —
validated, redacted, capped, traced — with handlers that act on this run's plan and memory; and
every traced tool call teaches them: facts for the memory, evidence for the plan, the plan
advanced or reopened by a test run.
"""

from __future__ import annotations

from typing import Any, Protocol

from indexer import Config

from .errors import AgentError
from .memory import REMEMBER, ProjectMemory, learned_facts
from .models.base import ToolCall
from .plan import UPDATE_PLAN, Evidence, Plan, after_tests, apply_update
from .run_result import FileStat
from .tools import Tool, ToolRegistry, ToolResult, fail, ok
from .trace import TestRecord


class PlanHost(Protocol):
    """What the keeper uses of the run it keeps the plan of (agent/loop.py `AgentRun`)."""

    config: Config
    run_id: str
    registry: ToolRegistry

    def emit(self, type: str, **fields: Any) -> dict[str, Any]: ...
    def changed(self) -> list[FileStat]: ...


class PlanKeeper:
    """The run's plan (None until made), the evidence its steps' completion needs, and the
    project memory."""

    def __init__(self, run: PlanHost, memory: ProjectMemory) -> None:
        self.run, self.memory = run, memory
        self.plan: Plan | None = None
        self.evidence = Evidence()  # what update_plan's `complete` needs (agent/plan.py)

    def tools(self) -> tuple[Tool, Tool]:
        """`update_plan` and `remember`, for the run's registry."""
        return (
            Tool(
                UPDATE_PLAN.name,
                UPDATE_PLAN.description,
                UPDATE_PLAN.parameters,
                "read",
                lambda ctx, args: self.own_tool(ctx.step, UPDATE_PLAN.name, args),
            ),
            Tool(
                REMEMBER.name,
                REMEMBER.description,
                REMEMBER.parameters,
                "read",
                lambda ctx, args: self.own_tool(ctx.step, REMEMBER.name, args),
            ),
        )

    def resume(self, plan: dict[str, Any] | None, events: list[dict[str, Any]]) -> None:
        """The plan and the evidence as a resumed run's trace left them."""
        self.plan = Plan.from_dict(plan) if plan else None
        self.evidence = Evidence.from_events(events, self.permission)

    def set_plan(self, plan: Plan, kind: str, reason: str, **extra: Any) -> None:
        self.plan = plan
        self.evidence.mark()
        self.run.emit(kind, plan=plan.to_dict(), reason=reason, **extra)

    def permission(self, name: str) -> str:
        tool = self.run.registry.get(name)
        return tool.permission if tool is not None else ""

    def own_tool(self, step: int, name: str, args: dict[str, Any]) -> ToolResult:
        """`update_plan` and `remember`: the loop's own tools (registered per run)."""
        run = self.run
        if name == REMEMBER.name:
            try:
                entry = self.memory.set(
                    str(args.get("key", "")), str(args.get("value", "")), "remember", run.run_id
                )
            except AgentError as exc:
                return fail(str(exc), bad_arguments=True)
            run.emit("memory", step=step, key=entry.key, value=entry.value, source="remember")
            return ok(f"Remembered {entry.key}.")
        changed = len(run.changed()) if args.get("complete") else 0
        change = (
            apply_update(self.plan, args, self.evidence, changed)
            if self.plan
            else "there is no plan yet"
        )
        if isinstance(change, str):
            return fail(f"update_plan: {change}.", bad_arguments=True)
        self.set_plan(change.plan, change.kind, change.reason, title=change.title)
        return ok("Plan updated:\n" + change.plan.render())

    def learn(
        self, step: int, call: ToolCall, result: ToolResult, record: TestRecord | None
    ) -> None:
        """What a traced call teaches: facts for the memory, evidence, and a test run's
        verdict on the plan."""
        run = self.run
        if result.ok:
            facts = learned_facts(call.name, call.arguments or {}, result.data, run.config.root)
            for key, value in facts.items():
                if key not in self.memory.entries or self.memory.entries[key].value != value:
                    self.memory.set(key, value, call.name, run.run_id)
                    run.emit("memory", step=step, key=key, value=value, source=call.name)
        self.evidence.note_call(step, call.name, self.permission(call.name), result.ok, result.data)
        if record is not None and self.plan is not None:
            for change in after_tests(self.plan, record.passed, list(record.failures)):
                self.set_plan(change.plan, change.kind, change.reason, title=change.title)
