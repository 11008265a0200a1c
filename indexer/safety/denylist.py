"""The secrets deny list: files the agent never reads, lists or is shown, and the indexer never
indexes under another name (through a link). It lives here, below the agent, because discovery
applies it too: a link with an ordinary name to a deny-listed file (`notes.txt -> .env`) would
otherwise put the secret's content into the index under a name no name check catches."""

from __future__ import annotations

import functools
from collections.abc import Iterable

import pathspec

#: Never read or written by the agent, listed, searched or put in a context pack. gitignore
#: syntax: a pattern without "/" matches at any depth, the last pattern that matches wins, and
#: "!" re-allows (so `agent.deny = ["!.env.example"]` re-allows what these deny). Files are
#: denied by what they are for, never by a word in a source file's name: `key.py`, `keys.go`
#: and `credentials.py` stay readable. Secrets inside readable files (a token in code, a
#: remote URL with a password in `.git/config`) are redacted by content: agent/redact.py.
DEFAULT_DENY: tuple[str, ...] = (
    # environment files: dotenv (templates too, until re-allowed) and direnv
    ".env",
    ".env.*",
    ".envrc",
    # SSH private keys under any suffix (id_rsa.bak, id_ed25519_sk, id_ecdsa-work), not .pub
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "id_xmss*",
    "!id_*.pub",
    "**/.ssh/**",  # after the .pub re-allow: nothing under .ssh
    # private keys and key stores
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "*.ppk",
    "secring.*",
    "**/.gnupg/**",
    # tools' credential and token files
    ".git-credentials",
    ".netrc",
    "_netrc",
    ".pgpass",
    ".my.cnf",
    ".pypirc",
    ".npmrc",
    ".dockercfg",
    "**/.docker/config.json",
    ".vault-token",
    ".s3cfg",
    ".boto",
    ".htpasswd",
    ".terraformrc",
    "terraform.rc",
    "**/.config/gh/**",
    # cloud credentials
    "**/.aws/**",
    "**/.azure/**",
    "**/.config/gcloud/**",
    "application_default_credentials.json",
    "*service-account*.json",
    "client_secret*.json",
    "**/.kube/**",
    "kubeconfig",
    "*.kubeconfig",
    # terraform state and variables hold provider secrets in plain text
    "*.tfstate",
    "*.tfstate.*",
    "*.tfvars",
    "*.tfvars.json",
    # files named for secrets: any `secrets.*` (re-allow a module with `!secrets.py`), and
    # `credentials` as data, not as code (credentials.py implements credential providers)
    "secrets.*",
    "credentials",
    "credentials.json",
    "credentials.yaml",
    "credentials.yml",
    "credentials.toml",
    "credentials.ini",
    "credentials.cfg",
    "credentials.conf",
    "credentials.xml",
    "credentials.csv",
    "credentials.txt",
    "credentials.db",
    "credentials.tfrc.json",
    "*_credentials.json",
    "*-credentials.json",
)


def deny_spec(patterns: Iterable[str]) -> tuple[tuple[str, ...], pathspec.GitIgnoreSpec]:
    """The patterns kept (blank lines and comments dropped) and their gitignore-style matcher."""
    pats = tuple(p for p in patterns if p.strip() and not p.lstrip().startswith("#"))
    return pats, pathspec.GitIgnoreSpec.from_lines(pats)


@functools.cache
def _default_spec() -> pathspec.GitIgnoreSpec:
    return deny_spec(DEFAULT_DENY)[1]


def denied_by_default(rel: str) -> bool:
    """Whether root-relative ``rel`` is on the built-in deny list (``agent.deny`` not included:
    for readers that have no config at hand; the agent's tools apply the whole list)."""
    return _default_spec().match_file(rel)
