"""Find the files to index under a repository root (stat only).

In a git work tree the file list comes from ``git ls-files`` (`indexer.parse.git_listing`);
elsewhere the tree is walked here with ``.gitignore`` semantics (`indexer.parse.ignore_rules`).
``.repoctxignore`` files and ``Config.exclude`` apply on top of both, and so do the skip reasons
by name and directory (`indexer.parse.classify`); what both modes share is `indexer.parse.scan`.
The content of a file is classified later, by the worker that reads it (`classify_content`).
"""

from __future__ import annotations

import os
import stat

from indexer.config import Config
from indexer.parse.classify import (
    DATA_SUFFIXES,
    MAX_DATA_BYTES,
    SKIPPED_DIRS,
    decodable,
    in_skipped_dir,
    name_skip,
)
from indexer.parse.git_listing import check_ignore, from_git, git_ls_files
from indexer.parse.ignore_rules import (
    GITIGNORE,
    REPOCTXIGNORE,
    Groups,
    add_layers,
    ignored,
    read_layer,
)
from indexer.parse.scan import MAX_EXAMPLES, DiscoveredFile, Discovery, Scan

__all__ = ["MAX_EXAMPLES", "DiscoveredFile", "Discovery", "discover", "is_ignored_path"]


def _walk(scan: Scan) -> None:
    """Walk the tree with gitignore semantics, pruning ignored directories.

    Real directories are walked first; directory symlinks are followed afterwards, in path
    order, and only when their target was not walked already, so results do not depend on
    the order the file system lists entries in.
    """
    visited: set[str] = set()
    deferred: list[tuple[str, str, str, Groups]] = []
    pending: list[tuple[str, str, str, Groups]] = [
        ("", scan.root, scan.root_real, scan.root_groups(with_gitignore=False))
    ]
    _scan_dirs(scan, pending, visited, deferred)
    while deferred:
        batch = sorted(deferred, key=lambda item: item[0])
        deferred = []
        for rel, abs_path, real, groups in batch:
            if real in visited:
                scan.skip("symlink_loop", rel)
                continue
            _scan_dirs(scan, [(rel, abs_path, real, groups)], visited, deferred)


def _scan_dirs(
    scan: Scan,
    pending: list[tuple[str, str, str, Groups]],
    visited: set[str],
    deferred: list[tuple[str, str, str, Groups]],
) -> None:
    index_rel = scan.index_rel
    sep = os.sep
    max_bytes = scan.max_bytes
    files = scan.files
    unparsable = scan.unparsable
    plain = scan.plain_suffixes
    new_tuple = tuple.__new__
    while pending:
        rel_dir, abs_dir, real_dir, groups = pending.pop()
        visited.add(real_dir)
        # Under a followed directory link each file's real path is checked against the deny list.
        linked = real_dir != (scan.root_real + sep + rel_dir if rel_dir else scan.root_real)
        try:
            with os.scandir(abs_dir) as it:
                entries = list(it)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:
            scan.skip("unreadable", rel_dir or ".")
            continue
        gitignore = repoctx = None
        for entry in entries:
            if entry.name == GITIGNORE:
                gitignore = read_layer(entry.path, rel_dir)
            elif entry.name == REPOCTXIGNORE and rel_dir:
                # The root's .repoctxignore is already part of the groups the walk starts with.
                repoctx = read_layer(entry.path, rel_dir)
        groups = add_layers(groups, gitignore, repoctx)
        check = any(groups)
        prefix = rel_dir + "/" if rel_dir else ""
        for entry in entries:
            name = entry.name
            rel = prefix + name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if name == ".git" or rel == index_rel:
                        continue
                    if check and ignored(groups, rel, name, True):
                        continue
                    if scan.undecodable(rel):  # counted once; nothing below it is readable
                        continue
                    reason = SKIPPED_DIRS.get(name)
                    if reason:
                        scan.skip(reason, rel)
                        continue
                    pending.append((rel, entry.path, real_dir + sep + name, groups))
                    continue
                if entry.is_file(follow_symlinks=False):
                    if name == ".git" or (check and ignored(groups, rel, name, False)):
                        continue
                    if not rel.isascii() and scan.undecodable(rel):
                        continue
                    if linked and scan.secret_target(rel, real_dir + sep + name):
                        continue
                    if name[name.rfind(".") :] not in plain:
                        reason = name_skip(name) or ("no_grammar" if unparsable(name) else None)
                        if reason:
                            scan.skip(reason, rel)
                            continue
                    st = entry.stat(follow_symlinks=False)
                    # Inlined add_regular: this line runs once per file of the tree.
                    if st.st_size > max_bytes:
                        scan.skip("too_large", rel)
                    elif st.st_size > MAX_DATA_BYTES and name.endswith(DATA_SUFFIXES):
                        scan.skip("large_data", rel)
                    else:  # tuple.__new__: a NamedTuple's own __new__ is a Python call
                        files.append(new_tuple(DiscoveredFile, (rel, st.st_size, st.st_mtime_ns)))
                    continue
                is_link = entry.is_symlink()
            except FileNotFoundError:
                continue  # removed while we looked
            except OSError:
                scan.skip("unreadable", rel)
                continue
            if is_link:
                _walk_symlink(scan, entry, rel, groups, check, deferred)
            elif not (check and ignored(groups, rel, name, False)):
                scan.skip("not_regular", rel)


def _walk_symlink(
    scan: Scan,
    entry: os.DirEntry[str],
    rel: str,
    groups: Groups,
    check: bool,
    deferred: list[tuple[str, str, str, Groups]],
) -> None:
    name = entry.name
    try:
        is_dir = entry.is_dir()
    except OSError:
        is_dir = False
    if check and ignored(groups, rel, name, is_dir):
        return
    if scan.undecodable(rel):
        return
    if is_dir and name in SKIPPED_DIRS:
        scan.skip(SKIPPED_DIRS[name], rel)
        return
    reason = None if is_dir else name_skip(name)
    if reason:
        scan.skip(reason, rel)
        return
    followed = scan.follow(entry.path, rel)
    if followed is None:
        return
    st, real = followed
    if stat.S_ISDIR(st.st_mode):
        deferred.append((rel, entry.path, real, groups))
    elif stat.S_ISREG(st.st_mode):
        scan.add_regular(rel, st)
    else:
        scan.skip("not_regular", rel)


# --------------------------------------------------------------------------- public API


def discover(config: Config, skip_unparsable: bool = False) -> Discovery:
    """List the files to index under ``config.root``. Stats files; never reads their content.
    With ``skip_unparsable`` (what builds want), a file whose name says no language takes it
    is counted as ``no_grammar`` without a stat instead of listed."""
    scan = Scan(config, skip_unparsable)
    paths = git_ls_files(scan.root)
    if paths is not None:
        from_git(scan, paths)
        return scan.result(git=True)
    _walk(scan)
    return scan.result(git=False)


def is_ignored_path(config: Config, rel_path: str) -> bool:
    """Whether ``rel_path`` (POSIX, relative to the root) is excluded by discovery's path rules.

    Ignore files, ``Config.exclude``, ``.git``, the index directory, minified names and names
    that are not UTF-8 are applied. Stat-dependent skips (size, symlinks, permissions) are
    not: a change to such a file must still reach the builder, which rediscovers it.
    """
    rel = rel_path.replace(os.sep, "/").strip("/")
    while rel.startswith("./"):
        rel = rel[2:]
    if rel in ("", "."):
        return False
    if not decodable(rel):
        return True
    scan = Scan(config)
    if scan.hidden(rel):
        return True
    abs_path = os.path.join(scan.root, *rel.split("/"))
    is_dir = os.path.isdir(abs_path) and not os.path.islink(abs_path)
    name = rel.rpartition("/")[2]
    if not is_dir and name_skip(name):
        return True
    if in_skipped_dir(rel + "/" if is_dir else rel) is not None:
        return True
    git_ignored = check_ignore(scan.root, [".", rel])
    use_git = git_ignored is not None and "." not in git_ignored
    if use_git and rel in git_ignored:
        return True
    groups = scan.root_groups(with_gitignore=not use_git)
    parts = rel.split("/")
    for depth in range(1, len(parts)):
        d = "/".join(parts[:depth])
        if ignored(groups, d, parts[depth - 1], True):
            return True
        dir_abs = os.path.join(scan.root, *parts[:depth])
        gitignore = None if use_git else read_layer(os.path.join(dir_abs, GITIGNORE), d)
        repoctx = read_layer(os.path.join(dir_abs, REPOCTXIGNORE), d)
        groups = add_layers(groups, gitignore, repoctx)
    return ignored(groups, rel, name, is_dir)
