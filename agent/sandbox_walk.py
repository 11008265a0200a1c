"""The workspace walk of the sandbox: which files and directories under the workspace are secret
(per the workspace's deny list) and where its `.git` entries are, so that the mount namespace can
cover them. A directory is rescanned only when its mtime changed.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

#: Not entered by the workspace walk (see `secrets_in`), nor is any directory holding a
#: `pyvenv.cfg` (a virtualenv): secrets inside them are not covered.
PRUNED_DIRS: frozenset[str] = frozenset({".git", "node_modules", "__pycache__"})

#: Directories changed this recently are rescanned next time: their mtime may not move again
#: within the file system's timestamp granularity.
_RACY_NS = 2_000_000_000


@dataclass(frozen=True)
class _DirScan:
    mtime_ns: int
    subdirs: tuple[str, ...]
    #: (relative path, "file" | "dir" | "git")
    hits: tuple[tuple[str, str], ...]


_lock = threading.Lock()
_walk_cache: dict[tuple[str, object], dict[str, _DirScan]] = {}


def secrets_in(root: str, is_secret: Callable[[str], bool]) -> list[tuple[str, str]]:
    """Secret files and directories (per ``is_secret``) and `.git` entries under ``root``, as
    (relative path, kind). Not entered: ``PRUNED_DIRS``, virtualenvs (a `pyvenv.cfg` inside) and
    the secrets themselves. A directory is rescanned only when its mtime changed."""
    # A workspace's predicate is fixed by its patterns: runs with equal deny lists share a cache.
    key = (root, getattr(getattr(is_secret, "__self__", None), "deny_patterns", is_secret))
    with _lock:
        previous = _walk_cache.get(key, {})
    current: dict[str, _DirScan] = {}
    hits: list[tuple[str, str]] = []
    now = time.time_ns()
    stack = [""]
    while stack:
        rel = stack.pop()
        path = os.path.join(root, rel) if rel else root
        try:
            mtime = os.lstat(path).st_mtime_ns
        except OSError:
            continue
        scan = previous.get(rel)
        if scan is None or scan.mtime_ns != mtime:
            scan = _scan_dir(path, rel, mtime, is_secret)
        if now - mtime > _RACY_NS:
            current[rel] = scan
        hits += scan.hits
        stack += scan.subdirs
    with _lock:
        if len(_walk_cache) >= 8 and key not in _walk_cache:
            _walk_cache.clear()
        _walk_cache[key] = current
    return hits


def nothing_secret(_rel: str) -> bool:
    return False


def _scan_dir(path: str, rel: str, mtime: int, is_secret: Callable[[str], bool]) -> _DirScan:
    subdirs: list[str] = []
    hits: list[tuple[str, str]] = []
    try:
        entries = list(os.scandir(path))
    except OSError:
        return _DirScan(mtime, (), ())
    for entry in entries:
        erel = f"{rel}/{entry.name}" if rel else entry.name
        is_dir = entry.is_dir(follow_symlinks=False)
        if entry.name == ".git":
            hits.append((erel, "git"))
            if is_dir and is_secret(f"{erel}/config"):
                hits.append((f"{erel}/config", "file"))
            continue
        if is_secret(erel):
            hits.append((erel, "dir" if is_dir else "file"))
        elif (
            is_dir
            and entry.name not in PRUNED_DIRS
            and not os.path.exists(os.path.join(entry.path, "pyvenv.cfg"))
        ):
            subdirs.append(erel)
    return _DirScan(mtime, tuple(subdirs), tuple(hits))
