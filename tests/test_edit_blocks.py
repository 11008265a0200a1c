"""SEARCH/REPLACE edit blocks (issue 39, item 1): every shape small models write is read; blocks
run as `edit`/`create_file` calls through a real registry on a real git repository (gate,
workspace, checkpoints, undo, trace); blocks that do not match or cannot be placed get
corrections quoting the file's real lines; the agent loop applies a reply made only of blocks.
Also item 6's call corrections: the model's own call quoted back, no example value to copy."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from agent.budget import Limits
from agent.checkpoints import CheckpointStore
from agent.edit_blocks import (
    EditBlock,
    EditBlockError,
    WorkspaceFiles,
    block_calls,
    parse_edit_blocks,
    scan_edit_blocks,
)
from agent.edit_matching import definitions, find_definition
from agent.loop import RunOptions, run_agent, undo_run
from agent.models import ScriptedModel
from agent.models.base import ToolCall
from agent.models.text_calls import CALL_EXAMPLE, parse_text_calls
from agent.tools import ToolContext, default_registry
from agent.trace import read_trace, trace_path
from cli.settings import load_config
from indexer.build import build
from tests.conftest import make_repo

TOML = """
[agent]
test_env = { PYTEST_DISABLE_PLUGIN_AUTOLOAD = "1" }
"""

CART = """\
\"\"\"A shopping cart.\"\"\"


class Cart:
    def __init__(self):
        self.items = []

    def add(self, price, qty=1):
        self.items.append((price, qty))

    def total(self):
        return sum(price for price, qty in self.items)


def empty():
    return Cart()
"""

FILES = {
    ".repoctx.toml": TOML,
    ".env": "API_TOKEN=do-not-leak\n",
    "shop/__init__.py": "",
    "shop/cart.py": CART,
    "shop/discount.py": "def rate(code):\n    if code == 'HALF':\n        return 0.5\n    return 0.0\n",
    "shop/twins.py": "def one():\n    return 0.0\n\n\ndef two():\n    return 0.0\n",
    "tests/test_cart.py": (
        "from shop.cart import Cart\n\n\ndef test_total():\n    c = Cart()\n"
        "    c.add(2, qty=3)\n    assert c.total() == 6\n"
    ),
}

ALL = frozenset({"read", "write", "execute"})

FIX_SEARCH = "        return sum(price for price, qty in self.items)\n"
FIX_REPLACE = "        return sum(price * qty for price, qty in self.items)\n"
FIXED = CART.replace(FIX_SEARCH, FIX_REPLACE)


def block(body_search: str = FIX_SEARCH, body_replace: str = FIX_REPLACE, n: int = 7) -> str:
    return f"{'<' * n} SEARCH\n{body_search}{'=' * n}\n{body_replace}{'>' * n} REPLACE\n"


# -- reading every shape -------------------------------------------------------------------------

S, R = "x = 1\n", "x = 2\n"
BLOCK = block(S, R)
BLOCK_Y = block("y = 1\n", "y = 2\n")
BLOCK_YZ = block("y\n", "z\n")
SHAPES: dict[str, tuple[str, list[EditBlock]]] = {
    "bare file line": (f"shop/a.py\n{BLOCK}", [EditBlock("shop/a.py", S, R)]),
    "backticks": (f"`shop/a.py`\n{BLOCK}", [EditBlock("shop/a.py", S, R)]),
    "heading": (f"### shop/a.py\n\n{BLOCK}", [EditBlock("shop/a.py", S, R)]),
    "File: label": (f"File: shop/a.py\n{BLOCK}", [EditBlock("shop/a.py", S, R)]),
    "bold with colon": (f"**shop/a.py**:\n{BLOCK}", [EditBlock("shop/a.py", S, R)]),
    "first line in the fence": (
        f"Here is the change.\n\n```python\nshop/a.py\n{BLOCK}```\n",
        [EditBlock("shop/a.py", S, R)],
    ),
    "comment in the fence": (
        f"```python\n# shop/a.py\n{BLOCK}```\n",
        [EditBlock("shop/a.py", S, R)],
    ),
    "file line before the fence": (
        f"shop/a.py\n```python\n{BLOCK}```\n",
        [EditBlock("shop/a.py", S, R)],
    ),
    "path in the fence's info": (
        f"```python shop/a.py\n{BLOCK}```\n",
        [EditBlock("shop/a.py", S, R)],
    ),
    "path after the language and a colon": (
        f"```python:shop/a.py\n{BLOCK}```\n",
        [EditBlock("shop/a.py", S, R)],
    ),
    "fences inside the block": (
        "shop/a.py\n<<<<<<< SEARCH\n```python\nx = 1\n```\n=======\n```python\nx = 2\n```\n"
        ">>>>>>> REPLACE\n",
        [EditBlock("shop/a.py", S, R)],
    ),
    "backticked path in a short sentence": (
        f"Change `shop/a.py` like this:\n```python\n{BLOCK}```\n",
        [EditBlock("shop/a.py", S, R)],
    ),
    "a short lead-in ending with the path": (
        f"In shop/a.py:\n```python\n{BLOCK}```\n",
        [EditBlock("shop/a.py", S, R)],
    ),
    "no file line, fenced": (
        f"I fixed it:\n```python\n{BLOCK}```\n",
        [EditBlock(None, S, R)],
    ),
    "no file line, bare reply": (BLOCK, [EditBlock(None, S, R)]),
    "CRLF": (f"shop/a.py\r\n{BLOCK}".replace("\n", "\r\n"), [EditBlock("shop/a.py", S, R)]),
    "5 and 9 marker characters, spaces, lowercase": (
        "shop/a.py\n<<<<< search  \nx = 1\n=========   \nx = 2\n>>>>>>>>> replace \n",
        [EditBlock("shop/a.py", S, R)],
    ),
    "several blocks under one file line": (
        f"shop/a.py\n```python\n{BLOCK}{BLOCK_Y}```\n",
        [EditBlock("shop/a.py", S, R), EditBlock("shop/a.py", "y = 1\n", "y = 2\n")],
    ),
    "two files": (
        f"shop/a.py\n```python\n{BLOCK}```\n\nshop/b.py\n```python\n{BLOCK_YZ}```",
        [EditBlock("shop/a.py", S, R), EditBlock("shop/b.py", "y\n", "z\n")],
    ),
    "a new fence is not the same file": (
        f"shop/a.py\n```python\n{BLOCK}```\nAnd:\n```python\n{BLOCK_YZ}```",
        [EditBlock("shop/a.py", S, R), EditBlock(None, "y\n", "z\n")],
    ),
    "empty SEARCH (a new file)": (
        "shop/new.py\n<<<<<<< SEARCH\n=======\nA = 1\n>>>>>>> REPLACE\n",
        [EditBlock("shop/new.py", "", "A = 1\n")],
    ),
    "empty REPLACE (a deletion)": (
        "shop/a.py\n<<<<<<< SEARCH\nx = 1\n=======\n>>>>>>> REPLACE\n",
        [EditBlock("shop/a.py", S, "")],
    ),
    "ORIGINAL/UPDATED": (
        "shop/a.py\n<<<<<<< ORIGINAL\nx = 1\n=======\nx = 2\n>>>>>>> UPDATED\n",
        [EditBlock("shop/a.py", S, R)],
    ),
    "indented markers, blank line inside": (
        "shop/a.py\n  <<<<<<< SEARCH\nx = 1\n\ny\n  =======\nx = 2\n  >>>>>>> REPLACE\n",
        [EditBlock("shop/a.py", "x = 1\n\ny\n", R)],
    ),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_shape_small_models_write_is_read(shape: str) -> None:
    text, expected = SHAPES[shape]
    assert parse_edit_blocks(text) == expected
    # The reply's prose stays; the blocks and their file lines are gone from it.
    rest = scan_edit_blocks(text).rest
    assert "SEARCH" not in rest.upper() and "x = 1" not in rest and "shop/a.py\n" not in rest


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("shop/a.py\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n", "no `>>>>>>> REPLACE`"),
        ("shop/a.py\n<<<<<<< SEARCH\nx = 1\nx = 2\n", "no `=======`"),
        # a block that never ends, before another that does
        (
            "<<<<<<< SEARCH\nx\n=======\n" + BLOCK_YZ,
            "no `>>>>>>> REPLACE`",
        ),
    ],
)
def test_a_block_cut_short_is_an_error_not_dropped(text: str, why: str) -> None:
    good = "shop/ok.py\n" + block("a\n", "b\n") + "\n"
    with pytest.raises(EditBlockError) as caught:
        parse_edit_blocks(good + text)
    assert why in str(caught.value) and "Block 2" in str(caught.value)
    assert caught.value.blocks == [EditBlock("shop/ok.py", "a\n", "b\n")]
    scanned = scan_edit_blocks(good + text)
    assert scanned.blocks == caught.value.blocks and len(scanned.problems) == 1


# -- applied through a real registry -------------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", FILES)


@pytest.fixture
def ctx(repo: Path):
    cfg = load_config(repo, env={}, jobs=1)
    build(cfg)
    c = ToolContext.create(cfg, granted=ALL, run_id="blocks1")
    yield c
    c.session.close()


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and ".git" not in p.parts and ".repoctx" not in p.parts
    }


def apply(reply: str, ctx: ToolContext, known: tuple[str, ...] = (), step: int = 1):
    files = WorkspaceFiles(ctx)
    calls, corrections = block_calls(
        parse_edit_blocks(reply), known, files.read, repo_paths=files.paths, step=step
    )
    reg, here = default_registry(), dataclasses.replace(ctx, step=step)
    return [reg.call_tool(c, here) for c in calls], calls, corrections


def test_blocks_become_edits_that_checkpoint_and_roll_back_byte_for_byte(repo, ctx) -> None:
    before = snapshot(repo)
    half = block("    if code == 'HALF':\n", "    if code in ('HALF', 'half'):\n")
    reply = (
        "The total ignores the quantity.\n\n"
        f"shop/cart.py\n```python\n{block()}```\n\n"
        # no file line: placed in the one file whose text holds the SEARCH text
        f"And the codes:\n```python\n{half}```\n"
        # an empty SEARCH: a new file, then an append to an existing one
        "shop/new_mod.py\n<<<<<<< SEARCH\n=======\nNEW = 1\n>>>>>>> REPLACE\n"
        "shop/cart.py\n<<<<<<< SEARCH\n=======\n\n\nFULL = 100\n>>>>>>> REPLACE\n"
    )
    results, calls, corrections = apply(reply, ctx)
    assert corrections == []
    assert [c.name for c in calls] == ["edit", "edit", "create_file", "edit"]
    assert [c.arguments["path"] for c in calls] == [
        "shop/cart.py",
        "shop/discount.py",
        "shop/new_mod.py",
        "shop/cart.py",
    ]
    assert all(r.ok for r in results), [r.error for r in results]
    # An empty SEARCH on an existing file appends (Aider's behaviour).
    assert (repo / "shop/cart.py").read_text() == FIXED + "\n\nFULL = 100\n"
    assert "('HALF', 'half')" in (repo / "shop/discount.py").read_text()
    assert (repo / "shop/new_mod.py").read_text() == "NEW = 1\n"
    store = ctx.checkpoints
    assert isinstance(store, CheckpointStore)
    report = store.rollback_run(ctx.run_id)
    assert report.steps == (1,)
    assert snapshot(repo) == before


@pytest.mark.parametrize(
    ("file_text", "search", "replace", "expected"),
    [
        # trailing spaces in the file the model did not copy
        (
            "def f():\n    x = 1   \n    return x\n",
            "    x = 1\n    return x\n",
            "    x = 2\n    return x\n",
            "def f():\n    x = 2\n    return x\n",
        ),
        # SEARCH written without the method's indentation: REPLACE is re-indented
        (
            CART,
            "def total(self):\n    return sum(price for price, qty in self.items)\n",
            "def total(self):\n    return sum(price * qty for price, qty in self.items)\n",
            FIXED,
        ),
        # SEARCH indented deeper than the file
        (
            "def g():\n    return 1\n",
            "        def g():\n            return 1\n",
            "        def g():\n            return 2\n",
            "def g():\n    return 2\n",
        ),
        # one line written without its indentation, REPLACE of two lines: both indented
        (
            "def f():\n    x = 1\n    return x\n",
            "x = 1\n",
            "x = 1\ny = 2\n",
            "def f():\n    x = 1\n    y = 2\n    return x\n",
        ),
        # lines copied from read_span with their numbers
        (
            "def f():\n    x = 1\n    return x\n",
            "  2|     x = 1\n  3|     return x\n",
            "  2|     x = 2\n  3|     return x\n",
            "def f():\n    x = 2\n    return x\n",
        ),
        # a CRLF file, blocks written with LF
        ("a = 1\r\nb = 2\r\n", "b = 2\n", "b = 3\n", "a = 1\r\nb = 3\r\n"),
        # the last line of a file without a final newline
        ("a = 1\nb = 2", "b = 2\n", "b = 3\n", "a = 1\nb = 3"),
    ],
)
def test_loose_whitespace_resolves_to_the_files_exact_text(
    repo, ctx, file_text: str, search: str, replace: str, expected: str
) -> None:
    (repo / "shop/loose.py").write_bytes(file_text.encode())
    results, calls, corrections = apply(f"shop/loose.py\n{block(search, replace)}", ctx)
    assert corrections == []
    old = calls[0].arguments["old_text"]
    assert file_text.count(old) == 1  # the edit tool replaces exact text, found once
    assert results[0].ok, results[0].error
    assert (repo / "shop/loose.py").read_bytes() == expected.encode()


def test_a_search_not_found_gets_the_nearest_real_lines(repo, ctx) -> None:
    before = snapshot(repo)
    wrong = "    def total(self):\n        return sum(p for p, q in self.items)\n"
    reply = (
        "shop/discount.py\n" + block("x\n", "y\n") + "\nshop/cart.py\n" + block(wrong, FIX_REPLACE)
    )
    results, calls, corrections = apply(reply, ctx)
    assert calls == [] and results == []
    assert "The SEARCH text of block 1 was not found in shop/discount.py" in corrections[0]
    second = corrections[1]
    assert second.startswith("The SEARCH text of block 2 was not found in shop/cart.py")
    assert "nearest lines of shop/cart.py are 11-12" in second
    assert FIX_SEARCH in second and "Copy them exactly into SEARCH" in second
    assert snapshot(repo) == before


def test_ambiguous_and_unplaceable_blocks_get_corrections_and_change_nothing(repo, ctx) -> None:
    before = snapshot(repo)
    zero = block("    return 0.0\n", "    return 1.0\n")
    reply = (
        # in two files, no file line
        f"{zero}\nThen:\n"
        # in no file
        + block("nowhere_at_all()\n", "x\n")
        + "\nAnd:\n"
        # twice in the named file
        + f"shop/twins.py\n{zero}\nLast:\n"
        # an empty SEARCH with no file name
        + "<<<<<<< SEARCH\n=======\nX = 1\n>>>>>>> REPLACE\n"
    )
    results, calls, corrections = apply(reply, ctx, known=("shop/cart.py",))
    assert calls == [] and len(corrections) == 4
    assert "in more than one place" in corrections[0]
    assert "shop/discount.py" in corrections[0] and "shop/twins.py 2 times" in corrections[0]
    assert "no file of the repository holds its SEARCH text" in corrections[1]
    assert "occurs 2 times in shop/twins.py (lines 2, 6)" in corrections[2]
    assert "empty SEARCH and no file name" in corrections[3]
    assert snapshot(repo) == before


def test_a_file_named_by_its_ending_is_the_repositorys_file(repo, ctx) -> None:
    results, calls, corrections = apply(f"cart.py\n{block()}", ctx)
    assert corrections == [] and calls[0].arguments["path"] == "shop/cart.py"
    assert results[0].ok and (repo / "shop/cart.py").read_text() == FIXED


def test_blocks_go_through_the_gate_outside_denied_and_unpermitted(repo, ctx, tmp_path) -> None:
    before = snapshot(repo)
    secret = block("API_TOKEN=do-not-leak\n", "API_TOKEN=x\n")
    reply = (
        "../outside.py\n<<<<<<< SEARCH\n=======\nX = 1\n>>>>>>> REPLACE\n\n"
        f".env\n{secret}\n"
        ".git/hooks/pre-commit\n<<<<<<< SEARCH\n=======\nrm -rf /\n>>>>>>> REPLACE\n\n"
        "shop/cart.py\n<<<<<<< SEARCH\n    def total(self):\n=======\n    def total(self)\n"
        ">>>>>>> REPLACE\n"
    )
    results, calls, corrections = apply(reply, ctx)
    assert [c.name for c in calls] == ["create_file", "edit", "create_file", "edit"]
    assert not any(r.ok for r in results)
    assert "outside" in results[0].error.lower()
    assert ".env" in results[1].error and "do-not-leak" not in results[1].text()
    assert results[3].data.get("written") is False  # the syntax gate, as for a model's `edit`
    assert not (tmp_path / "outside.py").exists()
    assert snapshot(repo) == before
    # A run that grants no write permission refuses a block as it refuses `edit`.
    read_only = dataclasses.replace(ctx, granted=frozenset({"read"}))
    results, _, _ = apply(f"shop/cart.py\n{block()}", read_only)
    assert not results[0].ok and results[0].data.get("refused") is True
    assert snapshot(repo) == before


# -- the loop ------------------------------------------------------------------------------------

PLAN = json.dumps({"steps": [{"title": "Fix total", "done_when": "tests pass"}]})


def call(tool: str, **args: Any) -> dict:
    return {"tool_calls": [{"name": tool, "arguments": args}]}


def run(root: Path, script: list, tool_format: str = "auto"):
    model = ScriptedModel(script)
    options = RunOptions(
        limits=Limits(), granted=ALL, sleep=lambda s: None, tool_format=tool_format
    )
    cfg = load_config(root, env={}, jobs=1)
    return model, run_agent(cfg, "Fix Cart.total in shop/cart.py: it ignores qty", model, options)


@pytest.mark.parametrize("tool_format", ["native", "text"])
def test_the_loop_applies_a_reply_made_only_of_blocks(repo: Path, tool_format: str) -> None:
    before = snapshot(repo)
    finish = (
        call("finish", summary="Fixed total.")
        if tool_format == "native"
        else '<tool_call>{"name": "finish", "arguments": {"summary": "Fixed total."}}</tool_call>'
    )
    script = [PLAN, f"Fixed:\n\nshop/cart.py\n```python\n{block()}```\n", finish]
    model, report = run(repo, script, tool_format)
    assert (report.status, report.reason) == ("done", "finished")
    assert (repo / "shop/cart.py").read_text() == FIXED
    assert [c.path for c in report.changed] == ["shop/cart.py"]
    trace = read_trace(trace_path(load_config(repo, env={}, jobs=1).index_path, report.run_id))
    edits = [e for e in trace if e["type"] == "tool_call" and e["name"] == "edit"]
    assert len(edits) == 1 and edits[0]["ok"] and edits[0]["id"] == "block-1-1"
    assert json.loads(edits[0]["arguments"])["old_text"] == FIX_SEARCH
    assert any(e["type"] == "checkpoint" and e["step"] == 1 for e in trace)
    assert any(e["type"] == "notice" and e.get("kind") == "edit_blocks" for e in trace)
    # The model is told each block's result, as text.
    told = "\n".join(m.content for m in model.calls[2].messages)
    assert "SEARCH/REPLACE block 1 (shop/cart.py): Edited shop/cart.py" in told
    undo_run(load_config(repo, env={}, jobs=1), report.run_id)
    assert snapshot(repo) == before


def test_blocks_run_before_the_replys_tool_calls(repo: Path) -> None:
    reply = {
        "content": f"shop/cart.py\n{block()}",
        "tool_calls": [{"name": "run_tests", "arguments": {}}],
    }
    script = [PLAN, reply, call("finish", summary="Fixed total.")]
    model, report = run(repo, script)
    assert report.status == "done"
    trace = read_trace(trace_path(load_config(repo, env={}, jobs=1).index_path, report.run_id))
    names = [e["name"] for e in trace if e["type"] == "tool_call"]
    assert names[:2] == ["edit", "run_tests"]
    assert report.tests and report.tests[0].passed is True  # the tests saw the edit


def test_a_block_that_does_not_match_is_corrected_in_the_loop(repo: Path) -> None:
    wrong = "        return sum(p for p in self.items)\n"
    script = [
        PLAN,
        f"shop/cart.py\n{block(wrong, FIX_REPLACE)}",
        f"shop/cart.py\n{block()}",
        call("finish", summary="Fixed total."),
    ]
    model, report = run(repo, script)
    assert report.status == "done" and (repo / "shop/cart.py").read_text() == FIXED
    told = "\n".join(m.content for m in model.calls[2].messages)
    assert "The SEARCH text of block 1 was not found in shop/cart.py" in told
    assert FIX_SEARCH.strip() in told


# -- item 6: corrections quote the model's own call ----------------------------------------------


def test_a_malformed_call_is_quoted_back_clipped_and_no_example_value_is_offered() -> None:
    own = '{"name": "read_span", "arguments": {"path": "shop/cart.py", "start_line": 3,}}'
    parsed = parse_text_calls(f"<tool_call>{own}</tool_call>", names={"read_span"})
    assert "You wrote: " + own[:40] in parsed.malformed
    long = '{"name": "edit", "arguments": {"path": "shop/cart.py", "old_text": "' + "x" * 400
    parsed = parse_text_calls(f"<tool_call>{long}</tool_call>", names={"edit"})
    wrote = parsed.malformed.split("You wrote: ", 1)[1]
    assert "…" in wrote and "x" * 400 not in wrote
    # The call form names no real tool and no path a model could take for a value.
    assert "read_span" not in CALL_EXAMPLE and ".py" not in CALL_EXAMPLE
    assert "TOOL_NAME" in CALL_EXAMPLE and "the form only" in CALL_EXAMPLE


def test_a_block_failing_when_run_is_told_in_the_words_of_blocks(repo: Path) -> None:
    # Block 1 is refused by the syntax gate when it runs; block 2 was matched against the file
    # as block 1 would have left it, so its edit finds nothing.
    broken = "    def total(self)\n"
    script = [
        PLAN,
        "shop/cart.py\n"
        + block("    def total(self):\n", broken)
        + "\nshop/cart.py\n"
        + block(broken, "    def total(self, rate=1):\n"),
        call("finish", summary="Gave up.", status="blocked"),
    ]
    model, report = run(repo, script)
    assert (repo / "shop/cart.py").read_text() == CART
    told = "\n".join(m.content for m in model.calls[2].messages)
    assert "SEARCH/REPLACE block 1 (shop/cart.py): Error: Rejected" in told
    assert "SEARCH/REPLACE block 2 (shop/cart.py): Error: SEARCH text was not found" in told
    assert "old_text" not in told.split("SEARCH/REPLACE block 1", 1)[1]


# -- blocks without their SEARCH line, as Qwen2.5-Coder 1.5B writes them --------------------------

# Recorded from Qwen2.5-Coder-1.5B (llama.cpp, temperature 0) asked, with the pipeline's system
# prompt, to fix CART ("total ignores the quantity") and to add a `discount` parameter.
QWEN_FIX = (
    "```\nshop/cart.py\n=======\ndef total(self):\n"
    "    return sum(price * qty for price, qty in self.items)\n```"
)
QWEN_PARAM = (
    "```\n/shop/cart.py\n=======\ndef total(self, discount=0.0):\n"
    "    return sum(price * (1 - discount) for price, qty in self.items)\n>>>>>>> REPLACE\n```"
)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (QWEN_FIX, FIXED),
        (
            QWEN_PARAM,
            CART.replace(
                "    def total(self):\n" + FIX_SEARCH,
                "    def total(self, discount=0.0):\n"
                "        return sum(price * (1 - discount) for price, qty in self.items)\n",
            ),
        ),
    ],
)
def test_a_block_without_search_rewrites_the_definition_it_names(repo, ctx, reply, expected):
    blocks = parse_edit_blocks(reply)
    assert len(blocks) == 1 and blocks[0].kind == "definitions" and blocks[0].path == "shop/cart.py"
    results, calls, corrections = apply(reply, ctx)
    assert corrections == [] and all(r.ok for r in results), [r.error for r in results]
    assert (repo / "shop/cart.py").read_text() == expected


def test_redefinitions_several_decorated_or_unplaceable(repo, ctx) -> None:
    (repo / "shop/deco.py").write_text(
        "import functools\n\n\n@functools.cache\ndef f(\n    a,\n):\n    return a\n\n\n"
        "def g():\n    return 1\n"
    )
    # No file line: placed in the file that defines `f` once.
    two = (
        "```python\n=======\n@functools.lru_cache\ndef f(a):\n    return a + 1\n\n"
        "def g():\n    return 2\n>>>>>>> REPLACE\n```"
    )
    results, calls, corrections = apply(two, ctx, known=("shop/cart.py", "shop/deco.py"))
    assert corrections == [] and [c.id for c in calls] == ["block-1-1", "block-1-1.1"]
    assert all(r.ok for r in results), [r.error for r in results]
    assert (repo / "shop/deco.py").read_text() == (
        "import functools\n\n\n@functools.lru_cache\ndef f(a):\n    return a + 1\n\n\n"
        "def g():\n    return 2\n"
    )
    # A name defined twice, a name defined nowhere, and prose: corrections, nothing changed.
    replies = [
        "shop/twins.py\n=======\ndef one():\n    return 1\n>>>>>>> REPLACE\n",
        "shop/cart.py\n=======\ndef nothing_like_it():\n    return 1\n>>>>>>> REPLACE\n",
        "shop/cart.py\n=======\nx = 1\n>>>>>>> REPLACE\n",
    ]
    (repo / "shop/twins.py").write_text("def one():\n    return 0\n\n\ndef one():\n    return 0\n")
    before = snapshot(repo)
    whys = ["defines `one` 2 times (lines 1, 5)", "nowhere", "no `<<<<<<< SEARCH` part"]
    for reply, why in zip(replies, whys, strict=True):
        results, calls, corrections = apply(reply, ctx)
        assert calls == [] and why in corrections[0], corrections
    assert snapshot(repo) == before


@pytest.mark.parametrize(
    "text",
    [
        "Title\n=======\n\nSome prose.\n",  # a heading's underline
        "```rst\nTitle\n=======\n\nText.\n```\n",  # the same in a fence
        "```python\nx = 1\n=======\n```\n",  # a bare divider in code, no path, no end marker
    ],
)
def test_a_divider_in_prose_or_code_is_no_block(text: str) -> None:
    assert scan_edit_blocks(text).blocks == [] and scan_edit_blocks(text).problems == []


def test_arguments_that_cannot_be_read_are_quoted_back(ctx) -> None:
    broken = ToolCall.from_raw("c1", "read_span", '{"path": "shop/cart.py", "start_line": 3,')
    result = default_registry().call_tool(broken, ctx)
    assert not result.ok and "Could not read the arguments of `read_span`" in result.error
    assert 'you sent: {"path": "shop/cart.py", "start_line": 3,)' in result.error


def test_what_counts_as_definitions_to_rewrite() -> None:
    assert [
        n for n, _ in definitions("@x\ndef f(\n    a,\n):\n    pass\n\ndef g(): return 1\n")
    ] == [
        "f",
        "g",
    ]
    # a statement after the definition, or code that is no definition: not a rewrite
    assert definitions("def f():\n    pass\nprint(1)\n") == []
    assert definitions("x = 1\ndef f():\n    pass\n") == []
    # a one-line definition ends on its own line, not at the next header
    one = find_definition(
        "def f(): return 1\n\n\ndef g():\n    return 2\n", "f", "def f():\n    return 5\n"
    )
    assert one.old == "def f(): return 1\n" and one.new == "def f():\n    return 5\n"


# -- a file written out whole, as Qwen2.5-Coder 1.5B also answers -----------------------------------

DISCOUNT = "shop/discount.py"
# Recorded from Qwen2.5-Coder-1.5B (llama.cpp, temperature 0), the pipeline's system prompt and
# the task "rate('NOPE') raises KeyError, it should return 0.0" over this file.
DISCOUNT_TEXT = (
    '"""Discount codes."""\n\nCODES = {"HALF": 0.5, "TENTH": 0.1}\n\n\ndef rate(code):\n'
    '    """The fraction taken off for a discount code (0 for an unknown one)."""\n'
    "    return CODES[code]\n\n\ndef apply(total, code):\n    return total - total * rate(code)\n"
)
QWEN_WHOLE = (
    "```\nshop/discount.py\n```python\n"
    + DISCOUNT_TEXT.replace(
        "    return CODES[code]\n",
        "    if code not in CODES:\n        return 0.0\n    return CODES[code]\n",
    )
    + "```"
)


def test_a_file_written_out_whole_becomes_one_exact_edit(repo, ctx) -> None:
    (repo / DISCOUNT).write_text(DISCOUNT_TEXT)
    blocks = parse_edit_blocks(QWEN_WHOLE)
    assert [(b.path, b.kind) for b in blocks] == [(DISCOUNT, "file")]
    results, calls, corrections = apply(QWEN_WHOLE, ctx)
    assert corrections == [] and [c.name for c in calls] == ["edit"]
    assert calls[0].arguments["old_text"].count("\n") == 1  # only the changed place, exactly
    assert results[0].ok, results[0].error
    assert (repo / DISCOUNT).read_text() == QWEN_WHOLE.split("```python\n")[1].rstrip("`")


@pytest.mark.parametrize(
    ("content", "told"),
    [
        # unchanged: shown, not an edit
        (DISCOUNT_TEXT, None),
        # code shown under the path that is no version of the file: not an edit either
        ("total = apply(10, 'HALF')\nprint(total)\n", None),
        # meant as the file, but with the rest left out: refused with a correction
        (
            DISCOUNT_TEXT.replace(
                "def apply(total, code):\n    return total - total * rate(code)\n",
                "# ... rest unchanged\n",
            ),
            "leaves part of the file out",
        ),
        (
            DISCOUNT_TEXT.replace(
                "\n\ndef apply(total, code):\n    return total - total * rate(code)\n", ""
            ),
            "leaves out `apply`",
        ),
    ],
)
def test_code_under_a_path_that_is_no_safe_rewrite_changes_nothing(repo, ctx, content, told):
    (repo / DISCOUNT).write_text(DISCOUNT_TEXT)
    before = snapshot(repo)
    results, calls, corrections = apply(f"In {DISCOUNT}:\n```python\n{content}```\n", ctx)
    assert calls == [] and snapshot(repo) == before
    assert (corrections == []) if told is None else (told in corrections[0])


def test_a_call_in_a_fence_after_a_path_is_still_a_call(repo: Path) -> None:
    read = '```json\n{"name": "read_span", "arguments": {"path": "shop/cart.py"}}\n```'
    script = [PLAN, f"Let me look at shop/cart.py:\n{read}", call("finish", summary="Read it.")]
    model, report = run(repo, script, "text")
    trace = read_trace(trace_path(load_config(repo, env={}, jobs=1).index_path, report.run_id))
    assert [e["name"] for e in trace if e["type"] == "tool_call"][0] == "read_span"


def test_a_definition_quoted_as_it_is_is_no_edit(repo, ctx) -> None:
    quoted = "In shop/cart.py:\n```python\n    def total(self):\n" + FIX_SEARCH + "```\n"
    headless = (
        "shop/cart.py\n=======\ndef total(self):\n    " + FIX_SEARCH.strip() + "\n>>>>>>> REPLACE\n"
    )
    for reply in (quoted, headless):
        results, calls, corrections = apply(reply, ctx)
        assert (calls, corrections) == ([], [])
    assert (repo / "shop/cart.py").read_text() == CART


# Recorded from Qwen2.5-Coder-1.5B: "add discount=0.0 to Cart.total and make checkout pass
# rate(code)", shown shop/cart.py and shop/checkout.py. Two blocks without SEARCH in one fence:
# a definition, then the second file written out whole.
CHECKOUT = (
    "from shop.cart import Cart\nfrom shop.discount import rate\n\n\n"
    "def checkout(cart, code):\n    return round(cart.total(), 2)\n"
)
QWEN_TWO_FILES = (
    "```\nshop/cart.py\n=======\ndef total(self, discount=0.0):\n"
    "    return sum(price * qty for price, qty in self.items) * (1 - discount)\n"
    ">>>>>>> REPLACE\n\nshop/checkout.py\n=======\n"
    + CHECKOUT.replace("round(cart.total(), 2)", "round(cart.total(), 2) * (1 - rate(code))")
    + "```"
)


def test_two_blocks_without_search_in_one_fence(repo, ctx) -> None:
    (repo / "shop/checkout.py").write_text(CHECKOUT)
    blocks = parse_edit_blocks(QWEN_TWO_FILES)
    assert [(b.path, b.search) for b in blocks] == [("shop/cart.py", ""), ("shop/checkout.py", "")]
    results, calls, corrections = apply(QWEN_TWO_FILES, ctx)
    assert corrections == [] and all(r.ok for r in results), [r.error for r in results]
    assert "def total(self, discount=0.0):" in (repo / "shop/cart.py").read_text()
    assert "* (1 - rate(code))" in (repo / "shop/checkout.py").read_text()
    assert calls[1].arguments["old_text"] == "    return round(cart.total(), 2)\n"


@pytest.mark.parametrize("suffix", [":4-6", ":12", "#L3", "#L3-L9", ":4:2"])
def test_create_file_refuses_a_path_ending_in_a_line_location(tmp_path: Path, suffix: str) -> None:
    # The live 1.5B created `pkg/calc.py:4-6` with create_file: a citation copied into a path.
    from agent.tools import ToolContext, default_registry
    from cli.settings import load_config

    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    ctx = ToolContext.create(load_config(root, env={}, jobs=1), granted={"read", "write"})
    result = default_registry().call(
        "create_file", {"path": f"pkg/calc.py{suffix}", "content": "x = 1\n"}, ctx
    )
    assert not result.ok and "line location" in (result.error or "")
    assert sorted(p.name for p in (root / "pkg").iterdir()) == ["calc.py"]
