"""`repoctx index …`: build and inspect the index."""

from __future__ import annotations

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


@click.group()
def index() -> None:
    """Build and inspect the index."""


@index.command("build")
@click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=Path), default=".")
@click.option("--full", is_flag=True, help="Rebuild everything from scratch.")
@click.option("--jobs", "-j", type=int, default=None, help="Parser processes (default: one per core).")
@click.option("--max-file-bytes", type=int, default=None, help="Skip files larger than this (default 1 MB).")
@click.option("--wait", "wait_s", type=float, default=0.0, help="Seconds to wait for another writer.")
@click.option("--no-embed", is_flag=True, help="Build the graph and lexical index only (no vectors).")
@click.option("--embed-model", default=None,
              help="sentence-transformers model name or path (default all-MiniLM-L6-v2, offline).")
@click.option("--reembed", is_flag=True, help="Drop all vectors and embed again (after a model change).")
@click.option("--engine", type=click.Choice(["local", "ray"]), default=None,
              help="Where parsing and embedding run: this machine's cores (default) or a Ray cluster.")
@click.option("--ray-address", default=None,
              help="Ray cluster to use with --engine ray (`auto`, `ray://head:10001`; env "
                   "RAY_ADDRESS); none starts a local Ray for the build.")
@click.option("--vectors-uri", default=None,
              help="Where the vector table lives: a directory or any LanceDB URI "
                   "(`s3://bucket/prefix`). Credentials and endpoint come from the environment "
                   "(AWS_*) or `storage_options` in ~/.config/repoctx/config.toml, never from "
                   "flags.")
@click.option("--quiet", "-q", is_flag=True, help="No progress on stderr.")
@index_dir_option
@json_option
@handle_errors
def build_cmd(
    path: Path, full: bool, jobs: int | None, max_file_bytes: int | None, wait_s: float,
    no_embed: bool, embed_model: str | None, reembed: bool, engine: str | None,
    ray_address: str | None, vectors_uri: str | None,
    quiet: bool, index_dir: Path | None, as_json: bool,
) -> None:
    """Build or update the index of PATH (incremental unless --full): the symbol graph, the
    lexical index, then vectors for new chunks (resumable; reused by content hash)."""
    from indexer import Index, stats_dict

    config = make_config(path, index_dir=index_dir, jobs=jobs, max_file_bytes=max_file_bytes,
                         embed_model=embed_model, engine=engine, ray_address=ray_address,
                         vectors_uri=vectors_uri)
    progress = ProgressLine(quiet=quiet)
    notices: list[str] = []

    def notify(line: str) -> None:  # e.g. a damaged index set aside: said at once, on stderr
        notices.append(line)
        progress.finish()
        if not quiet:
            click.echo(line, err=True)

    stats = Index(config).build(full=full, progress=progress, wait_lock=wait_s,
                                embed=not no_embed, reembed=reembed, notify=notify)
    progress.finish()
    if as_json:
        echo_json({"index_dir": str(config.index_path), **stats_dict(stats), "notices": notices})
        return
    langs = ", ".join(f"{k} {v}" for k, v in sorted(stats.by_language.items(), key=lambda kv: -kv[1]))
    skipped = ", ".join(f"{k} {v}" for k, v in sorted(stats.skipped.items())) or "none"
    # files_total = files_parsed + files_unchanged; every other file found is under "Skipped".
    click.echo(
        f"Indexed {stats.files_total} files ({langs or 'none'}) in {stats.seconds:.2f}s: "
        f"{stats.files_parsed} parsed by this build, {stats.files_unchanged} unchanged; "
        f"{stats.files_deleted} removed."
    )
    click.echo(
        f"{stats.symbols} symbols, {stats.references} references, "
        f"{stats.resolved_pct:.1f}% resolved ({stats.ambiguous} ambiguous); "
        f"{stats.files_with_errors} files with syntax errors."
    )
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(stats.by_kind.items())) or "none"
    click.echo(f"By kind: {kinds}.")
    click.echo(f"Skipped (not indexed): {skipped}.")
    if stats.embedding:
        e = stats.embedding
        click.echo(
            f"Vectors ({e['model']}): {e['embedded']} chunks embedded, {e['reused']} reused, "
            f"{e['removed']} removed in {e['seconds']:.1f}s; coverage {100 * e['coverage']:.1f}% "
            f"of {e['chunks']} chunks."
        )
    for p, err in list(stats.failed.items())[:10]:
        click.echo(f"  failed: {shown(p)}: {shown(str(err))}", err=True)
    click.echo(f"Index: {config.index_path} (generation {stats.generation})")


@index.command("status")
@click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=Path), default=".")
@index_dir_option
@json_option
@handle_errors
def status_cmd(path: Path, index_dir: Path | None, as_json: bool) -> None:
    """Show what the index holds and what changed on disk since it was built."""
    from indexer import Index

    st = Index(make_config(path, index_dir=index_dir)).status()
    if as_json:
        echo_json(st)
        return
    click.echo(f"Index: {st['index_dir']} (generation {st['generation']}, schema {st['schema_version']})")
    b = st.get("build")
    if b and b["running"]:
        click.echo(f"Build in progress (pid {b['pid']}, phase {b['phase']}): {b['ready']}")
    elif b:
        click.echo(f"Build stopped during phase {b['phase']} — {b['fix']}")
    click.echo(
        f"{st['files']} files, {st['symbols']} symbols, {st['references']} references "
        f"({st['resolved_pct']:.1f}% resolved)"
    )
    if st.get("by_kind"):
        click.echo("By kind: " + ", ".join(f"{k} {v}" for k, v in st["by_kind"].items()) + "; by language: "
                   + ", ".join(f"{k} {v}" for k, v in st["by_language"].items()))
    pend = st["pending"]
    click.echo(
        f"Pending changes: {pend['changed']} changed, {pend['added']} added, {pend['deleted']} deleted"
        + (" — run `repoctx index build`" if any(pend.values()) else "")
    )
    if st.get("vectors"):
        v = st["vectors"]
        if v.get("state") == "missing":
            click.echo(f"Vectors: {v['model']} at {v['uri']}: missing — {v['fix']}")
        elif v.get("state") == "damaged":
            click.echo(f"Vectors: {v['model']} at {v['uri']}: damaged ({v['damage']}) — {v['fix']}")
        else:
            click.echo(f"Vectors: {v['model']} at {v['uri']}, {100 * v['coverage']:.1f}% of "
                       f"{v['chunks']} chunks" + (f" — {v['fix']}" if v.get("fix") else ""))
    else:
        click.echo("Vectors: none (built with --no-embed) — `repoctx index build` embeds the chunks")
    h = st.get("history") or {}
    click.echo(f"History: {h.get('commits', 0)} commits to {h.get('head', '')[:10] or '-'} ({h.get('state')})"
               + (f" — {h['note']}" if h.get("note") else ""))
    if st.get("last_build"):
        lb = st["last_build"]
        click.echo(f"Last build: {lb.get('seconds', 0):.2f}s, {lb.get('files_parsed', 0)} files parsed")
    g = st.get("graph") or {}
    if g.get("file"):
        extra = "".join(
            f"; {_mb(g[key])} {what}" for key, what in (
                ("previous_bytes", "previous generation (kept for readers until the next --full)"),
                ("damaged_bytes", "damaged graph set aside (delete graph.db.damaged-* when done)"),
            ) if g.get(key))
        click.echo(f"Graph: {g['file']}, {_mb(g['bytes'])}{extra}")


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


from .snapshot_cmds import pull_cmd, push_cmd  # noqa: E402
from .verify_cmds import verify_cmd  # noqa: E402
from .watch_cmds import watch_cmd  # noqa: E402

index.add_command(watch_cmd)
index.add_command(verify_cmd)
index.add_command(push_cmd)
index.add_command(pull_cmd)
