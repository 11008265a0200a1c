"""Run traces: every run appends events to `<index_dir>/runs/<run_id>.jsonl` (the first line
names the format), enough to replay it readably (`agent.replay`), resume it, and summarise
what it changed (`agent.run_result`). This module writes, reads and resumes them.

Event types: header, instructions, plan, plan_revision, plan_progress, context, model_call,
model_error, tool_call, notice, memory, checkpoint, step, interrupted, resume, end, undo, commit.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import AgentError, PathNotFoundError
from .models.base import Message, ToolCall
from .safe_fs import Beneath

TRACE_FORMAT = 1
RUNS_DIR = "runs"
_TEST_SUMMARY = re.compile(r"(PASSED|FAILED|TIMED OUT) — ")
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class TraceError(AgentError):
    """The run's trace cannot be found or read — see the runs with `repoctx agent replay --list`."""


# -- writing and reading -------------------------------------------------------------------------


def runs_dir(index_dir: Path) -> Path:
    return Path(index_dir) / RUNS_DIR


def trace_path(index_dir: Path, run_id: str) -> Path:
    return runs_dir(index_dir) / f"{run_id}.jsonl"


class TraceWriter:
    """Appends one JSON object per line, flushed at once, so an interrupted or crashed run still
    leaves a readable trace."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        # A trace is `<index_dir>/runs/<run_id>.jsonl` (trace_path). The index directory may be
        # a link a cloned repository shipped (or hold one at `runs`), or one a command made
        # before it existed, and the run is refused for it after this file is opened: so the
        # file is reached from the index directory's parent with no link followed.
        rel = "/".join(self.path.parts[-3:])
        with Beneath(self.path.parent.parent.parent) as base, base.parent(rel, create=True) as (
            dfd,
            name,
        ):
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                fd = os.open(name, flags, 0o644, dir_fd=dfd)
            except OSError as exc:
                raise base.error(exc, rel, "written") from exc
        self._fh = os.fdopen(fd, "a", encoding="utf-8")

    def write(self, type: str, **fields: Any) -> dict[str, Any]:
        event = {"type": type, "t": round(time.time(), 3), **fields}
        self._fh.write(json.dumps(event, ensure_ascii=False, default=_json_default) + "\n")
        self._fh.flush()
        return event

    def close(self) -> None:
        self._fh.close()


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    return str(obj)


def read_trace(path: Path) -> list[dict[str, Any]]:
    """The events of a trace; a last line cut short by a crash is skipped."""
    path = Path(path)
    try:
        # Reached as TraceWriter reaches it, with no link followed, and read only when it is a
        # regular file (opened non-blocking): a repository can ship `.repoctx/runs/<id>.jsonl`
        # as a FIFO, which blocked `agent replay last` for ever, or as a link into $HOME.
        with Beneath(path.parent.parent.parent) as base:
            data = base.read_bytes("/".join(path.parts[-3:]))
    except (FileNotFoundError, PathNotFoundError) as exc:
        raise TraceError(
            f"No trace at {path} — check the run id (`repoctx agent replay --list`)."
        ) from exc
    # Events end at "\n" only: splitlines() would also cut at a U+2028 or NEL that
    # json.dumps(ensure_ascii=False) leaves raw inside a string (a file name, an output).
    lines = data.decode("utf-8").removesuffix("\n").split("\n")
    events = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if i == len(lines) - 1:
                break
            raise TraceError(
                f"{path}:{i + 1} is not valid JSON ({exc}) — the trace is damaged."
            ) from exc
    if not events or events[0].get("type") != "header":
        raise TraceError(
            f"{path} does not start with a trace header — it is not a repoctx run trace."
        )
    if events[0].get("format") != TRACE_FORMAT:
        raise TraceError(
            f"{path} has trace format {events[0].get('format')}; this repoctx reads format "
            f"{TRACE_FORMAT} — replay it with the repoctx version that wrote it."
        )
    return events


def list_runs(index_dir: Path) -> list[str]:
    """Run ids with a trace, oldest first (ids start with their UTC start time)."""
    d = runs_dir(index_dir)
    if not d.is_dir():
        return []
    return sorted(p.stem for p in d.glob("*.jsonl") if _RUN_ID.match(p.stem))


def resolve_run(index_dir: Path, ref: str) -> str:
    """A run id from an exact id, a unique prefix, or `last`."""
    runs = list_runs(index_dir)
    if not runs:
        raise TraceError(
            f"No agent runs under {runs_dir(index_dir)} — start one with `repoctx agent run`."
        )
    if ref in ("last", "latest"):
        return runs[-1]
    if ref in runs:
        return ref
    hits = [r for r in runs if r.startswith(ref)]
    if len(hits) == 1:
        return hits[0]
    if hits:
        raise TraceError(f"Run id {ref!r} is ambiguous ({', '.join(hits[:5])}) — give more of it.")
    raise TraceError(
        f"No run {ref!r} under {runs_dir(index_dir)} — see `repoctx agent replay --list`."
    )


# -- messages in the trace -----------------------------------------------------------------------


def message_to_dict(m: Message) -> dict[str, Any]:
    d: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        d["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.raw_arguments} for c in m.tool_calls
        ]
    if m.tool_call_id:
        d["tool_call_id"] = m.tool_call_id
    if m.name:
        d["name"] = m.name
    return d


def message_from_dict(d: Mapping[str, Any]) -> Message:
    calls = tuple(
        ToolCall.from_raw(c["id"], c["name"], c.get("arguments") or "")
        for c in d.get("tool_calls", ())
    )
    return Message(d["role"], d.get("content", ""), calls, d.get("tool_call_id"), d.get("name"))


# -- resuming ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResumeState:
    run_id: str
    task: str
    plan: dict[str, Any] | None
    next_step: int
    history: tuple[str, ...]
    observation: tuple[Message, ...]
    usage: dict[str, Any]
    model_calls: int
    ended: dict[str, Any] | None = None


def resume_state(events: list[dict[str, Any]]) -> ResumeState:
    """Where a run stands after its last completed step."""
    header = events[0]
    plan = None
    history: list[str] = []
    observation: tuple[Message, ...] = ()
    next_step = 1
    usage: dict[str, Any] = {
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "total_tokens": 0,
        "cached_tokens": 0,
    }
    sources: set[str] = set()
    calls = 0
    ended = None
    for e in events:
        kind = e["type"]
        if kind in ("plan", "plan_revision", "plan_progress"):
            plan = e["plan"]
        elif kind == "step":
            history.append(e["summary"])
            observation = tuple(message_from_dict(m) for m in e.get("observation", ()))
            next_step = e["step"] + 1
        elif kind == "model_call":
            calls += 1
            for k in usage:
                usage[k] += int((e.get("usage") or {}).get(k, 0))
            sources.add(str((e.get("usage") or {}).get("cache_source", "")))
        elif kind == "end":
            ended = e
        elif kind == "resume":
            ended = None
    sources.discard("")
    usage["cache_source"] = (
        "" if not sources else "server" if sources == {"server"} else "estimate"
    )
    return ResumeState(
        header["run_id"],
        header["task"],
        plan,
        next_step,
        tuple(history),
        observation,
        usage,
        calls,
        ended,
    )


# -- step records --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TestRecord:
    step: int
    passed: bool | None
    summary: str
    failures: tuple[str, ...] = ()

    __test__ = False  # not a pytest test class


def clip(text: str, n: int) -> str:
    """``text`` on one line, cut to ``n`` characters with an ellipsis."""
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def canonical_arguments(call: ToolCall) -> str:
    if call.arguments is None:
        return call.raw_arguments
    return json.dumps(call.arguments, sort_keys=True, ensure_ascii=False)


#: Arguments that say what a call was about, in a history line (first found wins).
_ABOUT = ("path", "name", "symbol", "query", "pattern", "command", "tests", "reason", "summary")


def step_summary(step: int, results: Iterable[tuple[ToolCall, Any]]) -> str:
    """One history line: each call, what it was about, and the first line of its result. In
    words, not in the form of a call: a small model shown `edit({...}) -> ok` lines copied
    them as its next reply (issue 39)."""
    parts = []
    for call, r in results:
        head = (r.output if r.ok else f"error: {r.error}") or ""
        args = call.arguments or {}
        about = next((args[k] for k in _ABOUT if args.get(k) not in (None, "", [])), "")
        about = clip(" ".join(map(str, about)) if isinstance(about, list) else str(about), 60)
        parts.append(
            f"{call.name}{' ' + about if about else ''} — "
            f"{'ok' if r.ok else 'failed'}: {clip(head.splitlines()[0] if head else '', 100)}"
        )
    return f"step {step}: " + "; ".join(parts)


def checkpoint_files(store_dir: Path, run_id: str, step: int) -> list[str]:
    """Files recorded in a step's checkpoint (layout in agent/checkpoints.py)."""
    manifest = Path(store_dir) / run_id / f"{step:08d}" / "manifest.json"
    if not manifest.is_file():
        return []
    return [e["path"] for e in json.loads(manifest.read_text(encoding="utf-8"))["entries"]]


def tests_from(events: Iterable[dict[str, Any]]) -> list[TestRecord]:
    return [
        TestRecord(e["step"], e["data"].get("passed"), e["tests_summary"], tuple(e["failing"]))
        for e in events
        if e["type"] == "tool_call" and "tests_summary" in e
    ]


def record_tests(step: int, output: str, data: Mapping[str, Any]) -> TestRecord:
    failing = [f["test_id"] for r in data.get("runs") or () for f in r.get("failures", ())]
    summary = next(
        (ln.strip() for ln in reversed(output.splitlines()) if _TEST_SUMMARY.search(ln)),
        "no tests ran",
    )
    return TestRecord(step, data.get("passed"), summary, tuple(failing[:20]))
