"""The syntax gate (issue 13, defect 7): Python edits are judged by the interpreter's own
compiler — every SyntaxError subclass and the compiler's errors, at Python's line and column —
and rejected with the file untouched; valid edits pass; a file that was already broken can
still be edited; other languages keep tree-sitter."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from agent.tools import ToolContext, default_registry
from agent.tools.syntax import compile_error, describe_issues, introduced_issues
from cli.settings import load_config
from indexer.build import build
from tests.conftest import make_repo

CALC = '''\
"""Calculations."""


def compute(a, b):
    return a * b


def f(a):
    total = compute(a, 2)
    if total > 3:
        return total
    return [a,
            total]


async def fetch(client):
    return await client.get()
'''
FILES = {
    "pkg/__init__.py": "",
    "pkg/calc.py": CALC,
    "web/app.js": "function add(a, b) {\n  return a + b;\n}\n",
    "legacy/old.py": 'def show(x):\n    print "value", x\n\n\ndef twice(x):\n    return 2 * x\n',
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", FILES)


@pytest.fixture
def ctx(repo: Path) -> ToolContext:
    cfg = load_config(repo, env={}, jobs=1)
    build(cfg)
    c = ToolContext.create(cfg, granted={"read", "write"}, run_id="g1")
    yield c
    c.session.close()


def edit(ctx, path, old, new):
    return default_registry().call("edit", {"path": path, "old_text": old, "new_text": new}, ctx)


# Each of these was accepted by the tree-sitter gate; py_compile then failed.
MISSED = [
    pytest.param(
        "    if total > 3:\n",
        "      if total > 3:\n",
        (10, 6),  # Python's column: the last character of the indentation
        "IndentationError: unexpected indent",
        id="IndentationError",
    ),
    pytest.param(
        "    if total > 3:\n        return total\n",
        "    if total > 3:\n        return total\n\tif total > 9:\n            return 9\n",
        (12, 1),
        "TabError: inconsistent use of tabs and spaces in indentation",
        id="TabError",
    ),
    pytest.param(
        "def f(a):",
        "def f(a, a):",
        (8, 10),
        "SyntaxError: duplicate argument 'a' in function definition",
        id="duplicate-argument",
    ),
    pytest.param(
        "    total = compute(a, 2)\n",
        "    await = 3\n    total = compute(a, 2)\n",
        (9, 11),
        "SyntaxError: invalid syntax",
        id="await-assignment",
    ),
    pytest.param(
        "    return a * b\n",
        "    return a * b\n\n\nreturn None\n",
        (8, 1),
        "SyntaxError: 'return' outside function",
        id="return-outside-function",
    ),
    pytest.param(
        "    return await client.get()",
        "    return [await c for c in client]\n\n\ndef g(client):\n    await client.close()",
        (21, 5),
        "SyntaxError: 'await' outside async function",
        id="await-outside-async",
    ),
    pytest.param(
        # the bracket was opened on line 9; tree-sitter blamed line 8, the `def`
        "compute(a, 2)",
        "compute(a, 2",
        (9, 20),
        "SyntaxError: '(' was never closed",
        id="unclosed-parenthesis",
    ),
]


@pytest.mark.parametrize(("old", "new", "where", "message"), MISSED)
def test_each_missed_error_is_rejected_and_the_file_untouched(ctx, repo, old, new, where, message):
    before = (repo / "pkg/calc.py").read_bytes()
    result = edit(ctx, "pkg/calc.py", old, new)
    assert not result.ok and result.data["written"] is False
    line, column = where
    assert f"syntax error at pkg/calc.py:{line}:{column} ({message})" in result.error
    first = result.data["syntax_errors"][0]
    assert (first["line"], first["column"], first["message"]) == (line, column, message)
    # the report shows path:line:column, the line itself and a caret under the column
    report = result.output.splitlines()
    at = report.index(f"pkg/calc.py:{line}:{column}: {message}")
    new_text = before.decode().replace(old, new, 1)
    shown = new_text.splitlines()[line - 1]
    assert report[at + 1] == f"    {shown}"
    lead = "".join(c if c == "\t" else " " for c in shown[: column - 1])
    assert report[at + 2] == f"    {lead}^"
    assert (repo / "pkg/calc.py").read_bytes() == before


def test_a_new_file_that_does_not_compile_is_not_created(ctx, repo):
    made = default_registry().call(
        "create_file", {"path": "pkg/extra.py", "content": "def g(x, x):\n    return x\n"}, ctx
    )
    assert not made.ok and "pkg/extra.py:1:10" in made.error and "duplicate argument" in made.error
    assert not (repo / "pkg/extra.py").exists()


def test_valid_edits_still_pass(ctx, repo):
    assert edit(ctx, "pkg/calc.py", "return a * b", "return a * b  # product").ok
    modern = (
        "    match a:\n"
        "        case [x, *rest] if (n := len(rest)) > 1:\n"
        "            return f\"{x!r:>{n}}\"\n"
        "        case _:\n"
        "            pass\n"
        "    total = compute(a, 2)\n"
    )
    result = edit(ctx, "pkg/calc.py", "    total = compute(a, 2)\n", modern)
    assert result.ok, result.error
    assert "does not compile" not in result.output
    # a warning from the compiler is not an error, and the gate does not print it
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert edit(ctx, "pkg/calc.py", "return a * b  # product", 'return "\\d" * b').ok
    assert not [w for w in caught if "escape sequence" in str(w.message)]
    made = default_registry().call(
        "create_file", {"path": "pkg/fine.py", "content": "X = 1\n"}, ctx
    )
    assert made.ok, made.error
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compile((repo / "pkg/calc.py").read_bytes(), "calc.py", "exec", dont_inherit=True)


def test_the_text_is_compiled_never_run(ctx, repo, tmp_path):
    marker = tmp_path / "ran"
    content = f"open({str(marker)!r}, 'w').write('x')\nimport sys\nsys.exit(3)\n"
    made = default_registry().call("create_file", {"path": "pkg/side.py", "content": content}, ctx)
    assert made.ok, made.error
    assert not marker.exists()


def test_an_already_broken_file_can_still_be_edited(ctx, repo):
    # legacy/old.py is Python 2: it never compiled. An edit elsewhere passes and says so.
    result = edit(ctx, "legacy/old.py", "return 2 * x", "return x + x")
    assert result.ok, result.error
    assert "legacy/old.py still does not compile (2:5: SyntaxError: Missing parentheses" in (
        result.output
    )
    assert "return x + x" in (repo / "legacy/old.py").read_text()
    # an edit that fixes the error passes, and the file compiles
    fixed = edit(ctx, "legacy/old.py", 'print "value", x', 'print("value", x)')
    assert fixed.ok and "does not compile" not in fixed.output
    compile((repo / "legacy/old.py").read_bytes(), "old.py", "exec", dont_inherit=True)


def test_in_a_broken_file_a_new_error_in_the_edited_lines_is_still_rejected(ctx, repo):
    before = (repo / "legacy/old.py").read_bytes()
    unclosed = edit(ctx, "legacy/old.py", "def show(x):", "def show(x:")
    assert not unclosed.ok and "legacy/old.py:1:9 (SyntaxError: '(' was never closed)" in (
        unclosed.error
    )
    # Far from the edit the compiler cannot tell old errors from new: tree-sitter decides,
    # and the rejection says so.
    broken = edit(ctx, "legacy/old.py", "    return 2 * x\n", "    return 2 * x\n\n\ndef (:\n")
    assert not broken.ok
    assert "did not compile before this edit either" in broken.output
    assert "judged by tree-sitter" in broken.output
    assert (repo / "legacy/old.py").read_bytes() == before


def test_other_languages_keep_the_tree_sitter_gate(ctx, repo):
    bad = edit(ctx, "web/app.js", "return a + b;", "return (a + b;")
    assert not bad.ok and "web/app.js:2:" in bad.error
    assert edit(ctx, "web/app.js", "return a + b;", "return b + a;").ok


def test_columns_count_characters_and_the_caret_keeps_tabs():
    source = "é = 1\nx = 'ünïcode' + (\n".encode()
    issue = compile_error("m.py", source)
    assert issue is not None and (issue.line, issue.column) == (2, 17)
    assert issue.message == "SyntaxError: '(' was never closed"
    tabbed = b"if True:\n\tx = (1,\n\t     2\n"
    issues = introduced_issues("t.py", None, tabbed)
    shown = describe_issues("t.py", tabbed, issues).splitlines()
    assert shown[0] == "t.py:2:6: SyntaxError: '(' was never closed"
    assert shown[1:3] == ["    \tx = (1,", "    \t    ^"]


def test_nul_bytes_are_reported_where_they_are():
    issue = compile_error("n.py", b"x = 1\ny = 2\x00\n")
    assert issue is not None and issue.line == 2 and "null bytes" in issue.message


def test_a_script_without_a_suffix_is_checked_in_the_language_of_its_shebang(ctx, repo):
    made = default_registry().call(
        "create_file",
        {"path": "bin/tool", "content": "#!/usr/bin/env python3\ndef g(x, x):\n    return x\n"},
        ctx,
    )
    assert not made.ok and "bin/tool:2:" in made.error and "duplicate argument" in made.error
    assert not (repo / "bin/tool").exists()
    made = default_registry().call(
        "create_file", {"path": "bin/tool", "content": "#!/bin/sh\nrun() {\n  echo (\n}\n"}, ctx
    )
    assert not made.ok and "bin/tool:" in made.error
    good = "#!/usr/bin/env python3\ndef g(x, y):\n    return x\n"
    assert default_registry().call("create_file", {"path": "bin/tool", "content": good}, ctx).ok
    assert (repo / "bin/tool").read_text() == good
