"""Read-only tools: search, symbols, references, file spans, directory listings."""

from __future__ import annotations

from typing import Any

from indexer import RepoctxError, place, shown
from retrieval.symbols import find_symbols, references_to

from .core import Tool, ToolContext, ToolResult, fail, ok

_PATH = {"type": "string", "minLength": 1, "maxLength": 4096}


def _line_of(ctx: ToolContext, path: str, line: int, cache: dict[str, list[str]]) -> str:
    if path not in cache:
        try:
            data = ctx.workspace.read_bytes(path)  # no link followed, no FIFO waited on
            cache[path] = data.decode("utf-8", errors="replace").splitlines()
        except (OSError, RepoctxError):
            cache[path] = []
    lines = cache[path]
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


# -- search_code ----------------------------------------------------------------------------------


def search_code(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    mode = args["mode"]
    searcher = ctx.session.searcher(ctx.config, semantic=mode != "lexical")
    result = searcher.search(
        args["query"],
        mode=mode,
        k=args["k"],
        lang=args.get("lang"),
        path_glob=args.get("path_glob"),
    )
    # is_hidden, not is_secret: a link with an ordinary name to `.env` is indexed by its name.
    hits = [h for h in result.hits if not ctx.workspace.is_hidden(h.path)]
    # Why the results may be lacking (vectors missing or behind), as the CLI prints it.
    warned = "".join(f"\nNote: {w}" for w in result.warnings)
    if not hits:
        return ok(
            f"No results for {args['query']!r}. Try other words, a symbol name with "
            "find_symbol, or drop the filters." + warned,
            hits=[],
            generation=result.generation,
            warnings=list(result.warnings),
        )
    blocks = []
    for i, h in enumerate(hits, 1):
        head = f"{i}. {place(h.path, h.start_line, h.end_line)}"  # a name stays one line
        if h.symbol:
            head += f"  {shown(h.symbol)}"
        body = "\n".join(
            f"   {h.start_line + n:>5}| {line}" for n, line in enumerate(h.snippet.splitlines())
        )
        blocks.append(head + ("\n" + body if body else ""))
    note = ""
    if mode != "lexical" and result.semantic_coverage == 0:
        note = "\n(lexical and symbol matches only: this index has no vectors)"
    return ok(
        "\n".join(blocks) + note + warned,
        hits=[
            {
                "path": h.path,
                "start_line": h.start_line,
                "end_line": h.end_line,
                "symbol": h.symbol,
                "score": h.score,
            }
            for h in hits
        ],
        generation=result.generation,
        semantic_coverage=result.semantic_coverage,
        warnings=list(result.warnings),
    )


SEARCH_CODE = Tool(
    "search_code",
    "Search the repository's code by words, identifiers, an error message, a traceback or a "
    "whole issue text (hybrid: lexical, whole-file, names, paths, history, vectors and graph "
    "signals, fused). Returns the best chunks with their paths, line ranges and first lines.",
    {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": 2000,
                "description": "What to look for: words, identifiers, an error message.",
            },
            "mode": {
                "type": "string",
                "enum": ["hybrid", "lexical", "semantic"],
                "default": "hybrid",
            },
            "k": {
                "type": "integer",
                "minimum": 1,
                "maximum": 50,
                "default": 10,
                "description": "How many results.",
            },
            "lang": {"type": "string", "description": "Only this language, e.g. python."},
            "path_glob": {"type": "string", "description": "Only paths matching, e.g. src/*."},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    "read",
    search_code,
)


# -- find_symbol ----------------------------------------------------------------------------------


def find_symbol(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    hits = [
        s
        for s in find_symbols(ctx.index, args["name"], args.get("kind"), args["limit"])
        if s.kind != "module" or args.get("kind") == "module"
    ]
    hits = [s for s in hits if not ctx.workspace.is_hidden(s.path)]
    if not hits:
        return ok(
            f"No definition matches {args['name']!r}. Try a shorter prefix or search_code.",
            symbols=[],
        )
    lines = []
    for s in hits:
        doc = s.doc.strip().splitlines()[0] if s.doc.strip() else ""
        lines.append(
            f"{shown(s.qualname)} ({s.kind}) {place(s.path, s.start_line, s.end_line)}\n"
            f"    {shown(s.signature)}"
            + (f"\n    {doc}" if doc else "")
        )
    return ok(
        "\n".join(lines),
        symbols=[
            {
                "id": s.id,
                "name": s.name,
                "qualname": s.qualname,
                "kind": s.kind,
                "path": s.path,
                "start_line": s.start_line,
                "end_line": s.end_line,
                "signature": s.signature,
            }
            for s in hits
        ],
    )


FIND_SYMBOL = Tool(
    "find_symbol",
    "Find definitions by name: exact qualified name (pkg.mod.Class.method), exact name, "
    "`Class.method` suffix, then name prefix. Returns kind, file, line range and signature.",
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 500},
            "kind": {"type": "string", "description": "function, method, class, ..."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 20},
        },
        "required": ["name"],
        "additionalProperties": False,
    },
    "read",
    find_symbol,
)


# -- find_references ------------------------------------------------------------------------------


def find_references(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    kinds = tuple(args["kinds"]) if args.get("kinds") else None
    targets, refs = references_to(ctx.index, args["name"], kinds=kinds, limit=args["limit"])
    refs = [r for r in refs if not ctx.workspace.is_hidden(r.path)]
    names = ", ".join(f"{shown(t.qualname)} ({place(t.path, t.start_line)})" for t in targets[:5])
    if not refs:
        return ok(f"No references to {names}.", targets=[t.qualname for t in targets], refs=[])
    cache: dict[str, list[str]] = {}
    lines = [f"{len(refs)} reference(s) to {names}:"]
    for r in refs:
        where = f" in {shown(r.enclosing)}" if r.enclosing else ""
        how = "" if r.target_id is not None else f" [{r.resolution}]"
        lines.append(
            f"{place(r.path, r.line)} {r.kind}{where}{how}: {_line_of(ctx, r.path, r.line, cache)}"
        )
    return ok(
        "\n".join(lines),
        targets=[t.qualname for t in targets],
        refs=[
            {
                "path": r.path,
                "line": r.line,
                "col": r.col,
                "kind": r.kind,
                "enclosing": r.enclosing,
                "resolution": r.resolution,
                "confidence": r.confidence,
            }
            for r in refs
        ],
    )


FIND_REFERENCES = Tool(
    "find_references",
    "Where a symbol is used: calls, imports, inheritance, type uses, from the reference graph "
    "(resolved references first, then ambiguous ones).",
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 500},
            "kinds": {
                "type": "array",
                "items": {
                    "type": "string",
                    "enum": ["call", "import", "inherit", "type", "attribute"],
                },
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
        },
        "required": ["name"],
        "additionalProperties": False,
    },
    "read",
    find_references,
)


# -- read_span ------------------------------------------------------------------------------------


def read_span(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    cap = ctx.agent.max_read_lines
    start = args["start_line"]
    end = args.get("end_line")
    if end is not None and end < start:
        return fail(f"end_line ({end}) is before start_line ({start}) — swap them.")
    sl = ctx.workspace.read_text(args["path"], start, end, max_lines=cap)
    if start > max(sl.total_lines, 1):
        return fail(
            f"{place(sl.path)} has {sl.total_lines} lines; start_line {start} is past the end.",
            total_lines=sl.total_lines,
        )
    text_lines = sl.text.splitlines()
    width = len(str(sl.end_line))
    body = "\n".join(f"{sl.start_line + i:>{width}}| {line}" for i, line in enumerate(text_lines))
    header = f"{place(sl.path)} lines {sl.start_line}-{sl.end_line} of {sl.total_lines}"
    more = ""
    if sl.truncated:
        more = f"\n[{cap} lines at most per call; continue with start_line={sl.end_line + 1}]"
    return ok(
        f"{header}\n{body}{more}",
        path=sl.path,
        start_line=sl.start_line,
        end_line=sl.end_line,
        total_lines=sl.total_lines,
        truncated=sl.truncated,
    )


READ_SPAN = Tool(
    "read_span",
    "Read lines of a file, numbered (at most 200 lines per call).",
    {
        "type": "object",
        "properties": {
            "path": {**_PATH, "description": "Path relative to the repository root."},
            "start_line": {"type": "integer", "minimum": 1, "default": 1},
            "end_line": {
                "type": "integer",
                "minimum": 1,
                "description": "Last line (inclusive); default: as far as allowed.",
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    },
    "read",
    read_span,
)


# -- list_dir -------------------------------------------------------------------------------------


def list_dir(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    listing = ctx.workspace.list_dir(args["path"], args["depth"], max_entries=args["max_entries"])
    lines = []
    for e in listing.entries:
        if e.kind == "dir":
            lines.append(f"{place(e.path)}/")
        elif e.kind == "file":
            lines.append(f"{place(e.path)}  ({e.size} bytes)")
        else:
            lines.append(f"{place(e.path)}  [{e.kind}]")
    if listing.truncated:
        lines.append(f"[listing stopped at {args['max_entries']} entries; list a subdirectory]")
    return ok(
        "\n".join(lines) or f"{place(listing.path)} is empty.",
        path=listing.path,
        entries=[{"path": e.path, "kind": e.kind, "size": e.size} for e in listing.entries],
        truncated=listing.truncated,
    )


LIST_DIR = Tool(
    "list_dir",
    "List a directory of the repository (secrets are left out).",
    {
        "type": "object",
        "properties": {
            "path": {**_PATH, "default": "."},
            "depth": {"type": "integer", "minimum": 1, "maximum": 6, "default": 1},
            "max_entries": {"type": "integer", "minimum": 1, "maximum": 5000, "default": 500},
        },
        "additionalProperties": False,
    },
    "read",
    list_dir,
)

READ_TOOLS = (SEARCH_CODE, FIND_SYMBOL, FIND_REFERENCES, READ_SPAN, LIST_DIR)
