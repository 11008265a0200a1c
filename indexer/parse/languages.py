"""Languages repoctx parses: file extensions, tree-sitter grammars, tags queries and hooks.

A language is one `LanguageSpec` here, one query under `indexer/queries/`, and — only where
the defaults do not fit — a `LanguageHooks` in `lang_hooks.py`.
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass
from functools import cache

import tree_sitter as ts

from indexer.blake2 import blake2b
from indexer.parse.lang_hooks import (
    BASH,
    CSHARP,
    DART,
    DEFAULT,
    ELIXIR,
    HASKELL,
    HCL,
    JULIA,
    KOTLIN,
    LUA,
    OCAML,
    PERL,
    PHP,
    PYTHON,
    RUBY,
    SCALA,
    ZIG,
    LanguageHooks,
)

#: What a file is for: `search --kind` filters on it and the agent prefers code.
KINDS = ("code", "docs", "config")


@dataclass(frozen=True)
class LanguageSpec:
    name: str
    module: str  # grammar wheel
    function: str  # function in the wheel returning the language pointer
    extensions: tuple[str, ...]
    query: str  # file under indexer/queries/
    hooks: LanguageHooks = DEFAULT
    kind: str = "code"
    #: whole file names (no extension to go by): Rakefile, Gemfile...
    filenames: tuple[str, ...] = ()
    #: "tree-sitter": the grammar and query above; "text": cut by `indexer.parse.textfiles` (no
    #: grammar: Markdown by section, configs by key, Makefiles by target...)
    parser: str = "tree-sitter"


_SPECS = (
    LanguageSpec("python", "tree_sitter_python", "language", (".py", ".pyi"), "python.scm", PYTHON),
    LanguageSpec("javascript", "tree_sitter_javascript", "language",
                 (".js", ".mjs", ".cjs", ".jsx"), "javascript.scm"),
    LanguageSpec("typescript", "tree_sitter_typescript", "language_typescript",
                 (".ts", ".mts", ".cts"), "typescript.scm"),
    LanguageSpec("tsx", "tree_sitter_typescript", "language_tsx", (".tsx",), "tsx.scm"),
    LanguageSpec("go", "tree_sitter_go", "language", (".go",), "go.scm"),
    LanguageSpec("rust", "tree_sitter_rust", "language", (".rs",), "rust.scm"),
    LanguageSpec("java", "tree_sitter_java", "language", (".java",), "java.scm"),
    LanguageSpec("c", "tree_sitter_c", "language", (".c", ".h"), "c.scm"),
    LanguageSpec("cpp", "tree_sitter_cpp", "language",
                 (".cc", ".cpp", ".cxx", ".c++", ".hpp", ".hh", ".hxx", ".h++", ".ipp"), "cpp.scm"),
    LanguageSpec("ruby", "tree_sitter_ruby", "language", (".rb", ".rake", ".gemspec", ".ru"),
                 "ruby.scm", RUBY,
                 filenames=("Rakefile", "Gemfile", "Guardfile", "Vagrantfile")),
    LanguageSpec("php", "tree_sitter_php", "language_php", (".php", ".phtml"), "php.scm", PHP),
    LanguageSpec("csharp", "tree_sitter_c_sharp", "language", (".cs",), "csharp.scm", CSHARP),
    LanguageSpec("kotlin", "tree_sitter_kotlin", "language", (".kt", ".kts"), "kotlin.scm", KOTLIN),
    LanguageSpec("swift", "tree_sitter_swift", "language", (".swift",), "swift.scm"),
    LanguageSpec("scala", "tree_sitter_scala", "language", (".scala", ".sc", ".sbt"), "scala.scm", SCALA),
    LanguageSpec("bash", "tree_sitter_bash", "language", (".sh", ".bash", ".zsh", ".bats"), "bash.scm", BASH),
    LanguageSpec("lua", "tree_sitter_lua", "language", (".lua", ".rockspec"), "lua.scm", LUA),
    LanguageSpec("dart", "tree_sitter_dart", "language", (".dart",), "dart.scm", DART),
    LanguageSpec("elixir", "tree_sitter_elixir", "language", (".ex", ".exs"), "elixir.scm",
                 ELIXIR),
    LanguageSpec("haskell", "tree_sitter_haskell", "language", (".hs",), "haskell.scm",
                 HASKELL),
    LanguageSpec("ocaml", "tree_sitter_ocaml", "language_ocaml", (".ml",), "ocaml.scm", OCAML),
    LanguageSpec("ocaml_interface", "tree_sitter_ocaml", "language_ocaml_interface", (".mli",),
                 "ocaml_interface.scm", OCAML),
    LanguageSpec("zig", "tree_sitter_zig", "language", (".zig",), "zig.scm", ZIG),
    LanguageSpec("julia", "tree_sitter_julia", "language", (".jl",), "julia.scm", JULIA),
    LanguageSpec("perl", "tree_sitter_perl", "language", (".pl", ".pm", ".t"), "perl.scm", PERL),
    # Terraform and the other HashiCorp configuration files: infrastructure, searched as config
    LanguageSpec("hcl", "tree_sitter_hcl", "language", (".tf", ".tfvars", ".hcl"), "hcl.scm",
                 HCL, kind="config"),
)

LANGUAGES: dict[str, LanguageSpec] = {spec.name: spec for spec in _SPECS}


def _text(name: str, kind: str, extensions: tuple[str, ...], filenames: tuple[str, ...] = ()):
    return LanguageSpec(name, "", "", extensions, "", kind=kind, filenames=filenames, parser="text")


#: Formats without a grammar, parsed by `indexer.parse.textfiles` (not in LANGUAGES: no grammar,
#: no query). Lock files, vendored trees and large data files are skipped by discovery.
TEXT_FORMATS: dict[str, LanguageSpec] = {spec.name: spec for spec in (
    _text("markdown", "docs", (".md", ".markdown")),
    _text("rst", "docs", (".rst",)),
    _text("text", "docs", (".txt",), ("README", "LICENSE", "LICENCE", "COPYING", "NOTICE", "AUTHORS",
                                       "CONTRIBUTORS", "CHANGELOG", "CHANGES", "HISTORY", "INSTALL")),
    _text("yaml", "config", (".yaml", ".yml")),
    _text("toml", "config", (".toml",)),
    _text("json", "config", (".json",)),
    _text("ini", "config", (".ini", ".cfg"),
          (".editorconfig", ".flake8", ".pylintrc", ".coveragerc", ".gitconfig")),
    _text("dockerfile", "config", (".dockerfile",), ("Dockerfile", "Containerfile")),
    _text("make", "config", (".mk", ".mak"), ("Makefile", "makefile", "GNUmakefile")),
    _text("sql", "code", (".sql",)),
    # Tree-sitter queries (repoctx's own tags queries are .scm), Scheme, Lisps: top-level forms.
    _text("sexp", "code", (".scm", ".ss", ".sld", ".rkt", ".el", ".lisp", ".lsp", ".cl")),
    _text("ignore", "config", (), (".gitignore", ".dockerignore", ".gitattributes", ".npmignore",
                                   ".prettierignore", ".eslintignore", ".hgignore",
                                   ".repoctxignore")),
)}

#: Every language and text format by name.
FORMATS: dict[str, LanguageSpec] = {**TEXT_FORMATS, **LANGUAGES}

_BY_EXT = {ext: spec.name for spec in FORMATS.values() for ext in spec.extensions}
_BY_NAME = {fn: spec.name for spec in FORMATS.values() for fn in spec.filenames}


@cache
def formats_key() -> str:
    """A digest of the tables that name a file's language: a file's language can differ from
    the one it was indexed with only when this does."""
    tables = (sorted(_BY_EXT.items()), sorted(_BY_NAME.items()), sorted(INTERPRETERS.items()))
    return blake2b(repr(tables).encode(), digest_size=16).hexdigest()


def language_for_path(path: str) -> str | None:
    """The language (or text format) name for a path, or None when repoctx cannot parse it."""
    # String operations, not PurePosixPath or os.path.splitext: every file of every build.
    # The suffix is as splitext's: from the last dot, unless only dots come before it.
    name = path.rpartition("/")[2]
    dot = name.rfind(".")
    lang = _BY_EXT.get(name[dot:].lower()) if dot > 0 and name[:dot].strip(".") else None
    if lang is None and _BY_NAME:
        lang = _BY_NAME.get(name)
        if lang is None and name.startswith(("Dockerfile.", "Containerfile.")):
            lang = "dockerfile"  # Dockerfile.dev, Dockerfile.prod
    return lang


def parsable_suffixes() -> frozenset[str]:
    """The suffixes (with the dot) some language or text format takes, as written in lower
    case (what `unparsable_name` compares)."""
    return frozenset(e for e in _BY_EXT if e == e.lower())


def unparsable_name(name: str) -> bool:
    """Whether a file name has a suffix that no language or text format takes: known from the
    name alone, so discovery skips it without a stat. A name without a suffix may be a script
    whose ``#!`` line decides (`language_for_file`), so it is never unparsable here."""
    dot = name.rfind(".")
    if dot <= 0 or not name[:dot].strip("."):
        return False  # no suffix to go by
    return (name[dot:].lower() not in _BY_EXT and name not in _BY_NAME
            and not name.startswith(("Dockerfile.", "Containerfile.")))


#: Programs of a ``#!`` line -> language, for scripts without an extension (``bin/deploy``).
#: Version suffixes are dropped first (python3.11, lua5.4).
INTERPRETERS = {
    "sh": "bash", "bash": "bash", "zsh": "bash", "dash": "bash", "ksh": "bash", "bats": "bash",
    "python": "python", "pypy": "python", "ruby": "ruby", "node": "javascript",
    "nodejs": "javascript", "php": "php", "lua": "lua", "luajit": "lua", "elixir": "elixir",
    "runhaskell": "haskell", "runghc": "haskell", "julia": "julia", "ocaml": "ocaml", "scala": "scala",
    "dart": "dart", "make": "make", "perl": "perl",
}
#: Bytes of a script read for its ``#!`` line.
SHEBANG_BYTES = 256
_VERSION = re.compile(r"[\d.]+$")


def extensionless(path: str) -> bool:
    """Whether ``path``'s name has no suffix to go by (``bin/deploy``, ``.gitignore``)."""
    name = path.rpartition("/")[2]
    dot = name.rfind(".")
    return not (dot > 0 and name[:dot].strip("."))


def interpreter_language(head: bytes) -> str | None:
    """The language of a script from its first bytes: ``#!/bin/sh``, ``#!/usr/bin/env -S
    python3 -u`` -> bash, python; None without a ``#!`` line or for another program."""
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not words:
        return None
    prog = words[0].rpartition("/")[2]
    if prog == "env":  # env [-S] [-i] [NAME=value...] program [args]
        rest = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        if not rest:
            return None
        prog = rest[0].rpartition("/")[2]
    return INTERPRETERS.get(prog) or INTERPRETERS.get(_VERSION.sub("", prog))


def language_for_content(path: str, head: bytes) -> str | None:
    """`language_for_path`, and for a file without a suffix the language of the ``#!`` line
    its content ``head`` starts with (the agent's syntax gate: the text before it is written)."""
    lang = language_for_path(path)
    if lang is None and extensionless(path):
        return interpreter_language(head[: SHEBANG_BYTES + 2])
    return lang


def language_for_file(path: str, abs_path: str) -> str | None:
    """`language_for_path`, and for a file without a suffix the language its ``#!`` line
    names (two bytes read when it has none)."""
    lang = language_for_path(path)
    if lang is not None or not extensionless(path):
        return lang
    try:
        fd = os.open(abs_path, os.O_RDONLY)
    except OSError:
        return None
    try:
        head = os.read(fd, 2)
        if head == b"#!":
            head += os.read(fd, SHEBANG_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    return interpreter_language(head)


def is_text_format(name: str) -> bool:
    """Whether ``name`` is parsed by `indexer.parse.textfiles` (no tree-sitter grammar, no syntax)."""
    return name in TEXT_FORMATS


def hooks(name: str) -> LanguageHooks:
    spec = FORMATS.get(name)
    return spec.hooks if spec is not None else DEFAULT


def kind_of(name: str) -> str:
    """code | docs | config for a language name ("code" for one repoctx does not know)."""
    spec = FORMATS.get(name)
    return spec.kind if spec is not None else "code"


def languages_of_kind(kinds) -> tuple[str, ...]:
    """Every language and text format name whose kind is one of ``kinds``."""
    return tuple(sorted(n for n, spec in FORMATS.items() if spec.kind in set(kinds)))


@cache
def ts_language(name: str) -> ts.Language:
    spec = LANGUAGES[name]
    mod = importlib.import_module(spec.module)
    ptr = getattr(mod, spec.function)()
    if isinstance(ptr, int):  # an older binding (tree-sitter-perl 2.0) returns the address
        ptr = _capsule(ptr)
    return ts.Language(ptr)


def _capsule(address: int) -> object:
    """The ``tree_sitter.Language`` capsule that current bindings return, around the language
    pointer an older binding gives as an int (which tree-sitter takes only with a warning)."""
    import ctypes

    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(address, b"tree_sitter.Language", None)


#: `; @include other.scm` on a line of its own: that query's text in its place, so languages
#: that share most of a query (TSX and TypeScript, OCaml .ml and .mli) keep one copy.
_INCLUDE = re.compile(r"^; @include (\S+\.scm)[ \t]*$", re.M)
#: The queries are package data beside this module, read as plain files: importlib.resources
#: would cost ~10 ms of imports in every build that parses a file (repoctx is never run zipped).
_QUERY_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "queries")


def _query_text(file: str, including: tuple[str, ...] = ()) -> str:
    if file in including:
        raise ValueError(f"query {file} includes itself through {' -> '.join(including)}")
    with open(os.path.join(_QUERY_DIR, file), encoding="utf-8") as fh:
        text = fh.read()
    return _INCLUDE.sub(lambda m: _query_text(m.group(1), (*including, file)), text)


@cache
def query_source(name: str) -> str:
    """The tags query of a language, its `; @include` lines replaced by what they name."""
    return _query_text(LANGUAGES[name].query)


@cache
def ts_query(name: str) -> ts.Query:
    return ts.Query(ts_language(name), query_source(name))


@cache
def ts_parser(name: str) -> ts.Parser:
    return ts.Parser(ts_language(name))
