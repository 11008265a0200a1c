"""Parsing a change set's files: in this process, with one helper process beside it, in a
pool of isolated workers, or as Ray tasks (`indexer.parse.ray_engine`), whichever costs least
for how many files changed. Results stream back batch by batch, memory bounded by the batch
size, not the repository's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from indexer.config import Config
from indexer.models import Progress
from indexer.parse.helper import parse_batch, parse_beside
from indexer.parse.worker import FileResult, learned_counts

#: Below this many changed files, parse in-process: a pool costs more than it saves.
POOL_THRESHOLD = 48
#: From this many, one helper process parses beside this one (`indexer.parse.helper`).
HELPER_THRESHOLD = 16


ProgressFn = Callable[[Progress], None]


def _parse_batch_in_worker(
    root: str, model: str | None, items: list[tuple[str, str, str, str | None]]
) -> tuple[list[FileResult], tuple[int, list[tuple[str, int]]] | None]:
    """A pool worker's batch: its results, and the word counts its tokenizer learned meanwhile
    (kept beside the index so that later small builds need not load the tokenizer)."""
    return parse_batch(root, model, items), learned_counts(model) if model is not None else None


def _batches(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _parse_all(
    config: Config,
    work: list[tuple[str, str, str, str | None]],
    progress: ProgressFn | None,
    model: str | None,
) -> Iterator[list[FileResult]]:
    """Yield parse results batch by batch, keeping at most 2 batches per worker in flight
    so memory is bounded by the batch size, not the repository size."""
    root = str(config.root)
    jobs = config.workers
    done = 0
    if len(work) < POOL_THRESHOLD or jobs == 1:
        counter = None
        if model is not None and work:
            # Imported here: a no-op build parses nothing.
            from indexer.vectors.token_counts import open_counter

            counter = open_counter(config.index_path, model)
        try:
            if jobs > 1 and len(work) >= HELPER_THRESHOLD:
                batches = parse_beside(root, model, str(config.index_path), work, counter)
            else:
                batches = (parse_batch(root, model, b, counter) for b in _batches(work, config.batch_size))
            for results in batches:
                done += len(results)
                if progress:
                    progress(Progress("parse", done, len(work)))
                yield results
            if counter is not None:
                counter.save()
        finally:
            if counter is not None:
                counter.close()
        return
    # Small batches at first keep every worker busy while results stream back.
    size = max(8, min(config.batch_size, len(work) // (jobs * 4) or 8))
    # The pool's imports (~25 ms, inside spawn_pool and in_flight) are paid only here: a
    # one-file edit is parsed in-process.
    from indexer.safety.lifetime import in_flight, spawn_pool

    # Workers (and so the resource tracker, which waits for them) exit if this process is
    # killed: a kill -9 of `index build` leaves no orphans.
    overhead, words = None, {}
    with spawn_pool(jobs, root) as pool:  # isolated from the tree (`indexer.safety.isolation`)
        calls = ((root, model, batch) for batch in _batches(work, size))
        for results, learned in in_flight(pool, _parse_batch_in_worker, calls, jobs * 2):
            if learned is not None:
                overhead = learned[0]
                words.update(learned[1])
            done += len(results)
            if progress:
                progress(Progress("parse", done, len(work)))
            yield results
    if words:
        from indexer.vectors.token_counts import store_counts

        store_counts(config.index_path, model, overhead, words)


def parse_work(
    config: Config,
    work: list[tuple[str, str, str, str | None]],
    progress: ProgressFn | None,
    model: str | None,
    engine=None,
) -> Iterator[list[FileResult]]:
    """The parse results of ``work``, batch by batch: on the Ray engine when it is worth
    starting for this many files, else here (`_parse_all`)."""
    if engine is not None and engine.worth_it(files=len(work)):
        return engine.parse_all(str(config.root), work, model, progress)
    return _parse_all(config, work, progress, model)
