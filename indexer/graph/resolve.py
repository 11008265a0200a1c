"""Resolve references to definitions, each edge with how it was resolved and a confidence.

Order: enclosing scope and `self`/`this` members; module scope; what the file imports
(following imports and package re-exports); the same directory; a unique global name.
An ambiguous name keeps its candidates with split confidence instead of guessing one.

Size: the strategies call one another (a receiver resolves as a bare name, an import follows
re-exports, a member search walks bases) over one lazily filled SymbolTable; split, each part
would need all the others.
"""

from __future__ import annotations

import posixpath
import sqlite3
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from indexer.models import CLASS_KINDS
from indexer.parse.languages import TEXT_FORMATS, hooks, is_text_format

SELF_NAMES = frozenset({"self", "this", "cls", "Self"})
MAX_CANDIDATES = 5
_MAX_DEPTH = 5
_CALLABLE_KINDS = frozenset({"function", "method", "class", "struct", "macro"})
_TYPE_KINDS = CLASS_KINDS | {"type", "class"}
#: What an attribute guess may name.
_MEMBER_KINDS = ("method", "function", "field")
_MEMBER_KINDS_SQL = ",".join(f"'{k}'" for k in _MEMBER_KINDS)


class Sym(NamedTuple):
    id: int
    file_id: int
    parent_id: int | None
    kind: str
    name: str


class FileInfo(NamedTuple):
    id: int
    path: str
    module: str
    language: str


class Imp(NamedTuple):
    module: str
    name: str
    alias: str


@dataclass(frozen=True, slots=True)
class Resolution:
    target_id: int | None
    resolution: str  # scope | self | import | link | package | global | attribute | ambiguous | external | builtin | unresolved
    confidence: float
    candidates: tuple[tuple[int, float], ...] = ()


_UNRESOLVED = Resolution(None, "unresolved", 0.0)
#: The text formats as an SQL list (names of the registry: no quoting needed).
_TEXT_FORMATS_SQL = ",".join(f"'{name}'" for name in sorted(TEXT_FORMATS))


@dataclass
class SymbolTable:
    """Symbols, files and imports, looked up lazily through SQLite and cached.
    `preload()` fills every cache in a few queries for full builds."""

    conn: sqlite3.Connection
    _by_name: dict[str, list[Sym]] = field(default_factory=dict)
    _by_id: dict[int, Sym] = field(default_factory=dict)
    _files: dict[int, FileInfo] = field(default_factory=dict)
    _module_file: dict[str, int | None] = field(default_factory=dict)
    _imports: dict[int, dict[str, list[Imp]]] = field(default_factory=dict)
    _bases: dict[int, list[int]] = field(default_factory=dict)
    _module_sym: dict[int, int | None] = field(default_factory=dict)
    _by_path: dict[str, int | None] = field(default_factory=dict)
    _where: dict[tuple, list[Sym]] = field(default_factory=dict)  # see by_name_where
    preloaded: bool = False

    def preload(self) -> None:
        mod_candidates: dict[str, list[FileInfo]] = defaultdict(list)
        text_files: set[int] = set()
        for row in self.conn.execute("SELECT id, path, module, language FROM files WHERE module IS NOT NULL"):
            f = FileInfo(*row)
            self._files[f.id] = f
            self._by_path[f.path] = f.id
            mod_candidates[f.module].append(f)
            if is_text_format(f.language):
                text_files.add(f.id)
        self._module_file = {m: _prefer_source(fs) for m, fs in mod_candidates.items()}
        by_name: dict[str, list[Sym]] = defaultdict(list)
        for row in self.conn.execute("SELECT id, file_id, parent_id, kind, name FROM symbols"):
            s = Sym(*row)
            self._by_id[s.id] = s
            if s.kind == "module":
                self._module_sym[s.file_id] = s.id
            if s.file_id not in text_files:  # see by_name
                by_name[s.name].append(s)
        self._by_name = dict(by_name)
        imports: dict[int, dict[str, list[Imp]]] = defaultdict(lambda: defaultdict(list))
        for fid, module, name, alias in self.conn.execute(
            "SELECT file_id, module, name, alias FROM imports"
        ):
            imports[fid][alias].append(Imp(module, name, alias))
        self._imports = {k: dict(v) for k, v in imports.items()}
        self.preloaded = True

    def load_bases(self) -> None:
        """Cache resolved inheritance edges (call after inherit references are resolved)."""
        bases: dict[int, list[int]] = defaultdict(list)
        for enc, target in self.conn.execute(
            "SELECT enclosing_id, target_id FROM refs WHERE kind = 'inherit' AND target_id IS NOT NULL"
        ):
            bases[enc].append(target)
        self._bases = dict(bases)
        self._bases_loaded = True

    # -- lookups -----------------------------------------------------------------------
    def by_name(self, name: str) -> list[Sym]:
        """Definitions in code named ``name``. The sections, keys and targets of docs and
        configs (`indexer.parse.textfiles`) are never what a name in code refers to, so they are not
        candidates; links reach those files through `file_at`."""
        hit = self._by_name.get(name)
        if hit is None:
            if self.preloaded:
                return []
            hit = [
                Sym(*row)
                for row in self.conn.execute(
                    "SELECT s.id, s.file_id, s.parent_id, s.kind, s.name FROM symbols s "
                    "JOIN files f ON f.id = s.file_id WHERE s.name = ? "
                    f"AND f.language NOT IN ({_TEXT_FORMATS_SQL})",
                    [name],
                )
            ]
            self._by_name[name] = hit
        return hit

    def by_name_where(self, name: str, cond: str, params: list, limit: int) -> list[Sym]:
        """The first ``limit`` of ``by_name(name)`` meeting ``cond`` (SQL on ``s``), in its
        order (by id): a few rows, not every definition of `__init__` (thousands, ~8 ms)."""
        key = (name, cond, *params, limit)
        hit = self._where.get(key)
        if hit is None:
            hit = self._where[key] = [
                Sym(*row)
                for row in self.conn.execute(
                    "SELECT s.id, s.file_id, s.parent_id, s.kind, s.name FROM symbols s "
                    "JOIN files f ON f.id = s.file_id WHERE s.name = ? AND f.language NOT IN "
                    f"({_TEXT_FORMATS_SQL}) AND ({cond}) ORDER BY s.id LIMIT ?",
                    [name, *params, limit],
                )
            ]
        return hit

    def has_name(self, name: str) -> bool:  # by_name(name) answers from memory
        return self.preloaded or name in self._by_name

    def sym(self, sym_id: int) -> Sym | None:
        hit = self._by_id.get(sym_id)
        if hit is None and not self.preloaded:
            row = self.conn.execute(
                "SELECT id, file_id, parent_id, kind, name FROM symbols WHERE id = ?", [sym_id]
            ).fetchone()
            if row:
                hit = self._by_id[sym_id] = Sym(*row)
        return hit

    def file(self, file_id: int) -> FileInfo | None:
        hit = self._files.get(file_id)
        if hit is None and not self.preloaded:
            row = self.conn.execute(
                "SELECT id, path, module, language FROM files WHERE id = ?", [file_id]
            ).fetchone()
            if row:
                hit = self._files[file_id] = FileInfo(*row)
        return hit

    def module_file(self, module: str) -> int | None:
        if module in self._module_file or self.preloaded:
            return self._module_file.get(module)
        rows = [
            FileInfo(*r)
            for r in self.conn.execute(
                "SELECT id, path, module, language FROM files WHERE module = ?", [module]
            )
        ]
        self._module_file[module] = _prefer_source(rows)
        return self._module_file[module]

    def file_at(self, path: str) -> int | None:
        """The id of the indexed file at ``path`` (relative to the root), or None."""
        if path in self._by_path or self.preloaded:
            return self._by_path.get(path)
        row = self.conn.execute(
            "SELECT id FROM files WHERE path = ? AND module IS NOT NULL", [path]
        ).fetchone()
        self._by_path[path] = row[0] if row else None
        return self._by_path[path]

    def module_symbol(self, file_id: int) -> int | None:
        if file_id in self._module_sym or self.preloaded:
            return self._module_sym.get(file_id)
        row = self.conn.execute(
            "SELECT id FROM symbols WHERE file_id = ? AND kind = 'module'", [file_id]
        ).fetchone()
        self._module_sym[file_id] = row[0] if row else None
        return self._module_sym[file_id]

    def imports(self, file_id: int) -> dict[str, list[Imp]]:
        hit = self._imports.get(file_id)
        if hit is None:
            hit = {}
            if not self.preloaded:
                acc: dict[str, list[Imp]] = defaultdict(list)
                for module, name, alias in self.conn.execute(
                    "SELECT module, name, alias FROM imports WHERE file_id = ?", [file_id]
                ):
                    acc[alias].append(Imp(module, name, alias))
                hit = dict(acc)
            self._imports[file_id] = hit
        return hit

    def bases(self, class_id: int) -> list[int]:
        hit = self._bases.get(class_id)
        if hit is None:
            if getattr(self, "_bases_loaded", False):
                return []
            hit = [
                r[0]
                for r in self.conn.execute(
                    "SELECT target_id FROM refs WHERE enclosing_id = ? AND kind = 'inherit' "
                    "AND target_id IS NOT NULL",
                    [class_id],
                )
            ]
            self._bases[class_id] = hit
        return hit


def _prefer_source(files: list[FileInfo]) -> int | None:
    """One file per module: code over a doc or config of the same name (`setup.py` over
    `setup.cfg`), a `.py` over its `.pyi` stub, then the shortest path."""
    if not files:
        return None
    return min(files, key=lambda f: (is_text_format(f.language), f.path.endswith(".pyi"),
                                     len(f.path), f.path)).id


class Resolver:
    """Resolves references of one file at a time against a SymbolTable."""

    def __init__(self, table: SymbolTable) -> None:
        self.t = table
        self._guesses: dict[str, Resolution] = {}

    # -- entry point ------------------------------------------------------------------
    def resolve(
        self, file_id: int, name: str, kind: str, receiver: str, enclosing_id: int | None
    ) -> Resolution:
        info = self.t.file(file_id)
        lang = info.language if info else ""
        if kind == "import":
            return self._resolve_import(file_id, name, receiver)
        if kind == "link":
            return self._resolve_link(info, receiver)
        if not receiver:
            return self._bare(file_id, name, kind, enclosing_id, lang)
        if receiver in hooks(lang).module_receivers and info is not None:
            # Perl's `$self->m` / `__PACKAGE__->m`: m among the subs of this file's package
            hit = self._lookup_in_module(info.module, name, 0)
            if hit is not None:
                return Resolution(hit, "self", 0.9)
            return self._attribute_guess(name, kind)
        if receiver in SELF_NAMES or receiver == "super":
            cls = self._enclosing_class(enclosing_id)
            if cls is not None:
                hit = self._member(cls, name, skip_self=receiver == "super")
                if hit is not None:
                    return Resolution(hit, "self", 1.0 if receiver != "super" else 0.95)
            return self._attribute_guess(name, kind)
        if receiver != "?":
            base = self._dotted(file_id, receiver.replace("::", ".").replace("->", "."), enclosing_id, lang)
            if base is not None:
                target, how, conf = base
                if target is None:  # the receiver is external (an imported library)
                    return Resolution(None, "external", 0.0)
                hit = self._member_of(target, name)
                if hit is not None:
                    return Resolution(hit, how, round(conf * 0.95, 3))
                sym = self.t.sym(target)
                if sym is not None and sym.kind == "module":
                    # a module we index lacks the name (a C extension fills it in, e.g.
                    # `os.listdir` from posix): guessing a same-named method elsewhere is wrong
                    return Resolution(None, "external", 0.0)
        return self._attribute_guess(name, kind)

    # -- strategies -------------------------------------------------------------------
    def _bare(
        self, file_id: int, name: str, kind: str, enclosing_id: int | None, lang: str
    ) -> Resolution:
        cands = self.t.by_name(name)
        scope = enclosing_id
        first = True
        while scope is not None:
            s = self.t.sym(scope)
            if s is None:
                break
            # Python class bodies do not enclose their methods' names.
            if first or not (s.kind in CLASS_KINDS and not hooks(lang).class_body_encloses):
                for c in cands:
                    if c.parent_id == scope:
                        return Resolution(c.id, "scope", 1.0)
            first = False
            scope = s.parent_id
        top = [c for c in cands if c.file_id == file_id and c.parent_id is None and c.kind != "module"]
        if top:
            return Resolution(top[-1].id, "scope", 1.0)
        imp = self._via_imports(file_id, name)
        if imp is not None:
            return imp
        if name in hooks(lang).builtins:
            return Resolution(None, "builtin", 0.0)
        return self._nearby_or_global(file_id, name, kind, cands)

    def _nearby_or_global(self, file_id: int, name: str, kind: str, cands: list[Sym]) -> Resolution:
        wanted = _TYPE_KINDS if kind in ("inherit", "type") else _CALLABLE_KINDS if kind == "call" else None
        top = [
            c for c in cands
            if c.parent_id is None and c.kind != "module" and (wanted is None or c.kind in wanted)
        ]
        if not top:
            return _UNRESOLVED
        info = self.t.file(file_id)
        here = posixpath.dirname(info.path) if info else ""
        near = [c for c in top if (f := self.t.file(c.file_id)) and posixpath.dirname(f.path) == here]
        if near:
            return _pick(near, "package", 0.8)
        return _pick(top, "global", 0.6)

    def _via_imports(self, file_id: int, name: str) -> Resolution | None:
        imports = self.t.imports(file_id)
        for imp in imports.get(name, ()):
            target = self._import_target(file_id, imp)
            if target is not None:
                return Resolution(target, "import", 0.95 if imp.name else 1.0)
        if name in imports:
            return Resolution(None, "external", 0.0)
        for imp in imports.get("*", ()):
            hit = self._lookup_in_module(self._module_of(file_id, imp.module), name, 0)
            if hit is not None:
                return Resolution(hit, "import", 0.8)
        return None

    def _resolve_import(self, file_id: int, name: str, module: str) -> Resolution:
        if module:  # from module import name
            hit = self._lookup_in_module(self._module_of(file_id, module), name, 0)
        else:
            imports = self.t.imports(file_id)
            mods = [i.module for imps in imports.values() for i in imps if not i.name]
            full = next((m for m in mods if m.rsplit(".", 1)[-1] == name or m == name), name)
            fid = self.t.module_file(self._module_of(file_id, full))
            hit = self.t.module_symbol(fid) if fid is not None else None
        return Resolution(hit, "import", 1.0) if hit is not None else Resolution(None, "external", 0.0)

    def _resolve_link(self, info: FileInfo | None, target: str) -> Resolution:
        """A link or a path in a doc or config (`indexer.parse.textfiles`): the module symbol of the
        file it names, relative to the linking file, else to the repository root."""
        here = posixpath.dirname(info.path) if info else ""
        tried = [] if target.startswith("/") else [posixpath.normpath(posixpath.join(here, target))]
        tried.append(posixpath.normpath(target.lstrip("/")))
        for path in tried:
            fid = self.t.file_at(path) if not path.startswith("../") else None
            sym = self.t.module_symbol(fid) if fid is not None else None
            if sym is not None:
                return Resolution(sym, "link", 1.0)
        return _UNRESOLVED

    def _import_target(self, file_id: int, imp: Imp) -> int | None:
        module = self._module_of(file_id, imp.module)
        if imp.name:
            return self._lookup_in_module(module, imp.name, 0)
        fid = self.t.module_file(module)
        return self.t.module_symbol(fid) if fid is not None else None

    def _module_of(self, file_id: int, module: str) -> str:
        """Path-style modules (`./util`, `../x`) become dotted names relative to the file."""
        if not module.startswith(".") or ("/" not in module and module not in (".", "..")):
            return module
        info = self.t.file(file_id)
        here = posixpath.dirname(info.path) if info else ""
        norm = posixpath.normpath(posixpath.join(here, module))
        stem = posixpath.splitext(norm)[0] if "." in posixpath.basename(norm) else norm
        dotted = stem.replace("/", ".")
        if self.t.module_file(dotted) is None and self.t.module_file(dotted + ".index") is not None:
            return dotted + ".index"
        return dotted

    def _lookup_in_module(self, module: str, name: str, depth: int) -> int | None:
        if depth > _MAX_DEPTH or not module:
            return None
        fid = self.t.module_file(module)
        if fid is not None:
            for c in self.t.by_name(name):
                if c.file_id == fid and c.parent_id is None and c.kind != "module":
                    return c.id
            imports = self.t.imports(fid)
            for imp in imports.get(name, ()):  # a re-export: `from .impl import name`
                target = (
                    self._lookup_in_module(imp.module, imp.name, depth + 1)
                    if imp.name
                    else self._module_symbol_of(imp.module)
                )
                if target is not None:
                    return target
        sub = self._module_symbol_of(f"{module}.{name}")
        if sub is not None:
            return sub
        if fid is not None:
            for imp in self.t.imports(fid).get("*", ()):
                hit = self._lookup_in_module(imp.module, name, depth + 1)
                if hit is not None:
                    return hit
        return None

    def _module_symbol_of(self, module: str) -> int | None:
        fid = self.t.module_file(module)
        return self.t.module_symbol(fid) if fid is not None else None

    def _dotted(
        self, file_id: int, expr: str, enclosing_id: int | None, lang: str
    ) -> tuple[int | None, str, float] | None:
        """Resolve a receiver expression to a module or class symbol. Returns None when it
        cannot, and (None, "external", 0) when it names something imported from outside."""
        parts = expr.split(".")
        imports = self.t.imports(file_id)
        start: int | None = None
        how, conf, rest = "import", 1.0, parts
        for k in range(len(parts), 0, -1):
            alias = ".".join(parts[:k])
            if alias in imports:
                for imp in imports[alias]:
                    start = self._import_target(file_id, imp)
                    if start is not None:
                        break
                if start is None:
                    return (None, "external", 0.0)
                rest = parts[k:]
                break
        else:
            res = self._bare(file_id, parts[0], "attribute", enclosing_id, lang)
            if res.target_id is None:
                return None
            start, how, conf, rest = res.target_id, res.resolution, res.confidence, parts[1:]
        for part in rest:
            start = self._member_of(start, part)
            if start is None:
                return None
        return (start, how, conf)

    def _member_of(self, sym_id: int, name: str) -> int | None:
        s = self.t.sym(sym_id)
        if s is None:
            return None
        if s.kind == "module":
            info = self.t.file(s.file_id)
            return self._lookup_in_module(info.module, name, 0) if info else None
        if s.kind in CLASS_KINDS:
            return self._member(s.id, name)
        return None

    def _member(self, class_id: int, name: str, skip_self: bool = False) -> int | None:
        cands = self.t.by_name(name) if self.t.has_name(name) else None
        seen = {class_id}
        frontier = self.t.bases(class_id) if skip_self else [class_id]
        for _ in range(_MAX_DEPTH + 1):
            nxt: list[int] = []
            for cls in frontier:
                if cands is None:  # the first definition of `name` in `cls`, by id
                    hit = self.t.by_name_where(name, "s.parent_id = ?", [cls], 1)
                    if hit:
                        return hit[0].id
                for c in cands or ():
                    if c.parent_id == cls:
                        return c.id
                for b in self.t.bases(cls):
                    if b not in seen:
                        seen.add(b)
                        nxt.append(b)
            if not nxt:
                return None
            frontier = nxt
        return None

    def _enclosing_class(self, sym_id: int | None) -> int | None:
        while sym_id is not None:
            s = self.t.sym(sym_id)
            if s is None:
                return None
            if s.kind in CLASS_KINDS:
                return s.id
            sym_id = s.parent_id
        return None

    def _attribute_guess(self, name: str, kind: str) -> Resolution:
        hit = self._guesses.get(name)  # the same for every reference to `name` in one pass
        if hit is None:
            if self.t.has_name(name):
                members = [c for c in self.t.by_name(name) if c.kind in _MEMBER_KINDS]
            else:  # more than MAX_CANDIDATES is as good as all of them: nothing to pick
                members = self.t.by_name_where(
                    name, f"s.kind IN ({_MEMBER_KINDS_SQL})", [], MAX_CANDIDATES + 1)
            hit = self._guesses[name] = _pick(members, "attribute", 0.4) if members else _UNRESOLVED
        return hit


def _pick(cands: list[Sym], how: str, conf: float) -> Resolution:
    if len(cands) == 1:
        return Resolution(cands[0].id, how, conf)
    if len(cands) > MAX_CANDIDATES:
        return Resolution(None, "unresolved", 0.0)
    share = round(conf / len(cands), 3)
    return Resolution(None, "ambiguous", share, tuple((c.id, share) for c in cands))


def resolution_rows(resolved: Iterable[tuple[int, Resolution]]) -> Iterator[tuple]:
    """(ref id, target id, resolution, confidence, candidates) rows, as the build writes them."""
    for ref_id, r in resolved:
        yield ref_id, r.target_id, r.resolution, r.confidence, r.candidates


def resolve_refs(
    conn: sqlite3.Connection,
    table: SymbolTable,
    refs: Iterable[tuple[int, int, str, str, str, int | None]],
) -> Iterator[tuple[int, Resolution]]:
    """Resolve (ref_id, file_id, name, kind, receiver, enclosing_id) rows."""
    resolver = Resolver(table)
    for ref_id, file_id, name, kind, receiver, enclosing in refs:
        yield ref_id, resolver.resolve(file_id, name, kind, receiver, enclosing)
