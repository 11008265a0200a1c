"""The Ray build engine: parsing, chunking and embedding as tasks and actors on a Ray cluster.

The driver (the machine running `repoctx index build --engine ray`) discovers files, reads
them and ships the bytes of changed files to parse tasks, so workers need repoctx installed
but not the repository. Results stream back in bounded batches (at most two per worker in
flight) and the driver writes them into the SQLite graph, so a Ray build and a local build of
the same tree produce the same index. A whole index (a first build, a full rebuild) is loaded
through shards instead, which the workers parse, write and resolve and the driver merges
(`indexer.phases.ray_shards`). Embedding runs in long-lived actors (the model
loads once per actor), one per GPU when the cluster has GPUs; they write their rows into
fragments of the vector table, which the driver commits (`indexer.vectors.fragments`).

Ray is optional: `pip install 'repoctx[ray]'`. Without `--ray-address` a private local Ray
instance is started for the build and stopped after it.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from indexer.config import Config
from indexer.errors import ConfigError
from indexer.models import Progress
from indexer.parse.worker import FileResult, load_file, parse_content

#: Parse batches in flight per worker: enough to hide a round trip, few enough to bound memory.
INFLIGHT_PER_WORKER = 2
#: Files per parse task when the batch size is not limited by the number of files.
TASK_FILES = 64
#: Below this many changed files, or chunks to embed, a build does the work in this process:
#: starting Ray (~3 s) and loading the model in actors costs more than an edit's worth of work,
#: and a watcher configured with `engine = "ray"` must stay as cheap as a local one.
MIN_FILES = 64
MIN_CHUNKS = 512


def _parse_blobs(model: str | None, blobs: list[tuple]) -> list[FileResult]:
    """Ray task body: parse files whose bytes the driver sent."""
    return [parse_content(*blob, model) for blob in blobs]


class _EmbedActor:
    """Ray actor body: one embedding model, loaded once, used for many batches, whose rows it
    writes into fragments of the vector table (`indexer.vectors.fragments`)."""

    def __init__(self, model: str, batch_size: int, threads: int) -> None:
        os.environ["REPOCTX_EMBED_THREADS"] = str(threads)
        try:
            import torch

            torch.set_num_threads(threads)
        except ImportError:  # the hashing model needs no torch
            pass
        from indexer.vectors.embed import create_embedder

        self.embedder = create_embedder(model, batch_size=batch_size)
        self.writer: Any = None
        self.cpu0 = time.process_time()

    def info(self) -> tuple[str, int, int]:
        return self.embedder.name, self.embedder.dim, self.embedder.max_tokens

    def gpu_ids(self) -> list:
        """The GPUs Ray gave this actor (it sets CUDA_VISIBLE_DEVICES to them)."""
        import ray

        return list(ray.get_gpu_ids())

    def open_table(self, uri: str, storage_options: dict | None,
                   expected: dict) -> tuple[str | None, str | None]:
        """Open the driver's vector table (``expected``: its `VectorStore.identity`), which
        this actor writes fragments of; returns (its node's id, None), or (None, why not):
        then it returns vectors (see `write`)."""
        import ray

        from indexer.vectors.fragments import open_writer

        self.cpu0 = time.process_time()  # the build's work from here, not starting the actor
        self.writer, why = open_writer(self.embedder, uri, storage_options, expected)
        return (None, why) if self.writer is None else (ray.get_runtime_context().get_node_id(),
                                                        None)

    def write(self, batch: Any, here: bool) -> Any:
        """Embed the batch and write it as a fragment; with ``here`` false (the table is not
        reachable from this machine) return its vectors for the driver to write."""
        from indexer.vectors.fragments import Written, embed_texts

        if here and self.writer is not None:
            return self.writer.write(batch)
        return Written(None, [], vectors=embed_texts(self.embedder, batch))

    def embed(self, texts: list[str]) -> Any:
        return self.embedder.embed(texts)

    def cpu_seconds(self) -> float:
        """CPU seconds of this actor's process, every thread (the model's included), since
        `open_table`: what the build's batches cost, without starting Ray's worker and
        loading the model (the driver's figure leaves those out too)."""
        return time.process_time() - self.cpu0


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(
            "`--engine ray` needs Ray — `pip install 'repoctx[ray]'` (on the driver and on "
            "every node of the cluster), or build with the default `--engine local`."
        ) from exc
    return ray


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast on a cluster address nobody listens on: Ray itself retries for minutes."""
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():  # `auto`, `local` and the like: Ray resolves them
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ConfigError(
            f"Cannot reach the Ray cluster at {address}: {exc} — check `--ray-address` "
            "(`ray://head:10001` for Ray Client, `head:6379` from a cluster node, or `auto`) "
            "or drop it to start a local Ray."
        ) from exc


def _reap_private_ray(ray: Any):
    """A reaper for the daemons of the Ray this process just started. Ray ties GCS, raylet
    and its workers to the driver, but its agents outlive a `kill -9` of it by a minute or
    more. Their pids come from Ray's node object (not public API): without it, no reaper."""
    from indexer.safety.lifetime import start_reaper

    node = getattr(getattr(getattr(ray, "_private", None), "worker", None), "_global_node", None)
    procs = getattr(node, "all_processes", None) or {}
    roots = [info.process.pid for infos in procs.values() for info in infos
             if getattr(getattr(info, "process", None), "pid", None)]
    return start_reaper(roots)


class RaySession:
    """A connection to a Ray cluster for one build, made on first use (a no-op build never
    starts Ray). ``close()`` stops Ray if this session started it (no `--ray-address`), and
    leaves a shared cluster running."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.ray: Any = None
        self.owned = False
        self.workers = self.gpus = 0
        self._reaper = None  # kills a private Ray's processes if this one is killed
        self._empty: str | None = None  # the workers' working directory (see `connect`)

    def connect(self) -> RaySession:
        if self.ray is not None:
            return self
        config = self.config
        ray = _import_ray()
        address = config.ray_address or os.environ.get("RAY_ADDRESS")
        if not ray.is_initialized():
            # Ray puts the driver's working directory (and script directory) first on every
            # worker's path and runs workers there: in a repository, its `indexer/` or
            # `json.py` would replace ours. A working directory of Ray's own (empty, this
            # build's) stops both: workers run in its copy, with only it added to the path.
            self._empty = tempfile.mkdtemp(prefix="repoctx-ray-")
            kw: dict[str, Any] = {"log_to_driver": False,
                                  "runtime_env": {"working_dir": self._empty}}
            if address:
                _check_reachable(address)
                kw["address"] = address
            else:  # a private instance: never attach to some other local cluster by accident
                kw.update(address="local", num_cpus=config.workers,
                          include_dashboard=False, configure_logging=False)
            try:
                with warnings.catch_warnings():
                    # Ray starts its processes with fork+exec, which LanceDB's fork hook
                    # warns about needlessly (exec replaces the child).
                    warnings.filterwarnings("ignore", message="lancedb fork support")
                    ray.init(**kw)
            except ConnectionError as exc:
                raise ConfigError(
                    f"Cannot reach the Ray cluster at {address}: {exc} — check `--ray-address` "
                    "(e.g. `ray://head:10001` or `auto` on a cluster node) or drop it to start "
                    "a local Ray."
                ) from exc
            self.owned = True
            if not address:
                self._reaper = _reap_private_ray(ray)
        resources = ray.cluster_resources()
        cpus = max(1, int(resources.get("CPU", 1)))
        self.workers = min(config.jobs, cpus) if config.jobs else cpus
        self.gpus = int(resources.get("GPU", 0))
        self._parse = ray.remote(num_cpus=1, max_retries=2)(_parse_blobs)
        self.ray = ray
        return self

    def worth_it(self, files: int = 0, chunks: int = 0) -> bool:
        """Whether this much work goes to the cluster rather than this process.
        ``REPOCTX_RAY_MIN_WORK=1`` sends any work (for trying a cluster on a small tree)."""
        forced = os.environ.get("REPOCTX_RAY_MIN_WORK")
        if forced:
            return max(files, chunks) >= int(forced)
        return files >= MIN_FILES or chunks >= MIN_CHUNKS

    def close(self) -> None:
        if self.owned and self.ray is not None and self.ray.is_initialized():
            self.ray.shutdown()
        from indexer.safety.lifetime import stop_reaper

        stop_reaper(self._reaper)
        self._reaper = None
        if self._empty is not None:
            shutil.rmtree(self._empty, ignore_errors=True)
            self._empty = None
        self.owned = False
        self.ray = None

    # -- parsing -------------------------------------------------------------------------

    def parse_all(
        self,
        root: str,
        work: list[tuple[str, str, str, str | None]],
        model: str | None,
        progress: Callable[[Progress], None] | None,
    ) -> Iterator[list[FileResult]]:
        """Parse results batch by batch, in completion order. Unchanged and unreadable files
        are settled on the driver; only the bytes of changed files travel."""
        ray = self.connect().ray
        size = max(1, min(TASK_FILES, len(work) // (self.workers * 4) or 1))
        inflight: list = []
        done = 0

        def report(n: int) -> None:
            nonlocal done
            done += n
            if progress:
                progress(Progress("parse", done, len(work)))

        for start in range(0, len(work), size):
            local: list[FileResult] = []
            blobs: list[tuple] = []
            for path, language, module, old_hash in work[start : start + size]:
                loaded = load_file(root, path, old_hash)
                if isinstance(loaded, FileResult):
                    local.append(loaded)
                else:
                    blobs.append((path, *loaded, language, module))
            if local:
                report(len(local))
                yield local
            if blobs:
                inflight.append(self._parse.remote(model, blobs))
            while len(inflight) >= self.workers * INFLIGHT_PER_WORKER:
                ready, inflight = ray.wait(inflight, num_returns=1)
                results = ray.get(ready[0])
                report(len(results))
                yield results
        while inflight:
            ready, inflight = ray.wait(inflight, num_returns=1)
            results = ray.get(ready[0])
            report(len(results))
            yield results

    # -- embedding -----------------------------------------------------------------------

    def embed_pool(self, model: str, batch_size: int) -> RayEmbedPool:
        return RayEmbedPool(self.connect(), model, batch_size)


class RayEmbedPool:
    """Embedding actors behind the pool interface of `indexer.vectors.fragments`
    (``submit``/``result``/``window``): batches are submitted round-robin, at most ``window``
    are in flight, and results, fragments the actors wrote, are taken in submission order."""

    def __init__(self, session: RaySession, model: str, batch_size: int) -> None:
        ray = session.ray
        self.ray = ray
        if session.gpus:
            n, opts, threads = session.gpus, {"num_gpus": 1, "num_cpus": 1}, 1
        else:
            n, opts, threads = session.workers, {"num_cpus": 1}, 1
        actor = ray.remote(**opts)(_EmbedActor)
        self.actors = [actor.remote(model, batch_size, threads) for _ in range(n)]
        # Loads the model in every actor now: a broken model fails here, with its message.
        infos = ray.get([a.info.remote() for a in self.actors])
        self.name, self.dim, self.max_tokens = infos[0]
        self.window = INFLIGHT_PER_WORKER * len(self.actors)
        self._next = 0
        self._here: list[bool] = []
        self.worker_cpu = 0.0
        self.driver_writes = ""  # why some actors' rows are written by the driver

    def open_table(self, uri: str, storage_options: dict | None, expected: dict) -> None:
        """Let every actor write fragments of the table at ``uri`` (absolute), the driver's
        (``expected``: its `VectorStore.identity`). An actor on another machine than this
        one cannot reach a local table, nor one whose bucket it has no credentials for: its
        vectors come back, the rows are written here, and ``driver_writes`` says why. The
        ``storage_options`` travel to every actor (docs/scale.md)."""
        from indexer.credentials import is_remote

        opened = self.ray.get([a.open_table.remote(uri, storage_options, expected)
                               for a in self.actors])
        here = self.ray.get_runtime_context().get_node_id()
        self._here = [node is not None and (is_remote(uri) or node == here)
                      for node, _ in opened]
        why = sorted({w or "the table is local to another machine"
                      for (_, w), ok in zip(opened, self._here, strict=True) if not ok})
        self.driver_writes = (f"{self._here.count(False)} of {len(self.actors)} workers: "
                              + "; ".join(why)) if why else ""

    def submit(self, batch: Any) -> Any:
        i = self._next % len(self.actors)
        self._next += 1
        return self.actors[i].write.remote(batch, self._here[i])

    def result(self, handle: Any) -> Any:
        return self.ray.get(handle)

    def embed(self, texts: list[str]) -> Any:
        """Vectors of ``texts`` from one actor, returned here (a probe: builds write fragments)."""
        return self.ray.get(self.actors[0].embed.remote(list(texts)))

    def close(self) -> None:
        """Stop the actors, keeping their CPU seconds in ``worker_cpu``."""
        try:
            self.worker_cpu = sum(self.ray.get([a.cpu_seconds.remote() for a in self.actors]))
        except Exception:  # noqa: BLE001 - a dead actor: the figure is informational
            self.worker_cpu = 0.0
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []
