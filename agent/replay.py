"""A run's trace, readably (`repoctx agent replay`): header, plan and revisions, each step's
context, model call and tool calls, and the end summary."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from indexer import shown

from .trace import clip as _clip


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
                    f"    {shown(item['path'])}:{item['lines']} {item['kind']} {item['tokens']} tok — "
                    + shown(str(item["reason"]))
                )
        elif kind == "model_call":
            u = e.get("usage") or {}
            out.append(
                f"  model ({e.get('purpose')}) {e.get('latency_s', 0):.2f} s, "
                f"{u.get('prompt_tokens', 0)}+{u.get('completion_tokens', 0)} tokens"
                + _cache(u)
                + (f": {_first(e['content'], 2)}" if e.get("content", "").strip() else "")
            )
        elif kind == "model_error":
            out.append(f"  model error ({e['kind']}, attempt {e.get('attempt')}): {e['message']}")
        elif kind == "tool_call":
            state = "ok" if e["ok"] else f"FAILED [{e.get('kind')}]"
            out.append(
                f"  > {shown(e['name'])} {shown(_clip(e.get('arguments', ''), 160))}  — {state} "
                f"({e.get('seconds', 0):.2f} s)"
            )
            text = e.get("output", "") if e["ok"] else f"{e.get('error')}\n{e.get('output', '')}"
            out.append(_indent(_first(text, limit), 6))
        elif kind in ("notice", "memory"):
            what = e.get("message") or f"{e.get('key')} = {e.get('value')}"
            out.append(f"  [{kind}{': ' + e['kind'] if e.get('kind') else ''}] {what}")
        elif kind == "checkpoint":
            out.append(f"  checkpoint: {shown(', '.join(e['files']))}")
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
                f"{shown(c['path'])} (+{c['added']} -{c['removed']}"
                f"{', ' + c['status'] if c['status'] != 'modified' else ''})"
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
    if u.get("cache_source"):
        prompt, reused = int(u.get("prompt_tokens", 0)), int(u.get("cached_tokens", 0))
        share = f" ({reused / prompt:.0%})" if prompt else ""
        how = "reported by the server" if u["cache_source"] == "server" else "estimated"
        lines.append(
            f"Prompt tokens: {max(0, prompt - reused):,} processed, {reused:,} reused from "
            f"the server's cache{share} — {how}"
            + (f"; {s['compactions']} compactions" if s.get("compactions") else "")
        )
    return "\n".join(lines)


def _cache(u: Mapping[str, Any]) -> str:
    """A call's prompt tokens processed and reused, where known."""
    if not u.get("cache_source"):
        return ""
    prompt, reused = int(u.get("prompt_tokens", 0)), int(u.get("cached_tokens", 0))
    est = " est." if u["cache_source"] == "estimate" else ""
    return f" (prompt: {max(0, prompt - reused):,} processed, {reused:,} reused{est})"


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


def _indent(text: str, n: int) -> str:
    pad = " " * n
    return "\n".join(pad + line for line in text.splitlines())
