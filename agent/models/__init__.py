"""Model adapters: one protocol (`ModelClient`) over OpenAI-compatible servers, Ollama's native
API, Anthropic and a scripted replay model, chosen by a `provider:model` spec; and how each
model's prompts are counted (tokenizer.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

from .anthropic import DEFAULT_BASE_URL as ANTHROPIC_BASE_URL
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
from .ollama import OllamaClient, ollama_base_url
from .openai import DEFAULT_BASE_URL as OPENAI_BASE_URL
from .openai import OpenAIClient
from .scripted import ScriptedCall, ScriptedModel
from .text_calls import TextCalls, parse_text_calls, prose
from .tokenizer import ChatTemplate, ModelTokenizer, family_of, model_tokenizer

#: Local OpenAI-compatible servers and their default addresses; none needs a key.
#: (`ollama:` is Ollama's native API, which can set the context size; `ollama-openai:` its /v1.)
LOCAL_SERVERS = {
    "ollama-openai": "http://localhost:11434/v1",
    "lmstudio": "http://localhost:1234/v1",
    "llamacpp": "http://localhost:8080/v1",
    "vllm": "http://localhost:8000/v1",
}
PROVIDERS = ("openai", "anthropic", "ollama", "scripted", *LOCAL_SERVERS)


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
    spec = (spec or _first(env, "REPOCTX_MODEL") or "").strip()
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
    if provider == "scripted":
        return ScriptedModel(model, name=f"scripted:{model}")
    options = {
        "timeout": timeout,
        "connect_timeout": connect_timeout,
        "retry": RetryPolicy(max_retries=max_retries),
        "sleep": sleep,
        "stream": stream,
        "on_text": on_text,
        "name": f"{provider}:{model}",
    }
    if provider == "anthropic":
        url = base_url or _first(env, "REPOCTX_MODEL_BASE_URL", "ANTHROPIC_BASE_URL")
        key = api_key or _first(env, "REPOCTX_API_KEY", "ANTHROPIC_API_KEY")
        if not key and _host(url or ANTHROPIC_BASE_URL) == "api.anthropic.com":
            raise ModelConfigError(
                f"No API key for {spec} — set ANTHROPIC_API_KEY (or REPOCTX_API_KEY)."
            )
        return AnthropicClient(model, base_url=url, api_key=key, **options)
    if provider == "openai":
        url = base_url or _first(env, "REPOCTX_MODEL_BASE_URL", "OPENAI_BASE_URL")
        key = api_key or _first(env, "REPOCTX_API_KEY", "OPENAI_API_KEY")
        if not key and _host(url or OPENAI_BASE_URL) == "api.openai.com":
            raise ModelConfigError(
                f"No API key for {spec} — set OPENAI_API_KEY (or REPOCTX_API_KEY), or set "
                "REPOCTX_MODEL_BASE_URL to a local OpenAI-compatible server."
            )
        return OpenAIClient(model, base_url=url, api_key=key, **options)
    if provider == "ollama":
        url = base_url or _first(env, "REPOCTX_MODEL_BASE_URL", "OLLAMA_HOST")
        key = api_key or _first(env, "REPOCTX_API_KEY")
        num_ctx = -(-context_tokens // 1024) * 1024 if context_tokens else None
        return OllamaClient(model, base_url=url, api_key=key, num_ctx=num_ctx, **options)
    if provider in LOCAL_SERVERS:
        url = base_url or _first(env, "REPOCTX_MODEL_BASE_URL") or LOCAL_SERVERS[provider]
        if provider == "ollama-openai" and not base_url and _first(env, "OLLAMA_HOST"):
            url = _first(env, "REPOCTX_MODEL_BASE_URL") or (
                ollama_base_url(_first(env, "OLLAMA_HOST")) + "/v1"
            )
        key = api_key or _first(env, "REPOCTX_API_KEY")
        return OpenAIClient(model, base_url=url, api_key=key, **options)
    known = ", ".join(f"{p}:" for p in PROVIDERS)
    raise ModelConfigError(
        f"Unknown model provider {provider!r} in {spec!r} — use one of {known}; for a model name "
        f"that itself contains ':' (an Ollama tag) write ollama:{spec} or openai:{spec}."
    )


def _first(env: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = (env.get(name) or "").strip()
        if value:
            return value
    return None


def _host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "DEFAULT_RETRIES",
    "DEFAULT_TIMEOUT_S",
    "LOCAL_SERVERS",
    "PROVIDERS",
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
    "ModelTokenizer",
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
