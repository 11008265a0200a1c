"""`rename_symbol`: rename a definition at every site the reference graph knows, then verify.

Sites are the definition's name, every reference resolved to it (calls, attribute and type uses,
inheritance) and the imported names of import statements that resolve to it; an aliased use
(`from m import old as o; o()`) keeps its alias. After the write the touched files are
re-indexed and checked: the new name must be defined, and no reference named after the old name
may have lost its target. A failed check puts every file back and says why.
"""

from __future__ import annotations

import keyword
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from indexer import Index, RepoctxError, is_text_format, language_for_path, shown, ts_parser
from retrieval.symbols import find_symbols

from .core import Tool, ToolContext, ToolResult, fail, ok
from .syntax import Replacement
from .writing import FileChange, commit, gate, load_for_edit

#: Import statement node types across the grammars.
_IMPORT_TYPES = frozenset(
    {
        "import_from_statement",
        "import_statement",
        "future_import_statement",
        "import_declaration",
        "use_declaration",
        "import_spec",
    }
)
#: Parts of an import that name the module or the local alias, never the imported symbol.
_NOT_THE_NAME = ("module_name", "alias", "source", "path")
_SKIP_IN_DEFINITION = frozenset({"decorator", "comment", "string", "modifiers", "annotation"})
_IDENT_CHARS = re.compile(rb"[A-Za-z0-9_$]")


def _identifier_nodes(node):
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type.endswith("identifier"):
            yield n
        stack.extend(reversed(n.children))


def _definition_offset(tree, data: bytes, start: int, end: int, old: bytes) -> int | None:
    node = tree.root_node.descendant_for_byte_range(start, max(start, end - 1))
    for cand in (node, node.child_by_field_name("definition") if node else None):
        if cand is None:
            continue
        name = cand.child_by_field_name("name")
        if name is not None and data[name.start_byte : name.end_byte] == old:
            return name.start_byte
    stack = [node] if node is not None else []
    while stack:
        n = stack.pop()
        if n.type in _SKIP_IN_DEFINITION:
            continue
        if n.type.endswith("identifier") and data[n.start_byte : n.end_byte] == old:
            return n.start_byte
        stack.extend(reversed(n.children))
    return None


def _import_offsets(tree, data: bytes, line: int, old: bytes) -> list[int]:
    node = tree.root_node.named_descendant_for_point_range((line - 1, 0), (line - 1, 0))
    while node is not None and node.type not in _IMPORT_TYPES:
        node = node.parent
    if node is None:
        return []
    excluded: list[tuple[int, int]] = []
    stack = [node]
    while stack:
        n = stack.pop()
        for fld in _NOT_THE_NAME:
            child = n.child_by_field_name(fld)
            if child is not None:
                excluded.append((child.start_byte, child.end_byte))
        stack.extend(n.children)
    out = []
    for ident in _identifier_nodes(node):
        if data[ident.start_byte : ident.end_byte] != old:
            continue
        if any(s <= ident.start_byte < e for s, e in excluded):
            continue
        out.append(ident.start_byte)
    return out


def _line_starts(data: bytes) -> list[int]:
    starts = [0]
    i = data.find(b"\n")
    while i >= 0:
        starts.append(i + 1)
        i = data.find(b"\n", i + 1)
    return starts


def _is_word_at(data: bytes, offset: int, word: bytes) -> bool:
    if data[offset : offset + len(word)] != word:
        return False
    before = data[offset - 1 : offset] if offset else b""
    after = data[offset + len(word) : offset + len(word) + 1]
    return not (before and _IDENT_CHARS.match(before)) and not (after and _IDENT_CHARS.match(after))


def _mentions(
    ctx: ToolContext, index: Index, old: str, written: dict[str, bytes]
) -> list[str]:
    """``path:line: text`` for every whole-word use of ``old`` left in the renamed files and in
    the files the lexical index says mention it."""
    term = old.lower().strip("_")
    candidates = dict.fromkeys(written)
    if term:
        candidates.update(dict.fromkeys(index.graph.files_with_phrase(term)))
    pattern = re.compile(rb"(?<![A-Za-z0-9_$])" + re.escape(old.encode()) + rb"(?![A-Za-z0-9_$])")
    out: list[str] = []
    for path in candidates:
        if ctx.workspace.is_hidden(path):
            continue
        data = written.get(path)
        if data is None:
            try:
                data = ctx.workspace.read_bytes(path)
            except (OSError, RepoctxError):
                continue
        for i, line in enumerate(data.split(b"\n"), 1):
            if pattern.search(line):
                out.append(f"{shown(path)}:{i}: {line.decode('utf-8', 'replace').strip()[:120]}")
    return out


def _pick(ctx: ToolContext, index: Index, name: str, kind: str | None):
    hits = [
        s
        for s in find_symbols(index, name, kind, 50)
        if s.kind != "module" and not ctx.workspace.is_hidden(s.path)
    ]
    exact = [
        s for s in hits if s.qualname == name or s.name == name or s.qualname.endswith("." + name)
    ]
    return exact, hits


@dataclass
class _Edits:
    changes: list[FileChange] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "path:line (why)"
    ref_sites: int = 0  # reference sites renamed (the definition not counted)


def rename_symbol(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """Pick the one definition, find its sites through the graph, edit them in memory, gate
    the syntax, write, re-index, verify (undoing everything if verification fails), report."""
    index = ctx.index  # one handle throughout: the checks read the re-indexed rows
    new_name = args["new_name"]
    sym = _target(ctx, index, args["symbol"].strip(), args.get("kind"), new_name)
    if isinstance(sym, ToolResult):
        return sym
    found = index.graph.references_to([sym.id])
    ambiguous = sorted((r.path, r.line, r.kind) for r in found if r.ambiguous)
    edits = _edits(ctx, index, sym, new_name, found)
    if isinstance(edits, ToolResult):
        return edits
    rejected = gate(edits.changes)
    if rejected is not None:
        return rejected
    paths = [c.path for c in edits.changes]
    dangling_before = index.graph.unresolved_named(sym.name, paths)
    outcome = commit(ctx, edits.changes)
    new_qualname = sym.qualname[: len(sym.qualname) - len(sym.name)] + new_name
    problems, resolved_new = _verify(index, sym, new_qualname, paths, dangling_before, outcome)
    if problems:
        for ch in edits.changes:
            ctx.write_bytes(ch.path, ch.old if ch.old is not None else b"")
        ctx.session.reindex(ctx.config)
        return fail(
            f"Rename of {sym.qualname} to {new_name!r} failed verification and was undone: "
            + "; ".join(problems)
            + ".",
            verified=False,
            problems=problems,
        )
    return _report(ctx, index, sym, new_qualname, edits, ambiguous, resolved_new, outcome)


def _target(ctx: ToolContext, index: Index, name: str, kind: str | None, new_name: str):
    """The one definition ``name`` names, if ``new_name`` can replace its name; else the
    ToolResult that says why not."""
    exact, hits = _pick(ctx, index, name, kind)
    if not exact:
        like = ", ".join(s.qualname for s in hits[:8])
        return fail(
            f"No definition is named {name!r}"
            + (f" (similar: {like})" if like else "")
            + " — pass the exact name or qualified name (find_symbol helps)."
        )
    if len(exact) > 1:
        listed = "\n".join(f"  {s.qualname} ({s.kind}) {s.path}:{s.start_line}" for s in exact[:20])
        return fail(
            f"{name!r} names {len(exact)} definitions — pass the qualified name of one of them.",
            listed,
            candidates=[s.qualname for s in exact],
        )
    sym = exact[0]
    old = sym.name
    lang = language_for_path(sym.path)
    if lang is not None and is_text_format(lang):
        return fail(f"{sym.qualname} is a {sym.kind} of {sym.path}, not code — rename renames "
                    "definitions in code; edit the file instead.")
    if not new_name.isidentifier() or (lang == "python" and keyword.iskeyword(new_name)):
        return fail(f"{new_name!r} is not a valid identifier — choose another name.")
    if new_name == old:
        return fail(f"{sym.qualname} is already called {new_name!r}.")
    clash = index.graph.sibling_named(new_name, sym.id, sym.parent_id)
    if clash:
        return fail(
            f"{clash} already exists in the same scope — renaming {sym.qualname} to "
            f"{new_name!r} would shadow it. Choose another name."
        )
    return sym


def _edits(ctx: ToolContext, index: Index, sym, new_name: str, found) -> _Edits | ToolResult:
    """The new bytes of every file to touch: the definition and each resolved reference site
    found by the reference graph (an alias keeps its local name), checked against the text."""
    old = sym.name
    start_byte, end_byte = index.graph.definition_bytes(sym.id)
    refs = sorted((r.path, r.line, r.col, r.kind, r.name) for r in found if not r.ambiguous)
    old_b, new_b = old.encode(), new_name.encode()
    by_file: dict[str, list[tuple[int, str, int]]] = defaultdict(list)  # path -> (line, kind, col)
    by_file.setdefault(sym.path, [])  # the definition's file is always touched
    for path, line, col, kind, ref_name in refs:
        if kind == "link":
            continue  # a doc or config naming the file: not code that uses the name
        if ref_name != old and kind != "import":
            continue  # an alias (`from m import old as o`; `o()`) keeps its local name
        by_file[path].append((line, kind, col))

    edits = _Edits()
    for path in sorted(by_file):
        loaded = load_for_edit(ctx, path)
        data = loaded.data
        lang_here = language_for_path(path)
        tree = ts_parser(lang_here).parse(data) if lang_here and not is_text_format(lang_here) else None
        starts = _line_starts(data)
        offsets: set[int] = set()
        if path == sym.path:
            at_def = _definition_offset(tree, data, start_byte, end_byte, old_b) if tree else None
            if at_def is None:
                return fail(
                    f"Could not find the name {old!r} in the definition at {shown(path)}:"
                    f"{sym.start_line} — the index may be stale; run `repoctx index build`."
                )
            offsets.add(at_def)
        for line, kind, col in by_file[path]:
            if kind == "import":
                found_imports = _import_offsets(tree, data, line, old_b) if tree else []
                if not found_imports:
                    edits.skipped.append(f"{shown(path)}:{line} (import: name not found)")
                offsets.update(found_imports)
                edits.ref_sites += bool(found_imports)
                continue
            if line - 1 >= len(starts):
                edits.skipped.append(f"{shown(path)}:{line} (past the end of the file)")
                continue
            at = starts[line - 1] + col
            if _is_word_at(data, at, old_b):
                offsets.add(at)
                edits.ref_sites += 1
            else:
                edits.skipped.append(f"{shown(path)}:{line} (text differs from the index)")
        if not offsets:
            continue
        ordered = sorted(offsets)
        parts, pos = [], 0
        for at in ordered:
            parts += [data[pos:at], new_b]
            pos = at + len(old_b)
        parts.append(data[pos:])
        repl = tuple(Replacement(at, at + len(old_b), len(new_b)) for at in ordered)
        edits.changes.append(FileChange(path, data, b"".join(parts), repl))
    return edits


def _verify(index: Index, sym, new_qualname: str, paths: list[str], dangling_before, outcome):
    """After writing and re-indexing: (problems, references resolving to the new name)."""
    problems: list[str] = []
    resolved_new = 0
    if outcome.reindex is None:
        problems.append(f"the index could not be updated ({outcome.reindex_error})")
        return problems, resolved_new
    new_id = index.graph.definition_id(new_qualname, sym.kind)
    if new_id is None:
        problems.append(f"{new_qualname} is not defined after the rename")
    dangling = sorted(index.graph.unresolved_named(sym.name, paths) - dangling_before)
    if dangling:
        problems.append(
            f"{len(dangling)} reference(s) to {sym.name!r} no longer resolve: "
            + ", ".join(f"{shown(p)}:{ln}" for p, ln, _ in dangling[:10])
        )
    if new_id is not None:
        resolved_new = index.graph.resolved_reference_count(new_id)
    return problems, resolved_new


def _report(ctx, index: Index, sym, new_qualname, edits: _Edits, ambiguous, resolved_new, outcome):
    old = sym.name
    changes, skipped, ref_sites = edits.changes, edits.skipped, edits.ref_sites
    paths = [c.path for c in changes]
    leftovers = _mentions(ctx, index, old, {c.path: c.new for c in changes})
    elsewhere = [m for m in leftovers if m.split(":", 1)[0] not in paths]
    leftovers = [m for m in leftovers if m.split(":", 1)[0] in paths]
    same_named = []
    if sym.kind == "method":
        same_named = [
            f"{q} ({shown(p)}:{ln})"
            for q, p, ln in index.graph.definitions_named(old, "method", limit=10)
        ]
    lines = [
        f"Renamed {sym.qualname} -> {new_qualname}: {ref_sites + 1} site(s) in "
        f"{len(changes)} file(s) ({', '.join(paths)}). Verified: the new name is defined, "
        f"{resolved_new} reference(s) resolve to it, no reference lost its target, and the "
        "syntax check passed.",
        outcome.note(),
    ]
    if ambiguous:
        lines.append(
            "Not renamed — ambiguous references that may mean this symbol (check them): "
            + ", ".join(f"{shown(p)}:{ln}" for p, ln, _ in ambiguous[:20])
        )
    if skipped:
        lines.append("Skipped sites: " + ", ".join(skipped[:20]))
    if elsewhere:
        lines.append(
            "Check these: the old name appears in files the reference graph does not link to "
            "this symbol (unresolved imports, dynamic uses, strings) — edit them if they mean "
            "it:\n  " + "\n  ".join(elsewhere[:15])
        )
    if leftovers:
        lines.append(
            "The old name still appears as text in the renamed files (comments, strings, other "
            "symbols):\n  " + "\n  ".join(leftovers[:15])
        )
    if same_named:
        lines.append(
            "Other methods with the old name (overrides?) were not renamed: "
            + ", ".join(same_named)
        )
    return ok(
        "\n".join(lines),
        old=sym.qualname,
        new=new_qualname,
        files=paths,
        sites=ref_sites + 1,
        references_resolved=resolved_new,
        ambiguous=[f"{p}:{ln}" for p, ln, _ in ambiguous],
        skipped=skipped,
        leftovers=leftovers,
        unlinked_mentions=elsewhere,
        verified=True,
        **outcome.data(),
    )


RENAME_SYMBOL = Tool(
    "rename_symbol",
    "Rename a function, class or method everywhere the reference graph knows it is used "
    "(definition, calls, attribute uses, imports), then re-index and verify nothing broke. "
    "Text in comments and strings is listed, not changed.",
    {
        "type": "object",
        "properties": {
            "symbol": {
                "type": "string",
                "minLength": 1,
                "maxLength": 500,
                "description": "Name or qualified name (pkg.mod.Class.method).",
            },
            "new_name": {
                "type": "string",
                "minLength": 1,
                "maxLength": 200,
                "description": "The new bare name (no dots).",
            },
            "kind": {"type": "string", "description": "Disambiguate: function, class, method."},
        },
        "required": ["symbol", "new_name"],
        "additionalProperties": False,
    },
    "write",
    rename_symbol,
    lambda a: f"rename {a['symbol']} to {a['new_name']} in every file that uses it",
)
