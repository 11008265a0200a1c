"""Scoring of benchmarks/agent_e2e.py: an agent run from its trace, the proxy's exchanges and
the CLI's output; a question by its citations; the invariants every run must keep."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from agent.budget import MESSAGE_OVERHEAD
from agent.models import parse_text_calls
from benchmarks.e2e_fixtures import expected_spans
from benchmarks.e2e_tasks import Task

#: A per-call estimate further than this from the server's count breaks the invariant.
ESTIMATE_TOLERANCE_PCT = 3.0
#: Exit statuses of `repoctx agent run` that are results (done, stopped/failed, no_progress,
#: blocked/gave_up).
AGENT_EXITS = (0, 2, 3, 4)
FORMS = ("native", "tag", "fenced", "json")
_CALL_MARKERS = ("<tool_call>", "[TOOL_CALLS]", "<|python_tag|>", "<|tool_call|>")


def wrote_call(content: str, names: Iterable[str]) -> bool:
    """Whether a reply looks like it calls a tool — an independent check of the loop's parser:
    a call marker, or a key `name` set to one of the tools (JSON or Python quoting)."""
    if any(m in content for m in _CALL_MARKERS):
        return True
    alt = "|".join(re.escape(n) for n in names)
    return bool(alt) and re.search(rf"""["']name["']\s*:\s*["']({alt})["']""", content) is not None


def token_comparison(pairs: Sequence[tuple[int, int | None]]) -> dict[str, Any]:
    """Estimated against reported prompt tokens, per call and in total (calls the server gave
    no count for are left out and counted)."""
    known = [(e, r) for e, r in pairs if r]
    errors = [round((e - r) / r * 100, 2) for e, r in known]
    est, rep = sum(e for e, _ in known), sum(r for _, r in known)
    return {
        "estimated": est,
        "reported": rep,
        "error_pct": round((est - rep) / rep * 100, 2) if rep else None,
        "max_abs_call_error_pct": max((abs(x) for x in errors), default=None),
        "calls_compared": len(known),
        "calls_without_count": len(pairs) - len(known),
        "calls_over_tolerance": sum(abs(x) > ESTIMATE_TOLERANCE_PCT for x in errors),
        "per_call": [[e, r, x] for (e, r), x in zip(known, errors, strict=True)],
    }


def match_exchanges(
    model_calls: Sequence[Mapping[str, Any]], exchanges: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any] | None]:
    """The proxy exchange of each model call of a trace: the completed exchanges in order, a
    call paired only with an exchange whose reply text is the same."""
    done = [x for x in exchanges if x.get("complete")]
    out: list[Mapping[str, Any] | None] = []
    i = 0
    for call in model_calls:
        j = i
        while j < len(done) and done[j].get("content", "") != call.get("content", ""):
            j += 1
        if j < len(done):
            out.append(done[j])
            i = j + 1
        else:
            out.append(None)
    return out


def score_agent(
    task: Task,
    events: Sequence[Mapping[str, Any]],
    exchanges: Sequence[Mapping[str, Any]],
    *,
    exit_code: int | None,
    stdout: str,
    stderr: str,
    wall_s: float,
    check: Mapping[str, Any] | None,
    killed: bool = False,
) -> dict[str, Any]:
    """The row of one agent task from its trace, the proxy's exchanges and the CLI's output."""
    report: dict[str, Any] | None
    try:
        report = json.loads(stdout) if stdout.strip() else None
    except ValueError:
        report = None
    traceback_seen = "Traceback (most recent call last)" in stderr
    crash = bool(
        killed
        or traceback_seen
        or exit_code is None
        or exit_code < 0
        or exit_code not in (*AGENT_EXITS, 1)
        or (exit_code in AGENT_EXITS and report is None)
    )
    header = events[0] if events else {}
    names = set(header.get("tools") or ())
    model_calls = [e for e in events if e.get("type") == "model_call"]
    tool_events = [e for e in events if e.get("type") == "tool_call"]
    notices = [e for e in events if e.get("type") == "notice"]
    malformed_steps = {e.get("step") for e in notices if e.get("kind") == "malformed_call"}
    steps_with_calls = {e.get("step") for e in tool_events}
    end = next((e for e in reversed(events) if e.get("type") == "end"), None)
    acts = [e for e in events if e.get("type") == "model_call" and e.get("purpose") == "act"]
    if end and end.get("reason") == "repetition" and acts:
        # The repeated calls were read (that is how they were found repeated), then not run.
        steps_with_calls.add(acts[-1].get("step"))

    forms: Counter[str] = Counter()
    replies_with_call = 0
    missed: list[dict[str, Any]] = []
    for e in model_calls:
        if e.get("purpose") != "act":
            continue
        content = e.get("content") or ""
        if e.get("tool_calls"):
            forms["native"] += len(e["tool_calls"])
        else:
            parsed = parse_text_calls(content, names=names)
            if parsed.calls:
                forms[parsed.form] += len(parsed.calls)
        if e.get("tool_calls") or wrote_call(content, names):
            replies_with_call += 1
            step = e.get("step")
            if step not in steps_with_calls and step not in malformed_steps:
                missed.append({"step": step, "content": content[:300]})

    failures = Counter(e.get("kind") or "?" for e in tool_events if not e.get("ok"))
    malformed = sum(e.get("kind") == "malformed_call" for e in notices)
    schema = sum(
        1
        for e in tool_events
        if e.get("kind") == "bad_arguments" and "match_count" not in (e.get("data") or {})
    )
    unknown = failures.get("unknown_tool", 0)
    finish_ok = any(e.get("name") == "finish" and e.get("ok") for e in tool_events)
    status = end.get("status") if end else (report or {}).get("status")
    reason = end.get("reason") if end else (report or {}).get("reason")
    summary = (end or {}).get("summary") or {}

    chat = [x for x in exchanges if x.get("chat", True)]
    matched = match_exchanges(model_calls, chat)
    pairs = [
        (int(e.get("prompt_tokens_est") or 0), (x or {}).get("prompt_tokens"))
        for e, x in zip(model_calls, matched, strict=True)
    ]
    if crash:
        outcome = "crash"
    elif exit_code == 1:
        outcome = "error"
    elif check is not None and check.get("solved"):
        outcome = "solved"
    else:
        outcome = "unsolved"
    row: dict[str, Any] = {
        "task": task.name,
        "kind": "agent",
        "repo": task.repo,
        "outcome": outcome,
        "status": status,
        "reason": reason,
        "exit_code": exit_code,
        "steps": summary.get("steps", (report or {}).get("steps")),
        "model_calls": len(model_calls),
        "tool_format": summary.get("tool_format")
        or {"setting": header.get("tool_format"), "used": (report or {}).get("tool_format")},
        "calls": {f: forms.get(f, 0) for f in FORMS},
        "calls_total": sum(forms.values()),
        "tool_calls_run": len(tool_events),
        "tools_used": dict(Counter(e.get("name") for e in tool_events)),
        "invalid_calls": malformed + schema + unknown,
        "invalid": {"malformed": malformed, "bad_arguments": schema, "unknown_tool": unknown},
        "failed_calls_by_kind": dict(failures),
        "replies_with_call": replies_with_call,
        "calls_missed": len(missed),
        "missed_examples": missed[:3],
        "finish_called": finish_ok,
        "completed_without_finish": status == "done" and not finish_ok,
        # The run says done, the files say otherwise (the model's `finish` was not checked).
        "done_but_unsolved": status == "done" and not (check or {}).get("solved", False),
        "prompt_tokens": token_comparison(pairs),
        "exchanges_unmatched": sum(x is None for x in matched),
        **_request_figures(exchanges),
        "wall_s": round(wall_s, 1),
        "check": dict(check) if check is not None else None,
        "changed": [c.get("path") for c in summary.get("changed") or []],
        "final": ((end or {}).get("message") or "")[:400],
        "run_id": header.get("run_id"),
        "crash": crash,
        "killed": killed,
    }
    if crash or exit_code == 1:
        row["stderr_tail"] = stderr.strip()[-1500:]
    return row


def score_ask(
    task: Task,
    exchanges: Sequence[Mapping[str, Any]],
    *,
    exit_code: int | None,
    stdout: str,
    stderr: str,
    wall_s: float,
    count: Callable[[str], int],
    killed: bool = False,
) -> dict[str, Any]:
    """The row of one question: citations checked against the lines a right answer cites, and
    the request's tokens estimated as the agent estimates a prompt (each message's text plus
    MESSAGE_OVERHEAD) against the server's count."""
    try:
        answer = json.loads(stdout) if stdout.strip() else None
    except ValueError:
        answer = None
    crash = bool(
        killed
        or "Traceback (most recent call last)" in stderr
        or exit_code is None
        or exit_code not in (0, 1)
        or (exit_code == 0 and not isinstance(answer, dict))
    )
    answer = answer if isinstance(answer, dict) else {}
    spans = expected_spans(task)
    cites = answer.get("citations") or []
    on_target = [
        c
        for c in cites
        if c.get("valid")
        and any(
            c.get("path") == p and c.get("start_line", 0) <= end and c.get("end_line", 0) >= start
            for p, start, end in spans
        )
    ]
    text = answer.get("answer") or ""
    mentions = any(k.lower() in text.lower() for k in task.keywords)
    if crash:
        outcome = "crash"
    elif exit_code == 1:
        outcome = "error"
    elif on_target:
        outcome = "correct"
    elif not cites:
        outcome = "uncited"
    else:
        outcome = "off_target"
    chat = [x for x in exchanges if x.get("chat", True)]
    done = [x for x in chat if x.get("complete")]
    # ask's own estimate of its prompt (`prompt_tokens_est`) is of the request it sent last;
    # without one, the benchmark counts each message's text plus MESSAGE_OVERHEAD.
    own = answer.get("prompt_tokens_est")
    counted = [
        sum(count(m.get("content") or "") + MESSAGE_OVERHEAD for m in messages)
        for x in done
        for messages in [(x.get("request") or {}).get("messages") or []]
    ]
    if isinstance(own, int) and own > 0 and done:
        pairs = [(own, done[-1].get("prompt_tokens"))]
        source = "ask prompt_tokens_est"
    else:
        pairs = [(est, x.get("prompt_tokens")) for est, x in zip(counted, done, strict=True)]
        source = f"benchmark: text tokens + {MESSAGE_OVERHEAD} per message"
    row: dict[str, Any] = {
        "task": task.name,
        "kind": "ask",
        "repo": task.repo,
        "question": task.prompt,
        "outcome": outcome,
        "exit_code": exit_code,
        "steps": None,
        "model_calls": len([x for x in chat if x.get("complete")]),
        "calls": None,
        "invalid_calls": None,
        "citations": {
            "total": len(cites),
            "valid": sum(bool(c.get("valid")) for c in cites),
            "invalid": sum(not c.get("valid") for c in cites),
            "in_context": sum(bool(c.get("in_context")) for c in cites),
            "on_target": len(on_target),
        },
        "expected": [f"{p}:{s}-{e}" for p, s, e in spans],
        "mentions_expected": mentions,
        "completed_without_finish": False,
        "prompt_tokens": {**token_comparison(pairs), "source": source},
        "benchmark_estimate": counted,
        "context_tokens": (answer.get("context") or {}).get("used_tokens"),
        "tokenizer": (answer.get("context") or {}).get("tokenizer"),
        "notes": answer.get("notes") or [],
        **_request_figures(exchanges),
        "wall_s": round(wall_s, 1),
        "answer": text[:600],
        "crash": crash,
        "killed": killed,
    }
    if crash or exit_code == 1:
        row["stderr_tail"] = stderr.strip()[-1500:]
    return row


def _request_figures(exchanges: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the proxy saw of a task: chat requests and others (tokenize endpoints ...), overlaps,
    time in the server and in the benchmark's own count probes."""
    chat = [x for x in exchanges if x.get("chat", True)]
    other = Counter(
        f"{x.get('method')} {x.get('path')} {x.get('status')}"
        for x in exchanges
        if not x.get("chat", True)
    )
    return {
        "usage_from_server": any(x.get("server_usage") for x in chat),
        "overlaps": sum(bool(x.get("overlapped")) for x in exchanges),
        "requests": len(chat),
        "other_requests": dict(other),
        "failed_requests": sum(not x.get("complete") for x in chat),
        "model_s": round(sum(x.get("seconds") or 0 for x in chat), 1),
        "probe_s": round(sum(x.get("probe_s") or 0 for x in chat), 1),
    }


def invariants(rows: Sequence[Mapping[str, Any]], proxy_overlaps: int) -> dict[str, Any]:
    """What must hold whatever the model manages: every call written is read, no completed
    change task without `finish`, estimates within tolerance, no overlap, no crash."""
    missed = sum(r.get("calls_missed") or 0 for r in rows)
    # The pipeline has no `finish` call: its `done` is its own test run, so the rule is the loop's.
    cwf = [
        r["task"]
        for r in rows
        if r.get("completed_without_finish") and r.get("strategy") != "pipeline"
    ]
    calls = [c for r in rows for c in (r.get("prompt_tokens") or {}).get("per_call", [])]
    worst = max((abs(c[2]) for c in calls), default=None)
    over = sum(abs(c[2]) > ESTIMATE_TOLERANCE_PCT for c in calls)
    no_count = sum((r.get("prompt_tokens") or {}).get("calls_without_count", 0) for r in rows)
    crashes = [r["task"] for r in rows if r.get("crash")]
    return {
        "calls_parsed_when_written": {"missed": missed, "pass": missed == 0},
        "completed_without_finish": {"tasks": cwf, "pass": not cwf},
        "estimate_within_3pct": {
            "calls": len(calls),
            "calls_without_server_count": no_count,
            "calls_over": over,
            "max_abs_error_pct": worst,
            "pass": bool(calls) and over == 0 and no_count == 0,
        },
        "no_request_overlap": {"overlaps": proxy_overlaps, "pass": proxy_overlaps == 0},
        "no_crashes": {"tasks": crashes, "pass": not crashes},
    }


def repoctx_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The per-task table in Markdown, for the log and notes."""
    head = (
        "| task | outcome | status / reason | steps | calls native/tag/fenced/json | invalid | "
        "missed | prompt est / server (err %, worst call) | wall s |"
    )
    out = [head, "|" + "---|" * 9]
    for r in rows:
        pt = r.get("prompt_tokens") or {}
        calls = r.get("calls")
        forms = "/".join(str(calls[f]) for f in FORMS) if calls else "—"
        status = (
            f"{r.get('status')} / {r.get('reason')}"
            if r["kind"] == "agent"
            else (f"citations {r['citations']['on_target']}/{r['citations']['total']} on target")
        )
        out.append(
            f"| {r['task']} | {r['outcome']} | {status} | {r.get('steps') if r.get('steps') is not None else '—'} | "
            f"{forms} | {r.get('invalid_calls') if r.get('invalid_calls') is not None else '—'} | "
            f"{r.get('calls_missed') if r.get('calls_missed') is not None else '—'} | "
            f"{pt.get('estimated')} / {pt.get('reported')} ({pt.get('error_pct')}, "
            f"{pt.get('max_abs_call_error_pct')}) | {r.get('wall_s')} |"
        )
    return "\n".join(out)
