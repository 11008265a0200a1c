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

from indexer import DEFAULT_DENY, Config, deny_spec, is_config_path, shown

from .errors import (
    BinaryFileError,
    NotAFileError,
    PathEscapeError,
    PathNotFoundError,
    ProtectedPathError,
    SecretPathError,
)
from .safe_fs import Beneath, kind_of
from .settings import AgentSettings

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
        self.deny_patterns, self._deny = deny_spec((*DEFAULT_DENY, *deny))
        self.write_deny_patterns, self._write_deny = deny_spec(
            (*DEFAULT_DENY, *DEFAULT_WRITE_DENY, *deny, *write_deny)
        )
        self._write_only = {*DEFAULT_WRITE_DENY, *write_deny}
        self.recorder = recorder
        self.max_read_bytes = max_read_bytes

    @classmethod
    def from_config(cls, config: Config, *, recorder: WriteRecorder | None = None) -> Workspace:
        """Workspace over ``config.root`` with ``agent.deny`` / ``agent.write_deny`` from config."""
        agent = AgentSettings.from_config(config)
        return cls(
            config.root,
            deny=agent.deny,
            write_deny=agent.write_deny,
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

    def is_hidden(self, rel_path: str) -> bool:
        """True when the content at ``rel_path`` must not be shown: its name is deny-listed, or
        it leads through links outside the workspace or to a deny-listed file (``notes.txt ->
        .env``). For results that come from the index, which holds the file under its name."""
        if self.is_secret(rel_path):
            return True
        asked = os.path.normpath(os.path.join(self._real_root, rel_path))
        real = os.path.realpath(asked)
        if real == asked:
            return False
        if not _within(real, self._real_root):
            return True
        return self.is_secret(Path(os.path.relpath(real, self._real_root)).as_posix())

    def check_readable(self, path: str | os.PathLike[str]) -> Path:
        """Resolve ``path`` and raise SecretPathError if it, or what a symlink points to, is denied."""
        return self._check(path, self._deny, self.deny_patterns, "read")

    def check_writable(self, path: str | os.PathLike[str]) -> Path:
        """Like check_readable, against the write deny list (which also covers `.git`); every
        write and delete goes through here, so repoctx's own config is refused here too."""
        # Not a deny pattern, and before them: a pattern can be re-allowed with "!", and
        # repoctx's own config (`.repoctx.toml`, `.repoctx/`) stays out of the agent's reach
        # whatever any config says. Both the name asked for and the file it resolves to count.
        real = self.resolve(path)
        raw = os.fspath(path)
        asked = os.path.normpath(raw if os.path.isabs(raw) else os.path.join(self._given_root, raw))
        base = self._given_root if _within(asked, self._given_root) else self._real_root
        # The name asked for by its name alone; the file it resolves to also against the
        # user's config directory (which is_config_path resolves itself, links included).
        for rel, root in ((Path(os.path.relpath(asked, base)).as_posix(), None),
                          (self._rel(real), self._real_root)):
            if is_config_path(rel, root):
                raise ProtectedPathError(
                    f"{shown(rel)} is repoctx's own configuration or index — the agent may not write "
                    "it; change it yourself if it must change."
                )
        return self._check(path, self._write_deny, self.write_deny_patterns, "write")

    def _rel(self, real: Path | str) -> str:
        return Path(os.path.relpath(real, self._real_root)).as_posix()

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
                    f"{shown(rel)} matches the deny pattern '{pats[index]}' — the agent may not {verb} it. "
                    f"To allow it, add '!{shown(rel)}' to `{key}` in your user-level config "
                    "(~/.config/repoctx/config.toml); a repository's config may only tighten."
                )
        return real

    @staticmethod
    def _match(spec: pathspec.GitIgnoreSpec, rel: str) -> int | None:
        if rel in ("", "."):
            return None
        result = spec.check_file(rel)
        return result.index if result.include else None

    # -- file I/O --------------------------------------------------------------------------------
    #
    # Every operation below opens the root once and reaches the checked path beneath it with no
    # link followed (agent/safe_fs.py): a directory swapped for a link after the check makes it
    # fail with one line, never read, write or delete elsewhere.

    def read_text(
        self,
        path: str | os.PathLike[str],
        start_line: int | None = None,
        end_line: int | None = None,
        max_lines: int = 2000,
    ) -> FileSlice:
        """Lines of a UTF-8 text file, streamed so huge files cost only the returned slice."""
        real = self.check_readable(path)
        rel = self._rel(real)
        first = max(1, start_line or 1)
        last = first + max_lines - 1
        kept: list[bytes] = []
        used = 0
        full = False
        total = 0
        cur: list[bytes] = []
        cur_len = 0
        open_line = False
        with os.fdopen(self._read_fd(rel), "rb") as fh:
            # Bounded readline: a huge file without newlines must not be loaded whole.
            for piece in iter(lambda: fh.readline(65536), b""):
                if b"\x00" in piece:
                    raise BinaryFileError(f"{shown(rel)} is binary — only text files can be read.")
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

    def read_bytes(self, path: str | os.PathLike[str], limit: int | None = None) -> bytes:
        """The bytes of a readable regular file (at most ``limit + 1`` with a limit, so the caller
        can tell a file over it without loading it whole)."""
        rel = self._rel(self.check_readable(path))
        with os.fdopen(self._read_fd(rel), "rb") as fh:
            return fh.read() if limit is None else fh.read(limit + 1)

    def lexists(self, path: str | os.PathLike[str]) -> bool:
        """Whether something (a link included) is at ``path``; no link on the way is followed."""
        rel = self._rel(self.resolve(path))
        if rel == ".":
            return True
        with Beneath(self._real_root) as base:
            return base.lstat(rel) is not None

    def write_text(self, path: str | os.PathLike[str], text: str) -> Path:
        """Write ``text`` as UTF-8, creating parent directories; the recorder sees it first."""
        return self.write_bytes(path, text.encode("utf-8"))

    def write_bytes(self, path: str | os.PathLike[str], data: bytes) -> Path:
        real = self.check_writable(path)
        rel = self._rel(real)
        with Beneath(self._real_root) as base:
            st = base.lstat(rel) if rel != "." else os.stat(self._real_root)
            if st is not None and stat.S_ISDIR(st.st_mode):
                raise NotAFileError(f"{shown(rel)} is a directory — pass a file path.")
            if self.recorder is not None:
                self.recorder.record_before_write(real)
            # A new file beside the old, renamed over it: a link or hard link at the name is
            # replaced, never written through; the permission bits are kept.
            base.write(rel, data)
        return real

    def delete_file(self, path: str | os.PathLike[str]) -> Path:
        real = self.check_writable(path)
        rel = self._rel(real)
        with Beneath(self._real_root) as base:
            st = base.lstat(rel) if rel != "." else os.stat(self._real_root)
            if st is None:
                raise PathNotFoundError(f"{shown(rel)} does not exist — nothing to delete.")
            if stat.S_ISDIR(st.st_mode):
                raise NotAFileError(f"{shown(rel)} is a directory — only files can be deleted.")
            if self.recorder is not None:
                self.recorder.record_before_write(real)
            base.unlink(rel)
        return real

    def _read_fd(self, rel: str) -> int:
        if rel == ".":
            raise NotAFileError(". is a directory — use list_dir, or pass a file path.")
        with Beneath(self._real_root) as base:
            return base.read_fd(rel)[0]

    def list_dir(
        self, path: str | os.PathLike[str] = ".", depth: int = 1, *, max_entries: int = 1000
    ) -> DirListing:
        """Entries under ``path`` down to ``depth`` levels, sorted, secrets left out.

        Symlinked directories are listed but not followed; DEFAULT_OPAQUE_DIRS are not entered.
        """
        real = self.check_readable(path)
        rel_root = self._rel(real)
        entries: list[DirEntry] = []
        truncated = False
        with Beneath(self._real_root) as base:
            st = base.lstat(rel_root) if rel_root != "." else os.stat(self._real_root)
            if st is None:
                raise PathNotFoundError(f"{shown(rel_root)} does not exist — list its parent directory.")
            if stat.S_ISREG(st.st_mode):
                raise NotAFileError(f"{shown(rel_root)} is a file — read it instead of listing it.")
            if not stat.S_ISDIR(st.st_mode):
                raise NotAFileError(
                    f"{shown(rel_root)} is {kind_of(st.st_mode)}, not a directory — list a directory."
                )
            # Breadth first, so a truncated listing still shows the top levels.
            queue: deque[tuple[str, int]] = deque([(rel_root, 1)])
            while queue and not truncated:
                current, level = queue.popleft()
                try:
                    children = base.scandir("" if current == "." else current)
                except (PermissionError, PathNotFoundError):
                    continue
                for child in children:
                    rel = child.name if current == "." else f"{current}/{child.name}"
                    if self.is_secret(rel):
                        continue
                    if len(entries) >= max_entries:
                        truncated = True
                        break
                    entries.append(_entry(child.st.st_mode, child.st.st_size, rel))
                    if (
                        level < depth
                        and stat.S_ISDIR(child.st.st_mode)
                        and child.name not in DEFAULT_OPAQUE_DIRS
                    ):
                        queue.append((rel, level + 1))
        entries.sort(key=lambda e: e.path)
        return DirListing(rel_root, tuple(entries), truncated)


def _entry(mode: int, size: int, rel: str) -> DirEntry:
    if stat.S_ISLNK(mode):
        return DirEntry(rel, "symlink", None)
    if stat.S_ISDIR(mode):
        return DirEntry(rel, "dir", None)
    if stat.S_ISREG(mode):
        return DirEntry(rel, "file", size)
    return DirEntry(rel, "other", None)
