"""The MCP server's own tools beside the agent's read tools: ``get_context`` (a budgeted pack
for a task, secrets and confined paths filtered) and ``index_status`` (what the index holds,
what is pending, and the server's freshness keeper)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agent.tools.core import Tool, ToolContext, ToolResult, fail, ok
from indexer import place, shown

if TYPE_CHECKING:
    from .mcp_live import LiveIndex

_FOCUS_SPAN = re.compile(r"(.+?):(\d+)(?:-(\d+))?")


def _get_context(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    try:
        from retrieval.context import assemble_context
    except ImportError:
        return fail(
            "get_context is not available in this repoctx build (retrieval.context is "
            "missing) — use search_code and find_symbol, then read_span."
        )
    focus = list(args.get("focus") or ())
    for entry in focus:
        m = _FOCUS_SPAN.fullmatch(entry)
        ctx.workspace.check_readable(m.group(1) if m else entry)  # confinement and secrets
    pack = assemble_context(
        ctx.session.index(ctx.config),
        args["query"],
        args["budget_tokens"],
        focus=focus,
        searcher=ctx.session.searcher(ctx.config, semantic=True),
    )
    kept = tuple(i for i in pack.items if not ctx.workspace.is_hidden(i.path))
    if len(kept) != len(pack.items):
        pack = replace(pack, items=kept)
    data = pack.to_dict()
    if not kept:
        return ok(
            "Nothing relevant found for this task — try search_code with other words.", **data
        )
    why = "\n".join(
        f"- {place(i.path, i.start_line, i.end_line)} ({i.kind}, {i.tokens} tokens): "
        + shown("; ".join(str(r) for r in i.reasons))  # qualnames come from file names
        for i in kept
    )
    warn = "".join(f"\nNote: {w}" for w in pack.warnings)
    return ok(
        f"{pack.render()}\n\nWhy these spans ({pack.used_tokens}/{pack.budget} tokens):\n{why}"
        + warn,
        **data,
    )


GET_CONTEXT = Tool(
    "get_context",
    "Assemble the code most relevant to a task or question within a token budget: definitions, "
    "their callers and callees, related tests, each span with the reason it was chosen. Use it "
    "first on a new task, then read_span or find_references to go deeper.",
    {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": 4000,
                "description": "The task, bug report or question, in words.",
            },
            "budget_tokens": {
                "type": "integer",
                "minimum": 256,
                "maximum": 32000,
                "default": 4000,
                "description": "Most tokens the pack may use.",
            },
            "focus": {
                "type": "array",
                "maxItems": 20,
                "items": {"type": "string", "minLength": 1, "maxLength": 4096},
                "description": "Files or directories to include first, relative to the "
                "repository root; `path:12` or `path:12-40` for lines.",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    "read",
    _get_context,
)


def status_tool(live: LiveIndex) -> Tool:
    """``index_status``, with what ``live`` keeps of the server's freshness."""

    def handler(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        st = ctx.session.index(ctx.config).status()
        st["server"] = live.state()
        pend = st["pending"]
        lines = [
            f"Index of {st['root']}: generation {st['generation']}, {st['files']} files, "
            f"{st['symbols']} symbols, {st['references']} references "
            f"({st['resolved_pct']:.1f}% resolved).",
            f"On disk but not indexed yet: {pend['changed']} changed, {pend['added']} added, "
            f"{pend['deleted']} deleted.",
        ]
        model = ctx.session.embed_model(ctx.config)
        if model:
            done, total = ctx.session.index(ctx.config).graph.vector_coverage()
            st["vectors"] = {"model": model, "coverage": round(done / total, 4) if total else 1.0}
            lines.append(f"Vectors: {model}, {done} of {total} chunks embedded.")
        else:
            st["vectors"] = None
            lines.append("Vectors: none (search_code uses lexical and symbol matches).")
        srv = st["server"]
        lines.append(
            "Automatic refresh: "
            + (
                f"on, watcher {srv['watcher']}"
                if srv["auto_refresh"]
                else "off — restart the server without --no-refresh"
            )
        )
        return ok("\n".join(lines), **st)

    return Tool(
        "index_status",
        "How complete and fresh the index is: generation, counts of files, symbols and "
        "references, files changed on disk but not indexed yet, vectors, and whether this "
        "server refreshes the index automatically.",
        {"type": "object", "properties": {}, "additionalProperties": False},
        "read",
        handler,
    )

