"""Read commands over the graph: `symbol`, `refs`, `callers`, `callees`."""

from __future__ import annotations

from pathlib import Path

import click

from indexer import Index, content, place, shown

from .common import config_for, echo_json, handle_errors, index_dir_option, json_option, root_option


def open_index(root: Path, index_dir: Path | None) -> Index:
    """The index that serves ``root``, connected: a missing or damaged one is said here, where
    the command starts."""
    return Index.open(config_for(root, index_dir))


#: Phases of a running build during which each read may see part of the answer.
_PARTIAL = {"symbol": ("parse",), "refs": ("parse", "resolve")}


def building(index: Index, what: str) -> dict | None:
    """A build running on this index in a phase where ``what`` may be incomplete: said once on
    stderr (results stay on stdout) and returned for --json."""
    b = index.build_progress()
    if b is None or not b["running"] or b["phase"] not in _PARTIAL[what]:
        return None
    click.echo(f"Note: a build is running (phase {b['phase']}): {b['ready']} — results may be "
               "incomplete until it ends.", err=True)
    return b


def read_options(f):
    f = json_option(f)
    f = index_dir_option(f)
    f = root_option(f)
    return handle_errors(f)


@click.command("symbol")
@click.argument("name")
@click.option("--kind", "-k", default=None, help="Only definitions of this kind (class, function, …).")
@click.option("--limit", "-n", default=50, show_default=True)
@read_options
def symbol_cmd(name: str, kind: str | None, limit: int, root: Path, index_dir: Path | None, as_json: bool) -> None:
    """Find definitions by qualified name, name or fuzzy prefix."""
    from retrieval.symbols import find_symbols

    index = open_index(root, index_dir)
    hits = find_symbols(index, name, kind, limit)
    build = building(index, "symbol")
    if as_json:
        echo_json({"generation": index.graph.generation(), "symbols": hits,
                   **({"build": build} if build else {})})
        return
    if not hits:
        raise click.ClickException(f"No symbol matches {name!r} — try a shorter prefix.")
    for h in hits:
        # shown(): a name with a newline or an escape sequence stays one visible line.
        click.echo(shown(f"{h.path}:{h.start_line}  {h.kind:9} {h.qualname}")
                   + ("  [stale]" if h.stale else ""))
        if h.signature:
            click.echo(f"    {shown(h.signature)}")


@click.command("refs")
@click.argument("name")
@click.option("--limit", "-n", default=500, show_default=True)
@read_options
def refs_cmd(name: str, limit: int, root: Path, index_dir: Path | None, as_json: bool) -> None:
    """References to a definition, with enclosing symbol and confidence."""
    from retrieval.symbols import references_to

    index = open_index(root, index_dir)
    targets, refs = references_to(index, name, limit=limit)
    build = building(index, "refs")
    if as_json:
        echo_json({"generation": index.graph.generation(), "targets": targets, "references": refs,
                   **({"build": build} if build else {})})
        return
    click.echo(f"{len(refs)} references to " + shown(", ".join(t.qualname for t in targets[:5]))
               + (" …" if len(targets) > 5 else ""))
    for r in refs:
        click.echo(shown(f"{r.path}:{r.line}  {r.kind:7} in {r.enclosing or '<module>'}  "
                         f"({r.resolution}, {r.confidence:.2f})"))


def _edge_command(name: str, doc: str, fn_name: str) -> click.Command:
    @click.command(name, help=doc)
    @click.argument("symbol")
    @click.option("--limit", "-n", default=200, show_default=True)
    @read_options
    def command(symbol: str, limit: int, root: Path, index_dir: Path | None, as_json: bool) -> None:
        from retrieval import symbols

        index = open_index(root, index_dir)
        targets, edges = getattr(symbols, fn_name)(index, symbol, limit)
        build = building(index, "refs")
        if as_json:
            echo_json({"generation": index.graph.generation(), "targets": targets, "edges": edges,
                       **({"build": build} if build else {})})
            return
        for e in edges:
            click.echo(shown(f"{e.symbol.path}:{e.symbol.start_line}  {e.symbol.qualname}  "
                             f"(call at {e.path}:{e.line}, {e.resolution}, {e.confidence:.2f})"))
        if not edges:
            click.echo(f"No {name} found for " + shown(", ".join(t.qualname for t in targets[:5])))

    return command


@click.command("search")
@click.argument("query")
@click.option("--mode", "-m", type=click.Choice(["hybrid", "semantic", "lexical"]), default="hybrid",
              show_default=True)
@click.option("-k", "k", default=10, show_default=True, help="Number of results.")
@click.option("--lang", default=None, help="Only this language (python, go, …).")
@click.option("--path", "path_glob", default=None, help="Only paths matching this glob (or prefix).")
@click.option("--kind", "kinds", multiple=True, metavar="KIND",
              help="Only files of this kind: code, docs or config (repeatable, or a comma list).")
@click.option("--history", "history", is_flag=True,
              help="List past commits similar to QUERY, with the files they changed.")
@read_options
def search_cmd(query: str, mode: str, k: int, lang: str | None, path_glob: str | None,
               kinds: tuple[str, ...], history: bool, root: Path, index_dir: Path | None,
               as_json: bool) -> None:
    """Search code, docs and configs by words or identifiers: lexical, semantic or both fused."""
    from indexer import KINDS
    from retrieval.search import Searcher

    kinds = tuple(dict.fromkeys(kd.strip() for arg in kinds for kd in arg.split(",") if kd.strip()))
    bad = [kd for kd in kinds if kd not in KINDS]
    if bad:
        raise click.BadParameter(f"{', '.join(bad)} is not one of {', '.join(KINDS)}",
                                 param_hint="--kind")

    index = open_index(root, index_dir)
    if history:
        _history_search(index, query, k, as_json)
        return
    searcher = Searcher(index)
    result = searcher.search(query, mode, k, lang=lang, path_glob=path_glob, kinds=kinds)
    for warning in result.warnings:  # also in --json, as "warnings"
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        echo_json(result)
        return
    for h in result.hits:
        srcs = ", ".join(f"{s}#{r}" for s, r in h.ranks.items())
        click.echo(click.style(place(h.path, h.start_line, h.end_line), bold=True)
                   + f"  {shown(h.symbol or '<module>')}  {h.score:.4f}  [{srcs}]"
                   + (f"  ({h.kind})" if h.kind != "code" else ""))
        for line in h.snippet.splitlines()[:4]:
            click.echo("    " + content(line))
    if not result.hits:
        click.echo("No results.")


def _history_search(index: Index, query: str, k: int, as_json: bool) -> None:
    """`search --history`: similar past commits (reachable from the indexed HEAD)."""
    from indexer import history_status
    from retrieval.history import similar_commits
    from retrieval.signals import SignalContext

    status = history_status(index.dir)
    if status["state"] != "ok":
        raise click.ClickException(
            f"No git history in the index ({status['state']}: {status['note'] or 'not built'}) — "
            "run `repoctx index build` in a git work tree with `history = true`."
        )
    hits = similar_commits(SignalContext(index), query, k)
    if as_json:
        echo_json({"query": query, "head": status["head"], "commits": hits})
        return
    for c in hits:
        click.echo(click.style(f"{c.sha[:10]}  {c.date[:10]}", bold=True) + f"  {shown(c.subject)}  "
                   f"({c.score:.2f}{'' if c.votes else ', no vote'})")
        more = c.files_total - len(c.files)
        for path in c.files[:8]:
            click.echo(f"    {shown(path)}")
        if more > 0 or len(c.files) > 8:
            click.echo(f"    … {c.files_total - min(8, len(c.files))} more files")
    if not hits:
        click.echo("No similar commits.")


COMMANDS = [
    search_cmd,
    symbol_cmd,
    refs_cmd,
    _edge_command("callers", "Definitions that call SYMBOL.", "callers"),
    _edge_command("callees", "What SYMBOL calls (resolved targets).", "callees"),
]
