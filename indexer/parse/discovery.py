"""Find the files to index under a repository root (stat only) and classify content on demand.

In a git work tree the file list comes from ``git ls-files``; elsewhere the tree is walked with
``.gitignore`` semantics. ``.repoctxignore`` files and ``Config.exclude`` apply on top of both.

Size: `git ls-files`, the gitignore-semantics walk and the content classifiers must agree on what a
file is (names as bytes, symlinks, ignore rules), so they stay together.
"""

from __future__ import annotations

import codecs
import errno
import functools
import os
import re
import stat
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import attrgetter
from typing import NamedTuple

import pathspec

from indexer.config import INDEX_SETTINGS, Config
from indexer.safety.denylist import DEFAULT_DENY, deny_spec

GITIGNORE = ".gitignore"
REPOCTXIGNORE = ".repoctxignore"
#: Bundled or minified assets, recognised by name alone (reason ``minified``).
MINIFIED_SUFFIXES = (".min.js", ".min.css", ".bundle.js", ".map")
#: Where minification is practised: only these are ever ``minified`` by content. Elsewhere a
#: very long line is data (a table, an embedded blob) and the file is indexed.
MINIFIABLE_SUFFIXES = (".js", ".mjs", ".cjs", ".jsx", ".ts", ".mts", ".cts", ".tsx")
#: How many example paths ``Discovery.skipped_paths`` keeps per reason.
MAX_EXAMPLES = 20
#: Dependency lock files: generated pins, never read by a person (reason ``lockfile``).
LOCK_FILES = frozenset({
    "package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml", "bun.lockb",
    "poetry.lock", "Pipfile.lock", "uv.lock", "pdm.lock", "Cargo.lock", "Gemfile.lock",
    "composer.lock", "go.sum", "mix.lock", "pubspec.lock", "Podfile.lock", "flake.lock",
    "packages.lock.json", "gradle.lockfile", "Package.resolved",
})
LOCK_SUFFIXES = (".lock", ".lockfile")
#: Directories of third-party code checked into the tree (reason ``vendored``, counted once
#: per directory: nothing below it is listed).
VENDORED_DIRS = frozenset({"vendor", "node_modules", "third_party", "third-party", "bower_components"})
#: Directories tools write caches to (bytecode, type checkers, test runners), never source
#: (reason ``cache``, counted once per directory: a plain tree of installed packages has one
#: ``__pycache__`` per package, a third of its files).
CACHE_DIRS = frozenset({"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"})
#: Directory name -> the reason nothing below it is listed.
SKIPPED_DIRS = {**dict.fromkeys(VENDORED_DIRS, "vendored"), **dict.fromkeys(CACHE_DIRS, "cache")}
_SKIPPED_DIR = re.compile(r"(?:^|/)(" + "|".join(re.escape(d) for d in sorted(SKIPPED_DIRS)) + r")/")
#: Data formats: above this size a JSON/YAML file is data (fixtures, dumps, API captures), not
#: configuration (reason ``large_data``). Other files go up to ``Config.max_file_bytes``.
DATA_SUFFIXES = (".json", ".yaml", ".yml")
MAX_DATA_BYTES = 256 * 1024

_SNIFF_BYTES = 8192
_MAX_NON_TEXT = 0.30
_MINIFIED_LINE = 1000
#: Minified: lines over _MINIFIED_LINE bytes hold at least this share of the file...
_MINIFIED_SHARE = 0.5
#: ...and, string literals left out, are code: at least this many `;` per byte (real bundles:
#: 0.7-2.4 %; a long data literal, a number table or 10k nested brackets: ~0).
_MINIFIED_SEMICOLONS = 0.003
# A string literal on one line ("...", '...', `...`), escapes included; unrolled-loop form.
_STRING_LITERAL = re.compile(
    rb'"[^"\\\n]*(?:\\.[^"\\\n]*)*"|\'[^\'\\\n]*(?:\\.[^\'\\\n]*)*\'|`[^`\\]*(?:\\.[^`\\]*)*`'
)
#: Legacy 8-bit text (Latin-1 and the like) is mostly printable ASCII; noise is not.
_MIN_ASCII_TEXT = 0.7
_ASCII_TEXT = bytes([*range(0x20, 0x7F), 0x09, 0x0A, 0x0C, 0x0D, 0x1B])
#: UTF-16 text without a byte-order mark: NUL in every other byte (ASCII code points).
_MIN_WIDE_NULS = 0.7
_GENERATED_MARKERS = (b"@generated", b"DO NOT EDIT")
_GENERATED_LINES = 5
# Whitespace and ESC are legitimate in text files; other C0 controls are not.
_CONTROL = re.compile("[\x01-\x08\x0e-\x1a\x1c-\x1f\x7f\ufffd]")
# C1 controls (U+0080-U+009F) almost never occur in real text, but make up 1/8 of random bytes
# decoded as Latin-1 and saved as UTF-8 (noise that is valid UTF-8).
_C1 = re.compile("[\x80-\x9f]")
_MAX_C1 = 0.05
# Inherited from hooks or scripts these would make git describe another tree than config.root.
_GIT_ENV_OVERRIDES = frozenset({"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR"})


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


def name_skip(name: str) -> str | None:
    """A skip reason given by a file name alone: ``minified`` or ``lockfile``."""
    if name.endswith(MINIFIED_SUFFIXES):
        return "minified"
    if name in LOCK_FILES or name.endswith(LOCK_SUFFIXES):
        return "lockfile"
    return None


def _plain_suffixes(parsable: Iterable[str]) -> frozenset[str]:
    """The ``parsable`` suffixes no name that ends with them is skipped for (no minified or
    lock-file suffix or name ends with them): ``.py`` is one, ``.js`` (``x.min.js``) is not."""
    named = (*MINIFIED_SUFFIXES, *LOCK_SUFFIXES, *LOCK_FILES)
    return frozenset(s for s in parsable if not any(n.endswith(s) for n in named))


def _skipped_dir(path: str) -> tuple[str, str] | None:
    """(reason, directory) of the outermost vendored or cache directory ``path`` lies in."""
    m = _SKIPPED_DIR.search(path)
    return (SKIPPED_DIRS[m.group(1)], path[: m.end() - 1]) if m else None

#: Skip reason of a name that is not valid UTF-8 (see ``decodable``).
UNDECODABLE_NAME = "undecodable_name"


def decodable(path: str) -> bool:
    """Whether ``path`` (as ``os.fsdecode`` gives it) was valid UTF-8. File names are bytes
    on Linux; one that is not UTF-8 decodes to lone surrogates, which no text store (SQLite,
    FTS, LanceDB, JSON) accepts, so discovery skips it (reason ``undecodable_name``)."""
    if path.isascii():
        return True
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable_path(path: str) -> str:
    """``path`` as text that can be printed and stored: bytes that are not UTF-8 are written
    as ``\\xNN`` (``latin1_\\xe9.py``)."""
    if decodable(path):
        return path
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")

# --------------------------------------------------------------------------- gitignore rules


@dataclass(frozen=True, slots=True)
class _Rule:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool
    on_name: bool  # pattern has no slash: it matches the entry name at any depth


class _Layer:
    """The rules of one ignore file, anchored at the directory holding it."""

    __slots__ = ("cut", "rules", "any_name", "any_path")

    def __init__(self, base: str, rules: list[_Rule]) -> None:
        self.cut = len(base) + 1 if base else 0
        # Last matching pattern wins, so test from the end.
        self.rules = tuple(reversed(rules))
        # One combined regex rejects the common "no rule matches" case in a single call.
        self.any_name = _union(r.regex for r in rules if r.on_name)
        self.any_path = _union(r.regex for r in rules if not r.on_name)

    def decide(self, rel: str, name: str, is_dir: bool) -> bool | None:
        """True: ignored; False: re-included by a negation; None: no rule matches."""
        sub = rel[self.cut :]
        if not (
            (self.any_name is not None and self.any_name.fullmatch(name))
            or (self.any_path is not None and self.any_path.fullmatch(sub))
        ):
            return None
        for rule in self.rules:
            if rule.dir_only and not is_dir:
                continue
            if rule.regex.fullmatch(name if rule.on_name else sub):
                return not rule.negate
        return None


def _union(regexes: Iterable[re.Pattern[str]]) -> re.Pattern[str] | None:
    parts = [f"(?:{r.pattern})" for r in regexes]
    return re.compile("|".join(parts), re.DOTALL) if parts else None


_POSIX_CLASSES = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "blank": " \\t",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": " \\t\\n\\r\\f\\v",
    "upper": "A-Z",
    "xdigit": "0-9A-Fa-f",
}


def _bracket(pat: str, i: int) -> tuple[str, int] | None:
    """Translate the ``[...]`` starting at ``pat[i]``; None when it is not closed."""
    j = i + 1
    negate = j < len(pat) and pat[j] in "!^"
    if negate:
        j += 1
    out: list[str] = []
    first = True
    while j < len(pat):
        c = pat[j]
        if c == "]" and not first:
            body = "".join(out)
            # A wildcard never matches "/" in a path, bracket expressions included.
            return ("[^/" + body + "]" if negate else "[" + body + "]"), j + 1
        first = False
        if c == "[" and pat.startswith("[:", j):
            end = pat.find(":]", j + 2)
            cls = _POSIX_CLASSES.get(pat[j + 2 : end]) if end != -1 else None
            if cls is None:
                return None
            out.append(cls)
            j = end + 2
            continue
        if c == "\\" and j + 1 < len(pat):
            j += 1
            c = pat[j]
        out.append("-" if c == "-" else re.escape(c))
        j += 1
    return None


def _glob_to_regex(pat: str) -> str:
    """Translate a gitignore glob (wildmatch with WM_PATHNAME) to a regex for ``fullmatch``."""
    out: list[str] = []
    i, n = 0, len(pat)
    while i < n:
        c = pat[i]
        if c == "*":
            j = i
            while j < n and pat[j] == "*":
                j += 1
            whole_segment = (i == 0 or pat[i - 1] == "/") and (j == n or pat[j] == "/")
            if j - i >= 2 and whole_segment:
                if j == n:
                    out.append(".*")
                else:
                    out.append("(?:.*/)?")
                    j += 1
            else:
                out.append("[^/]*")
            i = j
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            translated = _bracket(pat, i)
            if translated is None:
                out.append(re.escape(c))
                i += 1
            else:
                out.append(translated[0])
                i = translated[1]
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(pat[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def _parse_rule(line: str) -> _Rule | None:
    if not line or line.startswith("#"):
        return None
    end = len(line)
    while end > 0 and line[end - 1] == " " and not (end >= 2 and line[end - 2] == "\\"):
        end -= 1
    line = line[:end]
    negate = line.startswith("!")
    if negate:
        line = line[1:]
    dir_only = line.endswith("/")
    if dir_only:
        line = line[:-1]
    if not line:
        return None
    on_name = "/" not in line
    if line.startswith("/"):
        line = line[1:]
    try:
        regex = re.compile(_glob_to_regex(line), re.DOTALL)
    except re.error:
        # Git drops patterns it cannot parse (e.g. a reversed range) instead of failing.
        return None
    return _Rule(regex, negate, dir_only, on_name)


def _parse_rules(lines: Iterable[str]) -> list[_Rule]:
    return [r for r in map(_parse_rule, lines) if r is not None]


def _read_layer(path: str, base: str) -> _Layer | None:
    # Non-blocking and regular files only: an ignore file the repository (or an agent's
    # command) made a FIFO or a device must not hang the walk; a link is not followed, as git
    # does not follow a symlinked .gitignore.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        # Missing, a link, or unreadable: it cannot hide anything; the files it names stay in.
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)
    rules = _parse_rules(text.splitlines())
    return _Layer(base, rules) if rules else None


# Ignore layers in effect for a directory, deepest first: (.gitignore, .repoctxignore, exclude).
# Each group decides independently; a path is excluded when any group ignores it.
_Groups = tuple[tuple[_Layer, ...], ...]


def _ignored(groups: _Groups, rel: str, name: str, is_dir: bool) -> bool:
    for layers in groups:
        for layer in layers:
            verdict = layer.decide(rel, name, is_dir)
            if verdict is not None:
                if verdict:
                    return True
                break
    return False


def _add_layers(groups: _Groups, gitignore: _Layer | None, repoctx: _Layer | None) -> _Groups:
    if gitignore is None and repoctx is None:
        return groups
    git_layers, rc_layers, ex_layers = groups
    if gitignore is not None:
        git_layers = (gitignore, *git_layers)
    if repoctx is not None:
        rc_layers = (repoctx, *rc_layers)
    return (git_layers, rc_layers, ex_layers)


# --------------------------------------------------------------------------- the walk


def _never(name: str) -> bool:
    return False


class _Scan:
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
        exclude = _parse_rules(config.exclude)
        self.exclude: tuple[_Layer, ...] = (_Layer("", exclude),) if exclude else ()
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
            self.plain_suffixes = _plain_suffixes(parsable_suffixes())

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

    def root_groups(self, with_gitignore: bool) -> _Groups:
        gitignore = _read_layer(os.path.join(self.root, GITIGNORE), "") if with_gitignore else None
        repoctx = _read_layer(os.path.join(self.root, REPOCTXIGNORE), "")
        return _add_layers(((), (), self.exclude), gitignore, repoctx)

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


def _walk(scan: _Scan) -> None:
    """Walk the tree with gitignore semantics, pruning ignored directories.

    Real directories are walked first; directory symlinks are followed afterwards, in path
    order, and only when their target was not walked already, so results do not depend on
    the order the file system lists entries in.
    """
    visited: set[str] = set()
    deferred: list[tuple[str, str, str, _Groups]] = []
    pending: list[tuple[str, str, str, _Groups]] = [
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
    scan: _Scan,
    pending: list[tuple[str, str, str, _Groups]],
    visited: set[str],
    deferred: list[tuple[str, str, str, _Groups]],
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
                gitignore = _read_layer(entry.path, rel_dir)
            elif entry.name == REPOCTXIGNORE and rel_dir:
                # The root's .repoctxignore is already part of the groups the walk starts with.
                repoctx = _read_layer(entry.path, rel_dir)
        groups = _add_layers(groups, gitignore, repoctx)
        check = any(groups)
        prefix = rel_dir + "/" if rel_dir else ""
        for entry in entries:
            name = entry.name
            rel = prefix + name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if name == ".git" or rel == index_rel:
                        continue
                    if check and _ignored(groups, rel, name, True):
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
                    if name == ".git" or (check and _ignored(groups, rel, name, False)):
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
            elif not (check and _ignored(groups, rel, name, False)):
                scan.skip("not_regular", rel)


def _walk_symlink(
    scan: _Scan,
    entry: os.DirEntry[str],
    rel: str,
    groups: _Groups,
    check: bool,
    deferred: list[tuple[str, str, str, _Groups]],
) -> None:
    name = entry.name
    try:
        is_dir = entry.is_dir()
    except OSError:
        is_dir = False
    if check and _ignored(groups, rel, name, is_dir):
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


# --------------------------------------------------------------------------- git mode


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


def _git_ignored(root: str, paths: Iterable[str]) -> set[str] | None:
    """Which of ``paths`` git ignores (tracked files never are); None outside a work tree."""
    payload = b"".join(os.fsencode(p) + b"\0" for p in paths)
    try:
        proc = _git(root, "check-ignore", "-z", "--stdin", stdin=payload)
    except OSError:
        return None
    if proc.returncode not in (0, 1):
        return None
    return {p for p in os.fsdecode(proc.stdout).split("\0") if p}


def _git_ls_files(root: str) -> list[str] | None:
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
    if not paths and "." in (_git_ignored(root, ["."]) or ()):
        # Root lies in a directory the enclosing repository ignores (a venv, a build dir):
        # git lists nothing there, so index it as a plain tree.
        return None
    # Unmerged paths are listed once per conflict stage.
    return list(dict.fromkeys(paths))


def _from_git(scan: _Scan, paths: list[str]) -> None:
    unparsable = scan.unparsable
    root_groups = scan.root_groups(with_gitignore=False)
    nested = {p[: -len(REPOCTXIGNORE) - 1] for p in paths if p.endswith("/" + REPOCTXIGNORE)}
    check = any(root_groups) or bool(nested)
    groups_by_dir: dict[str, _Groups | None] = {"": root_groups}

    def groups_for(d: str) -> _Groups | None:
        if d in groups_by_dir:
            return groups_by_dir[d]
        parent, _, name = d.rpartition("/")
        parent_groups = groups_for(parent)
        result: _Groups | None
        if parent_groups is None or _ignored(parent_groups, d, name, True):
            result = None
        elif d in nested:
            layer = _read_layer(os.path.join(scan.root, d, REPOCTXIGNORE), d)
            result = _add_layers(parent_groups, None, layer)
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
            if groups is None or _ignored(groups, path, name, False):
                continue
        if scan.undecodable(path):
            continue
        skipped_dir = _skipped_dir(path) if "/" in path else None
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


# --------------------------------------------------------------------------- public API


def discover(config: Config, skip_unparsable: bool = False) -> Discovery:
    """List the files to index under ``config.root``. Stats files; never reads their content.
    With ``skip_unparsable`` (what builds want), a file whose name says no language takes it
    is counted as ``no_grammar`` without a stat instead of listed."""
    scan = _Scan(config, skip_unparsable)
    paths = _git_ls_files(scan.root)
    if paths is not None:
        _from_git(scan, paths)
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
    scan = _Scan(config)
    if scan.hidden(rel):
        return True
    abs_path = os.path.join(scan.root, *rel.split("/"))
    is_dir = os.path.isdir(abs_path) and not os.path.islink(abs_path)
    name = rel.rpartition("/")[2]
    if not is_dir and name_skip(name):
        return True
    if _skipped_dir(rel + "/" if is_dir else rel) is not None:
        return True
    git_ignored = _git_ignored(scan.root, [".", rel])
    use_git = git_ignored is not None and "." not in git_ignored
    if use_git and rel in git_ignored:
        return True
    groups = scan.root_groups(with_gitignore=not use_git)
    parts = rel.split("/")
    for depth in range(1, len(parts)):
        d = "/".join(parts[:depth])
        if _ignored(groups, d, parts[depth - 1], True):
            return True
        dir_abs = os.path.join(scan.root, *parts[:depth])
        gitignore = None if use_git else _read_layer(os.path.join(dir_abs, GITIGNORE), d)
        repoctx = _read_layer(os.path.join(dir_abs, REPOCTXIGNORE), d)
        groups = _add_layers(groups, gitignore, repoctx)
    return _ignored(groups, rel, name, is_dir)


def classify_content(path: str, data: bytes) -> str | None:
    """Return a skip reason for file content, or None to index it: 'binary', 'utf16' (UTF-16
    or UTF-32 text: the index reads and shows files as UTF-8), 'generated' or 'minified'.

    A very long line alone is no reason: outside JavaScript/TypeScript, and in them unless the
    long lines are most of the file and read as code (not one string, table or bracket nest),
    the file is indexed — its definitions after the long line are found like any others."""
    if path.endswith(MINIFIED_SUFFIXES):
        return "minified"
    if not data:
        return None
    sample = data[:_SNIFF_BYTES]
    truncated = len(data) > _SNIFF_BYTES
    if _looks_wide_text(sample, truncated):
        return "utf16"
    if _looks_binary(sample, truncated):
        return "binary"
    head = data.split(b"\n", _GENERATED_LINES)[:_GENERATED_LINES]
    if any(marker in line for line in head for marker in _GENERATED_MARKERS):
        return "generated"
    if path.endswith(MINIFIABLE_SUFFIXES) and _looks_minified(data):
        return "minified"
    return None


def _text_ok(text: str) -> bool:
    return not text or len(_CONTROL.findall(text)) <= _MAX_NON_TEXT * len(text)


def _looks_wide_text(sample: bytes, truncated: bool) -> bool:
    """UTF-16 or UTF-32 text: a byte-order mark, or (UTF-16 without one) NUL bytes in every
    other position, and the sample decodes to text."""
    if sample.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        encoding = "utf-32"
    elif sample.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    elif len(sample) >= 4 and b"\0" in sample:
        even, odd = sample[0::2], sample[1::2]
        half = len(sample) // 2
        if odd.count(0) >= _MIN_WIDE_NULS * half and even.count(0) < (1 - _MIN_WIDE_NULS) * half:
            encoding = "utf-16-le"
        elif even.count(0) >= _MIN_WIDE_NULS * half and odd.count(0) < (1 - _MIN_WIDE_NULS) * half:
            encoding = "utf-16-be"
        else:
            return False
    else:
        return False
    decoder = codecs.getincrementaldecoder(encoding)("strict")
    try:
        text = decoder.decode(sample, final=not truncated)
    except UnicodeDecodeError:
        return False
    return "\0" not in text and _text_ok(text)


def _looks_binary(sample: bytes, truncated: bool) -> bool:
    if b"\0" in sample:
        return True
    # Not final when the sample was cut: a multi-byte character split at the cut is not an
    # error, the decoder just holds its first bytes back.
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    try:
        text = decoder.decode(sample, final=not truncated)
    except UnicodeDecodeError:
        pass
    else:
        return len(_C1.findall(text)) > _MAX_C1 * len(text)
    # Not UTF-8: legacy 8-bit text (Latin-1, cp1252) is mostly printable ASCII; noise is not.
    return len(sample.translate(None, _ASCII_TEXT)) > (1 - _MIN_ASCII_TEXT) * len(sample)


def _looks_minified(data: bytes) -> bool:
    """Most of the file is in very long lines, and they are code: string literals left out,
    what remains is long and dense with statement separators."""
    long_lines = [line for line in data.split(b"\n") if len(line) > _MINIFIED_LINE]
    if sum(map(len, long_lines)) < _MINIFIED_SHARE * len(data):
        return False
    code_bytes = semicolons = 0
    for line in long_lines:
        code = _STRING_LITERAL.sub(b"", line)
        code_bytes += len(code)
        semicolons += code.count(b";")
    return code_bytes > _MINIFIED_LINE and semicolons >= _MINIFIED_SEMICOLONS * code_bytes
