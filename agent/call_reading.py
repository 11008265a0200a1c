"""Reading the tool calls of a model's reply — native first, else written in its text — and
turning their results into what the model sees next time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .models.base import Message, ToolCall
from .models.text_calls import parse_text_calls

NATIVE_ONLY = (
    "You wrote a tool call as text. This run reads only the tool-calling interface of the API "
    "(tool format `native`): send the call through it, not in your message."
)


class CallReader:
    def __init__(
        self, tool_format: str, names: frozenset[str], emit: Callable[..., dict[str, Any]]
    ) -> None:
        self.tool_format, self.names, self.emit = tool_format, names, emit
        #: The form of the latest tool calls: native | text ('' before the first).
        self.used = ""

    def read(self, step: int, reply: Message) -> tuple[tuple[ToolCall, ...], str, str]:
        """The calls to run, their form (native | text), and a correction for a call written
        in the text that could not be read (or, in native mode, was written there at all)."""
        if reply.tool_calls:  # the API's own calls come first
            calls, form, hint, where = reply.tool_calls, "native", "", ""
        else:
            parsed = parse_text_calls(reply.content, names=self.names, id_prefix=f"text_{step}")
            if self.tool_format == "native":
                return (), "", NATIVE_ONLY if parsed.calls or parsed.malformed else ""
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
        return tuple(calls), form, hint

def observation(
    reply: Message, form: str, answers: list[tuple[ToolCall, str]], hint: str
) -> list[Message]:
    """What the model sees of this step next time: its reply and every call's result.
    Calls it wrote as text get their results as text too (Hermes `<tool_response>`), so a
    server without tool support still gets a conversation it can render."""
    if form != "text":
        obs = [reply, *(Message.tool(c.id, text, c.name) for c, text in answers)]
        return obs + ([Message.user(hint)] if hint else [])
    parts = [
        f'<tool_response name="{c.name}">\n{text}\n</tool_response>' for c, text in answers
    ]
    return [reply, Message.user("\n\n".join([*parts, hint] if hint else parts))]
