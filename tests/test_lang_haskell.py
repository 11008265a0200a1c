"""Haskell: the tags query on the fixture, syntax-error recovery, and cross-file resolution."""

from __future__ import annotations

import pytest

from indexer.parse.parser import parse_source
from tests.lang_graph import graph_of, resolved
from tests.test_languages import FIXTURES, check_def, defn, imports, parse, refs

HS = FIXTURES / "haskell"


def test_definitions() -> None:
    pf = parse("haskell")
    assert pf.doc == "Inventory of stocked items."
    # the grammar keeps the comment above the first declaration after the imports inside the
    # imports node, out of reach: maxItems has no doc
    check_def(pf, "maxItems", "variable", 17, "maxItems = 500")
    check_def(pf, "Inventory", "type", 20, "data Inventory = Inventory", "Keeps the items of one shop.")
    check_def(pf, "Inventory.Inventory.invItems", "field", 22, "invItems :: Map.Map String Item")
    check_def(
        pf, "Stock", "type", 26, "data Stock = InStock | Backorder Int", "How an item is stocked."
    )
    check_def(pf, "Stock.Backorder", "constant", 26, "Backorder Int")
    check_def(pf, "Cents", "type", 30, "newtype Cents = Cents Int", "Cents, never negative.")
    check_def(pf, "ItemName", "type", 33, "type ItemName = String", "Names of items.")
    check_def(pf, "Priced", "interface", 36, "class Priced a where", "Something that can be priced.")
    check_def(pf, "Priced.price", "method", 38, "price :: a -> Cents", "Price in cents.")
    check_def(pf, "Item", "impl", 42, "instance Priced Item where")
    check_def(pf, "Item.price", "method", 43, "price item = Cents (itemPrice item)")
    check_def(
        pf, "newInventory", "function", 51,
        "newInventory name = Inventory {invName = name, invItems = Map.empty}", "An empty inventory.",
    )
    # the type signature above an equation is part of its doc comment and stripped from it
    check_def(
        pf, "addItem", "function", 55, "addItem item inv", "Adds an item unless the inventory is full."
    )
    check_def(pf, "sumCents", "function", 70, "sumCents cs = Cents (sum [c | Cents c <- cs])")
    assert defn(pf, "Item.price").parent == pf.definitions.index(defn(pf, "Item", "impl"))


def test_references() -> None:
    pf = parse("haskell")
    assert refs(pf, "putAll", "call") == [(63, "Store", "restock")]
    assert refs(pf, "putItem", "call") == [(64, "", "restock")]
    assert refs(pf, "addItem", "call") == [(67, "", "restock")]  # in a where clause
    assert refs(pf, "size", "call") == [(56, "Map", "addItem")]
    assert refs(pf, "sumCents", "call") == [(47, "", "Inventory.price")]
    assert refs(pf, "Backorder", "call") == [(75, "", "stockOf")]
    assert refs(pf, "Priced", "inherit") == [(42, "", "Item"), (46, "", "Inventory")]
    assert refs(pf, "Show", "inherit") == [(23, "", "Inventory"), (27, "", "Stock")]
    assert (54, "", "") in refs(pf, "Item", "type")  # signatures stand outside the equation
    assert refs(pf, "Map", "type") == [(22, "Map", "Inventory.Inventory.invItems")]
    assert not refs(pf, "Int", "type") and not refs(pf, "String", "type")


def test_imports() -> None:
    pf = parse("haskell")
    assert imports(pf) == {
        ("Data.Map.Strict", "", "Map"),
        ("Data.List", "sortOn", "sortOn"),
        ("Shop.Store", "Item", "Item"),
        ("Shop.Store", "Store", "Store"),
        ("Shop.Store", "putItem", "putItem"),
        ("Shop.Store", "", "Store"),
    }


def test_module_name_leaves_out_source_directories() -> None:
    from indexer.parse.modules import module_name

    assert module_name("src/Shop/Store.hs", "haskell", frozenset()) == "Shop.Store"
    assert module_name("app/Main.hs", "haskell", frozenset()) == "Main"
    assert module_name("Setup.hs", "haskell", frozenset()) == "Setup"


def test_syntax_error_keeps_definitions_around_it() -> None:
    src = b"module A where\n\nok :: Int\nok = 1\n\nbroken = let in )\n\nafter :: Int\nafter = 2\n"
    pf = parse_source("broken.hs", src, "haskell", "broken")
    assert pf.has_errors
    names = [d.name for d in pf.definitions]
    assert all(n in names for n in ["ok", "broken", "after"]), names


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    yield from graph_of(tmp_path_factory, "haskell", {
        "src/Shop/Inventory.hs": (HS / "Inventory.hs").read_text(),
        "src/Shop/Store.hs": (HS / "Store.hs").read_text(),
    })


# `import Shop.Store (putItem)` and `import qualified Shop.Store as Store` resolve; a bare
# `import Shop.Store` brings every name in, which the parser cannot say (no "*" import), so
# its names fall back to the same directory.
@pytest.mark.parametrize(
    ("line", "name", "kind", "target", "how"),
    [
        (64, "putItem", "call", "Shop.Store.putItem", "import"),
        (63, "putAll", "call", "Shop.Store.putAll", "import"),
        # the module alias `as Store` and the imported type Store share one name here (Haskell
        # keeps modules and types apart; the resolver does not): the module wins
        (60, "Store", "type", "Shop.Store", "import"),
        # `instance Priced Item` is an impl named Item in this file: it shadows the import
        (54, "Item", "type", "Shop.Inventory.Item", "scope"),
        # a record field is nested in its type, so a bare accessor call finds no top-level name
        (43, "itemPrice", "call", None, "unresolved"),
        (67, "addItem", "call", "Shop.Inventory.addItem", "scope"),
    ],
)
def test_cross_file_resolution(graph, line, name, kind, target, how) -> None:
    assert resolved(graph, "src/Shop/Inventory.hs", line, name, kind) == (target, how)
