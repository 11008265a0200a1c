"""repoctx's configuration files: where they are, and reading one without trusting its bytes.

A repository's `.repoctx.toml` and `pyproject.toml` are untrusted input: any of them may be a
FIFO (an ordinary open would wait forever for a writer), a directory, a link to a device, a
gigabyte of text, bytes that are not UTF-8, or TOML nested deeper than the parser's recursion
(tomllib recurses once per level: 5,000 levels used to end in a 3,000-line RecursionError).
:func:`read_toml` turns every one of those into one ConfigError line, in bounded time and memory.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from indexer.errors import ConfigError

#: The repository's own config file; `[tool.repoctx]` of pyproject.toml is read when it is absent.
REPO_CONFIG = ".repoctx.toml"
PYPROJECT = "pyproject.toml"
#: The default index directory, at the root: it holds the index, traces and memory.
INDEX_DIR_NAME = ".repoctx"
#: No real settings file comes near this; a larger one is refused before it is parsed.
MAX_CONFIG_BYTES = 1 << 20
#: Arrays and tables deeper than this are refused: settings are at most three levels deep, and
#: what is deeper than Python's recursion limit breaks whatever walks it recursively later
#: (repr, comparisons), not only tomllib.
MAX_CONFIG_DEPTH = 32


def user_config_path(env: Mapping[str, str] | None = None) -> Path | None:
    """The user's own config file: ``$XDG_CONFIG_HOME/repoctx/config.toml``, else
    ``~/.config/repoctx/config.toml``. ``env`` given: only its variables count (None when it has
    neither XDG_CONFIG_HOME nor HOME), so a caller's explicit environment is the whole of it."""
    source = os.environ if env is None else env
    xdg = source.get("XDG_CONFIG_HOME", "")
    if os.path.isabs(xdg):  # the XDG spec: a relative value is invalid and ignored
        return Path(xdg) / "repoctx" / "config.toml"
    home = source.get("HOME", "")
    if os.path.isabs(home):
        return Path(home) / ".config" / "repoctx" / "config.toml"
    return Path.home() / ".config" / "repoctx" / "config.toml" if env is None else None


def is_config_path(rel: str, root: str | os.PathLike[str] | None = None) -> bool:
    """Whether the root-relative path ``rel`` ("/"-separated) is one of repoctx's own files that
    the agent's tools must not create, edit, move or delete: a `.repoctx.toml` at any depth
    (a subdirectory can be a root too) and anything in a `.repoctx` directory (the default index,
    with its traces and memory). With ``root``, also the user's own config directory where the
    workspace holds it (a run in $HOME). pyproject.toml is not: it is the project's, and its
    `[tool.repoctx]` can only tighten (see :func:`changes_repo_config` for a run that trusts it)."""
    parts = PurePosixPath(rel.replace("\\", "/")).parts
    if parts and (parts[-1] == REPO_CONFIG or INDEX_DIR_NAME in parts):
        return True
    user = user_config_path()
    if root is None or user is None:
        return False
    target = os.path.realpath(os.path.join(root, rel))
    return os.path.commonpath([target, os.path.realpath(user.parent)]) == os.path.realpath(
        user.parent)


def changes_repo_config(rel: str, before: str | None, after: str | None) -> bool:
    """Whether writing ``after`` (None: deleting) over ``before`` (None: absent) at ``rel`` changes
    repoctx's configuration: always for :func:`is_config_path` paths; for a pyproject.toml, when
    its `[tool.repoctx]` table parses differently. An ``after`` that does not parse changes
    nothing that loads: every later command stops on it with a ConfigError."""
    if is_config_path(rel):
        return True
    if PurePosixPath(rel.replace("\\", "/")).name != PYPROJECT:
        return False
    new = _tool_table(after)
    return new is not None and new != (_tool_table(before) or {})


def _tool_table(text: str | None) -> Any:
    """``[tool.repoctx]`` of a pyproject text ({} without one), or None when it does not parse."""
    if text is None:
        return {}
    import tomllib

    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError):
        return None
    tool = data.get("tool")
    return tool.get("repoctx", {}) if isinstance(tool, dict) else {}


def read_toml(path: Path, label: str) -> dict[str, Any] | None:
    """The TOML document at ``path``, or None when nothing is there. Anything else that is not a
    readable regular UTF-8 TOML file of at most MAX_CONFIG_BYTES is a one-line ConfigError naming
    ``label``; nothing here waits on a FIFO or reads past the limit."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a link loop, a name too long, no permission on the directory
        raise ConfigError(f"Cannot read {label}: {exc.strerror} — fix or remove it.") from None
    if not stat.S_ISREG(st.st_mode):
        raise _not_a_file(label, st.st_mode)
    try:
        # O_NONBLOCK: should the name become a FIFO after the stat, the open does not wait
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"Cannot read {label}: {exc.strerror} — fix or remove it.") from None
    try:
        st = os.fstat(fd)  # what was opened, not what the name meant a moment ago
        if not stat.S_ISREG(st.st_mode):
            raise _not_a_file(label, st.st_mode)
        data = _read_at_most(fd, MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"Cannot read {label}: {exc.strerror} — fix or remove it.") from None
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"Cannot read {label}: it is larger than {MAX_CONFIG_BYTES // (1 << 20)} MiB, which no "
            "settings file needs — shorten it.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"Cannot read {label}: byte {exc.start} is not UTF-8 — save it as UTF-8.") from None
    import tomllib  # only with a settings file: ~3 ms of every command's start-up otherwise

    too_deep = ConfigError(f"Cannot read {label}: its arrays or tables are nested more than "
                           f"{MAX_CONFIG_DEPTH} levels deep — flatten them.")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"Cannot read {label}: {exc} — fix the file's TOML syntax.") from None
    except RecursionError:  # tomllib recurses once per level of nesting
        raise too_deep from None
    if _depth(doc) > MAX_CONFIG_DEPTH:
        raise too_deep
    return doc


def _depth(doc: Any) -> int:
    """How deeply ``doc``'s arrays and tables nest, walked without recursion."""
    deepest = 0
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_CONFIG_DEPTH:
            break
        children = value.values() if isinstance(value, dict) else value
        stack.extend((v, depth + 1) for v in children if isinstance(v, dict | list))
    return deepest


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = os.read(fd, min(1 << 16, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _not_a_file(label: str, mode: int) -> ConfigError:
    what = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
    return ConfigError(f"Cannot read {label}: it is {what}, not a file — remove it or make it a "
                       "regular TOML file.")
