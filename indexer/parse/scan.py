"""What both discovery modes (git's listing, the walk) share: the records they return and the
scan's state — the root, the index directory to hide, ``Config.exclude``, the counts of what
was skipped and why, symbolic links checked against the root and the secrets deny list."""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import NamedTuple

import pathspec

from indexer.config import INDEX_SETTINGS, Config
from indexer.parse.classify import (
    DATA_SUFFIXES,
    MAX_DATA_BYTES,
    UNDECODABLE_NAME,
    decodable,
    plain_suffixes,
    printable_path,
)
from indexer.parse.ignore_rules import (
    GITIGNORE,
    REPOCTXIGNORE,
    Groups,
    Layer,
    add_layers,
    parse_rules,
    read_layer,
)
from indexer.safety.denylist import DEFAULT_DENY, deny_spec

#: How many example paths ``Discovery.skipped_paths`` keeps per reason.
MAX_EXAMPLES = 20


class DiscoveredFile(NamedTuple):
    """A file to index: POSIX path relative to ``Config.root`` and its stat. A tuple, so
    that the build can test it against the index's ``(path, size, mtime_ns)`` rows as is."""

    path: str
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class Discovery:
    """The files to index, sorted by path, and what was left out (by reason)."""

    files: tuple[DiscoveredFile, ...]
    skipped: dict[str, int]
    skipped_paths: dict[str, tuple[str, ...]]
    git: bool


_by_path = attrgetter("path")


def _never(name: str) -> bool:
    return False


class Scan:
    """State shared by both discovery modes."""

    def __init__(self, config: Config, skip_unparsable: bool = False) -> None:
        self.config = config
        self.root = os.path.abspath(config.root)
        self.root_real = os.path.realpath(self.root)
        self.max_bytes = config.max_file_bytes
        index_real = os.path.realpath(config.index_path)
        self.index_rel = (
            index_real[len(self.root_real) + 1 :].replace(os.sep, "/")
            if index_real.startswith(self.root_real + os.sep)
            else ""
        )
        exclude = parse_rules(config.exclude)
        self.exclude: tuple[Layer, ...] = (Layer("", exclude),) if exclude else ()
        self.files: list[DiscoveredFile] = []
        self.skipped: dict[str, list[str]] = {}
        #: Vendored and cache directories already counted (git mode lists their files).
        self.skipped_dirs: set[str] = set()
        #: The test for a file name no language or text format takes (``x.pyc``, ``logo.png``)
        #: when such files are skipped as ``no_grammar`` without a stat.
        self.unparsable: Callable[[str], bool] = _never
        #: Suffixes (``.py``) for which both tests pass whatever comes before them: the walk
        #: skips the two calls for those names, most of a tree.
        self.plain_suffixes: frozenset[str] = frozenset()
        if skip_unparsable:
            from indexer.parse.languages import (  # loads tree-sitter
                parsable_suffixes,
                unparsable_name,
            )

            self.unparsable = unparsable_name
            self.plain_suffixes = plain_suffixes(parsable_suffixes())

    def skip(self, reason: str, rel: str) -> None:
        self.skipped.setdefault(reason, []).append(rel)

    def undecodable(self, rel: str) -> bool:
        """Counts and returns True when ``rel`` is not valid UTF-8 (see ``decodable``)."""
        if decodable(rel):
            return False
        self.skip(UNDECODABLE_NAME, rel)
        return True

    def hidden(self, rel: str) -> bool:
        """Paths never indexed whatever the ignore files say: ``.git`` and the index itself."""
        ix = self.index_rel
        if ix and (rel == ix or rel.startswith(ix + "/")):
            return True
        return rel == ".git" or rel.startswith(".git/") or "/.git/" in rel or rel.endswith("/.git")

    def root_groups(self, with_gitignore: bool) -> Groups:
        gitignore = read_layer(os.path.join(self.root, GITIGNORE), "") if with_gitignore else None
        repoctx = read_layer(os.path.join(self.root, REPOCTXIGNORE), "")
        return add_layers(((), (), self.exclude), gitignore, repoctx)

    def add_regular(self, rel: str, st: os.stat_result) -> None:
        if st.st_size > self.max_bytes:
            self.skip("too_large", rel)
        elif st.st_size > MAX_DATA_BYTES and rel.endswith(DATA_SUFFIXES):
            self.skip("large_data", rel)
        else:
            self.files.append(DiscoveredFile(rel, st.st_size, st.st_mtime_ns))

    def follow(self, abs_path: str, rel: str) -> tuple[os.stat_result, str] | None:
        """Stat a symlink's target; counts and returns None when it cannot be used."""
        try:
            st = os.stat(abs_path)
        except (FileNotFoundError, NotADirectoryError):
            self.skip("symlink_broken", rel)
            return None
        except OSError as exc:
            self.skip("symlink_loop" if exc.errno == errno.ELOOP else "unreadable", rel)
            return None
        real = os.path.realpath(abs_path)
        root = self.root_real
        if real != root and not real.startswith(root + os.sep):
            self.skip("symlink_outside", rel)
            return None
        if real != root and self.hidden(real[len(root) + 1 :].replace(os.sep, "/")):
            # A link into .git or the index would expose what discovery must never index.
            self.skip("symlink_outside", rel)
            return None
        if self.secret_target(rel, real):
            return None
        return st, real

    def secret_target(self, rel: str, real: str) -> bool:
        """Counts and returns True when ``rel`` reaches (through a link) a file on the secrets
        deny list: its content would be indexed, and shown, under a name no check catches."""
        if real == self.root_real:
            return False
        real_rel = real[len(self.root_real) + 1 :].replace(os.sep, "/")
        if real_rel == rel or not self.deny.match_file(real_rel):
            return False
        self.skip("link_to_secret", rel)
        return True

    @functools.cached_property
    def deny(self) -> pathspec.GitIgnoreSpec:
        # Compiled only when a link is met: most trees have none.
        return deny_spec((*DEFAULT_DENY, *INDEX_SETTINGS.value(self.config, "agent.deny")))[1]

    def result(self, git: bool) -> Discovery:
        self.files.sort(key=_by_path)
        return Discovery(
            files=tuple(self.files),
            skipped={reason: len(paths) for reason, paths in sorted(self.skipped.items())},
            skipped_paths={
                reason: tuple(printable_path(p) for p in sorted(paths)[:MAX_EXAMPLES])
                for reason, paths in sorted(self.skipped.items())
            },
            git=git,
        )
