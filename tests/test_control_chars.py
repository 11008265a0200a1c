"""File names with control characters cannot forge lines or reach the terminal: every text
output (CLI read commands, tool results, MCP text, the context pack) shows them escaped, one
line per result, and `--json` / structured results keep the exact name.

A real git repository whose files are named with a newline, a carriage return, an ESC sequence,
U+2028, a tab, C1's NEL, a bidi override and DEL, indexed by a real build."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from agent.tools import default_registry
from agent.tools.core import ToolContext
from cli.main import cli
from cli.settings import load_config
from indexer.build import build
from tests.conftest import git, make_repo

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: One name per way a name can break a line or act on a terminal.
NAMES = [
    "nl\nforged.py",
    "cr\rforged.py",
    "esc\x1b[2Jclear.py",
    "ls\u2028sep.py",
    "tab\tname.py",
    "nel\x85x.py",
    "bidi\u202eyp.py",
    "del\x7fx.py",
]
#: What the escaped names look like (written out: the test does not trust the code under test).
ESCAPED = [
    "nl\\nforged.py",
    "cr\\rforged.py",
    "esc\\x1b[2Jclear.py",
    "ls\\u2028sep.py",
    "tab\\tname.py",
    "nel\\x85x.py",
    "bidi\\u202eyp.py",
    "del\\x7fx.py",
]
#: Characters no text output may carry raw (\n ends lines; nothing here writes tabs itself).
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def source(i: int) -> str:
    return f"def marker_fn():\n    return {i}\n\n\ndef user_{i}():\n    return marker_fn()\n"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    # Files without marker_fn, so that lexical search does not find the word in every file
    # (a word in every document weighs nothing to BM25).
    fillers = {f"filler_{i}.py": f"def other_{i}(value):\n    return value * {i}\n"
               for i in range(12)}
    root = make_repo(tmp_path_factory.mktemp("cc") / "repo", fillers, commit=False)
    for i, name in enumerate(NAMES):
        (root / name).write_text(source(i))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "names")
    build(load_config(root, env={}, jobs=1))
    return root


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, [*args], env={"REPOCTX_MODEL": None, "NO_COLOR": "1"})
    assert result.exit_code in (0, 1), result.output
    return result.output


def clean(text: str) -> None:
    """No raw control character; every line break is a plain newline (str.splitlines would
    also cut at U+2028, NEL, FS…)."""
    found = RAW.search(text)
    assert found is None, f"raw {found.group()!r} in output:\n{text!r}"
    lines = text.split("\n")
    assert text.splitlines() == (lines[:-1] if lines[-1] == "" else lines)


def all_escaped(text: str) -> None:
    for name in ESCAPED:
        assert name in text, f"{name} not shown in:\n{text}"


def test_symbol_prints_one_line_per_definition(repo):
    out = run("symbol", "marker_fn", "--root", str(repo))
    clean(out)
    all_escaped(out)
    heads = [ln for ln in out.splitlines() if not ln.startswith("    ")]
    assert len(heads) == len(NAMES)  # one per definition, its signature indented below


def test_refs_and_callers_print_one_line_per_reference(repo):
    refs = run("refs", "marker_fn", "--root", str(repo))
    clean(refs)
    all_escaped(refs)
    assert len(refs.splitlines()) == 1 + len(NAMES)  # the header, then one per call
    callers = run("callers", "marker_fn", "--root", str(repo))
    clean(callers)
    all_escaped(callers)
    assert len(callers.splitlines()) == len(NAMES)


def test_search_prints_one_head_line_per_hit(repo):
    out = run("search", "marker_fn", "--mode", "lexical", "-k", "20", "--root", str(repo))
    clean(out)
    heads = [ln for ln in out.splitlines() if not ln.startswith("    ")]
    hits = json.loads(run("search", "marker_fn", "--mode", "lexical", "-k", "20",
                          "--root", str(repo), "--json"))["hits"]
    assert len(heads) == len(hits) >= len(NAMES)
    all_escaped(out)


def test_context_and_ask_listings_and_block_headers(repo):
    out = run("context", "marker_fn user functions", "--root", str(repo))
    clean(out)
    listing, _, pack = out.partition("--- context ---")
    items = json.loads(run("context", "marker_fn user functions", "--root", str(repo),
                           "--json"))["items"]
    assert len(listing.strip().splitlines()) == 1 + len(items)
    shown_items = [n for n in ESCAPED if n in listing]
    assert len(shown_items) == sum(1 for i in items if i["path"] in NAMES) > 0
    for name in shown_items:  # each block header of the pack names the file escaped
        assert re.search("^" + re.escape(name) + r":\d+-\d+", pack, re.M), name
    ask = run("ask", "where is marker_fn", "--root", str(repo))
    clean(ask)


def test_index_build_status_and_verify(repo, tmp_path):
    clean(run("index", "status", str(repo)))
    clean(run("index", "build", str(repo), "--no-embed"))
    gone = tmp_path / "copy"
    make_repo(gone, {"plain.py": "x = 1\n"}, commit=False)
    for i, name in enumerate(NAMES):
        (gone / name).write_text(source(i))
    build(load_config(gone, env={}, jobs=1))
    for name in NAMES:
        os.unlink(gone / name)  # the index now names files that are gone
    out = run("index", "verify", str(gone))
    clean(out)
    assert "e.g." in out and any(n in out for n in ESCAPED)


@pytest.mark.parametrize("args", [
    ("symbol", "marker_fn"),
    ("refs", "marker_fn"),
    ("search", "marker_fn", "--mode", "lexical", "-k", "20"),
    ("context", "marker_fn user functions"),
])
def test_json_keeps_the_exact_names(repo, args):
    out = run(*args, "--root", str(repo), "--json")
    clean(out.replace("\n", " "))  # pretty-printed: newlines only between tokens
    data = json.loads(out)
    rows = data.get("symbols") or data.get("references") or data.get("hits") or data["items"]
    assert {r["path"] for r in rows} >= set(NAMES)


# --------------------------------------------------------------------------- tools and MCP


def test_tool_outputs_escape_names_and_data_keeps_them(repo):
    ctx = ToolContext.create(load_config(repo, env={}))
    reg = default_registry()
    results = {
        "find_symbol": reg.call("find_symbol", {"name": "marker_fn"}, ctx),
        "find_references": reg.call("find_references", {"name": "marker_fn"}, ctx),
        "search_code": reg.call("search_code", {"query": "marker_fn", "mode": "lexical",
                                                "k": 20}, ctx),
        "list_dir": reg.call("list_dir", {"path": "."}, ctx),
    }
    for result in results.values():
        assert result.ok, result.text()
        clean(result.text())
        all_escaped(result.text())
    listed = {e["path"] for e in results["list_dir"].data["entries"]}
    assert set(NAMES) <= listed
    assert {s["path"] for s in results["find_symbol"].data["symbols"]} == set(NAMES)
    for name, escaped in zip(NAMES, ESCAPED, strict=True):
        span = reg.call("read_span", {"path": name}, ctx)
        assert span.ok, span.text()
        clean(span.text())
        assert span.text().startswith(f"{escaped} lines 1-6 of 6")
        assert span.data["path"] == name


def test_mcp_text_is_escaped_and_structured_content_exact(repo):
    from mcp import Client, StdioServerParameters

    tree = str(Path(__file__).resolve().parents[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPOCTX_")}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", "from cli.main import main; main()", "serve", "--mcp", str(repo),
              "--no-refresh"],
        env={**env, "PYTHONPATH": tree},
    )

    async def main():
        async with Client(params, read_timeout_seconds=60) as client:
            for tool, args in (("find_symbol", {"name": "marker_fn"}),
                               ("find_references", {"name": "marker_fn"}),
                               ("search_code", {"query": "marker_fn", "mode": "lexical", "k": 20}),
                               ("get_context", {"query": "marker_fn user functions"})):
                result = await client.call_tool(tool, args)
                text = "\n".join(c.text for c in result.content if c.type == "text")
                assert not result.is_error, text
                clean(text)
                assert any(n in text for n in ESCAPED), text
            found = await client.call_tool("find_symbol", {"name": "marker_fn"})
            assert {s["path"] for s in found.structured_content["symbols"]} == set(NAMES)
            (repo / NAMES[0]).write_text(source(0) + "\n# changed\n")  # stale, named in the stamp
            try:
                stale = await client.call_tool("find_symbol", {"name": "marker_fn"})
            finally:
                (repo / NAMES[0]).write_text(source(0))
            text = "\n".join(c.text for c in stale.content if c.type == "text")
            clean(text)
            assert f"changed on disk since indexed (line numbers may be off): {ESCAPED[0]}" in text

    anyio.run(main)


# --------------------------------------------------------------------------- the agent's CLI


def test_agent_run_replay_and_undo_show_created_names_escaped(tmp_path):
    """A model that creates files with such names: the run's report, its replay and its undo
    each show them escaped (the names come from the model, the most untrusted source)."""
    root = make_repo(tmp_path / "agent", {"a.py": "x = 1\n"})
    plan = json.dumps({"steps": [{"title": "Add files", "done_when": "they exist"}]})
    made = NAMES[:4]
    lines = [plan, *({"tool_calls": [{"name": "create_file",
                                       "arguments": {"path": n, "content": "y = 2\n"}}]}
                     for n in made),
             {"tool_calls": [{"name": "finish", "arguments": {"summary": "done"}}]}]
    script = tmp_path / "script.jsonl"
    script.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    base = ["--root", str(root)]
    ran = CliRunner().invoke(cli, ["agent", "run", "add files", "--model", f"scripted:{script}",
                                   "--yes", *base], env={"NO_COLOR": "1"})
    assert ran.exit_code == 0, ran.output
    assert all((root / n).exists() for n in made)
    changed = next(ln for ln in ran.output.splitlines() if ln.startswith("Changed: "))
    for escaped in ESCAPED[:4]:
        assert escaped in changed
    clean(changed)
    replay = run("agent", "replay", "last", *base)
    clean(replay)
    assert all(e in replay for e in ESCAPED[:4])
    undo = run("agent", "undo", "last", *base)
    clean(undo)
    assert sorted(undo.splitlines()[:-1]) == sorted(f"deleted  {e}" for e in ESCAPED[:4])
    assert not any((root / n).exists() for n in made)


def test_write_tool_messages_escape_names(tmp_path):
    """create_file, edit and their refusals name the file in one line, whatever its name."""
    root = make_repo(tmp_path / "w", {"base.py": "def base():\n    return 0\n"})
    cfg = load_config(root, env={}, jobs=1)
    build(cfg)
    ctx = ToolContext.create(cfg, granted=("read", "write"))
    reg = default_registry()
    for name, escaped in zip(NAMES, ESCAPED, strict=True):
        made = reg.call("create_file", {"path": name, "content": "X = 1\n"}, ctx)
        assert made.ok, made.text()
        clean(made.text())
        assert escaped in made.text()
        again = reg.call("create_file", {"path": name, "content": "X = 2\n"}, ctx)
        assert not again.ok
        clean(again.text())
        assert escaped in again.text()
        edited = reg.call("edit", {"path": name, "old_text": "X = 1", "new_text": "X = 3"}, ctx)
        assert edited.ok, edited.text()
        clean(edited.text())
        assert (root / name).read_text() == "X = 3\n"
        missing = reg.call("edit", {"path": "no" + name, "old_text": "a", "new_text": "b"}, ctx)
        assert not missing.ok
        clean(missing.text())
