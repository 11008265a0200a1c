"""Retrieval's settings: the token counter and the context budget (`tokenizer` and
`context_budget` in .repoctx.toml, REPOCTX_TOKENIZER, REPOCTX_CONTEXT_BUDGET, the user's config),
declared here once and read back typed (:class:`RetrievalSettings`). cli composes this section
with the indexer's and the agent's (cli/settings.py)."""

from __future__ import annotations

from dataclasses import dataclass

from indexer import Config, Setting, Settings
from retrieval.tokens import DEFAULT_TOKENIZER

__all__ = ["DEFAULT_BUDGET", "RETRIEVAL_SETTINGS", "RetrievalSettings"]

#: Tokens of context that `context` and `ask` assemble unless told otherwise.
DEFAULT_BUDGET = 8000

RETRIEVAL_SETTINGS = Settings({
    "tokenizer": Setting("str", DEFAULT_TOKENIZER),
    "context_budget": Setting("int", DEFAULT_BUDGET, lo=1, hi=10_000_000, note="tokens"),
})


@dataclass(frozen=True)
class RetrievalSettings:
    """How context is counted and how much of it is assembled."""

    #: The token counter (retrieval/tokens.py get_tokenizer): auto, o200k, qwen3, hf:PATH ...
    tokenizer: str = DEFAULT_TOKENIZER
    #: Tokens of context.
    context_budget: int = DEFAULT_BUDGET

    @classmethod
    def from_config(cls, config: Config) -> RetrievalSettings:
        """The settings of ``config``, checked (a Config made in code too), else the defaults."""
        return cls(RETRIEVAL_SETTINGS.value(config, "tokenizer"),
                   RETRIEVAL_SETTINGS.value(config, "context_budget"))
