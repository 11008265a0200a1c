"""Module names derived from paths (Python packages follow `__init__.py`)."""

from __future__ import annotations

from collections.abc import Iterable

from indexer.parse.lang_hooks import PYTHON
from indexer.parse.languages import hooks

_INIT_NAMES = PYTHON.package_markers


def package_dirs(paths: Iterable[str]) -> frozenset[str]:
    """Directories (relative POSIX, "" for the root) that hold an ``__init__.py``."""
    out = set()
    for p in paths:  # string operations, not PurePosixPath: every path of every build
        if p.endswith(_INIT_NAMES):
            head, _, name = p.rpartition("/")
            if name in _INIT_NAMES:
                out.add(head)
    return frozenset(out)


def module_name(path: str, language: str, packages: frozenset[str]) -> str:
    """Dotted module name, as the language's hooks define it: for Python, rooted at the
    topmost package directory above the file; for the others, the path without its suffix."""
    return hooks(language).module_name(path, packages)


def resolve_relative(module: str, is_package: bool, level: int, target: str) -> str:
    """Absolute module for ``from .{level} target import ...`` written in ``module``."""
    if level == 0:
        return target
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)] if level - 1 <= len(base) else []
    return ".".join([*base, target] if target else base)
