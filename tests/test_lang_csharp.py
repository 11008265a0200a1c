"""C#: the tags query and hooks on a fixture, a broken file, and a real index build."""

from __future__ import annotations

from functools import partial

import pytest

from indexer.parse.parser import parse_source
from tests.lang_graph import graph_of, resolved
from tests.test_languages import FIXTURES, check_def, defn, imports, parse, refs


@pytest.fixture(scope="module")
def pf():
    return parse("csharp")


def test_definitions(pf) -> None:
    assert pf.doc == "Inventory of stocked items."
    # `/// <summary>...</summary>`: the tags are not part of the doc
    check_def(pf, "IPriced", "interface", 12, "public interface IPriced", "Something that can be priced.")
    check_def(pf, "IPriced.Price", "method", 15, "int Price();", "Price in cents.")
    check_def(pf, "Stock", "enum", 19, "public enum Stock", "How an item is stocked.")
    check_def(pf, "Stock.Backorder", "constant", 22, "Backorder = 2")
    check_def(pf, "Slot", "struct", 26, "public struct Slot", "A point in the warehouse.")
    check_def(pf, "Slot.Row", "field", 28, "public int Row;")
    check_def(pf, "Line", "class", 33, "public record Line(string Sku, int Cents);",
              "A line of a receipt.")
    check_def(pf, "Changed", "type", 35, "public delegate void Changed(Item item);")
    check_def(pf, "Inventory", "class", 38,
              "public class Inventory : BaseStore, IPriced, IComparable<Inventory>",
              "Keeps the items of one shop.")
    check_def(pf, "Inventory.MaxItems", "constant", 41, "public const int MaxItems = 500;",
              "Most items one inventory holds.")
    check_def(pf, "Inventory._items", "field", 43,
              "private readonly List<Item> _items = new List<Item>();")
    check_def(pf, "Inventory.Name", "field", 45, "public string Name { get; private set; }")
    check_def(pf, "Inventory.OnChanged", "field", 47, "public event Changed OnChanged;")
    check_def(pf, "Inventory.Inventory", "method", 49, "public Inventory(string name) : base(name)")
    check_def(pf, "Inventory.Add", "method", 55, "public bool Add(Item item)",
              "Adds an item unless the inventory is full.")
    check_def(pf, "Inventory.CompareTo", "method", 73, "public int CompareTo(Inventory other)")
    check_def(pf, "Inventory.From", "method", 76,
              "public static Inventory From(IEnumerable<Item> items)", "Builds an inventory from items.")
    check_def(pf, "Inventory.Entry", "class", 86, "private class Entry")
    check_def(pf, "Inventory.Entry.Key", "field", 88, "public string Key { get; set; }")
    assert defn(pf, "Inventory.Add").parent == pf.definitions.index(defn(pf, "Inventory"))
    # the namespace is not a definition (it spans files): classes are top level
    assert not [d for d in pf.definitions if d.name in ("Shop", "Shop.Inventory")]


def test_references(pf) -> None:
    assert refs(pf, "Add", "call") == [(61, "this._items", "Inventory.Add"), (81, "inventory", "Inventory.From")]
    assert refs(pf, "Log", "call") == [(62, "", "Inventory.Add")]
    assert refs(pf, "Invoke", "call") == [(63, "OnChanged", "Inventory.Add")]  # ?.
    assert refs(pf, "Price", "call") == [
        (69, "i", "Inventory.Price"),
        (73, "", "Inventory.CompareTo"),
        (73, "other", "Inventory.CompareTo"),
    ]
    assert refs(pf, "Minimum", "call") == [(70, "Pricing", "Inventory.Price")]
    assert refs(pf, "Copy", "call") == [(81, "Item", "Inventory.From")]
    assert refs(pf, "Inventory", "call") == [(78, "", "Inventory.From")]  # new Inventory()
    assert refs(pf, "List", "call") == [(43, "", "Inventory._items")]  # new List<Item>()
    assert refs(pf, "BaseStore", "inherit") == [(38, "", "Inventory")]
    assert refs(pf, "IPriced", "inherit") == [(38, "", "Inventory")]
    assert refs(pf, "IComparable", "inherit") == [(38, "", "Inventory")]
    assert refs(pf, "Item", "type") == [
        (35, "", "Changed"),
        (43, "", "Inventory._items"),
        (43, "", "Inventory._items"),
        (55, "", "Inventory.Add"),
        (76, "", "Inventory.From"),
    ]
    assert refs(pf, "Changed", "type") == [(47, "", "Inventory.OnChanged")]
    # namespace names in using directives are not type references
    assert not refs(pf, "Models", "type") and not refs(pf, "Linq", "type")


def test_imports(pf) -> None:
    assert imports(pf) == {
        ("System", "", "System"),
        ("System.Collections.Generic", "", "System.Collections.Generic"),
        ("System.Linq", "", "System.Linq"),
        ("Shop.Models", "", "Shop.Models"),
        ("System.Math", "", "System.Math"),  # using static
        ("Shop.Models.Pricing", "Pricing", "Pricing"),  # using Pricing = Shop.Models.Pricing;
    }


def test_syntax_error_keeps_definitions_around_it() -> None:
    src = b"class A {\n  void Ok() {}\n  void Broken() { int x = ; }\n  void After() {}\n}\n"
    pf = parse_source("broken.cs", src, "csharp", "broken")
    assert pf.has_errors
    assert [d.qualname for d in pf.definitions] == ["A", "A.Ok", "A.Broken", "A.After"]


CONDITIONAL = b"""\
public sealed class ConditionalSink : ILogEventSink, IDisposable
#if FEATURE_ASYNCDISPOSABLE
    , IAsyncDisposable
#endif
{
#if FEATURE_SPAN
    public void Process(ReadOnlySpan<object> values)
#else
    public void Process(object[] values)
#endif
    {
        Emit(values);
    }

#if FEATURE_ASYNCDISPOSABLE
    public ValueTask DisposeAsync() => default;
#endif
}
"""


def test_conditional_compilation_parses_as_its_first_branches() -> None:
    # `#if` inside a base list or around a signature splits what the grammar can parse: the
    # file is parsed again with the later branches blanked, offsets kept
    pf = parse_source("ConditionalSink.cs", CONDITIONAL, "csharp", "Sinks")
    assert not pf.has_errors
    assert [(d.qualname, d.span.start_line, d.span.end_line) for d in pf.definitions] == [
        ("ConditionalSink", 1, 18), ("ConditionalSink.Process", 7, 13),
        ("ConditionalSink.DisposeAsync", 16, 16),
    ]
    assert pf.definitions[0].signature == (
        "public sealed class ConditionalSink : ILogEventSink, IDisposable , IAsyncDisposable")
    assert pf.definitions[1].signature == "public void Process(ReadOnlySpan<object> values)"
    assert refs(pf, "Emit", "call") == [(12, "", "ConditionalSink.Process")]
    assert refs(pf, "IAsyncDisposable", "inherit") == [(3, "", "ConditionalSink")]


def test_first_branches_keeps_offsets_and_blanks_later_and_nested_branches() -> None:
    from indexer.parse.parser import first_branches

    src = b"a\n#if X\n  #if Y\nb\n  #else\nc\n  #endif\n#elif Z\nd\n#else\ne\n#endif\nf\n"
    got = first_branches(src)
    assert len(got) == len(src) and got.count(b"\n") == src.count(b"\n")
    assert got.split() == [b"a", b"b", b"f"]
    # an #if that is never closed: what follows its #else is blank to the end
    assert first_branches(b"x\n#if A\ny\n#else\nz\n").split() == [b"x", b"y"]


def test_a_file_the_first_branches_do_not_mend_keeps_its_own_parse() -> None:
    src = b"class A {\n#if X\n  void Ok() {}\n#endif\n  void Broken() { int x = ; }\n}\n"
    pf = parse_source("broken.cs", src, "csharp", "broken")
    assert pf.has_errors and [d.qualname for d in pf.definitions] == ["A", "A.Ok", "A.Broken"]


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    yield from graph_of(tmp_path_factory, "csharp", {
        # folder = namespace, one class per file
        "Shop/Inventory/Inventory.cs": (FIXTURES / "csharp" / "Inventory.cs").read_text(),
        "Shop/Models/Item.cs": (FIXTURES / "csharp" / "Item.cs").read_text(),
        "Shop/Models/Pricing.cs": (
            "namespace Shop.Models\n{\n    public static class Pricing\n    {\n"
            "        public static int Minimum(object owner) => 100;\n    }\n}\n"
        ),
    }, git=False)  # no git: the tree is walked


def test_cross_file_resolution(graph) -> None:
    ref = partial(resolved, graph, "Shop/Inventory/Inventory.cs")
    # using Pricing = Shop.Models.Pricing;  -> the class in Shop/Models/Pricing.cs
    assert ref(6, "Pricing", "import") == ("Shop.Models.Pricing.Pricing", "import")
    assert ref(70, "Minimum", "call") == ("Shop.Models.Pricing.Pricing.Minimum", "import")
    # `using Shop.Models;` imports a namespace, which binds no file: types it brings in
    # resolve by their unique name (the resolver has no namespace -> files index)
    assert ref(55, "Item", "type") == ("Shop.Models.Item.Item", "global")
    assert ref(81, "Copy", "call") == ("Shop.Models.Item.Item.Copy", "global")
    # within the file
    assert ref(73, "Price", "call") == ("Shop.Inventory.Inventory.Inventory.Price", "scope")
    # new Inventory(...) inside the class: its constructor, the nearest `Inventory` in scope
    assert ref(78, "Inventory", "call") == ("Shop.Inventory.Inventory.Inventory.Inventory", "scope")
