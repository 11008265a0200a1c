"""Julia: the tags query and hooks (docstrings above definitions, `include` as an import that
brings a file's names into scope) on a fixture, a broken file, and a real index build."""

from __future__ import annotations

import pytest

from indexer.parse.languages import interpreter_language
from indexer.parse.parser import parse_source
from tests.lang_graph import graph_of, resolved
from tests.test_languages import FIXTURES, check_def, imports, parse, refs


@pytest.fixture(scope="module")
def pf():
    return parse("julia")


def test_definitions(pf) -> None:
    assert pf.doc == "Inventory of stocked items."
    check_def(pf, "Shop", "namespace", 4, "module Shop", "Inventory of stocked items.")
    check_def(pf, "Shop.MAX_ITEMS", "constant", 10, "const MAX_ITEMS = 500",
              "Most items one inventory holds.")
    check_def(pf, "Shop.AbstractStore", "interface", 12, "abstract type AbstractStore end")
    check_def(pf, "Shop.Inventory", "struct", 17, "mutable struct Inventory <: AbstractStore",
              "Keeps the items of one shop.")
    check_def(pf, "Shop.Inventory.items", "field", 18, "items::Vector{Item}")
    check_def(pf, "Shop.add!", "function", 23, "function add!(inv::Inventory, it::Item)",
              "Adds an item unless the inventory is full.")
    check_def(pf, "Shop.total", "function", 30,
              "total(inv::Inventory) = sum(price_of(it) for it in inv.items)")
    check_def(pf, "Shop.logged", "macro", 36, "macro logged(ex)")


def test_references(pf) -> None:
    assert refs(pf, "log_event", "call") == [(26, "", "Shop.add!"), (37, "", "Shop.logged")]
    assert refs(pf, "price_of", "call") == [(30, "", "Shop.total")]
    assert refs(pf, "AbstractStore", "inherit") == [(17, "", "Shop.Inventory")]
    assert (23, "", "Shop.add!") in refs(pf, "Item", "type")
    # a definition's own signature is not a call of it
    assert refs(pf, "add!", "call") == [] and refs(pf, "total", "call") == []


def test_imports(pf) -> None:
    assert {("./item", "", "item"), ("LinearAlgebra", "", "LinearAlgebra")} <= imports(pf)


def test_scripts_by_shebang() -> None:
    assert interpreter_language(b"#!/usr/bin/env julia\n") == "julia"


def test_syntax_error_keeps_definitions_around_it() -> None:
    src = b"function ok()\n  1\nend\nfunction broken(\n  x = = 1\nend\nafter(x) = x\n"
    pf = parse_source("broken.jl", src, "julia", "broken")
    assert pf.has_errors
    assert "ok" in [d.qualname for d in pf.definitions]


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    yield from graph_of(tmp_path_factory, "julia", {
        "src/Shop.jl": (FIXTURES / "julia" / "Shop.jl").read_text(),
        "src/item.jl": (FIXTURES / "julia" / "item.jl").read_text(),
        # a same-named function elsewhere: the include decides
        "scripts/prices.jl": "price_of(x) = x\n",
    })


@pytest.mark.parametrize(("line", "name", "kind", "target", "how"), [
    (30, "price_of", "call", "src.item.price_of", "import"),
    (23, "Item", "type", "src.item.Item", "import"),
    (26, "log_event", "call", "src.Shop.Shop.log_event", "scope"),
    (17, "AbstractStore", "inherit", "src.Shop.Shop.AbstractStore", "scope"),
])
def test_cross_file_resolution(graph, line, name, kind, target, how) -> None:
    assert resolved(graph, "src/Shop.jl", line, name, kind) == (target, how)


def test_methods_of_other_modules_and_where_clauses_are_definitions() -> None:
    src = (b"Base.push!(h::Heap, v) = push!(h.v, v)\nf(x::T) where {T} = x\n"
           b"Base.pop!(h::Heap{T}) where T = 1\n"
           b"function Base.show(io::IO, h::Heap{T}) where T\n  1\nend\n")
    pf = parse_source("heap.jl", src, "julia", "heap")
    assert not pf.has_errors
    assert [(d.qualname, d.span.start_line) for d in pf.definitions] == [
        ("push!", 1), ("f", 2), ("pop!", 3), ("show", 4)]
    # push!(h.v, v) in push!'s own body is a call; its signature is not
    assert [(r.name, r.line) for r in pf.references if r.kind == "call"] == [("push!", 1)]
