"""Elixir: the tags query on the fixture, syntax-error recovery, and cross-file resolution."""

from __future__ import annotations

import pytest

from indexer.parse.parser import parse_source
from tests.lang_graph import graph_of, resolved
from tests.test_languages import FIXTURES, check_def, defn, imports, parse, refs

EX = FIXTURES / "elixir"


def test_definitions() -> None:
    pf = parse("elixir")
    assert pf.doc == "Inventory of stocked items."
    d = defn(pf, "Shop.Inventory", "namespace")  # named by the whole alias, dots and all
    assert (d.name, d.span.start_line, d.signature, d.doc) == (
        "Shop.Inventory", 2, "defmodule Shop.Inventory do", "Inventory of stocked items."
    )
    check_def(pf, "Shop.Inventory.defstruct", "struct", 16, 'defstruct name: "main", items: []')
    check_def(
        pf, "Shop.Inventory.t", "type", 19,
        "@type t :: %__MODULE__{name: String.t(), items: [Store.item()]}", "An inventory.",
    )
    check_def(
        pf, "Shop.Inventory.new", "function", 23, "def new(name) do", "Builds an empty inventory."
    )
    check_def(
        pf, "Shop.Inventory.add", "function", 31,
        "def add(%__MODULE__{items: items} = inv, item) when length(items) < @max_items do",
        "Adds an item unless the inventory is full.",
    )
    # each clause is a definition of its own
    assert [d.span.start_line for d in pf.definitions if d.qualname == "Shop.Inventory.add"] == [31, 38]
    check_def(pf, "Shop.Inventory.price", "function", 41, "def price(%__MODULE__{items: items}) do")
    check_def(
        pf, "Shop.Inventory.describe", "function", 48, "def describe(inv) do",
        "Formats the price of an inventory.",
    )
    check_def(pf, "Shop.Inventory.total", "function", 52, "defp total(prices), do: Enum.sum(prices)")
    check_def(
        pf, "Shop.Inventory.traced", "macro", 57, "defmacro traced(expr) do", "Logs the calls of `expr`."
    )
    check_def(pf, "Shop.Inventory.is_item", "macro", 64, "defguard is_item(value) when is_map(value)")
    check_def(pf, "Shop.Inventory.Entry", "namespace", 66, "defmodule Entry do")
    check_def(pf, "Shop.Inventory.Entry.key", "function", 70, "def key(%Entry{key: key}), do: key")
    entry = pf.definitions.index(defn(pf, "Shop.Inventory.Entry"))
    assert defn(pf, "Shop.Inventory.Entry.key").parent == entry

    other = parse_source("elixir/store.ex", (EX / "store.ex").read_bytes(), "elixir", "store")
    check_def(
        other, "Shop.Priced.price", "function", 23, "@callback price(term) :: integer", "Price in cents."
    )
    check_def(other, "Shop.Store.item", "type", 5,
              "@type item :: %{name: String.t(), price: integer}", "One stored item.")


def test_references() -> None:
    pf = parse("elixir")
    assert refs(pf, "put", "call") == [(33, "Shop.Store", "Shop.Inventory.add")]
    assert refs(pf, "count", "call") == [(34, "S", "Shop.Inventory.add")]
    assert refs(pf, "debug", "call") == [(32, "Logger", "Shop.Inventory.add")]
    assert refs(pf, "total", "call") == [(44, "", "Shop.Inventory.price")]  # a pipe
    assert refs(pf, "item_price", "call") == [(43, "", "Shop.Inventory.price")]  # &item_price/1
    assert refs(pf, "price", "call") == [(49, "", "Shop.Inventory.describe")]
    assert refs(pf, "money", "call") == [(49, "", "Shop.Inventory.describe")]
    assert refs(pf, "add", "call") == [(79, "", "Shop.Inventory.restock")]
    assert refs(pf, "Entry", "call") == [
        (70, "", "Shop.Inventory.Entry.key"),
        (74, "", "Shop.Inventory.entries"),
    ]
    assert refs(pf, "Shop.Priced", "inherit") == [(12, "", "Shop.Inventory")]
    # definition heads, field access (item.name) and special forms are not calls
    assert not refs(pf, "new", "call") and not refs(pf, "name", "call")
    assert not refs(pf, "def", "call") and not refs(pf, "quote", "call")


def test_imports() -> None:
    pf = parse("elixir")
    # module names become the file Mix keeps them in (lib/ of the app, or lib/ at the root)
    assert imports(pf) == {
        ("../lib/shop/store", "Shop.Store", "Shop.Store"),
        ("../lib/shop/store", "Shop.Store", "Store"),  # `alias Shop.Store` also binds `Store`
        ("../lib/shop/store", "Shop.Store", "S"),
        ("../lib/shop/format", "Shop.Format", "Shop.Format"),
        ("../lib/shop/format", "Shop.Format", "Format"),
        ("../lib/logger", "Logger", "Logger"),
    }
    nested = parse_source(
        "apps/shop/lib/shop/a.ex", b"alias MyApp.HTTPClient\n", "elixir", "apps.shop.lib.shop.a"
    )
    assert imports(nested) == {
        ("../my_app/http_client", "MyApp.HTTPClient", "MyApp.HTTPClient"),
        ("../my_app/http_client", "MyApp.HTTPClient", "HTTPClient"),
    }


def test_syntax_error_keeps_definitions_around_it() -> None:
    src = b"defmodule A do\n  def ok, do: 1\n  def broken(x) do\n    x +\n  end\n  def after_it, do: 2\nend\n"
    pf = parse_source("broken.ex", src, "elixir", "broken")
    assert pf.has_errors
    # the unfinished body swallows what follows it: after_it is found, nested in broken
    names = [d.name for d in pf.definitions]
    assert all(n in names for n in ["A", "ok", "broken", "after_it"]), names


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    yield from graph_of(tmp_path_factory, "elixir", {
        "lib/shop/inventory.ex": (EX / "inventory.ex").read_text(),
        "lib/shop/store.ex": (EX / "store.ex").read_text(),
    })


# Line 7's `alias Shop.Store` binds both the dotted name (the query captures it as the import's
# name: line 33's fully written `Shop.Store.put()` resolves through it) and its last segment
# (ElixirHooks.extra_aliases: line 19's short `Store.item()`); line 34's `S.count()` resolves
# through line 8's `alias Shop.Store, as: S`.
@pytest.mark.parametrize(
    ("line", "name", "kind", "target", "how"),
    [
        (33, "put", "call", "lib.shop.store.Shop.Store.put", "import"),
        (19, "item", "call", "lib.shop.store.Shop.Store.item", "import"),
        (34, "count", "call", "lib.shop.store.Shop.Store.count", "import"),
        (12, "Shop.Priced", "inherit", "lib.shop.store.Shop.Priced", "package"),
        (7, "Shop.Store", "import", "lib.shop.store.Shop.Store", "import"),
        (44, "total", "call", "lib.shop.inventory.Shop.Inventory.total", "scope"),
        (79, "add", "call", "lib.shop.inventory.Shop.Inventory.add", "scope"),
    ],
)
def test_cross_file_resolution(graph, line, name, kind, target, how) -> None:
    assert resolved(graph, "lib/shop/inventory.ex", line, name, kind) == (target, how)
