# ruff: noqa: F811 - the `server` fixture is imported from tests/test_pipeline.py
"""The pipeline's last check when no test reaches a change through the code graph: the whole
test suite runs, so a change that breaks code the graph cannot link to the edit (a dynamic
import, a name looked up by string) is never called done — on the benchmark a deleted function
and a half-done rename were reported `done / untested`."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.pipeline import ATTEMPTS
from tests.conftest import make_repo
from tests.model_server import ModelServer
from tests.test_pipeline import TOML, block, reply, run, server  # noqa: F401 - fixture

FILES = {
    ".repoctx.toml": TOML,
    "pyproject.toml": '[tool.pytest.ini_options]\npythonpath = ["."]\n',
    "app/__init__.py": "",
    "app/handlers.py": '"""Request handlers, looked up by name."""\n\n\n'
    "def greet(name):\n    \"\"\"A greeting for ``name``.\"\"\"\n    return f'hello {name}'\n\n\n"
    "def legacy_greet(name):\n    return 'hi ' + name\n",
    "app/dispatch.py": "import importlib\n\n\ndef handle(kind, arg):\n"
    "    module = importlib.import_module('app.handlers')\n"
    "    return getattr(module, kind)(arg)\n",
    "tests/test_dispatch.py": "from app.dispatch import handle\n\n\n"
    "def test_greet():\n    assert handle('greet', 'ann') == 'hello ann'\n\n\n"
    "def test_legacy():\n    assert handle('legacy_greet', 'bo') == 'hi bo'\n",
}
TASK = "Clean up app/handlers.py: legacy_greet looks like dead code."
DELETE = block(
    "app/handlers.py",
    "def legacy_greet(name):\n    return 'hi ' + name\n",
    "",
    "Remove the dead code.",
)
DOCSTRING = block(
    "app/handlers.py",
    "def legacy_greet(name):\n    return 'hi ' + name\n",
    "def legacy_greet(name):\n    \"\"\"Kept for old clients.\"\"\"\n    return 'hi ' + name\n",
    "Document it.",
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", FILES)


def test_a_change_that_breaks_a_test_the_graph_cannot_link_is_not_done(
    repo: Path, server: ModelServer
) -> None:
    server.replies = [reply(DELETE) for _ in range(ATTEMPTS)]
    report = run(repo, server, TASK)
    assert report.status != "done", report.message
    assert report.reason == "tests_failing"
    # the whole suite ran and its failure was what the run went by
    assert any(not t.passed for t in report.tests)
    assert any("test_legacy" in " ".join(t.failures) for t in report.tests)


def test_a_change_the_whole_suite_passes_is_done_and_says_how_it_was_checked(
    repo: Path, server: ModelServer
) -> None:
    server.replies = [reply(DOCSTRING)]
    report = run(repo, server, TASK)
    assert (report.status, report.reason) == ("done", "tests_passed"), report.message
    assert "whole test suite passes" in report.message
    assert report.tests and report.tests[-1].passed
    assert '"""Kept for old clients."""' in (repo / "app/handlers.py").read_text()


@pytest.mark.parametrize(
    "question",
    [
        "The handlers feel slow sometimes. Can you look into it?",
        "Why does app/handlers.py keep legacy_greet?",
        "Is legacy_greet in app/handlers.py still used?",
    ],
)
def test_a_question_is_answered_and_its_suggested_blocks_are_not_applied(
    repo: Path, server: ModelServer, question: str
) -> None:
    # The vague benchmark task: the 1.5B model answered "look into it" by deleting a function.
    before = (repo / "app/handlers.py").read_bytes()
    server.replies = [reply(DELETE)]
    report = run(repo, server, question)
    assert (report.status, report.reason) == ("done", "answered"), report.message
    assert (repo / "app/handlers.py").read_bytes() == before
    assert not report.changed and "were not applied" in report.final
    # asked as a question: no edit form, no example exchange a small model would copy
    (request,) = server.chats
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert "SEARCH" not in request["messages"][0]["content"]
