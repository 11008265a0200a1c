"""The provider registry: ``provider:model`` specs name a factory that an adapter module
registers beside its client class, so a new provider is one file (its client and a
``@register("name")`` factory) plus one import in ``agent/models/__init__.py``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .base import ModelClient


@dataclass(frozen=True)
class ClientRequest:
    """What `create_model` resolved, for a provider's factory."""

    spec: str
    provider: str
    model: str
    base_url: str | None  # the caller's, before any environment variable
    api_key: str | None
    env: Mapping[str, str]
    #: timeout, connect_timeout, retry, sleep, stream, on_text, name: every client takes them.
    options: Mapping[str, Any]
    #: The context window to ask for where a server takes one per request (Ollama's num_ctx).
    context_tokens: int | None = None

    def first(self, *names: str) -> str | None:
        """The first of the environment variables ``names`` that is set and not blank."""
        for name in names:
            value = (self.env.get(name) or "").strip()
            if value:
                return value
        return None

    def url(self, *env_names: str) -> str | None:
        """The base URL: the caller's, else REPOCTX_MODEL_BASE_URL, else ``env_names``."""
        return self.base_url or self.first("REPOCTX_MODEL_BASE_URL", *env_names)

    def key(self, *env_names: str) -> str | None:
        """The API key: the caller's, else REPOCTX_API_KEY, else ``env_names``."""
        return self.api_key or self.first("REPOCTX_API_KEY", *env_names)


Factory = Callable[[ClientRequest], ModelClient]
_FACTORIES: dict[str, Factory] = {}


def register(*names: str) -> Callable[[Factory], Factory]:
    """Decorator: ``factory`` builds the client for specs ``name:MODEL`` of each of ``names``."""

    def add(factory: Factory) -> Factory:
        for name in names:
            if name in _FACTORIES and _FACTORIES[name] is not factory:
                raise ValueError(f"model provider {name!r} is registered twice")
            _FACTORIES[name] = factory
        return factory

    return add


def factory(name: str) -> Factory | None:
    return _FACTORIES.get(name)


def provider_names() -> tuple[str, ...]:
    """Registered providers, in registration order."""
    return tuple(_FACTORIES)


def host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()
