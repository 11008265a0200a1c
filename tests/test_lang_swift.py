"""Swift: tags query and cross-file resolution (Swift imports whole modules, so another file of
the same target resolves by directory or globally)."""

from __future__ import annotations

import pytest

from indexer.parse.parser import parse_source
from tests.lang_graph import graph_of, resolved
from tests.test_languages import FIXTURES, check_def, defn, imports, parse, refs


@pytest.fixture(scope="module")
def pf():
    return parse("swift")


def test_definitions(pf) -> None:
    assert pf.doc == "Inventory of stocked items, kept per shop."
    check_def(pf, "Priced", "interface", 7, "protocol Priced", "Something that can be priced.")
    check_def(pf, "Priced.price", "field", 9, "var price: Int { get }", "Price in cents.")
    check_def(pf, "Priced.describe", "method", 11, "func describe() -> String")
    check_def(pf, "Stock", "enum", 15, "enum Stock", "How an item is stocked.")
    check_def(pf, "Stock.inStock", "constant", 16, "case inStock")
    check_def(pf, "Stock.available", "field", 19, "var available: Bool {")
    check_def(pf, "Item", "struct", 26, "struct Item: Priced, Hashable", "One stocked item.")
    check_def(pf, "Item.discount", "field", 29, "var discount: Double = 0")
    check_def(pf, "Item.describe", "method", 33, "func describe() -> String")
    check_def(pf, "Inventory", "class", 39, "class Inventory: BaseStore, Priced", "Keeps the items of one shop.")
    check_def(
        pf, "Inventory.maxItems", "field", 41, "static let maxItems = 500", "Most items one inventory holds."
    )
    check_def(pf, "Inventory.init", "method", 46, "init(shop: String)")
    check_def(
        pf,
        "Inventory.add",
        "method",
        52,
        "@discardableResult func add(_ item: Item) -> Bool",
        "Adds an item unless the inventory is full.",
    )
    check_def(pf, "Inventory.touch", "method", 71, "private func touch()")
    # an extension's members are the type's members
    check_def(pf, "Inventory", "impl", 76, "extension Inventory: CustomStringConvertible")
    check_def(
        pf, "Inventory.cheaperThan", "method", 80, "func cheaperThan(_ cents: Int) -> [Item]", "Items below a price."
    )
    assert pf.definitions[defn(pf, "Inventory.cheaperThan").parent].kind == "impl"
    check_def(pf, "BaseStore.log", "method", 88, "func log(_ message: String)")
    check_def(pf, "Catalog", "type", 93, "typealias Catalog = [String: Item]")
    check_def(
        pf,
        "makeInventory",
        "function",
        96,
        "func makeInventory(shop: String, catalog: Catalog) -> Inventory",
        "Builds an inventory from a catalog.",
    )
    assert not [d for d in pf.definitions if d.name == "inventory"]  # a local


def test_references(pf) -> None:
    assert refs(pf, "discounted", "call") == [(31, "Pricing", "Item.price")]
    assert refs(pf, "format", "call") == [(34, "Pricing", "Item.describe")]  # in "\(...)"
    assert refs(pf, "init", "call") == [(48, "super", "Inventory.init")]
    assert refs(pf, "log", "call") == [(55, "", "Inventory.add")]
    assert refs(pf, "touch", "call") == [(59, "", "Inventory.add")]
    assert refs(pf, "append", "call") == [(58, "items", "Inventory.add")]
    assert refs(pf, "add", "call") == [(99, "inventory", "makeInventory")]
    assert refs(pf, "Inventory", "call") == [(97, "", "makeInventory")]
    assert refs(pf, "Priced", "inherit") == [(26, "", "Item"), (39, "", "Inventory")]
    assert refs(pf, "BaseStore", "inherit") == [(39, "", "Inventory")]
    assert refs(pf, "CustomStringConvertible", "inherit") == [(76, "", "Inventory")]
    assert (53, "", "Inventory.add") in refs(pf, "Item", "type")
    assert refs(pf, "Catalog", "type") == [(96, "", "makeInventory")]
    assert not refs(pf, "Int", "type")


def test_imports(pf) -> None:
    assert imports(pf) == {("Foundation", "", "Foundation"), ("Shop.Money", "", "Shop.Money")}


def test_syntax_error_keeps_definitions_around_it() -> None:
    src = "func ok() {}\nfunc broken() {\n    let x = = 1\n}\nstruct After {}\n"
    pf = parse_source("broken.swift", src.encode(), "swift", "broken")
    assert pf.has_errors
    names = [d.qualname for d in pf.definitions]
    assert all(n in names for n in ("ok", "After")), names


FILES = {
    "Sources/Shop/Inventory.swift": (FIXTURES / "swift/Inventory.swift").read_text(),
    "Sources/Shop/Pricing.swift": (FIXTURES / "swift/Pricing.swift").read_text(),
}


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    yield from graph_of(tmp_path_factory, "swift", FILES)


@pytest.mark.parametrize(
    ("line", "name", "kind", "target", "how"),
    [
        # Pricing is declared in another file of the same target (no import names it): the
        # receiver resolves by directory, then its member
        (31, "discounted", "call", "Sources.Shop.Pricing.Pricing.discounted", "package"),
        (34, "format", "call", "Sources.Shop.Pricing.Pricing.format", "package"),
        (39, "BaseStore", "inherit", "Sources.Shop.Inventory.BaseStore", "scope"),
        (59, "touch", "call", "Sources.Shop.Inventory.Inventory.touch", "scope"),
        (97, "Inventory", "call", "Sources.Shop.Inventory.Inventory", "scope"),
    ],
)
def test_cross_file_resolution(graph, line, name, kind, target, how) -> None:
    assert resolved(graph, "Sources/Shop/Inventory.swift", line, name, kind) == (target, how)
