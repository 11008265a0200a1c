"""Replace a file atomically and durably: every file repoctx rewrites in place (the watcher's
state, agent memory, a model's cache info, the agent's edits through `agent.safe_fs`) goes
through `atomic_writer` / `write_atomic`, and `graph.db`'s link through `replace_durably`.

The durability rule, one for all: the new file is written under a temporary name in the same
directory, its data is fsynced, it is renamed over the name, and the directory is fsynced.

- The data before the rename: without it a machine that stops (power, kernel panic) may keep
  the rename and lose the data (ext4 and XFS write a file's blocks later than its name), and
  the name then holds an empty or partial file. With it the name holds the old file or the
  new one, whole.
- The directory after the rename: the rename is an entry in the directory, on the disk only
  once the directory is; after the call returns, a stopped machine comes back with the new file.
- A killed process (SIGKILL, OOM) needs neither: the rename is atomic to every reader at once.
  It may leave its temporary file (`.{name}.{digits}.tmp`) beside the name, never a half file
  at the name.

The temporary file is created new (``O_EXCL | O_NOFOLLOW``: a link planted at its name is
never followed) and renamed over the name, so a link or hard link at the name is replaced,
never written through. With ``dir_fd`` every step is relative to that directory descriptor and
``name`` is a single component, for callers that reached the directory with no link followed.

A directory is not replaced through this module: rename(2) replaces only an empty one, so a
directory swap (a model's exported cache in `indexer.vectors.embed`, a pulled vector table in
`indexer.ops.snapshot`) is two renames with the name missing between them, and what is inside
was written by LanceDB or the model converter, not here.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Iterator
from typing import BinaryIO

__all__ = ["atomic_writer", "replace_durably", "sync_dir", "temp_name", "write_atomic"]

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
# A file system that cannot sync a directory (some network and FUSE ones) says so with one of
# these: the rename is then as durable as that file system makes it, and the write succeeds.
_NO_DIR_SYNC = {errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP}


def temp_name(name: str) -> str:
    """A fresh temporary name beside ``name``: `.{name}.{digits}.tmp`, hidden, short enough for
    any file name (the first 64 characters of ``name``), and matched by the index directory's
    check (`indexer.safety.index_dir_guard`) for `graph.db`."""
    return f".{name[:64]}.{secrets.randbelow(10**12)}.tmp"


@contextlib.contextmanager
def atomic_writer(
    path: str | os.PathLike[str], *, mode: int | None = None, dir_fd: int | None = None
) -> Iterator[BinaryIO]:
    """A binary file to write; when the block ends without an exception it replaces ``path``
    (the module's durability rule). ``mode`` sets the permission bits (default: a new file's,
    0o666 less the umask); the caller may change owner or times through ``fileno()`` in the
    block. An exception removes the temporary file and leaves ``path`` as it was."""
    path = os.fspath(path)
    folder, name = os.path.split(path)
    if dir_fd is not None and folder:
        raise ValueError(f"with dir_fd, {path!r} must be a name in that directory")
    folder = folder or ("." if dir_fd is None else "")
    tmp = fd = None
    while fd is None:
        tmp = os.path.join(folder, temp_name(name)) if dir_fd is None else temp_name(name)
        with contextlib.suppress(FileExistsError):  # another writer drew the same digits
            fd = os.open(tmp, _CREATE, 0o666, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb", closefd=False) as fh:
            yield fh
        if mode is not None:
            os.fchmod(fd, mode)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, path if dir_fd is None else name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    sync_dir(folder if dir_fd is None else dir_fd)


def write_atomic(
    path: str | os.PathLike[str],
    data: bytes | str,
    *,
    mode: int | None = None,
    dir_fd: int | None = None,
) -> None:
    """Replace ``path`` with ``data`` (str is written as UTF-8) by `atomic_writer`."""
    with atomic_writer(path, mode=mode, dir_fd=dir_fd) as fh:
        fh.write(data.encode("utf-8") if isinstance(data, str) else data)


def replace_durably(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """``os.replace(src, dst)`` within one directory, then that directory synced: for a name
    made some other way than by writing a file (a symbolic link renamed over `graph.db`)."""
    os.replace(src, dst)
    sync_dir(os.path.dirname(os.fspath(dst)) or ".")


def sync_dir(folder: str | os.PathLike[str] | int) -> None:
    """fsync a directory (a path, or an open descriptor of one), so that the names made or
    renamed in it reach the disk."""
    fd = folder if isinstance(folder, int) else os.open(folder, _DIR)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _NO_DIR_SYNC:
            raise
    finally:
        if not isinstance(folder, int):
            os.close(fd)
