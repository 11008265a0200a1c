"""Scala: tags query, hooks (sbt source roots, import paths) and cross-file resolution through
`import`."""

from __future__ import annotations

import pytest

from indexer.parse.lang_hooks import SCALA
from indexer.parse.parser import parse_source
from tests.lang_graph import graph_of, resolved
from tests.test_languages import FIXTURES, check_def, defn, imports, parse, refs


@pytest.fixture(scope="module")
def pf():
    return parse("scala")


def test_definitions(pf) -> None:
    assert pf.doc == "Inventory of stocked items, kept per shop."
    check_def(pf, "Priced", "trait", 10, "trait Priced", "Something that can be priced.")
    check_def(pf, "Priced.price", "method", 12, "def price: Int", "Price in cents.")
    check_def(pf, "Priced.describe", "method", 14, "def describe(): String =")
    check_def(pf, "Stock", "trait", 18, "sealed trait Stock", "How an item is stocked.")
    check_def(pf, "InStock", "class", 19, "case object InStock extends Stock")
    check_def(
        pf,
        "Item",
        "class",
        23,
        "case class Item(name: String, cents: Int, discount: Double = 0.0) extends Priced",
        "One stocked item.",
    )
    check_def(
        pf,
        "Inventory",
        "class",
        31,
        "class Inventory(val shop: String) extends BaseStore with Priced with Ordered[Inventory]",
        "Keeps the items of one shop.\nNot thread-safe.",
    )
    check_def(
        pf, "Inventory.MaxItems", "field", 33, "val MaxItems: Int = 500", "Most items one inventory holds."
    )
    check_def(pf, "Inventory.items", "field", 35, "private val items = mutable.ListBuffer.empty[Item]")
    check_def(pf, "Inventory.updated", "field", 36, "var updated: Long = 0L")
    check_def(pf, "Inventory.Listener", "type", 38, "type Listener = Item => Unit")
    check_def(
        pf,
        "Inventory.add",
        "method",
        41,
        "def add(item: Item): Boolean =",
        "Adds an item unless the inventory is full.",
    )
    check_def(pf, "Inventory.touch", "method", 56, "private def touch(): Unit =")
    # the companion object is a definition of its own
    companion = [d for d in pf.definitions if d.qualname == "Inventory"]
    assert [d.span.start_line for d in companion] == [31, 65]
    assert companion[1].doc == "Factory and helpers for inventories."
    assert pf.definitions[defn(pf, "Inventory.apply").parent].span.start_line == 65
    check_def(pf, "Inventory.Default", "field", 66, 'val Default = new Inventory("default")')
    check_def(pf, "Colour", "enum", 81, "enum Colour", "Colours a label may have.")
    check_def(pf, "Colour.Red", "constant", 82, "Red")
    check_def(pf, "Colour.Green", "constant", 82, "Green")
    check_def(pf, "BaseStore.log", "method", 86, "protected def log(msg: String): Unit =")
    # locals are not definitions
    assert not [d for d in pf.definitions if d.name in ("inv", "name", "cents")]


def test_references(pf) -> None:
    assert refs(pf, "format", "call") == [(14, "Pricing", "Priced.describe")]  # in s"${...}"
    assert refs(pf, "discounted", "call") == [(24, "Pricing", "Item.price")]
    assert refs(pf, "log", "call") == [(43, "", "Inventory.add")]
    assert refs(pf, "touch", "call") == [(47, "", "Inventory.add")]
    assert refs(pf, "compare", "call") == [(54, "price", "Inventory.compare")]
    assert refs(pf, "Inventory", "call") == [(66, "", "Inventory.Default"), (69, "", "Inventory.apply")]
    assert refs(pf, "Item", "call") == [(76, "", "Inventory.parse")]
    assert refs(pf, "Stock", "inherit") == [(19, "", "InStock"), (20, "", "OutOfStock")]
    assert refs(pf, "BaseStore", "inherit") == [(31, "", "Inventory")]
    assert refs(pf, "Priced", "inherit") == [(23, "", "Item"), (31, "", "Inventory")]
    assert refs(pf, "Ordered", "inherit") == [(31, "", "Inventory")]
    assert (41, "", "Inventory.add") in refs(pf, "Item", "type")
    assert refs(pf, "Try", "type") == [(74, "", "Inventory.parse")]
    assert not refs(pf, "Int", "type")  # scala's own value types are not references


def test_imports(pf) -> None:
    assert imports(pf) == {
        ("scala.collection.mutable", "mutable", "mutable"),
        ("scala.util", "Try", "Try"),
        ("scala.util", "Success", "Ok"),
        ("com.example.shop.util.Pricing", "Pricing", "Pricing"),
        ("com.example.shop.model", "_", "_"),
    }


def test_module_names() -> None:
    assert SCALA.module_name("src/main/scala/com/shop/Item.scala", frozenset()) == "com.shop.Item"
    assert SCALA.module_name("core/src/test/scala-2.13/a/B.scala", frozenset()) == "a.B"
    assert SCALA.module_name("scripts/build.sc", frozenset()) == "scripts.build"


def test_syntax_error_keeps_definitions_around_it() -> None:
    src = "class A {\n  def ok(): Int = 1\n  def broken(): Int = { val x = ; }\n  def after(): Unit = ()\n}\n"
    pf = parse_source("broken.scala", src.encode(), "scala", "broken")
    assert pf.has_errors
    names = [d.qualname for d in pf.definitions]
    assert all(n in names for n in ("A", "A.ok", "A.after")), names


ROOT = "src/main/scala/com/example/shop"
FILES = {
    f"{ROOT}/Inventory.scala": (FIXTURES / "scala/Inventory.scala").read_text(),
    f"{ROOT}/util/Pricing.scala": (FIXTURES / "scala/Pricing.scala").read_text(),
}


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    yield from graph_of(tmp_path_factory, "scala", FILES)


@pytest.mark.parametrize(
    ("line", "name", "kind", "target", "how"),
    [
        # import com.example.shop.util.Pricing; Pricing.format(...)
        (14, "format", "call", "com.example.shop.util.Pricing.Pricing.format", "import"),
        (24, "discounted", "call", "com.example.shop.util.Pricing.Pricing.discounted", "import"),
        (6, "Pricing", "import", "com.example.shop.util.Pricing.Pricing", "import"),
        (31, "BaseStore", "inherit", "com.example.shop.Inventory.BaseStore", "scope"),
        (47, "touch", "call", "com.example.shop.Inventory.Inventory.touch", "scope"),
        (76, "Item", "call", "com.example.shop.Inventory.Item", "scope"),
    ],
)
def test_cross_file_resolution(graph, line, name, kind, target, how) -> None:
    assert resolved(graph, f"{ROOT}/Inventory.scala", line, name, kind) == (target, how)
