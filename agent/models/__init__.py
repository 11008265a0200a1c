"""Model adapters: one protocol (`ModelClient`) over OpenAI-compatible servers, Ollama's native
API, Anthropic and a scripted replay model, chosen by a `provider:model` spec; and how each
model's prompts are counted (prompt_tokens.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping

from . import providers
from .anthropic import AnthropicClient
from .base import Completion, Message, ModelClient, ToolCall, ToolSpec, Usage
from .errors import (
    AuthError,
    BadRequestError,
    ContextTooLongError,
    MalformedResponseError,
    ModelConfigError,
    ModelConnectionError,
    ModelError,
    ModelTimeoutError,
    QuotaExceededError,
    RateLimitError,
    ScriptExhaustedError,
    ServiceError,
    UnknownModelError,
)
from .http import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    RetryBudget,
    RetryPolicy,
    retry_budget,
)
from .ollama import OllamaClient
from .openai import LOCAL_SERVERS, OpenAIClient
from .prompt_tokens import ChatTemplate, PromptCounter, family_of, model_tokenizer
from .scripted import ScriptedCall, ScriptedModel
from .text_calls import TextCalls, parse_text_calls, prose


def create_model(
    spec: str | None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
    max_retries: int = DEFAULT_RETRIES,
    stream: bool = False,
    on_text: Callable[[str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    context_tokens: int | None = None,
) -> ModelClient:
    """Build a client from ``provider:model`` (``openai:gpt-4o-mini``, ``anthropic:claude-sonnet-4-5``,
    ``ollama:qwen2.5-coder:7b``, ``scripted:path.jsonl``) or a bare OpenAI-compatible model name.

    Arguments win over ``env`` (default ``os.environ``): REPOCTX_MODEL (when ``spec`` is empty),
    REPOCTX_MODEL_BASE_URL, REPOCTX_API_KEY, then the provider's own OPENAI_BASE_URL /
    OPENAI_API_KEY / ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY / OLLAMA_HOST.

    ``context_tokens`` is the context window to ask for where the server takes one per request
    (Ollama's ``num_ctx``): the prompt budget plus the completion.

    ``timeout`` is the longest silence from the server (seconds), ``connect_timeout`` the time
    to connect, ``max_retries`` the retries of a failed call (429, 5xx, timeouts); the CLI takes
    them from --model-timeout, --connect-timeout, --model-retries or the settings
    ``model_timeout_s``, ``model_connect_timeout_s``, ``model_retries``.
    """
    env = os.environ if env is None else env
    spec = (spec or env.get("REPOCTX_MODEL") or "").strip()
    if not spec:
        raise ModelConfigError()
    if timeout <= 0:
        raise ModelConfigError(
            f"The model timeout must be more than 0 seconds, got {timeout:g} — pass e.g. "
            "--model-timeout 600."
        )
    if connect_timeout <= 0:
        raise ModelConfigError(
            f"The connect timeout must be more than 0 seconds, got {connect_timeout:g} — pass "
            "e.g. --connect-timeout 10."
        )
    if max_retries < 0:
        raise ModelConfigError(
            f"The model retries must be 0 or more, got {max_retries} — pass e.g. --model-retries 2."
        )
    provider, sep, model = spec.partition(":")
    if not sep:
        provider, model = "openai", spec
    provider = provider.strip().lower()
    model = model.strip()
    if not model:
        raise ModelConfigError(
            f"No model name after {provider}: in {spec!r} — write e.g. {provider}:MODEL."
        )
    make = providers.factory(provider)
    if make is None:
        known = ", ".join(f"{p}:" for p in providers.provider_names())
        raise ModelConfigError(
            f"Unknown model provider {provider!r} in {spec!r} — use one of {known}; for a model "
            f"name that itself contains ':' (an Ollama tag) write ollama:{spec} or openai:{spec}."
        )
    options = {
        "timeout": timeout,
        "connect_timeout": connect_timeout,
        "retry": RetryPolicy(max_retries=max_retries),
        "sleep": sleep,
        "stream": stream,
        "on_text": on_text,
        "name": f"{provider}:{model}",
    }
    request = providers.ClientRequest(
        spec, provider, model, base_url, api_key, env, options, context_tokens
    )
    return make(request)


__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "DEFAULT_RETRIES",
    "DEFAULT_TIMEOUT_S",
    "LOCAL_SERVERS",
    "AnthropicClient",
    "AuthError",
    "BadRequestError",
    "ChatTemplate",
    "Completion",
    "ContextTooLongError",
    "MalformedResponseError",
    "Message",
    "ModelClient",
    "ModelConfigError",
    "ModelConnectionError",
    "ModelError",
    "ModelTimeoutError",
    "PromptCounter",
    "OllamaClient",
    "OpenAIClient",
    "QuotaExceededError",
    "RateLimitError",
    "RetryBudget",
    "RetryPolicy",
    "ScriptExhaustedError",
    "ScriptedCall",
    "ScriptedModel",
    "ServiceError",
    "ToolCall",
    "TextCalls",
    "ToolSpec",
    "Usage",
    "UnknownModelError",
    "create_model",
    "family_of",
    "model_tokenizer",
    "parse_text_calls",
    "prose",
    "retry_budget",
]
