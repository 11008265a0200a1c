"""Languages repoctx parses: file extensions, tree-sitter grammars, tags queries and hooks.

A language is one `LanguageSpec` here, one query under `indexer/queries/`, and — only where
the defaults do not fit — a `LanguageHooks` in `lang_hooks.py`.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from functools import cache
from importlib import resources

import tree_sitter as ts

from .lang_hooks import DEFAULT, PYTHON, LanguageHooks

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
                 "ruby.scm", filenames=("Rakefile", "Gemfile", "Guardfile", "Vagrantfile")),
    LanguageSpec("php", "tree_sitter_php", "language_php", (".php", ".phtml"), "php.scm"),
    LanguageSpec("csharp", "tree_sitter_c_sharp", "language", (".cs",), "csharp.scm"),
    LanguageSpec("kotlin", "tree_sitter_kotlin", "language", (".kt", ".kts"), "kotlin.scm"),
    LanguageSpec("swift", "tree_sitter_swift", "language", (".swift",), "swift.scm"),
    LanguageSpec("scala", "tree_sitter_scala", "language", (".scala", ".sc"), "scala.scm"),
    LanguageSpec("bash", "tree_sitter_bash", "language", (".sh", ".bash", ".zsh"), "bash.scm"),
    LanguageSpec("lua", "tree_sitter_lua", "language", (".lua",), "lua.scm"),
    LanguageSpec("dart", "tree_sitter_dart", "language", (".dart",), "dart.scm"),
    LanguageSpec("elixir", "tree_sitter_elixir", "language", (".ex", ".exs"), "elixir.scm"),
    LanguageSpec("haskell", "tree_sitter_haskell", "language", (".hs",), "haskell.scm"),
    LanguageSpec("ocaml", "tree_sitter_ocaml", "language_ocaml", (".ml",), "ocaml.scm"),
    LanguageSpec("ocaml_interface", "tree_sitter_ocaml", "language_ocaml_interface", (".mli",),
                 "ocaml_interface.scm"),
)

LANGUAGES: dict[str, LanguageSpec] = {spec.name: spec for spec in _SPECS}

_BY_EXT = {ext: spec.name for spec in LANGUAGES.values() for ext in spec.extensions}
_BY_NAME = {fn: spec.name for spec in LANGUAGES.values() for fn in spec.filenames}


def language_for_path(path: str) -> str | None:
    """The language name for a path, or None when repoctx has no grammar for it."""
    # os.path.splitext: 5x cheaper than PurePosixPath on the no-op path (every file, every build)
    lang = _BY_EXT.get(os.path.splitext(path)[1].lower())
    if lang is None and _BY_NAME:
        lang = _BY_NAME.get(path.rsplit("/", 1)[-1])
    return lang


def hooks(name: str) -> LanguageHooks:
    spec = LANGUAGES.get(name)
    return spec.hooks if spec is not None else DEFAULT


def kind_of(name: str) -> str:
    """code | docs | config for a language name ("code" for one repoctx does not know)."""
    spec = LANGUAGES.get(name)
    return spec.kind if spec is not None else "code"


@cache
def ts_language(name: str) -> ts.Language:
    spec = LANGUAGES[name]
    mod = importlib.import_module(spec.module)
    return ts.Language(getattr(mod, spec.function)())


@cache
def query_source(name: str) -> str:
    return resources.files("indexer").joinpath("queries", LANGUAGES[name].query).read_text("utf-8")


@cache
def ts_query(name: str) -> ts.Query:
    return ts.Query(ts_language(name), query_source(name))


@cache
def ts_parser(name: str) -> ts.Parser:
    return ts.Parser(ts_language(name))
