"""The sharded load (`indexer.phases.sharded`) on a Ray cluster: workers parse, write and resolve
the shards; the driver reads the files, schedules, and merges what comes back.

Workers need repoctx installed, not the repository nor the index: a parse task gets the bytes of
its files (read on the driver, as `RaySession.parse_all` does; a file settled there, an
unreadable or too large one, travels as its result and still gets its row), writes its shard
into a temporary file of its own machine and returns the file's bytes, which the driver writes
at the shard's path and merges; a worker that sees the shard's directory (the driver's machine,
or a file system they share: the directory's name is this build's alone) copies the file there
itself, and only the report travels. The resolve task of a shard reads there what resolution
reads and writes (the shard's files, its references other than ``inherit``, the empty resolution
tables) into a slim copy of its own; where the parse task could not deliver the shard, it
returned that slim copy too, which stays in Ray's object store until the resolve task that takes
it, so the lexical rows, most of a shard, cross the network once. A resolve task given no slim
copy that runs where the shard's directory is not says so (`ShardUnseen`), and the driver sends
it the copy.

Resolution needs the name table. Rather than the graph file (FTS5 tables, chunks, every
reference), the driver ships a compact copy of what `SymbolTable` reads (files, symbols,
imports, the resolved ``inherit`` references: `name_table`), once per build through the object
store; each worker process writes it to a temporary file the first time a task of that build
reaches it, indexes it, opens it, and deletes the file at once: the open connection keeps it for
the build's other tasks (Ray kills its workers at the job's end, so nothing at their exit
would). What a killed worker left (its tasks' scratch directories, a name table's file not yet
open) is deleted by the first task of a later worker process on its machine (`_sweep`). A
resolve task returns its slim shard with the resolutions beside the references, which replaces
the shard at its path for `shards.merge_resolved`.

At most `INFLIGHT_PER_WORKER` tasks per worker are in flight, so the files read, the shards
being written and the results coming back are bounded however large the tree. Slim copies that
travel are not: each stays pinned in the object store from its shard's parse to its resolution,
so where the workers do not see the driver's shard directory the store holds every shard's
references (without their lexical rows or symbols, a fraction of the shard) at the end of the
parse; past the store's size Ray spills them to its disk. A task whose worker died is retried by
Ray (``max_retries``); one that keeps dying (killed, out of memory) ends the build with
`BuildWorkerError`, before anything of its shard is merged: the sharded load's crash guarantees
are the local pool's.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any
from urllib.parse import quote

from indexer.errors import BuildWorkerError
from indexer.graph import shards, store
from indexer.graph.resolve import SymbolTable
from indexer.parse.ray_engine import INFLIGHT_PER_WORKER, RaySession
from indexer.parse.worker import FileResult, load_file, parse_content
from indexer.phases.sharded import ParseTask, write_parsed
from indexer.safety.lifetime import pid_alive

#: What a resolve task reads and writes of a shard; ``refs`` without its ``inherit`` rows
#: (merged with the parse).
_SLIM_TABLES = ("files", "refs", "resolved", "candidates")
#: The name table: the graph's columns `SymbolTable` reads (`indexer.graph.resolve`).
_NAME_TABLES = (
    ("files", "id INTEGER PRIMARY KEY, path TEXT, module TEXT, language TEXT",
     "SELECT id, path, module, language FROM g.files"),
    ("symbols", "id INTEGER PRIMARY KEY, file_id INTEGER, parent_id INTEGER, kind TEXT, name TEXT",
     "SELECT id, file_id, parent_id, kind, name FROM g.symbols"),
    ("imports", "file_id INTEGER, module TEXT, name TEXT, alias TEXT",
     "SELECT file_id, module, name, alias FROM g.imports"),
    ("refs", "enclosing_id INTEGER, target_id INTEGER, kind TEXT",
     "SELECT enclosing_id, target_id, kind FROM g.refs WHERE kind = 'inherit' "
     "AND target_id IS NOT NULL"),
)
#: Made by each worker on its copy: `SymbolTable.by_name_where` looks names up in SQL.
_NAME_INDEXES = ("CREATE INDEX symbols_name ON symbols(name)",)


def _slim(shard: str, out: str) -> None:
    """Copy of ``shard`` at ``out`` with only `_SLIM_TABLES` (their own `CREATE TABLE` text)."""
    with closing(shards.open_shard(out)) as conn:
        conn.execute("ATTACH DATABASE ? AS s", [f"file:{quote(shard)}?mode=ro"])
        ddl = dict(conn.execute("SELECT name, sql FROM s.sqlite_master WHERE type = 'table'"))
        conn.execute("BEGIN")
        for table in _SLIM_TABLES:
            conn.execute(ddl[table])
            if table in ("resolved", "candidates"):  # empty after a parse; rows here would be
                continue  # a resolved copy's, read again by a retried task
            where = " WHERE kind != 'inherit' ORDER BY id" if table == "refs" else ""
            conn.execute(f"INSERT INTO main.{table} SELECT * FROM s.{table}{where}")
        conn.execute("COMMIT")


def _deliver(tmp_file: str, path: str) -> bytes | None:
    """Put a finished file at the driver's ``path`` when this worker sees its directory (None
    then), else return its bytes for the driver to write. Copied beside it, then renamed over
    it: a retried task replaces what an earlier attempt left, and an attempt still running
    somewhere (Ray retries a task whose worker it lost sight of) never rewrites the file the
    driver has attached, only the name. A directory this worker sees but cannot write (a
    read-only mount, another user's) is one it does not reach: the bytes travel."""
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        return Path(tmp_file).read_bytes()
    try:
        fd, part = tempfile.mkstemp(dir=directory, prefix=os.path.basename(path) + ".",
                                    suffix=".part")
    except OSError:
        return Path(tmp_file).read_bytes()
    os.close(fd)
    try:
        shutil.copyfile(tmp_file, part)
        os.replace(part, path)
    except OSError:
        Path(part).unlink(missing_ok=True)
        return Path(tmp_file).read_bytes()
    except BaseException:
        Path(part).unlink(missing_ok=True)
        raise
    return None


class ShardUnseen(Exception):
    """A resolve task given no slim copy ran where the shard's directory is not."""


def parse_task(path: str, ddl: tuple[str, ...], model: str | None, gen: int,
               items: list[tuple[int, Any]]
               ) -> tuple[tuple[bytes | None, shards.ShardReport, float], bytes | None]:
    """Ray task body: parse ``items`` ((file id, bytes and facts to `parse_content`, or the
    `FileResult` the driver settled)) and write their shard for ``path`` (`_deliver`). Returns
    (shard bytes, or None when it is at ``path``; report without a path; when it finished) and
    the slim copy for its resolution, None when the shard is at ``path``: the resolve task
    reads it there (nothing of it stays in the object store meanwhile)."""
    cpu = time.process_time()
    results = [item if isinstance(item, FileResult) else parse_content(*item, model)
               for _, item in items]
    with _scratch() as tmp:
        local, slim = os.path.join(tmp, "shard.db"), os.path.join(tmp, "slim.db")
        report = write_parsed(local, ddl, gen, model, [fid for fid, _ in items], results, cpu)
        data = _deliver(local, path)
        slim_data = None
        if data is not None:
            _slim(local, slim)
            slim_data = Path(slim).read_bytes()
    report = dataclasses.replace(report, path="", cpu=time.process_time() - cpu)
    return (data, report, time.time()), slim_data


#: A task's scratch files: a directory per task, the name table's file (deleted once open).
#: Both are named after the worker process, so that another finds those a killed one left.
_SCRATCH, _NAMES_FILE = "repoctx-shard-", "repoctx-names-"
#: This worker process's table of a build's names: [key, `SymbolTable`].
_NAMES: list = []
#: Whether this process has looked for what killed workers left (`_sweep`).
_SWEPT: list = []


def _sweep(directory: str) -> list[str]:
    """Delete the scratch files and directories in ``directory`` whose worker process is gone
    (killed mid-task: Ray kills its workers, whatever they hold); returns them."""
    gone = []
    for path in glob.glob(os.path.join(directory, f"{_SCRATCH}*")) + glob.glob(
            os.path.join(directory, f"{_NAMES_FILE}*")):
        pid = os.path.basename(path).split("-")[2]
        if not pid.isdigit() or pid_alive(int(pid)):
            continue
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            Path(path).unlink(missing_ok=True)
        gone.append(path)
    return gone


def _scratch() -> tempfile.TemporaryDirectory:
    """A task's scratch directory (the first of this process sweeps the killed ones' first)."""
    if not _SWEPT:
        _SWEPT.append(_sweep(tempfile.gettempdir()))
    return tempfile.TemporaryDirectory(prefix=f"{_SCRATCH}{os.getpid()}-")


def _name_table(ray: Any, key: str, table: list) -> SymbolTable:
    """The name table of build ``key`` in this worker process, read the first time one of the
    build's tasks runs here (``table`` holds the object's reference: taken only then): written
    to a file, indexed, opened and loaded, and the file deleted while open (SQLite keeps reading
    it; it is gone with the connection, whenever this process ends)."""
    if not _NAMES or _NAMES[0] != key:
        if _NAMES:
            _NAMES.pop().conn.close()
            _NAMES.clear()
        fd, path = tempfile.mkstemp(prefix=f"{_NAMES_FILE}{os.getpid()}-", suffix=".db")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(ray.get(table[0]))
            with closing(shards.open_shard(path)) as conn:
                for statement in _NAME_INDEXES:
                    conn.execute(statement)
            names = SymbolTable(store.read_file(Path(path)).conn)
        finally:
            Path(path).unlink(missing_ok=True)
        names.preload()
        names.load_bases()
        _NAMES.extend((key, names))
    return _NAMES[1]


def resolve_task(path: str, key: str, table: list,
                 slim: bytes | None) -> tuple[bytes | None, int, float, float]:
    """Ray task body: resolve a slim shard (``slim``, or else made here of the shard at
    ``path``; `ShardUnseen` where that is not to be seen) against build ``key``'s name table
    (`shards.resolve_with`). Returns it with its resolutions (or None: `_deliver` put it at
    ``path``), the references resolved, when it finished and its CPU seconds."""
    import ray

    cpu = time.process_time()
    if slim is None and not os.path.isdir(os.path.dirname(path)):
        raise ShardUnseen(path)
    names = _name_table(ray, key, table)
    with _scratch() as tmp:
        local = os.path.join(tmp, "slim.db")
        if slim is None:
            _slim(path, local)
        else:
            Path(local).write_bytes(slim)
        n = shards.resolve_with(names, local)
        data = _deliver(local, path)
    return data, n, time.time(), time.process_time() - cpu


def slim_copy(shard: str) -> bytes:
    """The slim copy of the shard at ``shard`` (`_slim`), as file bytes."""
    with _scratch() as tmp:
        out = os.path.join(tmp, "slim.db")
        _slim(shard, out)
        return Path(out).read_bytes()


def name_table(db_file: str) -> bytes:
    """The compact name table of the graph at ``db_file`` (see `_NAME_TABLES`), as file bytes."""
    fd, path = tempfile.mkstemp(prefix=f"{_NAMES_FILE}{os.getpid()}-", suffix=".db")
    os.close(fd)
    try:
        with closing(shards.open_shard(path)) as conn:
            conn.execute("ATTACH DATABASE ? AS g", [f"file:{quote(db_file)}?mode=ro"])
            conn.execute("BEGIN")
            for name, columns, select in _NAME_TABLES:
                conn.execute(f"CREATE TABLE main.{name} ({columns})")
                conn.execute(f"INSERT INTO main.{name} {select}")
            conn.execute("COMMIT")
        return Path(path).read_bytes()
    finally:
        Path(path).unlink(missing_ok=True)


class RayShards:
    """The `ShardRunner` of a Ray cluster (`indexer.phases.sharded.ShardRunner`)."""

    def __init__(self, session: RaySession) -> None:
        self.session = session.connect()
        self.ray = ray = self.session.ray
        self.most = self.session.workers * INFLIGHT_PER_WORKER
        self._parse = ray.remote(num_cpus=1, max_retries=2, num_returns=2)(parse_task)
        self._resolve = ray.remote(num_cpus=1, max_retries=2)(resolve_task)
        # Shard path -> its slim copy in the object store (a None where the shard is at its
        # path: a worker that sees it reads it there).
        self._slims: dict[str, Any] = {}
        self._inflight: list = []
        self._dead = _worker_deaths(ray)

    def __enter__(self) -> RayShards:
        return self

    def __exit__(self, *exc) -> None:
        for ref in self._inflight:  # a failed build: nothing more of it runs
            self.ray.cancel(ref, force=True)
        self._inflight = []
        self._slims.clear()

    def _next(self, pending: dict) -> tuple[Any, Any]:
        """The first of the in-flight tasks to finish: its key in ``pending``, and its ref."""
        ready, self._inflight = self.ray.wait(self._inflight, num_returns=1)
        return pending.pop(ready[0]), ready[0]

    def _get(self, ref: Any) -> Any:
        try:
            return self.ray.get(ref)
        except self._dead as exc:
            raise BuildWorkerError() from exc

    def _take(self, pending: dict) -> Any:
        """The first of the in-flight tasks to finish: its key in ``pending``, and its result."""
        key, ref = self._next(pending)
        return key, self._get(ref)

    def parse(self, tasks: Iterator[ParseTask]) -> Iterator[tuple[shards.ShardReport, float]]:
        pending: dict = {}
        for path, ddl, root, model, gen, files in tasks:
            items: list[tuple[int, Any]] = []
            for fid, (rel, language, module, old_hash) in files:
                loaded = load_file(root, rel, old_hash)
                items.append((fid, loaded if isinstance(loaded, FileResult)
                              else (rel, *loaded, language, module)))
            ref, slim = self._parse.remote(path, ddl, model, gen, items)
            pending[ref] = (path, slim)
            self._inflight.append(ref)
            while len(self._inflight) >= self.most:
                yield self._parsed(pending)
        while self._inflight:
            yield self._parsed(pending)

    def _parsed(self, pending: dict) -> tuple[shards.ShardReport, float]:
        (path, slim), (data, report, finished) = self._take(pending)
        if data is not None:
            Path(path).write_bytes(data)
        self._slims[path] = slim
        return dataclasses.replace(report, path=path), finished

    def resolve(self, db_file: str, key: str,
                paths: list[str]) -> Iterator[tuple[str, int, float, float]]:
        table = [self.ray.put(name_table(db_file))]  # in a list: a task fetches it only once
        pending: dict = {}
        for path in paths:
            # None when not parsed by this runner: read at its path, as a delivered one
            self._submit(pending, path, key, table, self._slims.pop(path, None))
            while len(self._inflight) >= self.most:
                yield self._resolved(pending, key, table)
        while self._inflight:
            yield self._resolved(pending, key, table)

    def _submit(self, pending: dict, path: str, key: str, table: list, slim: Any) -> None:
        ref = self._resolve.remote(path, key, table, slim)
        pending[ref] = path
        self._inflight.append(ref)

    def _resolved(self, pending: dict, key: str, table: list) -> tuple[str, int, float, float]:
        while True:
            path, ref = self._next(pending)
            try:
                data, n, finished, cpu = self._get(ref)
                break
            except ShardUnseen:  # ran where the shard is not to be seen: its slim copy travels
                self._submit(pending, path, key, table, self.ray.put(slim_copy(path)))
        if data is not None:
            Path(path).write_bytes(data)
        return path, n, finished, cpu


#: Ray's errors for a task whose worker, node or result is gone: killed, out of memory (Ray's
#: memory monitor kills the task's worker), its node or raylet dead, its result lost (with
#: `ObjectLostError`'s kinds: owner died, fetch timed out, reconstruction failed), or no node
#: left that can run it. Not the task's own exception (Ray raises it as itself), nor a full
#: disk or object store, which running the build again does not mend.
WORKER_DEATHS = ("WorkerCrashedError", "OutOfMemoryError", "NodeDiedError",
                 "LocalRayletDiedError", "ObjectLostError", "TaskUnschedulableError")


def _worker_deaths(ray: Any) -> tuple[type[BaseException], ...]:
    """`WORKER_DEATHS` as this Ray has them."""
    ex = ray.exceptions
    return tuple(getattr(ex, name) for name in WORKER_DEATHS if hasattr(ex, name))


class ShardedRaySession(RaySession):
    """The Ray engine of a build: `RaySession`, whose whole-index loads go through shards
    written by its workers (`indexer.phases.sharded.use_shards`)."""

    def shard_runner(self) -> RayShards:
        return RayShards(self)
