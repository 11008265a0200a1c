"""Parse beside the writer: one spawned helper process for builds of a few dozen files.

A build that changes a few dozen files is too small for a pool (`phases.parsing.POOL_THRESHOLD`):
starting a worker costs ~0.2 s, about what it would save. But the second core is idle while the
build parses and then writes in one process. So the build keeps parsing from the front of its
list as before, and starts one helper beside it; a feeder thread hands the helper batches from
the back of the list the moment it is ready or free. This process writes what came back and
parses only when nothing is waiting to be written. The helper's start is paid on the idle core
and never waited for: when the work runs out first, the helper is killed (it holds nothing).

Nothing is lost when the helper fails: the batch it held is parsed here.
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from indexer.parse.worker import FileResult, parse_file

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

Item = tuple[str, str, str, str | None]

#: Files per batch, parsed here or by the helper: the last wait is for one batch.
BATCH = 4


def parse_batch(root: str, model: str | None, items: list[Item], counter=None) -> list[FileResult]:
    return [parse_file(root, *item, model=model, counter=counter) for item in items]


def _helper_main(conn: Connection, root: str, model: str | None, index_dir: str, parent: int) -> None:
    """The helper: say it is ready, then parse each batch it is sent, until it is killed."""
    from indexer.safety.lifetime import die_with_parent

    die_with_parent(parent)
    counter = None
    if model is not None:
        from indexer.vectors.token_counts import open_counter

        counter = open_counter(Path(index_dir), model)
    conn.send("ready")
    try:
        while True:
            items = conn.recv()
            results = parse_batch(root, model, items, counter)
            # The words its tokenizer counted go back with the batch: the build keeps them.
            conn.send((results, counter.take_learned() if counter is not None else None))
    except (EOFError, OSError):
        pass  # the build went away


class _Helper:
    def __init__(self, root: str, model: str | None, index_dir: str) -> None:
        # Imported here: ~10 ms of every build, most of which (one edit) never start a helper.
        from indexer.safety.isolation import spawn_context

        # spawn, not fork: LanceDB (used by the same process for vectors) is not fork-safe;
        # isolated from the tree it parses (`indexer.safety.isolation`).
        ctx = spawn_context(root)
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_helper_main, args=(child, root, model, index_dir, os.getpid()),
                                daemon=True, name="repoctx-parse-helper")
        self.proc.start()
        child.close()

    def feed(self, pending: deque, done: queue.SimpleQueue) -> None:
        """The feeder thread: hand the helper the last pending batch as soon as it is free,
        and put what comes back on ``done``: ``("results", (results, learned))``, or
        ``("failed", batches)`` with the batch it held when it died (to be parsed here)."""
        batch: list[Item] | None = None
        try:
            self.conn.recv()  # "ready"
            while True:
                try:
                    batch = pending.pop()
                except IndexError:
                    return
                self.conn.send(batch)
                done.put(("results", self.conn.recv()))
                batch = None
        except (EOFError, OSError):  # it died, or was stopped
            done.put(("failed", [batch] if batch is not None else []))

    def stop(self) -> None:
        """Kill it: it holds nothing (it only reads the token-count cache), and a helper still
        starting would otherwise be waited for. Its pipe then ends, which ends the feeder."""
        self.proc.kill()
        self.proc.join()


def parse_beside(root: str, model: str | None, index_dir: str, work: list[Item],
                 counter=None) -> Iterator[list[FileResult]]:
    """Yield the parse results of ``work`` batch by batch, parsed here and in one helper.

    A feeder thread hands the helper batches from the back of the list the moment it is free;
    this process writes what came back first, and parses from the front when nothing is
    waiting. So neither process waits while work is left, and the last wait is one batch."""
    pending = deque(work[i : i + BATCH] for i in range(0, len(work), BATCH))
    left = len(pending)  # batches not yielded yet
    done: queue.SimpleQueue = queue.SimpleQueue()
    helper = _Helper(root, model, index_dir)
    feeder = threading.Thread(target=helper.feed, args=(pending, done), daemon=True,
                              name="repoctx-parse-feeder")
    feeder.start()
    try:
        while left:
            try:
                kind, payload = done.get_nowait()
            except queue.Empty:
                try:
                    batch = pending.popleft()
                except IndexError:  # the rest is with the helper
                    kind, payload = done.get()
                else:
                    left -= 1
                    yield parse_batch(root, model, batch, counter)
                    continue
            if kind == "failed":  # what the helper held is parsed here
                pending.extend(payload)
                continue
            results, learned = payload
            if learned is not None and counter is not None:
                counter.merge(*learned)
            left -= 1
            yield results
    finally:
        helper.stop()
        feeder.join()
        helper.conn.close()
