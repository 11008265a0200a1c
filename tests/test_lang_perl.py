"""Perl: tags query (packages, subs, `use constant`, calls written `f()`, `A::B::f()`,
`$obj->m`, `Class->new`), `use`/`require` imports, `use parent` inheritance, and cross-file
resolution through `use` in a real build. The grammar wheel (tree-sitter-perl 2.0) hands its
language over as an address, which `languages.ts_language` wraps the way current wheels do."""

from __future__ import annotations

import warnings

import pytest

from indexer.parse.languages import language_for_file, ts_language
from indexer.parse.parser import parse_source
from tests.lang_graph import graph_of, resolved
from tests.test_languages import FIXTURES, check_def, imports, parse, refs


@pytest.fixture(scope="module")
def pf():
    return parse("perl")


def test_the_grammar_loads_without_a_deprecation_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lang = ts_language("perl")
    assert lang.node_kind_count > 100


def test_definitions(pf) -> None:
    assert pf.doc == "Shopping carts: items, totals and the tax on them."
    check_def(pf, "Shop::Cart", "namespace", 2, "package Shop::Cart;",
              "Shopping carts: items, totals and the tax on them.")
    check_def(pf, "MAX_ITEMS", "constant", 11, "use constant MAX_ITEMS => 50;")
    check_def(pf, "new", "function", 14, "sub new", "Creates an empty cart for a customer.")
    check_def(pf, "add", "function", 21, "sub add", "Adds an item unless the cart is full.")
    check_def(pf, "count", "function", 29, "sub count")
    check_def(pf, "total", "function", 35, "sub total", "Sum of the prices, tax included.")
    check_def(pf, "log_change", "function", 47, "sub log_change")
    check_def(pf, "Shop::Cart::Empty", "namespace", 49, "package Shop::Cart::Empty;")
    check_def(pf, "empty", "function", 52, "sub empty", "The cart a new session starts with.")
    # variables inside subs are not definitions
    assert not [d for d in pf.definitions if d.name in ("self", "class", "net", "cart")]


def test_references(pf) -> None:
    # A::B::f() is a call of f on the module A.B; Class->m() a call of m on it
    assert refs(pf, "tax_on", "call") == [(38, "Shop.Tax", "total")]
    assert refs(pf, "new", "call") == [(47, "Shop.Item", "log_change"), (52, "Shop.Cart", "empty")]
    assert refs(pf, "_touch", "call") == [(25, "$self", "add")]
    assert refs(pf, "count", "call") == [(23, "$self", "add")]
    assert refs(pf, "log_change", "call") == [(44, "", "_touch")]
    assert refs(pf, "sum", "call") == [(37, "", "total")]
    assert refs(pf, "Shop::Base", "inherit") == [(6, "", "")]


def test_imports_leave_pragmas_out(pf) -> None:
    assert {i for i in imports(pf) if i[1] != "*"} == {
        ("List.Util", "", "List.Util"),
        ("Shop.Item", "", "Shop.Item"),
        ("Shop.Tax", "", "Shop.Tax"),
    }
    assert not [r for r in pf.references if r.kind == "import" and r.name in ("strict", "warnings")]


def test_syntax_error_keeps_definitions_around_it() -> None:
    src = b"package P;\nsub ok { return 1 }\nsub broken { my $x = ; }}\nsub after { ok() }\n1;\n"
    got = parse_source("lib/P.pm", src, "perl", "P")
    assert got.has_errors
    assert {"ok", "after"} <= {d.name for d in got.definitions}


def test_scripts_are_perl_by_suffix_or_shebang(tmp_path) -> None:
    script = tmp_path / "checkout"
    script.write_text("#!/usr/bin/env perl\nuse strict;\nprint 1;\n")
    assert language_for_file("checkout", str(script)) == "perl"
    assert language_for_file("x.pl", str(tmp_path / "x.pl")) == "perl"


CART = (FIXTURES / "perl/Cart.pm").read_text()
FILES = {
    "lib/Shop/Cart.pm": CART,
    "lib/Shop/Tax.pm": "package Shop::Tax;\nuse strict;\n\nsub tax_on { my ($net) = @_; return $net * 0.2 }\n\n1;\n",
    "lib/Shop/Item.pm": "package Shop::Item;\n\nsub new { my ($class, %a) = @_; return bless {%a}, $class }\n"
                        "sub price { return $_[0]{price} }\n\n1;\n",
    "lib/Shop/Base.pm": "package Shop::Base;\n\nsub describe { return 'cart' }\n\n1;\n",
    "bin/checkout": "#!/usr/bin/env perl\nuse strict;\nuse lib 'lib';\nuse Shop::Cart;\n\n"
                    "my $cart = Shop::Cart->new(owner => 'me');\nprint $cart->total, \"\\n\";\n",
}


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    yield from graph_of(tmp_path_factory, "perl", FILES)


def test_calls_resolve_across_files_through_use(graph) -> None:
    # qualnames in the graph start with the module: lib/Shop/Tax.pm is Shop.Tax
    assert resolved(graph, "lib/Shop/Cart.pm", 38, "tax_on", "call") == ("Shop.Tax.tax_on", "import")
    assert resolved(graph, "lib/Shop/Cart.pm", 47, "new", "call") == ("Shop.Item.new", "import")
    assert resolved(graph, "bin/checkout", 6, "new", "call") == ("Shop.Cart.new", "import")
    assert resolved(graph, "lib/Shop/Cart.pm", 44, "log_change", "call")[0] == "Shop.Cart.log_change"


def test_methods_called_on_self_are_the_subs_of_the_package(graph) -> None:
    assert resolved(graph, "lib/Shop/Cart.pm", 25, "_touch", "call") == ("Shop.Cart._touch", "self")
    assert resolved(graph, "lib/Shop/Cart.pm", 23, "count", "call") == ("Shop.Cart.count", "self")
    # a method on another object is not guessed into this package
    assert resolved(graph, "lib/Shop/Cart.pm", 37, "price", "call")[0] != "Shop.Cart.price"


def test_use_parent_names_the_base_package(graph) -> None:
    target, how = resolved(graph, "lib/Shop/Cart.pm", 6, "Shop::Base", "inherit")
    assert target == "Shop.Base.Shop::Base"


def test_a_call_resolves_to_the_right_file(graph) -> None:
    row = graph.execute(
        "SELECT tf.path FROM refs r JOIN files f ON f.id = r.file_id JOIN symbols t ON t.id = r.target_id "
        "JOIN files tf ON tf.id = t.file_id WHERE f.path = 'bin/checkout' AND r.name = 'new'"
    ).fetchone()
    assert row == ("lib/Shop/Cart.pm",)
