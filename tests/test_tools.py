"""Agent tools on real repositories: real git, real index builds, real pytest runs through the
runner, real checkpoints."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest

from agent.models.base import ToolCall, ToolSpec
from agent.tools import ToolContext, default_registry
from cli.settings import load_config
from indexer.build import build
from tests.conftest import git, make_repo

# Autoloading every plugin installed next to pytest costs ~2 s per run; the fixture suites
# need none.
TOML = """
[agent]
test_env = { PYTEST_DISABLE_PLUGIN_AUTOLOAD = "1" }
"""

FILES = {
    ".repoctx.toml": TOML,
    ".env": "API_TOKEN=do-not-leak\n",
    "pkg/__init__.py": "",
    "pkg/calc.py": '''
        """Arithmetic helpers."""


        def add(a, b):
            """Sum of two numbers."""
            return a - b


        class Meter:
            def reading(self):
                return add(1, 2)
        ''',
    "pkg/geometry.py": """
        def area(w, h):
            return w * h
        """,
    "pkg/use.py": """
        from pkg.calc import add as plus
        from pkg.calc import add


        def total(xs):
            return add(xs[0], xs[1]) + plus(0, 0)
        """,
    "pkg/notes.py": """
        HELP = "call add to sum two numbers"
        """,
    "tests/test_calc.py": """
        from pkg.calc import add
        from pkg.use import total


        def test_add():
            assert add(1, 2) == 3


        def test_total():
            assert total([2, 3]) == 5
        """,
    "tests/test_geometry.py": """
        from pkg.geometry import area


        def test_area():
            assert area(2, 3) == 6
        """,
}

ALL = frozenset({"read", "write", "execute"})


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", FILES)


def make_ctx(root: Path, granted=ALL, **kw) -> ToolContext:
    cfg = load_config(root, env={}, jobs=1, **kw)
    build(cfg, embed=kw.get("embed_model") is not None)
    return ToolContext.create(cfg, granted=granted, run_id="t1")


@pytest.fixture
def ctx(repo: Path) -> ToolContext:
    c = make_ctx(repo)
    yield c
    c.session.close()


@pytest.fixture
def reg():
    return default_registry()


def snapshot(root: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in (".git", ".repoctx")]
        for name in filenames:
            p = Path(dirpath) / name
            out[p.relative_to(root).as_posix()] = p.read_bytes()
    return out


# -- registry -------------------------------------------------------------------------------------


def test_specs_cover_every_tool_with_object_schemas(reg):
    specs = reg.specs()
    assert all(isinstance(s, ToolSpec) for s in specs)
    assert {s.name for s in specs} == {
        "search_code",
        "find_symbol",
        "find_references",
        "read_span",
        "list_dir",
        "edit",
        "create_file",
        "rename_symbol",
        "run_tests",
        "run_command",
        "git_diff",
        "finish",
    }
    assert all(s.parameters["type"] == "object" and s.description for s in specs)
    assert {s.name for s in reg.specs(["read"])} == {
        "search_code",
        "find_symbol",
        "find_references",
        "read_span",
        "list_dir",
        "git_diff",
        "finish",
    }


# -- the planted bug: structured failures, then a fix and the right selection ---------------------


def test_fixing_a_planted_bug_selects_the_reaching_tests_and_they_pass(ctx, reg):
    before = reg.call("run_tests", {"scope": "full"}, ctx)
    assert before.ok and before.data["passed"] is False
    failures = {f["test_id"]: f for f in before.data["runs"][0]["failures"]}
    assert set(failures) == {"tests/test_calc.py::test_add", "tests/test_calc.py::test_total"}
    assert failures["tests/test_calc.py::test_add"]["location"] == "tests/test_calc.py:6"
    assert "assert -1 == 3" in failures["tests/test_calc.py::test_add"]["message"]
    assert "test_add" in failures["tests/test_calc.py::test_add"]["trace"]

    fixed = reg.call(
        "edit",
        {"path": "pkg/calc.py", "old_text": "return a - b", "new_text": "return a + b"},
        ctx,
    )
    assert fixed.ok, fixed.error
    result = reg.call("run_tests", {}, ctx)
    assert result.ok, result.error
    assert result.data["changed_symbols"] == ["pkg.calc.add"]
    # test_geometry never reaches add: the selection must leave it out.
    assert result.data["selected"] == [
        "tests/test_calc.py::test_add",
        "tests/test_calc.py::test_total",
    ]
    assert result.data["total_tests"] == 3
    selected, full = result.data["runs"]
    assert (selected["scope"], selected["passed"], selected["failed"]) == ("selected", 2, 0)
    assert (full["scope"], full["passed"], full["failed"]) == ("full", 3, 0)
    assert result.data["passed"] is True
    json.dumps([before.data, fixed.data, result.data])  # data is plain JSON for programs


def test_selection_follows_the_graph_through_callers(ctx, reg):
    edit = reg.call(
        "edit", {"path": "pkg/use.py", "old_text": "plus(0, 0)", "new_text": "plus(0, 1) - 1"}, ctx
    )
    assert edit.ok, edit.error
    result = reg.call("run_tests", {"scope": "selected"}, ctx)
    assert result.data["changed_symbols"] == ["pkg.use.total"]
    assert result.data["selected"] == ["tests/test_calc.py::test_total"]
    assert [r["scope"] for r in result.data["runs"]] == ["selected"]


# -- rename ---------------------------------------------------------------------------------------


def test_rename_across_files_keeps_the_suite_green(ctx, reg, repo):
    reg.call("edit", {"path": "pkg/calc.py", "old_text": "a - b", "new_text": "a + b"}, ctx)
    result = reg.call("rename_symbol", {"symbol": "pkg.calc.add", "new_name": "sum_two"}, ctx)
    assert result.ok, result.error
    assert result.data["verified"] is True
    assert set(result.data["files"]) == {"pkg/calc.py", "pkg/use.py", "tests/test_calc.py"}
    use = (repo / "pkg/use.py").read_text()
    assert "from pkg.calc import sum_two as plus" in use  # the alias is kept
    assert "return sum_two(xs[0], xs[1]) + plus(0, 0)" in use
    # A use the graph cannot see (a string) is left alone, and named.
    assert result.data["unlinked_mentions"] == [
        'pkg/notes.py:1: HELP = "call add to sum two numbers"'
    ]
    assert "def sum_two(a, b):" in (repo / "pkg/calc.py").read_text()
    assert "return sum_two(1, 2)" in (repo / "pkg/calc.py").read_text()
    assert reg.call("find_symbol", {"name": "sum_two"}, ctx).data["symbols"][0]["path"] == (
        "pkg/calc.py"
    )
    assert reg.call("find_symbol", {"name": "add"}, ctx).data["symbols"] == []
    tests = reg.call("run_tests", {"scope": "full"}, ctx)
    assert tests.data["passed"] is True, tests.output


def test_rename_refuses_ambiguous_names_and_bad_identifiers(repo, reg):
    (repo / "pkg/geometry.py").write_text("def add(x):\n    return x\n")
    ctx = make_ctx(repo)
    amb = reg.call("rename_symbol", {"symbol": "add", "new_name": "plus2"}, ctx)
    assert not amb.ok and set(amb.data["candidates"]) == {"pkg.calc.add", "pkg.geometry.add"}
    bad = reg.call("rename_symbol", {"symbol": "pkg.calc.add", "new_name": "class"}, ctx)
    assert not bad.ok and "not a valid identifier" in bad.error
    clash = reg.call("rename_symbol", {"symbol": "pkg.calc.add", "new_name": "Meter"}, ctx)
    assert not clash.ok and "already exists" in clash.error


# -- syntax gate ----------------------------------------------------------------------------------


def test_an_edit_that_breaks_syntax_is_rejected_with_its_location(ctx, reg, repo):
    original = (repo / "pkg/calc.py").read_bytes()
    result = reg.call(
        "edit",
        {"path": "pkg/calc.py", "old_text": "return a - b", "new_text": "return (a + b"},
        ctx,
    )
    assert not result.ok and result.data["written"] is False
    assert "syntax error at pkg/calc.py:" in result.error
    assert all(e["path"] == "pkg/calc.py" for e in result.data["syntax_errors"])
    assert result.data["syntax_errors"][0]["line"] in (4, 5, 6)
    assert (repo / "pkg/calc.py").read_bytes() == original

    made = reg.call("create_file", {"path": "pkg/new.py", "content": "def f(:\n    pass\n"}, ctx)
    assert not made.ok and "pkg/new.py:1:" in made.error
    assert not (repo / "pkg/new.py").exists()


def test_existing_errors_elsewhere_do_not_block_an_edit(repo, reg):
    (repo / "pkg/geometry.py").write_text("def area(w, h):\n    return w * h\n\ndef broken(:\n")
    ctx = make_ctx(repo)
    result = reg.call(
        "edit", {"path": "pkg/geometry.py", "old_text": "w * h", "new_text": "h * w"}, ctx
    )
    assert result.ok, result.error


# -- checkpoints ----------------------------------------------------------------------------------


def test_rollback_restores_every_byte(ctx, reg, repo):
    (repo / "crlf.txt").write_bytes(b"one\r\ntwo\r\nno newline at end")
    before = snapshot(repo)
    assert reg.call(
        "edit", {"path": "crlf.txt", "old_text": "one\ntwo", "new_text": "uno\ndos"}, ctx
    ).ok
    assert (repo / "crlf.txt").read_bytes() == b"uno\r\ndos\r\nno newline at end"
    step1 = dataclasses.replace(ctx, step=1)
    assert reg.call("create_file", {"path": "new/deep/mod.py", "content": "X = 1\n"}, step1).ok
    step2 = dataclasses.replace(ctx, step=2)
    assert reg.call("rename_symbol", {"symbol": "pkg.calc.add", "new_name": "plus2"}, step2).ok
    assert snapshot(repo) != before

    report = ctx.checkpoints.rollback_run(ctx.run_id)
    assert report.steps == (2, 1, 0)
    assert snapshot(repo) == before
    assert not (repo / "new").exists()


def test_write_tools_refuse_without_a_checkpoint_store(repo, reg):
    ctx = dataclasses.replace(make_ctx(repo), checkpoints=None)
    result = reg.call("create_file", {"path": "x.py", "content": "X = 1\n"}, ctx)
    assert not result.ok and "checkpoint" in result.error.lower()
    assert not (repo / "x.py").exists()


# -- read-your-writes -----------------------------------------------------------------------------


def test_search_and_find_symbol_see_an_edit_at_once(ctx, reg):
    assert reg.call("find_symbol", {"name": "triple_value"}, ctx).data["symbols"] == []
    result = reg.call(
        "edit",
        {
            "path": "pkg/geometry.py",
            "old_text": "    return w * h\n",
            "new_text": "    return w * h\n\n\ndef triple_value(x):\n    return 3 * x\n",
        },
        ctx,
    )
    assert result.ok and result.data["reindexed"] is True
    found = reg.call("find_symbol", {"name": "triple_value"}, ctx).data["symbols"]
    assert [(s["path"], s["start_line"]) for s in found] == [("pkg/geometry.py", 5)]
    hits = reg.call("search_code", {"query": "triple_value", "mode": "lexical"}, ctx)
    assert hits.data["hits"][0]["path"] == "pkg/geometry.py"
    assert "def triple_value(x):" in hits.output


def test_vectors_follow_an_edit(repo, reg):
    ctx = make_ctx(repo, embed_model="hashing")
    result = reg.call(
        "create_file",
        {"path": "pkg/zebra.py", "content": "def zebra_stripes_count(zebra):\n    return 7\n"},
        ctx,
    )
    assert result.ok and "vectors" in result.output
    hits = reg.call("search_code", {"query": "zebra stripes count", "mode": "semantic"}, ctx)
    assert hits.ok and hits.data["hits"][0]["path"] == "pkg/zebra.py"


def test_search_code_tells_the_model_why_results_may_be_lacking(repo, reg):
    """The vector table deleted under the index: hybrid search answers from the lexical index
    and exact symbols, and the model is told so, as the CLI tells its user (before: the
    SearchResult's warning was dropped)."""
    ctx = make_ctx(repo, embed_model="hashing")
    try:
        shutil.rmtree(ctx.config.index_path / "vectors.lance")
        result = reg.call("search_code", {"query": "sum of two numbers"}, ctx)
    finally:
        ctx.session.close()
    assert result.ok and "pkg/calc.py" in {h["path"] for h in result.data["hits"]}, result
    (warning,) = result.data["warnings"]
    assert "missing" in warning and "repoctx index build" in warning
    assert f"Note: {warning}" in result.output


# -- edit matching --------------------------------------------------------------------------------


def test_edit_without_a_match_shows_the_nearest_text(ctx, reg):
    result = reg.call(
        "edit",
        {
            "path": "pkg/calc.py",
            "old_text": 'def add(a,b):\n    """Sum of two numbers"""',
            "new_text": "x",
        },
        ctx,
    )
    assert not result.ok and result.data["match_count"] == 0
    assert result.data["nearest"]["start_line"] == 4
    assert "    4| def add(a, b):" in result.output


def test_edit_with_several_matches_names_them(ctx, reg, repo):
    result = reg.call(
        "edit",
        {
            "path": "pkg/use.py",
            "old_text": "from pkg.calc import add",
            "new_text": "from pkg.calc import add as add",
        },
        ctx,
    )
    assert not result.ok and result.data["lines"] == [1, 2]
    assert "replace_all" in result.error
    again = reg.call(
        "edit",
        {
            "path": "pkg/use.py",
            "old_text": "plus(0, 0)",
            "new_text": "plus(0, 0)",
            "replace_all": True,
        },
        ctx,
    )
    assert not again.ok and "the same" in again.error


# -- hostile input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "args", "needle"),
    [
        ("read_span", {"path": 5}, "`path` must be a string"),
        ("read_span", {"path": "a", "start_line": "3"}, "`start_line` must be an integer"),
        ("read_span", {"path": "a", "start_line": True}, "`start_line` must be an integer"),
        ("read_span", {"path": "a", "start_line": 0}, "at least 1"),
        ("read_span", {"path": "a", "lines": 3}, "unknown argument `lines`"),
        ("edit", {"path": "pkg/calc.py"}, "missing required argument `old_text`"),
        ("search_code", {"query": "x", "mode": "fuzzy"}, "must be one of"),
        ("run_command", {"command": ["ls", 3]}, "`command[1]` must be a string"),
    ],
)
def test_wrong_arguments_are_explained(ctx, reg, name, args, needle):
    result = reg.call(name, args, ctx)
    assert not result.ok and result.data["bad_arguments"]
    assert needle in result.error


def test_null_optional_arguments_mean_not_given(ctx, reg):
    # Models send `"lang": null` for "no filter"; the defaults then apply (mode hybrid, k 10).
    args = {"query": "Sum of two numbers", "lang": None, "path_glob": None, "k": None, "mode": None}
    result = reg.call("search_code", args, ctx)
    assert result.ok, result.error
    assert "pkg/calc.py" in result.output
    read = reg.call("read_span", {"path": "pkg/calc.py", "start_line": None}, ctx)
    assert read.ok and "def add" in read.output


def test_null_required_and_unknown_arguments_are_still_errors(ctx, reg):
    missing = reg.call("read_span", {"path": None}, ctx)
    assert not missing.ok
    # The type is named once: not "got null None".
    assert "argument `path` must be a string, got null." in missing.error
    unknown = reg.call("search_code", {"query": "add", "language": None}, ctx)
    assert not unknown.ok and "unknown argument `language`" in unknown.error
    wrong = reg.call("search_code", {"query": "add", "k": "5"}, ctx)
    assert not wrong.ok and "argument `k` must be an integer, got string '5'" in wrong.error


def test_malformed_json_and_unknown_tools_are_results_not_exceptions(ctx, reg):
    bad = reg.call_tool(ToolCall.from_raw("c1", "read_span", '{"path": '), ctx)
    assert not bad.ok and "not valid JSON" in bad.error and '{"path": "..."}' in bad.error
    not_obj = reg.call_tool(ToolCall.from_raw("c2", "read_span", "[1, 2]"), ctx)
    assert not not_obj.ok and "JSON object" in not_obj.error
    unknown = reg.call("read_file", {"path": "x"}, ctx)
    assert not unknown.ok and "Unknown tool `read_file`" in unknown.error
    assert "read_span" in unknown.error


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("read_span", {"path": "../outside.txt"}),
        ("read_span", {"path": "pkg/../../outside.txt"}),
        ("list_dir", {"path": ".."}),
        ("edit", {"path": "../outside.txt", "old_text": "secret", "new_text": "x"}),
        ("create_file", {"path": "../evil.py", "content": "X = 1\n"}),
        ("read_span", {"path": "link_out.txt"}),
        ("edit", {"path": "link_out.txt", "old_text": "secret", "new_text": "x"}),
        ("create_file", {"path": "link_dir/evil.py", "content": "X = 1\n"}),
        ("read_span", {"path": ".env"}),
        ("edit", {"path": ".env", "old_text": "API", "new_text": "X"}),
        ("read_span", {"path": "env_link"}),
        ("create_file", {"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\n"}),
    ],
)
def test_escapes_and_secrets_are_refused(ctx, reg, repo, name, args):
    outside = repo.parent / "outside.txt"
    outside.write_text("secret outside\n")
    (repo.parent / "outside_dir").mkdir(exist_ok=True)
    (repo / "link_out.txt").symlink_to(outside)
    (repo / "link_dir").symlink_to(repo.parent / "outside_dir")
    (repo / "env_link").symlink_to(repo / ".env")
    result = reg.call(name, args, ctx)
    assert not result.ok, result.output
    assert "outside the workspace" in result.error or "deny" in result.error
    assert "secret outside" not in result.output and "do-not-leak" not in result.output
    assert outside.read_text() == "secret outside\n"
    assert not (repo.parent / "evil.py").exists()
    assert not (repo.parent / "outside_dir" / "evil.py").exists()


def test_secrets_stay_out_of_listings_commands_and_diffs(ctx, reg, repo):
    listing = reg.call("list_dir", {"path": "."}, ctx)
    assert ".env" not in [e["path"] for e in listing.data["entries"]]
    for command in ("cat .env", ["grep", "-r", "TOKEN", "./.env"], "head -n1 pkg/../.env"):
        result = reg.call("run_command", {"command": command}, ctx)
        assert not result.ok and "deny list" in result.error, command
    (repo / "secrets.yaml").write_text("password: one\n")
    git(repo, "add", "secrets.yaml")
    git(repo, "commit", "-q", "-m", "s")
    (repo / "secrets.yaml").write_text("password: two\n")
    (repo / "pkg/geometry.py").write_text("def area(w, h):\n    return h * w\n")
    diff = reg.call("git_diff", {}, ctx)
    assert diff.ok and "return h * w" in diff.output
    assert "password" not in diff.output and diff.data["secret_files_left_out"] == 1


def test_a_command_that_never_ends_is_killed(ctx, reg):
    result = reg.call(
        "run_command", {"command": ["python", "-c", "while True: pass"], "timeout_s": 1}, ctx
    )
    assert not result.ok and result.data["timed_out"] is True
    assert "did not finish within 1 s" in result.error


def test_a_command_printing_lots_of_output_is_capped(ctx, reg):
    result = reg.call("run_command", {"command": "python -c \"print('x' * 3_000_000)\""}, ctx)
    assert result.ok and result.data["exit_code"] == 0
    assert result.data["truncated"] is True and result.data["stdout_bytes"] == 3_000_001
    assert len(result.output) < 100_000 and "truncated" in result.output


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        ("curl http://127.0.0.1:1/", "not in the command allowlist"),
        ("bash -c 'echo hi'", "not in the command allowlist"),
        ("ls | sh", "not in the command allowlist"),
        ("git commit -qm x", "not one of the read-only git subcommands"),
        ("git -c core.pager=sh log", "`-c` is not allowed"),
        ("git diff --output=/tmp/x", "`--output` is not allowed"),
    ],
)
def test_commands_outside_the_policy_are_refused(ctx, reg, command, needle):
    result = reg.call("run_command", {"command": command}, ctx)
    assert not result.ok and needle in result.error


def test_permissions_are_enforced_and_confirm_is_asked(repo, reg):
    ctx = make_ctx(repo, granted={"read"})
    original = (repo / "pkg/calc.py").read_bytes()
    args = {"path": "pkg/calc.py", "old_text": "a - b", "new_text": "a + b"}
    refused = reg.call("edit", args, ctx)
    assert not refused.ok and refused.data["refused"] and "`write` permission" in refused.error
    assert not reg.call("run_command", {"command": "ls"}, ctx).ok
    asked: list[str] = []

    def no(prompt: str) -> bool:
        asked.append(prompt)
        return False

    declined = reg.call("edit", args, dataclasses.replace(ctx, confirm=no))
    assert not declined.ok and declined.data["declined"]
    assert asked == ["edit (write): edit pkg/calc.py (1 line(s) replaced)"]
    assert (repo / "pkg/calc.py").read_bytes() == original
    approved = reg.call("edit", args, dataclasses.replace(ctx, confirm=lambda _: True))
    assert approved.ok
    assert reg.call("read_span", {"path": "pkg/calc.py"}, ctx).ok  # read needs no asking


def test_read_span_is_bounded_and_numbered(ctx, reg, repo):
    (repo / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 1001)))
    result = reg.call("read_span", {"path": "long.txt", "start_line": 10}, ctx)
    assert result.ok and result.data["end_line"] == 209 and result.data["truncated"]
    assert result.output.splitlines()[1] == " 10| line 10"
    assert "start_line=210" in result.output
    past = reg.call("read_span", {"path": "long.txt", "start_line": 5000}, ctx)
    assert not past.ok and "past the end" in past.error


def test_finish_reports_the_summary(ctx, reg):
    result = reg.call("finish", {"summary": "Fixed add."}, ctx)
    assert result.ok and result.data == {
        "finished": True,
        "status": "done",
        "summary": "Fixed add.",
    }
