"""`repoctx agent run|replay|memory|undo`: the code agent, its traces, its memory, and undo."""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from agent.settings import TOOL_FORMATS
from indexer import shown

from .common import (
    ModelSettings,
    config_for,
    echo_json,
    handle_errors,
    index_dir_option,
    json_option,
    model_options,
    open_model,
    open_tokenizer,
    root_option,
)

TOOL_LEVELS = ("read", "write", "execute")
#: Exit status of a run that was asked for a change and made none.
EXIT_NO_PROGRESS = 3
#: Exit status of a run the model ended with `finish` as blocked or gave_up.
EXIT_NOT_DONE = 4


@click.group("agent")
def agent() -> None:
    """A code agent that plans, edits, tests and reports — every run traced and undoable."""


@agent.command("run")
@click.argument("task", required=False)
@click.option(
    "--model",
    "-m",
    "model_flag",
    default=None,
    help="provider:model (openai:gpt-4o-mini, anthropic:…, ollama:…, scripted:FILE); "
    "default: `model` in the config, then REPOCTX_MODEL.",
)
@click.option("--max-steps", type=click.IntRange(min=1), default=None, help="Step limit (30).")
@click.option(
    "--max-tokens",
    type=click.IntRange(min=1),
    default=None,
    help="Token limit over all model calls (400000).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=1),
    default=None,
    help="Wall-time limit in seconds (1800).",
)
@click.option(
    "--budget",
    type=click.IntRange(min=1),
    default=None,
    help="Prompt tokens per step in the model's tokens, system prompt, tool schemas and code "
    "included (12000); one below what the fixed prompt needs is refused, naming the minimum.",
)
@click.option("--yes", "-y", is_flag=True, help="Allow edits and commands without asking.")
@click.option("--read-only", is_flag=True, help="Offer and allow only the read tools.")
@click.option(
    "--commit",
    is_flag=True,
    help="Commit the result on a new branch repoctx/<run-id>-<slug> (never pushes).",
)
@click.option(
    "--resume",
    "resume",
    default=None,
    metavar="RUN",
    help="Continue an interrupted or stopped run (id, prefix or `last`).",
)
@click.option(
    "--tool-format",
    type=click.Choice(TOOL_FORMATS),
    default=None,
    help="How the model calls tools: native (the API's tool calls), text (tools described in "
    "the prompt, calls read from the reply) or auto: native, else text (default; config "
    "`agent.tool_format`, env REPOCTX_AGENT_TOOL_FORMAT).",
)
@click.option(
    "--strategy",
    type=click.Choice(("auto", "loop", "pipeline")),
    default=None,
    help="loop: plan, then tool calls step by step; pipeline: localize with the index, one "
    "small prompt, edits as SEARCH/REPLACE text, tests, a few retries (for small models); "
    "auto (default; config `agent.strategy`): by the model and its context window.",
)
@model_options
@click.option("--quiet", "-q", is_flag=True, help="No progress on stderr.")
@root_option
@index_dir_option
@json_option
@handle_errors
def run_cmd(
    task: str | None,
    model_flag: str | None,
    max_steps: int | None,
    max_tokens: int | None,
    timeout_s: float | None,
    budget: int | None,
    yes: bool,
    read_only: bool,
    commit: bool,
    resume: str | None,
    tool_format: str | None,
    strategy: str | None,
    model_timeout: float | None,
    connect_timeout: float | None,
    model_retries: int | None,
    model_tokenizer: str | None,
    quiet: bool,
    root: Path,
    index_dir: Path | None,
    as_json: bool,
) -> None:
    """Work on TASK until it is done or a limit is reached."""
    from dataclasses import replace

    from agent.budget import Limits
    from agent.errors import BudgetTooSmallError
    from agent.run_result import RunOptions
    from agent.settings import model_spec
    from agent.strategy import configured, run_task

    if not task and not resume:
        raise click.UsageError("Give a TASK, or --resume RUN.")
    if yes and read_only:
        raise click.UsageError("--yes and --read-only contradict each other; pick one.")
    config = config_for(root, index_dir)
    spec = model_spec(model_flag, config)
    settings = ModelSettings.resolve(
        config, model_timeout, connect_timeout, model_retries, model_tokenizer
    )
    limits = Limits()
    overrides = {
        "max_steps": max_steps,
        "max_tokens": max_tokens,
        "timeout_s": timeout_s,
        "prompt_budget": budget,
        "model_retries": settings.retries,
    }
    limits = replace(limits, **{k: v for k, v in overrides.items() if v is not None})
    model = open_model(spec, settings, limits.prompt_budget + limits.completion_tokens)
    tokens = open_tokenizer(model, settings, config)
    interactive = sys.stdin.isatty() and sys.stderr.isatty()
    confirm = None
    if yes:
        granted = frozenset(TOOL_LEVELS)
    else:
        granted = frozenset({"read"})
        if interactive and not read_only:

            def confirm(what: str) -> bool:
                return click.confirm(f"Allow {what}?", default=False, err=True)
        elif not read_only and not quiet:
            click.echo("Not a terminal and no --yes: only read tools are available.", err=True)
    options = RunOptions(
        limits=limits,
        granted=granted,
        confirm=confirm,
        commit=commit,
        resume=resume,
        on_event=None if quiet or as_json else _progress,
        tool_format=tool_format,
        tokenizer=tokens,
    )
    received: list[int] = []
    previous = _kill_commands_on_signals(received)
    try:
        report = run_task(
            config, task or "", model, options, setting=configured(config, strategy)
        )
    except BudgetTooSmallError as exc:
        raise click.UsageError(str(exc)) from exc
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if as_json:
        echo_json(report.to_dict())
    else:
        _print_report(report)
    if received and received[0] != signal.SIGINT:
        sys.exit(128 + received[0])
    if report.status == "interrupted":
        sys.exit(130)
    if report.status == "no_progress":
        sys.exit(EXIT_NO_PROGRESS)
    if report.status in ("blocked", "gave_up"):
        sys.exit(EXIT_NOT_DONE)
    if report.status in ("failed", "stopped"):
        sys.exit(2)


def _kill_commands_on_signals(received: list[int]) -> dict[int, Any]:
    """On SIGTERM, SIGHUP and SIGINT: kill every command the run has going at once (their
    whole process trees), then stop the run as Ctrl-C does, so its trace and checkpoints are
    saved. The signals received go to ``received``; the previous handlers are returned."""
    from agent.command_reaper import kill_running

    def on_signal(signum: int, _frame: object) -> None:
        kill_running()
        received.append(signum)
        if len(received) == 1:
            raise KeyboardInterrupt

    previous: dict[int, Any] = {}
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        try:
            previous[signum] = signal.signal(signum, on_signal)
        except ValueError:
            break  # not the main thread (an embedding program): its signals are its own
    return previous


def _progress(event: dict[str, Any]) -> None:
    kind = event["type"]
    if kind == "plan":
        click.echo(click.style("Plan:", bold=True), err=True)
        for i, s in enumerate(event["plan"]["steps"], 1):
            click.echo(f"  {i}. {s['title']}", err=True)
        if event.get("reason"):
            click.echo(f"  ({event['reason']})", err=True)
    elif kind == "context":
        click.echo(
            click.style(f"step {event['step']}", bold=True)
            + f"  prompt ~{event['prompt_tokens']:,} tokens",
            err=True,
        )
    elif kind == "tool_call":
        state = (
            click.style("ok", fg="green")
            if event["ok"]
            else click.style(f"failed ({event['kind']})", fg="red")
        )
        args = " ".join(event["arguments"].split())
        click.echo(f"  {shown(event['name'])} {shown(args[:100])} — {state}", err=True)
    elif kind == "plan_revision":
        click.echo(click.style(f"  plan revised: {event['reason']}", fg="yellow"), err=True)
    elif kind == "model_call" and event.get("cache"):
        c = event["cache"]
        click.echo(
            f"  model call: {c['processed']:,} prompt tokens processed, {c['reused']:,} reused"
            + (" (estimated)" if c.get("source") == "estimate" else ""),
            err=True,
        )
    elif kind in ("notice", "model_error") and event.get("kind") != "index":
        click.echo(click.style(f"  {event.get('kind')}: {event['message']}", fg="yellow"), err=True)


def _print_report(report) -> None:
    from agent.replay import render_summary

    colour = {"done": "green", "interrupted": "yellow"}.get(report.status, "red")
    click.echo(click.style(f"{report.status}: {report.reason}", fg=colour, bold=True))
    if report.message and report.message != report.final:
        click.echo(report.message)
    summary = {
        "final": report.final,
        "changed": [asdict(c) for c in report.changed],
        "git_stat": report.git_stat,
        "tests": [asdict(t) for t in report.tests],
        "usage": asdict(report.usage),
        "model_calls": report.model_calls,
        "steps": report.steps,
        "elapsed_s": report.elapsed_s,
    }
    click.echo(render_summary(summary))
    if report.tool_format == "text" and report.strategy != "pipeline":
        click.echo("Tool calls: written in the model's text, read from there.")
    if report.strategy_why:
        click.echo(f"Strategy: {report.strategy} ({report.strategy_why})")
    if report.branch:
        click.echo(f"Committed {report.commit[:10]} on branch {report.branch} (not pushed).")
    click.echo(
        f"Trace: {report.trace_path}  (repoctx agent replay {report.run_id}; "
        f"undo: repoctx agent undo {report.run_id})"
    )


@agent.command("replay")
@click.argument("run", required=False)
@click.option("--full", is_flag=True, help="Whole tool outputs and every context item.")
@click.option("--list", "list_runs_flag", is_flag=True, help="List the runs with a trace.")
@root_option
@index_dir_option
@json_option
@handle_errors
def replay_cmd(
    run: str | None,
    full: bool,
    list_runs_flag: bool,
    root: Path,
    index_dir: Path | None,
    as_json: bool,
) -> None:
    """Show the trace of RUN (id, unique prefix, or `last`) readably."""
    from agent.replay import render_trace
    from agent.trace import list_runs, read_trace, resolve_run, trace_path

    config = config_for(root, index_dir)
    if list_runs_flag or not run:
        runs = list_runs(config.index_path)
        if as_json:
            echo_json(runs)
        else:
            for r in runs:
                events = read_trace(trace_path(config.index_path, r))
                end = next((e for e in reversed(events) if e["type"] == "end"), {})
                click.echo(f"{r}  {end.get('status', 'running?'):<11} {events[0]['task'][:70]}")
        return
    events = read_trace(trace_path(config.index_path, resolve_run(config.index_path, run)))
    if as_json:
        echo_json(events)
    else:
        click.echo(render_trace(events, full=full))


@agent.command("memory")
@click.option("--edit", "edits", multiple=True, metavar="KEY=VALUE", help="Set an entry.")
@click.option("--forget", "forgets", multiple=True, metavar="KEY", help="Remove an entry.")
@root_option
@index_dir_option
@json_option
@handle_errors
def memory_cmd(
    edits: tuple[str, ...],
    forgets: tuple[str, ...],
    root: Path,
    index_dir: Path | None,
    as_json: bool,
) -> None:
    """Show (and edit) what agent runs have learned about this repository."""
    from agent.memory import ProjectMemory

    config = config_for(root, index_dir)
    memory = ProjectMemory.for_index(config.index_path)
    for item in edits:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.UsageError(f"--edit needs KEY=VALUE, got {item!r}.")
        memory.set(key.strip(), value, "user")
    for key in forgets:
        if not memory.forget(key):
            click.echo(f"No memory entry {key!r}.", err=True)
    if as_json:
        echo_json(memory.to_dict())
        return
    if not memory.entries:
        click.echo(f"No memory yet ({memory.path}).")
    for e in memory.entries.values():
        click.echo(f"{e.key} = {e.value}  [{e.source}, {e.updated}]")


@agent.command("undo")
@click.argument("run")
@root_option
@index_dir_option
@json_option
@handle_errors
def undo_cmd(run: str, root: Path, index_dir: Path | None, as_json: bool) -> None:
    """Put back every file RUN changed, byte for byte (RUN: id, unique prefix or `last`)."""
    from agent.loop import undo_run

    config = config_for(root, index_dir)
    report = undo_run(config, run)
    if as_json:
        echo_json(report)
        return
    root_path = config.root
    for p in report.restored:
        click.echo(f"restored {shown(os.path.relpath(p, root_path))}")
    for p in report.deleted:
        click.echo(f"deleted  {shown(os.path.relpath(p, root_path))}")
    click.echo(f"Run {report.run_id}: {len(report.steps)} step(s) undone.")


COMMANDS = (agent,)
