"""`repoctx serve --mcp`: the index's read tools for any MCP client, over stdio or HTTP."""

from __future__ import annotations

from pathlib import Path

import click

from .common import config_for, handle_errors, index_dir_option


def parse_http(value: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[::1]:PORT`` or a bare ``PORT`` (on 127.0.0.1)."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", value
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or int(port) > 65535:
        raise click.BadParameter(
            f"{value!r} is not HOST:PORT — e.g. 127.0.0.1:8765 (port 0 picks a free one).",
            param_hint="--http",
        )
    return host, int(port)


@click.command("serve")
@click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=Path), default=".")
@click.option(
    "--mcp",
    "mcp",
    is_flag=True,
    help="Speak the Model Context Protocol (the only protocol for now; required).",
)
@click.option(
    "--http",
    "http",
    default=None,
    metavar="HOST:PORT",
    help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio "
    "(loopback only; port 0 picks a free one).",
)
@click.option(
    "--no-refresh",
    is_flag=True,
    help="Answer from the index as built; do not watch the tree or re-index changes.",
)
@click.option(
    "--lock-wait",
    type=float,
    default=0.5,
    show_default=True,
    help="Seconds a refresh waits for another writer before answering from the index as is.",
)
@click.option(
    "--call-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds one tool call may take before it is answered with an error (other calls "
    "are answered meanwhile).",
)
@index_dir_option
@handle_errors
def serve_cmd(
    path: Path,
    mcp: bool,
    http: str | None,
    no_refresh: bool,
    lock_wait: float,
    call_timeout: float,
    index_dir: Path | None,
) -> None:
    """Serve the index of PATH to MCP clients (Claude Code, Cursor, …): search_code,
    find_symbol, find_references, get_context, read_span and index_status. Read-only; the index
    is refreshed incrementally when files change. Logs go to stderr (stdout is the protocol)."""
    if not mcp:
        raise click.UsageError("Pass --mcp: `repoctx serve --mcp [PATH]`.")
    import anyio

    from .mcp_protocol import bind_loopback, create_server, serve_http, serve_stdio
    from .mcp_server import RepoctxMCP, ServeOptions

    config = config_for(path, index_dir)
    address = parse_http(http) if http is not None else None
    options = ServeOptions(
        refresh=not no_refresh,
        lock_wait_s=lock_wait,
        call_timeout_s=call_timeout,
        # A call waiting on another's refresh must still answer within its own time limit.
        refresh_wait_s=min(ServeOptions().refresh_wait_s, call_timeout / 2),
    )
    sock = bind_loopback(*address) if address is not None else None
    with RepoctxMCP(config, options) as service:
        fresh = "watching for changes" if options.refresh else "no automatic refresh"
        if sock is None:
            click.echo(f"repoctx MCP server on stdio for {config.root} ({fresh})", err=True)
            anyio.run(serve_stdio, create_server(service))
            return

        def ready(url: str) -> None:
            click.echo(f"repoctx MCP server at {url} for {config.root} ({fresh})", err=True)

        anyio.run(lambda: serve_http(create_server(service), sock, on_ready=ready))


COMMANDS = [serve_cmd]
