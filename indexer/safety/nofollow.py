"""Open a path beneath a directory with no symbolic link followed anywhere on it.

The primitive under every host-side file operation on an untrusted tree: ``openat2(2)`` with
``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`` through ctypes where the kernel
has it (Linux ≥ 5.6), else a walk of ``O_NOFOLLOW | O_DIRECTORY`` opens, one component at a
time. A link met on the way is refused (ELOOP), never followed, so a directory swapped for a
link between a check and the open cannot redirect it. :func:`read_regular` is the read the
retrieval layer uses for snippets and context lines; agent/safe_fs.py builds the workspace's
writes and deletes on :func:`open_beneath`.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
from collections.abc import Callable

# openat2(2): include/uapi/linux/openat2.h. One syscall number on every architecture that
# has the generic table (x86_64's own table gave it the same number).
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "riscv64": 437, "ppc64le": 437, "s390x": 437}
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


class _Openat2:
    """The ``openat2`` syscall through libc's ``syscall()``; ``usable`` is False where the kernel
    or a seccomp filter lacks it (then callers walk components instead)."""

    def __init__(self) -> None:
        self.number = _SYS_OPENAT2.get(platform.machine())
        self.usable = self.number is not None
        self._syscall = None
        if self.usable:
            try:
                self._syscall = ctypes.CDLL(None, use_errno=True).syscall
            except (OSError, AttributeError):
                self.usable = False

    def __call__(self, dir_fd: int, rel: str, flags: int, mode: int) -> int:
        how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, _RESOLVE)
        fd = self._syscall(
            ctypes.c_long(self.number),
            ctypes.c_int(dir_fd),
            ctypes.c_char_p(os.fsencode(rel)),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EPERM) and self.usable:
            # No openat2 here (old kernel, or a seccomp filter that refuses it): walk instead.
            self.usable = False
            return _walk_open(dir_fd, rel, flags, mode)
        raise OSError(err, os.strerror(err), rel)


_OPENAT2 = _Openat2()


def openat2_available() -> bool:
    """Whether opens use ``openat2`` (else the component walk)."""
    return _OPENAT2.usable


def _walk_open(dir_fd: int, rel: str, flags: int, mode: int) -> int:
    """``openat2``'s guarantee by hand: each directory opened with O_NOFOLLOW from the last."""
    *dirs, last = rel.split("/")
    cur = dir_fd
    try:
        for part in dirs:
            nxt = _open_nofollow(part, _DIR_FLAGS, 0, cur, rel)
            if cur != dir_fd:
                os.close(cur)
            cur = nxt
        return _open_nofollow(last, flags | os.O_CLOEXEC, mode, cur, rel)
    finally:
        if cur != dir_fd:
            os.close(cur)


def _open_nofollow(name: str, flags: int, mode: int, dir_fd: int, rel: str) -> int:
    try:
        return os.open(name, flags | os.O_NOFOLLOW, mode, dir_fd=dir_fd)
    except NotADirectoryError:
        # O_NOFOLLOW | O_DIRECTORY on a link says ENOTDIR: report a link as openat2 does.
        if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), rel) from None
        raise


def plain_relative(rel: str) -> bool:
    """Whether ``rel`` is a "/"-separated relative path with no empty, "." or ".." part."""
    parts = rel.split("/")
    return bool(rel) and not rel.startswith("/") and "\x00" not in rel and not any(
        p in ("", ".", "..") for p in parts
    )


def open_beneath(dir_fd: int, rel: str, flags: int, mode: int = 0o666) -> int:
    """Open ``rel`` beneath ``dir_fd`` with no link followed anywhere; OSError as the kernel says
    (ELOOP for a link, EXDEV for a path that leaves the directory)."""
    if not plain_relative(rel):
        raise OSError(errno.EXDEV, "not a plain relative path", rel)
    if _OPENAT2.usable:
        return _OPENAT2(dir_fd, rel, flags, mode)
    return _walk_open(dir_fd, rel, flags, mode)


READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def open_regular(
    root: str | os.PathLike[str], rel: str, *, refuse: Callable[[str], bool] | None = None
) -> int:
    """A read descriptor of the regular file at ``root/rel``. Links inside ``root`` are resolved
    first and the real path is then opened with no link followed, so a swap between the two
    fails instead of redirecting. OSError when there is none to read: a link leading outside
    ``root`` or to a path ``refuse`` names (the secrets deny list), a FIFO, a socket, a device,
    a directory, a missing file — at once: nothing here waits on a FIFO."""
    root_real = os.path.realpath(root)
    real = os.path.realpath(os.path.join(root_real, rel))
    if not real.startswith(root_real.rstrip(os.sep) + os.sep):
        raise OSError(errno.EXDEV, "leads outside the tree", rel)
    real_rel = real[len(root_real.rstrip(os.sep)) + 1 :].replace(os.sep, "/")
    if refuse is not None and real_rel != rel and refuse(real_rel):
        raise OSError(errno.EACCES, "leads to a file on the secrets deny list", rel)
    dir_fd = os.open(root_real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = open_beneath(dir_fd, real_rel, READ_FLAGS)
    finally:
        os.close(dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", rel)
    os.set_blocking(fd, True)
    return fd


def read_regular(
    root: str | os.PathLike[str],
    rel: str,
    *,
    limit: int | None = None,
    refuse: Callable[[str], bool] | None = None,
) -> bytes | None:
    """The bytes (at most ``limit``) of the regular file :func:`open_regular` opens, or None
    when it refuses."""
    try:
        fd = open_regular(root, rel, refuse=refuse)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read() if limit is None else fh.read(limit)
