"""Landlock (Linux >= 5.13) through ctypes: the kernel's unprivileged file-system, TCP and scope
sandbox. See https://docs.kernel.org/userspace-api/landlock.html.

A ruleset is built in the parent (``Ruleset``: handled rights, then one rule per granted
hierarchy, each on an ``O_PATH`` descriptor); the child of the fork only calls
``prctl(PR_SET_NO_NEW_PRIVS)`` and ``landlock_restrict_self`` (``restrict_self``). Rights that a
ruleset handles and no rule grants are denied to the restricted process and everything it starts.
"""

from __future__ import annotations

import ctypes
import errno
import os

# Syscall numbers are the same on every architecture since 5.13 (asm-generic/unistd.h).
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

PR_SET_NO_NEW_PRIVS = 38

# -- file-system rights (ABI 1 unless noted) ------------------------------------------------------
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5

#: Rights that apply to a file (a rule on a non-directory may only grant these).
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
#: Read and run: what system and toolchain directories get.
READ = EXECUTE | READ_FILE | READ_DIR

# -- network rights (ABI 4) and scopes (ABI 6) ----------------------------------------------------
NET_BIND_TCP = 1 << 0
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_prctl = _libc.prctl
_prctl.restype = ctypes.c_int
_prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the uapi header
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


_abi_cache: list[int] = []


def abi_version() -> int:
    """The Landlock ABI the kernel offers; 0 when Landlock is not built in or not enabled."""
    if not _abi_cache:
        version = _syscall(
            ctypes.c_long(_SYS_CREATE_RULESET),
            None,
            ctypes.c_size_t(0),
            ctypes.c_uint32(_CREATE_RULESET_VERSION),
        )
        _abi_cache.append(max(int(version), 0))
    return _abi_cache[0]


def fs_rights(abi: int) -> int:
    """Every file-system right ``abi`` knows."""
    if abi >= 5:
        return (1 << 16) - 1
    if abi >= 3:
        return (1 << 15) - 1
    if abi >= 2:
        return (1 << 14) - 1
    return (1 << 13) - 1 if abi >= 1 else 0


def net_rights(abi: int) -> int:
    return NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0


def scopes(abi: int) -> int:
    return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0


def _raise(what: str) -> None:
    err = ctypes.get_errno()
    raise OSError(err, f"{what}: {os.strerror(err)}")


class Ruleset:
    """A Landlock ruleset under construction; ``fd`` is what the child restricts itself with."""

    def __init__(self, abi: int, *, fs: int, net: int = 0, scoped: int = 0) -> None:
        self.abi = abi
        self.fs = fs
        attr = _RulesetAttr(fs, net, scoped)
        size = 24 if abi >= 6 else 16 if abi >= 4 else 8
        fd = _syscall(
            ctypes.c_long(_SYS_CREATE_RULESET),
            ctypes.byref(attr),
            ctypes.c_size_t(size),
            ctypes.c_uint32(0),
        )
        if fd < 0:
            _raise("landlock_create_ruleset")
        self.fd = int(fd)

    def allow_path(self, path: str | bytes, access: int) -> bool:
        """Grant ``access`` on ``path`` and everything beneath it. False when the path is gone.

        On a file only FILE_RIGHTS apply; the others are dropped.
        """
        try:
            pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return False
        try:
            if not os.path.isdir(pfd):
                access &= FILE_RIGHTS
            return self.allow_fd(pfd, access)
        finally:
            os.close(pfd)

    def allow_fd(self, pfd: int, access: int) -> bool:
        access &= self.fs
        if not access:
            return True
        attr = _PathBeneathAttr(access, pfd)
        rc = _syscall(
            ctypes.c_long(_SYS_ADD_RULE),
            ctypes.c_int(self.fd),
            ctypes.c_int(_RULE_PATH_BENEATH),
            ctypes.byref(attr),
            ctypes.c_uint32(0),
        )
        if rc < 0:
            _raise("landlock_add_rule")
        return True

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def add_rule_raw(ruleset_fd: int, pfd: int, access: int) -> int:
    """landlock_add_rule for the child (no Python objects beyond the call); 0 or an errno."""
    attr = _PathBeneathAttr(access, pfd)
    rc = _syscall(
        ctypes.c_long(_SYS_ADD_RULE),
        ctypes.c_int(ruleset_fd),
        ctypes.c_int(_RULE_PATH_BENEATH),
        ctypes.byref(attr),
        ctypes.c_uint32(0),
    )
    return ctypes.get_errno() if rc < 0 else 0


def restrict_self(ruleset_fd: int) -> int:
    """In the child: no new privileges, then enforce the ruleset. 0 or an errno."""
    if _prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return ctypes.get_errno() or errno.EPERM
    rc = _syscall(ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(ruleset_fd), ctypes.c_uint32(0))
    return ctypes.get_errno() if rc < 0 else 0
