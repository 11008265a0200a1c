"""The index directory as found on disk is untrusted: refuse one that holds links.

A cloned repository can ship its own `.repoctx/` (git keeps symbolic links, and `git add -f`
gets past the `.gitignore` repoctx writes there), or be the link itself. SQLite, LanceDB, the
write lock, the watcher's pid file and log open their files *by path*, following links, so a
shipped `write.lock → ~/.bashrc` was truncated by the lock, `graph.db`, `history.db` or
`token_counts.db → ~/some.db` had the index's tables written into the user's file, and
`.repoctx → ~/dir` put the whole index there. SQLite offers no no-follow open through Python's
`sqlite3`, so instead of opening each file without following, every writer first checks the
directory it is about to write: it must be a real directory, and nothing beneath it a link or
a special file, except the one link repoctx makes itself — `graph.db` naming a generation file
beside it (`store.link`). The check is made from directory descriptors with no link followed
(`lstat` relative to an `O_NOFOLLOW` descriptor), so it sees what is on disk, not what a link
points at.

This holds against what was there before repoctx started (a clone, an unpacked archive). A
command that swaps entries while a build runs is the sandbox's to stop (the index directory is
mounted read-only for commands; see docs/security.md, "Not at all", where there is no mount
namespace).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from indexer.errors import UnsafeIndexDirError
from indexer.locations import VECTORS_DIR

__all__ = ["check_index_dir"]

#: The only links repoctx makes in an index directory: `graph.db` and the temporary name it is
#: made under before the atomic rename (`store.link`), each naming a generation file.
_OWN_LINKS = re.compile(r"graph\.db|\.graph\.db\.\d+\.tmp")
_GENERATION = re.compile(r"graph\.\d+\.db")
_VECTORS_ASIDE = f"{VECTORS_DIR}.damaged-"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _refuse(index_dir: Path, where: str, what: str) -> UnsafeIndexDirError:
    return UnsafeIndexDirError(
        f"The index directory {index_dir} holds {what} at {where!r}, which repoctx never "
        f"makes (a repository can ship one) — remove the directory (`rm -r {index_dir}`) and "
        "build again.")


def check_index_dir(index_dir: Path) -> None:
    """Raise UnsafeIndexDirError when ``index_dir`` is a link or holds, at any depth, a link
    (other than `graph.db` → a generation file), a FIFO, a socket or a device. A missing
    directory is fine: repoctx creates it."""
    index_dir = Path(index_dir)
    try:
        top = os.open(index_dir, _DIR_FLAGS)
    except FileNotFoundError:
        return
    except OSError as exc:  # ELOOP: the directory itself is a link; ENOTDIR: not a directory
        try:
            mode = os.lstat(index_dir).st_mode
        except FileNotFoundError:
            return
        what = (f"is a link to {os.readlink(index_dir)!r}" if stat.S_ISLNK(mode)
                else "is not a directory")
        raise UnsafeIndexDirError(
            f"The index directory {index_dir} {what} — remove it (`rm {index_dir}`), or set "
            "`index_dir` in ~/.config/repoctx/config.toml to a real directory.") from exc
    try:
        _walk(index_dir, top, "")
    finally:
        os.close(top)


def _walk(index_dir: Path, dir_fd: int, prefix: str) -> None:
    # The index's own tree is shallow (vectors.lance/_versions/…): a shipped tree deeper than
    # that is refused rather than recursed into (no RecursionError, no descriptor exhaustion).
    if prefix.count("/") > 64:
        raise _refuse(index_dir, prefix, "a directory nested deeper than any index")
    with os.scandir(dir_fd) as entries:
        names = [e.name for e in entries]
    for name in names:
        rel = f"{prefix}{name}"
        try:
            st = os.lstat(name, dir_fd=dir_fd)
        except FileNotFoundError:  # removed meanwhile (a reader's temp file)
            continue
        mode = st.st_mode
        if stat.S_ISLNK(mode):
            if prefix == "" and _OWN_LINKS.fullmatch(name) and _GENERATION.fullmatch(
                    os.readlink(name, dir_fd=dir_fd)):
                continue
            if prefix == "" and (name == VECTORS_DIR or name.startswith(_VECTORS_ASIDE)):
                # The vector table's own damage handling owns these: it renames a link in the
                # table's place aside (`vectors.lance.damaged-<time>`), never following it, and
                # embeds again (`VectorTableDamagedError`); links *inside* a real table
                # directory are refused below.
                continue
            raise _refuse(index_dir, rel, f"a link to {os.readlink(name, dir_fd=dir_fd)!r}")
        if stat.S_ISDIR(mode):
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except FileNotFoundError:
                continue
            try:
                _walk(index_dir, fd, rel + "/")
            finally:
                os.close(fd)
        elif not stat.S_ISREG(mode):
            raise _refuse(index_dir, rel, "a special file (FIFO, socket or device)")
