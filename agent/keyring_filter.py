"""Keep sandboxed commands away from the kernel's key retention service.

Kernel keyrings are not namespaced by any namespace the sandbox makes, and Landlock does not
mediate them: a command inherits repoctx's session keyring, possesses every key in it and reads
them (`keyctl read`), and as the same user it can link the user's persistent keyring (where
Kerberos keeps tickets with ``KEYRING:persistent``) into a keyring of its own. A command needs
no keys, so a seccomp filter makes ``add_key``, ``request_key`` and ``keyctl`` fail with EPERM
for it and everything it starts (as Docker's default profile does).

The filter program is built once, here, in the parent; the child only installs it. On an
architecture the table does not list, the filter allows everything (the other layers stand).
"""

from __future__ import annotations

import ctypes
import errno

# struct seccomp_data: nr at 0, arch at 4.
_NR, _ARCH = 0, 4
_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_AND = 0x54  # BPF_ALU | BPF_AND | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000
_DENY = 0x00050000 | errno.EPERM  # SECCOMP_RET_ERRNO
_X32_BIT = 0x40000000
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2

#: audit arch -> (add_key, request_key, keyctl), with whether x32 numbers share the table.
KEY_SYSCALLS: dict[int, tuple[tuple[int, int, int], bool]] = {
    0xC000003E: ((248, 249, 250), True),  # x86_64 (and x32)
    0x40000003: ((286, 287, 288), False),  # i386, also as compat on x86_64
    0xC00000B7: ((217, 218, 219), False),  # aarch64
    0x40000028: ((309, 310, 311), False),  # arm, also as compat on aarch64
}


class _Insn(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Insn))]


def _program() -> list[tuple[int, int, int, int]]:
    """(code, jt, jf, k) for: by arch, deny the three key syscalls; allow the rest."""
    out: list[tuple[int, int, int, int]] = [(_LD_ABS, 0, 0, _ARCH)]
    blocks = []
    for arch, (numbers, x32) in KEY_SYSCALLS.items():
        body: list[tuple[int, int, int, int]] = [(_LD_ABS, 0, 0, _NR)]
        if x32:
            body.append((_AND, 0, 0, 0xFFFFFFFF & ~_X32_BIT))
        body += [(_JEQ, -1, 0, n) for n in numbers]  # -1: to the deny at the end, fixed below
        body.append((_RET, 0, 0, _ALLOW))
        blocks.append((arch, body))
    for arch, body in blocks:
        out.append((_JEQ, 0, len(body), arch))  # not this arch: skip its block
        out += body
    out.append((_RET, 0, 0, _ALLOW))  # an architecture not in the table
    deny_at = len(out)
    out.append((_RET, 0, 0, _DENY))
    return [(c, deny_at - i - 1 if jt == -1 else jt, jf, k) for i, (c, jt, jf, k) in enumerate(out)]


_INSNS = (_Insn * len(_program()))(*(_Insn(*insn) for insn in _program()))
_PROG = _Prog(len(_INSNS), _INSNS)
_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl
_prctl.restype = ctypes.c_int
_prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)


def install() -> int:
    """In the child, before exec: install the filter; 0, or the errno that refused it."""
    if _prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return ctypes.get_errno()
    addr = ctypes.cast(ctypes.pointer(_PROG), ctypes.c_void_p).value or 0
    if _prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, addr, 0, 0) != 0:
        return ctypes.get_errno()
    return 0
