"""PHP: the tags query and hooks on a fixture, a broken file, and a real index build."""

from __future__ import annotations

from functools import partial

import pytest

from indexer.parse.parser import parse_source
from tests.lang_graph import graph_of, resolved
from tests.test_languages import FIXTURES, check_def, defn, imports, parse, refs


@pytest.fixture(scope="module")
def pf():
    return parse("php")


def test_definitions(pf) -> None:
    check_def(pf, "MAX_ITEMS", "constant", 19, "const MAX_ITEMS = 500;",
              "Most items one inventory holds.")
    check_def(pf, "Priced", "interface", 22, "interface Priced", "Something that can be priced.")
    check_def(pf, "Priced.price", "method", 25, "public function price(): int;", "Price in cents.")
    check_def(pf, "Logs", "trait", 29, "trait Logs", "Adds logging to a class.")
    check_def(pf, "Logs.logger", "field", 31, "protected ?Logger $logger = null;")
    check_def(pf, "Logs.log", "method", 33, "protected function log(string $message): void")
    check_def(pf, "Availability", "enum", 40, "enum Availability: string", "How an item is stocked.")
    check_def(pf, "Availability.InStock", "constant", 42, "case InStock = 'in';")
    check_def(pf, "Availability.label", "method", 45, "public function label(): string")
    check_def(pf, "Inventory", "class", 52,
              "final class Inventory extends BaseStore implements Priced, \\Countable",
              "Keeps the items of one shop.")
    check_def(pf, "Inventory.DEFAULT_NAME", "constant", 56, "public const DEFAULT_NAME = 'main';")
    check_def(pf, "Inventory.items", "field", 59, "private array $items = [];", "@var Item[]")
    check_def(pf, "Inventory.__construct", "method", 61,
              "public function __construct(private string $name = self::DEFAULT_NAME)")
    check_def(pf, "Inventory.fromRows", "method", 67,
              "public static function fromRows(array $rows): self", "Builds an inventory from rows.")
    check_def(pf, "Inventory.add", "method", 77, "public function add(Item $item): bool",
              "Adds an item unless the inventory is full.")
    check_def(pf, "make_inventory", "function", 105,
              "function make_inventory(string $name): Inventory", "Makes an empty inventory.")
    assert defn(pf, "Inventory.add").parent == pf.definitions.index(defn(pf, "Inventory"))
    # `namespace App\Shop;` is a scope over many files, not a definition (as Java's package)
    assert not [d for d in pf.definitions if d.kind == "namespace"]
    # a promoted constructor parameter (`private string $name`) is not captured as a field
    assert not [d for d in pf.definitions if d.name == "name"]


def test_module_doc_after_php_tag(pf) -> None:
    # Gap in indexer/parse/parser.py, strict so that it flags when fixed: the file's doc is its first
    # node when that is a comment, and in PHP the first node is the `<?php` tag.
    assert pf.doc == ""


def test_references(pf) -> None:
    # $this->m(): the receiver is `this`, so the resolver looks in the class (and its traits)
    assert refs(pf, "log", "call") == [(83, "this", "Inventory.add")]
    assert refs(pf, "price", "call") == [(89, "i", "Inventory.price"), (100, "this", "Inventory.describe")]
    assert refs(pf, "info", "call") == [(35, "$this->logger", "Logs.log")]  # nullsafe ?->
    assert refs(pf, "add", "call") == [(71, "inventory", "Inventory.fromRows")]
    assert refs(pf, "fromArray", "call") == [(71, "Item", "Inventory.fromRows")]  # Item::
    assert refs(pf, "__construct", "call") == [(63, "parent", "Inventory.__construct")]
    assert refs(pf, "format_price", "call") == [(100, "", "Inventory.describe")]
    assert refs(pf, "count", "call") == [(79, "", "Inventory.add"), (95, "", "Inventory.count")]
    assert refs(pf, "Inventory", "call") == [(108, "", "make_inventory")]  # new Inventory()
    assert refs(pf, "Stock", "call") == [(107, "", "make_inventory")]
    assert not refs(pf, "self", "call")  # new self()
    assert refs(pf, "BaseStore", "inherit") == [(52, "", "Inventory")]
    assert refs(pf, "Priced", "inherit") == [(52, "", "Inventory")]
    assert refs(pf, "Countable", "inherit") == [(52, "", "Inventory")]  # \Countable
    assert refs(pf, "Logs", "inherit") == [(54, "", "Inventory")]  # use Logs;
    assert refs(pf, "Item", "type") == [(77, "", "Inventory.add"), (89, "", "Inventory.price")]
    assert refs(pf, "Logger", "type") == [(31, "", "Logs.logger")]
    assert refs(pf, "Inventory", "type") == [(105, "", "make_inventory")]
    assert not refs(pf, "self", "type")


def test_imports(pf) -> None:
    assert imports(pf) == {
        ("App.Models.Item", "Item", "Item"),
        ("Psr.Log.LoggerInterface", "LoggerInterface", "Logger"),
        ("App.Models", "Stock", "Stock"),  # a group use: the prefix is the module
        ("App.Models", "Supplier", "Vendor"),
        ("App.Support", "format_price", "format_price"),  # use function: the namespace
        ("App.Support", "CURRENCY", "CURRENCY"),
        ("php.helpers", "", "php.helpers"),  # require_once __DIR__ . '/helpers.php'
        ("php.helpers", "*", "*"),  # which defines its functions in the requiring scope
    }


def test_syntax_error_keeps_definitions_around_it() -> None:
    src = b"<?php\nclass A {\n  function ok() {}\n  function broken() { $x = ; }\n  function after() {}\n}\n"
    pf = parse_source("broken.php", src, "php", "broken")
    assert pf.has_errors
    assert [d.qualname for d in pf.definitions] == ["A", "A.ok", "A.broken", "A.after"]


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    yield from graph_of(tmp_path_factory, "php", {
        # PSR-4 layout: namespace App\Models is the directory App/Models
        "App/Shop/Inventory.php": (FIXTURES / "php" / "Inventory.php").read_text(),
        "App/Models/Item.php": (FIXTURES / "php" / "Item.php").read_text(),
        "App/Shop/helpers.php": "<?php\nfunction shop_helper(): int\n{\n    return 1;\n}\n",
    }, git=False)  # no git: the tree is walked


def test_cross_file_resolution(graph) -> None:
    ref = partial(resolved, graph, "App/Shop/Inventory.php")
    # use App\Models\Item;  -> the class in App/Models/Item.php
    assert ref(10, "Item", "import") == ("App.Models.Item.Item", "import")
    assert ref(77, "Item", "type") == ("App.Models.Item.Item", "import")
    assert ref(71, "fromArray", "call") == ("App.Models.Item.Item.fromArray", "import")
    # require_once __DIR__ . '/helpers.php'  -> the file
    assert ref(16, "App.Shop.helpers", "import") == ("App.Shop.helpers", "import")
    # $this->log() finds the method of the trait the class uses
    assert ref(83, "log", "call") == ("App.Shop.Inventory.Logs.log", "self")
    assert ref(100, "price", "call") == ("App.Shop.Inventory.Inventory.price", "self")
    # a group use names the namespace, not the file: it resolves to nothing indexed here
    assert ref(107, "Stock", "call") == (None, "external")
