"""Kotlin: the tags query and hooks on a fixture, a broken file, and a real index build."""

from __future__ import annotations

from functools import partial

import pytest

from indexer.parse.parser import parse_source
from tests.lang_graph import graph_of, resolved
from tests.test_languages import FIXTURES, check_def, defn, imports, parse, refs


@pytest.fixture(scope="module")
def pf():
    return parse("kotlin")


def test_definitions(pf) -> None:
    assert pf.doc == "Inventory of stocked items."
    check_def(pf, "MAX_ITEMS", "constant", 12, "const val MAX_ITEMS = 500",
              "Most items one inventory holds.")
    # the grammar has no `body` field: a signature ends where the `class_body` or
    # `function_body` child starts (a multi-line parameter list included: test below)
    check_def(pf, "Priced", "interface", 15, "interface Priced", "Something that can be priced.")
    check_def(pf, "Priced.price", "method", 17, "fun price(): Int", "Price in cents.")
    check_def(pf, "Stock", "enum", 21, "enum class Stock", "How an item is stocked.")
    check_def(pf, "Stock.IN_STOCK", "constant", 22, "IN_STOCK")
    check_def(pf, "Stock.available", "method", 25, "fun available(): Boolean")
    check_def(pf, "Line", "class", 29, "data class Line(val sku: String, val cents: Int)",
              "A line of a receipt.")
    check_def(pf, "Line.sku", "field", 29, "val sku: String")  # constructor property
    check_def(pf, "Catalog", "type", 31, "typealias Catalog = Map<String, Item>")
    check_def(pf, "Inventory", "class", 34,
              "class Inventory(val name: String) : BaseStore(name), Priced, Comparable<Inventory>",
              "Keeps the items of one shop.")
    check_def(pf, "Inventory.name", "field", 34, "val name: String")
    check_def(pf, "Inventory.items", "field", 35, "private val items = mutableListOf<Item>()")
    check_def(pf, "Inventory.label", "field", 37, 'var label: String = "main"')
    check_def(pf, "Inventory.add", "method", 40, "fun add(item: Item): Boolean",
              "Adds an item unless the inventory is full.")
    check_def(pf, "Inventory.compareTo", "method", 57,
              "override fun compareTo(other: Inventory): Int")
    # an unnamed companion object is not a definition: its members are the class's
    check_def(pf, "Inventory.of", "method", 63, "fun of(vararg items: Item): Inventory",
              "Builds an inventory from items.")
    check_def(pf, "Registry", "class", 72, "object Registry", "Shared registry of inventories.")
    check_def(pf, "Registry.register", "method", 75, "fun register(inventory: Inventory)")
    check_def(pf, "emptyInventory", "function", 81,
              "fun emptyInventory(name: String): Inventory", "Makes an empty inventory.")
    assert defn(pf, "Inventory.add").parent == pf.definitions.index(defn(pf, "Inventory"))
    # locals are not definitions; neither is the package
    assert not [d for d in pf.definitions if d.name in ("total", "inventory", "shop")]


def test_references(pf) -> None:
    assert refs(pf, "add", "call") == [(44, "this.items", "Inventory.add"), (65, "inventory", "Inventory.of")]
    assert refs(pf, "log", "call") == [(45, "", "Inventory.add")]
    assert refs(pf, "maxOf2", "call") == [(52, "", "Inventory.price")]  # the import alias
    assert refs(pf, "price", "call") == [
        (52, "item", "Inventory.price"),
        (57, "", "Inventory.compareTo"),
        (57, "other", "Inventory.compareTo"),
        (59, "", "Inventory.describe"),
    ]
    assert refs(pf, "formatPrice", "call") == [(59, "", "Inventory.describe")]  # in a template
    assert refs(pf, "copy", "call") == [(65, "Item", "Inventory.of")]
    # constructor calls look like function calls
    assert refs(pf, "Inventory", "call") == [(64, "", "Inventory.of"), (81, "", "emptyInventory")]
    assert refs(pf, "BaseStore", "inherit") == [(34, "", "Inventory")]
    assert refs(pf, "Priced", "inherit") == [(34, "", "Inventory")]
    assert refs(pf, "Comparable", "inherit") == [(34, "", "Inventory")]
    assert refs(pf, "Item", "type") == [
        (31, "", "Catalog"), (35, "", "Inventory.items"), (40, "", "Inventory.add"),
        (63, "", "Inventory.of"),
    ]
    assert (73, "", "Registry.all") in refs(pf, "Inventory", "type")
    assert not refs(pf, "Int", "type") and not refs(pf, "String", "type")


def test_imports(pf) -> None:
    assert imports(pf) == {
        ("com.example.shop.model.Item", "Item", "Item"),
        ("com.example.shop.model.formatPrice", "formatPrice", "formatPrice"),
        ("kotlin.math.max", "max", "maxOf2"),
        ("java.util", "*", "*"),
    }


def test_module_names_start_at_the_source_root() -> None:
    from indexer.parse.lang_hooks import KOTLIN

    assert KOTLIN.module_name("app/src/main/kotlin/com/x/Item.kt", frozenset()) == "com.x.Item"
    assert KOTLIN.module_name("src/test/java/com/x/ItemTest.kt", frozenset()) == "com.x.ItemTest"
    assert KOTLIN.module_name("scripts/build.kts", frozenset()) == "scripts.build"


def test_syntax_error_keeps_definitions_around_it() -> None:
    src = b"class A {\n  fun ok() {}\n  fun broken() { val x = }\n  fun after() {}\n}\n"
    pf = parse_source("broken.kt", src, "kotlin", "broken")
    assert pf.has_errors
    assert [d.qualname for d in pf.definitions] == ["A", "A.ok", "A.broken", "A.after"]


BASE = "src/main/kotlin/com/example/shop"


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    yield from graph_of(tmp_path_factory, "kotlin", {
        f"{BASE}/Inventory.kt": (FIXTURES / "kotlin" / "Inventory.kt").read_text(),
        f"{BASE}/model/Item.kt": (FIXTURES / "kotlin" / "model" / "Item.kt").read_text(),
    }, git=False)  # no git: the tree is walked


def test_cross_file_resolution(graph) -> None:
    ref = partial(resolved, graph, f"{BASE}/Inventory.kt")
    item = "com.example.shop.model.Item.Item"
    # import com.example.shop.model.Item  -> the class in model/Item.kt
    assert ref(6, "Item", "import") == (item, "import")
    assert ref(40, "Item", "type") == (item, "import")
    assert ref(65, "copy", "call") == (f"{item}.copy", "import")  # a companion function
    # a top-level function lives in a file not named after it: its import does not find
    # the file (module = package + file name), so the call is left external
    assert ref(59, "formatPrice", "call") == (None, "external")
    # within the file
    assert ref(57, "price", "call") == ("com.example.shop.Inventory.Inventory.price", "scope")
    assert ref(81, "Inventory", "call") == ("com.example.shop.Inventory.Inventory", "scope")


def test_signature_spans_a_parameter_list_over_several_lines() -> None:
    src = b"fun total(\n    a: Int,\n    b: Int,\n): Int {\n    return a + b\n}\n"
    got = parse_source("Total.kt", src, "kotlin", "Total")
    assert [(d.name, d.signature) for d in got.definitions] == [
        ("total", "fun total( a: Int, b: Int, ): Int")]
