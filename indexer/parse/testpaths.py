"""Which paths hold tests: the one rule that ranking (tests weigh less, `--exclude-tests`),
context packing, embedding order and the benchmarks all use.

The rule is a list of globs so that Python (`fnmatch.fnmatchcase`) and SQLite (`GLOB`) apply the
same thing: in both, ``*`` also matches ``/`` and the match is case-sensitive. It follows the
usual conventions of the languages repoctx parses: a directory named like a test directory
anywhere in the path, pytest's ``test_*`` and ``conftest.py``, Go's and Python's ``*_test``,
JavaScript's ``*.test.*`` / ``*.spec.*`` and Java's ``*Test.java``. `agent.tools.testing` keeps
pytest's own collection rule (which files pytest runs), a different question.
"""

from __future__ import annotations

import fnmatch

#: Directory names that hold tests wherever they appear in a path.
TEST_DIRS = ("test", "tests", "testing", "__tests__", "spec")

TEST_GLOBS = (
    *(g for d in TEST_DIRS for g in (f"{d}/*", f"*/{d}/*")),
    "test_*",
    "*/test_*",
    "*_test",
    "*_test.*",
    "conftest.py",
    "*/conftest.py",
    "*.test.*",
    "*.spec.*",
    "*Test.java",
)


def is_test_path(path: str) -> bool:
    """Whether ``path`` (relative, ``/``-separated) is test code."""
    return any(fnmatch.fnmatchcase(path, g) for g in TEST_GLOBS)


def sql_is_test_path(column: str = "f.path") -> tuple[str, list[str]]:
    """``(column GLOB ? OR ...)``, true for test paths, and its parameters."""
    return "(" + " OR ".join(f"{column} GLOB ?" for _ in TEST_GLOBS) + ")", list(TEST_GLOBS)
