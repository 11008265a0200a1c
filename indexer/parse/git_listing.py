"""Git mode of discovery: the file list is ``git ls-files`` (tracked plus untracked files git does
not ignore), run so that nothing the repository configures executes (`indexer.safety.gitsafe`)
and in bounded time, then filtered by repoctx's own rules (`.repoctxignore`, ``Config.exclude``,
vendored and cache directories, skip reasons by name) and stat-ed. `git check-ignore` answers
`is_ignored_path`."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterable

from indexer.parse.classify import in_skipped_dir, name_skip
from indexer.parse.ignore_rules import REPOCTXIGNORE, Groups, add_layers, ignored, read_layer
from indexer.parse.scan import Scan

# Inherited from hooks or scripts these would make git describe another tree than config.root.
_GIT_ENV_OVERRIDES = frozenset({"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR"})

#: Seconds discovery's git may take (well under one on large trees). Past it git is blocked
#: opening an ignore file that never ends — a FIFO as `.gitignore` or `core.excludesFile`, which
#: an agent's command can make — and the build stops with one line instead of hanging.
GIT_TIMEOUT_S = 120.0


def _git(root: str, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    from indexer.safety.gitsafe import (  # nothing the repository configures runs
        GitStuckError,
        git_env,
    )

    env = git_env(root, {k: v for k, v in os.environ.items() if k not in _GIT_ENV_OVERRIDES})
    try:
        return subprocess.run(["git", *args], cwd=root, input=stdin, capture_output=True,
                              env=env, check=False, timeout=GIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise GitStuckError(
            f"`git {args[0]}` did not finish in {GIT_TIMEOUT_S:g} s in {root!r} — look for a FIFO "
            "or device named `.gitignore` (or by `core.excludesFile`, `info/exclude`) and remove it."
        ) from None


def check_ignore(root: str, paths: Iterable[str]) -> set[str] | None:
    """Which of ``paths`` git ignores (tracked files never are); None outside a work tree."""
    payload = b"".join(os.fsencode(p) + b"\0" for p in paths)
    try:
        proc = _git(root, "check-ignore", "-z", "--stdin", stdin=payload)
    except OSError:
        return None
    if proc.returncode not in (0, 1):
        return None
    return {p for p in os.fsdecode(proc.stdout).split("\0") if p}


def git_ls_files(root: str) -> list[str] | None:
    """Tracked plus untracked-but-not-ignored paths, or None when git cannot describe root."""
    from indexer.safety.gitsafe import find_git_dirs

    if find_git_dirs(root) is None:
        # No `.git` in root or above it: git would find no work tree (its repository variables
        # are dropped, see _git), so spare the ~3 ms of starting it.
        return None
    try:
        proc = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    except OSError:
        return None  # git is not installed
    if proc.returncode != 0:
        return None
    paths = [p for p in os.fsdecode(proc.stdout).split("\0") if p]
    if not paths and "." in (check_ignore(root, ["."]) or ()):
        # Root lies in a directory the enclosing repository ignores (a venv, a build dir):
        # git lists nothing there, so index it as a plain tree.
        return None
    # Unmerged paths are listed once per conflict stage.
    return list(dict.fromkeys(paths))


def from_git(scan: Scan, paths: list[str]) -> None:
    """Add git's listed ``paths`` to ``scan``: ignored by repoctx's own rules, skipped by name
    or directory, or stat-ed (links checked and followed to a file, never to a directory)."""
    unparsable = scan.unparsable
    root_groups = scan.root_groups(with_gitignore=False)
    nested = {p[: -len(REPOCTXIGNORE) - 1] for p in paths if p.endswith("/" + REPOCTXIGNORE)}
    check = any(root_groups) or bool(nested)
    groups_by_dir: dict[str, Groups | None] = {"": root_groups}

    def groups_for(d: str) -> Groups | None:
        if d in groups_by_dir:
            return groups_by_dir[d]
        parent, _, name = d.rpartition("/")
        parent_groups = groups_for(parent)
        result: Groups | None
        if parent_groups is None or ignored(parent_groups, d, name, True):
            result = None
        elif d in nested:
            layer = read_layer(os.path.join(scan.root, d, REPOCTXIGNORE), d)
            result = add_layers(parent_groups, None, layer)
        else:
            result = parent_groups
        groups_by_dir[d] = result
        return result

    prefix = scan.root + os.sep
    for path in paths:
        if path.endswith("/"):
            scan.skip("submodule", path.rstrip("/"))  # an untracked nested repository
            continue
        if scan.hidden(path):
            continue
        d, _, name = path.rpartition("/")
        if check:
            groups = groups_for(d)
            if groups is None or ignored(groups, path, name, False):
                continue
        if scan.undecodable(path):
            continue
        skipped_dir = in_skipped_dir(path) if "/" in path else None
        if skipped_dir is not None:
            if skipped_dir[1] not in scan.skipped_dirs:  # counted once per directory, as the walk does
                scan.skipped_dirs.add(skipped_dir[1])
                scan.skip(*skipped_dir)
            continue
        reason = name_skip(name) or ("no_grammar" if unparsable(name) else None)
        if reason:
            scan.skip(reason, path)
            continue
        abs_path = prefix + path
        try:
            st = os.lstat(abs_path)
        except (FileNotFoundError, NotADirectoryError):
            continue  # tracked but deleted in the work tree: it no longer exists
        except OSError:
            scan.skip("unreadable", path)
            continue
        mode = st.st_mode
        if stat.S_ISREG(mode):
            scan.add_regular(path, st)
        elif stat.S_ISDIR(mode):
            scan.skip("submodule", path)  # a gitlink
        elif stat.S_ISLNK(mode):
            followed = scan.follow(abs_path, path)
            # Git stores a directory symlink as a link, not its files; they are listed (or
            # ignored) under their real path, so there is nothing to follow here.
            if followed is not None and stat.S_ISREG(followed[0].st_mode):
                scan.add_regular(path, followed[0])
            elif followed is not None and not stat.S_ISDIR(followed[0].st_mode):
                scan.skip("not_regular", path)
        else:
            scan.skip("not_regular", path)
