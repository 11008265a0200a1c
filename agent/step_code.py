"""The code a loop step's prompt shows: a context pack (retrieval's `assemble_context`) for the
plan step's query within the budget the prompt leaves, through the same deny list and the same
redaction as every tool result — the pack enters the prompt directly, not through the tools.
The same query on the same index generation gives the same pack, so steps that stay on one plan
step with similar results skip the search (a write bumps the generation).
"""

from __future__ import annotations

from indexer import Config
from retrieval.context import ContextPack, assemble_context
from retrieval.tokens import TokenCounter

from .redact import redact_pack
from .tools import ToolContext


class StepCode:
    """``retrieve(query, budget)`` for agent/run_prompts.py, over one run's tool context."""

    def __init__(self, config: Config, ctx: ToolContext, counter: TokenCounter) -> None:
        self.config, self.ctx, self.counter = config, ctx, counter
        self._packs: dict[tuple[str, int, int], ContextPack] = {}

    def __call__(self, query: str, budget: int) -> ContextPack:
        session, cfg = self.ctx.session, self.config
        index = session.index(cfg)
        key = (query, budget, index.graph.generation())
        if key not in self._packs:
            searcher = session.searcher(cfg, semantic=session.embed_model(cfg) is not None)
            pack = assemble_context(index, query, budget, searcher=searcher, tokenizer=self.counter)
            self._packs = {key: redact_pack(pack, self.ctx.workspace.is_hidden)}
        return self._packs[key]
