"""Typed errors raised by model adapters. The docstring is the message a user sees."""

from __future__ import annotations

from indexer import RepoctxError


class ModelError(RepoctxError):
    """The model call failed."""

    #: Whether trying the same request again later may succeed.
    retryable: bool = False

    def __init__(
        self,
        message: str | None = None,
        *,
        detail: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        base = message or (type(self).__doc__ or "").strip()
        if detail or status is not None:
            where = f"HTTP {status}" if status is not None else ""
            extra = ": ".join(part for part in (where, _clip(detail)) if part)
            base = f"{base} ({extra})"
        super().__init__(base)
        self.status = status
        self.detail = detail
        #: Seconds the provider asked us to wait, if it said.
        self.retry_after = retry_after


def _clip(text: str | None, limit: int = 300) -> str:
    if not text:
        return ""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class AuthError(ModelError):
    """The model provider rejected the API key — set REPOCTX_API_KEY / OPENAI_API_KEY / ANTHROPIC_API_KEY to a valid key."""


class UnknownModelError(ModelError):
    """The provider does not know this model or endpoint — check the model name (`provider:model`) and that the base URL is right (OpenAI-compatible URLs usually end in /v1)."""


class ContextTooLongError(ModelError):
    """The prompt is longer than the model's context window — give the server a larger context (llama.cpp: --ctx-size / --n_ctx), lower --budget, or use `agent run --strategy pipeline`, which needs the least."""

    #: The model's context window and the prompt's size in its tokens, where the server said
    #: (OpenAI, vLLM, llama-cpp-python: "maximum context length is 8192 tokens ... 9030 in the
    #: messages"; llama.cpp: ``n_ctx`` / ``n_prompt_tokens``; Anthropic: "210000 tokens > 200000
    #: maximum"). A retry sizes its smaller prompt from them.
    context_window: int | None = None
    prompt_tokens: int | None = None


class RateLimitError(ModelError):
    """The provider is rate-limiting requests — wait a minute and retry, or lower the request rate."""

    retryable = True


class QuotaExceededError(ModelError):
    """The account's quota or credit is used up — check billing with the model provider."""


class ServiceError(ModelError):
    """The model service failed (server error) — retry later; if it persists, check the provider's status page."""

    retryable = True


class ModelConnectionError(ServiceError):
    """Cannot reach the model server — check that it is running and that REPOCTX_MODEL_BASE_URL points at it."""


class ModelTimeoutError(ModelError):
    """The model server went silent for longer than the request timeout — raise it (`--model-timeout SECONDS`, `model_timeout_s` in .repoctx.toml or REPOCTX_MODEL_TIMEOUT_S), or use a smaller model or a shorter prompt (`--budget`)."""

    retryable = True


class MalformedResponseError(ModelError):
    """The model server sent a response repoctx cannot read — check that the base URL points at a compatible API."""


class BadRequestError(ModelError):
    """The provider rejected the request — check the model name and options; the provider's message follows."""


class ModelConfigError(ModelError):
    """The model is not configured — pass a model such as `openai:gpt-4o-mini` or set REPOCTX_MODEL."""


class ScriptExhaustedError(ModelError):
    """The scripted model has no responses left — add entries to the script file."""
