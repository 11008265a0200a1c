"""File operations beneath a trusted directory that never follow a link.

A path checked with ``realpath`` and then opened by name can be redirected between the two
steps: a command swaps a directory on the path for a link to ``$HOME`` and the write, delete
or undo lands there. Here every operation opens its directory *relative to a directory file
descriptor*, with no symbolic link allowed anywhere beneath it — ``openat2(2)`` with
``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`` where the kernel has it (Linux ≥ 5.6), else a
walk of ``O_NOFOLLOW | O_DIRECTORY`` opens, one component at a time — and then creates,
replaces or removes the last component with the ``*at`` calls on that descriptor. A link met
on the way is refused, never followed, so a swap can only make the operation fail.

Reads open with ``O_NONBLOCK | O_NOCTTY`` and refuse anything but a regular file at once: a
FIFO, a socket or a device at a workspace path must not block a tool (or the MCP server).

Paths are "/"-separated and relative to the base; callers resolve and check them first (the
workspace's containment and deny list), this module makes the operation hold to what was
checked.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass

from indexer import (
    READ_FLAGS,
    atomic_writer,
    open_beneath,
    openat2_available,
    plain_relative,
    shown,
)

from .errors import LinkInPathError, NotAFileError, PathEscapeError, PathNotFoundError

__all__ = ["Beneath", "Entry", "kind_of", "open_beneath", "openat2_available"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_READ_FLAGS = READ_FLAGS


def _check_rel(rel: str) -> str:
    if not plain_relative(rel):
        raise PathEscapeError(
            f"{rel!r} is not a plain relative path — pass a path inside the workspace."
        )
    return rel


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, in words ("a FIFO", "a socket"…)."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a link"),
    ):
        if test(mode):
            return name
    return "not a regular file"


@dataclass(frozen=True)
class Entry:
    """A directory entry as ``lstat`` sees it (links not followed)."""

    name: str
    st: os.stat_result


class Beneath:
    """A trusted base directory (the workspace root, or ``/`` for recorded real paths) and the
    operations on paths beneath it. Use as a context manager."""

    def __init__(self, base: str | os.PathLike[str]) -> None:
        self.base = os.fspath(base)
        # The base itself is trusted (the user's workspace, already a real path): opened once.
        self.fd = os.open(self.base, _DIR_FLAGS)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Beneath:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- errors -----------------------------------------------------------------------------------

    def error(self, exc: OSError, rel: str, what: str) -> Exception:
        """The one-line typed error for ``exc`` met while doing ``what`` to ``rel``."""
        if exc.errno in (errno.ELOOP, errno.EXDEV):
            return LinkInPathError(
                f"{shown(rel)}: a link is on the path — nothing was {what} through it (a directory or "
                "file was replaced by a link). Use the real path; see list_dir."
            )
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return PathNotFoundError(f"{shown(rel)} does not exist — list the directory to see what exists.")
        if exc.errno == errno.EISDIR:
            return NotAFileError(f"{shown(rel)} is a directory — pass the path of a file.")
        if exc.errno == errno.ENXIO:  # open() of a socket
            return NotAFileError(
                f"{shown(rel)} is a socket or device, not a regular file — only regular files are read."
            )
        return exc

    # -- opening ----------------------------------------------------------------------------------

    def open(self, rel: str, flags: int, mode: int = 0o666) -> int:
        return open_beneath(self.fd, rel, flags, mode)

    def open_dir(self, rel: str) -> int:
        """A descriptor of directory ``rel`` ("" or "." for the base)."""
        if rel in ("", "."):
            return os.dup(self.fd)
        return self.open(rel, _DIR_FLAGS)

    @contextmanager
    def parent(self, rel: str, *, create: bool = False) -> Iterator[tuple[int, str]]:
        """(descriptor of ``rel``'s directory, ``rel``'s last component); with ``create``, the
        missing directories are made first (each beneath the last, none through a link)."""
        _check_rel(rel)
        head, _, name = rel.rpartition("/")
        if create and head:
            self.makedirs(head)
        fd = self.open_dir(head)
        try:
            yield fd, name
        finally:
            os.close(fd)

    def read_fd(self, rel: str) -> tuple[int, os.stat_result]:
        """A descriptor of regular file ``rel`` for reading, and its stat; anything else (a
        FIFO, a socket, a device, a directory) is refused at once with one line."""
        try:
            fd = self.open(rel, _READ_FLAGS)
        except OSError as exc:
            raise self.error(exc, rel, "read") from exc
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            if stat.S_ISDIR(st.st_mode):
                raise NotAFileError(f"{shown(rel)} is a directory — use list_dir, or pass a file path.")
            raise NotAFileError(
                f"{shown(rel)} is {kind_of(st.st_mode)}, not a regular file — only regular files are read."
            )
        # Regular files ignore O_NONBLOCK; clear it anyway so the descriptor reads as usual.
        os.set_blocking(fd, True)
        return fd, st

    def read_bytes(self, rel: str, limit: int | None = None) -> bytes:
        """The bytes of regular file ``rel`` (at most ``limit + 1`` of them when a limit is given,
        so a caller can tell "over the limit" without reading a huge file whole)."""
        fd, _ = self.read_fd(rel)
        with os.fdopen(fd, "rb") as fh:
            return fh.read() if limit is None else fh.read(limit + 1)

    def lstat(self, rel: str) -> os.stat_result | None:
        """``lstat`` of ``rel`` (None when it does not exist); a link on the path is refused."""
        try:
            with self.parent(rel) as (dfd, name):
                return os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            return None
        except OSError as exc:
            raise self.error(exc, rel, "read") from exc

    def scandir(self, rel: str) -> list[Entry]:
        """Entries of directory ``rel``, sorted by name, each ``lstat``-ed (no link followed)."""
        try:
            fd = self.open_dir(rel)
        except OSError as exc:
            raise self.error(exc, rel or ".", "listed") from exc
        try:
            out = []
            for name in sorted(os.listdir(fd)):
                try:
                    out.append(Entry(name, os.stat(name, dir_fd=fd, follow_symlinks=False)))
                except FileNotFoundError:
                    continue  # removed while we looked
            return out
        finally:
            os.close(fd)

    # -- changing ---------------------------------------------------------------------------------

    def makedirs(self, rel: str) -> list[str]:
        """Make directory ``rel`` and its missing parents; returns the ones made, outermost first."""
        made: list[str] = []
        cur = os.dup(self.fd)
        done: list[str] = []
        try:
            for part in _check_rel(rel).split("/"):
                done.append(part)
                try:
                    os.mkdir(part, 0o777, dir_fd=cur)
                    made.append("/".join(done))
                except FileExistsError:
                    pass
                try:
                    nxt = open_beneath(cur, part, _DIR_FLAGS)
                except OSError as exc:
                    raise self.error(exc, "/".join(done), "created") from exc
                os.close(cur)
                cur = nxt
        finally:
            os.close(cur)
        return made

    def write(
        self,
        rel: str,
        data: bytes,
        *,
        mode: int | None = None,
        mtime_ns: int | None = None,
        create_parents: bool = True,
    ) -> list[str]:
        """Replace ``rel`` with ``data`` atomically (`indexer.atomic_writer`, relative to the
        directory descriptor: a temporary file beside the name, fsync, ``rename`` over the name,
        fsync of the directory; a link at the name is replaced, never written through; a hard
        link is split off, never written through either). Keeps the old file's permission bits
        unless ``mode`` is given. Returns the directories made."""
        made = self.makedirs(rel.rpartition("/")[0]) if create_parents and "/" in rel else []
        try:
            with self.parent(rel) as (dfd, name):
                try:
                    old = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                except FileNotFoundError:
                    old = None
                if old is not None and stat.S_ISDIR(old.st_mode):
                    raise NotAFileError(f"{shown(rel)} is a directory — pass a file path.")
                if mode is None:
                    mode = stat.S_IMODE(old.st_mode) if old and stat.S_ISREG(old.st_mode) else None
                owner = (old.st_uid, old.st_gid) if old is not None else None
                with atomic_writer(name, mode=mode, dir_fd=dfd) as fh:
                    fh.write(data)
                    fh.flush()  # before utime: a later flush would set the time again
                    if owner is not None and owner != (os.geteuid(), os.getegid()):
                        # Keep the owner where we may (as root); a user's own files are its own.
                        with suppress(PermissionError):
                            os.fchown(fh.fileno(), *owner)
                    if mtime_ns is not None:
                        os.utime(fh.fileno(), ns=(mtime_ns, mtime_ns))
        except OSError as exc:
            raise self.error(exc, rel, "written") from exc
        return made

    def symlink(self, rel: str, target: str) -> None:
        """Make ``rel`` a link to ``target`` (replacing a file or link there); the link is made,
        never followed."""
        try:
            with self.parent(rel, create=True) as (dfd, name):
                with suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=dfd)
                os.symlink(target, name, dir_fd=dfd)
        except OSError as exc:
            raise self.error(exc, rel, "written") from exc

    def unlink(self, rel: str) -> None:
        """Remove file or link ``rel`` (a link itself, not what it points to)."""
        try:
            with self.parent(rel) as (dfd, name):
                os.unlink(name, dir_fd=dfd)
        except OSError as exc:
            raise self.error(exc, rel, "deleted") from exc

    def rmdir(self, rel: str) -> None:
        """Remove empty directory ``rel``; OSError as the kernel says when it is not empty."""
        with self.parent(rel) as (dfd, name):
            os.rmdir(name, dir_fd=dfd)

    def rename(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst``, both beneath the base, neither through a link."""
        try:
            with self.parent(src) as (sfd, sname), self.parent(dst, create=True) as (dfd, dname):
                os.replace(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
        except OSError as exc:
            raise self.error(exc, src, "renamed") from exc
