"""What the forked child does before exec to enter the sandbox: namespaces and mounts, then
Landlock. Everything is prepared in the parent as bytes and ints (``ChildPlan``); the child makes
system calls only (it may be the fork of a threaded process, such as the MCP server).

A failing step writes (step, errno) into a shared page and raises, so the parent learns which
step failed and the command does not run.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import signal
import struct
from dataclasses import dataclass, field

from . import keyring_filter, landlock

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MS_STRICTATIME = 1 << 24
#: Mount options of each private, writable tmpfs (/tmp, /dev/shm). Its pages are the host's
#: memory, outside every rlimit and the pids cgroup; without a size the kernel lends each one
#: half of RAM, so one command filling both could take all of it. The inode count is bounded
#: for the same reason (every empty file costs kernel memory too).
PRIVATE_TMPFS_OPTIONS = b"mode=1777,size=1g,nr_inodes=262144"
_ST_RELATIME = 4096
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_SIOCSIFFLAGS = 0x8914
_IFF_UP_LOOPBACK_RUNNING = 0x1 | 0x8 | 0x40
_CAP_V3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)
_mount = _libc.mount
_mount.argtypes = (
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_char_p,
)
_mount.restype = ctypes.c_int
_unshare = _libc.unshare
_unshare.argtypes = (ctypes.c_int,)
_unshare.restype = ctypes.c_int
_prctl = _libc.prctl
_prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
_prctl.restype = ctypes.c_int
_socket = _libc.socket
_socket.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int)
_socket.restype = ctypes.c_int
_ioctl = _libc.ioctl
_ioctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p)
_ioctl.restype = ctypes.c_int
_capget = _libc.capget
_capset = _libc.capset
_signal = _libc.signal
_signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
_signal.restype = ctypes.c_void_p
# fork() that keeps the GIL (PyDLL) and runs no Python at-fork hook: the new process has one
# thread, whatever the hooks of the first fork started.
_fork = ctypes.PyDLL(None).fork
_fork.restype = ctypes.c_int
_SIG_DFL = 0
_SIG_IGN = 1


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


#: Names of the steps, by number. A failure at a step up to LAST_PROBE_STEP means the kernel
#: does not let us make namespaces (the caller then tries without them).
STEPS = (
    "",
    "unshare",
    "setgroups",
    "uid_map",
    "gid_map",
    "make / private",
    "mount /proc",
    "mount a private tree",
    "bind a granted path back",
    "remount read-only",
    "cover a secret",
    "bring up lo",
    "chdir",
    "landlock rule for a private tmpfs or /proc",
    "drop capabilities",
    "landlock_restrict_self",
    "seccomp filter of the key syscalls",
)
LAST_PROBE_STEP = 6
_FAIL = struct.Struct("ii")
#: At this offset of the shared page, PID 1 of a PID namespace leaves (1, wait status) of the
#: command for the relay outside, which ends the same way.
_STATUS_AT = _FAIL.size
#: Bytes of the shared page.
SHARED_SIZE = 2 * _FAIL.size


def mount_flags(path: str) -> int:
    """Flags a read-only remount of a bind of ``path`` must keep (they are locked in a user
    namespace: changing them is EPERM)."""
    try:
        f = os.statvfs(path).f_flag
    except OSError:
        return MS_NOSUID | MS_NODEV
    out = f & (MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME | MS_NODIRATIME)
    if f & _ST_RELATIME:
        out |= MS_RELATIME
    elif not f & MS_NOATIME:
        out |= MS_STRICTATIME
    return out


def loopback_ifreq() -> ctypes.Array[ctypes.c_char]:
    """struct ifreq that sets `lo` up (name, then the flags at offset 16; 40 bytes)."""
    buf = ctypes.create_string_buffer(40)
    buf.raw = b"lo".ljust(16, b"\0") + struct.pack("h", _IFF_UP_LOOPBACK_RUNNING).ljust(24, b"\0")
    return buf


@dataclass
class Tree:
    """An empty tmpfs mounted over ``path``; ``writable`` ones stay writable (and get a
    Landlock rule), the others are remounted read-only once the kept paths are bound back."""

    path: bytes
    writable: bool


@dataclass
class Keep:
    """A path inside a covered tree, bound back at the same place."""

    path: bytes
    is_dir: bool
    writable: bool
    #: mount flags to keep when remounting read-only
    flags: int


@dataclass
class ChildPlan:
    """Everything the child does, prepared in the parent."""

    shared: mmap.mmap
    ns_flags: int = 0
    uid_map: bytes = b""
    gid_map: bytes = b""
    trees: list[Tree] = field(default_factory=list)
    keep: list[Keep] = field(default_factory=list)
    mkdirs: list[bytes] = field(default_factory=list)
    #: (path, flags to keep) bound onto itself read-only
    readonly: list[tuple[bytes, int]] = field(default_factory=list)
    #: covered by a read-only bind of ``empty_file`` (an empty regular file, so git still
    #: works: it sees the file emptied rather than a device it cannot hash)
    cover_files: list[bytes] = field(default_factory=list)
    empty_file: bytes = b""
    empty_flags: int = 0
    #: covered by an empty read-only tmpfs
    cover_dirs: list[bytes] = field(default_factory=list)
    ifreq: ctypes.Array[ctypes.c_char] | None = None
    cwd: bytes = b""
    ruleset_fd: int = -1
    rw_access: int = 0
    #: CAP_LAST_CAP, or -1 to leave capabilities alone
    drop_caps: int = -1
    cap_header: _CapHeader = field(default_factory=lambda: _CapHeader(_CAP_V3, 0))
    cap_data: ctypes.Array[_CapData] = field(default_factory=lambda: (_CapData * 2)())

    def failure(self) -> tuple[int, int] | None:
        """In the parent: (step, errno) if the child failed, else None."""
        self.shared.seek(0)
        step, err = _FAIL.unpack(self.shared.read(_FAIL.size))
        return (step, err) if step else None

    def _fail(self, step: int, err: int) -> None:
        self.shared.seek(0)
        self.shared.write(_FAIL.pack(step, err or errno.EPERM))
        raise OSError(err, STEPS[step])

    def _call(self, step: int, rc: int) -> None:
        if rc != 0:
            self._fail(step, ctypes.get_errno())

    def __call__(self) -> None:
        if self.ns_flags & CLONE_NEWPID:
            # The command's namespaces live as long as this process: it dies with repoctx (or
            # the thread that started it), even when repoctx itself is SIGKILLed.
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if self.ns_flags:
            self._namespaces()
        if self.ruleset_fd >= 0:
            # Private tmpfs trees and the new /proc are mounts made here: no rule of the
            # parent's names them.
            fresh = [(t.path, self.rw_access) for t in self.trees if t.writable]
            if self.ns_flags & CLONE_NEWPID:
                fresh.append((b"/proc", landlock.READ))
            for path, access in fresh:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                err = landlock.add_rule_raw(self.ruleset_fd, fd, access)
                os.close(fd)
                if err:
                    self._fail(13, err)
        if self.drop_caps >= 0:
            self._drop_capabilities()
        if self.ruleset_fd >= 0:
            err = landlock.restrict_self(self.ruleset_fd)
            if err:
                self._fail(15, err)
            os.close(self.ruleset_fd)
        # Kernel keyrings belong to no namespace made here (agent/keyring_filter.py). EINVAL: a
        # kernel built without seccomp filters, where the other layers stand alone.
        err = keyring_filter.install()
        if err and err != errno.EINVAL:
            self._fail(16, err)
        if self.ns_flags & CLONE_NEWPID:
            self._init()

    def _init(self) -> None:
        """As PID 1 of the new PID namespace: start the command as its child and wait. PID 1
        ignores every signal it has no handler for, so it stays out of the way of the runner's
        SIGTERM to the process group (the command gets it); when the command ends, this process
        exits and the kernel kills whatever else is left in the namespace — setsid(2)'d
        daemons included. Leaves the command's wait status in the shared page for the relay."""
        pid = _fork()
        if pid < 0:
            self._fail(1, ctypes.get_errno())
        if pid == 0:
            return  # the command: exec follows
        # repoctx's memory and environment (API keys) must not be readable through /proc/1.
        _prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
        os.closerange(0, 1 << 20)
        while True:
            try:
                done, status = os.waitpid(-1, 0)
            except ChildProcessError:
                os._exit(255)
            if done == pid:
                self.shared.seek(_STATUS_AT)
                self.shared.write(_FAIL.pack(1, status))
                os._exit(0)

    def _drop_capabilities(self) -> None:
        # Emptying the bounding set makes even root's next program start without capabilities.
        for cap in range(self.drop_caps + 1):
            _prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
        _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
        header, data = self.cap_header, self.cap_data
        if _capget(ctypes.byref(header), data) == 0:
            data[0].inheritable = 0
            data[1].inheritable = 0
            if _capset(ctypes.byref(header), data) != 0:
                self._fail(14, ctypes.get_errno())

    def _relay(self) -> None:
        """Return in a new single-threaded child; the current process stays behind, holding no
        descriptor (so output and the exec report reach the parent through the child only),
        and ends the way the child ends: same exit status, or killed by the same signal."""
        pid = _fork()
        if pid < 0:
            self._fail(1, ctypes.get_errno())
        if pid == 0:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            return
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
            _signal(sig, _SIG_IGN)  # the group's signals are the child's to handle
        os.closerange(0, 1 << 20)
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except ChildProcessError:
                os._exit(255)
        self.shared.seek(_STATUS_AT)
        recorded, command_status = _FAIL.unpack(self.shared.read(_FAIL.size))
        if recorded and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            status = command_status  # PID 1 exited for the command, which ended this way
        code = os.waitstatus_to_exitcode(status)
        if code < 0:
            _signal(-code, _SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code & 0xFF)

    def _write(self, step: int, name: bytes, data: bytes) -> None:
        try:
            fd = os.open(name, os.O_WRONLY)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError as exc:
            self._fail(step, exc.errno or errno.EPERM)

    def _namespaces(self) -> None:
        rc = _unshare(self.ns_flags)
        if rc != 0 and ctypes.get_errno() == errno.EINVAL and self.ns_flags & CLONE_NEWUSER:
            # A user namespace needs a single-threaded process, and this one has threads: Python
            # ran the at-fork hooks of the libraries loaded (lancedb starts its event loop's
            # thread in every child). Go on in a child made without hooks; this process only
            # waits for it and exits as it did.
            self._relay()
            rc = _unshare(self.ns_flags)
        self._call(1, rc)
        if self.uid_map:
            self._write(2, b"/proc/self/setgroups", b"deny")
            self._write(3, b"/proc/self/uid_map", self.uid_map)
            self._write(4, b"/proc/self/gid_map", self.gid_map)
        if self.ns_flags & CLONE_NEWPID:
            # A new PID namespace holds the children of the process that made it: go on in a
            # child, PID 1 there; this process stays outside, waits and ends as the command.
            self._relay()
        # Nothing mounted below may propagate to the host.
        self._call(5, _mount(None, b"/", None, MS_REC | MS_PRIVATE, None))
        if self.ns_flags & CLONE_NEWPID:
            # A /proc of the new namespace: only the command's own processes are listed. Made
            # by PID 1, whose namespace a proc mount shows. Refused (EPERM) in a user namespace
            # when the host's /proc has parts covered: the caller then does without.
            proc_flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
            self._call(6, _mount(b"proc", b"/proc", b"proc", proc_flags, None))
            # Kernel settings stay read-only even for a root command where Landlock is missing.
            for path in (b"/proc/sys", b"/proc/sysrq-trigger"):
                if _mount(path, path, None, MS_BIND | MS_REC, None) == 0:
                    flags = MS_REMOUNT | MS_BIND | MS_RDONLY | proc_flags
                    self._call(6, _mount(None, path, None, flags, None))
        empty = -1
        if self.cover_files:
            try:
                empty = os.open(self.empty_file, os.O_PATH | os.O_CLOEXEC)
            except OSError as exc:
                self._fail(10, exc.errno or errno.ENOENT)
        kept = []
        for keep in self.keep:
            try:
                kept.append((os.open(keep.path, os.O_PATH | os.O_CLOEXEC), keep))
            except OSError:
                continue  # gone since the plan was made
        for tree in self.trees:
            data = PRIVATE_TMPFS_OPTIONS if tree.writable else b"mode=0755,size=64k"
            self._call(7, _mount(b"tmpfs", tree.path, b"tmpfs", MS_NOSUID | MS_NODEV, data))
        for path in self.mkdirs:
            try:
                os.mkdir(path, 0o755)
            except FileExistsError:
                continue
            except OSError as exc:
                self._fail(8, exc.errno or errno.EPERM)
        for fd, keep in kept:
            if not keep.is_dir:
                try:
                    os.close(os.open(keep.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
                except OSError as exc:
                    self._fail(8, exc.errno or errno.EPERM)
            self._call(8, _mount(b"/proc/self/fd/%d" % fd, keep.path, None, MS_BIND | MS_REC, None))
            os.close(fd)
            if not keep.writable:
                flags = MS_REMOUNT | MS_BIND | MS_RDONLY | keep.flags
                self._call(9, _mount(None, keep.path, None, flags, None))
        for tree in self.trees:
            if not tree.writable:
                flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV
                self._call(9, _mount(None, tree.path, None, flags, None))
        for path, keep_flags in self.readonly:
            if _mount(path, path, None, MS_BIND | MS_REC, None) != 0:
                if ctypes.get_errno() == errno.ENOENT:
                    continue  # removed since the walk
                self._fail(9, ctypes.get_errno())
            flags = MS_REMOUNT | MS_BIND | MS_RDONLY | keep_flags
            self._call(9, _mount(None, path, None, flags, None))
        source = b"/proc/self/fd/%d" % empty
        for path in self.cover_files:
            if _mount(source, path, None, MS_BIND, None) != 0:
                if ctypes.get_errno() == errno.ENOENT:
                    continue  # removed since the walk
                self._fail(10, ctypes.get_errno())
            flags = MS_REMOUNT | MS_BIND | MS_RDONLY | self.empty_flags
            self._call(10, _mount(None, path, None, flags, None))
        if empty >= 0:
            os.close(empty)
        for path in self.cover_dirs:
            flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
            if _mount(b"tmpfs", path, b"tmpfs", flags, b"size=4k,mode=0555") != 0:
                if ctypes.get_errno() == errno.ENOENT:
                    continue
                self._fail(10, ctypes.get_errno())
        if self.ifreq is not None:
            sock = _socket(2, 2, 0)  # AF_INET, SOCK_DGRAM: any socket takes interface ioctls
            if sock < 0:
                self._fail(11, ctypes.get_errno())
            rc = _ioctl(sock, _SIOCSIFFLAGS, ctypes.cast(self.ifreq, ctypes.c_void_p))
            os.close(sock)
            self._call(11, rc)
        # The working directory was entered before the mounts: enter it again through them.
        try:
            os.chdir(self.cwd)
        except OSError as exc:
            self._fail(12, exc.errno or errno.EPERM)
