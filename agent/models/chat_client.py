"""What the HTTP adapters share: the JSON-over-HTTP session with its time limits and retries,
and ``complete`` — build the provider's request, send it (streamed or not), parse the reply.

A provider's client subclasses `JsonChatClient` and gives ``url``, ``_headers``,
``build_request``, ``_stream`` (a streamed reply assembled into the provider's non-streamed
JSON) and ``parse`` (that JSON as a `Completion`); `agent.models.providers` registers it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from .base import Completion, Message, ToolSpec
from .http import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_TIMEOUT_S, JsonHttp, RetryPolicy


class JsonChatClient:
    url: str

    def __init__(
        self,
        model: str,
        *,
        name: str,
        timeout: float = DEFAULT_TIMEOUT_S,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        stream: bool = False,
        on_text: Callable[[str], None] | None = None,
    ) -> None:
        self.model = model
        self.name = name
        self.stream = stream
        self.on_text = on_text
        self._headers: dict[str, str] = {}
        self._http = JsonHttp(
            timeout=timeout, connect_timeout=connect_timeout, retry=retry, sleep=sleep
        )

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> Completion:
        payload = self.build_request(
            messages, tools, max_tokens=max_tokens, temperature=temperature
        )
        start = time.monotonic()
        raw = self._send(payload)
        return self.parse(raw, time.monotonic() - start)

    def _send(self, payload: dict[str, Any]) -> dict[str, Any]:
        if self.stream:
            return self._stream(payload)
        return self._http.post(self.url, payload, self._headers)

    def build_request(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] = (),
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> dict[str, Any]:
        raise NotImplementedError

    def _stream(self, payload: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def parse(self, raw: dict[str, Any], latency_s: float) -> Completion:
        raise NotImplementedError
