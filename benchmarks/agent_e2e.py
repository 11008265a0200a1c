"""End-to-end agent tasks against a real OpenAI-compatible model server, repoctx beside its peers.

Real tasks in small fixture repositories (`benchmarks/e2e_tasks/`), each run as a user runs it
in a fresh copy of its repository, with the model server behind a recording proxy on 127.0.0.1.
The systems (``--systems``, comma-separated):

* ``repoctx-pipeline``, ``repoctx-loop``: ``repoctx agent run TASK --strategy pipeline|loop
  --yes --json`` (without ``--strategy`` when the CLI has no such option: the loop; the
  pipeline is then ``unavailable``); the questions (``ask_*``) with ``repoctx ask --json``;
* ``aider-file``, ``aider-map``, ``mini-swe-agent``: the peers, from their own virtual
  environments outside the repository (`benchmarks/e2e_peers.py` says how each is pointed at
  the server).

Per system x task: solved (judged from the files — the repository's tests, the task's check, and
for the vague task that nothing changed and no success was reported — never from what the
system says), the status the system reported and whether a "nothing done" was reported as
success, steps, model calls, prompt tokens the server processed and reused (from its own log:
``Llama.generate: N prefix-match hit, remaining M prompt tokens to eval`` for the requests of
that run; repoctx's trace adds its ``Usage.cached_tokens``), wall time, the exact command.
repoctx's rows keep the checks of the loop's own invariants: tool calls per form, calls written
and not read, ``done`` without ``finish``, the agent's token estimate within 3 % of the
server's count (the proxy asks the server for the count of a streamed request afterwards:
the same request, not streamed, ``max_tokens`` 1), no request overlap, no crash.

    PID=$(../shared/tools/local-llm/start.sh 1.5b 8087)
    .venv/bin/python benchmarks/agent_e2e.py --base-url http://127.0.0.1:8087/v1 \
        --model qwen2.5-coder-1.5b --systems aider-file,mini-swe-agent \
        --rows rows.jsonl > e2e.json 2> e2e.log
    kill $PID

Prints one JSON object to stdout, progress to stderr; ``--rows FILE`` appends each row as it
is done (a long run that is stopped keeps what it finished).

Size: over 500 lines as the one command that runs every system over every task and puts the
rows together; the proxy, the scoring, the fixtures and the peers are modules of their own.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` and the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "benchmarks"

from agent.budget import MESSAGE_OVERHEAD  # noqa: E402,F401  (the tests read it from here)
from agent.trace import list_runs, read_trace, trace_path  # noqa: E402
from benchmarks._common import REPO, bench_tmpdir, git_revision, log, repoctx_command  # noqa: E402
from benchmarks.e2e_fixtures import (  # noqa: E402,F401  (re-exported for the tests)
    Proc,
    apply_fix,
    build_index,
    changed_files,
    check_change,
    cli_env,
    expected_spans,
    judge,
    repoctx_claimed,
    run_cli,
    run_pytest,
    symbol_span,
    write_repo,
)
from benchmarks.e2e_peers import (  # noqa: E402
    PEER_SYSTEMS,
    REPOCTX_SYSTEMS,
    SYSTEMS,
    PeerSettings,
    command_text,
    peer_versions,
    run_peer,
    summary,
    system_row,
    systems_table,
)
from benchmarks.e2e_proxy import (  # noqa: E402,F401
    RecordingProxy,
    ServerLog,
    cache_figures,
    prompt_cache_use,
    server_models,
)
from benchmarks.e2e_scoring import (  # noqa: E402,F401
    AGENT_EXITS,
    ESTIMATE_TOLERANCE_PCT,
    FORMS,
    invariants,
    match_exchanges,
    repoctx_table,
    score_agent,
    score_ask,
    token_comparison,
    wrote_call,
)
from benchmarks.e2e_tasks import REPOS, TASKS, TASKS_BY_NAME, Task  # noqa: E402

FORMAT = 2
DEFAULT_SERVER_LOG = Path.home() / ".cache" / "repoctx-llm" / "server-8087.log"


# -- running -------------------------------------------------------------------------------------


def _save_output(where: Path, name: str, proc: Proc) -> None:
    """The command's stdout and stderr beside the repositories (kept with --keep)."""
    (where / f"{name}.stdout").write_text(proc.stdout, encoding="utf-8")
    (where / f"{name}.stderr").write_text(proc.stderr, encoding="utf-8")


class TraceTail:
    """Logs a running agent's trace as it grows (the CLI prints nothing with --json)."""

    def __init__(self, runs: Path) -> None:
        self.runs, self.stop = runs, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TraceTail:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)

    def _run(self) -> None:
        before = set(self.runs.glob("*.jsonl")) if self.runs.is_dir() else set()
        path, pos = None, 0
        while not self.stop.wait(2.0):
            if path is None:
                new = sorted(set(self.runs.glob("*.jsonl")) - before) if self.runs.is_dir() else []
                if not new:
                    continue
                path = new[0]
            with open(path, encoding="utf-8") as fh:
                fh.seek(pos)
                chunk = fh.read()
            end = chunk.rfind("\n") + 1
            pos += len(chunk[:end].encode("utf-8"))
            for line in chunk[:end].splitlines():
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                text = _event_line(event)
                if text:
                    log(f"    {text}")


def _event_line(e: Mapping[str, Any]) -> str:
    kind = e.get("type")
    if kind == "plan":
        return f"plan: {len(e['plan'].get('steps', []))} step(s) {e.get('reason') or ''}".strip()
    if kind == "context":
        return f"step {e['step']}: prompt ~{e['prompt_tokens']:,} tokens"
    if kind == "model_call":
        calls = [c["name"] for c in e.get("tool_calls") or []]
        said = " ".join((e.get("content") or "").split())[:100]
        return f"  model {e.get('latency_s', 0):.1f} s: {calls or said!r}"
    if kind == "tool_call":
        state = "ok" if e.get("ok") else f"FAILED [{e.get('kind')}]"
        return f"  > {e['name']} {' '.join(str(e.get('arguments', '')).split())[:90]} — {state}"
    if kind in ("notice", "model_error") and e.get("kind") != "index":
        return f"  [{e.get('kind')}] {str(e.get('message', ''))[:120]}"
    if kind == "end":
        return f"end: {e['status']} / {e['reason']}"
    return ""


_HELP: dict[str, str] = {}


def agent_run_help() -> str:
    """`repoctx agent run --help` (once): which options this CLI has."""
    if "agent_run" not in _HELP:
        proc = subprocess.run(
            [*repoctx_command(), "agent", "run", "--help"],
            capture_output=True,
            text=True,
            env=cli_env(),
            check=False,
        )
        _HELP["agent_run"] = proc.stdout
    return _HELP["agent_run"]


def agent_argv(
    task: Task, root: Path, base_url: str, args: argparse.Namespace, strategy: str | None
) -> list[str]:
    """`repoctx agent run` as a user runs it, ``--strategy`` when given."""
    return [
        *repoctx_command(),
        "agent",
        "run",
        task.prompt,
        "--model",
        f"openai:{args.model}",
        *(["--strategy", strategy] if strategy else []),
        "--yes",
        "--json",
        "--root",
        str(root),
        "--max-steps",
        str(args.limit_steps),
        "--budget",
        str(args.budget),
        "--model-timeout",
        str(args.model_timeout),
        "--timeout",
        str(max(60, args.task_timeout - 120)),
        "--tool-format",
        args.tool_format,
    ]


def trace_cache(events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """repoctx's own figures of its model calls: prompt tokens and the cached (reused) part,
    as the adapters put them in each call's usage (``cache_source``: server or estimate)."""
    usages = [e.get("usage") or {} for e in events if e.get("type") == "model_call"]
    return {
        "prompt_tokens": sum(int(u.get("prompt_tokens") or 0) for u in usages),
        "cached_tokens": sum(int(u.get("cached_tokens") or 0) for u in usages),
        "cache_source": sorted(
            {str(u.get("cache_source")) for u in usages if u.get("cache_source")}
        ),
    }


def run_agent_task(
    task: Task,
    root: Path,
    proxy: RecordingProxy,
    args: argparse.Namespace,
    *,
    strategy: str | None = None,
    system: str = "repoctx-loop",
    server_log: ServerLog | None = None,
) -> dict[str, Any]:
    argv = agent_argv(task, root, proxy.url, args, strategy)
    first = len(proxy.exchanges)
    with TraceTail(root / ".repoctx" / "runs"):
        proc = run_cli(argv, cwd=root, env=cli_env(proxy.url), timeout=args.task_timeout)
    _save_output(root.parent, f"{task.name}.{system}", proc)
    exchanges = proxy.exchanges[first:]
    events: list[dict[str, Any]] = []
    try:
        report = json.loads(proc.stdout) if proc.stdout.strip() else {}
    except ValueError:
        report = {}
    report = report if isinstance(report, dict) else {}
    path = Path(report["trace_path"]) if report.get("trace_path") else None
    if path is None:  # no report (a crash): the newest trace of the repository
        index_dir = root / ".repoctx"
        runs = list_runs(index_dir)
        path = trace_path(index_dir, runs[-1]) if runs else None
    if path is not None and path.is_file():
        events = read_trace(path)
    check = check_change(task, root, REPOS[task.repo])
    row = score_agent(
        task,
        events,
        exchanges,
        exit_code=proc.exit_code,
        stdout=proc.stdout,
        stderr=proc.stderr,
        wall_s=proc.wall_s,
        check=check,
        killed=proc.killed,
    )
    common = system_row(
        system,
        task,
        proc,
        exchanges,
        check,
        log=server_log,
        status=f"{row.get('status')} / {row.get('reason')}",
        claimed_success=repoctx_claimed(row.get("status"), row.get("reason")),
        steps=row.get("steps"),
        command=command_text(argv),
        extra={"strategy": strategy or "(default)", "trace_cache": trace_cache(events)},
    )
    if row["outcome"] == "solved" and not common["solved"]:
        row["outcome"] = "unsolved"  # the vague task: success reported with nothing done
    # The loop's own figures stay as score_agent has them (`prompt_tokens` is its comparison of
    # estimates with the server's counts; `steps`, `model_calls` from the trace).
    keep = {"outcome", "status", "steps", "model_calls", "prompt_tokens", "wall_s", "check"}
    row.update({k: v for k, v in common.items() if k not in keep})
    row["status_line"] = common["status"]
    return row


def run_ask_task(
    task: Task,
    root: Path,
    proxy: RecordingProxy,
    args: argparse.Namespace,
    count: Callable[[str], int],
) -> dict[str, Any]:
    argv = [
        *repoctx_command(),
        "ask",
        task.prompt,
        "--model",
        f"openai:{args.model}",
        "--json",
        "--root",
        str(root),
        "--budget",
        str(args.ask_budget),
        "--max-tokens",
        str(args.answer_tokens),
        "--model-timeout",
        str(args.model_timeout),
    ]
    first = len(proxy.exchanges)
    proc = run_cli(argv, cwd=root, env=cli_env(proxy.url), timeout=args.task_timeout)
    _save_output(root.parent, task.name, proc)
    return score_ask(
        task,
        proxy.exchanges[first:],
        exit_code=proc.exit_code,
        stdout=proc.stdout,
        stderr=proc.stderr,
        wall_s=proc.wall_s,
        count=count,
        killed=proc.killed,
    )


def _log_exchange(x: Mapping[str, Any]) -> None:
    what = (
        "complete" if x.get("complete") else ("client gone" if x.get("client_gone") else "failed")
    )
    if not x.get("chat", True):  # tokenize requests: many and quick, counted in the row
        if x.get("overlapped") or x.get("status") != 200:
            log(f"      {x.get('method')} {x.get('path')}: {x.get('status')} {x.get('seconds')} s")
        return
    log(
        f"      request {x['index'] + 1}: {x.get('seconds')} s, {what}, server prompt "
        f"{x.get('prompt_tokens')} tokens"
        + (f" (probe {x['probe_s']} s)" if x.get("probe_s") is not None else "")
        + (" OVERLAP" if x.get("overlapped") else "")
        + (f" error {x['error']}" if x.get("error") else "")
    )


def _modified_files() -> list[str]:
    """Files changed in the working tree the run used (others may edit it meanwhile)."""
    proc = subprocess.run(
        ["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True, check=False
    )
    return [line[3:] for line in proc.stdout.splitlines() if line.strip()]


def _wait_for_server(base_url: str, wait_s: float) -> list[str] | None:
    deadline = time.monotonic() + wait_s
    while True:  # a server still busy with an abandoned request answers nothing meanwhile
        try:
            return server_models(base_url)
        except OSError as exc:
            if time.monotonic() >= deadline:
                print(f"No model server at {base_url} ({exc}) — start one first.", file=sys.stderr)
                return None
            log(f"server not answering ({exc}); waiting")
            time.sleep(10)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8087/v1", help="the model server")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b", help="the server's model name")
    ap.add_argument(
        "--systems",
        default="repoctx-loop",
        help=f"comma-separated systems, of {', '.join(SYSTEMS)} (default: repoctx-loop)",
    )
    ap.add_argument("--tasks", default="", help="comma-separated task names (default: all)")
    ap.add_argument("--limit-steps", type=int, default=10, help="agent --max-steps per task")
    ap.add_argument("--budget", type=int, default=5000, help="agent prompt budget (--budget)")
    ap.add_argument("--ask-budget", type=int, default=1500, help="context budget of each ask")
    ap.add_argument("--answer-tokens", type=int, default=512, help="ask --max-tokens")
    ap.add_argument("--model-timeout", type=float, default=1800, help="one model call's limit (s)")
    ap.add_argument(
        "--task-timeout",
        type=float,
        default=3600,
        help="wall limit per system x task (s); repoctx's --timeout is 120 s less",
    )
    ap.add_argument("--tool-format", default="auto", choices=("auto", "native", "text"))
    ap.add_argument("--aider-edit-format", default="whole", choices=("whole", "diff"))
    ap.add_argument(
        "--aider-map-tokens", type=int, default=1024, help="Aider's --map-tokens (0: no repo map)"
    )
    ap.add_argument("--peer-steps", type=int, default=8, help="mini-swe-agent's step limit")
    ap.add_argument("--peer-max-tokens", type=int, default=2048, help="peers' reply cap per call")
    ap.add_argument("--context", type=int, default=8192, help="the server's context window")
    ap.add_argument("--peers-dir", type=Path, default=None, help="where the peers' venvs are")
    ap.add_argument(
        "--server-log",
        type=Path,
        default=DEFAULT_SERVER_LOG,
        help="the server's log (its prefix-match lines give the prompt tokens reused)",
    )
    ap.add_argument(
        "--tokenizer",
        default="",
        help="`tokenizer` in the fixtures' .repoctx.toml (default: none, repoctx's default)",
    )
    ap.add_argument(
        "--embed-model",
        default="",
        help="`embed_model` of the fixtures (default: repoctx's "
        "default model; `hashing` for a light run; `none` builds without vectors)",
    )
    ap.add_argument(
        "--wait-server", type=float, default=600, help="seconds to wait for a busy server"
    )
    ap.add_argument("--no-probe", action="store_true", help="do not ask the server for counts")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument(
        "--rows", type=Path, default=None, help="append each row to this JSON-lines file"
    )
    ap.add_argument(
        "--dump",
        type=Path,
        default=None,
        help="write every exchange (request, reply text, counts) to this JSON-lines file",
    )
    args = ap.parse_args(argv)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in args.systems if s not in SYSTEMS]
    if unknown:
        ap.error(f"unknown system(s) {', '.join(unknown)} — known: {', '.join(SYSTEMS)}")
    args.task_names = [n.strip() for n in args.tasks.split(",") if n.strip()] or [
        t.name for t in TASKS
    ]
    unknown = [n for n in args.task_names if n not in TASKS_BY_NAME]
    if unknown:
        ap.error(f"unknown task(s) {', '.join(unknown)} — known: {', '.join(TASKS_BY_NAME)}")
    return args


def _peer_settings(args: argparse.Namespace) -> PeerSettings:
    base = PeerSettings(model=args.model)
    peers = args.peers_dir
    return PeerSettings(
        model=args.model,
        aider=str(peers / "aider" / "bin" / "aider") if peers else base.aider,
        mini=str(peers / "mini" / "bin" / "mini") if peers else base.mini,
        edit_format=args.aider_edit_format,
        map_tokens=args.aider_map_tokens,
        context=args.context,
        max_tokens=args.peer_max_tokens,
        steps=args.peer_steps,
        timeout=args.task_timeout,
        model_timeout=args.model_timeout,
    )


def _unavailable(system: str, task: Task, why: str) -> dict[str, Any]:
    return {
        "system": system,
        "task": task.name,
        "kind": task.kind,
        "category": task.category,
        "outcome": "unavailable",
        "status": why,
        "crash": False,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    models = _wait_for_server(args.base_url, args.wait_server)
    if models is None:
        return 1
    from retrieval.tokens import get_tokenizer

    counter = get_tokenizer(args.tokenizer or None)
    settings = _peer_settings(args)
    server_log = ServerLog(args.server_log) if args.server_log.is_file() else None
    has_strategy = "--strategy" in agent_run_help()
    tmp = bench_tmpdir("e2e")
    log(f"temp dir {tmp}; server {args.base_url} models {models}; systems {args.systems}")
    if server_log is None:
        log(f"no server log at {args.server_log}: prompt tokens reused are not known")
    embed = "none" if args.embed_model == "none" else args.embed_model
    rows: list[dict[str, Any]] = []
    builds: dict[str, Any] = {}
    t0 = time.monotonic()
    load0 = os.getloadavg()
    proxy = RecordingProxy(args.base_url, probe=not args.no_probe)
    proxy.on_exchange = _log_exchange
    if server_log is not None:
        proxy.mark = server_log.mark
    repoctx_chosen = [s for s in args.systems if s in REPOCTX_SYSTEMS]

    def fresh_repo(where: Path, task: Task, index: bool) -> Path:
        root = write_repo(
            where,
            REPOS[task.repo],
            tokenizer=args.tokenizer,
            embed_model="" if embed in ("", "none") else embed,
        )
        if index:
            builds[str(root.relative_to(tmp))] = build_index(root, embed, cli_env())
        return root

    def one(system: str, task: Task, ask_roots: dict[str, Path]) -> dict[str, Any]:
        if task.kind == "ask":
            if task.repo not in ask_roots:  # the questions share one indexed repository
                ask_roots[task.repo] = fresh_repo(tmp / "ask" / task.repo, task, True)
            row = run_ask_task(task, ask_roots[task.repo], proxy, args, counter.count)
            return {**row, "system": "repoctx", "category": task.category}
        root_dir = tmp / system / task.name
        if system in PEER_SYSTEMS:
            return run_peer(
                system, task, fresh_repo(root_dir, task, False), proxy, settings, server_log
            )
        strategy = system.removeprefix("repoctx-")
        if not has_strategy:
            if strategy == "pipeline":
                return _unavailable(system, task, "this CLI has no --strategy (no pipeline)")
            strategy = ""
        root = fresh_repo(root_dir, task, True)
        return run_agent_task(
            task,
            root,
            proxy,
            args,
            strategy=strategy or None,
            system=system,
            server_log=server_log,
        )

    try:
        with proxy:
            ask_roots: dict[str, Path] = {}
            for system in args.systems:
                for name in args.task_names:
                    task = TASKS_BY_NAME[name]
                    if task.kind == "ask" and system not in repoctx_chosen[:1]:
                        continue  # the questions: `repoctx ask`, once
                    log(f"{system} / {name} ({task.kind}, {task.repo})")
                    try:
                        row = one(system, task, ask_roots)
                    except Exception as exc:  # the benchmark's own failure: recorded, go on
                        row = {
                            "system": system,
                            "task": name,
                            "kind": task.kind,
                            "category": task.category,
                            "outcome": "bench_error",
                            "error": f"{type(exc).__name__}: {exc}",
                            "traceback": traceback.format_exc()[-2000:],
                            "crash": False,
                        }
                    rows.append(row)
                    if args.rows is not None:
                        with open(args.rows, "a", encoding="utf-8") as fh:
                            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                    cache = row.get("server_cache") or {}
                    log(
                        f"  -> {row['outcome']} ({row.get('status_line') or row.get('status')}) "
                        f"{row.get('wall_s')} s, {row.get('model_calls')} call(s), processed "
                        f"{cache.get('processed')} reused {cache.get('reused')}"
                    )
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.dump is not None:
        with open(args.dump, "w", encoding="utf-8") as fh:
            for x in proxy.exchanges:
                fh.write(json.dumps({k: v for k, v in x.items() if k != "_left"}) + "\n")
    repoctx_rows = [
        r for r in rows if r.get("system", "repoctx").startswith("repoctx") and "kind" in r
    ]
    checks = invariants(
        [r for r in repoctx_rows if r.get("outcome") not in ("bench_error", "unavailable")],
        proxy.overlaps,
    )
    table = systems_table([r for r in rows if r.get("kind") != "ask"])
    log("\n" + table)
    result = {
        "format": FORMAT,
        "benchmark": "agent_e2e",
        "revision": {**git_revision(), "modified": _modified_files()},
        "server": {
            "base_url": args.base_url,
            "model": args.model,
            "models": models,
            "log": str(args.server_log) if server_log else None,
        },
        "systems": args.systems,
        "peers": {
            "versions": peer_versions(settings, args.systems),
            "settings": {k: getattr(settings, k) for k in settings.__dataclass_fields__},
        },
        "cli_has_strategy": has_strategy,
        "settings": {
            "tasks": args.task_names,
            "limit_steps": args.limit_steps,
            "budget": args.budget,
            "ask_budget": args.ask_budget,
            "answer_tokens": args.answer_tokens,
            "model_timeout_s": args.model_timeout,
            "task_timeout_s": args.task_timeout,
            "tool_format": args.tool_format,
            "tokenizer": counter.name,
            "embed_model": args.embed_model or "default (all-MiniLM-L6-v2)",
            "probe": not args.no_probe,
        },
        "machine": {
            "cpus": os.cpu_count(),
            "load_start": [round(x, 2) for x in load0],
            "load_end": [round(x, 2) for x in os.getloadavg()],
        },
        "summary": summary(rows),
        "rows": rows,
        "invariants": checks,
        "completed_without_finish": len(checks["completed_without_finish"]["tasks"]),
        "crashes": len(checks["no_crashes"]["tasks"]),
        "done_but_unsolved": [r["task"] for r in repoctx_rows if r.get("done_but_unsolved")],
        "estimate_max_abs_error_pct": checks["estimate_within_3pct"]["max_abs_error_pct"],
        "nothing_done_reported_success": [
            f"{r['system']}/{r['task']}" for r in rows if r.get("nothing_done_reported_success")
        ],
        "overlaps": proxy.overlaps,
        "max_in_flight": proxy.max_in_flight,
        "bench_errors": sum(r.get("outcome") == "bench_error" for r in rows),
        "requests": len(proxy.exchanges),
        "index_builds": builds,
        "table": table,
        "repoctx_table": repoctx_table(
            [r for r in repoctx_rows if r.get("outcome") not in ("bench_error", "unavailable")]
        ),
        "seconds": round(time.monotonic() - t0, 1),
        "temp_dir": str(tmp) if args.keep else None,
    }
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
