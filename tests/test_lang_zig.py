"""Zig: the tags query and hooks on a fixture, a broken file, and a real index build where
`@import("item.zig")` resolves to the file beside it."""

from __future__ import annotations

import pytest

from indexer.parse.parser import parse_source
from tests.lang_graph import graph_of, resolved
from tests.test_languages import FIXTURES, check_def, defn, imports, parse, refs


@pytest.fixture(scope="module")
def pf():
    return parse("zig")


def test_definitions(pf) -> None:
    assert pf.doc == "Inventory of stocked items."
    check_def(pf, "max_items", "constant", 7, "pub const max_items: usize = 500;",
              "Most items one inventory holds.")
    check_def(pf, "Inventory", "struct", 10, "pub const Inventory = struct {",
              "Keeps the items of one shop.")
    check_def(pf, "Inventory.items", "field", 11, "items: std.ArrayList(Item)")
    check_def(pf, "Inventory.init", "method", 15,
              "pub fn init(alloc: std.mem.Allocator, name: []const u8) Inventory",
              "Creates an empty inventory.")
    check_def(pf, "Inventory.add", "method", 20, "pub fn add(self: *Inventory, it: Item) !void",
              "Adds an item unless the inventory is full.")
    check_def(pf, "Stock", "enum", 34, "pub const Stock = enum { in_stock, sold_out };",
              "How an item is stocked.")
    check_def(pf, "log", "function", 36, "fn log(msg: []const u8) void")
    add = defn(pf, "Inventory.add")
    assert (add.span.start_line, add.span.end_line) == (20, 24)
    # `const std = @import("std")` binds an import, not a definition
    assert not [d for d in pf.definitions if d.name in ("std", "item")]


def test_references(pf) -> None:
    assert refs(pf, "log", "call") == [(23, "", "Inventory.add")]
    assert refs(pf, "priceOf", "call") == [(28, "item", "Inventory.total")]
    assert refs(pf, "append", "call") == [(22, "self.items", "Inventory.add")]
    assert refs(pf, "make", "call") == [(42, "item", "")]  # inside a test block: module level
    assert (20, "", "Inventory.add") in refs(pf, "Item", "type")
    assert refs(pf, "Item", "type")[0] == (4, "item", "Item")


def test_imports(pf) -> None:
    assert imports(pf) == {("std", "", "std"), ("./item", "", "item")}


def test_syntax_error_keeps_definitions_around_it() -> None:
    src = b"fn ok() void {}\nfn broken() void { const x = ; }\npub fn after() u8 { return 1; }\n"
    pf = parse_source("broken.zig", src, "zig", "broken")
    assert pf.has_errors
    names = [d.qualname for d in pf.definitions]
    assert "ok" in names and "after" in names


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    yield from graph_of(tmp_path_factory, "zig", {
        "src/inventory.zig": (FIXTURES / "zig" / "inventory.zig").read_text(),
        "src/item.zig": (FIXTURES / "zig" / "item.zig").read_text(),
        # a same-named function elsewhere: the import decides
        "tools/item.zig": "pub fn priceOf(x: u64) u64 {\n    return x;\n}\n",
    })


@pytest.mark.parametrize(("line", "name", "kind", "target", "how"), [
    (28, "priceOf", "call", "src.item.priceOf", "import"),
    (42, "make", "call", "src.item.make", "import"),
    (4, "Item", "type", "src.item.Item", "import"),
    (23, "log", "call", "src.inventory.log", "scope"),
    (41, "init", "call", "src.inventory.Inventory.init", "scope"),
])
def test_cross_file_resolution(graph, line, name, kind, target, how) -> None:
    assert resolved(graph, "src/inventory.zig", line, name, kind) == (target, how)
