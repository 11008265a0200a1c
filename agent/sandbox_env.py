"""The environment git and the shell get inside the sandbox.

What holds by construction, whatever the command's words:

- Nothing the environment repoctx passes on names a program for git, another configuration or
  another repository: every ``GIT_*`` variable is dropped (but the author/committer identity),
  and so are the variables that make a shell or the dynamic loader run code (``BASH_ENV``,
  ``ENV``, ``LD_PRELOAD``, ``LD_AUDIT``) — whatever `agent.env_allow` or a tool's extra
  environment says.
- repoctx's own configuration comes after that, so it is the only command-scope configuration:
  ``GIT_CONFIG_COUNT``/``_KEY_n``/``_VALUE_n`` from `indexer.safety.gitsafe.git_env` (no pager, editor,
  hooks, fsmonitor, askpass, credential helper, ``ext::`` transport, and the repository's
  drivers neutralised), which outranks every configuration file — the repository's, its
  includes, and whatever the command writes. ``GIT_CONFIG_GLOBAL`` and ``GIT_CONFIG_SYSTEM``
  are ``/dev/null``, so neither ``HOME=.`` nor ``XDG_CONFIG_HOME=.`` makes git read a file the
  command wrote (and ``~/.gitconfig``, which may hold credentials, is not read).

What is checked on the command's words (agent/command_policy.py), because only the command line
can override command-scope configuration: ``GIT_*`` assignments (``GIT_CONFIG_COUNT=0 git …``,
``env GIT_EXTERNAL_DIFF=… git``), git's ``-c``/``--config-env`` (agent/tools/command_tools.py)
and options that take a program (``-O<cmd>``, ``--open-files-in-pager``, ``--ext-diff``…).
Everything git then runs still runs inside the sandbox.
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
from collections.abc import Mapping

from indexer import git_env

#: Kept among the ``GIT_*`` variables: they name no program, file or repository.
KEPT_GIT_VARS: tuple[str, ...] = ("GIT_AUTHOR_*", "GIT_COMMITTER_*")
#: Dropped too: they make a shell (``bash -c`` runs string commands) or the loader run code.
CODE_VARS: frozenset[str] = frozenset({"BASH_ENV", "ENV", "LD_PRELOAD", "LD_AUDIT"})


def scrub(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the variables that could point git, a shell or the loader at code."""
    return {
        k: v
        for k, v in env.items()
        if k not in CODE_VARS
        and (not k.startswith("GIT_") or any(fnmatch.fnmatchcase(k, p) for p in KEPT_GIT_VARS))
    }


def command_env(workspace: str, env: Mapping[str, str], *, git_writable: bool) -> dict[str, str]:
    """The environment of a sandboxed command run in ``workspace``: ``env`` scrubbed, then
    repoctx's git configuration, set last."""
    base = scrub(env)
    # The user's own safe.directory entries, or git refuses a workspace another user owns
    # (a repository mounted into a container) once it no longer reads ~/.gitconfig. Entries
    # before repoctx's: git_env puts its own after them.
    for i, value in enumerate(_safe_directories(workspace)):
        base[f"GIT_CONFIG_KEY_{i}"] = "safe.directory"
        base[f"GIT_CONFIG_VALUE_{i}"] = value
        base["GIT_CONFIG_COUNT"] = str(i + 1)
    out = git_env(workspace, base=base, read_only=not git_writable)
    out["GIT_CONFIG_GLOBAL"] = os.devnull
    out["GIT_CONFIG_SYSTEM"] = os.devnull
    if git_writable:
        out.update({k: v for k, v in _identity(workspace).items() if k not in out})
    return out


def _safe_directories(workspace: str) -> list[str]:
    """The user's `safe.directory` values (global and system configuration, which the user
    trusts) when ``workspace`` belongs to another user — the only case git consults them."""
    try:
        if os.stat(workspace).st_uid == os.geteuid():
            return []
    except OSError:
        return []
    values = []
    for scope in ("--system", "--global"):
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        try:
            proc = subprocess.run(
                ["git", "config", scope, "--get-all", "safe.directory"],
                cwd="/",  # no repository around: only the named file is read
                env=env,
                capture_output=True,
                text=True,
                timeout=10,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue  # no git here: then none runs in the sandbox either
        values += [v for v in proc.stdout.splitlines() if v]
    return values


def _identity(workspace: str) -> dict[str, str]:
    """The author and committer git would use in ``workspace`` (the repository's, else the
    user's own configuration): commits made in the sandbox, which reads neither ~/.gitconfig
    nor a global file, keep them. `git config --get` runs no program a configuration names."""
    found: dict[str, str] = {}
    for key, names in (
        ("user.name", ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME")),
        ("user.email", ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL")),
    ):
        try:
            proc = subprocess.run(
                ["git", "config", "--get", key],
                cwd=workspace,
                env=git_env(workspace),
                capture_output=True,
                text=True,
                timeout=10,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue  # no git, or a stuck one: git in the sandbox then asks for an identity
        value = proc.stdout.strip()
        if proc.returncode == 0 and value:
            found.update(dict.fromkeys(names, value))
    return found
