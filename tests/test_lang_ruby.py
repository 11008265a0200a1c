"""Ruby: the tags query and hooks on a fixture, a broken file, and a real index build."""

from __future__ import annotations

from functools import partial

import pytest

from indexer.parse.parser import parse_source
from tests.lang_graph import graph_of, resolved
from tests.test_languages import FIXTURES, check_def, defn, imports, parse, refs


@pytest.fixture(scope="module")
def pf():
    return parse("ruby")


def test_definitions(pf) -> None:
    # each `#` line is a comment node of its own: the file's doc is its first line
    assert pf.doc == "Inventory of stocked items."
    check_def(pf, "Shop", "namespace", 9, "module Shop")
    check_def(pf, "Shop.MAX_ITEMS", "constant", 11, "MAX_ITEMS = 500", "Most items one inventory holds.")
    check_def(pf, "Shop.Priced", "namespace", 14, "module Priced",
              "Something that can be priced.")
    # `def` right inside a module is a mixin method
    check_def(pf, "Shop.Priced.price", "method", 16, "def price", "Price in cents.")
    check_def(pf, "Shop.Inventory", "class", 22, "class Inventory < BaseStore",
              "Keeps the items of one shop.")
    check_def(pf, "Shop.Inventory.DEFAULT_NAME", "constant", 28, 'DEFAULT_NAME = "main"')
    check_def(pf, "Shop.Inventory.initialize", "method", 32, "def initialize(name = DEFAULT_NAME)")
    check_def(pf, "Shop.Inventory.load", "method", 39, "def self.load(text)",
              "Builds an inventory from a JSON document.")
    check_def(pf, "Shop.Inventory.add", "method", 47, "def add(item)",
              "Adds an item unless the inventory is full.")
    check_def(pf, "Shop.Inventory.<=>", "method", 59, "def <=>(other)")
    check_def(pf, "Shop.Inventory.count", "method", 69, "def count")  # after `private`
    check_def(pf, "Shop.Backorder", "class", 75, "class Backorder < Item",
              "A line of stock that is backordered.")
    check_def(pf, "report", "function", 84, "def report(inventory)", "Prints a report of an inventory.")
    assert defn(pf, "Shop.Inventory.add").parent == pf.definitions.index(defn(pf, "Shop.Inventory"))
    # attr_reader :name defines methods whose names are symbols (`:name`): not captured
    assert not [d for d in pf.definitions if d.name in ("name", "items", ":name")]


def test_first_statement_of_a_body_keeps_its_doc_comment(pf) -> None:
    # tree-sitter-ruby puts a comment before the first statement of a body under the
    # class/module node, not the body: it is still the statement's doc, and not part of the
    # container's signature; a comment trailing code on its line is no one's doc.
    assert defn(pf, "Shop.MAX_ITEMS").doc == "Most items one inventory holds."
    assert defn(pf, "Shop.Priced.price").doc == "Price in cents."
    assert defn(pf, "Shop").signature == "module Shop"
    src = b"module Util # trailing\n  X = 1\nend\ny = 2 # about y\ndef z; end\n"
    got = parse_source("util.rb", src, "ruby", "util")
    assert [(d.name, d.signature, d.doc) for d in got.definitions] == [
        ("Util", "module Util", ""), ("X", "X = 1", ""), ("z", "def z; end", "")]


def test_references(pf) -> None:
    assert refs(pf, "add", "call") == [(42, "inv", "Shop.Inventory.load")]
    assert refs(pf, "parse", "call") == [(40, "JSON", "Shop.Inventory.load")]
    assert refs(pf, "log", "call") == [(51, "", "Shop.Inventory.add")]
    assert refs(pf, "sku", "call") == [(51, "item", "Shop.Inventory.add")]
    assert refs(pf, "count", "call") == [(64, "self", "Shop.Inventory.to_s")]
    assert refs(pf, "format_price", "call") == [(64, "", "Shop.Inventory.to_s")]
    assert refs(pf, "price", "call") == [(60, "other", "Shop.Inventory.<=>"), (86, "?", "report")]
    assert refs(pf, "load", "call") == [(86, "Shop::Inventory", "report")]
    # Item.new(...) calls the class, as Java's `new Item()`
    assert refs(pf, "Item", "call") == [(42, "", "Shop.Inventory.load")]
    assert refs(pf, "new", "call") == [(41, "", "Shop.Inventory.load"), (42, "Item", "Shop.Inventory.load")]
    # superclass and mixins are inheritance
    assert refs(pf, "BaseStore", "inherit") == [(22, "", "Shop.Inventory")]
    assert refs(pf, "Item", "inherit") == [(75, "", "Shop.Backorder")]
    assert refs(pf, "Priced", "inherit") == [(23, "", "Shop.Inventory")]
    assert refs(pf, "Comparable", "inherit") == [(24, "", "Shop.Inventory")]
    assert refs(pf, "Forwardable", "inherit") == [(25, "", "Shop.Inventory")]
    assert refs(pf, "Inventory", "type") == [(86, "Shop", "report")]
    assert (17, "", "Shop.Priced.price") in refs(pf, "NotImplementedError", "type")
    assert not refs(pf, "MAX_ITEMS", "type")  # ALL_CAPS constants are values, not types
    assert not refs(pf, "require", "call") and not refs(pf, "require_relative", "call")


def test_imports(pf) -> None:
    # require names a file on the load path; require_relative one next to the requiring file
    # (parse() names the fixture ruby/inventory.rb), both turned into dotted modules
    assert imports(pf) == {
        ("json", "", "json"),
        ("set", "", "set"),
        ("ruby.item", "", "ruby.item"),
        ("support.logging", "", "support.logging"),
        # a required file's top-level definitions are in scope: a `*` import beside each
        ("json", "*", "*"), ("set", "*", "*"), ("ruby.item", "*", "*"), ("support.logging", "*", "*"),
    }
    assert [r.name for r in pf.references if r.kind == "import"] == [
        "json", "set", "ruby.item", "support.logging",
    ]


def test_module_names_follow_the_load_path() -> None:
    from indexer.parse.lang_hooks import RUBY

    assert RUBY.module_name("lib/shop/item.rb", frozenset()) == "shop.item"
    assert RUBY.module_name("app/models/item.rb", frozenset()) == "app.models.item"
    assert RUBY.import_module('require "shop/item', "bin/run.rb") == "shop.item"
    assert RUBY.import_module('require_relative "item', "lib/shop/inventory.rb") == "shop.item"
    assert RUBY.import_module("require_relative '../../x.rb", "a.rb") == "../../x"
    assert RUBY.import_module("load \"tasks.rb", "Rakefile") == "tasks"


def test_syntax_error_keeps_definitions_around_it() -> None:
    src = b"class A\n  def ok\n  end\n\n  def broken\n    x = )\n  end\n\n  def after\n  end\nend\n"
    pf = parse_source("broken.rb", src, "ruby", "broken")
    assert pf.has_errors
    qualnames = [d.qualname for d in pf.definitions]
    assert qualnames == ["A", "A.ok", "A.broken", "A.after"]


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    yield from graph_of(tmp_path_factory, "ruby", {
        "lib/shop/inventory.rb": (FIXTURES / "ruby" / "inventory.rb").read_text(),
        "lib/shop/item.rb": (FIXTURES / "ruby" / "item.rb").read_text(),
        "bin/report.rb": 'require "shop/inventory"\n\nShop::Inventory.load("{}")\n',
    }, git=False)  # no git: the tree is walked


def test_cross_file_resolution(graph) -> None:
    ref = partial(resolved, graph)
    inv = "lib/shop/inventory.rb"
    # `require_relative "item"` and `require "shop/inventory"` resolve to the files
    assert ref(inv, 6, "shop.item", "import") == ("shop.item", "import")
    assert ref("bin/report.rb", 1, "shop.inventory", "import") == ("shop.inventory", "import")
    # A require loads the file's top-level constants and methods: they resolve through it.
    assert ref(inv, 42, "Item", "call") == ("shop.item.Item", "import")
    assert ref(inv, 75, "Item", "inherit") == ("shop.item.Item", "import")
    assert ref(inv, 64, "format_price", "call") == ("shop.item.format_price", "import")
    assert ref("bin/report.rb", 3, "load", "call") == ("shop.inventory.Shop.Inventory.load", "import")
    # within a file: scope and self
    assert ref(inv, 64, "count", "call") == ("shop.inventory.Shop.Inventory.count", "self")
    assert ref(inv, 86, "load", "call") == ("shop.inventory.Shop.Inventory.load", "scope")
