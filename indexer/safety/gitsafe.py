"""Run git without executing anything a repository's own configuration names.

A repository's configuration (`.git/config`, `config.worktree` and every file they include,
`includeIf` and relative includes inside the work tree among them) can make ordinary commands
run programs: filters on `git diff` and `git add`, `diff.external` / `textconv` drivers,
`core.fsmonitor` and hooks on index writes, `!` aliases, signing programs, and more. Every
byte of it is untrusted. ``git_env`` returns an environment that overrides those keys with
command-line-level configuration (``GIT_CONFIG_COUNT`` / ``GIT_CONFIG_KEY_n`` /
``GIT_CONFIG_VALUE_n``, git >= 2.31), which git reads after every configuration file, so it
wins:

- always (``ALWAYS``): fsmonitor, hooks, pager, editors, askpass, credential helpers, the
  `ext::` transport, signature display, submodule recursion and automatic maintenance off;
  ``GIT_CONFIG_NOSYSTEM=1``, ``GIT_TERMINAL_PROMPT=0``, ``GIT_PROXY_COMMAND=`` (no
  `core.gitProxy`) and, for read-only use, ``GIT_OPTIONAL_LOCKS=0``; ``PATH`` keeps its
  absolute entries only (a relative one would find `git` itself in the repository);
- every key of a program-running family (``FAMILIES``: filters, diff, merge and tool drivers,
  aliases, pagers, signing programs, ssh and transport commands, config-based hooks, …) that
  an untrusted file sets: its neutral value, then the values trusted files give it (so the
  user's own `filter.lfs.*` still applies even where the repository redefines it).

**Which keys are set is git's answer, not ours.** The keys come from ``git config --list
--includes --show-scope --show-origin -z`` run with the same executable (the same ``PATH``),
working directory and environment as the command that follows, so git's own parser —
encodings, quoting, continuation lines, `includeIf` conditions, worktree configuration —
decides, and no hand-written reader can stop where git does not. Keys are passed back to git
byte for byte (``-z`` output, ``surrogateescape``), whatever quotes, backslashes or non-UTF-8
bytes their subsection holds. Listing configuration runs no program. It is bounded by
``LIST_TIMEOUT_S`` (an include of a FIFO or a device would block it); when git times out or
rejects the configuration, ``GitConfigError`` is raised and no command runs — never an
unprotected one. There is no cache: git is asked again before every command, which costs one
short git process (figures in tests/test_untrusted_git.py's module docstring).

Trusted: the user's global configuration (and what it includes from outside the repository)
and command-level configuration already in the environment. Untrusted: the ``local`` and
``worktree`` scopes, and any file inside the repository's work tree or git directories,
whatever includes it.

**The race between asking and running** is held by who can write in between: the
repository's untrusted writers are the agent's commands, which run sandboxed and whose
process trees end with each command, and its file tools, which run in this process between
steps; repoctx's own host-side git (end-of-run diff, ``--commit``, snapshots, indexing) runs
when neither is active. Because nothing is cached, a file rewritten between two commands is
seen by the second. Host-side callers add flags that need no configuration at all where the
command takes them (``--no-ext-diff``, ``--no-textconv``, ``--ignore-submodules``), so their
diff drivers stay off even against a writer that wins the race.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from indexer.errors import RepoctxError

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
    # A submodule's git reads the submodule's own configuration, which the listing of the
    # superproject does not show: never start one implicitly.
    ("submodule.recurse", "false"),
    # `git commit` may start `git maintenance` / `git gc` in the background, after we return.
    ("maintenance.auto", "false"),
    ("gc.auto", "0"),
)

#: Keys that run programs, and the value that runs none. ``section.*`` is every key of the
#: section, ``section.*.name`` a key of any subsection, ``section.name`` the key without one.
FAMILIES: tuple[tuple[str, str], ...] = (
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
    ("commit.gpgsign", "false"),
    ("tag.gpgsign", "false"),
    ("tag.forcesignannotated", "false"),
    ("push.gpgsign", "false"),
    ("interactive.difffilter", "cat"),
    ("tar.*.command", "false"),
    ("difftool.*.cmd", "false"),
    ("difftool.*.path", "false"),
    ("mergetool.*.cmd", "false"),
    ("mergetool.*.path", "false"),
    ("man.*.cmd", "false"),
    ("man.*.path", "false"),
    ("browser.*.cmd", "false"),
    ("browser.*.path", "false"),
    ("web.browser", "false"),
    ("guitool.*.cmd", "false"),
    ("imap.tunnel", ""),
    ("sendemail.smtpserver", ""),
    ("sendemail.tocmd", ""),
    ("sendemail.cccmd", ""),
    ("sendemail.headercmd", ""),
    ("sendemail.sendmailcmd", ""),
    ("sendemail.*.smtpserver", ""),
    ("sendemail.*.tocmd", ""),
    ("sendemail.*.cccmd", ""),
    ("sendemail.*.headercmd", ""),
    ("sendemail.*.sendmailcmd", ""),
    ("hook.*.command", ""),
)

#: A driver any of whose keys an untrusted file sets also gets this key, so that a neutralised
#: driver is not required (filters) or not run at all (config-based hooks, git >= 2.54).
_DRIVER_EXTRA: dict[str, tuple[str, str]] = {
    "filter": ("required", "false"),
    "hook": ("enabled", "false"),
}

TRUSTED_SCOPES = frozenset({"system", "global", "command"})

#: Seconds git may take to list the configuration; it takes milliseconds unless an include
#: names something that never ends (a FIFO, a device).
LIST_TIMEOUT_S = 10.0

#: Variables that name programs git would run whatever the configuration says.
_PROGRAM_VARIABLES = ("GIT_EXTERNAL_DIFF", "GIT_PAGER", "GIT_EDITOR", "GIT_SEQUENCE_EDITOR")
_SCOPE = re.compile(rb"[a-z-]+")


class GitConfigError(RepoctxError):
    """git could not read this repository's configuration, so no git command ran in it — fix
    the configuration file git names and run again."""


class GitStuckError(RepoctxError):
    """git did not finish in time, so repoctx stopped it — look for a FIFO or a device where
    git reads a file (an ignore or attributes file) and remove it."""


def find_git_dirs(start: str | os.PathLike[str]) -> tuple[Path, Path] | None:
    """(git dir, common dir) of the repository containing ``start``, without running git."""
    found = _locate(start)
    return None if found is None else found[1:]


def _locate(start: str | os.PathLike[str]) -> tuple[Path, Path, Path] | None:
    """(work tree, git dir, common dir) of the repository containing ``start``."""
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
        return directory, git_dir, common
    return None


def _family(key: str) -> str | None:
    """The neutral value of ``key`` (as git lists it: section and name lower-case, the
    subsection byte for byte) when it belongs to a program-running family, else None."""
    section, _, rest = key.partition(".")
    sub, dot, name = rest.rpartition(".")
    for pattern, value in FAMILIES:
        p_section, _, p_rest = pattern.partition(".")
        if p_section != section:
            continue
        if p_rest == "*":
            return value
        p_sub, p_dot, p_name = p_rest.rpartition(".")
        if p_name == name and bool(p_dot) == bool(dot) and p_sub in ("*", sub):
            return value
    return None


def _one_line(text: str) -> str:
    """``text`` on one line, control characters (a file name's newline) escaped."""
    text = " ".join(text.split())
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


def _inside(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def list_config(
    start: str | os.PathLike[str], env: Mapping[str, str]
) -> list[tuple[str, str, str, str | None]] | None:
    """(scope, origin, key, value) of every configuration entry git reads in ``start`` with
    ``env``, in git's order (value None for a key given without ``=``); None when git cannot
    be started there (not installed, or no such directory), so no git command can be either.
    Raises GitConfigError when git rejects the configuration or does not finish in time."""
    listing_env = dict(env)
    # `git config` alone reads the file named by GIT_CONFIG instead of the repository's.
    listing_env.pop("GIT_CONFIG", None)
    argv = ["git", "config", "--list", "--includes", "--show-scope", "--show-origin", "-z"]
    try:
        proc = subprocess.run(argv, cwd=start, env=listing_env, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=LIST_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise GitConfigError(
            f"git did not finish reading the configuration of {_one_line(os.fspath(start))} in "
            f"{LIST_TIMEOUT_S:g} s (an include of a FIFO or a device?), so no git command ran "
            "there — remove that `include.path` / `includeIf` entry from its .git/config."
        ) from None
    except OSError:
        # The same executable, directory and environment would fail the command itself.
        return None
    if proc.returncode != 0:
        detail = _one_line(os.fsdecode(proc.stderr)) or f"exit status {proc.returncode}"
        raise GitConfigError(
            f"git rejects the configuration of {_one_line(os.fspath(start))} ({detail}), so no "
            "git command ran there — fix the file it names."
        )
    tokens = proc.stdout.split(b"\0")
    if tokens[-1] != b"" or (len(tokens) - 1) % 3:
        raise GitConfigError(f"`git config --list -z` printed something unexpected in "
                             f"{_one_line(os.fspath(start))}, so no git command ran there — "
                             "check that `git` is git.")
    entries: list[tuple[str, str, str, str | None]] = []
    for i in range(0, len(tokens) - 1, 3):
        scope, origin, pair = tokens[i : i + 3]
        if not _SCOPE.fullmatch(scope) or b":" not in origin:
            raise GitConfigError(f"`git config --list -z` printed something unexpected in "
                                 f"{_one_line(os.fspath(start))}, so no git command ran there "
                                 "— check that `git` is git.")
        key, newline, value = pair.partition(b"\n")
        entries.append((scope.decode(), os.fsdecode(origin), os.fsdecode(key),
                        os.fsdecode(value) if newline else None))
    return entries


def overrides_for(
    entries: list[tuple[str, str, str, str | None]], start: str | os.PathLike[str]
) -> tuple[tuple[str, str], ...]:
    """The command-level entries that neutralise every program-running key an untrusted file
    sets among ``entries`` (see list_config), each followed by the trusted values of that key."""
    located = _locate(start)
    repo = tuple(os.path.realpath(p) for p in located) if located else ()

    def trusted(scope: str, origin: str) -> bool:
        if scope not in TRUSTED_SCOPES:
            return False
        if not origin.startswith("file:"):
            return True  # command line, blob or standard input: given by the caller
        path = origin[len("file:") :]
        # A relative origin is relative to wherever git chose to be: not provably outside.
        return os.path.isabs(path) and not _inside(os.path.realpath(path), repo)

    tainted: dict[str, str] = {}  # key -> neutral value, in git's order
    trusted_values: dict[str, list[str]] = {}
    for scope, origin, key, value in entries:
        neutral = _family(key)
        if trusted(scope, origin):
            if value is not None:
                trusted_values.setdefault(key, []).append(value)
            continue
        section, _, rest = key.partition(".")
        sub, dot, _name = rest.rpartition(".")
        if dot and section in _DRIVER_EXTRA:
            extra, extra_value = _DRIVER_EXTRA[section]
            tainted.setdefault(f"{section}.{sub}.{extra}", extra_value)
        if neutral is not None:
            tainted.setdefault(key, neutral)
    out: list[tuple[str, str]] = []
    for key, neutral in tainted.items():
        out.append((key, neutral))
        out.extend((key, value) for value in trusted_values.get(key, ()))
    return tuple(out)


def repo_overrides(
    start: str | os.PathLike[str], base: Mapping[str, str] | None = None
) -> tuple[tuple[str, str], ...]:
    """The overrides git_env adds for the repository containing ``start`` (see overrides_for)."""
    env = _with_always(dict(os.environ if base is None else base), list(ALWAYS), read_only=True)
    entries = list_config(start, env)
    return () if entries is None else overrides_for(entries, start)


def _with_always(env: dict[str, str], pairs: list[tuple[str, str]], *, read_only: bool) -> dict[str, str]:
    """``env`` with ``pairs`` appended to its command-level configuration and git's
    program-naming variables set or dropped. Entries already in ``GIT_CONFIG_COUNT`` are
    kept; ours come after them, so they win."""
    try:
        count = int(env.get("GIT_CONFIG_COUNT", "0"))
    except ValueError:
        count = 0
    count = max(count, 0)
    for key, value in pairs:
        env[f"GIT_CONFIG_KEY_{count}"] = key
        env[f"GIT_CONFIG_VALUE_{count}"] = value
        count += 1
    env["GIT_CONFIG_COUNT"] = str(count)
    # A relative (or empty) PATH entry is looked up from git's working directory, the
    # repository: `git` itself, and every program git starts by name, would be its files.
    if "PATH" in env:
        absolute = [p for p in env["PATH"].split(os.pathsep) if os.path.isabs(p)]
        env["PATH"] = os.pathsep.join(absolute) or os.defpath
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["GIT_PROXY_COMMAND"] = ""
    if read_only:
        env["GIT_OPTIONAL_LOCKS"] = "0"
    else:
        env.pop("GIT_OPTIONAL_LOCKS", None)
    for name in _PROGRAM_VARIABLES:
        env.pop(name, None)
    return env


def git_env(
    start: str | os.PathLike[str] | None,
    base: Mapping[str, str] | None = None,
    *,
    read_only: bool = True,
) -> dict[str, str]:
    """``base`` (default: os.environ) plus the variables that keep git, run in ``start`` with
    the returned environment, from running any program the repository configures. Asks git
    (see the module docstring); raises GitConfigError when it cannot, and then no git
    command may run there."""
    env = _with_always(dict(os.environ if base is None else base), list(ALWAYS),
                       read_only=read_only)
    if start is None:
        return env
    entries = list_config(start, env)
    if not entries:
        return env
    extra = overrides_for(entries, start)
    if not extra:
        return env
    count = int(env["GIT_CONFIG_COUNT"])
    for key, value in extra:
        env[f"GIT_CONFIG_KEY_{count}"] = key
        env[f"GIT_CONFIG_VALUE_{count}"] = value
        count += 1
    env["GIT_CONFIG_COUNT"] = str(count)
    return env
