"""The model calls of an agent run: one call with bounded retries (retryable errors wait,
a context overflow shrinks the prompt budget), its usage counted, and the context and the call
written to the trace."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from .budget import Limits, StepPrompt, classify_model_error
from .models.base import Completion, ModelClient, ToolSpec, Usage
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
        self.budget = limits.prompt_budget
        self.usage, self.count = Usage(), 0

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
                try:
                    completion = self.model.complete(
                        prompt.messages,
                        self.offered if tools is None else tools,
                        max_tokens=self.limits.completion_tokens,
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
                        raise ModelCallFailed(kind, f"The model call failed: {exc}") from exc
        m, usage = completion.message, completion.usage
        if usage.total_tokens == 0:  # servers that report no usage: count it ourselves
            out = self.counter.count(m.content + "".join(c.raw_arguments for c in m.tool_calls))
            usage = Usage(prompt.tokens, out, prompt.tokens + out)
        self.usage, self.count = self.usage + usage, self.count + 1
        self.emit(
            "model_call",
            step=step,
            purpose=purpose,
            usage=asdict(usage),
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

    def _smaller_budget(self, exc: ContextTooLongError, prompt: StepPrompt) -> int | None:
        """The budget to retry with after the server said the prompt is too long: sized from
        the context window it reported (and how far its count was above ours), else 60 % of
        the last; None when that would not hold the fixed prompt."""
        smaller = int(self.budget * 0.6)
        if exc.context_window:
            room = exc.context_window - self.limits.completion_tokens
            # The server counted more than we did: scale our count to its.
            over = exc.prompt_tokens / prompt.tokens if exc.prompt_tokens and prompt.tokens else 1
            fits = self.tokens.needed(int(room / max(1.0, over)))
            smaller = min(fits, int(self.budget * 0.9))
        if smaller < self.min_budget:
            return None
        return smaller

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
