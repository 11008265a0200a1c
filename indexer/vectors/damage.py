"""The vector table as it lies on disk: its place, damage told from its shape or from what Lance
raises while reading it, a full disk in Lance's words, and setting a damaged table aside.

Apart from `vectors.py` so that a no-op build or `index status` can check the table with a few
stats, without importing LanceDB.
"""

from __future__ import annotations

import errno
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager

from indexer.blake2 import blake2b
from indexer.errors import VectorTableDamagedError

TABLE = "chunks"


def local_table_dir(uri: str) -> str | None:
    """The directory holding the table of a local vectors ``uri``; None for object storage.
    Lets a no-op build or `index status` see a deleted table without importing LanceDB."""
    from indexer.locations import is_remote

    if is_remote(uri):
        return None
    return os.path.join(os.path.expanduser(uri.removeprefix("file://")), f"{TABLE}.lance")


def table_problem(uri: str) -> str | None:
    """Why the local table at ``uri`` cannot be a LanceDB table, told from its shape on disk
    alone (a few stats, no import): a plain file or a symbolic link where its directory or the
    directory holding it should be, a table directory without versions. None when it looks
    like a table, is absent, or lives on object storage. A link is damage even when it points
    at a table: the index writes its vectors only below directories it made, never through a
    link someone put in their place."""
    table = local_table_dir(uri)
    if table is None:
        return None
    for path in (os.path.dirname(table), table):
        if os.path.islink(path):
            return f"{path} is a symbolic link, not a directory"
        if os.path.lexists(path) and not os.path.isdir(path):
            return f"{path} is not a directory"
    if os.path.isdir(table) and not os.path.isdir(os.path.join(table, "_versions")):
        return f"{table} has no _versions directory"
    return None


def table_missing(uri: str) -> bool | None:
    """True when there is nothing at the local table's place (``table_problem`` tells a
    damaged one); None when it cannot be told without connecting (object storage)."""
    path = local_table_dir(uri)
    if path is None:
        return None
    return not os.path.lexists(path) and table_problem(uri) is None


def table_stamp(uri: str) -> str | None:
    """Names, sizes and modification times of the local table's files (data, versions,
    indexes): what a build compares with the stamp it recorded to tell, without reading the
    table, that nothing changed it since. None for object storage or no table."""
    table = local_table_dir(uri)
    if table is None or table_problem(uri) is not None or not os.path.isdir(table):
        return None
    entries = []
    for sub in ("data", "_versions", "_indices", "_transactions", "_deletions"):
        top = os.path.join(table, sub)
        for dirpath, _, names in os.walk(top):
            for name in names:
                path = os.path.join(dirpath, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                entries.append(f"{os.path.relpath(path, table)}:{st.st_size}:{st.st_mtime_ns}")
    return blake2b("\n".join(sorted(entries)).encode(), digest_size=16).hexdigest()


def first_line(exc: BaseException) -> str:
    """The first line of what an error says: Lance appends Rust source locations and more."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


#: How Lance words a full disk, an exceeded quota, a read-only file system (no errno).
_EXHAUSTION_TEXT = re.compile(r"os error (28|122|30)\b")


def exhaustion_errno(exc: BaseException) -> int | None:
    """ENOSPC, EDQUOT or EROFS when ``exc`` (an OSError, or what Lance raised) says so."""
    code = getattr(exc, "errno", None)
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        return code
    m = _EXHAUSTION_TEXT.search(str(exc))
    return int(m.group(1)) if m else None


#: OS errors that say nothing about the table's bytes: never a reason to call it damaged.
_NOT_DAMAGE = frozenset({errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT, errno.EROFS,
                         errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EINTR})


@contextmanager
def reading(uri: str) -> Iterator[None]:
    """Turn what Lance raises while reading a local table (a data file deleted, cut short or
    overwritten; a manifest garbled; a foreign schema) into `VectorTableDamagedError`, so that
    readers fall back to lexical search and builds set the table aside. On object storage an
    error may be the network's: it is raised as it is."""
    try:
        yield
    except (OSError, RuntimeError, ValueError, KeyError) as exc:
        if local_table_dir(uri) is None or getattr(exc, "errno", None) in _NOT_DAMAGE:
            raise
        raise VectorTableDamagedError(uri, first_line(exc)) from exc


def set_aside(uri: str) -> str:
    """Move a damaged local table out of the way, kept for inspection: the table directory, or
    whatever stands where the directory holding it should be (a file, a link: the link itself,
    never what it points at). Returns where it went. Under the write lock only."""
    table = local_table_dir(uri)
    assert table is not None, "object storage: drop the table instead"
    base = os.path.dirname(table)
    bad = base if os.path.islink(base) or (os.path.lexists(base) and not os.path.isdir(base)) \
        else table
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dest, i = f"{bad}.damaged-{stamp}", 1
    while os.path.lexists(dest):
        i += 1
        dest = f"{bad}.damaged-{stamp}-{i}"
    os.replace(bad, dest)
    return dest
