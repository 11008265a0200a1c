"""Which file-system events can change the index: the watcher's change filter, shared with the
MCP server's live refresh. Events in paths discovery never indexes are dropped outright (the
index directory, whose writes would otherwise loop; `.git` internals other than HEAD and refs;
files without a grammar); the rest are relevant, or checked against the ignore rules once per
batch (each check runs `git check-ignore`)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from indexer.config import Config
from indexer.parse.discovery import is_ignored_path
from indexer.parse.languages import extensionless, language_for_path

#: Files whose change alters what discovery lists or how: always worth a build.
RULE_FILES = frozenset({".gitignore", ".repoctxignore", ".repoctx.toml", "pyproject.toml"})
#: `.git` entries whose change means the checked-out branch or the ignore rules moved.
GIT_SIGNALS = ("HEAD", "packed-refs", "info/exclude")
GIT_SIGNAL_DIRS = ("refs/heads/",)
#: Paths checked one by one against the ignore rules before a stat-only build is cheaper.
MAX_IGNORE_CHECKS = 64

DROP, KEEP, CHECK = 0, 1, 2


class ChangeFilter:
    """Classifies event paths: dropped outright, relevant, or to be checked against the ignore
    rules (which costs a `git check-ignore`, so it is done per batch, not per event)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.root = os.path.realpath(config.root)
        index_real = os.path.realpath(config.index_path)
        self.index_rel = (
            os.path.relpath(index_real, self.root).replace(os.sep, "/")
            if index_real.startswith(self.root + os.sep)
            else None
        )
        self._dir_ignored: dict[str, bool] = {}

    def rel(self, path: str) -> str | None:
        real = path if path.startswith(self.root + os.sep) else None
        if real is None:
            return None
        return real[len(self.root) + 1 :].replace(os.sep, "/")

    def classify(self, path: str, is_dir: bool) -> tuple[int, str]:
        rel = self.rel(path)
        if not rel:
            return DROP, ""
        ix = self.index_rel
        if ix and (rel == ix or rel.startswith(ix + "/")):
            return DROP, rel
        if rel == ".git" or rel.startswith(".git/"):
            inner = rel[5:]
            if inner in GIT_SIGNALS or inner.startswith(GIT_SIGNAL_DIRS):
                return KEEP, rel
            return DROP, rel
        if "/.git/" in rel or rel.endswith("/.git"):
            return DROP, rel  # a nested repository's internals
        name = rel.rpartition("/")[2]
        if name in RULE_FILES:
            return KEEP, rel
        if not is_dir and language_for_path(rel) is None and not extensionless(rel):
            # build never parses it: its change cannot alter the index (a file without a
            # suffix may be a script whose `#!` line names its language: the build looks)
            return DROP, rel
        return CHECK, rel

    def rules_changed(self) -> None:
        self._dir_ignored.clear()

    def any_relevant(self, paths: Sequence[str], limit: int = MAX_IGNORE_CHECKS) -> bool:
        """Whether some of the CHECK paths ``paths`` is not ignored; past ``limit`` checks the
        answer is yes (a stat-only build is cheaper than checking them one by one)."""
        return any(i >= limit or not self.ignored(rel) for i, rel in enumerate(paths))

    def ignored(self, rel: str) -> bool:
        """Whether discovery's path rules exclude ``rel``; ancestors are checked (and cached)
        first so a burst inside one ignored directory costs a handful of checks."""
        parts = rel.split("/")
        for depth in range(1, len(parts)):
            d = "/".join(parts[:depth])
            hit = self._dir_ignored.get(d)
            if hit is None:
                hit = self._dir_ignored[d] = is_ignored_path(self.config, d)
            if hit:
                return True
        return is_ignored_path(self.config, rel)


_WATCHED_EVENTS: list[type] | None = None


def event_filter() -> list[type]:
    """Only changes that can alter the tree: no opened/closed-without-write/attrib events, so
    the build reading files does not wake the watcher (the kernel is not even asked for them)."""
    global _WATCHED_EVENTS
    if _WATCHED_EVENTS is None:
        from watchdog import events as ev

        _WATCHED_EVENTS = [
            ev.FileCreatedEvent,
            ev.FileDeletedEvent,
            ev.FileModifiedEvent,
            ev.FileMovedEvent,
            ev.FileClosedEvent,
            ev.DirCreatedEvent,
            ev.DirDeletedEvent,
            ev.DirMovedEvent,
        ]
    return _WATCHED_EVENTS
