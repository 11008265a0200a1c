"""Gitignore rules, as git applies them: one `Layer` per ignore file, anchored at the directory
holding it (last matching pattern wins, a negation re-includes), globs translated to regexes with
git's wildmatch semantics (``**``, bracket expressions, POSIX classes, escapes). Discovery keeps
three groups of layers per directory (`Groups`): `.gitignore`, `.repoctxignore` and
``Config.exclude``; a path is excluded when any group ignores it."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass

GITIGNORE = ".gitignore"
REPOCTXIGNORE = ".repoctxignore"


@dataclass(frozen=True, slots=True)
class _Rule:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool
    on_name: bool  # pattern has no slash: it matches the entry name at any depth


class Layer:
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


def parse_rules(lines: Iterable[str]) -> list[_Rule]:
    return [r for r in map(_parse_rule, lines) if r is not None]


def read_layer(path: str, base: str) -> Layer | None:
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
    rules = parse_rules(text.splitlines())
    return Layer(base, rules) if rules else None


# Ignore layers in effect for a directory, deepest first: (.gitignore, .repoctxignore, exclude).
# Each group decides independently; a path is excluded when any group ignores it.
Groups = tuple[tuple[Layer, ...], ...]


def ignored(groups: Groups, rel: str, name: str, is_dir: bool) -> bool:
    for layers in groups:
        for layer in layers:
            verdict = layer.decide(rel, name, is_dir)
            if verdict is not None:
                if verdict:
                    return True
                break
    return False


def add_layers(groups: Groups, gitignore: Layer | None, repoctx: Layer | None) -> Groups:
    if gitignore is None and repoctx is None:
        return groups
    git_layers, rc_layers, ex_layers = groups
    if gitignore is not None:
        git_layers = (gitignore, *git_layers)
    if repoctx is not None:
        rc_layers = (repoctx, *rc_layers)
    return (git_layers, rc_layers, ex_layers)
