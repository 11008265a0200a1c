"""Lua: tags query, hooks (LDoc comments, upper-case constants, `require` module names) and
cross-file resolution through `require`."""

from __future__ import annotations

import pytest

from indexer.parse.parser import parse_source
from tests.lang_graph import graph_of, resolved
from tests.test_languages import FIXTURES, check_def, defn, imports, parse, refs


@pytest.fixture(scope="module")
def pf():
    return parse("lua")


def test_definitions(pf) -> None:
    assert pf.doc == "Inventory of stocked items, kept per shop."  # the first comment only
    check_def(pf, "MAX_ITEMS", "constant", 10, "local MAX_ITEMS = 500", "Most items one inventory holds.")
    check_def(
        pf,
        "DEFAULT_CURRENCY",
        "constant",
        13,
        'DEFAULT_CURRENCY = "EUR"',
        "Default currency of new inventories.",
    )
    check_def(
        pf,
        "price_of",
        "function",
        16,
        "local function price_of(item)",
        "Price of one item, with its discount applied.",
    )
    check_def(pf, "Inventory", "namespace", 21, "local Inventory = {}")
    # function T.f() / T:m() stand outside the table's node: bare qualnames
    check_def(
        pf,
        "new",
        "function",
        26,
        "function Inventory.new(name)",
        "Creates an empty inventory for a shop.\n@param name the shop name",
    )
    check_def(
        pf,
        "add",
        "method",
        34,
        "function Inventory:add(item)",
        "Adds an item unless the inventory is full.",
    )
    check_def(pf, "touch", "method", 53, "function Inventory:touch()")
    check_def(
        pf,
        "format_price",
        "function",
        63,
        "local format_price = function(cents)",
        "Formats cents as a price string.",
    )
    # lower-case top-level variables are variables, not constants
    check_def(
        pf, "Perishable", "variable", 67, "local Perishable = setmetatable({}, { __index = Inventory })"
    )
    check_def(pf, "expired", "method", 77, "function Perishable:expired(item, now)")
    check_def(pf, "handlers", "namespace", 82, "local handlers = {", "Handlers keyed by event name.")
    check_def(pf, "handlers.added", "function", 83, "added = function(inv, item)")
    check_def(pf, "handlers.removed", "function", 86, "removed = function(inv, item)")
    check_def(pf, "report", "function", 91, "function report(inv)")
    assert defn(pf, "handlers.added").parent == pf.definitions.index(defn(pf, "handlers"))
    # one definition per function, and `local x = require(...)` binds an import only
    assert [d.qualname for d in pf.definitions].count("format_price") == 1
    assert not [d for d in pf.definitions if d.name in ("util", "json", "log")]
    # locals inside functions are not definitions
    assert not [d for d in pf.definitions if d.name in ("self", "sum", "discount")]


def test_references(pf) -> None:
    assert refs(pf, "trim", "call") == [(28, "util", "new")]
    assert refs(pf, "round", "call") == [(18, "util", "price_of")]
    assert refs(pf, "warn", "call") == [(36, "log", "add")]
    assert refs(pf, "touch", "call") == [(40, "self", "add"), (87, "inv", "handlers.removed")]
    assert refs(pf, "total", "call") == [(59, "self", "to_json"), (92, "inv", "report")]
    assert refs(pf, "price_of", "call") == [(48, "", "total"), (84, "", "handlers.added")]
    assert refs(pf, "new", "call") == [(72, "Inventory", "new")]
    assert refs(pf, "format", "call") == [(64, "string", "format_price")]
    assert refs(pf, "added", "call") == [(93, "handlers", "report")]
    # setmetatable(T, { __index = Base })
    assert refs(pf, "Inventory", "inherit") == [(67, "", "Perishable")]
    assert not refs(pf, "require", "call")


def test_imports(pf) -> None:
    assert imports(pf) == {
        ("util", "", "util"),
        ("cjson", "", "json"),
        ("lib.log", "", "log"),
        ("compat", "", "compat"),
    }
    assert {r.name for r in pf.references if r.kind == "import"} == {"util", "json", "log", "compat"}


def test_module_table_file() -> None:
    util = parse_source("util.lua", (FIXTURES / "lua/util.lua").read_bytes(), "lua", "util")
    assert util.doc == "String and number helpers shared by the shop modules."
    check_def(util, "M", "namespace", 3, "local M = {}")
    check_def(util, "trim", "function", 6, "function M.trim(s)", "Removes leading and trailing whitespace.")
    check_def(util, "is_blank", "function", 24, "local function is_blank(s)")
    assert [(r.line, r.receiver) for r in util.references if r.name == "trim"] == [(19, "M"), (25, "M")]


def test_syntax_error_keeps_definitions_around_it() -> None:
    src = (
        "local function ok() return 1 end\n"
        "function broken()\n  local x = = 1\nend\n"
        "local M = {}\n"
        "function M.after() end\n"
    )
    pf = parse_source("broken.lua", src.encode(), "lua", "broken")
    assert pf.has_errors
    names = [d.qualname for d in pf.definitions]
    assert all(n in names for n in ("ok", "M", "after")), names


def test_module_names() -> None:
    from indexer.parse.lang_hooks import LUA

    assert LUA.module_name("lib/log.lua", frozenset()) == "lib.log"
    assert LUA.module_name("lib/log/init.lua", frozenset()) == "lib.log"
    assert LUA.module_name("lua/plugin/util.lua", frozenset()) == "plugin.util"
    assert LUA.module_name("init.lua", frozenset()) == "init"


FILES = {
    "inventory.lua": (FIXTURES / "lua/inventory.lua").read_text(),
    "util.lua": (FIXTURES / "lua/util.lua").read_text(),
    # require("lib.log") finds lib/log/init.lua
    "lib/log/init.lua": "local M = {}\n\nfunction M.warn(msg)\n  io.stderr:write(msg)\nend\n\n"
    "function M.info(msg)\n  print(msg)\nend\n\nreturn M\n",
}


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    yield from graph_of(tmp_path_factory, "lua", FILES)


@pytest.mark.parametrize(
    ("line", "name", "target", "how"),
    [
        (28, "trim", "util.trim", "import"),  # local util = require("util"); util.trim()
        (18, "round", "util.round", "import"),
        (36, "warn", "lib.log.warn", "import"),  # require("lib.log") -> lib/log/init.lua
        (48, "price_of", "inventory.price_of", "scope"),
        (93, "added", "inventory.handlers.added", "scope"),  # a function of a table namespace
        (92, "print", None, "builtin"),
        (59, "encode", None, "external"),  # cjson is not in the repository
    ],
)
def test_cross_file_resolution(graph, line, name, target, how) -> None:
    assert resolved(graph, "inventory.lua", line, name, "call") == (target, how)


def test_require_resolves_to_the_module(graph) -> None:
    row = graph.execute(
        "SELECT t.qualname, t.kind, r.resolution FROM refs r JOIN files f ON f.id = r.file_id "
        "JOIN symbols t ON t.id = r.target_id WHERE f.path = 'inventory.lua' AND r.kind = 'import' "
        "AND r.name = 'log'"
    ).fetchone()
    assert row == ("lib.log", "module", "import")
