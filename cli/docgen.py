"""The command reference, docs/cli.md, generated from the click tree: every command's `--help`
as click formats it. `python -m cli.docgen > docs/cli.md`; tests/test_docs.py fails when the
file is stale."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import click

from .main import cli

PROG = "repoctx"
#: Fixed, so the output is the same whatever terminal runs the generator.
WIDTH = 100
HEADER = f"""\
# Command reference

Generated from `{PROG} --help` by `python -m cli.docgen > docs/cli.md` — do not edit by hand;
`tests/test_docs.py` fails when this file is out of date.
"""


def walk(
    command: click.Command, name: str = PROG, parent: click.Context | None = None
) -> Iterator[tuple[click.Context, click.Command]]:
    """Every command under ``command``, itself first, depth first in click's own order."""
    settings = {**command.context_settings, "terminal_width": WIDTH, "max_content_width": WIDTH}
    ctx = click.Context(command, info_name=name, parent=parent, **settings)
    yield ctx, command
    if isinstance(command, click.Group):
        for sub in command.list_commands(ctx):
            child = command.get_command(ctx, sub)
            if child is not None and not child.hidden:
                yield from walk(child, sub, ctx)


def render(root: click.Command = cli) -> str:
    """docs/cli.md: a table of contents, then each command's usage and help."""
    entries = list(walk(root))
    toc = [f"- [`{ctx.command_path}`](#{_anchor(ctx.command_path)})" for ctx, _ in entries]
    parts = [HEADER, "\n".join(toc) + "\n"]
    for ctx, command in entries:
        text = command.get_help(ctx).rstrip()
        parts.append(f"## `{ctx.command_path}`\n\n```text\n{text}\n```\n")
    return "\n".join(parts)


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading made of a command path (words and spaces)."""
    return "-".join(heading.lower().split())


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
