"""The task record of benchmarks/agent_e2e.py and the helpers its fixture repositories share."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass


def src(text: str) -> str:
    """A fixture file's text written indented in the module that holds it."""
    return textwrap.dedent(text).lstrip("\n")


#: Files every fixture repository has: pytest without plugins (repoctx's sandboxed test runs),
#: and the package importable from the repository root.
COMMON = {
    ".repoctx.toml": '[agent]\ntest_env = { PYTEST_DISABLE_PLUGIN_AUTOLOAD = "1" }\n',
    "pyproject.toml": '[tool.pytest.ini_options]\npythonpath = ["."]\n',
}


@dataclass(frozen=True)
class Task:
    name: str
    kind: str  # agent | ask
    repo: str
    prompt: str
    #: agent: edits (path, old, new) that solve the task — the benchmark's tests apply them in
    #: order, each ``old`` found exactly once in the file as the earlier edits left it.
    fix: tuple[tuple[str, str, str], ...] = ()
    #: agent: Python run in the repository afterwards; exit 0 means the change does what was asked.
    verify: str = ""
    #: agent: files that must be left as they were (the tests the change has to pass).
    keep: tuple[str, ...] = ()
    #: ask: (path, symbol) whose lines a right answer cites.
    expect: tuple[tuple[str, str], ...] = ()
    #: ask: words of which a right answer mentions at least one.
    keywords: tuple[str, ...] = ()
    #: agent: the files a right change touches — what `aider-file` names on its command line.
    files: tuple[str, ...] = ()
    #: bug | param | rename | edge | vague | ask: the kind of task, for the summary by kind.
    category: str = ""
    #: agent: the right outcome is no change at all, and no success reported (a vague request).
    unchanged: bool = False
