"""What differs between languages beyond their tags query, in one place per language.

The parser, the module namer and the resolver ask a language's hooks instead of testing
``language == "python"``: adding a language is a `LanguageSpec` in `languages.py`, a `.scm`
query, and — only where its defaults do not fit — a `LanguageHooks` here.

Size: one small class per language (15 besides the base, most 5-30 lines of data: builtins, comment
markers, module naming) over one base; a module per language would scatter what a reader
compares across languages, and every build imports them all anyway.
"""

from __future__ import annotations

import builtins
import posixpath
import re
from pathlib import PurePosixPath

#: Comment node types of the grammars repoctx parses (tree-sitter names them per grammar).
COMMENT_TYPES = frozenset({
    "comment", "line_comment", "block_comment", "multiline_comment", "documentation_comment",
    "doc_comment", "haddock",
})

#: Comment markers stripped from the start of each line of a doc comment.
DOC_STRIP = re.compile(r"^\s*(?://[/!]?|/\*[*!]?|\*/|\*|#)\s?", re.M)


class LanguageHooks:
    """Defaults: C-family and most languages. Every field is data a subclass may override.

    Plain classes with class attributes, one instance per language, read-only by convention:
    not dataclasses, whose generated methods cost ~1.5 ms per class at import (~20 ms of
    every `index build` for 13 classes nobody constructs with arguments or compares)."""

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
    package_markers: tuple[str, ...] = ()
    #: whether an import that names neither a name nor an alias brings every top-level name
    #: of the module into scope (Bash `source`, Ruby `require`, Haskell `import M`, OCaml
    #: `open M`, a plain Dart import): the parser records it also as a `*` import, which the
    #: resolver searches for bare names before guessing by directory or globally
    bare_imports_bind_all: bool = False
    #: node types a grammar puts beside a definition rather than inside it, that belong to it
    #: (Dart's `function_body` follows its `function_signature`): the definition ends with it
    body_siblings: frozenset[str] = frozenset()
    #: whether `#if`/`#elif`/`#else`/`#endif` may split a construct the grammar cannot parse in
    #: pieces (C#'s `class A : B\n#if NET\n, C\n#endif`): a file that parses with errors is
    #: parsed again as its first branches alone (`parser.first_branches`)
    conditional_compilation: bool = False
    #: how the language writes a package path in names (Perl's `A::B::f`, `A::B->new`): a
    #: reference written so is a reference to `f` on the receiver `A.B`, a module's name
    path_sep: str = ""
    #: receivers that name the package of the file they are written in, whose methods are
    #: its top-level functions (Perl's `$self->m`, `$class->new`, `__PACKAGE__->m`)
    module_receivers: frozenset[str] = frozenset()

    def module_name(self, path: str, packages: frozenset[str]) -> str:
        """Dotted module name of a file: its path without the suffix."""
        # string operations, not PurePosixPath: every file of every build (5x cheaper)
        head, _, base = path.rpartition("/")
        stem = posixpath.splitext(base)[0]
        return f"{head.replace('/', '.')}.{stem}" if head else stem

    def import_ref_name(self, module: str, name: str, alias: str) -> str:
        """The name an import binds, for its `import` reference."""
        return name or alias

    def extra_aliases(self, name: str) -> tuple[str, ...]:
        """More names one import binds to the same target, besides its alias (Elixir's
        `alias A.B` binds `B` and still lets `A.B` be written out): recorded as further
        imports without references of their own."""
        return ()

    def import_alias(self, text: str, module: str) -> str:
        """The name an import without `@import.name` or `@import.alias` binds: the module's
        last path part. ``text`` is the module as written, ``module`` after `import_module`."""
        return module.rsplit("/", 1)[-1]

    def import_module(self, text: str, path: str) -> str:
        """The module an import names, from the text its `@import.module` capture holds
        (quotes and brackets already stripped). Path-style modules (`./util`, `../x`) are
        made relative to the importing file by the resolver; a language whose imports name
        files another way (Ruby's `require_relative "lib/x"`) rewrites them here."""
        return text


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
        head, _, base = path.rpartition("/")
        stem = posixpath.splitext(base)[0]
        parts = [] if stem == "__init__" else [stem]
        parent = head
        while parent and parent in packages:
            parent, _, name = parent.rpartition("/")
            parts.append(name)
        if not parts:  # a root-level __init__.py
            return head.rpartition("/")[2] or "__init__"
        return ".".join(reversed(parts))

    def import_ref_name(self, module: str, name: str, alias: str) -> str:
        return name or module.rsplit(".", 1)[-1]


DEFAULT = LanguageHooks()
PYTHON = PythonHooks()


# ---- lua ----

#: Lua comments: `-- x`, `--- doc` (LDoc), `--[[ block ]]`, `--[==[ block ]==]`.
LUA_DOC_STRIP = re.compile(r"^\s*(?:--\[=*\[-*|\]=*\]|-{2,})\s?", re.M)


class LuaHooks(LanguageHooks):
    doc_strip: re.Pattern[str] = LUA_DOC_STRIP
    builtins: frozenset[str] = frozenset({
        "assert", "collectgarbage", "dofile", "error", "getmetatable", "ipairs", "load",
        "loadfile", "loadstring", "next", "pairs", "pcall", "print", "rawequal", "rawget",
        "rawlen", "rawset", "require", "select", "setmetatable", "tonumber", "tostring", "type",
        "unpack", "xpcall", "module", "setfenv", "getfenv",
        "coroutine", "debug", "io", "math", "os", "package", "string", "table", "utf8", "_G",
        "_ENV", "_VERSION",
    })
    #: `local x = 1` is a variable, `local MAX = 1` a constant
    constants_upper_only: bool = True

    def module_name(self, path: str, packages: frozenset[str]) -> str:
        """What `require` names the file by: `a/b.lua` is `a.b`, `a/init.lua` is `a`, and a
        leading `lua/` (Neovim's runtime path layout) is not part of the name."""
        parts = list(PurePosixPath(path).with_suffix("").parts)
        if len(parts) > 1 and parts[0] == "lua":
            parts = parts[1:]
        if len(parts) > 1 and parts[-1] == "init":
            parts = parts[:-1]
        return ".".join(parts)


LUA = LuaHooks()


# ---- dart ----
def _lib_root(path: str) -> str:
    """The `lib` directory of the package a file is in (its nearest `lib` ancestor), else
    `lib` at the repository root: where `package:` URIs and Mix module names point."""
    parts = PurePosixPath(path).parts[:-1]
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == "lib":
            return "/".join(parts[: i + 1])
    return "lib"


def _relative_to(target: str, path: str) -> str:
    """`target` (a repository path) as a `./`-style path from the directory of `path`."""
    import posixpath

    rel = posixpath.relpath(target, posixpath.dirname(path) or ".")
    return rel if rel.startswith("../") else "./" + rel


class DartHooks(LanguageHooks):
    body_siblings: frozenset[str] = frozenset({"function_body"})
    bare_imports_bind_all: bool = True
    builtins: frozenset[str] = frozenset({
        "print", "identical", "override", "deprecated", "List", "Map", "Set", "Iterable",
        "Future", "Stream", "Duration", "DateTime", "Exception", "Error", "StringBuffer",
    })

    def import_module(self, text: str, path: str) -> str:
        """`dart:core` stays as written; `package:p/a/b.dart` names `lib/a/b.dart` of the
        package the file is in; a relative URI is made `./`-style for the resolver."""
        if text.startswith("dart:"):
            return text
        if text.startswith("package:"):
            rest = text[len("package:"):].split("/", 1)
            return _relative_to(f"{_lib_root(path)}/{rest[1]}", path) if len(rest) == 2 else text
        return text if text.startswith(".") else "./" + text


DART = DartHooks()


# ---- ruby ----


def _below_lib(path: str) -> str:
    """A file's dotted path without its suffix, and without a leading `lib/` (on the load path
    of every Ruby gem and the include path of every Perl distribution)."""
    parts = list(PurePosixPath(path).with_suffix("").parts)
    if len(parts) > 1 and parts[0] == "lib":
        parts = parts[1:]
    return ".".join(parts)

_RUBY_REQUIRE = re.compile(r"^(require_relative|require|load)\b\s*\(?\s*[\"']?([^\"']*)")


class RubyHooks(LanguageHooks):
    bare_imports_bind_all: bool = True
    builtins: frozenset[str] = frozenset({
        # Kernel and Module methods called without a receiver
        "puts", "print", "p", "pp", "format", "sprintf", "printf", "raise", "fail", "loop",
        "lambda", "proc", "block_given?", "catch", "throw", "sleep", "rand", "srand", "gets",
        "binding", "caller", "exit", "abort", "at_exit", "freeze", "frozen?", "warn", "require",
        "require_relative", "load", "autoload", "include", "extend", "prepend", "attr_reader",
        "attr_writer", "attr_accessor", "private", "public", "protected", "private_constant",
        "module_function", "define_method", "alias_method", "respond_to?", "send",
        "public_send", "instance_variable_get", "instance_variable_set", "new", "super",
        # core classes and modules
        "Object", "BasicObject", "Kernel", "Module", "Class", "Comparable", "Enumerable",
        "String", "Symbol", "Integer", "Float", "Numeric", "Array", "Hash", "Range", "Struct",
        "Proc", "Time", "IO", "File", "Dir", "Math", "Set", "JSON", "StandardError",
        "RuntimeError", "ArgumentError", "TypeError", "NameError", "NoMethodError",
        "NotImplementedError", "KeyError", "IndexError", "Exception",
    })

    def module_name(self, path: str, packages: frozenset[str]) -> str:
        """What `require` names the file by: `lib/shop/item.rb` is `shop.item` (`lib/` is on
        the load path of every gem), anything else its path without the suffix."""
        return _below_lib(path)

    def import_module(self, text: str, path: str) -> str:
        """The whole `require "x"` / `require_relative "x"` / `load "x.rb"` call is captured:
        `require` names a file on the load path (`shop/item` is the module `shop.item`),
        `require_relative` one relative to the requiring file."""
        m = _RUBY_REQUIRE.match(text)
        if m is None or not m.group(2):
            return ""
        how, target = m.groups()
        target = target.removesuffix(".rb")
        if how == "require_relative" or target.startswith(("./", "../")):
            import posixpath

            full = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
            if full.startswith("../"):  # outside the repository: leave it path-style
                return target
            return self.module_name(full + ".rb", frozenset())
        return target.replace("/", ".")


RUBY = RubyHooks()


# ---- perl ----

#: Shell and Perl comments; a `#!` line is no documentation.
HASH_DOC_STRIP = re.compile(r"^\s*(?:#!.*|#+)\s?", re.M)


class PerlHooks(LanguageHooks):
    #: `use A::B;` exports its default names (`@EXPORT`) into the package
    bare_imports_bind_all: bool = True
    doc_strip: re.Pattern[str] = HASH_DOC_STRIP
    path_sep: str = "::"
    module_receivers: frozenset[str] = frozenset({"$self", "$class", "__PACKAGE__", "shift"})
    builtins: frozenset[str] = frozenset({
        "abs", "bless", "binmode", "caller", "chdir", "chmod", "chomp", "chop", "chr", "close",
        "closedir", "croak", "confess", "carp", "cluck", "defined", "delete", "die", "do", "each",
        "eof", "eval", "exec", "exists", "exit", "exp", "fileno", "flock", "fork", "getc", "glob",
        "grep", "hex", "index", "int", "join", "keys", "kill", "last", "lc", "lcfirst", "length",
        "local", "localtime", "lock", "log", "lstat", "map", "mkdir", "my", "next", "oct", "open",
        "opendir", "ord", "our", "pack", "pop", "pos", "print", "printf", "push", "quotemeta",
        "rand", "read", "readdir", "readline", "redo", "ref", "rename", "require", "return",
        "reverse", "rindex", "rmdir", "say", "scalar", "seek", "select", "shift", "sleep",
        "sort", "splice", "split", "sprintf", "sqrt", "srand", "stat", "substr", "system",
        "time", "uc", "ucfirst", "umask", "undef", "unlink", "unpack", "unshift", "untie",
        "utime", "values", "wait", "waitpid", "wantarray", "warn", "write", "tie", "tied",
        "SUPER", "__PACKAGE__", "new",
    })

    def module_name(self, path: str, packages: frozenset[str]) -> str:
        """What `use` names the file by: `lib/Shop/Cart.pm` is `Shop::Cart` (`lib/` is on
        every distribution's include path), written `Shop.Cart`; a script keeps its path."""
        return _below_lib(path)

    def import_module(self, text: str, path: str) -> str:
        return text.replace("::", ".")

    def import_alias(self, text: str, module: str) -> str:
        """`use A::B;` binds the package path itself: `A::B::f()` and `A::B->new` name it."""
        return module


PERL = PerlHooks()


# ---- bash ----

#: `$DIR/x.sh`, `${DIR}/x.sh`, `${BASH_SOURCE%/*}/x.sh`, `$(dirname "$0")/x.sh`: the directory
#: of the sourcing script, as scripts find their siblings.
_SCRIPT_DIR_PREFIX = re.compile(r"^(?:\$\w+|\$\{[^}]*\}|\$\(.*\))/+")


class BashHooks(LanguageHooks):
    bare_imports_bind_all: bool = True
    doc_strip: re.Pattern[str] = HASH_DOC_STRIP
    builtins: frozenset[str] = frozenset({
        # bash builtins and keywords-as-commands
        ".", ":", "[", "alias", "bg", "bind", "break", "builtin", "caller", "cd", "command",
        "compgen", "complete", "compopt", "continue", "declare", "dirs", "disown", "echo",
        "enable", "eval", "exec", "exit", "export", "false", "fc", "fg", "getopts", "hash", "help",
        "history", "jobs", "kill", "let", "local", "logout", "mapfile", "popd", "printf", "pushd",
        "pwd", "read", "readarray", "readonly", "return", "set", "shift", "shopt", "source",
        "suspend", "test", "times", "trap", "true", "type", "typeset", "ulimit", "umask",
        "unalias", "unset", "wait",
        # variables the shell sets
        "BASH_SOURCE", "BASH_VERSION", "FUNCNAME", "HOME", "HOSTNAME", "IFS", "LINENO", "OLDPWD",
        "OPTARG", "OPTIND", "PATH", "PIPESTATUS", "PPID", "PWD", "RANDOM", "SECONDS", "SHELL",
        "TMPDIR", "UID", "USER",
    })

    def import_ref_name(self, module: str, name: str, alias: str) -> str:
        """`source ./lib.sh` names the file: the reference carries the path, which the
        resolver finds relative to the script."""
        return module

    def import_module(self, text: str, path: str) -> str:
        """A sourced file relative to the script's directory (`$DIR/lib.sh`, `lib/x.sh`)
        becomes `./lib.sh`; an absolute path or one built from other variables stays as
        written (it is outside the repository or unknowable)."""
        text = _SCRIPT_DIR_PREFIX.sub("./", text, count=1)
        if text.startswith(("/", "~", "$", "./", "../")) or "$" in text:
            return text
        return "./" + text


BASH = BashHooks()


# ---- php ----
class PhpHooks(LanguageHooks):
    bare_imports_bind_all: bool = True
    builtins: frozenset[str] = frozenset({
        "array_filter", "array_key_exists", "array_keys", "array_map", "array_merge",
        "array_reduce", "array_search", "array_slice", "array_sum", "array_values", "count",
        "compact", "define", "defined", "empty", "explode", "implode", "in_array", "intval",
        "is_array", "is_int", "is_null", "is_numeric", "is_string", "isset", "json_decode",
        "json_encode", "max", "min", "number_format", "preg_match", "preg_replace", "printf",
        "round", "sprintf", "str_contains", "str_replace", "strlen", "strtolower", "strtoupper",
        "substr", "trim", "ucfirst", "unset", "usort", "var_dump",
        "ArrayAccess", "ArrayIterator", "Closure", "Countable", "DateTime",
        "DateTimeImmutable", "Exception", "InvalidArgumentException", "Iterator",
        "IteratorAggregate", "JsonSerializable", "RuntimeException", "Stringable", "Throwable",
        "Traversable",
    })

    def import_module(self, text: str, path: str) -> str:
        """`A\\B\\C` (from `use`) is the module `A.B.C`; a file from `require`/`include` (a
        path, `__DIR__ . '/x.php'` captured as `/x.php`) is the module of that file, taken
        relative to the including file."""
        if "/" in text or text.endswith((".php", ".inc", ".phtml")):
            import posixpath

            target = text.lstrip("/")
            full = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
            if full.startswith("../"):  # outside the repository: leave it path-style
                return text
            return self.module_name(full, frozenset())
        return text.lstrip("\\").replace("\\", ".")


PHP = PhpHooks()


# ---- scala ----

#: sbt / Maven source roots: what follows them is the package path.
_JVM_SOURCE_ROOT = re.compile(r"^(?:.*/)?src/(?:main|test|it)/(?:scala(?:-[\w.]+)?|java)/")
#: where the path of `import a.b.{C, D}` / `import a.b._` / `import a.b.*` ends
_SCALA_IMPORT_TAIL = re.compile(r"\s*\.\s*(?:\{|_\s*$|\*\s*$|given\b)")


class ScalaHooks(LanguageHooks):
    def module_name(self, path: str, packages: frozenset[str]) -> str:
        """The path without its suffix, from the sbt/Maven source root on
        (`src/main/scala/com/shop/Item.scala` is `com.shop.Item`)."""
        return ".".join(PurePosixPath(_JVM_SOURCE_ROOT.sub("", path)).with_suffix("").parts)

    def import_module(self, text: str, path: str) -> str:
        """The query hands over the whole declaration. `import a.b.C` names the file `a/b/C`
        (one top-level type per file, named after it, is the convention), so its module is
        `a.b.C`; `import a.b.{C, D}` and `import a.b._` name members of `a.b`."""
        text = re.sub(r"^\s*import\s+", "", text)
        return re.sub(r"\s+", "", _SCALA_IMPORT_TAIL.split(text, maxsplit=1)[0])


SCALA = ScalaHooks()


# ---- elixir ----
def _underscore(segment: str) -> str:
    """Macro.underscore of one alias segment: MyApp -> my_app, HTTPClient -> http_client."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", segment).lower()


class ElixirHooks(LanguageHooks):
    #: `@doc`/`@spec`/`@impl` are module attributes (unary `@` operators) above a definition:
    #: they are read like comments, and `doc_strip` keeps only the text of `@doc`/`@typedoc`
    comment_types: frozenset[str] = COMMENT_TYPES | {"unary_operator"}
    doc_strip: re.Pattern[str] = re.compile(
        r'^\s*(?:@(?!(?:type)?doc\b)\w+.*$|@(?:type)?doc\s+false\s*$'
        r'|@(?:type)?doc\s+(?:~[sS])?(?:"""|")|"""|#\s?)|"\s*$',
        re.M,
    )
    builtins: frozenset[str] = frozenset({
        "is_atom", "is_binary", "is_boolean", "is_function", "is_integer", "is_list", "is_map",
        "is_nil", "is_number", "is_struct", "is_tuple", "length", "map_size", "hd", "tl", "elem",
        "put_elem", "to_string", "inspect", "not", "div", "rem", "abs", "max", "min", "self",
        "send", "spawn", "apply", "struct", "tuple_size", "byte_size", "raise", "throw",
    })

    def import_module(self, text: str, path: str) -> str:
        """`alias MyApp.Store` names a module, not a file: Mix keeps it in
        `lib/my_app/store.ex` of the application the importing file is in."""
        if not text[:1].isupper():
            return text  # an Erlang module (:ets) or an expression
        segments = [_underscore(s) for s in text.split(".")]
        return _relative_to(f"{_lib_root(path)}/{'/'.join(segments)}", path)

    def extra_aliases(self, name: str) -> tuple[str, ...]:
        """`alias MyApp.Store` binds `Store` (the query keeps `MyApp.Store` as the name, which
        fully written calls use)."""
        return (name.rsplit(".", 1)[-1],) if "." in name and name[:1].isupper() else ()


ELIXIR = ElixirHooks()


# ---- csharp ----
#: `///` XML doc comments: the comment markers and the `<summary>`-style wrapper tags go.
CSHARP_DOC_STRIP = re.compile(
    DOC_STRIP.pattern + r"|</?(?:summary|remarks|returns|value|para)>", re.M
)


class CSharpHooks(LanguageHooks):
    doc_strip: re.Pattern[str] = CSHARP_DOC_STRIP
    conditional_compilation: bool = True
    builtins: frozenset[str] = frozenset({
        "nameof", "typeof", "sizeof", "default", "Console", "Math", "String", "Object",
        "Exception", "ArgumentException", "ArgumentNullException", "InvalidOperationException",
        "NotImplementedException", "List", "Dictionary", "HashSet", "IEnumerable", "IList",
        "ICollection", "IDictionary", "IComparable", "IEquatable", "IDisposable", "Task",
        "Func", "Action", "Guid", "DateTime", "TimeSpan", "Nullable", "Span", "StringBuilder",
    })


CSHARP = CSharpHooks()


# ---- kotlin ----
#: Gradle/Maven source roots: `app/src/main/kotlin/com/x/Y.kt` holds package `com.x`.
_KOTLIN_SOURCE_ROOT = re.compile(r"^(?:.*/)?src/(?:main|test|commonMain|jvmMain)/(?:kotlin|java)/")


class KotlinHooks(LanguageHooks):
    builtins: frozenset[str] = frozenset({
        "println", "print", "require", "requireNotNull", "check", "checkNotNull", "error",
        "TODO", "run", "let", "also", "apply", "with", "repeat", "lazy", "listOf",
        "mutableListOf", "arrayListOf", "mapOf", "mutableMapOf", "hashMapOf", "setOf",
        "mutableSetOf", "emptyList", "emptyMap", "emptySet", "arrayOf", "sequenceOf", "maxOf",
        "minOf", "Pair", "Triple", "HashMap", "ArrayList", "HashSet", "StringBuilder",
        "Comparable", "Exception", "IllegalArgumentException", "IllegalStateException",
    })

    def module_name(self, path: str, packages: frozenset[str]) -> str:
        """The path without its suffix, from the source root (`src/main/kotlin/`) down, so
        that a file's module is its package plus its file name."""
        rel = _KOTLIN_SOURCE_ROOT.sub("", path, count=1)
        return ".".join(PurePosixPath(rel).with_suffix("").parts)


KOTLIN = KotlinHooks()


# ---- haskell ----
class HaskellHooks(LanguageHooks):
    bare_imports_bind_all: bool = True
    #: a function's equation follows its type signature: the signature and the Haddock comment
    #: above it are read as its doc, and `doc_strip` drops the signature lines again
    comment_types: frozenset[str] = COMMENT_TYPES | {"signature"}
    doc_strip: re.Pattern[str] = re.compile(
        r"^[a-z_][\w']*(?:\s*,\s*[a-z_][\w']*)*\s*::.*$|^\s+(?:->|=>|::).*$"
        r"|^\s*(?:--+\s?[|^$*]?|\{-+\s?[|^]?|-\})\s?|-\}\s*$",
        re.M,
    )

    def module_name(self, path: str, packages: frozenset[str]) -> str:
        """`src/Data/Inventory.hs` is module `Data.Inventory`: the source directories above
        the capitalised module path (src/, app/, lib/, test/) are not part of it."""
        parts = list(PurePosixPath(path).with_suffix("").parts)
        start = len(parts) - 1
        while start > 0 and parts[start - 1][:1].isupper():
            start -= 1
        return ".".join(parts[start:])


HASKELL = HaskellHooks()


# ---- ocaml ----
class OCamlHooks(LanguageHooks):
    bare_imports_bind_all: bool = True
    #: `(** doc *)` and `(* comment *)`
    doc_strip: re.Pattern[str] = re.compile(r"^\s*\(\*\*?\s?|\s*\*\)\s*$|^\s*\*\s?", re.M)
    builtins: frozenset[str] = frozenset({
        "List", "Array", "String", "Hashtbl", "Printf", "Format", "Option", "Result", "Seq",
        "Buffer", "Bytes", "Char", "Int", "Float", "Fun", "Map", "Set", "Stdlib", "print_endline",
        "print_string", "failwith", "invalid_arg", "ignore", "fst", "snd", "raise", "not", "ref",
    })

    def module_name(self, path: str, packages: frozenset[str]) -> str:
        """`lib/inventory.ml` (and its `.mli`) is module `Inventory`: OCaml names a
        compilation unit after its file, wherever the build puts it."""
        stem = PurePosixPath(path).stem
        return stem[:1].upper() + stem[1:]


OCAML = OCamlHooks()


# ---- hcl ----
class HclHooks(LanguageHooks):
    #: Terraform's built-in functions: a call to one is `builtin`, never a guess at a
    #: repository definition of the same name (a Python `def file()` elsewhere)
    builtins: frozenset[str] = frozenset({
        "abs", "ceil", "floor", "log", "max", "min", "parseint", "pow", "signum", "chomp",
        "endswith", "format", "formatlist", "indent", "join", "lower", "regex", "regexall",
        "replace", "split", "startswith", "strcontains", "strrev", "substr", "templatestring",
        "title", "trim", "trimprefix", "trimsuffix", "trimspace", "upper", "alltrue", "anytrue",
        "chunklist", "coalesce", "coalescelist", "compact", "concat", "contains", "distinct",
        "element", "flatten", "index", "keys", "length", "list", "lookup", "map", "matchkeys",
        "merge", "one", "range", "reverse", "setintersection", "setproduct", "setsubtract",
        "setunion", "slice", "sort", "sum", "transpose", "values", "zipmap", "base64decode",
        "base64encode", "base64gzip", "csvdecode", "jsondecode", "jsonencode", "textdecodebase64",
        "textencodebase64", "urlencode", "yamldecode", "yamlencode", "abspath", "dirname",
        "pathexpand", "basename", "file", "fileexists", "fileset", "filebase64", "templatefile",
        "formatdate", "plantimestamp", "timeadd", "timecmp", "timestamp", "base64sha256",
        "base64sha512", "bcrypt", "filebase64sha256", "filebase64sha512", "filemd5", "filesha1",
        "filesha256", "filesha512", "md5", "rsadecrypt", "sha1", "sha256", "sha512", "uuid",
        "uuidv5", "cidrhost", "cidrnetmask", "cidrsubnet", "cidrsubnets", "can", "issensitive",
        "nonsensitive", "sensitive", "tobool", "tolist", "tomap", "tonumber", "toset", "tostring",
        "try", "type", "ephemeralasnull"
    })


HCL = HclHooks()


# ---- zig ----
class ZigHooks(LanguageHooks):
    builtins: frozenset[str] = frozenset({"std", "builtin", "root"})

    def import_module(self, text: str, path: str) -> str:
        """`@import("item.zig")` names a file beside the importing one: `./item` for the
        resolver; `@import("std")` and other package names stay as they are (external)."""
        if text.endswith(".zig"):
            stem = text[: -len(".zig")]
            return stem if stem.startswith(("./", "../")) else f"./{stem}"
        return text


ZIG = ZigHooks()


# ---- julia ----
class JuliaHooks(LanguageHooks):
    #: a docstring is the string literal just above a definition
    comment_types: frozenset[str] = COMMENT_TYPES | {"string_literal", "line_comment"}
    #: `include("item.jl")` pastes the file in: its names are in scope
    bare_imports_bind_all: bool = True
    builtins: frozenset[str] = frozenset({
        "println", "print", "push!", "pop!", "append!", "length", "size", "sum", "map",
        "filter", "error", "throw", "string", "isempty", "haskey", "get", "collect", "zeros",
        "ones", "Vector", "Dict", "Int", "Float64", "String", "Any", "Nothing", "Bool", "IO",
        "include", "typeof", "convert", "show", "eltype", "first", "last", "sort", "unique",
    })

    def import_module(self, text: str, path: str) -> str:
        """`include("item.jl")` names a file beside the including one: `./item`; `using X`
        and `import X` name packages and stay as they are."""
        if text.endswith(".jl"):
            stem = text[: -len(".jl")]
            return stem if stem.startswith(("./", "../")) else f"./{stem}"
        return text


JULIA = JuliaHooks()
