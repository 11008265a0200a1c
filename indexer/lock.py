"""One writer at a time: an advisory `flock` on `<index>/write.lock` that records the holder's pid.

The kernel drops the lock when the holder dies (even by kill -9), so a crash never leaves a
stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from indexer.errors import IndexLockedError
from indexer.safety.index_dir_guard import check_index_dir


class WriteLock:
    def __init__(self, index_dir: Path) -> None:
        self.path = index_dir / "write.lock"
        self._fd: int | None = None

    def holder(self) -> int | None:
        try:
            text = self.path.read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def acquire(self, wait: float = 0.0) -> WriteLock:
        """Take the lock, waiting up to ``wait`` seconds; raise IndexLockedError naming the holder."""
        # Every writer of the index takes this lock first: the directory it is about to write
        # may have come with the repository, links and all (`index_dir_guard`).
        check_index_dir(self.path.parent)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    pid = self.holder()
                    who = f"process {pid}" if pid else "another process"
                    raise IndexLockedError(
                        f"The index at {self.path.parent} is being written by {who} — wait for it "
                        "to finish (or pass --wait), or stop it"
                        + (f" (`kill {pid}`)." if pid else ".")
                    ) from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> WriteLock:
        return self if self._fd is not None else self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
