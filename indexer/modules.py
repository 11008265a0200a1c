"""Module names derived from paths (Python packages follow `__init__.py`)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePosixPath

_INIT_NAMES = ("__init__.py", "__init__.pyi")


def package_dirs(paths: Iterable[str]) -> frozenset[str]:
    """Directories (relative POSIX, "" for the root) that hold an ``__init__.py``."""
    out = set()
    for p in paths:
        pp = PurePosixPath(p)
        if pp.name in _INIT_NAMES:
            out.add(str(pp.parent) if str(pp.parent) != "." else "")
    return frozenset(out)


def module_name(path: str, language: str, packages: frozenset[str]) -> str:
    """Dotted module name: for Python, rooted at the topmost package directory above the file
    (as the interpreter would import it); for other languages, the path without its suffix."""
    pp = PurePosixPath(path)
    if language != "python":
        return ".".join(pp.with_suffix("").parts)
    parts = [] if pp.stem == "__init__" else [pp.stem]
    parent = pp.parent
    while str(parent) not in (".", "") and str(parent) in packages:
        parts.append(parent.name)
        parent = parent.parent
    if not parts:  # a root-level __init__.py
        return pp.parent.name or "__init__"
    return ".".join(reversed(parts))


def resolve_relative(module: str, is_package: bool, level: int, target: str) -> str:
    """Absolute module for ``from .{level} target import ...`` written in ``module``."""
    if level == 0:
        return target
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)] if level - 1 <= len(base) else []
    return ".".join([*base, target] if target else base)
