"""The settings table of repoctx: each layer's section, composed here, in one place, and
handed to config loading.

The indexer declares its settings (indexer/config.py), retrieval its own
(retrieval/settings.py), the agent the model's and the `[agent]` table (agent/settings.py);
every command loads its configuration with :func:`load_config` here, so a key of any layer is
known, checked and read from every source, and an unknown one is an error. A library caller
of the indexer alone gets the indexer's section (`indexer.load_config`), which leaves the other
layers' keys unread."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent.settings import AGENT_SETTINGS
from indexer import INDEX_SETTINGS, Config
from indexer import load_config as load_with
from retrieval.settings import RETRIEVAL_SETTINGS

__all__ = ["SETTINGS", "load_config"]

SETTINGS = (INDEX_SETTINGS + RETRIEVAL_SETTINGS + AGENT_SETTINGS).whole()


def load_config(root: str | Path, env: Mapping[str, str] | None = None, *,
                trust_repo: bool = False, **overrides: Any) -> Config:
    """indexer.load_config with every layer's settings (see there)."""
    return load_with(root, env, settings=SETTINGS, trust_repo=trust_repo, **overrides)
