"""The model calls of an agent run: one call with bounded retries (retryable errors wait,
a context overflow shrinks the prompt budget and the reply to the window the server reported),
its usage counted — with the prompt tokens the server reused from its cache, as it reported
them or as estimated from the longest common prefix with the previous request — and the
context and the call written to the trace."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from .budget import Limits, StepPrompt, classify_model_error, reply_tokens, window_budget
from .models.base import Completion, Message, ModelClient, ToolSpec, Usage
from .models.errors import ContextTooLongError, ModelError
from .models.http import retry_budget
from .models.prompt_tokens import PromptCounter


class ModelCallFailed(Exception):  # noqa: N818 - ends the run, with its reason
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


class ModelCalls:
    """Calls ``model`` for one run: holds the prompt budget (it shrinks after an overflow),
    the tools offered and the usage so far."""

    def __init__(
        self,
        model: ModelClient,
        limits: Limits,
        tokens: PromptCounter,
        offered: list[ToolSpec],
        emit: Callable[..., dict[str, Any]],
        sleep: Callable[[float], None],
        min_budget: int,
    ) -> None:
        self.model, self.limits, self.tokens, self.offered = model, limits, tokens, offered
        self.emit, self.sleep, self.min_budget = emit, sleep, min_budget
        self.counter = tokens.counter
        #: The context window when known (given, or reported by the server in an overflow);
        #: the prompt budget and the reply tokens fit in it.
        self.window = limits.context_window
        self.budget, self.reply = window_budget(limits)
        self.usage, self.count = Usage(), 0
        #: The previous request (messages and tools), for the estimate of what the server
        #: could reuse of the next.
        self._last: tuple[Sequence[Message], Sequence[ToolSpec]] | None = None
        #: Advice when the window cannot hold the smallest prompt (set by the caller).
        self.too_small: Callable[[int], str] | None = None

    def complete(
        self,
        step: int,
        purpose: str,
        build: Callable[[int], StepPrompt],
        tools: list[ToolSpec] | tuple[()] | None = None,
    ) -> tuple[StepPrompt, Completion]:
        """One model call with bounded retries: retryable errors wait and retry, a context
        overflow shrinks the prompt budget and retries, anything else ends the run. The
        adapter's own retries and these come out of one budget (``limits.model_retries``)."""
        prompt = self._traced(step, build(self.budget))
        attempts = overflows = 0
        with retry_budget(self.limits.model_retries) as retries:
            while True:
                sent = self._tools(prompt, tools)
                try:
                    completion = self.model.complete(
                        prompt.messages, sent, max_tokens=self.reply
                    )
                    break
                except ModelError as exc:
                    kind = classify_model_error(exc)
                    self.emit(
                        "model_error",
                        step=step,
                        kind=kind,
                        message=str(exc),
                        attempt=attempts + overflows + 1,
                        retryable=exc.retryable,
                        retries_left=retries.left,
                    )
                    smaller = (
                        self._smaller_budget(exc, prompt)
                        if isinstance(exc, ContextTooLongError)
                        and overflows < self.limits.overflow_retries
                        else None
                    )
                    if smaller is not None:
                        overflows += 1
                        self.budget = smaller
                        prompt = self._traced(step, build(self.budget))
                    elif exc.retryable and retries.take():
                        attempts += 1
                        self.sleep(exc.retry_after or 2.0**attempts)
                    else:
                        message = f"The model call failed: {exc}"
                        if isinstance(exc, ContextTooLongError) and self.too_small:
                            # The fixed prompt is what does not fit: advice that can work
                            # (not the error's generic "lower the retrieval budget").
                            window = f" of {self.window:,} tokens" if self.window else ""
                            said = f" (the server said: {exc.detail})" if exc.detail else ""
                            message = (
                                f"The prompt does not fit the model's context window{window}"
                                f"{said} — {self.too_small(self.window or 0)}"
                            )
                        raise ModelCallFailed(kind, message) from exc
        m, usage = completion.message, completion.usage
        if usage.total_tokens == 0:  # servers that report no usage: count it ourselves
            out = self.counter.count(m.content + "".join(c.raw_arguments for c in m.tool_calls))
            usage = Usage(prompt.tokens, out, prompt.tokens + out)
        usage = self._with_cache(usage, prompt.messages, sent, m)
        self.usage, self.count = self.usage + usage, self.count + 1
        self.emit(
            "model_call",
            step=step,
            purpose=purpose,
            usage=asdict(usage),
            cache={
                "processed": usage.processed_tokens,
                "reused": usage.cached_tokens,
                "source": usage.cache_source,
            },
            latency_s=round(completion.latency_s, 4),
            finish_reason=completion.finish_reason,
            content=m.content,
            prompt_tokens_est=prompt.tokens,
            tool_calls=[
                {"id": c.id, "name": c.name, "arguments": c.raw_arguments, "error": c.error}
                for c in m.tool_calls
            ],
        )
        return prompt, completion

    def _tools(
        self, prompt: StepPrompt, tools: list[ToolSpec] | tuple[()] | None
    ) -> list[ToolSpec] | tuple[ToolSpec, ...]:
        if tools is not None:
            return tools
        return prompt.tools if prompt.tools is not None else self.offered

    def _smaller_budget(self, exc: ContextTooLongError, prompt: StepPrompt) -> int | None:
        """The budget to retry with after the server said the prompt is too long: sized from
        the context window it reported (and how far its count was above ours), the reply
        shrunk with it (a quarter of the window, at least 512 tokens); else 60 % of the last.
        None when that would not hold the smallest prompt."""
        smaller = int(self.budget * 0.6)
        if exc.context_window:
            self.window = exc.context_window
            self.reply = reply_tokens(exc.context_window, self.limits.completion_tokens)
            room = exc.context_window - self.reply
            # The server counted more than we did: scale our count to its.
            over = exc.prompt_tokens / prompt.tokens if exc.prompt_tokens and prompt.tokens else 1
            fits = self.tokens.needed(int(room / max(1.0, over)))
            smaller = min(fits, int(self.budget * 0.9))
        if smaller < self.min_budget:
            return None
        return smaller

    def _with_cache(
        self, usage: Usage, messages: Sequence[Message], tools: Sequence[ToolSpec], reply: Message
    ) -> Usage:
        """``usage`` with the prompt tokens the server reused: as it reported them, else the
        longest common prefix of this request with the previous one and its reply, in the
        model's tokens (what a prefix cache such as llama.cpp's can reuse at most: it keeps
        the tokens it generated, and the next request of a run starts with them)."""
        last, self._last = self._last, ((*messages, reply), tuple(tools))
        if usage.cache_source == "server":
            return usage
        cached = shared_prefix_tokens(self.tokens, last, messages, tools) if last else 0
        return Usage(
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens,
            min(cached, usage.prompt_tokens),
            "estimate",
        )

    def _traced(self, step: int, prompt: StepPrompt) -> StepPrompt:
        items = [
            {
                "path": i.path,
                "lines": f"{i.start_line}-{i.end_line}",
                "symbol": i.symbol,
                "kind": i.kind,
                "tokens": i.tokens,
                "reason": str(i.reasons[0]) if i.reasons else "",
            }
            for i in (prompt.pack.items if prompt.pack else ())
        ]
        self.emit(
            "context",
            step=step,
            budget=prompt.budget,
            prompt_tokens=prompt.tokens,
            sections=prompt.sections,
            items=items,
            ms=round(prompt.context_ms, 2),
            assemble_ms=round(prompt.total_ms, 2),
            timings=prompt.pack.timings if prompt.pack else {},
        )
        return prompt


def shared_prefix_tokens(
    tokens: PromptCounter,
    last: tuple[Sequence[Message], Sequence[ToolSpec]],
    messages: Sequence[Message],
    tools: Sequence[ToolSpec],
) -> int:
    """Tokens at the start of a request (``messages`` and ``tools``) that the previous request
    ``last`` rendered the same way: the system message and the tool schemas (chat templates
    put the tools in the system turn), then every whole message in common, then the common
    start of the first message that differs."""
    old_messages, old_tools = last
    if not messages or not old_messages:
        return 0
    t = tokens.template
    first, old_first = messages[0], old_messages[0]
    if first.role != old_first.role or first.content != old_first.content:
        return _common_text(tokens, old_first.content, first.content)
    if list(tools) != list(old_tools):
        return tokens.message_tokens(first)  # the tools follow the system text
    shared = tokens.message_tokens(first) + (tokens.tools_tokens(tools) if tools else 0)
    for old, new in zip(old_messages[1:], messages[1:], strict=False):
        if old == new:
            shared += tokens.message_tokens(new)
            continue
        if old.role == new.role and not old.tool_calls and not new.tool_calls:
            shared += t.per_message // 2 + _common_text(tokens, old.content, new.content)
        break
    return shared


def _common_text(tokens: PromptCounter, a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    # The last token before the difference may be split differently: not counted.
    return max(0, tokens.count(a[:n]) - 1) if n else 0
