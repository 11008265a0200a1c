"""Run traces: every run appends events to `<index_dir>/runs/<run_id>.jsonl` (the first line
names the format), enough to replay it readably, resume it, and summarise what it changed.

Event types: header, instructions, plan, plan_revision, plan_progress, context, model_call,
model_error, tool_call, notice, memory, checkpoint, step, interrupted, resume, end, undo, commit.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from indexer.gitsafe import git_env

from .errors import AgentError
from .models.base import Message, ToolCall

TRACE_FORMAT = 1
RUNS_DIR = "runs"
_TEST_SUMMARY = re.compile(r"(PASSED|FAILED|TIMED OUT) — ")
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class TraceError(AgentError):
    """The run's trace cannot be found or read — see the runs with `repoctx agent replay --list`."""


class CommitError(AgentError):
    """The run's changes could not be committed — the files are changed but not committed; commit
    them yourself or undo the run."""


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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

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
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError as exc:
        raise TraceError(
            f"No trace at {path} — check the run id (`repoctx agent replay --list`)."
        ) from exc
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
    usage: dict[str, int]
    model_calls: int
    ended: dict[str, Any] | None = None


def resume_state(events: list[dict[str, Any]]) -> ResumeState:
    """Where a run stands after its last completed step."""
    header = events[0]
    plan = None
    history: list[str] = []
    observation: tuple[Message, ...] = ()
    next_step = 1
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
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
        elif kind == "end":
            ended = e
        elif kind == "resume":
            ended = None
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


# -- summary -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileStat:
    path: str
    added: int
    removed: int
    status: str  # modified | created | deleted | unchanged


@dataclass(frozen=True)
class TestRecord:
    step: int
    passed: bool | None
    summary: str
    failures: tuple[str, ...] = ()

    __test__ = False  # not a pytest test class


def diff_stats(root: Path, originals: Mapping[str, bytes | None]) -> list[FileStat]:
    """Lines added and removed per file since the run started (originals from the checkpoints)."""
    out = []
    for abspath, old in sorted(originals.items()):
        path = Path(abspath)
        rel = os.path.relpath(path, root)
        new = path.read_bytes() if path.is_file() else None
        if old == new:
            continue
        a = (old or b"").decode("utf-8", "replace").splitlines()
        b = (new or b"").decode("utf-8", "replace").splitlines()
        added = removed = 0
        for line in difflib.unified_diff(a, b, lineterm="", n=0):
            if line.startswith("+") and not line.startswith("+++"):
                added += 1
            elif line.startswith("-") and not line.startswith("---"):
                removed += 1
        status = "created" if old is None else "deleted" if new is None else "modified"
        out.append(FileStat(Path(rel).as_posix(), added, removed, status))
    return out


def git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """git in ``root`` with the user's own environment (identity), but nothing the repository
    configures runs: no hooks, fsmonitor, filters or external diff (indexer.gitsafe)."""
    try:
        return subprocess.run(
            ["git", *args],
            cwd=root,
            capture_output=True,
            text=True,
            check=check,
            timeout=120,
            env=git_env(root, read_only=False),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        raise CommitError(f"git {' '.join(args[:2])} failed: {detail.strip()[:500]}") from exc


def git_stat(root: Path, paths: Iterable[str]) -> str:
    """`git diff --stat` of ``paths`` against HEAD; '' outside a git repository."""
    paths = list(paths)
    if not paths or not (root / ".git").exists():
        return ""
    res = git(root, "diff", "--stat", "--no-color", "HEAD", "--", *paths, check=False)
    return res.stdout.rstrip() if res.returncode == 0 else ""


def branch_name(run_id: str, task: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", task.lower()).strip("-")[:40].rstrip("-") or "task"
    return f"repoctx/{run_id}-{slug}"


@dataclass(frozen=True)
class CommitResult:
    branch: str
    commit: str
    message: str


def commit_run(
    root: Path, run_id: str, task: str, summary: str, paths: list[str], tests: list[TestRecord]
) -> CommitResult:
    """Commit the run's files (only those) on a new branch `repoctx/<run-id>-<slug>`. Never pushes."""
    if not (root / ".git").exists():
        raise CommitError(f"{root} is not a git repository — --commit needs one.")
    branch = branch_name(run_id, task)
    title = " ".join(task.split())
    title = title if len(title) <= 68 else title[:67] + "…"
    body = [summary.strip() or "(no summary)", "", "Files:"] + [f"  {p}" for p in paths]
    if tests:
        body += ["", f"Tests: {tests[-1].summary}"]
    body += ["", f"Run: {run_id} (repoctx agent replay {run_id})"]
    message = f"repoctx: {title}\n\n" + "\n".join(body) + "\n"
    git(root, "switch", "-q", "-c", branch)
    git(root, "add", "-A", "--", *paths)
    git(root, "commit", "-q", "-m", message)
    sha = git(root, "rev-parse", "HEAD").stdout.strip()
    return CommitResult(branch, sha, message)


# -- replay --------------------------------------------------------------------------------------


def render_trace(events: list[dict[str, Any]], *, full: bool = False) -> str:
    """A run, readably: header, plan and revisions, each step's context, model call and tool
    calls, and the end summary. ``full`` shows whole tool outputs instead of their first lines."""
    out: list[str] = []
    limit = None if full else 6
    for e in events:
        kind = e["type"]
        if kind == "header":
            out.append(f"Run {e['run_id']} — model {e.get('model', '?')}")
            out.append(f"Task: {e['task']}")
            out.append(
                f"Granted: {', '.join(e.get('granted', ()))}; limits: {_kv(e.get('limits', {}))}"
            )
        elif kind == "instructions" and e.get("files"):
            out.append(
                f"Project instructions: {', '.join(e['files'])} ({e.get('tokens', 0)} tokens)"
            )
        elif kind == "plan":
            out.append(
                f"Plan ({e['plan'].get('source')}){': ' + e['reason'] if e.get('reason') else ''}"
            )
            out.append(_indent(_plan_text(e["plan"]), 2))
        elif kind == "plan_revision":
            out.append(f"  plan revised (revision {e['plan']['revision']}): {e['reason']}")
            out.append(_indent(_plan_text(e["plan"]), 4))
        elif kind == "plan_progress":
            out.append(f"  plan step done: {e.get('title', '')} ({e.get('reason', '')})")
        elif kind == "context":
            secs = ", ".join(f"{k} {v}" for k, v in e.get("sections", {}).items())
            out.append(
                f"\nstep {e['step']}: prompt ~{e['prompt_tokens']:,}/{e['budget']:,} tokens "
                f"({secs}); {len(e.get('items', ()))} code items in {e.get('ms', 0):.0f} ms"
            )
            for item in e.get("items", ())[: (None if full else 5)]:
                out.append(
                    f"    {item['path']}:{item['lines']} {item['kind']} {item['tokens']} tok — {item['reason']}"
                )
        elif kind == "model_call":
            u = e.get("usage") or {}
            out.append(
                f"  model ({e.get('purpose')}) {e.get('latency_s', 0):.2f} s, "
                f"{u.get('prompt_tokens', 0)}+{u.get('completion_tokens', 0)} tokens"
                + (f": {_first(e['content'], 2)}" if e.get("content", "").strip() else "")
            )
        elif kind == "model_error":
            out.append(f"  model error ({e['kind']}, attempt {e.get('attempt')}): {e['message']}")
        elif kind == "tool_call":
            state = "ok" if e["ok"] else f"FAILED [{e.get('kind')}]"
            out.append(
                f"  > {e['name']} {_clip(e.get('arguments', ''), 160)}  — {state} ({e.get('seconds', 0):.2f} s)"
            )
            text = e.get("output", "") if e["ok"] else f"{e.get('error')}\n{e.get('output', '')}"
            out.append(_indent(_first(text, limit), 6))
        elif kind in ("notice", "memory"):
            what = e.get("message") or f"{e.get('key')} = {e.get('value')}"
            out.append(f"  [{kind}{': ' + e['kind'] if e.get('kind') else ''}] {what}")
        elif kind == "checkpoint":
            out.append(f"  checkpoint: {', '.join(e['files'])}")
        elif kind == "interrupted":
            out.append(
                f"\nInterrupted before step {e['next_step']} — resume with `repoctx agent run --resume {events[0]['run_id']}`"
            )
        elif kind == "resume":
            out.append(f"\nResumed at step {e['next_step']}")
        elif kind == "end":
            out.append(f"\nEnd: {e['status']} — {e['reason']}: {e.get('message', '')}")
            out.append(_indent(render_summary(e.get("summary", {})), 2))
        elif kind in ("undo", "commit"):
            out.append(f"{kind}: {_kv({k: v for k, v in e.items() if k not in ('type', 't')})}")
    return "\n".join(out)


def render_summary(s: Mapping[str, Any]) -> str:
    lines = []
    if s.get("final"):
        lines.append(f"Summary: {s['final']}")
    changed = s.get("changed") or []
    lines.append(
        "Changed: "
        + (
            ", ".join(
                f"{c['path']} (+{c['added']} -{c['removed']}{', ' + c['status'] if c['status'] != 'modified' else ''})"
                for c in changed
            )
            or "nothing"
        )
    )
    if s.get("git_stat"):
        lines.append(_indent(s["git_stat"], 2))
    for t in s.get("tests") or []:
        lines.append(f"Tests (step {t['step']}): {t['summary']}")
    u = s.get("usage") or {}
    lines.append(
        f"Steps {s.get('steps', 0)}, model calls {s.get('model_calls', 0)}, tokens "
        f"{u.get('total_tokens', 0):,} ({u.get('prompt_tokens', 0):,} prompt), "
        f"time {s.get('elapsed_s', 0):.1f} s"
    )
    return "\n".join(lines)


def _plan_text(plan: Mapping[str, Any]) -> str:
    cur = plan.get("current")
    lines = []
    for i, s in enumerate(plan.get("steps", ())):
        mark = "x" if s.get("status") == "done" else (">" if i == cur else " ")
        crit = f" — done when: {s['done_when']}" if s.get("done_when") else ""
        lines.append(f"[{mark}] {i + 1}. {s['title']}{crit}")
    return "\n".join(lines)


def _kv(d: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items())


def _first(text: str, n: int | None) -> str:
    lines = (text or "").strip().splitlines()
    if n is None or len(lines) <= n:
        return "\n".join(lines)
    return "\n".join(lines[:n] + [f"... ({len(lines) - n} more lines)"])


def _clip(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _indent(text: str, n: int) -> str:
    pad = " " * n
    return "\n".join(pad + line for line in text.splitlines())


# -- step records --------------------------------------------------------------------------------


def canonical_arguments(call: ToolCall) -> str:
    if call.arguments is None:
        return call.raw_arguments
    return json.dumps(call.arguments, sort_keys=True, ensure_ascii=False)


def step_summary(step: int, results: Iterable[tuple[ToolCall, Any]]) -> str:
    """One history line: each call, and the first line of its result."""
    parts = []
    for call, r in results:
        head = (r.output if r.ok else f"error: {r.error}") or ""
        parts.append(
            f"{call.name}({_clip(canonical_arguments(call), 80)}) -> "
            f"{'ok' if r.ok else 'FAILED'}: {_clip(head.splitlines()[0] if head else '', 100)}"
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
