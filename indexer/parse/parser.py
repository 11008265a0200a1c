"""Extract definitions, references and imports from one file with tree-sitter tags queries."""

from __future__ import annotations

import re
from bisect import bisect_right
from functools import cache

import tree_sitter as ts

from indexer.models import CLASS_KINDS, Definition, Import, ParsedFile, Reference, Span
from indexer.parse.lang_hooks import COMMENT_TYPES, DOC_STRIP, LanguageHooks
from indexer.parse.languages import hooks, is_text_format, ts_parser, ts_query
from indexer.parse.modules import resolve_relative

_DOTTED = re.compile(r"^[A-Za-z_$][\w$]*(?:(?:\.|::|->)[A-Za-z_$][\w$]*)*$")
_WS = re.compile(r"\s+")
_MAX_SIGNATURE = 240
_MAX_DOC = 2000
# Node types whose `body` field starts the part a signature leaves out.
_BODY_FIELDS = ("body", "declarator_body")
#: Bodies that are children but not a field (Kotlin's `function_body` and `class_body`, Swift's
#: `enum_class_body`...): the signature ends where the first of them starts.
_BODY_TYPES = frozenset({"function_body", "class_body", "enum_class_body", "protocol_body",
                         "enum_body", "interface_body", "block_start"})  # HCL's `{`
#: Comments are never part of a signature (Ruby's `class A # note` or the comment above a
#: class's first statement, which its grammar puts before the body).
_COMMENTS = COMMENT_TYPES
_METHOD_OWNERS = CLASS_KINDS - {"namespace"}
_WRAPPERS = frozenset({"decorated_definition", "export_statement", "template_declaration"})
#: Definitions nested deeper than this are not symbols of their own: their code stays in the
#: deepest enclosing definition kept (its chunk, its references). Real code nests a handful of
#: levels; 10k nested functions would otherwise cost quadratic qualnames (hundreds of MB) and
#: overflow the chunker's recursion.
MAX_DEFINITION_DEPTH = 100


def parse_source(path: str, source: bytes, language: str, module: str) -> ParsedFile:
    """Parse ``source`` and extract what the index stores. Never raises on bad syntax:
    tree-sitter recovers, and ``has_errors`` records that it had to. Text formats (Markdown,
    configs, Makefiles... no grammar) are cut by `indexer.parse.textfiles` instead."""
    if is_text_format(language):
        from indexer.parse.textfiles import parse_text

        return parse_text(path, source, language, module)
    lang = hooks(language)
    tree = ts_parser(language).parse(source)
    if tree.root_node.has_error and lang.conditional_compilation and b"#if" in source:
        masked = first_branches(source)
        again = ts_parser(language).parse(masked)
        if not again.root_node.has_error:
            # same bytes and lines, the other branches blank: every offset still holds
            source, tree = masked, again
    root = tree.root_node
    raw_defs: dict[int, tuple[ts.Node, ts.Node, str]] = {}
    raw_refs: dict[tuple[int, str], tuple[ts.Node, str, ts.Node | None]] = {}
    raw_imports: list[dict[str, ts.Node]] = []
    #: a `@qualifier` capture prefixes the name it is matched with (name start byte -> text):
    #: HCL's `resource "aws_instance" "web"` and `aws_instance.web.id` are `aws_instance.web`
    qualifiers: dict[int, str] = {}
    import_nodes: list[ts.Node] = []
    # matches() yields in completion order; sorting by pattern index makes the earlier
    # (more specific) pattern win when two patterns capture the same node.
    matches = ts.QueryCursor(ts_query(language)).matches(root)
    if lang.sort_matches:
        matches.sort(key=lambda m: m[0])
    for _, caps in matches:
        name_nodes = caps.get("name")
        if name_nodes and "qualifier" in caps:
            qualifiers[name_nodes[0].start_byte] = _text(source, caps["qualifier"][0])
        for key, nodes in caps.items():
            role, kind = _role(key)
            if role == _OTHER:
                continue
            if role == _STATEMENT:
                import_nodes.append(nodes[0])
            elif role == _DEFINITION:
                if name_nodes:
                    raw_defs.setdefault(nodes[0].id, (nodes[0], name_nodes[0], kind))
            elif role == _REFERENCE:
                if name_nodes:
                    recv = caps.get("receiver")
                    name = name_nodes[0]
                    raw_refs.setdefault((name.start_byte, kind), (name, kind, recv[0] if recv else None))
            else:
                raw_imports.append({k: v[0] for k, v in caps.items()})

    definitions, def_nodes, def_ends = _definitions(source, lang, raw_defs, qualifiers)
    starts = [n.start_byte for n in def_nodes]
    ends = [n.end_byte for n in def_ends]

    def enclosing(byte: int) -> int:
        i = bisect_right(starts, byte) - 1
        while i >= 0 and ends[i] < byte:
            i = definitions[i].parent
        return i

    references: list[Reference] = []
    def_name_bytes = {nm.start_byte for _, nm, _ in raw_defs.values()}
    sep = lang.path_sep
    for (start, kind), (name_node, _, recv) in sorted(raw_refs.items(), key=lambda kv: kv[0][0]):
        if kind in ("type", "call") and start in def_name_bytes:
            continue  # a definition's own name (Julia's `function f(x)` signature is a call)
        receiver = ""
        name = _qualified(source, name_node, qualifiers)
        if sep and sep in name and kind != "inherit":  # Perl's A::B::f(): `f` on the module A.B
            head, _, name = name.rpartition(sep)
            receiver = head.replace(sep, ".")
        if recv is not None:
            text = _text(source, recv)
            if sep:
                text = text.replace(sep, ".")
            if len(text) < 120 and _DOTTED.match(text):
                receiver = text
            elif text.startswith("super("):
                receiver = "super"  # super().method(): look in the base classes
            else:
                receiver = "?"
        row, col = name_node.start_point
        references.append(Reference(name, kind, row + 1, col, receiver, enclosing(start)))
    if lang.own_imports:  # Python's import forms (relative levels, packages) are read here
        is_pkg = path.rsplit("/", 1)[-1] in lang.package_markers
        imports, stars = _python_imports(source, import_nodes, module, is_pkg), []
    else:
        imports, stars = _generic_imports(source, raw_imports, lang, path)
    for imp, byte in imports:
        references.append(
            Reference(
                name=lang.import_ref_name(imp.module, imp.name, imp.alias),
                kind="import",
                line=imp.line,
                col=0,
                receiver=imp.module if imp.name else "",
                enclosing=enclosing(byte),
            )
        )
    return ParsedFile(
        path=path,
        language=language,
        module=module,
        definitions=tuple(definitions),
        references=tuple(references),
        imports=tuple(imp for imp, _ in imports) + tuple(imp for imp, _ in stars),
        has_errors=root.has_error,
        doc=_module_doc(source, root, lang),
        breaks=_breaks(root, def_nodes),
        lines=source.count(b"\n") + (0 if source.endswith(b"\n") or not source else 1),
    )


# What a capture name asks for (`_role`): the tags queries use a handful of names, looked up
# once per capture (~450k on the stdlib) instead of compared as strings.
_OTHER, _STATEMENT, _DEFINITION, _REFERENCE, _IMPORT = range(5)


@cache
def _role(key: str) -> tuple[int, str]:
    """(role, kind) of a capture name: ``definition.<kind>``, ``reference.<kind>``,
    ``import``, ``import.statement``; anything else (``name``, ``receiver``...) is no role."""
    if key == "import.statement":
        return _STATEMENT, ""
    if key.startswith("definition."):
        return _DEFINITION, key[11:]
    if key.startswith("reference."):
        return _REFERENCE, key[10:]
    if key == "import":
        return _IMPORT, ""
    return _OTHER, ""


def _text(source: bytes, node: ts.Node) -> str:
    return source[node.start_byte : node.end_byte].decode("utf-8", "replace")


def _qualified(source: bytes, name_node: ts.Node, qualifiers: dict[int, str]) -> str:
    name = _text(source, name_node)
    qual = qualifiers.get(name_node.start_byte) if qualifiers else None
    return f"{qual}.{name}" if qual else name


def _definitions(
    source: bytes,
    lang: LanguageHooks,
    raw: dict[int, tuple[ts.Node, ts.Node, str]],
    qualifiers: dict[int, str] | None = None,
) -> tuple[list[Definition], list[ts.Node], list[ts.Node]]:
    """The definitions, their nodes, and the node each ends with: itself, or the body a
    grammar puts beside it (`LanguageHooks.body_siblings`: Dart's `function_body`)."""
    siblings = lang.body_siblings

    def last(node: ts.Node) -> ts.Node:
        nxt = node.next_named_sibling if siblings else None
        return nxt if nxt is not None and nxt.type in siblings else node

    items = sorted(
        ((n, nm, k, last(n)) for n, nm, k in raw.values()),
        key=lambda t: (t[0].start_byte, -t[3].end_byte),
    )
    out: list[Definition] = []
    nodes: list[ts.Node] = []
    ends: list[ts.Node] = []
    stack: list[int] = []
    for node, name_node, kind, end in items:
        while stack and ends[stack[-1]].end_byte < end.end_byte:
            stack.pop()
        if len(stack) >= MAX_DEFINITION_DEPTH:
            continue
        parent = stack[-1] if stack else -1
        name = _qualified(source, name_node, qualifiers or {})
        if parent >= 0 and out[parent].kind in _METHOD_OWNERS and kind == "function":
            kind = "method"
        if kind == "constant" and lang.constants_upper_only and not name.isupper():
            kind = "variable"
        qualname = f"{out[parent].qualname}.{name}" if parent >= 0 else name
        outer = node
        up = node.parent
        while up is not None and up.type in _WRAPPERS:
            outer, up = up, up.parent
        end_row, end_col = end.end_point
        # a node ending at column 0 (C's #define takes its newline) ends a line earlier
        last_line = end_row + (0 if end_col == 0 and end_row > node.start_point[0] else 1)
        span = Span(outer.start_point[0] + 1, last_line, outer.start_byte, end.end_byte)
        out.append(Definition(name, qualname, kind, span, _signature(source, node),
                              _doc(source, node, outer, lang), parent))
        nodes.append(node)
        ends.append(end)
        stack.append(len(out) - 1)
    return out, nodes, ends


def _breaks(root: ts.Node, def_nodes: list[ts.Node]) -> tuple[int, ...]:
    lines = {c.start_point[0] + 1 for c in root.named_children}
    for node in def_nodes:
        body = node.child_by_field_name("body")
        if body is not None:
            lines.update(c.start_point[0] + 1 for c in body.named_children)
    return tuple(sorted(lines))


def _module_doc(source: bytes, root: ts.Node, lang: LanguageHooks) -> str:
    first = root.named_children[0] if root.named_child_count else None
    if first is None:
        return ""
    if lang.docstrings:
        if first.type == "expression_statement" and first.named_child_count:
            s = first.named_children[0]
            if s.type == "string":
                return _clean_doc(_text(source, s))
        return ""
    return _clean_doc(_text(source, first), lang.doc_strip) if first.type in lang.comment_types else ""


_DIRECTIVE = re.compile(rb"^[ \t]*#[ \t]*(if|elif|else|endif)\b", re.M)
#: every byte but a line break -> a space
_BLANK = bytes(c if c in (10, 13) else 32 for c in range(256))


def first_branches(source: bytes) -> bytes:
    """``source`` as one configuration of its conditional compilation: the directive lines and
    every branch after an ``#if``'s first (``#elif``, ``#else``) blanked to spaces, newlines
    kept — so byte offsets, lines and columns are those of ``source``. A branch inside a
    blanked one is blank too."""
    out = bytearray(source)
    stack: list[bool] = []  # per open #if: whether its current branch is kept

    def blank(a: int, b: int) -> None:
        if a < b:
            out[a:b] = bytes(out[a:b]).translate(_BLANK)

    live_from = 0  # start of the text whose fate the current branch decides
    for m in _DIRECTIVE.finditer(source):
        kept = all(stack)
        end = source.find(b"\n", m.start())
        end = len(source) if end == -1 else end
        if not kept:
            blank(live_from, m.start())
        word = m.group(1)
        if word == b"if":
            stack.append(True)
        elif word in (b"elif", b"else"):
            if stack:
                stack[-1] = False
        elif stack:
            stack.pop()
        blank(m.start(), end)
        live_from = end
    if not all(stack):
        blank(live_from, len(source))
    return bytes(out)


def _signature(source: bytes, node: ts.Node) -> str:
    end = node.end_byte
    for field in _BODY_FIELDS:
        body = node.child_by_field_name(field)
        if body is not None:
            end = body.start_byte
            break
    else:
        body = next((c for c in node.named_children if c.type in _BODY_TYPES), None)
        if body is not None:
            end = body.start_byte
        else:
            nl = source.find(b"\n", node.start_byte, end)
            if nl != -1:
                end = nl
    for child in node.children:  # a comment between the header and the body ends it
        if child.start_byte >= end:
            break
        if child.type in _COMMENTS and child.start_byte > node.start_byte:
            end = child.start_byte
            break
    text = _WS.sub(" ", source[node.start_byte : end].decode("utf-8", "replace")).strip()
    return text[:_MAX_SIGNATURE]


def _doc(source: bytes, node: ts.Node, outer: ts.Node, lang: LanguageHooks) -> str:
    if lang.docstrings:
        body = node.child_by_field_name("body")
        if body is not None and body.named_child_count:
            first = body.named_children[0]
            if first.type == "expression_statement" and first.named_child_count:
                s = first.named_children[0]
                if s.type == "string":
                    return _clean_doc(_text(source, s))
        return ""
    comments = []
    prev = outer.prev_named_sibling
    up = outer
    while prev is None and up.parent is not None and up.parent.start_byte == up.start_byte:
        # the first statement of a body that starts with it (Ruby's `body_statement`): the
        # comments above it are the body's previous siblings
        up = up.parent
        prev = up.prev_named_sibling
    line = outer.start_point[0]
    while prev is not None and prev.type == "attribute_item":  # Rust #[derive(...)]
        line = prev.start_point[0]
        prev = prev.prev_named_sibling
    while prev is not None and prev.type in lang.comment_types and prev.end_point[0] >= line - 1:
        if source[source.rfind(b"\n", 0, prev.start_byte) + 1 : prev.start_byte].strip():
            break  # a comment trailing code on its line (`module A # note`) is that code's
        comments.append(_text(source, prev))
        line = prev.start_point[0]
        prev = prev.prev_named_sibling
    return _clean_doc("\n".join(reversed(comments)), lang.doc_strip) if comments else ""


def _clean_doc(text: str, strip: re.Pattern[str] = DOC_STRIP) -> str:
    text = text.strip()
    for q in ('"""', "'''", '"', "'"):
        prefix_end = 0
        while prefix_end < len(text) and text[prefix_end] in "rRbBuUfF":
            prefix_end += 1
        if text[prefix_end:].startswith(q) and text.endswith(q) and len(text) >= prefix_end + 2 * len(q):
            text = text[prefix_end + len(q) : -len(q)]
            break
    else:
        text = strip.sub("", text).replace("*/", "")
    lines = [ln.strip() for ln in text.strip().splitlines()]
    return "\n".join(lines)[:_MAX_DOC]


def _python_imports(
    source: bytes, nodes: list[ts.Node], module: str, is_package: bool
) -> list[tuple[Import, int]]:
    """Imports with the byte offset of their statement."""
    out: list[tuple[Import, int]] = []
    for node in sorted(nodes, key=lambda n: n.start_byte):
        line = node.start_point[0] + 1
        at = node.start_byte
        if node.type == "import_statement":
            for child in node.named_children:
                if child.type == "aliased_import":
                    name = _text(source, child.child_by_field_name("name"))
                    alias = _text(source, child.child_by_field_name("alias"))
                else:
                    name = alias = _text(source, child)
                out.append((Import(module=name, name="", alias=alias, line=line), at))
            continue
        mod_node = node.child_by_field_name("module_name")
        level, target = 0, ""
        if node.type == "future_import_statement":
            target = "__future__"
        elif mod_node is not None and mod_node.type == "relative_import":
            for ch in mod_node.children:
                if ch.type == "import_prefix":
                    level = _text(source, ch).count(".")
                elif ch.type == "dotted_name":
                    target = _text(source, ch)
        elif mod_node is not None:
            target = _text(source, mod_node)
        absolute = resolve_relative(module, is_package, level, target)
        names = [c for c in node.children_by_field_name("name")]
        if any(c.type == "wildcard_import" for c in node.named_children):
            out.append((Import(absolute, "*", "*", line, level), at))
        for child in names:
            if child.type == "aliased_import":
                name = _text(source, child.child_by_field_name("name"))
                alias = _text(source, child.child_by_field_name("alias"))
            else:
                name = alias = _text(source, child)
            out.append((Import(absolute, name, alias, line, level), at))
    return out


def _generic_imports(
    source: bytes, raw: list[dict[str, ts.Node]], lang: LanguageHooks, path: str
) -> tuple[list[tuple[Import, int]], list[tuple[Import, int]]]:
    """The imports with the byte offset of their statement, and the further bindings they
    imply — `*` imports of bare imports (`LanguageHooks.bare_imports_bind_all`), extra aliases
    (`LanguageHooks.extra_aliases`) — which get no reference of their own."""
    out: list[tuple[Import, int]] = []
    stars: list[tuple[Import, int]] = []
    for caps in raw:
        mod = caps.get("import.module")
        if mod is None:
            continue
        text = _text(source, mod).strip("\"'<>`")
        module = lang.import_module(text, path)
        if not module:
            continue
        name = _text(source, caps["import.name"]) if "import.name" in caps else ""
        alias_node = caps.get("import.alias")
        line = mod.start_point[0] + 1
        if alias_node is not None:
            alias = _text(source, alias_node)
        else:
            alias = name or lang.import_alias(text, module)
            if not name and lang.bare_imports_bind_all:
                stars.append((Import(module, "*", "*", line), mod.start_byte))
            for extra in lang.extra_aliases(name) if name else ():
                stars.append((Import(module, name, extra, line), mod.start_byte))
        out.append((Import(module, name, alias, line), mod.start_byte))
    return out, stars
