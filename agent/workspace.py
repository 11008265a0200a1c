"""The agent's view of a repository: path containment, a secrets deny list, checked file I/O."""

from __future__ import annotations

import os
import stat
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import pathspec

from indexer.config import Config, section_settings

from .errors import (
    BinaryFileError,
    NotAFileError,
    PathEscapeError,
    PathNotFoundError,
    SecretPathError,
)

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

#: Readable but never written: git's own data (a `.git` file or directory at any depth) and the index.
DEFAULT_WRITE_DENY: tuple[str, ...] = (".git", ".repoctx/")

#: Directories list_dir shows but does not descend into.
DEFAULT_OPAQUE_DIRS: tuple[str, ...] = (".git", ".repoctx", "node_modules", "__pycache__", ".venv")


class WriteRecorder(Protocol):
    """Called with the resolved path before the workspace changes a file (see CheckpointStore)."""

    def record_before_write(self, path: Path) -> object: ...


@dataclass(frozen=True)
class FileSlice:
    """Lines ``start_line..end_line`` (1-based, inclusive) of a text file."""

    path: str
    text: str
    start_line: int
    end_line: int
    total_lines: int
    #: True when max_lines or max_bytes cut the requested range short.
    truncated: bool


@dataclass(frozen=True)
class DirEntry:
    path: str
    kind: Literal["file", "dir", "symlink", "other"]
    size: int | None


@dataclass(frozen=True)
class DirListing:
    path: str
    entries: tuple[DirEntry, ...]
    #: True when max_entries was reached.
    truncated: bool


def _spec(patterns: Iterable[str]) -> tuple[tuple[str, ...], pathspec.GitIgnoreSpec]:
    pats = tuple(p for p in patterns if p.strip() and not p.lstrip().startswith("#"))
    return pats, pathspec.GitIgnoreSpec.from_lines(pats)


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class Workspace:
    """A root directory the agent may touch, and nothing outside it.

    ``deny`` and ``write_deny`` extend the defaults; a negated pattern (``!.env.example``)
    re-allows a path the defaults deny.
    """

    def __init__(
        self,
        root: str | Path,
        *,
        deny: Iterable[str] = (),
        write_deny: Iterable[str] = (),
        recorder: WriteRecorder | None = None,
        max_read_bytes: int = 256_000,
    ) -> None:
        root_path = Path(root)
        if not root_path.is_dir():
            raise PathNotFoundError(
                f"Workspace root {root} is not a directory — pass a repository root."
            )
        self._given_root = os.path.normpath(os.path.abspath(root_path))
        self.root = Path(os.path.realpath(root_path))
        self._real_root = str(self.root)
        self.deny_patterns, self._deny = _spec((*DEFAULT_DENY, *deny))
        self.write_deny_patterns, self._write_deny = _spec(
            (*DEFAULT_DENY, *DEFAULT_WRITE_DENY, *deny, *write_deny)
        )
        self._write_only = {*DEFAULT_WRITE_DENY, *write_deny}
        self.recorder = recorder
        self.max_read_bytes = max_read_bytes

    @classmethod
    def from_config(cls, config: Config, *, recorder: WriteRecorder | None = None) -> Workspace:
        """Workspace over ``config.root`` with ``agent.deny`` / ``agent.write_deny`` from config."""
        agent = section_settings(config, "agent")  # checked: lists of strings
        return cls(
            config.root,
            deny=tuple(agent.get("deny", ())),
            write_deny=tuple(agent.get("write_deny", ())),
            recorder=recorder,
        )

    # -- paths -----------------------------------------------------------------------------------

    def resolve(self, path: str | os.PathLike[str]) -> Path:
        """The real path of ``path`` (relative to the root, or absolute inside it).

        Symlinks are resolved, including symlinked parent directories, and the result must lie
        under the real root; the file itself need not exist.
        """
        raw = os.fspath(path)
        if "\x00" in raw:
            raise PathEscapeError(f"{raw!r} contains a NUL byte — pass a plain relative path.")
        candidate = raw if os.path.isabs(raw) else os.path.join(self._given_root, raw)
        lexical = os.path.normpath(candidate)
        if not (_within(lexical, self._given_root) or _within(lexical, self._real_root)):
            raise self._escape(raw)
        real = os.path.realpath(candidate)
        if not _within(real, self._real_root):
            raise self._escape(raw)
        return Path(real)

    def relative(self, path: str | os.PathLike[str]) -> str:
        """The workspace-relative POSIX path of ``path`` ("." for the root)."""
        rel = os.path.relpath(self.resolve(path), self._real_root)
        return Path(rel).as_posix()

    def _escape(self, raw: str) -> PathEscapeError:
        return PathEscapeError(
            f"{raw} is outside the workspace — paths must stay inside the workspace {self._real_root}."
        )

    # -- secrets ---------------------------------------------------------------------------------

    def is_secret(self, rel_path: str) -> bool:
        """True when ``rel_path`` (workspace-relative, "/"-separated) is on the read deny list."""
        return self._match(self._deny, rel_path) is not None

    def check_readable(self, path: str | os.PathLike[str]) -> Path:
        """Resolve ``path`` and raise SecretPathError if it, or what a symlink points to, is denied."""
        return self._check(path, self._deny, self.deny_patterns, "read")

    def check_writable(self, path: str | os.PathLike[str]) -> Path:
        """Like check_readable, against the write deny list (which also covers `.git`)."""
        return self._check(path, self._write_deny, self.write_deny_patterns, "write")

    def _check(
        self,
        path: str | os.PathLike[str],
        spec: pathspec.GitIgnoreSpec,
        pats: tuple[str, ...],
        verb: str,
    ) -> Path:
        real = self.resolve(path)
        real_rel = Path(os.path.relpath(real, self._real_root)).as_posix()
        # The name as asked matters too: `.env` stays secret even when it is a symlink elsewhere.
        raw = os.fspath(path)
        lexical = os.path.normpath(
            raw if os.path.isabs(raw) else os.path.join(self._given_root, raw)
        )
        base = self._given_root if _within(lexical, self._given_root) else self._real_root
        asked_rel = Path(os.path.relpath(lexical, base)).as_posix()
        for rel in (asked_rel, real_rel):
            index = self._match(spec, rel)
            if index is not None:
                key = "agent.write_deny" if pats[index] in self._write_only else "agent.deny"
                raise SecretPathError(
                    f"{rel} matches the deny pattern '{pats[index]}' — the agent may not {verb} it. "
                    f"To allow it, add '!{rel}' to `{key}` in .repoctx.toml "
                    "(or [tool.repoctx.agent] in pyproject.toml)."
                )
        return real

    @staticmethod
    def _match(spec: pathspec.GitIgnoreSpec, rel: str) -> int | None:
        if rel in ("", "."):
            return None
        result = spec.check_file(rel)
        return result.index if result.include else None

    # -- file I/O --------------------------------------------------------------------------------

    def read_text(
        self,
        path: str | os.PathLike[str],
        start_line: int | None = None,
        end_line: int | None = None,
        max_lines: int = 2000,
    ) -> FileSlice:
        """Lines of a UTF-8 text file, streamed so huge files cost only the returned slice."""
        real = self.check_readable(path)
        rel = Path(os.path.relpath(real, self._real_root)).as_posix()
        first = max(1, start_line or 1)
        last = first + max_lines - 1
        kept: list[bytes] = []
        used = 0
        full = False
        total = 0
        cur: list[bytes] = []
        cur_len = 0
        open_line = False
        with os.fdopen(self._open(real, os.O_RDONLY), "rb") as fh:
            # Bounded readline: a huge file without newlines must not be loaded whole.
            for piece in iter(lambda: fh.readline(65536), b""):
                if b"\x00" in piece:
                    raise BinaryFileError(f"{rel} is binary — only text files can be read.")
                line_no = total + 1
                wanted = line_no >= first and (end_line is None or line_no <= end_line)
                if wanted and not full:
                    if line_no > last or used + cur_len + len(piece) > self.max_read_bytes:
                        full, cur, cur_len = True, [], 0
                    else:
                        cur.append(piece)
                        cur_len += len(piece)
                open_line = not piece.endswith(b"\n")
                if not open_line:
                    total += 1
                    if cur:
                        kept.append(b"".join(cur))
                        used += cur_len
                        cur, cur_len = [], 0
        if open_line:
            total += 1
            if cur:
                kept.append(b"".join(cur))
        text = b"".join(kept).decode("utf-8", errors="replace")
        return FileSlice(rel, text, first, first + len(kept) - 1, total, full)

    def write_text(self, path: str | os.PathLike[str], text: str) -> Path:
        """Write ``text`` as UTF-8, creating parent directories; the recorder sees it first."""
        return self.write_bytes(path, text.encode("utf-8"))

    def write_bytes(self, path: str | os.PathLike[str], data: bytes) -> Path:
        real = self.check_writable(path)
        if real.is_dir():
            raise NotAFileError(f"{self.relative(real)} is a directory — pass a file path.")
        if self.recorder is not None:
            self.recorder.record_before_write(real)
        real.parent.mkdir(parents=True, exist_ok=True)
        # In place (not rename) so the file keeps its mode, owner and hard links.
        fd = os.open(real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return real

    def delete_file(self, path: str | os.PathLike[str]) -> Path:
        real = self.check_writable(path)
        if not os.path.lexists(real):
            raise PathNotFoundError(f"{self.relative(real)} does not exist — nothing to delete.")
        if real.is_dir():
            raise NotAFileError(
                f"{self.relative(real)} is a directory — only files can be deleted."
            )
        if self.recorder is not None:
            self.recorder.record_before_write(real)
        real.unlink()
        return real

    def _open(self, real: Path, flags: int) -> int:
        rel = Path(os.path.relpath(real, self._real_root)).as_posix()
        try:
            fd = os.open(real, flags | os.O_NOFOLLOW)
        except FileNotFoundError as exc:
            raise PathNotFoundError(
                f"{rel} does not exist — list the directory to see what exists."
            ) from exc
        except IsADirectoryError as exc:
            raise NotAFileError(
                f"{rel} is a directory — use list_dir, or pass a file path."
            ) from exc
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise NotAFileError(f"{rel} is not a regular file — pass the path of a regular file.")
        return fd

    def list_dir(
        self, path: str | os.PathLike[str] = ".", depth: int = 1, *, max_entries: int = 1000
    ) -> DirListing:
        """Entries under ``path`` down to ``depth`` levels, sorted, secrets left out.

        Symlinked directories are listed but not followed; DEFAULT_OPAQUE_DIRS are not entered.
        """
        real = self.check_readable(path)
        rel_root = Path(os.path.relpath(real, self._real_root)).as_posix()
        if not real.exists():
            raise PathNotFoundError(f"{rel_root} does not exist — list its parent directory.")
        if not real.is_dir():
            raise NotAFileError(f"{rel_root} is a file — read it instead of listing it.")
        entries: list[DirEntry] = []
        truncated = False
        # Breadth first, so a truncated listing still shows the top levels.
        queue: deque[tuple[str, int]] = deque([(str(real), 1)])
        while queue and not truncated:
            current, level = queue.popleft()
            try:
                children = sorted(os.scandir(current), key=lambda e: e.name)
            except PermissionError:
                continue
            for child in children:
                rel = Path(os.path.relpath(child.path, self._real_root)).as_posix()
                if self.is_secret(rel):
                    continue
                if len(entries) >= max_entries:
                    truncated = True
                    break
                entries.append(_entry(child, rel))
                if (
                    level < depth
                    and child.is_dir(follow_symlinks=False)
                    and child.name not in DEFAULT_OPAQUE_DIRS
                ):
                    queue.append((child.path, level + 1))
        entries.sort(key=lambda e: e.path)
        return DirListing(rel_root, tuple(entries), truncated)


def _entry(child: os.DirEntry[str], rel: str) -> DirEntry:
    if child.is_symlink():
        return DirEntry(rel, "symlink", None)
    if child.is_dir(follow_symlinks=False):
        return DirEntry(rel, "dir", None)
    if child.is_file(follow_symlinks=False):
        return DirEntry(rel, "file", child.stat(follow_symlinks=False).st_size)
    return DirEntry(rel, "other", None)
