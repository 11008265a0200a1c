"""Tags queries for the non-Python languages, run through the real parser on fixture files."""

from __future__ import annotations

from pathlib import Path

import pytest
import tree_sitter as ts

from indexer.models import Definition, ParsedFile, Reference
from indexer.parse.languages import LANGUAGES, query_source, ts_language
from indexer.parse.parser import parse_source

FIXTURES = Path(__file__).parent / "fixtures" / "languages"

FILES = {
    "javascript": "javascript/shapes.js",
    "typescript": "typescript/store.ts",
    "tsx": "tsx/panel.tsx",
    "go": "go/store.go",
    "rust": "rust/shapes.rs",
    "java": "java/Inventory.java",
    "c": "c/buffer.c",
    "cpp": "cpp/shapes.cpp",
    "ruby": "ruby/inventory.rb",
    "php": "php/Inventory.php",
    "csharp": "csharp/Inventory.cs",
    "kotlin": "kotlin/Inventory.kt",
    "swift": "swift/Inventory.swift",
    "scala": "scala/Inventory.scala",
    "bash": "bash/deploy.sh",
    "lua": "lua/inventory.lua",
    "dart": "dart/inventory.dart",
    "elixir": "elixir/inventory.ex",
    "haskell": "haskell/Inventory.hs",
    "ocaml": "ocaml/inventory.ml",
    "ocaml_interface": "ocaml/inventory.mli",
    "hcl": "hcl/main.tf",
    "zig": "zig/inventory.zig",
    "julia": "julia/Shop.jl",
    "perl": "perl/Cart.pm",
}


def parse(language: str) -> ParsedFile:
    rel = FILES[language]
    return parse_source(rel, (FIXTURES / rel).read_bytes(), language, Path(rel).stem)


def defn(pf: ParsedFile, qualname: str, kind: str | None = None) -> Definition:
    found = [d for d in pf.definitions if d.qualname == qualname and kind in (None, d.kind)]
    assert found, f"no definition {qualname!r}: {[d.qualname for d in pf.definitions]}"
    return found[0]


def check_def(
    pf: ParsedFile, qualname: str, kind: str, line: int, signature: str, doc: str = ""
) -> None:
    d = defn(pf, qualname, kind)
    assert (d.name, d.kind, d.span.start_line, d.signature, d.doc) == (
        qualname.rsplit(".", 1)[-1],
        kind,
        line,
        signature,
        doc,
    )


def refs(pf: ParsedFile, name: str, kind: str) -> list[tuple[int, str, str]]:
    """(line, receiver, enclosing qualname) of each reference to ``name`` of ``kind``."""

    def enclosing(r: Reference) -> str:
        return pf.definitions[r.enclosing].qualname if r.enclosing >= 0 else ""

    return [
        (r.line, r.receiver, enclosing(r))
        for r in pf.references
        if r.name == name and r.kind == kind
    ]


def imports(pf: ParsedFile) -> set[tuple[str, str, str]]:
    return {(i.module, i.name, i.alias) for i in pf.imports}


@pytest.mark.parametrize("language", sorted(set(LANGUAGES) - {"python"}))
def test_query_compiles_and_fixture_parses_cleanly(language: str) -> None:
    query = ts.Query(ts_language(language), query_source(language))
    assert query.pattern_count > 0
    pf = parse(language)
    assert not pf.has_errors
    assert len(pf.definitions) >= 7


def test_tsx_query_is_typescript_plus_jsx() -> None:
    # one copy: tsx.scm includes typescript.scm and adds only the JSX patterns
    tsx = query_source("tsx")
    assert query_source("typescript") in tsx
    assert "; @include typescript.scm" not in tsx
    assert "jsx_opening_element" in tsx.split(query_source("typescript"), 1)[1]


def test_a_query_that_includes_itself_is_refused() -> None:
    from indexer.parse import languages

    with pytest.raises(ValueError, match="includes itself"):
        languages._query_text("tsx.scm", ("typescript.scm",))


def test_javascript() -> None:
    pf = parse("javascript")
    assert pf.doc == "Shapes and a registry for them."
    check_def(
        pf,
        "MAX_SHAPES",
        "constant",
        13,
        "const MAX_SHAPES = 100;",
        "Maximum number of shapes a registry holds.",
    )
    check_def(pf, "Shape", "class", 16, "class Shape", "Base class for all shapes.")
    check_def(pf, "Shape.count", "field", 17, "static count = 0")
    check_def(pf, "Shape.area", "method", 25, "area()", "Area in square units.")
    check_def(pf, "Circle", "class", 35, "class Circle extends Shape", "A circle.")
    check_def(pf, "Circle.constructor", "method", 36, "constructor(radius)")
    check_def(pf, "square", "function", 51, "function square(x)", "Squares a number.")
    check_def(
        pf,
        "makeShape",
        "function",
        56,
        "const makeShape = (spec) => {",
        "Builds a shape from a plain object.",
    )
    check_def(pf, "loadAll", "function", 68, "function loadAll(file)")
    assert defn(pf, "Registry.add").parent == pf.definitions.index(defn(pf, "Registry"))
    # require() binds an import, not a constant
    assert not [d for d in pf.definitions if d.name == "fs"]

    assert refs(pf, "area", "call") == [(30, "this", "Shape.describe")]
    assert refs(pf, "describe", "call") == [
        (46, "super", "Circle.describe"),
        (58, "shape", "makeShape"),
    ]
    assert refs(pf, "square", "call") == [(42, "", "Circle.area")]
    assert refs(pf, "Circle", "call") == [(57, "", "makeShape")]  # new Circle()
    assert refs(pf, "log", "call") == [(58, "util", "makeShape")]
    assert refs(pf, "join", "call") == [(69, "path", "loadAll")]
    assert refs(pf, "Shape", "inherit") == [(35, "", "Circle")]
    assert refs(pf, "Emitter", "inherit") == [(62, "", "Registry")]
    assert not refs(pf, "require", "call")

    assert imports(pf) == {
        ("events", "EventEmitter", "Emitter"),
        ("path", "path", "path"),
        ("./util.js", "", "util"),
        ("./polyfill.js", "", "polyfill.js"),
        ("./helpers.js", "helper", "helper"),
        ("./more.js", "*", "*"),
        ("fs", "", "fs"),
    }


def test_typescript() -> None:
    pf = parse("typescript")
    check_def(
        pf,
        "DEFAULT_TTL",
        "constant",
        7,
        "const DEFAULT_TTL: number = 60;",
        "Default time-to-live in seconds.",
    )
    check_def(
        pf,
        "Serializable",
        "interface",
        10,
        "interface Serializable",
        "Things that can be serialised.",
    )
    check_def(
        pf,
        "Serializable.serialize",
        "method",
        12,
        "serialize(): string",
        "Returns the serialised form.",
    )
    check_def(pf, "Serializable.version", "field", 13, "readonly version?: number")
    check_def(pf, "Key", "type", 21, "type Key = string | number;", "Keys the store accepts.")
    check_def(pf, "Level", "enum", 24, "enum Level", "How loudly to log.")
    check_def(pf, "Level.Info", "constant", 26, "Info = 2")
    check_def(pf, "Codec", "namespace", 29, "namespace Codec")
    check_def(
        pf,
        "BaseStore",
        "class",
        36,
        "abstract class BaseStore<T> implements Serializable",
        "Base for all stores.",
    )
    check_def(pf, "BaseStore.get", "method", 44, "abstract get(key: Key): T | undefined")
    check_def(
        pf, "BaseStore.serialize", "method", 47, "serialize(): string", "Serialises all entries."
    )
    check_def(
        pf, "BaseStore.items", "field", 37, "protected items: Map<Key, StoreEntry<T>> = new Map()"
    )
    # a field holding an arrow function is a method
    check_def(pf, "MemoryStore.onEvict", "method", 53, "private onEvict = (key: Key): void => {")
    check_def(
        pf,
        "MemoryStore.put",
        "method",
        62,
        "put(key: Key, value: T, ttl: number = DEFAULT_TTL): void",
    )
    check_def(
        pf,
        "createStore",
        "function",
        73,
        "function createStore<T>(backend: Backend): MemoryStore<T>",
        "Makes an in-memory store.",
    )
    check_def(
        pf,
        "systemClock",
        "function",
        77,
        "const systemClock = (): Clock => ({ now: () => Date.now() });",
    )

    assert refs(pf, "flush", "call") == [(64, "this", "MemoryStore.put")]
    assert refs(pf, "write", "call") == [(68, "this.backend", "MemoryStore.flush")]
    assert refs(pf, "debug", "call") == [(54, "log", "MemoryStore.onEvict")]
    assert refs(pf, "MemoryStore", "call") == [(74, "", "createStore")]
    assert refs(pf, "Serializable", "inherit") == [(16, "", "Versioned"), (36, "", "BaseStore")]
    assert refs(pf, "BaseStore", "inherit") == [(52, "", "MemoryStore")]
    assert (40, "", "BaseStore.constructor") in refs(pf, "Backend", "type")
    assert refs(pf, "Clock", "type") == [(41, "", "BaseStore.constructor"), (77, "", "systemClock")]
    assert (37, "", "BaseStore.items") in refs(pf, "StoreEntry", "type")

    assert imports(pf) == {
        ("./backend", "Backend", "Backend"),
        ("./backend", "Entry", "StoreEntry"),
        ("./clock", "Clock", "Clock"),
        ("./log", "", "log"),
    }


def test_tsx() -> None:
    pf = parse("tsx")
    check_def(pf, "PanelProps", "interface", 7, "interface PanelProps", "Props for the panel.")
    check_def(
        pf,
        "Panel",
        "function",
        13,
        "function Panel({ title, onClose }: PanelProps)",
        "A titled panel with a close button.",
    )
    check_def(pf, "Counter.render", "method", 24, "render()")
    # JSX: components are calls, lower-case tags are not
    assert refs(pf, "Button", "call") == [(18, "", "Panel")]
    assert refs(pf, "Card", "call") == [(16, "ui", "Panel")]
    assert refs(pf, "Panel", "call") == [(25, "", "Counter.render")]
    assert not refs(pf, "h2", "call")
    assert refs(pf, "format", "call") == [(25, "this", "Counter.render")]
    assert refs(pf, "Component", "inherit") == [(23, "React", "Counter")]
    assert (13, "", "Panel") in refs(pf, "PanelProps", "type")
    assert ("react", "useState", "useState") in imports(pf)


def test_go() -> None:
    pf = parse("go")
    assert pf.doc == "Package store keeps entries in memory."
    check_def(
        pf,
        "MaxEntries",
        "constant",
        11,
        "const MaxEntries = 100",
        "MaxEntries caps the size of a store.",
    )
    check_def(pf, "defaultName", "constant", 13, 'var defaultName = "mem"')
    check_def(pf, "Entry", "struct", 16, "type Entry struct {", "Entry is one stored value.")
    check_def(pf, "Entry.Key", "field", 17, "Key string")
    check_def(
        pf, "Backend", "interface", 22, "type Backend interface {", "Backend persists entries."
    )
    check_def(pf, "Backend.Write", "method", 23, "Write(e Entry) error")
    check_def(pf, "Level", "type", 33, "type Level int", "Level says how loudly to log.")
    check_def(
        pf,
        "NewStore",
        "function",
        36,
        "func NewStore(b Backend) *Store",
        "NewStore makes an empty store.",
    )
    check_def(
        pf,
        "Put",
        "method",
        41,
        "func (s *Store) Put(key string, value int) error",
        "Put adds an entry and flushes it.",
    )
    check_def(pf, "flush", "method", 47, "func (s *Store) flush(e Entry) error")

    assert refs(pf, "flush", "call") == [(44, "s", "Put")]
    assert refs(pf, "Write", "call") == [(49, "s.Backend", "flush")]
    assert refs(pf, "ToLower", "call") == [(42, "str", "Put")]
    assert refs(pf, "Entry", "call") == [(42, "", "Put")]  # composite literal
    assert refs(pf, "Backend", "inherit") == [(28, "", "Store")]  # embedded field
    assert (41, "", "Put") in refs(pf, "Store", "type")  # the receiver type
    assert not refs(pf, "string", "type")  # builtin types are left out

    assert imports(pf) == {
        ("fmt", "", "fmt"),
        ("strings", "", "str"),
        ("example.com/app/log", "", "log"),
    }


def test_go_grouped_declarations() -> None:
    src = b"package p\n\ntype (\n\t// A doc\n\tA struct{ x int }\n\tB = int\n)\n\nconst (\n\tZ = 1\n)\n"
    pf = parse_source("p.go", src, "go", "p")
    got = [(d.qualname, d.kind, d.span.start_line, d.doc) for d in pf.definitions]
    assert got == [
        ("A", "struct", 5, "A doc"),
        ("A.x", "field", 5, ""),
        ("B", "type", 6, ""),
        ("Z", "constant", 10, ""),
    ]


def test_rust() -> None:
    pf = parse("rust")
    check_def(
        pf,
        "MAX_SHAPES",
        "constant",
        7,
        "pub const MAX_SHAPES: usize = 100;",
        "Largest number of shapes a registry holds.",
    )
    check_def(pf, "GREETING", "constant", 9, 'static GREETING: &str = "hi";')
    check_def(pf, "Area", "trait", 12, "pub trait Area", "Something with an area.")
    check_def(pf, "Area.area", "method", 14, "fn area(&self) -> f64;", "The area in square units.")
    check_def(pf, "Circle", "struct", 19, "pub struct Circle", "A circle around a centre point.")
    check_def(pf, "Circle.centre", "field", 20, "pub centre: Point")
    check_def(pf, "Kind", "enum", 25, "pub enum Kind", "Kinds of shape.")
    check_def(pf, "Kind.Round", "constant", 26, "Round")
    check_def(pf, "Registry", "type", 30, "pub type Registry = HashMap<String, Circle>;")
    impls = [d for d in pf.definitions if d.kind == "impl"]
    assert [(d.name, d.span.start_line, d.signature) for d in impls] == [
        ("Circle", 32, "impl Circle"),
        ("Circle", 43, "impl Area for Circle"),
        ("Circle", 49, "impl Show for Circle"),
    ]
    check_def(
        pf,
        "Circle.new",
        "method",
        34,
        "pub fn new(centre: Point, radius: f64) -> Self",
        "Makes a circle.",
    )
    check_def(pf, "Circle.diameter", "method", 38, "fn diameter(&self) -> f64")
    assert defn(pf, "Circle.area").parent == pf.definitions.index(impls[1])
    check_def(pf, "square", "function", 56, "fn square(x: f64) -> f64", "Squares a number.")
    check_def(pf, "util", "module", 60, "pub mod util")
    check_def(pf, "util.make", "function", 61, "pub fn make() -> super::Circle")
    check_def(pf, "shout", "macro", 66, "macro_rules! shout {")

    assert refs(pf, "diameter", "call") == [(45, "self", "Circle.area")]
    assert refs(pf, "square", "call") == [(45, "", "Circle.area")]
    assert refs(pf, "write", "call") == [(51, "", "Circle.fmt")]  # macro
    assert refs(pf, "new", "call") == [(62, "super::Circle", "util.make")]
    assert refs(pf, "origin", "call") == [(62, "crate::geometry::Point", "util.make")]
    assert refs(pf, "Area", "inherit") == [(43, "", "Circle")]
    assert refs(pf, "Show", "inherit") == [(49, "", "Circle")]
    assert refs(pf, "Formatter", "type") == [(50, "fmt", "Circle.fmt")]
    assert (34, "", "Circle.new") in refs(pf, "Point", "type")
    assert not refs(pf, "Self", "type")

    assert imports(pf) == {
        ("std::collections", "HashMap", "HashMap"),
        ("std::fmt", "", "fmt"),
        ("std::fmt", "Display", "Show"),
        ("crate::geometry", "Point", "Point"),
    }


def test_java() -> None:
    pf = parse("java")
    assert pf.doc == "Inventory of stocked items."
    check_def(pf, "Priced", "interface", 13, "interface Priced", "Something that can be priced.")
    check_def(pf, "Priced.price", "method", 15, "int price();", "Price in cents.")
    check_def(pf, "Stock", "enum", 19, "enum Stock", "How an item is stocked.")
    check_def(pf, "Stock.IN_STOCK", "constant", 20, "IN_STOCK")
    check_def(pf, "Stock.available", "method", 23, "boolean available()")
    check_def(
        pf,
        "Inventory",
        "class",
        29,
        "public class Inventory extends BaseStore implements Priced, Comparable<Inventory>",
        "Keeps the items of one shop.",
    )
    check_def(
        pf,
        "Inventory.MAX_ITEMS",
        "constant",
        31,
        "public static final int MAX_ITEMS = 500;",
        "Most items one inventory holds.",
    )
    check_def(
        pf, "Inventory.items", "field", 33, "private final List<Item> items = new ArrayList<>();"
    )
    check_def(pf, "Inventory.Inventory", "method", 35, "public Inventory(String name)")
    check_def(
        pf,
        "Inventory.add",
        "method",
        40,
        "public boolean add(Item item)",
        "Adds an item unless the inventory is full.",
    )
    check_def(pf, "Inventory.price", "method", 49, "@Override public int price()")
    check_def(pf, "Inventory.Entry", "class", 63, "static class Entry")
    check_def(pf, "Inventory.Entry.key", "field", 64, "String key;")

    assert refs(pf, "add", "call") == [(44, "this.items", "Inventory.add")]
    assert refs(pf, "log", "call") == [(45, "", "Inventory.add")]
    assert refs(pf, "price", "call") == [
        (53, "item", "Inventory.price"),
        (60, "", "Inventory.compareTo"),
        (60, "other", "Inventory.compareTo"),
    ]
    assert refs(pf, "ArrayList", "call") == [(33, "", "Inventory.items")]
    assert refs(pf, "BaseStore", "inherit") == [(29, "", "Inventory")]
    assert refs(pf, "Priced", "inherit") == [(29, "", "Inventory")]
    assert refs(pf, "Comparable", "inherit") == [(29, "", "Inventory")]
    assert (40, "", "Inventory.add") in refs(pf, "Item", "type")

    assert imports(pf) == {
        ("java.util", "ArrayList", "ArrayList"),
        ("java.util", "List", "List"),
        ("java.util.function", "*", "*"),
        ("java.lang.Math", "max", "max"),
        ("com.example.shop.model", "Item", "Item"),
    }


def test_c() -> None:
    pf = parse("c")
    assert pf.doc == "Growable byte buffers."
    check_def(
        pf, "BUF_INITIAL", "macro", 7, "#define BUF_INITIAL 64", "Initial capacity of a new buffer."
    )
    check_def(pf, "BUF_MAX", "macro", 8, "#define BUF_MAX(a, b) ((a) > (b) ? (a) : (b))")
    check_def(pf, "kGrowthFactor", "constant", 10, "static const int kGrowthFactor = 2;")
    check_def(pf, "buffer", "struct", 13, "struct buffer", "A growable byte buffer.")
    check_def(pf, "buffer.len", "field", 15, "size_t len;")
    check_def(pf, "buffer_t", "type", 19, "typedef struct buffer buffer_t;")
    check_def(pf, "buf_status", "enum", 22, "enum buf_status", "Result codes.")
    check_def(pf, "buf_status.BUF_NOMEM", "constant", 24, "BUF_NOMEM = -1")
    check_def(pf, "buf_mode", "enum", 27, "typedef enum { MODE_READ, MODE_WRITE } buf_mode;")
    check_def(pf, "word", "union", 29, "union word")
    check_def(pf, "buf_new", "function", 37, "buffer_t *buf_new(void)", "Makes an empty buffer.")
    check_def(
        pf,
        "buf_append",
        "function",
        43,
        "int buf_append(buffer_t *b, const char *src, size_t n)",
        "Appends n bytes, growing as needed.",
    )
    grow = [(d.kind, d.span.start_line) for d in pf.definitions if d.name == "buf_grow"]
    assert grow == [("function", 34), ("function", 52)]  # prototype and definition

    assert refs(pf, "buf_grow", "call") == [(44, "", "buf_append")]
    assert refs(pf, "memcpy", "call") == [(47, "", "buf_append")]
    assert refs(pf, "BUF_MAX", "call") == [(53, "", "buf_grow")]  # macro call
    assert (43, "", "buf_append") in refs(pf, "buffer_t", "type")
    assert not refs(pf, "size_t", "type")

    assert imports(pf) == {
        ("stdlib.h", "", "stdlib.h"),
        ("string.h", "", "string.h"),
        ("buffer.h", "", "buffer.h"),
    }


def test_c_typedef_struct_takes_typedef_name() -> None:
    src = b"typedef struct node {\n  struct node *next;\n  int v;\n} node_t;\n"
    pf = parse_source("n.h", src, "c", "n")
    assert [(d.qualname, d.kind) for d in pf.definitions] == [
        ("node_t", "struct"),
        ("node_t.next", "field"),
        ("node_t.v", "field"),
    ]


def test_c_declarations_inside_include_guard() -> None:
    src = b"#ifndef X_H\n#define X_H\n/* Frees it. */\nvoid x_free(int *p);\nstruct x { int a; };\n#endif\n"
    pf = parse_source("x.h", src, "c", "x")
    got = [(d.qualname, d.kind, d.doc) for d in pf.definitions]
    assert got == [
        ("X_H", "macro", ""),
        ("x_free", "function", "Frees it."),
        ("x", "struct", ""),
        ("x.a", "field", ""),
    ]


def test_cpp() -> None:
    pf = parse("cpp")
    check_def(pf, "SHAPES_VERSION", "macro", 6, "#define SHAPES_VERSION 3")
    check_def(pf, "shapes", "namespace", 10, "namespace shapes")
    check_def(
        pf,
        "shapes.kMaxShapes",
        "constant",
        13,
        "constexpr int kMaxShapes = 100;",
        "Largest number of shapes a scene holds.",
    )
    check_def(pf, "shapes.Shape", "class", 16, "class Shape", "Anything with an area.")
    check_def(
        pf,
        "shapes.Shape.area",
        "method",
        20,
        "virtual double area() const = 0;",
        "The area in square units.",
    )
    check_def(pf, "shapes.Shape.name", "method", 21, "std::string name() const")
    check_def(pf, "shapes.Shape.~Shape", "method", 18, "virtual ~Shape() = default;")
    check_def(pf, "shapes.Shape.id_", "field", 24, "int id_;")
    check_def(pf, "shapes.Color", "enum", 27, "enum class Color")
    check_def(pf, "shapes.Color.Green", "constant", 27, "Green")
    check_def(pf, "shapes.Style", "struct", 29, "struct Style")
    check_def(
        pf,
        "shapes.Circle",
        "class",
        35,
        "class Circle : public Shape, private geo::Tracked",
        "A circle around a point.",
    )
    check_def(pf, "shapes.Circle.Circle", "method", 37, "explicit Circle(double r) : radius_(r)")
    check_def(pf, "shapes.Circle.scaled", "method", 42, "double scaled(double k) const")
    # template: span and doc from the template_declaration around the function
    square = defn(pf, "shapes.square")
    assert (square.span.start_line, square.signature, square.doc) == (
        51,
        "T square(T x)",
        "Squares a number.",
    )
    out_of_class = defn(pf, "shapes.area")
    assert (out_of_class.span.start_line, out_of_class.signature) == (
        46,
        "double Circle::area() const",
    )

    assert refs(pf, "scaled", "call") == [(39, "this", "shapes.Circle.diameter")]
    assert refs(pf, "square", "call") == [(47, "", "shapes.area")]
    assert refs(pf, "make_unique", "call") == [(57, "std", "shapes.make_circle")]
    assert refs(pf, "area", "call") == [(58, "c", "shapes.make_circle")]
    assert refs(pf, "log", "call") == [(59, "geo", "shapes.make_circle")]
    assert refs(pf, "Shape", "inherit") == [(35, "", "shapes.Circle")]
    assert refs(pf, "Tracked", "inherit") == [(35, "geo", "shapes.Circle")]
    assert refs(pf, "unique_ptr", "type") == [(56, "std", "shapes.make_circle")]
    assert (57, "", "shapes.make_circle") in refs(pf, "Circle", "type")

    assert imports(pf) == {
        ("vector", "", "vector"),
        ("memory", "", "memory"),
        ("geometry/point.h", "", "point.h"),
        ("std", "vector", "vector"),
    }


BROKEN = {
    "javascript": (
        "function ok() {}\nfunction broken() {\n  let = = 1;\n}\nclass After {}\n",
        ["ok", "broken", "After"],
    ),
    "typescript": (
        "function ok(): void {}\nfunction broken() { let x: = ; }\ninterface After { a: number }\n",
        ["ok", "broken", "After"],
    ),
    "tsx": (
        "function ok() { return <div/>; }\nfunction broken() { let x = ); }\nclass After {}\n",
        ["ok", "broken", "After"],
    ),
    "go": (
        "package p\n\nfunc ok() {}\n\nfunc broken() {\n\tx := := 1\n}\n\ntype After struct{}\n",
        ["ok", "broken", "After"],
    ),
    "rust": (
        "fn ok() {}\nfn broken() {\n    let x = ;\n}\nstruct After;\n",
        ["ok", "broken", "After"],
    ),
    "java": (
        "class A {\n  void ok() {}\n  void broken() { int x = ; }\n  void after() {}\n}\n",
        ["A", "A.ok", "A.broken", "A.after"],
    ),
    "c": (
        "int ok(void) { return 0; }\nint broken(void) { int x = ; }\nstruct after { int a; };\n",
        ["ok", "broken", "after"],
    ),
    "cpp": (
        "int ok() { return 0; }\nint broken() { int x = ; }\nclass After { int a; };\n",
        ["ok", "broken", "After"],
    ),
}


@pytest.mark.parametrize("language", sorted(BROKEN))
def test_syntax_error_keeps_definitions_around_it(language: str) -> None:
    src, expected = BROKEN[language]
    pf = parse_source(f"broken.{language}", src.encode(), language, "broken")
    assert pf.has_errors
    qualnames = [d.qualname for d in pf.definitions]
    assert all(q in qualnames for q in expected), qualnames


# Gaps in indexer/parse/parser.py (not in the queries); strict, so they flag when the parser is fixed.
def test_declaration_name_is_not_a_type_reference() -> None:
    # `interface Serializable` (line 10) names a definition; only the uses are references
    assert refs(parse("typescript"), "Serializable", "type") == [
        (16, "", "Versioned"),
        (36, "", "BaseStore"),
    ]


def test_import_reference_named_after_alias() -> None:
    pf = parse("javascript")
    names = {r.name for r in pf.references if r.kind == "import"}
    assert {"util", "polyfill.js", "fs"} <= names
