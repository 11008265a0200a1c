"""`repoctx` command line. Command groups live in their own modules; heavy libraries are
imported inside the commands that need them so read commands start fast."""

from __future__ import annotations

import os

import click

from . import agent_cmds, context_cmds, index_cmds, query_cmds, serve_cmds
from .common import trust_option


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="repoctx")
@trust_option
def cli() -> None:
    """repoctx — index a repository and retrieve precise, budgeted context from it."""


cli.add_command(index_cmds.index)
for command in query_cmds.COMMANDS:
    cli.add_command(command)
for c in serve_cmds.COMMANDS:
    cli.add_command(c)
for c in context_cmds.COMMANDS:
    cli.add_command(c)
for c in agent_cmds.COMMANDS:
    cli.add_command(c)


def main() -> None:
    # LanceDB's Rust logger warns on stderr about routine events ("No existing dataset ...,
    # it will be created"); errors still show. LANCEDB_LOG=warn (or debug) brings them back.
    os.environ.setdefault("LANCEDB_LOG", "error")
    cli()
