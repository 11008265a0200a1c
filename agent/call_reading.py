"""Reading the tool calls of a model's reply — native first, else written in its text — and its
SEARCH/REPLACE edit blocks, and turning their results into what the model sees next time.

A reply's edit blocks (agent/edit_blocks.py) are read in every tool format and become `edit`
and `create_file` calls that run through the registry like any other. A reply with both blocks
and tool calls runs the blocks first: the text of a reply comes before its calls, and a model
that writes an edit and then calls `run_tests` or `finish` means the tests to see the edit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .edit_blocks import (
    WorkspaceFiles,
    block_calls,
    block_number,
    block_result,
    has_edit_blocks,
    scan_edit_blocks,
)
from .models.base import Message, ToolCall
from .models.text_calls import parse_text_calls
from .tools import ToolContext

NATIVE_ONLY = (
    "You wrote a tool call as text. This run reads only the tool-calling interface of the API "
    "(tool format `native`): send the call through it, not in your message."
)
#: Paths the model named in its calls, kept to place blocks that name no file.
MAX_KNOWN = 20


class CallReader:
    def __init__(
        self,
        tool_format: str,
        names: frozenset[str],
        emit: Callable[..., dict[str, Any]],
        context: Callable[[], ToolContext] | None = None,
    ) -> None:
        self.tool_format, self.names, self.emit = tool_format, names, emit
        #: The run's tool context, to read and list files when placing edit blocks (None: blocks
        #: that name no file cannot be placed).
        self.context = context
        #: The form of the latest tool calls: native | text | blocks ('' before the first).
        self.used = ""
        #: Paths named by the model's calls and blocks so far, the latest last.
        self.known: list[str] = []
        self.blocks_seen = False

    def read(self, step: int, reply: Message) -> tuple[tuple[ToolCall, ...], str, str]:
        """The calls to run, their form, and a correction for what could not be read: a call
        written in the text that is broken (or, in native mode, written there at all), a
        SEARCH/REPLACE block cut short or that cannot be placed.

        The form is native | text | blocks, or native+blocks | text+blocks when a reply holds
        both (the block calls come first)."""
        content = reply.content or ""
        edits: list[ToolCall] = []
        problems: list[str] = []
        if has_edit_blocks(content):
            scanned = scan_edit_blocks(content)
            edits, placed = self._block_calls(step, scanned.blocks)
            problems = [*scanned.problems, *placed]
            content = scanned.rest  # code in a block is never read as a JSON tool call
            self._notice_blocks(step, len(scanned.blocks), len(edits))
        if reply.tool_calls:  # the API's own calls come first
            calls, form, hint, where = reply.tool_calls, "native", "", ""
        else:
            parsed = parse_text_calls(content, names=self.names, id_prefix=f"text_{step}")
            if self.tool_format == "native":
                calls, form, where = (), "", ""
                hint = NATIVE_ONLY if parsed.calls or parsed.malformed else ""
            else:
                calls, hint, where = parsed.calls, parsed.malformed, parsed.form
                form = "text" if calls else ""
        if form and form != self.used:
            self.used = form
            how = {"tag": "in <tool_call> tags", "fenced": "in code fences", "json": "as JSON"}
            self.emit(
                "notice",
                step=step,
                kind="tool_format",
                format=form,
                form=where,
                message="the model sends native tool calls"
                if form == "native"
                else f"the model writes its tool calls in its text ({how.get(where, where)}); "
                "they are read from there",
            )
        elif edits and not form and not self.used:
            self.used = "blocks"
        self._remember(calls)
        full = "+".join(f for f in (form, "blocks" if edits else "") if f)
        hints = "\n\n".join(h for h in (*problems, hint) if h)
        return (*edits, *calls), full, hints

    def _block_calls(self, step: int, blocks: list) -> tuple[list[ToolCall], list[str]]:
        if not blocks:
            return [], []
        if self.context is not None:
            files = WorkspaceFiles(self.context())
            read, listing = files.read, files.paths
        else:
            read, listing = (lambda path: None), list
        known = list(reversed(self.known))  # the latest named first
        calls, corrections = block_calls(blocks, known, read, repo_paths=listing, step=step)
        self._remember(calls)
        return calls, corrections

    def _remember(self, calls: tuple[ToolCall, ...] | list[ToolCall]) -> None:
        for call in calls:
            path = (call.arguments or {}).get("path")
            if isinstance(path, str) and path and path != ".":
                if path in self.known:
                    self.known.remove(path)
                self.known.append(path)
        del self.known[:-MAX_KNOWN]

    def _notice_blocks(self, step: int, found: int, placed: int) -> None:
        if self.blocks_seen or not found:
            return
        self.blocks_seen = True
        self.emit(
            "notice",
            step=step,
            kind="edit_blocks",
            format="blocks",
            message=f"the model writes its edits as SEARCH/REPLACE blocks ({placed} of {found} "
            "placed); they run as edit calls",
        )


def observation(
    reply: Message, form: str, answers: list[tuple[ToolCall, str]], hint: str
) -> list[Message]:
    """What the model sees of this step next time: its reply and every call's result.
    Calls it wrote as text get their results as text too (Hermes `<tool_response>`), so a
    server without tool support still gets a conversation it can render. The results of its
    edit blocks come as text in every form (the API knows no call for them), one per block."""
    own = [(c, text) for c, text in answers if block_number(c.id) is None]
    edits = [
        f"SEARCH/REPLACE block {block_number(c.id)} ({(c.arguments or {}).get('path', '?')}): "
        + block_result(text)
        for c, text in answers
        if block_number(c.id) is not None
    ]
    if not form.startswith("text"):
        obs = [reply, *(Message.tool(c.id, text, c.name) for c, text in own)]
        extra = [p for p in (*edits, hint) if p]
        return obs + ([Message.user("\n\n".join(extra))] if extra else [])
    parts = [f'<tool_response name="{c.name}">\n{text}\n</tool_response>' for c, text in own]
    return [reply, Message.user("\n\n".join(p for p in (*edits, *parts, hint) if p))]
