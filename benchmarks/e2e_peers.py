"""The peers of benchmarks/agent_e2e.py: Aider and mini-swe-agent, installed from PyPI into their
own virtual environments outside the repository, run on the same tasks against the same model
server as repoctx — each in a fresh copy of the task's repository, through the same recording
proxy, judged from the files afterwards (never from what the peer says).

* ``aider-file``: ``aider --message TASK FILE…`` with the task's files named (``Task.files``),
  ``--edit-format whole`` (or ``diff``, ``--aider-edit-format``); its repo map of the rest on.
* ``aider-map``: the same with no file named: Aider's repo map has to lead it to the files
  (it asks to add the files the model names; ``--yes-always`` adds them).
* ``mini-swe-agent``: ``mini`` with its text-based config (``mini_textbased.yaml``: one bash
  command per reply in a fenced block — the server has no native tool calls), ``--yolo``,
  ``--exit-immediately``, a step limit and a wall-time limit.

How they reach the server: both use LiteLLM, so the model is ``openai/<name>`` with the proxy's
URL as the API base and a dummy key. Aider gets the context window and a reply cap from a model
metadata file and a model settings file (``max_tokens`` in ``extra_params``), API calls time out
after ``--model-timeout``; mini gets ``model_kwargs`` (``api_base``, ``api_key``, ``timeout``,
``max_tokens``, ``temperature`` 0), cost tracking off, one attempt per call (its retries would
queue another slow request). Telemetry and network look-ups are off: Aider's analytics, update
check, release notes, URL detection and browser; LiteLLM's remote cost map
(``LITELLM_LOCAL_MODEL_COST_MAP``); mini's first-run setup and banner. Each peer runs with
``HOME`` in the run's own folder, so nothing of a user's configuration or caches is read or
written.

What a peer reports: Aider has no outcome (``claimed_success`` None); its status is the edits it
applied ("Applied edit to …") or that it applied none. mini's is its exit status (``Submitted``
is its success claim; ``LimitsExceeded``, ``TimeExceeded``, ``RepeatedFormatError`` and errors
are not).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.e2e_fixtures import Proc, check_change, judge, run_cli
from benchmarks.e2e_proxy import RecordingProxy, ServerLog, cache_figures
from benchmarks.e2e_tasks import REPOS, Task

REPOCTX_SYSTEMS = ("repoctx-pipeline", "repoctx-loop")
PEER_SYSTEMS = ("aider-file", "aider-map", "mini-swe-agent")
SYSTEMS = (*REPOCTX_SYSTEMS, *PEER_SYSTEMS)
#: Where the peers' virtual environments are installed (outside the repository):
#:   python3.11 -m venv /work/bench/peers/aider && …/aider/bin/pip install aider-chat==0.86.2
#:   python3.11 -m venv /work/bench/peers/mini && …/mini/bin/pip install mini-swe-agent==2.4.6
PEERS_DIR = Path(os.environ.get("REPOCTX_BENCH_PEERS", "/work/bench/peers"))
EDIT_FORMATS = ("whole", "diff")


@dataclass(frozen=True)
class PeerSettings:
    model: str  #: the server's model name
    aider: str = str(PEERS_DIR / "aider" / "bin" / "aider")
    mini: str = str(PEERS_DIR / "mini" / "bin" / "mini")
    edit_format: str = "whole"
    #: The server's context window (llama-cpp-python's --n_ctx of local-llm's start.sh).
    context: int = 8192
    #: The reply cap per model call (the server's default is the rest of the window).
    max_tokens: int = 2048
    #: Aider's repo map budget (its default for an 8k window).
    map_tokens: int = 1024
    #: mini-swe-agent's step limit (model calls).
    steps: int = 8
    #: Wall-time limit of one run (s): the process group is killed past it.
    timeout: float = 900
    #: Time limit of one model call (s); the server is slow, and requests may queue behind others.
    model_timeout: float = 1800


# -- command lines -------------------------------------------------------------------------------


def aider_argv(
    task: Task, base_url: str, settings: PeerSettings, work: Path, *, named: bool
) -> list[str]:
    """Aider's command line for ``task`` (run in the repository): the task's files named when
    ``named`` (aider-file), none otherwise (aider-map)."""
    return [
        settings.aider,
        "--model",
        f"openai/{settings.model}",
        "--openai-api-base",
        base_url,
        "--openai-api-key",
        "dummy",
        "--model-metadata-file",
        str(work / "aider-model-metadata.json"),
        "--model-settings-file",
        str(work / "aider-model-settings.yml"),
        "--edit-format",
        settings.edit_format,
        "--map-tokens",
        str(settings.map_tokens),
        "--timeout",
        str(int(settings.model_timeout)),
        "--yes-always",
        "--no-auto-commits",
        "--no-dirty-commits",
        "--no-gitignore",
        "--no-auto-lint",
        "--no-auto-test",
        "--no-suggest-shell-commands",
        "--no-detect-urls",
        "--no-check-update",
        "--no-show-release-notes",
        "--no-analytics",
        "--no-gui",
        "--no-notifications",
        "--no-show-model-warnings",
        "--no-check-model-accepts-settings",
        "--no-stream",
        "--no-pretty",
        "--no-fancy-input",
        "--no-restore-chat-history",
        "--chat-history-file",
        str(work / "aider.chat.md"),
        "--input-history-file",
        str(work / "aider.input.history"),
        "--llm-history-file",
        str(work / "aider.llm.history"),
        "--encoding",
        "utf-8",
        "--message",
        task.prompt,
        *(task.files if named else ()),
    ]


def aider_files(settings: PeerSettings, work: Path) -> dict[str, str]:
    """Aider's model metadata (context window, no cost) and model settings (the reply cap), as
    written into ``work`` before a run."""
    name = f"openai/{settings.model}"
    metadata = {
        name: {
            "max_input_tokens": settings.context,
            "max_tokens": settings.context,
            "max_output_tokens": settings.max_tokens,
            "input_cost_per_token": 0.0,
            "output_cost_per_token": 0.0,
            "litellm_provider": "openai",
            "mode": "chat",
        }
    }
    model_settings = (
        f"- name: {name}\n"
        f"  edit_format: {settings.edit_format}\n"
        "  use_repo_map: true\n"
        "  extra_params:\n"
        f"    max_tokens: {settings.max_tokens}\n"
    )
    return {
        "aider-model-metadata.json": json.dumps(metadata, indent=2) + "\n",
        "aider-model-settings.yml": model_settings,
    }


def mini_argv(
    task: Task, root: Path, base_url: str, settings: PeerSettings, work: Path
) -> list[str]:
    """mini-swe-agent's command line for ``task``: the text-based config, the server through
    LiteLLM, the step and time limits, no confirmation, the trajectory into ``work``."""
    specs = {
        "model.model_class": "litellm_textbased",
        "model.model_kwargs.api_base": base_url,
        "model.model_kwargs.api_key": "dummy",
        "model.model_kwargs.timeout": int(settings.model_timeout),
        "model.model_kwargs.max_tokens": settings.max_tokens,
        "model.model_kwargs.temperature": 0,
        "model.cost_tracking": "ignore_errors",
        "agent.step_limit": settings.steps,
        # Its own limit first (it then saves its trajectory and exit status), the kill after.
        "agent.wall_time_limit_seconds": int(max(60, settings.timeout - 90)),
        "environment.cwd": str(root),
        "environment.timeout": 120,
    }
    argv = [settings.mini, "-c", "mini_textbased.yaml"]
    for key, value in specs.items():
        argv += ["-c", f"{key}={value}"]
    return [
        *argv,
        "-m",
        f"openai/{settings.model}",
        "-t",
        task.prompt,
        "--yolo",
        "--exit-immediately",
        "--cost-limit",
        "0",
        "--output",
        str(work / "mini.traj.json"),
    ]


def peer_env(work: Path, base_url: str) -> dict[str, str]:
    """The environment of a peer: no REPOCTX_* settings, HOME in the run's folder, the server
    named for LiteLLM, no telemetry or network look-ups, pytest (the benchmark's interpreter's)
    first on PATH for the commands mini runs."""
    home = work / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REPOCTX_", "OPENAI_"))}
    env.update(
        {
            "HOME": str(home),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            "OPENAI_API_BASE": base_url,
            "OPENAI_API_KEY": "dummy",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_TELEMETRY": "False",
            "AIDER_ANALYTICS": "false",
            "AIDER_CHECK_UPDATE": "false",
            "MSWEA_CONFIGURED": "true",
            "MSWEA_SILENT_STARTUP": "1",
            "MSWEA_GLOBAL_CONFIG_DIR": str(work / "mini-config"),
            "MSWEA_COST_TRACKING": "ignore_errors",
            "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            "PAGER": "cat",
            "TERM": "dumb",
            "NO_COLOR": "1",
        }
    )
    return env


def peer_versions(settings: PeerSettings, systems: Sequence[str]) -> dict[str, str]:
    """The installed versions of the peers chosen (read from their own environments)."""
    out: dict[str, str] = {}
    wanted = {"aider-chat": settings.aider, "mini-swe-agent": settings.mini}
    for package, exe in wanted.items():
        if not any(s.startswith(package.split("-")[0]) for s in systems):
            continue
        python = Path(exe).parent / "python"
        proc = subprocess.run(
            [str(python), "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
            capture_output=True,
            text=True,
            check=False,
        )
        out[package] = proc.stdout.strip() or f"not installed ({exe})"
    return out


# -- what a peer reports -------------------------------------------------------------------------

_APPLIED = re.compile(r"^Applied edit to (.+?)\s*$", re.MULTILINE)
_AIDER_TROUBLE = (
    "did not conform to the edit format",
    "Malformed response",
    "SearchReplaceNoExactMatch",
    "Only 3 reflections allowed",
    "exceeds the",  # "Your estimated chat context of N tokens exceeds the M token limit"
    "litellm.",  # an API error, as LiteLLM words it
)


def aider_report(stdout: str) -> dict[str, Any]:
    """What Aider said it did: the files it applied edits to, and any trouble it printed."""
    applied = sorted(set(_APPLIED.findall(stdout)))
    trouble = [
        line.strip()[:200] for line in stdout.splitlines() if any(t in line for t in _AIDER_TROUBLE)
    ]
    status = f"applied edits to {', '.join(applied)}" if applied else "no edit applied"
    return {"status": status, "applied": applied, "trouble": trouble[:5], "claimed_success": None}


def mini_report(traj_path: Path) -> dict[str, Any]:
    """mini-swe-agent's exit status and call count, from the trajectory it saved."""
    try:
        data = json.loads(traj_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"status": "no trajectory", "claimed_success": None, "api_calls": None}
    info = data.get("info") or {}
    status = info.get("exit_status") or ""
    messages = data.get("messages") or []
    exit_msg = next((m for m in reversed(messages) if m.get("role") == "exit"), {})
    return {
        "status": status,
        "claimed_success": status == "Submitted",
        "api_calls": (info.get("model_stats") or {}).get("api_calls"),
        "exit_message": str(exit_msg.get("content") or "")[:300],
        "commands": [
            action.get("command", "")[:200]
            for m in messages
            for action in ((m.get("extra") or {}).get("actions") or [])
        ][:20],
    }


# -- running one peer ----------------------------------------------------------------------------


def command_text(argv: Sequence[str]) -> str:
    return shlex.join(argv)


def run_peer(
    system: str,
    task: Task,
    root: Path,
    proxy: RecordingProxy,
    settings: PeerSettings,
    log: ServerLog | None,
) -> dict[str, Any]:
    """One peer on one task in the fresh repository ``root``; the row of the comparison."""
    work = root.parent / f"{root.name}.{system}"
    work.mkdir(parents=True, exist_ok=True)
    if system in ("aider-file", "aider-map"):
        for name, text in aider_files(settings, work).items():
            (work / name).write_text(text, encoding="utf-8")
        argv = aider_argv(task, proxy.url, settings, work, named=system == "aider-file")
    elif system == "mini-swe-agent":
        argv = mini_argv(task, root, proxy.url, settings, work)
    else:
        raise ValueError(f"not a peer: {system}")
    first = len(proxy.exchanges)
    proc = run_cli(argv, cwd=root, env=peer_env(work, proxy.url), timeout=settings.timeout)
    (work / "stdout").write_text(proc.stdout, encoding="utf-8")
    (work / "stderr").write_text(proc.stderr, encoding="utf-8")
    exchanges = proxy.exchanges[first:]
    if system == "mini-swe-agent":
        report = mini_report(work / "mini.traj.json")
        steps = report.get("api_calls")
    else:
        report = aider_report(proc.stdout)
        steps = None
    check = check_change(task, root, REPOS[task.repo])
    return system_row(
        system,
        task,
        proc,
        exchanges,
        check,
        log=log,
        status=report["status"],
        claimed_success=report["claimed_success"],
        steps=steps,
        command=command_text(argv),
        extra={"report": report},
    )


def system_row(
    system: str,
    task: Task,
    proc: Proc,
    exchanges: Sequence[Mapping[str, Any]],
    check: Mapping[str, Any],
    *,
    log: ServerLog | None,
    status: str,
    claimed_success: bool | None,
    steps: int | None,
    command: str,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The comparison's row of one system on one task, the same fields for every system."""
    chat = [x for x in exchanges if x.get("chat", True)]
    done = [x for x in chat if x.get("complete")]
    verdict = judge(task, check, claimed_success)
    crash = proc.exit_code is None or proc.exit_code < 0 or "Traceback (most recent" in proc.stderr
    if proc.killed:
        outcome = "solved" if verdict["solved"] else "killed"
    elif crash and not verdict["solved"]:
        outcome = "crash"
    else:
        outcome = "solved" if verdict["solved"] else "unsolved"
    prompts = [x.get("prompt_tokens") for x in done]
    row: dict[str, Any] = {
        "system": system,
        "task": task.name,
        "category": task.category,
        "repo": task.repo,
        "outcome": outcome,
        **verdict,
        "status": status,
        "steps": steps if steps is not None else len(done),
        "model_calls": len(done),
        "failed_requests": len(chat) - len(done),
        # The server's count of each prompt, summed (usage, or the proxy's probe).
        "server_prompt_tokens": sum(p for p in prompts if p) if any(prompts) else None,
        "server_cache": cache_figures(exchanges, log),
        "model_s": round(sum(x.get("seconds") or 0 for x in chat), 1),
        "wall_s": round(proc.wall_s, 1),
        "exit_code": proc.exit_code,
        "killed": proc.killed,
        "changed_files": check.get("changed_files"),
        "check": dict(check),
        "command": command,
        "overlaps": sum(bool(x.get("overlapped")) for x in exchanges),
        **dict(extra or {}),
    }
    if crash or proc.killed:
        row["stderr_tail"] = proc.stderr.strip()[-1500:]
    return row


# -- the table -----------------------------------------------------------------------------------


def systems_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """System x task in Markdown: outcome, reported status, steps, calls, the server's prompt
    tokens processed / reused, wall time; then solved per system and kind of task."""
    head = (
        "| system | task | outcome | reported | steps | calls | prompt tok processed / reused "
        "| later calls max processed % | wall s |"
    )
    out = [head, "|" + "---|" * 9]
    for r in rows:
        cache = r.get("server_cache") or {}
        flags = (
            " (nothing done, reported success)" if r.get("nothing_done_reported_success") else ""
        )
        out.append(
            f"| {r.get('system')} | {r.get('task')} | {r.get('outcome')}{flags} | "
            f"{str(r.get('status_line') or r.get('status') or '')[:60]} | "
            f"{_dash(r.get('steps'))} | "
            f"{_dash(r.get('model_calls'))} | {_dash(cache.get('processed'))} / "
            f"{_dash(cache.get('reused'))} | {_dash(cache.get('processed_pct_after_first_max'))} | "
            f"{_dash(r.get('wall_s'))} |"
        )
    out += ["", summary_table(rows)]
    return "\n".join(out)


def summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Solved per system: all tasks, and per kind of task (bug, param, rename, edge, vague)."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r.get("kind") == "ask" or r.get("outcome") in ("unavailable", "bench_error"):
            continue
        s = out.setdefault(
            r["system"],
            {
                "solved": 0,
                "tasks": 0,
                "by_category": {},
                "nothing_done_success": 0,
                "claimed_unsolved": 0,
            },
        )
        s["tasks"] += 1
        s["solved"] += r.get("outcome") == "solved"
        s["nothing_done_success"] += bool(r.get("nothing_done_reported_success"))
        s["claimed_unsolved"] += bool(r.get("success_claimed_but_unsolved"))
        cat = s["by_category"].setdefault(r.get("category") or "?", [0, 0])
        cat[0] += r.get("outcome") == "solved"
        cat[1] += 1
    return out


def summary_table(rows: Sequence[Mapping[str, Any]]) -> str:
    sums = summary(rows)
    cats = sorted({c for s in sums.values() for c in s["by_category"]})
    out = [
        "| system | solved | "
        + " | ".join(cats)
        + " | nothing done reported as success | success reported, unsolved |",
        "|" + "---|" * (len(cats) + 4),
    ]
    for system, s in sums.items():
        cells = [
            "{}/{}".format(*s["by_category"][c]) if c in s["by_category"] else "—" for c in cats
        ]
        out.append(
            f"| {system} | {s['solved']}/{s['tasks']} | "
            + " | ".join(cells)
            + f" | {s['nothing_done_success']} | {s['claimed_unsolved']} |"
        )
    return "\n".join(out)


def _dash(value: object) -> str:
    return "—" if value is None else f"{value:,}" if isinstance(value, int) else str(value)
