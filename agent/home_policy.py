"""What of ``$HOME`` a sandboxed command may read: the toolchain, and nothing else.

``$HOME`` holds credentials under names no list can foresee (``~/.myservice/token``), so it is
denied by default: a command reads only the directories where interpreters, compilers and their
offline package stores live (``HOME_TOOLCHAIN``), the interpreter and ``PATH`` directories that
lie under ``$HOME``, and what the user grants with `agent.sandbox_read`. ``~/.gitconfig`` is not
among them (it may hold credentials in URLs): git in the sandbox runs with
``GIT_CONFIG_GLOBAL=/dev/null`` (see `agent.sandbox_env`). The known secret files of
``HOME_SECRETS`` stay denied inside the granted directories (``~/.cargo/credentials``).
"""

from __future__ import annotations

import os
import sys

#: Known secrets, denied even inside the granted toolchain directories (relative to ``$HOME``;
#: ``*`` globs within one path component).
#: Extend with `agent.sandbox_deny_read`.
HOME_SECRETS: tuple[str, ...] = (
    ".ssh",
    ".aws",
    ".gnupg",
    ".config/gcloud",
    ".config/gh",
    ".config/hub",
    ".config/git/credentials",
    ".config/rclone",
    ".config/containers/auth.json",
    ".config/op",
    ".config/doctl",
    ".config/google-chrome",
    ".config/chromium",
    ".config/BraveSoftware",
    ".mozilla",
    ".thunderbird",
    ".netrc",
    ".git-credentials",
    ".docker",
    ".kube",
    ".azure",
    ".oci",
    ".pgpass",
    ".my.cnf",
    ".pypirc",
    ".npmrc",
    ".yarnrc*",
    ".cargo/credentials*",
    ".gem/credentials",
    ".m2/settings*.xml",
    ".gradle/gradle.properties",
    ".terraform.d",
    ".vault-token",
    ".boto",
    ".s3cfg",
    ".databrickscfg",
    ".password-store",
    ".local/share/keyrings",
    ".local/share/fish/fish_history",
    ".cache/huggingface/token",
    ".huggingface",
    ".claude/.credentials.json",
    ".codex/auth.json",
    ".*_history",
    ".*history",
    ".lesshst",
)

#: ``$HOME``-relative directories commands may read (``*`` globs within one path component).
HOME_TOOLCHAIN: tuple[str, ...] = (
    ".local/bin",
    ".local/lib/python*",
    ".local/share/virtualenvs",
    ".pyenv",
    ".rye",
    ".cargo/bin",
    ".cargo/registry",
    ".cargo/git",
    ".rustup",
    ".nvm",
    ".volta",
    ".bun/bin",
    ".deno/bin",
    ".npm/_cacache",
    ".m2/repository",
    ".gradle/caches",
    ".gradle/wrapper",
    ".sdkman/candidates",
    "go/pkg/mod",
    "go/bin",
    ".ghcup/bin",
    ".elan",
    ".opam",
)


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def toolchain_in_home(home: str) -> list[str]:
    """Interpreter prefixes, ``PATH`` entries and installation prefixes above them that lie
    strictly inside ``home``: a ``PATH`` entry's parent only when it is a prefix itself (a
    virtualenv, or ``bin`` next to ``lib``), so that ``~/.local/bin`` on ``PATH`` does not grant
    all of ``~/.local`` — nor ``~/bin`` all of ``$HOME``."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable)}
    paths.add(os.environ.get("VIRTUAL_ENV", ""))
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if os.path.isabs(entry):
            paths.add(entry)
            parent = os.path.dirname(entry.rstrip("/"))
            if _is_prefix(parent):
                paths.add(parent)
    found = {os.path.normpath(p) for p in paths if p and os.path.exists(p)}
    return sorted(p for p in found if _within(p, home) and p != home)


def _is_prefix(path: str) -> bool:
    return os.path.exists(os.path.join(path, "pyvenv.cfg")) or (
        os.path.isdir(os.path.join(path, "bin")) and os.path.isdir(os.path.join(path, "lib"))
    )
