"""Index snapshots shared by commit: ``index push`` uploads one, ``index pull`` fetches the nearest.

A snapshot of commit C lives under ``<uri>/<C>/``:

- ``graph.db.zst`` — a consistent copy of the SQLite graph (``Connection.backup``: the live
  database is in WAL mode, so copying its file could tear), zstd-compressed;
- ``vectors/`` — a LanceDB database whose ``chunks`` table copies the index's vectors (schema
  metadata included, so the model and dimension stay recorded);
- ``manifest.json`` — written last: a snapshot without one is an interrupted push and is ignored.

Pulling is only worth it if the following incremental build does little. After a clone every
mtime differs from the recorded one, so the builder would re-read and hash every file, and
with more than a quarter of a large tree "changed" it switches to a bulk load that re-resolves
every reference. ``adopt`` therefore re-stamps each file whose content hash still matches, and
the build then parses and embeds only what really differs from the snapshot's commit.

Credentials never reach a snapshot: the manifest records no URI and no local path, and the
copied graph has its root and vectors location cleared.

Size: push, pull and adopt share the manifest format and its ordering guarantee (the manifest is
written last).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from indexer.build import build
from indexer.config import Config
from indexer.errors import RepoctxError
from indexer.graph import store
from indexer.graph.generations import install
from indexer.locations import (
    check_uri,
    filesystem,
    is_remote,
    record_vectors_uri,
    storage_options,
    vectors_uri,
)
from indexer.lock import WriteLock
from indexer.models import Progress
from indexer.parse.worker import content_hash
from indexer.safety.denylist import denied_by_default
from indexer.safety.gitsafe import git_env
from indexer.safety.nofollow import open_regular
from indexer.vectors.damage import exhaustion_errno, first_line, table_missing, table_problem
from indexer.vectors.table import TABLE, open_vectors

FORMAT = 1
MANIFEST = "manifest.json"
GRAPH = "graph.db.zst"
VECTORS = "vectors"
#: Commits of history searched for a snapshot before giving up.
MAX_WALK = 10_000
#: Rows per batch when copying a vector table: memory stays flat whatever the table size.
COPY_BATCH = 8192
_IO_CHUNK = 1 << 20
_DOWNLOAD_BUFFER = 16 << 20

ProgressFn = Callable[[Progress], None]


class SnapshotError(RepoctxError):
    """No usable index snapshot — run `repoctx index build` to build the index locally."""


# -- git -------------------------------------------------------------------------------------


def _git(root: Path, *args: str) -> str:
    try:
        proc = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, env=git_env(root)
        )
    except FileNotFoundError:
        raise SnapshotError("git is not installed — snapshots are keyed by git commit.") from None
    if proc.returncode != 0:
        raise SnapshotError(
            f"`git {' '.join(args)}` failed in {root}: {proc.stderr.strip()} — snapshots are "
            "keyed by commit, so the indexed tree must be a git checkout with at least one commit."
        )
    return proc.stdout


def head_commit(root: Path) -> str:
    return _git(root, "rev-parse", "--verify", "HEAD^{commit}").strip()


def _dirty_paths(config: Config) -> list[str]:
    """Uncommitted changes under the indexed root (the index directory itself excluded)."""
    top = Path(_git(config.root, "rev-parse", "--show-toplevel").strip()).resolve()
    # --ignore-submodules=dirty: a submodule's work tree is not indexed, and describing it would
    # start git in the submodule, under its own configuration (gitsafe lists the superproject's).
    out = _git(config.root, "status", "--porcelain=v1", "-z", "--untracked-files=normal",
               "--ignore-submodules=dirty", "--", ".")
    index = config.index_path.resolve()
    dirty: list[str] = []
    entries = iter(out.split("\0"))
    for entry in entries:
        if not entry:
            continue
        status, path = entry[:2], entry[3:]
        if "R" in status or "C" in status:
            next(entries, None)  # the rename's source path
        if not (top / path).resolve().is_relative_to(index):
            dirty.append(path)
    return dirty


def _ancestors(root: Path, limit: int = MAX_WALK) -> Iterator[str]:
    """HEAD and its ancestors, newest first, streamed: the walk stops at the first snapshot."""
    proc = subprocess.Popen(
        ["git", "rev-list", f"--max-count={limit}", "HEAD"],
        cwd=root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=git_env(root),
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            yield line.strip()
    finally:
        proc.kill()
        proc.wait()


def _distance(root: Path, commit: str) -> int | None:
    """Commits in HEAD's history that the snapshot's commit lacks; None if not an ancestor."""
    check = subprocess.run(["git", "merge-base", "--is-ancestor", commit, "HEAD"], cwd=root,
                           capture_output=True, env=git_env(root))
    if check.returncode != 0:
        return None
    return int(_git(root, "rev-list", "--count", f"{commit}..HEAD"))


# -- the snapshot store ------------------------------------------------------------------------


def snapshot_uri(config: Config, given: str | None = None, flag: str = "--to") -> str:
    """The snapshot location: ``given`` (a flag), else the configured ``snapshot_uri``."""
    uri = given or config.snapshot_uri
    if not uri:
        raise SnapshotError(
            f"No snapshot location — pass `{flag} URI` (a directory or s3://bucket/prefix) or "
            "set `snapshot_uri` in .repoctx.toml (or REPOCTX_SNAPSHOT_URI)."
        )
    return check_uri(uri.rstrip("/"), "snapshot URI", f"from {flag}" if given else "")


def _complete_commits(fs: Any, base: str) -> set[str]:
    """Commits under ``base`` whose snapshot has a manifest (one listing, one batched stat)."""
    import pyarrow.fs as pafs

    dirs = [
        info.path for info in fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
        if info.type == pafs.FileType.Directory
    ]
    infos = fs.get_file_info([f"{d}/{MANIFEST}" for d in dirs])
    return {d.rsplit("/", 1)[-1] for d, info in zip(dirs, infos, strict=True)
            if info.type == pafs.FileType.File}


#: A manifest is a few hundred bytes; a snapshot is someone else's bytes.
_MAX_MANIFEST = 1 << 20


def _regular(fs: Any, path: str) -> None:
    """Refuse, before opening it, anything but a regular file: a FIFO in a snapshot would
    block the pull for good (its type as the file system says it, links followed)."""
    import pyarrow.fs as pafs

    if fs.get_file_info(path).type != pafs.FileType.File:
        raise SnapshotError(
            f"{path} is not a regular file — push that commit again, or run `repoctx index "
            "build` to build the index locally."
        )


def _read_manifest(fs: Any, path: str) -> dict:
    _regular(fs, path)
    with fs.open_input_stream(path) as fh:
        raw = fh.read(_MAX_MANIFEST + 1)
    try:
        manifest = json.loads(raw.decode("utf-8")) if len(raw) <= _MAX_MANIFEST else None
    except (ValueError, RecursionError):
        manifest = None
    graph = manifest.get("graph") if isinstance(manifest, dict) else None
    vectors = manifest.get("vectors") if isinstance(manifest, dict) else None
    if not (isinstance(graph, dict) and isinstance(graph.get("sha256"), str)
            and isinstance(graph.get("compressed_bytes"), int)
            and (vectors is None or isinstance(vectors, dict))):
        raise SnapshotError(
            f"{path} is not a snapshot manifest this repoctx can read — push that commit "
            "again, or run `repoctx index build` to build the index locally."
        )
    return manifest


def list_snapshots(uri: str, options: dict[str, str] | None = None) -> list[dict]:
    """The manifests of every complete snapshot under ``uri``, newest first."""
    fs, base = filesystem(uri.rstrip("/"), options)  # filesystem() refuses credentials in it
    manifests = [_read_manifest(fs, f"{base}/{c}/{MANIFEST}") for c in _complete_commits(fs, base)]
    return sorted(manifests, key=lambda m: m.get("created", ""), reverse=True)


# -- push ------------------------------------------------------------------------------------


def push(
    config: Config,
    to: str | None = None,
    *,
    allow_dirty: bool = False,
    embedder=None,
    progress: ProgressFn | None = None,
) -> dict:
    """Upload the index of the checked-out commit to ``<uri>/<commit>/``, replacing an earlier
    snapshot of that commit. The index is first brought up to date (incrementally) with the
    model it was embedded with: a push publishes this index, it does not change its model."""
    t0 = time.perf_counter()
    uri = snapshot_uri(config, to, "--to")
    commit = head_commit(config.root)
    dirty = _dirty_paths(config)
    if dirty and not allow_dirty:
        shown = ", ".join(dirty[:5]) + (", …" if len(dirty) > 5 else "")
        raise SnapshotError(
            f"The tree has uncommitted changes ({shown}) — a snapshot is shared as commit "
            f"{commit[:12]}, so commit first, or pass --allow-dirty to push it anyway."
        )
    if not config.db_path.exists():
        raise SnapshotError(
            f"No index at {config.index_path} — run `repoctx index build` first; push uploads "
            "the index you built (with vectors if it has them)."
        )
    model = _recorded_model(config)
    if model and embedder is None:
        config = replace(config, embed_model=model)
    build(config, embed=bool(model), embedder=embedder, progress=progress)

    fs, base = filesystem(uri, storage_options(config))
    target = f"{base}/{commit}"
    replaced = fs.get_file_info(f"{target}/{MANIFEST}").size is not None
    if replaced:  # first, so an interrupted replacement never looks complete
        fs.delete_file(f"{target}/{MANIFEST}")
    fs.delete_dir_contents(target, missing_dir_ok=True)
    fs.create_dir(target, recursive=True)
    with tempfile.TemporaryDirectory(prefix=".push-", dir=config.index_path) as tmp:
        copy = Path(tmp) / "graph.db"
        with WriteLock(config.index_path).acquire():
            # Graph and vector version are captured together, while no build can commit.
            _backup_graph(store.graph_file(config.index_path) or config.db_path, copy)
            table, version = _open_vectors(config) if model else (None, None)
        graph = _upload_compressed(copy, fs, f"{target}/{GRAPH}")
        summary = _graph_summary(copy)
    vectors = None
    if table is not None:
        rows = _copy_table(table, version, f"{uri}/{commit}/{VECTORS}", config, progress)
        vectors = {"rows": rows, "source_version": version,
                   "bytes": _tree_bytes(fs, f"{target}/{VECTORS}")}
    manifest = {
        "format": FORMAT,
        "commit": commit,
        "parent_commits": _git(config.root, "rev-list", "--parents", "-n", "1", commit).split()[1:],
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "repoctx_version": _version(),
        "schema_version": store.SCHEMA_VERSION,
        "dirty": bool(dirty),
        "embed_model": summary["embed_model"],
        "embed_dim": summary["embed_dim"],
        "vectors": vectors,
        "graph": graph,
        "files": summary["files"],
        "symbols": summary["symbols"],
        "chunks": summary["chunks"],
    }
    with fs.open_output_stream(f"{target}/{MANIFEST}") as fh:  # last: marks the push complete
        fh.write(json.dumps(manifest, indent=2).encode("utf-8"))
    uploaded = graph["compressed_bytes"] + (vectors["bytes"] if vectors else 0)
    return {**manifest, "uri": f"{uri}/{commit}", "replaced": replaced,
            "bytes_uploaded": uploaded, "seconds": time.perf_counter() - t0}


def _recorded_model(config: Config) -> str | None:
    """The model the index was embedded with (None: no vectors)."""
    db = store.open_for_read(config.index_path)
    try:
        return store.get_meta(db, "embed_model") or None
    finally:
        db.conn.close()


def _open_vectors(config: Config) -> tuple[Any, int]:
    """The index's vector table and its current version."""
    import lancedb

    db = store.open_for_read(config.index_path)
    try:
        uri = vectors_uri(config, db.conn)
    finally:
        db.conn.close()
    table = lancedb.connect(uri, storage_options=storage_options(config)).open_table(TABLE)
    return table, table.version


def _backup_graph(db_path: Path, dest: Path) -> None:
    """A self-contained copy of the graph, without this machine's root or vectors location."""
    src = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    dst = sqlite3.connect(dest)
    try:
        src.backup(dst)
        dst.execute("PRAGMA journal_mode = DELETE")  # one file; the next writer turns WAL on
        with dst:
            dst.execute("UPDATE meta SET value = '' WHERE key IN ('root', 'vectors_uri')")
            # its `failed` messages may name local paths; the build after a pull rewrites it
            dst.execute("DELETE FROM meta WHERE key = 'last_build'")
    finally:
        src.close()
        dst.close()


def _graph_summary(path: Path) -> dict:
    """What the manifest says about a graph copy: its size and the model of its vectors."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        files, symbols, chunks = conn.execute(
            "SELECT (SELECT count(*) FROM files), "
            "(SELECT count(*) FROM symbols WHERE kind != 'module'), (SELECT count(*) FROM chunks)"
        ).fetchone()
        meta = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('embed_model', 'embed_dim')"))
    finally:
        conn.close()
    model = meta.get("embed_model") or None
    return {"files": files, "symbols": symbols, "chunks": chunks, "embed_model": model,
            "embed_dim": int(meta["embed_dim"]) if model else None}


def _upload_compressed(path: Path, fs: Any, dest: str) -> dict:
    # Arrow compresses by itself what it writes to a `.zst` path (compression="detect"):
    # say so explicitly rather than wrap the stream, which would compress twice.
    digest = hashlib.sha256()
    with open(path, "rb") as src, fs.open_output_stream(dest, compression="zstd") as out:
        while block := src.read(_IO_CHUNK):
            digest.update(block)
            out.write(block)
    return {"bytes": path.stat().st_size, "compressed_bytes": fs.get_file_info(dest).size,
            "sha256": digest.hexdigest()}


def _copy_table(
    table: Any, version: int | None, dest_uri: str, config: Config, progress: ProgressFn | None
) -> int:
    """Copy one version of a LanceDB table to ``<dest_uri>/chunks`` batch by batch, keeping
    the schema metadata (model, dimension). Returns the number of rows."""
    import lancedb
    import pyarrow as pa

    if version is not None:
        table.checkout(version)  # a build may have committed since: copy what was captured
    dataset = table.to_lance()
    total = dataset.count_rows()

    def batches() -> Iterator[pa.RecordBatch]:
        done = 0
        for batch in dataset.scanner(batch_size=COPY_BATCH).to_batches():
            done += batch.num_rows
            if progress:
                progress(Progress("vectors", done, total))
            yield batch

    reader = pa.RecordBatchReader.from_batches(table.schema, batches())
    dest = lancedb.connect(dest_uri, storage_options=storage_options(config))
    dest.create_table(TABLE, data=reader, schema=table.schema, mode="overwrite")
    return total


def _tree_bytes(fs: Any, path: str) -> int:
    import pyarrow.fs as pafs

    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return sum(i.size or 0 for i in infos if i.type == pafs.FileType.File)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("repoctx")
    except PackageNotFoundError:
        return "unknown"


# -- pull ------------------------------------------------------------------------------------


def pull(
    config: Config,
    from_: str | None = None,
    *,
    commit: str | None = None,
    embedder=None,
    progress: ProgressFn | None = None,
) -> dict:
    """Replace the local index with the snapshot of HEAD's nearest ancestor (or of ``commit``)
    and bring it up to date: only files that differ from that commit are parsed, and only
    chunks whose content has no vector yet are embedded."""
    uri = snapshot_uri(config, from_, "--from")
    head_commit(config.root)  # a git checkout with commits, or a clear error
    options = storage_options(config)
    fs, base = filesystem(uri, options)
    available = _complete_commits(fs, base)
    chosen = _explicit(config.root, commit, available, uri) if commit else _nearest(
        config.root, available, uri)
    manifest = _read_manifest(fs, f"{base}/{chosen}/{MANIFEST}")
    _check_compatible(manifest, embedder.name if embedder else None, config, uri)

    t0 = time.perf_counter()
    has_vectors = manifest.get("vectors") is not None
    with WriteLock(config.index_path).acquire(), \
            tempfile.TemporaryDirectory(prefix=".pull-", dir=config.index_path) as tmp:
        new_db = Path(tmp) / "graph.db"
        _download_graph(fs, f"{base}/{chosen}/{GRAPH}", new_db, manifest["graph"]["sha256"], uri)
        _install_vectors(config, f"{uri}/{chosen}/{VECTORS}" if has_vectors else None, progress)
        _swap_graph(new_db, config.index_path)
        if has_vectors:
            _index_vectors(config, manifest)
        t1 = time.perf_counter()
        db = store.open_for_write(config.index_path)
        try:
            with db.conn:
                store.set_meta(db, "root", str(config.root))
                record_vectors_uri(db.conn, config.vectors_uri or "")
            adopted = adopt(db.conn, config.root, progress)
        finally:
            db.conn.close()
    t2 = time.perf_counter()
    stats = build(config, embed=has_vectors, embedder=embedder, progress=progress)
    t3 = time.perf_counter()
    graph_bytes = manifest["graph"]["compressed_bytes"]
    return {
        "commit": chosen,
        "uri": f"{uri}/{chosen}",
        "distance": _distance(config.root, chosen),
        "bytes_downloaded": graph_bytes + (manifest["vectors"].get("bytes", 0) if has_vectors else 0),
        "seconds": {"download": t1 - t0, "adopt": t2 - t1, "build": t3 - t2},
        "files_adopted": adopted,
        "files_parsed": stats.files_parsed,
        "files_deleted": stats.files_deleted,
        "embedding": stats.embedding,
    }


def _nearest(root: Path, available: set[str], uri: str) -> str:
    if available:
        for sha in _ancestors(root):
            if sha in available:
                return sha
    others = f" (the {len(available)} there are of other commits)" if available else ""
    raise SnapshotError(
        f"No snapshot at {uri} for HEAD or its last {MAX_WALK} ancestors{others} — run "
        "`repoctx index build` to build the index locally (and `repoctx index push` to share it)."
    )


def _explicit(root: Path, commit: str, available: set[str], uri: str) -> str:
    """The snapshot ``commit`` names: any git revision, or a prefix of a snapshot's sha."""
    try:
        sha = _git(root, "rev-parse", "--verify", f"{commit}^{{commit}}").strip()
    except SnapshotError:  # not in the local history: maybe a prefix of a snapshot's commit
        sha = commit.lower()
    matches = sorted(c for c in available if c.startswith(sha))
    if len(matches) != 1:
        found = f"{len(matches)} snapshots at {uri} match" if matches else f"No snapshot at {uri} matches"
        raise SnapshotError(
            f"{found} commit {commit!r} — pass a longer sha, or leave out --commit to pull "
            "the snapshot of HEAD's nearest ancestor."
        )
    return matches[0]


def _check_compatible(manifest: dict, model: str | None, config: Config, uri: str) -> None:
    """Refuse, before any download, a snapshot this repoctx or this configuration cannot use."""
    where = f"{uri}/{manifest.get('commit', '?')}"
    if manifest.get("format") != FORMAT or manifest.get("schema_version") != store.SCHEMA_VERSION:
        raise SnapshotError(
            f"The snapshot at {where} was built by another repoctx schema "
            f"(format {manifest.get('format')}, schema {manifest.get('schema_version')}; this "
            f"repoctx uses format {FORMAT}, schema {store.SCHEMA_VERSION}) — run `repoctx index "
            "build` here, or push a new snapshot with this repoctx version."
        )
    theirs = manifest.get("embed_model")
    if manifest.get("vectors") is None or not theirs:
        return
    if model is None:
        from indexer.phases.semantic import canonical_model_name

        model = canonical_model_name(config.embed_model)
    if theirs != model:
        raise SnapshotError(
            f"The snapshot at {where} was embedded with {theirs!r}, but this index uses "
            f"{model!r} — set `embed_model = \"{theirs}\"` in .repoctx.toml (or pass "
            f"--embed-model {theirs}) to use it, or build locally with `repoctx index build`."
        )


def _download_graph(fs: Any, src: str, dest: Path, sha256: str, uri: str) -> None:
    digest = hashlib.sha256()
    _regular(fs, src)
    # Buffered: on object storage every read of an unbuffered stream is a ranged GET, and the
    # decompressor reads in 64 KB pieces (a 75 MB graph took 55 s through S3 that way).
    with fs.open_input_stream(src, compression="zstd", buffer_size=_DOWNLOAD_BUFFER) as inp, \
            open(dest, "wb") as out:
        while True:
            try:
                block = inp.read(_IO_CHUNK)
            except OSError as exc:  # not zstd, cut short: the snapshot's bytes, not our disk
                raise SnapshotError(
                    f"The graph at {src} cannot be read ({str(exc)[:200]}) — push that commit "
                    "again, or run `repoctx index build` to build the index locally."
                ) from exc
            if not block:
                break
            digest.update(block)
            out.write(block)
    if digest.hexdigest() != sha256:
        raise SnapshotError(
            f"The graph downloaded from {uri} does not match its manifest's sha256 (corrupted or "
            "replaced during the download) — pull again, or push that commit again."
        )


def _install_vectors(config: Config, src_uri: str | None, progress: ProgressFn | None) -> None:
    """Make the index's vector table a copy of the snapshot's (or drop it when the snapshot
    has none: the pulled graph knows nothing of its rows). A local table is staged beside the
    old one and renamed into place; a remote one is overwritten (a new Lance version)."""
    import lancedb

    dest = vectors_uri(config)
    options = storage_options(config)
    source = None
    if src_uri is not None:
        source = _open_source(src_uri, options)
    if is_remote(dest):
        db = lancedb.connect(dest, storage_options=options)
        if source is not None:
            _copy_table(source, None, dest, config, progress)
        elif TABLE in db.list_tables().tables:
            db.drop_table(TABLE)
        return
    local = Path(dest.removeprefix("file://"))
    local.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".pull-vectors-", dir=local.parent) as stage:
        staged = Path(stage) / "new"
        if source is not None:
            _copy_table(source, None, str(staged), config, progress)
        if local.exists():
            os.replace(local, Path(stage) / "old")
        if source is not None:
            os.replace(staged, local)


def _open_source(src_uri: str, options: dict[str, str]) -> Any:
    """The snapshot's vector table, or one SnapshotError: a snapshot is someone else's bytes,
    and a link, a file or a FIFO in its table's place, or a garbled table, is no traceback.
    Its shape is checked before LanceDB touches it (which would follow a link, or try to make
    a directory where a file stands)."""
    import lancedb

    problem = table_problem(src_uri) or ("it has no vector table" if table_missing(src_uri)
                                         else None)
    if problem is None:
        try:
            return lancedb.connect(src_uri, storage_options=options).open_table(TABLE)
        except (OSError, RuntimeError, ValueError, KeyError) as exc:
            if exhaustion_errno(exc) is not None:
                raise
            problem = first_line(exc)
    raise SnapshotError(
        f"The snapshot's vectors at {src_uri} cannot be used ({problem}) — push that commit "
        "again, or run `repoctx index build` to build the index locally."
    )


def _index_vectors(config: Config, manifest: dict) -> None:
    """A copied table has no ANN index: build it now if the table is large enough to need one."""
    open_vectors(config, None, manifest["embed_dim"], manifest["embed_model"]).maybe_index()


def _swap_graph(new_db: Path, index_dir: Path) -> None:
    """Put ``new_db`` in as the index's next generation file, swapped in atomically like a full
    rebuild: readers of the old graph finish on it, and nothing of it (a WAL that could be
    replayed into the new file, a damaged page) is read or reused."""
    install(index_dir, new_db)


def adopt(conn: sqlite3.Connection, root: Path, progress: ProgressFn | None = None) -> int:
    """Re-stamp every indexed file whose content hash still matches with its local size and
    mtime, so the next build treats it as unchanged; files that differ keep the snapshot's
    stamp and are re-parsed. Returns the number of files adopted."""
    rows = conn.execute("SELECT path, size, hash FROM files WHERE hash != ''").fetchall()

    def restamp(row: tuple[str, int, str]) -> tuple[int, int, str] | None:
        path, size, digest = row
        try:
            # The paths come from the pulled graph, which is untrusted: an absolute or `../`
            # path, a link out of the tree, a device or a FIFO must not be read (`/dev/zero`
            # read forever). The same regular-only, beneath-the-root open as the parse worker.
            with os.fdopen(open_regular(root, path, refuse=denied_by_default), "rb") as fh:
                st = os.fstat(fh.fileno())
                if st.st_size != size:  # cannot hold the same bytes: skip the read
                    return None
                same = content_hash(fh.read(size + 1)) == digest
        except (OSError, ValueError):  # ValueError: a NUL byte in the path
            return None
        return (st.st_size, st.st_mtime_ns, path) if same else None

    updates = []
    # hashing releases the GIL: threads overlap reads and hashing on large trees
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        for i, result in enumerate(pool.map(restamp, rows, chunksize=64), 1):
            if result is not None:
                updates.append(result)
            if progress and (i % 1000 == 0 or i == len(rows)):
                progress(Progress("adopt", i, len(rows)))
    with conn:
        conn.executemany("UPDATE files SET size = ?, mtime_ns = ? WHERE path = ?", updates)
    return len(updates)
