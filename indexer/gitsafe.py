"""Run git without executing anything a repository's own configuration names.

A repository's `.git/config` (and what it includes) can make read commands run programs:
`core.fsmonitor` runs on `git status`, `core.hooksPath` hooks on index writes, filters on
`git diff`, `diff.external` / `textconv` drivers, `!` aliases, `log.showSignature` with
`gpg.program`, and more. ``git_env`` returns an environment that overrides those keys with
command-line-level configuration (``GIT_CONFIG_COUNT`` / ``GIT_CONFIG_KEY_n`` /
``GIT_CONFIG_VALUE_n``, git >= 2.31), which takes precedence over every configuration file:

- always: ``core.fsmonitor=false``, ``core.hooksPath=/dev/null``, ``core.pager=cat``,
  ``core.editor=true``, ``sequence.editor=true``, ``core.askPass=`` (no askpass program),
  ``credential.helper=`` (clears the helper list), ``protocol.ext.allow=never`` (the `ext::`
  transport runs commands), ``log.showSignature=false``; ``GIT_CONFIG_NOSYSTEM=1``,
  ``GIT_TERMINAL_PROMPT=0``, ``GIT_PROXY_COMMAND=`` (empty: no `core.gitProxy`), and
  ``GIT_OPTIONAL_LOCKS=0`` for read-only use;
- every key of ``REPO_KEY_OVERRIDES`` that the repository's own config files set (read here, by a
  small parser that runs nothing, following `include.path` / `includeIf.*.path`), overridden to a
  value that runs nothing: filters become empty (no filter), `textconv` becomes `cat`, external
  diff and merge drivers become `false` (the diff or merge then fails, visibly), aliases become
  empty (git reports the alias as broken).

The user's own global configuration (`~/.gitconfig`) is trusted and left as it is, except for
the "always" keys above. Local-only use keeps working: no `protocol.allow` restriction, so
`file://` and path remotes still work.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

#: Set on every git call.
ALWAYS: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.editor", "true"),
    ("sequence.editor", "true"),
    ("core.askPass", ""),
    ("credential.helper", ""),
    ("protocol.ext.allow", "never"),
    ("log.showSignature", "false"),
)

#: Keys (lower-case, `*` for the subsection) that run programs, and the value they get when the
#: repository's own configuration sets them.
REPO_KEY_OVERRIDES: tuple[tuple[str, str], ...] = (
    ("filter.*.clean", ""),
    ("filter.*.smudge", ""),
    ("filter.*.process", ""),
    ("filter.*.required", "false"),
    ("diff.external", "false"),
    ("diff.*.command", "false"),
    ("diff.*.textconv", "cat"),
    ("merge.*.driver", "false"),
    ("alias.*", ""),
    ("pager.*", "false"),
    ("core.sshcommand", "ssh"),
    ("core.alternaterefscommand", ""),
    ("credential.*.helper", ""),
    ("remote.*.uploadpack", "git-upload-pack"),
    ("remote.*.receivepack", "git-receive-pack"),
    ("submodule.*.update", "checkout"),
    ("gpg.program", "gpg"),
    ("gpg.openpgp.program", "gpg"),
    ("gpg.x509.program", "gpgsm"),
    ("gpg.ssh.program", "ssh-keygen"),
    ("gpg.ssh.defaultkeycommand", ""),
    ("interactive.difffilter", "cat"),
    ("tar.*.command", "false"),
    ("difftool.*.cmd", "false"),
    ("mergetool.*.cmd", "false"),
    ("man.*.cmd", "false"),
    ("browser.*.cmd", "false"),
    ("browser.*.path", "false"),
    ("web.browser", "false"),
)

_MAX_INCLUDE_DEPTH = 10
_lock = threading.Lock()
#: git dir -> ((path, mtime_ns, size) of every config file read, overrides)
_cache: dict[str, tuple[tuple[tuple[str, int, int], ...], tuple[tuple[str, str], ...]]] = {}


def find_git_dirs(start: str | os.PathLike[str]) -> tuple[Path, Path] | None:
    """(git dir, common dir) of the repository containing ``start``, without running git."""
    here = Path(os.path.abspath(start))
    for directory in (here, *here.parents):
        dot = directory / ".git"
        if dot.is_dir():
            git_dir = dot
        elif dot.is_file():
            try:
                first = dot.read_text(errors="replace").splitlines()[:1]
            except OSError:
                return None
            if not first or not first[0].startswith("gitdir:"):
                return None
            git_dir = Path(os.path.normpath(directory / first[0][len("gitdir:") :].strip()))
        else:
            continue
        common = git_dir
        try:
            rel = (git_dir / "commondir").read_text().strip()
            common = Path(os.path.normpath(git_dir / rel))
        except OSError:
            pass  # not a linked worktree: the git dir is the common dir
        return git_dir, common
    return None


def parse_config(text: str) -> Iterator[tuple[str, str | None]]:
    """(key, value) pairs of a git config file: section and key lower-cased, the subsection as
    written; a key without `=` has value None. Stops at the first line git would reject."""
    i, n = 0, len(text)
    section = ""
    while i < n:
        c = text[i]
        if c in " \t\r\n":
            i += 1
        elif c in "#;":
            while i < n and text[i] != "\n":
                i += 1
        elif c == "[":
            end = text.find("]", i)
            if end < 0 or "\n" in text[i:end]:
                return
            section = _section(text[i + 1 : end])
            if section is None:
                return
            i = end + 1
        elif c.isalpha():
            j = i
            while j < n and (text[j].isalnum() or text[j] == "-"):
                j += 1
            name = text[i:j].lower()
            while j < n and text[j] in " \t":
                j += 1
            if j < n and text[j] == "=":
                value, i = _value(text, j + 1)
                yield f"{section}.{name}", value
            else:
                yield f"{section}.{name}", None
                i = j
        else:
            return


def _section(header: str) -> str | None:
    header = header.strip()
    quote = header.find('"')
    if quote < 0:
        # [section] or the deprecated [section.subsection] (lower-cased by git)
        return header.lower() if header else None
    name = header[:quote].strip().lower()
    raw = header[quote + 1 :]
    if not raw.endswith('"'):
        return None
    sub = raw[:-1].replace('\\"', '"').replace("\\\\", "\\")
    return f"{name}.{sub}"


def _value(text: str, i: int) -> tuple[str, int]:
    n = len(text)
    out: list[str] = []
    quoted = False
    pending_space = ""
    while i < n and text[i] in " \t" and not out:
        i += 1
    while i < n:
        c = text[i]
        if c == "\n" and not quoted:
            break
        if c == "\\" and i + 1 < n:
            nxt = text[i + 1]
            i += 2
            if nxt == "\n":
                continue
            out.append(pending_space + {"n": "\n", "t": "\t", "b": "\b"}.get(nxt, nxt))
            pending_space = ""
            continue
        if c == '"':
            quoted = not quoted
        elif c in "#;" and not quoted:
            while i < n and text[i] != "\n":
                i += 1
            break
        elif c in " \t\r" and not quoted:
            pending_space += c
        else:
            out.append(pending_space + c)
            pending_space = ""
        i += 1
    return "".join(out), i


def _config_files(git_dir: Path, common: Path) -> list[Path]:
    files = [common / "config"]
    if git_dir != common:
        files.append(git_dir / "config.worktree")
    else:
        files.append(common / "config.worktree")
    return files


def _scan(paths: list[Path]) -> tuple[list[tuple[str, int, int]], set[str]]:
    """Stamps of the files read and every key they (and their includes) set."""
    stamps: list[tuple[str, int, int]] = []
    keys: set[str] = set()
    queue = [(p, 0) for p in paths]
    seen: set[str] = set()
    while queue:
        path, depth = queue.pop(0)
        real = os.path.realpath(path)
        if real in seen or depth > _MAX_INCLUDE_DEPTH:
            continue
        seen.add(real)
        try:
            st = os.stat(real)
            with open(real, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            stamps.append((str(path), -1, -1))
            continue
        stamps.append((str(path), st.st_mtime_ns, st.st_size))
        for key, value in parse_config(text):
            keys.add(key)
            top = key.split(".", 1)[0]
            if top in ("include", "includeif") and key.endswith(".path") and value:
                target = os.path.expanduser(value)
                if not os.path.isabs(target):
                    target = os.path.join(os.path.dirname(real), target)
                queue.append((Path(target), depth + 1))
    return stamps, keys


def _matches(key: str) -> str | None:
    """The override for ``key`` (section.key or section.subsection.key), or None."""
    section, _, rest = key.partition(".")
    section = section.lower()
    sub, _, name = rest.rpartition(".")
    name = name.lower()
    for pattern, value in REPO_KEY_OVERRIDES:
        p_section, _, p_rest = pattern.partition(".")
        if p_section != section:
            continue
        if p_rest == "*":
            return value
        p_sub, _, p_name = p_rest.rpartition(".")
        if p_name != name:
            continue
        if (p_sub == "*" and sub) or p_sub == sub.lower():
            return value
    return None


def repo_overrides(start: str | os.PathLike[str]) -> tuple[tuple[str, str], ...]:
    """Overrides for the dangerous keys the repository containing ``start`` sets itself."""
    dirs = find_git_dirs(start)
    if dirs is None:
        return ()
    git_dir, common = dirs
    files = _config_files(git_dir, common)
    cache_key = str(git_dir)
    with _lock:
        cached = _cache.get(cache_key)
    if cached is not None and all(_stamp(p) == (m, s) for p, m, s in cached[0]):
        return cached[1]
    stamps, keys = _scan(files)
    out: list[tuple[str, str]] = []
    for key in sorted(keys):
        value = _matches(key)
        if value is not None:
            out.append((key, value))
        if key.startswith("filter.") and key.count(".") >= 2:
            driver = key.rsplit(".", 1)[0]
            out.append((f"{driver}.required", "false"))
    result = tuple(dict.fromkeys(out))
    with _lock:
        _cache[cache_key] = (tuple(stamps), result)
    return result


def _stamp(path: str) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except OSError:
        return (-1, -1)
    return (st.st_mtime_ns, st.st_size)


def git_env(
    start: str | os.PathLike[str] | None,
    base: Mapping[str, str] | None = None,
    *,
    read_only: bool = True,
) -> dict[str, str]:
    """``base`` (default: os.environ) plus the variables that keep git from running any program
    the repository containing ``start`` configures. Entries already in ``GIT_CONFIG_COUNT`` are
    kept; ours come after them, so they win."""
    env = dict(os.environ if base is None else base)
    pairs = list(ALWAYS)
    if start is not None:
        pairs += repo_overrides(start)
    try:
        count = int(env.get("GIT_CONFIG_COUNT", "0"))
    except ValueError:
        count = 0
    if count < 0:
        count = 0
    for key, value in pairs:
        env[f"GIT_CONFIG_KEY_{count}"] = key
        env[f"GIT_CONFIG_VALUE_{count}"] = value
        count += 1
    env["GIT_CONFIG_COUNT"] = str(count)
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["GIT_PROXY_COMMAND"] = ""
    if read_only:
        env["GIT_OPTIONAL_LOCKS"] = "0"
    else:
        env.pop("GIT_OPTIONAL_LOCKS", None)
    # Programs named by the environment (not the repository) would still run: drop them.
    for name in ("GIT_EXTERNAL_DIFF", "GIT_PAGER", "GIT_EDITOR", "GIT_SEQUENCE_EDITOR"):
        env.pop(name, None)
    return env
