"""Dart: the tags query on the fixture, syntax-error recovery, and cross-file resolution."""

from __future__ import annotations

import pytest

from indexer.parse.parser import parse_source
from tests.lang_graph import graph_of, resolved
from tests.test_languages import FIXTURES, check_def, defn, imports, parse, refs

DART = FIXTURES / "dart"


def test_definitions() -> None:
    pf = parse("dart")
    assert pf.doc == "Inventory of stocked items."
    # a top-level variable is not wrapped by the grammar: its doc comment is out of reach
    check_def(pf, "maxItems", "constant", 10, "maxItems = 500")
    check_def(pf, "Priced", "class", 13, "abstract class Priced", "Something that can be priced.")
    check_def(pf, "Priced.price", "method", 15, "int price()", "Price in cents.")
    check_def(pf, "Priced.cents", "method", 17, "int get cents")
    check_def(pf, "Logging", "trait", 21, "mixin Logging on Object", "Writes messages somewhere.")
    check_def(pf, "Logging.log", "method", 23, "void log(String message)", "Logs one message.")
    check_def(pf, "Stock", "enum", 29, "enum Stock", "How an item is stocked.")
    check_def(pf, "Stock.backorder", "constant", 31, "backorder")
    check_def(
        pf, "ItemList", "impl", 36, "extension ItemList on List<Item>", "Helpers on lists of items."
    )
    check_def(pf, "ItemList.weight", "method", 38, "int get weight", "Total weight of the items.")
    check_def(
        pf,
        "Inventory",
        "class",
        42,
        "class Inventory extends BaseStore with Logging implements Priced",
        "Keeps the items of one shop.",
    )
    check_def(
        pf,
        "Inventory.shared",
        "constant",
        44,
        "static const int shared = 3",
        "How many shops share one inventory.",
    )
    check_def(pf, "Inventory.items", "field", 46, "final List<Item> items = []")
    check_def(pf, "Inventory.name", "field", 47, "String name")
    check_def(pf, "Inventory.Inventory", "method", 49, "Inventory(this.name)")
    check_def(pf, "Inventory.empty", "method", 51, "Inventory.empty() : this('empty')")
    check_def(pf, "Inventory.of", "method", 53, "factory Inventory.of(String name)")
    check_def(
        pf,
        "Inventory.add",
        "method",
        56,
        "bool add(Item item)",
        "Adds an item unless the inventory is full.",
    )
    check_def(pf, "Inventory.stockOf", "method", 76, "Stock stockOf(Item item)")
    check_def(
        pf,
        "ItemFilter",
        "type",
        81,
        "typedef ItemFilter = bool Function(Item item);",
        "Filters items.",
    )
    check_def(
        pf,
        "restock",
        "function",
        84,
        "Inventory restock(String name, List<Item> items)",
        "Builds an inventory holding [items].",
    )
    check_def(pf, "cheapest", "function", 91, "int cheapest(Inventory inv, ItemFilter keep)")
    assert defn(pf, "Inventory.add").parent == pf.definitions.index(defn(pf, "Inventory"))

    other = parse_source("store.dart", (DART / "store.dart").read_bytes(), "dart", "store")
    check_def(other, "Item.Item", "method", 8, "const Item(this.name, this.weight)")
    check_def(other, "BaseStore.count", "field", 17, "int count = 0", "Number of stored items.")


def test_references() -> None:
    pf = parse("dart")
    # The grammar keeps a body beside its signature, not inside it; DartHooks.body_siblings
    # makes the definition end with its body, so a body's references are enclosed by it.
    assert (defn(pf, "Inventory.add").span.end_line, defn(pf, "restock").span.end_line) == (64, 89)
    assert refs(pf, "add", "call") == [(60, "items", "Inventory.add"), (87, "?", "restock")]
    assert refs(pf, "log", "call") == [(61, "this", "Inventory.add")]
    assert refs(pf, "record", "call") == [(62, "store", "Inventory.add")]
    assert refs(pf, "max", "call") == [(71, "math", "Inventory.price")]
    assert refs(pf, "price", "call") == [
        (69, "item", "Inventory.price"), (74, "", "Inventory.cents"), (93, "?", "cheapest"),
    ]
    assert refs(pf, "of", "call") == [(85, "Inventory", "restock")]
    assert refs(pf, "Inventory", "call") == [(53, "", "Inventory.of")]
    assert refs(pf, "Item", "call") == [(87, "", "restock")]
    assert refs(pf, "shuffle", "call") == [(87, "?", "restock")]  # a cascade on inv.items
    assert refs(pf, "print", "call") == [(24, "", "Logging.log")]
    assert refs(pf, "BaseStore", "inherit") == [(42, "", "Inventory")]
    assert refs(pf, "Logging", "inherit") == [(42, "", "Inventory")]
    assert refs(pf, "Priced", "inherit") == [(42, "", "Inventory")]
    assert refs(pf, "Object", "inherit") == [(21, "", "Logging")]
    assert refs(pf, "Item", "type") == [
        (36, "", "ItemList"),
        (46, "", "Inventory.items"),
        (56, "", "Inventory.add"),
        (76, "", "Inventory.stockOf"),
        (81, "", "ItemFilter"),
        (84, "", "restock"),
    ]
    assert refs(pf, "ItemFilter", "type") == [(91, "", "cheapest")]
    assert not refs(pf, "int", "type") and not refs(pf, "String", "type")


def test_imports() -> None:
    pf = parse("dart")
    assert imports(pf) == {
        ("dart:math", "", "math"),
        ("./store.dart", "BaseStore", "BaseStore"),
        ("./store.dart", "Item", "Item"),
        ("./store.dart", "", "store"),
        # package:shop/... is lib/ of the package the file is in; the fixture is not in one
        ("../lib/util/log.dart", "", "log.dart"),
        # a plain import brings every top-level name into scope
        ("../lib/util/log.dart", "*", "*"),
    }
    nested = parse_source(
        "app/lib/src/a.dart", b"import 'package:app/util/log.dart';\n", "dart", "app.lib.src.a"
    )
    assert imports(nested) == {("../util/log.dart", "", "log.dart"), ("../util/log.dart", "*", "*")}


def test_syntax_error_keeps_definitions_around_it() -> None:
    src = b"class A {\n  void ok() {}\n  void broken() { var x = ; }\n  void after() {}\n}\nint tail() => 1;\n"
    pf = parse_source("broken.dart", src, "dart", "broken")
    assert pf.has_errors
    qualnames = [d.qualname for d in pf.definitions]
    assert all(q in qualnames for q in ["A", "A.ok", "A.broken", "A.after", "tail"]), qualnames


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    yield from graph_of(tmp_path_factory, "dart", {
        "lib/inventory.dart": (DART / "inventory.dart").read_text(),
        "lib/store.dart": (DART / "store.dart").read_text(),
    })


@pytest.mark.parametrize(
    ("line", "name", "kind", "target", "how"),
    [
        (42, "BaseStore", "inherit", "lib.store.BaseStore", "import"),  # show BaseStore
        (56, "Item", "type", "lib.store.Item", "import"),  # show Item
        (62, "record", "call", "lib.store.record", "import"),  # import 'store.dart' as store
        (87, "Item", "call", "lib.store.Item", "import"),
        (85, "of", "call", "lib.inventory.Inventory.of", "scope"),
        (61, "log", "call", "lib.inventory.Logging.log", "self"),  # through `with Logging`
        (5, "Item", "import", "lib.store.Item", "import"),
    ],
)
def test_cross_file_resolution(graph, line, name, kind, target, how) -> None:
    # `import 'store.dart' as store` itself stays external: the resolver matches a name-less
    # import's reference by the module's last dotted part, and a URI has none

    assert resolved(graph, "lib/inventory.dart", line, name, kind) == (target, how)
