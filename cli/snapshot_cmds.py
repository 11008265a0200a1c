"""`repoctx index push` / `repoctx index pull`: share index snapshots by commit."""

from __future__ import annotations

from pathlib import Path

import click

from .common import (
    ProgressLine,
    echo_json,
    handle_errors,
    index_dir_option,
    json_option,
    make_config,
)

_CREDENTIALS = (
    "Credentials and endpoints come only from the environment (AWS_ACCESS_KEY_ID, "
    "AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL, ...) or the `storage_options` table "
    "of ~/.config/repoctx/config.toml — never from flags."
)
_PATH = click.Path(exists=True, file_okay=False, path_type=Path)


class _Progress(ProgressLine):
    """Progress lines that name the unit of each snapshot phase (vector rows, else files)."""

    def __call__(self, event) -> None:
        self.unit = "rows" if event.phase == "vectors" else "files"
        super().__call__(event)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


@click.command("push", epilog=_CREDENTIALS)
@click.argument("path", type=_PATH, default=".")
@click.option("--to", "to", metavar="URI", default=None,
              help="Snapshot location: a directory or s3://bucket/prefix "
                   "(default: `snapshot_uri` from the config or REPOCTX_SNAPSHOT_URI).")
@click.option("--allow-dirty", is_flag=True,
              help="Push even if the tree has uncommitted changes (recorded in the manifest).")
@click.option("--quiet", "-q", is_flag=True, help="No progress on stderr.")
@index_dir_option
@json_option
@handle_errors
def push_cmd(
    path: Path, to: str | None, allow_dirty: bool, quiet: bool, index_dir: Path | None,
    as_json: bool,
) -> None:
    """Upload the index of PATH for its checked-out commit, so teammates and CI can
    `repoctx index pull` it instead of building. The index is brought up to date first;
    an earlier snapshot of the same commit is replaced."""
    from indexer import push

    config = make_config(path, index_dir=index_dir)
    progress = _Progress(quiet=quiet)
    out = push(config, to, allow_dirty=allow_dirty, progress=progress)
    progress.finish()
    if as_json:
        echo_json(out)
        return
    vectors = f", {out['vectors']['rows']} vectors ({out['embed_model']})" if out["vectors"] else ""
    click.echo(
        f"{'Replaced' if out['replaced'] else 'Pushed'} snapshot of {out['commit'][:12]}: "
        f"{out['files']} files, {out['symbols']} symbols, {out['chunks']} chunks{vectors}; "
        f"{_mb(out['bytes_uploaded'])} in {out['seconds']:.1f}s to {out['uri']}"
    )


@click.command("pull", epilog=_CREDENTIALS)
@click.argument("path", type=_PATH, default=".")
@click.option("--from", "from_", metavar="URI", default=None,
              help="Snapshot location (default: `snapshot_uri` from the config or "
                   "REPOCTX_SNAPSHOT_URI).")
@click.option("--commit", metavar="SHA", default=None,
              help="Pull this commit's snapshot (default: that of HEAD's nearest ancestor).")
@click.option("--embed-model", default=None,
              help="Embedding model of this index; must be the snapshot's (default all-MiniLM-L6-v2).")
@click.option("--list", "list_only", is_flag=True, help="List the snapshots there; pull nothing.")
@click.option("--quiet", "-q", is_flag=True, help="No progress on stderr.")
@index_dir_option
@json_option
@handle_errors
def pull_cmd(
    path: Path, from_: str | None, commit: str | None, embed_model: str | None, list_only: bool,
    quiet: bool, index_dir: Path | None, as_json: bool,
) -> None:
    """Replace the index of PATH with the snapshot of its nearest ancestor commit, then
    update it: only files that differ from that commit are parsed, and only chunks without
    a vector are embedded."""
    from indexer import list_snapshots, pull, snapshot_uri, storage_options

    config = make_config(path, index_dir=index_dir, embed_model=embed_model)
    if list_only:
        snaps = list_snapshots(snapshot_uri(config, from_, "--from"), storage_options(config))
        if as_json:
            echo_json(snaps)
            return
        for m in snaps:
            click.echo(f"{m['commit'][:12]}  {m['created']}  {m['files']} files  "
                       f"{m.get('embed_model') or 'no vectors'}")
        return
    progress = _Progress(quiet=quiet)
    out = pull(config, from_, commit=commit, progress=progress)
    progress.finish()
    if as_json:
        echo_json(out)
        return
    n = out["distance"]
    behind = "" if n is None else f", {n} commit{'' if n == 1 else 's'} behind HEAD"
    emb = out["embedding"]
    vectors = f", {emb['embedded']} chunks embedded" if emb else ""
    secs = out["seconds"]
    click.echo(
        f"Pulled snapshot of {out['commit'][:12]}{behind}: {_mb(out['bytes_downloaded'])} in "
        f"{secs['download']:.1f}s; {out['files_adopted']} files adopted, "
        f"{out['files_parsed']} parsed{vectors} in {secs['adopt'] + secs['build']:.1f}s."
    )
