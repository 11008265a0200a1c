"""What differs between languages beyond their tags query, in one place per language.

The parser, the module namer and the resolver ask a language's hooks instead of testing
``language == "python"``: adding a language is a `LanguageSpec` in `languages.py`, a `.scm`
query, and — only where its defaults do not fit — a `LanguageHooks` here.
"""

from __future__ import annotations

import builtins
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

#: Comment node types of the grammars repoctx parses (tree-sitter names them per grammar).
COMMENT_TYPES = frozenset({
    "comment", "line_comment", "block_comment", "multiline_comment", "documentation_comment",
    "doc_comment", "haddock",
})

#: Comment markers stripped from the start of each line of a doc comment.
DOC_STRIP = re.compile(r"^\s*(?://[/!]?|/\*[*!]?|\*/|\*|#)\s?", re.M)


@dataclass(frozen=True)
class LanguageHooks:
    """Defaults: C-family and most languages. Every field is data a subclass may override."""

    #: node types whose text above a definition is its documentation
    comment_types: frozenset[str] = COMMENT_TYPES
    #: comment markers stripped from each line of a doc comment
    doc_strip: re.Pattern[str] = DOC_STRIP
    #: names the language defines itself: a reference to one resolves as `builtin`
    builtins: frozenset[str] = frozenset()
    #: whether a class body's names are in scope inside its methods (Python: no)
    class_body_encloses: bool = True
    #: whether the parser reads this language's imports with its own code (`parser.py`)
    own_imports: bool = False
    #: whether the module docstring / definition docs are string literals in the body
    docstrings: bool = False
    #: whether a `constant` capture must be UPPER_CASE to stay a constant
    constants_upper_only: bool = False
    #: whether query matches must be sorted by pattern (so earlier patterns win); Python's
    #: query never captures one node twice, and skipping the sort is measurable on big trees
    sort_matches: bool = True
    #: file names that make a directory a package (Python's `__init__.py`)
    package_markers: tuple[str, ...] = field(default=())

    def module_name(self, path: str, packages: frozenset[str]) -> str:
        """Dotted module name of a file: its path without the suffix."""
        return ".".join(PurePosixPath(path).with_suffix("").parts)

    def import_ref_name(self, module: str, name: str, alias: str) -> str:
        """The name an import binds, for its `import` reference."""
        return name or alias

    def import_module(self, text: str, path: str) -> str:
        """The module an import names, from the text its `@import.module` capture holds
        (quotes and brackets already stripped). Path-style modules (`./util`, `../x`) are
        made relative to the importing file by the resolver; a language whose imports name
        files another way (Ruby's `require_relative "lib/x"`) rewrites them here."""
        return text


@dataclass(frozen=True)
class PythonHooks(LanguageHooks):
    builtins: frozenset[str] = frozenset(dir(builtins))
    class_body_encloses: bool = False
    own_imports: bool = True
    docstrings: bool = True
    constants_upper_only: bool = True
    sort_matches: bool = False
    package_markers: tuple[str, ...] = ("__init__.py", "__init__.pyi")

    def module_name(self, path: str, packages: frozenset[str]) -> str:
        """Rooted at the topmost package directory above the file, as the interpreter would
        import it."""
        pp = PurePosixPath(path)
        parts = [] if pp.stem == "__init__" else [pp.stem]
        parent = pp.parent
        while str(parent) not in (".", "") and str(parent) in packages:
            parts.append(parent.name)
            parent = parent.parent
        if not parts:  # a root-level __init__.py
            return pp.parent.name or "__init__"
        return ".".join(reversed(parts))

    def import_ref_name(self, module: str, name: str, alias: str) -> str:
        return name or module.rsplit(".", 1)[-1]


DEFAULT = LanguageHooks()
PYTHON = PythonHooks()
