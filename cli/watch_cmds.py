"""`repoctx index watch`: keep the index fresh in the background."""

from __future__ import annotations

import functools
import signal
import sys
import time
from pathlib import Path

import click

from .common import (
    echo_json,
    handle_errors,
    index_dir_option,
    json_option,
    make_config,
    trusts_repo_config,
)


class StatusLine:
    """The watcher's one-line status on stderr: redrawn in place on a terminal, one line per
    build otherwise (the detached watcher's log)."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.tty = sys.stderr.isatty()

    def __call__(self, ev) -> None:
        if self.quiet and ev.kind == "build":
            return
        stamp = time.strftime("%H:%M:%S", time.localtime(ev.at))
        if ev.kind == "build":
            vec = f", {ev.embedded} chunks embedded" if ev.embedded else ""
            line = (
                f"[{stamp}] build {ev.number}: {ev.files_parsed} files parsed, {ev.files_deleted} "
                f"removed{vec} in {ev.seconds:.2f}s ({ev.events} events) — generation {ev.generation}"
            )
            self._write(line, keep=not self.tty)
        else:
            self._write(f"[{stamp}] {ev.kind.replace('_', ' ')}: {ev.message}", keep=True)

    def _write(self, line: str, keep: bool) -> None:
        if self.tty:
            sys.stderr.write("\r\033[K" + line + ("\n" if keep else ""))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def _fmt_time(epoch: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch)) if epoch else "-"


@click.command("watch")
@click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=Path), default=".")
@click.option("--detach", is_flag=True, help="Run in the background (log: <index>/watch.log).")
@click.option("--foreground", is_flag=True, help="Run in this terminal (the default).")
@click.option("--status", "show_status", is_flag=True, help="Show whether a watcher is running.")
@click.option("--stop", is_flag=True, help="Stop the running watcher.")
@click.option(
    "--no-embed", is_flag=True, help="Keep the graph and lexical index fresh, not vectors."
)
@click.option("--embed-model", default=None, help="Embedding model (default: as `index build`).")
@click.option(
    "--debounce",
    "debounce_ms",
    type=click.IntRange(10, 60_000),
    default=200,
    show_default=True,
    help="Build after this many ms without a change.",
)
@click.option(
    "--max-latency",
    "max_latency_ms",
    type=click.IntRange(10, 600_000),
    default=2000,
    show_default=True,
    help="…but at most this many ms after the first change.",
)
@click.option("--quiet", "-q", is_flag=True, help="Report only errors and lock waits.")
@index_dir_option
@json_option
@handle_errors
def watch_cmd(
    path: Path,
    detach: bool,
    foreground: bool,
    show_status: bool,
    stop: bool,
    no_embed: bool,
    embed_model: str | None,
    debounce_ms: int,
    max_latency_ms: int,
    quiet: bool,
    index_dir: Path | None,
    as_json: bool,
) -> None:
    """Watch PATH and keep its index up to date: every burst of changes (an edit, a branch
    switch) becomes one incremental build. Waits for a manual `index build` rather than
    failing; readers are never blocked."""
    from indexer import LOG_FILE, start_detached, stop_watcher, watch_status

    if sum((detach, foreground, show_status, stop)) > 1:
        raise click.UsageError("Use one of --detach, --foreground, --status and --stop.")
    config = make_config(path, index_dir=index_dir, embed_model=embed_model)
    if show_status:
        _print_status(watch_status(config), as_json)
        return
    if stop:
        res = stop_watcher(config)
        if as_json:
            echo_json(res)
        elif not res.was_running:
            click.echo(f"No watcher is running for {config.index_path}.")
        else:
            how = " (killed: it ignored SIGTERM)" if res.forced else ""
            click.echo(f"Stopped watcher process {res.pid}{how}.")
        return
    if detach:
        argv = [
            sys.executable,
            "-c",
            "from cli.main import main; main()",
            "index",
            "watch",
            str(config.root),
            "--foreground",
            "--index-dir",
            str(config.index_path),
            "--debounce",
            str(debounce_ms),
            "--max-latency",
            str(max_latency_ms),
        ]
        argv += ["--no-embed"] if no_embed else []
        argv += ["--embed-model", embed_model] if embed_model else []
        argv += ["--quiet"] if quiet else []
        argv += ["--trust-repo-config"] if trusts_repo_config() else []
        pid = start_detached(config, argv)
        if as_json:
            echo_json(
                {
                    "pid": pid,
                    "index_dir": str(config.index_path),
                    "log": str(config.index_path / LOG_FILE),
                }
            )
        else:
            click.echo(
                f"Watching {config.root} in the background (process {pid}); log: "
                f"{config.index_path / LOG_FILE}. Stop: `repoctx index watch --stop`."
            )
        return
    _run_foreground(
        path, config, index_dir, embed_model, no_embed, debounce_ms, max_latency_ms, quiet
    )


def _run_foreground(
    path, config, index_dir, embed_model, no_embed, debounce_ms, max_latency_ms, quiet
) -> None:
    from indexer import Watcher, WatchSettings

    settings = WatchSettings(
        debounce_s=debounce_ms / 1000,
        max_latency_s=max(max_latency_ms, debounce_ms) / 1000,
        embed=not no_embed,
    )
    watcher = Watcher(
        config,
        settings,
        on_event=StatusLine(quiet),
        reload_config=functools.partial(make_config, path, trust_repo=trusts_repo_config(),
                                        index_dir=index_dir, embed_model=embed_model),
    )

    def on_signal(signum, _frame) -> None:
        if watcher.stopping:  # asked twice: abandon the build (the next run finishes it)
            raise SystemExit(128 + signum)
        watcher.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    click.echo(
        f"Watching {config.root} (index {config.index_path}, "
        f"{'graph only' if no_embed else 'graph and vectors'}, debounce {debounce_ms} ms); "
        "Ctrl-C stops.",
        err=True,
    )
    watcher.run()
    click.echo(f"Stopped after {watcher.builds} builds.", err=True)


def _print_status(st, as_json: bool) -> None:
    if as_json:
        echo_json(st)
        return
    if not st.running:
        click.echo(f"No watcher is running for {st.index_dir} (index generation {st.generation}).")
        return
    click.echo(
        f"Watcher process {st.pid} running since {_fmt_time(st.since)}: {st.state}"
        + (" (index fresh)" if st.fresh else "")
    )
    lb = st.last_build
    if lb:
        click.echo(
            f"Last build {_fmt_time(lb['at'])}: {lb['files_parsed']} files parsed, "
            f"{lb['files_deleted']} removed in {lb['seconds']:.2f}s; {st.builds} builds so far"
        )
    if st.pending_since:
        click.echo(f"Changes pending since {_fmt_time(st.pending_since)}")
    click.echo(f"Generation {st.generation}; vectors {'on' if st.embed else 'off'}")
    if st.last_error:
        click.echo(f"Last error: {st.last_error}")
