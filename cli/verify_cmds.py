"""`repoctx index verify`: check the index against the tree and itself, and repair it."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from indexer import shown

from .common import (
    ProgressLine,
    echo_json,
    handle_errors,
    index_dir_option,
    json_option,
    make_config,
)


@click.command("verify")
@click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=Path), default=".")
@click.option(
    "--repair",
    "do_repair",
    is_flag=True,
    help="Fix what is found through the incremental build path, then verify again.",
)
@click.option(
    "--wait",
    "wait_s",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds --repair waits for another writer.",
)
@index_dir_option
@json_option
@handle_errors
def verify_cmd(
    path: Path, do_repair: bool, wait_s: float, index_dir: Path | None, as_json: bool
) -> None:
    """Check the index against the tree and itself (files, references, lexical index, vectors).
    Exits with status 1 while problems remain."""
    from indexer import repair, verify

    config = make_config(path, index_dir=index_dir)
    if do_repair:
        progress = ProgressLine(quiet=as_json)
        res = repair(config, wait_lock=wait_s, progress=progress)
        progress.finish()
        if as_json:
            echo_json(
                {
                    "before": _report_dict(res.before),
                    "actions": res.actions,
                    "after": _report_dict(res.after),
                }
            )
        else:
            _print_report(res.before, "Before repair")
            for action in res.actions:
                click.echo(f"  repaired: {shown(action)}")
            _print_report(res.after, "After repair")
        ok = res.after.ok
    else:
        report = verify(config)
        if as_json:
            echo_json(_report_dict(report))
        else:
            _print_report(report, "Index")
        ok = report.ok
    if not ok:
        sys.exit(1)


def _report_dict(report) -> dict:
    return {
        "ok": report.ok,
        "index_dir": report.index_dir,
        "generation": report.generation,
        "issues": report.issues,
        "notes": report.notes,
        "checked": report.checked,
        "vectors_checked": report.vectors_checked,
        "seconds": report.seconds,
    }


def _print_report(report, title: str) -> None:
    counts = ", ".join(f"{n} {k}" for k, n in report.checked.items())
    vec = "" if report.vectors_checked else " (vectors not checked)"
    n = len(report.issues)
    state = "OK" if report.ok else f"{n} kind{'s' if n != 1 else ''} of problem{'s' if n != 1 else ''}"
    where = f"generation {report.generation}" if report.generation else "the graph could not be read"
    checked = f"; checked {counts}" if counts else ""
    click.echo(f"{title}: {state} — {where}{checked}{vec}.")
    for issue in report.issues:
        # examples are file names from the tree: shown() keeps each issue on its line
        eg = f" (e.g. {shown(', '.join(issue.examples[:3]))})" if issue.examples else ""
        click.echo(f"  {issue.kind}: {issue.count} — {issue.message}{eg}; --repair: {issue.repair}")
    for note in report.notes:
        click.echo(f"  note: {note.count} {note.message}; --repair: {note.repair}")
