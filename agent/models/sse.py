"""Server-sent events parsing (the framing both OpenAI and Anthropic stream in)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class SseEvent:
    event: str | None
    data: str


def parse_sse(lines: Iterable[bytes]) -> Iterator[SseEvent]:
    """Yield events from raw lines; an event ends at a blank line or at end of stream."""
    event: str | None = None
    data: list[str] = []
    for raw in lines:
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if not line:
            if data:
                yield SseEvent(event, "\n".join(data))
            event, data = None, []
            continue
        if line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if key == "data":
            data.append(value)
        elif key == "event":
            event = value
    if data:
        yield SseEvent(event, "\n".join(data))
