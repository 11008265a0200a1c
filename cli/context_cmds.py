"""`repoctx context` and `repoctx ask`: budgeted context for a task, and answers from it."""

from __future__ import annotations

from pathlib import Path

import click

from indexer import Index, content, place, shown
from retrieval.settings import DEFAULT_BUDGET, RetrievalSettings

from .common import ModelSettings, echo_json, model_options, open_model, open_tokenizer
from .query_cmds import open_index, read_options


def _context_options(f):
    f = click.option(
        "--tokenizer",
        default=None,
        help="Token counter: auto (default), o200k, cl100k, llama3, qwen3, minilm or "
        "hf:PATH/tokenizer.json, optionally *SCALE (env REPOCTX_TOKENIZER, "
        "config `tokenizer`).",
    )(f)
    f = click.option(
        "--focus",
        "-f",
        multiple=True,
        metavar="PATH[:LINES]",
        help="File or directory to include first (repeatable); PATH:10-40 for a line range.",
    )(f)
    f = click.option(
        "--budget",
        "-b",
        type=click.IntRange(min=1),
        default=None,
        help=f"Token budget of the context (default {DEFAULT_BUDGET}, config `context_budget`).",
    )(f)
    return f


def _searcher(index: Index):
    from retrieval.search import Searcher

    return Searcher(index)


def _budget(flag: int | None, config) -> int:
    return flag if flag is not None else RetrievalSettings.from_config(config).context_budget


@click.command("context")
@click.argument("task")
@_context_options
@click.option(
    "--prompt",
    "prompt_only",
    is_flag=True,
    help="Print only the context text (to pipe into a model).",
)
@click.option("--line-numbers", is_flag=True, help="Prefix every code line with its number.")
@read_options
def context_cmd(
    task: str,
    budget: int | None,
    focus: tuple[str, ...],
    tokenizer: str | None,
    prompt_only: bool,
    line_numbers: bool,
    root: Path,
    index_dir: Path | None,
    as_json: bool,
) -> None:
    """Assemble the code context for TASK within a token budget, with why each part is there."""
    from dataclasses import replace

    from retrieval.context import PackPolicy, assemble_context

    index = open_index(root, index_dir)
    config = index.config
    pack = assemble_context(
        index,
        task,
        _budget(budget, config),
        focus=focus,
        searcher=_searcher(index),
        tokenizer=tokenizer or RetrievalSettings.from_config(config).tokenizer,
        policy=replace(PackPolicy(), line_numbers=line_numbers),
    )
    if as_json:
        echo_json({**pack.to_dict(), "text": pack.render()})
        return
    if prompt_only:
        click.echo(content(pack.render()), nl=False)
        return
    full = sum(1 for i in pack.items if i.kind == "full")
    click.echo(
        click.style(
            f"Context: {pack.used_tokens:,} of {pack.budget:,} tokens ({pack.tokenizer}), "
            f"{full} full + {len(pack.items) - full} skeleton items, "
            f"{pack.timings.get('total', 0):.0f} ms",
            bold=True,
        )
    )
    for w in pack.warnings:
        click.echo(f"warning: {w}", err=True)
    for n, item in enumerate(pack.items, 1):
        where = place(item.path, item.start_line, item.end_line if item.kind == "full" else None)
        why = shown("; ".join(str(r) for r in item.reasons))  # qualnames come from file names
        click.echo(f"{n:3} {item.kind:8} {where:40} {item.tokens:5} tok  {why}")
    if not pack.items:
        click.echo("Nothing found for this task — try other words or --focus a file.")
        return
    click.echo(click.style("\n--- context ---", dim=True))
    click.echo(content(pack.render()), nl=False)


@click.command("ask")
@click.argument("question")
@_context_options
@click.option(
    "--model",
    "-m",
    "model_flag",
    default=None,
    help="provider:model, e.g. openai:gpt-4o-mini, anthropic:claude-sonnet-4-5, "
    "ollama:qwen2.5-coder (env REPOCTX_MODEL, config `model`). Without one: "
    "a retrieval-only answer.",
)
@click.option(
    "--max-tokens",
    type=click.IntRange(min=1),
    default=1024,
    show_default=True,
    help="Longest answer the model may write.",
)
@click.option(
    "--session",
    "session_name",
    default=None,
    metavar="NAME",
    help="Keep the conversation NAME (under the index dir): a follow-up sees the earlier "
    "questions, answers and context, and its prompt extends the previous one so a local server "
    "reuses its cache; past the budget the session starts afresh.",
)
@click.option(
    "--new-session",
    is_flag=True,
    help="Start the --session NAME afresh (forget its earlier questions).",
)
@model_options
@read_options
def ask_cmd(
    question: str,
    budget: int | None,
    focus: tuple[str, ...],
    tokenizer: str | None,
    model_flag: str | None,
    max_tokens: int,
    session_name: str | None,
    new_session: bool,
    model_timeout: float | None,
    connect_timeout: float | None,
    model_retries: int | None,
    model_tokenizer: str | None,
    root: Path,
    index_dir: Path | None,
    as_json: bool,
) -> None:
    """Answer QUESTION about the code, citing path:line locations that are checked to exist."""
    from agent.ask import ask
    from agent.ask_session import PROMPT_ALLOWANCE, AskSession, check_name, load_session
    from agent.settings import model_spec
    from agent.workspace import Workspace

    if new_session and session_name is None:
        raise click.UsageError("--new-session needs --session NAME.")
    index = open_index(root, index_dir)
    config = index.config
    spec = model_spec(model_flag, config)
    model = tokens = session = None
    budget = _budget(budget, config)
    if spec:
        settings = ModelSettings.resolve(
            config, model_timeout, connect_timeout, model_retries, model_tokenizer
        )
        # The context, the answer, and about a thousand tokens of instructions and question.
        model = open_model(spec, settings, budget + max_tokens + PROMPT_ALLOWANCE)
        tokens = open_tokenizer(model, settings, config)
        if session_name is not None:
            session = (
                AskSession(check_name(session_name))
                if new_session
                else load_session(config.index_path, session_name)
            )
    elif session_name is not None:
        click.echo("--session needs a model: this retrieval-only answer is not kept.", err=True)
    answer = ask(
        index,
        question,
        model=model,
        budget_tokens=budget,
        focus=focus,
        searcher=_searcher(index),
        tokenizer=tokenizer or RetrievalSettings.from_config(config).tokenizer,
        max_tokens=max_tokens,
        is_secret=Workspace.from_config(config).is_hidden,  # `agent.deny`, links
        history=True,
        model_tokenizer=tokens,
        session=session,
    )
    if answer.session is not None:
        from agent.ask_session import save_session
        from indexer import RepoctxError

        try:
            save_session(config.index_path, answer.session)
        except (RepoctxError, OSError) as exc:  # the answer is still worth printing
            click.echo(f"warning: session {answer.session.name} was not saved: {exc}", err=True)
    for note in answer.notes:
        click.echo(note, err=True)
    for w in answer.pack.warnings:  # e.g. the vectors could not be read: answered without them
        click.echo(f"warning: {w}", err=True)
    if as_json:
        echo_json(answer.to_dict())
        return
    if model is None:
        _print_locations(answer)
        _print_commits(answer)
        click.echo(answer.hint, err=True)
        return
    click.echo(content(answer.answer.rstrip()))
    if answer.citations:
        click.echo(click.style("\nCitations:", bold=True))
        for c in answer.citations:
            if not c.valid:
                mark, note = click.style("✗", fg="red"), f"INVALID — {c.problem}"
            elif not c.in_context:
                mark, note = click.style("?", fg="yellow"), "exists, but was not in the context"
            else:
                mark, note = click.style("✓", fg="green"), "verified"
            click.echo(
                f"  {mark} "
                + place(c.path, c.start_line, c.end_line if c.end_line != c.start_line else None)
                + f"  {note}"
            )
    else:
        click.echo(click.style("\n(no path:line citations in the answer)", fg="yellow"))
    for c in answer.commit_citations:
        if not c.valid:
            mark, note = click.style("✗", fg="red"), "INVALID — no such commit in HEAD's history"
        elif not c.shown:
            mark, note = click.style("?", fg="yellow"), f"exists, but was not shown: {shown(c.subject)}"
        else:
            mark, note = click.style("✓", fg="green"), f"verified: {shown(c.subject)}"
        click.echo(f"  {mark} commit {c.sha[:10]}  {note}")
    if answer.invalid_citations:
        click.echo(
            f"{len(answer.invalid_citations)} cited location(s) do not exist in the "
            "repository — do not trust those parts of the answer.",
            err=True,
        )
    click.echo(click.style("\n" + _usage_line(answer), dim=True))


def _usage_line(answer) -> str:
    """The model, the context and the request's tokens: reported by the server or counted
    here, and how much of the prompt the server reused (reported or estimated) when known."""
    u = answer.usage
    parts = [f"{answer.model}: {answer.pack.used_tokens:,} context tokens"]
    if u is not None:
        counted = answer.usage_source == "counted"
        parts.append(
            f"{u.prompt_tokens:,} prompt + {u.completion_tokens:,} completion tokens"
            + (" (counted here: the server reported none)" if counted else "")
        )
        if u.cache_source:
            how = "reported by the server" if u.cache_source == "server" else "estimated"
            parts.append(
                f"prompt {u.cached_tokens:,} reused + {u.processed_tokens:,} processed ({how})"
            )
    s = answer.session
    if s is not None and s.turns:
        turn = s.turns[-1]
        parts.append(
            f"session {s.name} question {len(s.turns)}"
            + (" (started afresh)" if turn.started_afresh and len(s.turns) > 1 else "")
            + (f", {turn.new_items} new context items" if not turn.started_afresh else "")
        )
    parts.append(f"{answer.latency_s:.1f}s")
    return ", ".join(parts)


def _print_locations(answer) -> None:
    if not answer.locations:
        click.echo("Nothing found — try other words or --focus a file.")
        return
    click.echo(click.style(f"Most relevant locations for: {answer.question}", bold=True))
    for n, loc in enumerate(answer.locations, 1):
        where = place(loc.path, loc.start_line, loc.end_line if loc.end_line != loc.start_line else None)
        click.echo(
            click.style(f"{n:3}. {where}", bold=True)
            + shown(f"  {loc.symbol or '<module>'}  [{'; '.join(loc.reasons)}]")
        )
        for line in loc.snippet.splitlines():
            click.echo("       " + content(line))


def _print_commits(answer) -> None:
    if not answer.commits:
        return
    click.echo(click.style("\nPast commits like this question:", bold=True))
    for c in answer.commits:
        files = ", ".join(c.files)
        click.echo(shown(f"  {c.sha[:10]} {c.date} {c.subject}" + (f"  [{files}]" if files else "")))


COMMANDS = [context_cmd, ask_cmd]
