"""The indexer as the layers above see it: one face.

retrieval, agent and cli import from here only (``from indexer import Index, SymbolRecord``),
never from a module inside; an import-linter contract holds them to it. What they get: the
`Index` handle (reads of the graph, the lexical index, the history and the vectors; builds),
the records and errors that cross layers, the configuration, and the few helpers of the
indexer that the agent's tools share (safe file reads, the deny list, git without the
repository's config, one atomic write).

Inside, the indexer is five packages and a driver:

- ``parse/``    files to rows: discovery, languages and their queries, parsing, chunking, workers
- ``vectors/``  embedding models, their tokenizers, the LanceDB table of chunk vectors
- ``graph/``    the SQLite graph: schema and generations, writes, resolution, reads, lexical index
- ``history/``  the git-history index
- ``phases/``   the build's phases over one change set: graph (and lexical), history, vectors
- ``ops/``      what runs beside or after builds: watch, verify and repair, snapshots
- ``safety/``   what an untrusted tree may not do to the process indexing it
- ``state.py``  the index's state, decided once before a build (missing, damaged, schema, current)
- ``build.py``  the build: decides the index's state, then runs the phases

Names load lazily (PEP 562): ``import indexer`` costs nothing, so a parse worker or a one-shot
``repoctx symbol`` imports only what it uses; `__all__` lists the face and type checkers see
the imports below `TYPE_CHECKING`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: name -> the module inside that defines it
_EXPORTS: dict[str, str] = {
    # the handle
    "Index": "indexer.index",
    # records that cross layers
    "BuildStats": "indexer.models",
    "CLASS_KINDS": "indexer.models",
    "FUNCTION_KINDS": "indexer.models",
    "Progress": "indexer.models",
    "RefRecord": "indexer.models",
    "SymbolRecord": "indexer.models",
    "FileFilter": "indexer.graph.records",
    "NamedDefinition": "indexer.graph.records",
    "RefRow": "indexer.graph.records",
    "GraphReads": "indexer.graph.reads",
    "LexicalReads": "indexer.graph.lexical_reads",
    "HistoryReader": "indexer.history.reads",
    "VectorReader": "indexer.vectors.reader",
    # errors
    "ConfigError": "indexer.errors",
    "EmbeddingModelError": "indexer.errors",
    "IndexDamagedError": "indexer.errors",
    "IndexLockedError": "indexer.errors",
    "ModelMismatchError": "indexer.errors",
    "NoIndexError": "indexer.errors",
    "RepoctxError": "indexer.errors",
    "SchemaError": "indexer.errors",
    "VectorTableDamagedError": "indexer.errors",
    "VectorsMissingError": "indexer.errors",
    "StoreError": "indexer.errors",
    "GitConfigError": "indexer.safety.gitsafe",
    # configuration: the indexer's settings, the table's machinery (each layer above declares
    # its own section with it; cli composes them) and what a repository may not loosen
    "Config": "indexer.config",
    "DEFAULT_EMBED_MODEL": "indexer.config",
    "INDEX_SETTINGS": "indexer.config",
    "load_config": "indexer.config",
    "Setting": "indexer.settings",
    "Settings": "indexer.settings",
    "env_name": "indexer.settings",
    "adds": "indexer.config_trust",
    "drops": "indexer.config_trust",
    "looser_sandbox": "indexer.config_trust",
    "turns_on": "indexer.config_trust",
    "is_config_path": "indexer.config_files",
    "storage_options": "indexer.locations",
    # builds, status and operations
    "stats_dict": "indexer.phases.graph",
    "history_status": "indexer.history.store",
    "create_embedder": "indexer.vectors.embed",
    "verify": "indexer.ops.verify",
    "repair": "indexer.ops.verify",
    "list_snapshots": "indexer.ops.snapshot",
    "pull": "indexer.ops.snapshot",
    "push": "indexer.ops.snapshot",
    "snapshot_uri": "indexer.ops.snapshot",
    # languages and terms
    "KINDS": "indexer.parse.languages",
    "is_text_format": "indexer.parse.languages",
    "kind_of": "indexer.parse.languages",
    "language_for_content": "indexer.parse.languages",
    "language_for_path": "indexer.parse.languages",
    "languages_of_kind": "indexer.parse.languages",
    "ts_parser": "indexer.parse.languages",
    "is_test_path": "indexer.parse.testpaths",
    "STOPWORDS": "indexer.parse.terms",
    "split_identifier": "indexer.parse.terms",
    "fts_stems": "indexer.graph.lexical_reads",
    "fts_tables": "indexer.graph.lexical_reads",
    # names from the repository, made safe to show
    "content": "indexer.display",
    "json_safe": "indexer.display",
    "place": "indexer.display",
    "shown": "indexer.display",
    # what an untrusted tree may not do (shared with the agent's tools)
    "READ_FLAGS": "indexer.safety.nofollow",
    "open_beneath": "indexer.safety.nofollow",
    "openat2_available": "indexer.safety.nofollow",
    "plain_relative": "indexer.safety.nofollow",
    "read_regular": "indexer.safety.nofollow",
    "DEFAULT_DENY": "indexer.safety.denylist",
    "denied_by_default": "indexer.safety.denylist",
    "deny_spec": "indexer.safety.denylist",
    "git_env": "indexer.safety.gitsafe",
    "find_git_dirs": "indexer.safety.gitsafe",
    "check_index_dir": "indexer.safety.index_dir_guard",
    "atomic_writer": "indexer.atomic",
    "write_atomic": "indexer.atomic",
    # the CLI: damage met mid-read (the error a read of the graph raises when SQLite fails),
    # what a full disk left, watching the tree
    "DatabaseError": "indexer.errors",
    "OperationalError": "indexer.errors",
    "damaged": "indexer.graph.store",
    "is_damage": "indexer.graph.store",
    "graph_file": "indexer.graph.store",
    "readable_meta": "indexer.graph.store",
    "CHECK": "indexer.ops.watch_filter",
    "KEEP": "indexer.ops.watch_filter",
    "RULE_FILES": "indexer.ops.watch_filter",
    "ChangeFilter": "indexer.ops.watch_filter",
    "event_filter": "indexer.ops.watch_filter",
    "WatchSettings": "indexer.ops.watch",
    "Watcher": "indexer.ops.watch",
    "LOG_FILE": "indexer.ops.watch_daemon",
    "start_detached": "indexer.ops.watch_daemon",
    "stop_watcher": "indexer.ops.watch_daemon",
    "watch_status": "indexer.ops.watch_daemon",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'indexer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from indexer.atomic import atomic_writer, write_atomic
    from indexer.config import DEFAULT_EMBED_MODEL, INDEX_SETTINGS, Config, load_config
    from indexer.config_files import is_config_path
    from indexer.config_trust import adds, drops, looser_sandbox, turns_on
    from indexer.display import content, json_safe, place, shown
    from indexer.errors import (
        ConfigError,
        DatabaseError,
        EmbeddingModelError,
        IndexDamagedError,
        IndexLockedError,
        ModelMismatchError,
        NoIndexError,
        OperationalError,
        RepoctxError,
        SchemaError,
        StoreError,
        VectorsMissingError,
        VectorTableDamagedError,
    )
    from indexer.graph.lexical_reads import LexicalReads, fts_stems, fts_tables
    from indexer.graph.reads import GraphReads
    from indexer.graph.records import FileFilter, NamedDefinition, RefRow
    from indexer.graph.store import damaged, graph_file, is_damage, readable_meta
    from indexer.history.reads import HistoryReader
    from indexer.history.store import history_status
    from indexer.index import Index
    from indexer.locations import storage_options
    from indexer.models import (
        CLASS_KINDS,
        FUNCTION_KINDS,
        BuildStats,
        Progress,
        RefRecord,
        SymbolRecord,
    )
    from indexer.ops.snapshot import list_snapshots, pull, push, snapshot_uri
    from indexer.ops.verify import repair, verify
    from indexer.ops.watch import Watcher, WatchSettings
    from indexer.ops.watch_daemon import LOG_FILE, start_detached, stop_watcher, watch_status
    from indexer.ops.watch_filter import CHECK, KEEP, RULE_FILES, ChangeFilter, event_filter
    from indexer.parse.languages import (
        KINDS,
        is_text_format,
        kind_of,
        language_for_content,
        language_for_path,
        languages_of_kind,
        ts_parser,
    )
    from indexer.parse.terms import STOPWORDS, split_identifier
    from indexer.parse.testpaths import is_test_path
    from indexer.phases.graph import stats_dict
    from indexer.safety.denylist import DEFAULT_DENY, denied_by_default, deny_spec
    from indexer.safety.gitsafe import GitConfigError, find_git_dirs, git_env
    from indexer.safety.index_dir_guard import check_index_dir
    from indexer.safety.nofollow import (
        READ_FLAGS,
        open_beneath,
        openat2_available,
        plain_relative,
        read_regular,
    )
    from indexer.settings import Setting, Settings, env_name
    from indexer.vectors.embed import create_embedder
    from indexer.vectors.reader import VectorReader
