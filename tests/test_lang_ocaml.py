"""OCaml (.ml and .mli): the tags queries on the fixtures, syntax-error recovery, and
cross-file resolution."""

from __future__ import annotations

import pytest

from indexer.parse.languages import query_source
from indexer.parse.parser import parse_source
from tests.lang_graph import graph_of, resolved
from tests.test_languages import FIXTURES, check_def, defn, imports, parse, refs

ML = FIXTURES / "ocaml"


def _section(src: str, start: str, end: str) -> str:
    return src.split(start, 1)[1].split(end, 1)[0]


def test_interface_query_shares_the_definitions() -> None:
    # one copy: both queries include ocaml_common.scm
    shared = _section(query_source("ocaml"), "; ---- definitions", "; ---- implementation")
    mli = _section(query_source("ocaml_interface"), "; ---- definitions", "; ---- references")
    assert shared.strip() == mli.strip() != ""
    assert "; @include ocaml_common.scm" not in query_source("ocaml") + query_source("ocaml_interface")


def test_implementation_definitions() -> None:
    pf = parse("ocaml")
    assert pf.doc == "Inventory of stocked items."
    check_def(pf, "max_items", "variable", 7, "let max_items = 500", "Most items one inventory holds.")
    check_def(pf, "stock", "type", 10, "type stock =", "How an item is stocked.")
    check_def(pf, "stock.Backorder", "constant", 12, "Backorder of int")
    check_def(pf, "t", "type", 15, "type t = {", "Keeps the items of one shop.")
    check_def(pf, "t.items", "field", 17, "mutable items : Store.item list")
    check_def(pf, "Full", "class", 20, "exception Full of string")
    check_def(pf, "PRICED", "interface", 23, "module type PRICED =", "Something that can be priced.")
    check_def(pf, "PRICED.price", "method", 27, "val price : p -> int", "Price in cents.")
    check_def(pf, "Pricing", "namespace", 31, "module Pricing = struct", "Pricing of inventories.")
    check_def(pf, "Pricing.price", "function", 34, "let price inv =")
    check_def(
        pf, "create", "function", 41, "let create name = { name; items = [] }", "An empty inventory."
    )
    check_def(pf, "add", "function", 44, "let add inv item =", "Adds an item unless the inventory is full.")
    check_def(pf, "total", "function", 59, "let total inv = inv |> Pricing.price")
    assert defn(pf, "Pricing.describe").parent == pf.definitions.index(defn(pf, "Pricing"))


def test_interface_definitions() -> None:
    pf = parse("ocaml_interface")
    assert pf.doc == "Inventory of stocked items."
    check_def(pf, "t", "type", 11, "type t", "Keeps the items of one shop.")
    check_def(pf, "Pricing", "namespace", 23, "module Pricing : PRICED with type p = t",
              "Pricing of inventories.")
    check_def(pf, "create", "function", 26, "val create : string -> t", "An empty inventory.")
    check_def(pf, "add", "function", 29, "val add : t -> Store.item -> unit",
              "Adds an item unless the inventory is full.")
    assert refs(pf, "item", "type") == [(29, "Store", "add"), (33, "", "restock")]
    assert refs(pf, "PRICED", "type") == [(23, "", "Pricing")]
    assert imports(pf) == {("Store", "", "Store")}


def test_references_and_imports() -> None:
    pf = parse("ocaml")
    assert refs(pf, "put", "call") == [(47, "S", "add")]
    assert refs(pf, "price", "call") == [
        (35, "Store", "Pricing.price"),
        (37, "", "Pricing.describe"),
        (59, "Pricing", "total"),  # x |> M.f
    ]
    assert refs(pf, "describe", "call") == [(57, "Pricing", "restock")]
    assert refs(pf, "add", "call") == [(55, "", "restock")]
    assert refs(pf, "count_all", "call") == [(56, "", "restock")]
    assert refs(pf, "item", "type") == [(17, "Store", "t.items"), (50, "Store", "stock_of")]
    assert not refs(pf, "string", "type")
    assert imports(pf) == {("Store", "", "Store"), ("Store", "", "S")}


def test_module_name_is_the_capitalised_stem() -> None:
    from indexer.parse.modules import module_name

    assert module_name("src/lib/inventory.ml", "ocaml", frozenset()) == "Inventory"
    assert module_name("src/lib/inventory.mli", "ocaml_interface", frozenset()) == "Inventory"


def test_syntax_error_keeps_definitions_around_it() -> None:
    src = b"let ok x = x + 1\n\nlet broken = (1 +\n\ntype after = int\n\nlet last y = y\n"
    pf = parse_source("broken.ml", src, "ocaml", "Broken")
    assert pf.has_errors
    names = [d.name for d in pf.definitions]
    assert "ok" in names and "last" in names, names


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    yield from graph_of(tmp_path_factory, "ocaml", {
        "lib/inventory.ml": (ML / "inventory.ml").read_text(),
        "lib/inventory.mli": (ML / "inventory.mli").read_text(),
        "lib/store.ml": (ML / "store.ml").read_text(),
    })


# `M.f` resolves where M is opened or aliased (`open Store`, `module S = Store`): the import
# names the module Store, which is store.ml. A bare name an `open` brings in has no "*" import
# to go by and falls back to the same directory.
@pytest.mark.parametrize(
    ("path", "line", "name", "kind", "target", "how"),
    [
        ("lib/inventory.ml", 47, "put", "call", "Store.put", "import"),  # module S = Store
        ("lib/inventory.ml", 35, "price", "call", "Store.price", "import"),  # open Store
        ("lib/inventory.ml", 17, "item", "type", "Store.item", "import"),
        ("lib/inventory.ml", 56, "count_all", "call", "Store.count_all", "package"),
        ("lib/inventory.ml", 57, "describe", "call", "Inventory.Pricing.describe", "scope"),
        ("lib/inventory.mli", 29, "item", "type", "Store.item", "import"),
    ],
)
def test_cross_file_resolution(graph, path, line, name, kind, target, how) -> None:
    assert resolved(graph, path, line, name, kind) == (target, how)
