"""Languages repoctx parses: file extensions, tree-sitter grammars and tags queries."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from functools import cache
from importlib import resources

import tree_sitter as ts


@dataclass(frozen=True)
class LanguageSpec:
    name: str
    module: str  # grammar wheel
    function: str  # function in the wheel returning the language pointer
    extensions: tuple[str, ...]
    query: str  # file under indexer/queries/


LANGUAGES: dict[str, LanguageSpec] = {
    spec.name: spec
    for spec in (
        LanguageSpec("python", "tree_sitter_python", "language", (".py", ".pyi"), "python.scm"),
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
    )
}

_BY_EXT = {ext: spec.name for spec in LANGUAGES.values() for ext in spec.extensions}


def language_for_path(path: str) -> str | None:
    """The language name for a path, or None when repoctx has no grammar for it."""
    # os.path.splitext: 5x cheaper than PurePosixPath on the no-op path (every file, every build)
    return _BY_EXT.get(os.path.splitext(path)[1].lower())


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
