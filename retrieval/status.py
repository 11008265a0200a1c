"""What an index holds and how fresh it is against the working tree."""

from __future__ import annotations

import json
import os
from typing import Any

from indexer.changes import unmatched
from indexer.config import Config
from indexer.graph import store
from indexer.graph.reads import GraphReads
from indexer.parse.discovery import discover
from indexer.parse.languages import kind_of, language_for_file

from .freshness import build_progress


def pending_changes(config: Config, conn) -> dict[str, int]:
    """Files changed, added or deleted on disk since the last build (stat only). Only the
    files the index does not hold as they are are looked at one by one, as a build does."""
    found = discover(config, skip_unparsable=True).files
    others, gone = unmatched(found, GraphReads(conn).file_stats())
    root = os.path.join(str(config.root), "")
    fresh = {f.path for f in others if language_for_file(f.path, root + f.path) is not None}
    gone_set = set(gone)
    changed = len(fresh & gone_set)
    return {"changed": changed, "added": len(fresh) - changed, "deleted": len(gone_set) - changed}


def files_by_language(conn) -> dict[str, dict[str, int]]:
    """Indexed files by language (most first) and by kind (code | docs | config)."""
    rows = GraphReads(conn).parsed_files_by_language()
    kinds: dict[str, int] = {}
    for lang, n in rows:
        kinds[kind_of(lang)] = kinds.get(kind_of(lang), 0) + n
    return {"by_language": dict(rows), "by_kind": dict(sorted(kinds.items()))}


def _vectors(config: Config, db) -> dict[str, Any] | None:
    """Model, location (where the index recorded it; never credentials), coverage and
    ``state``: ``ok``, ``behind`` (chunks without a vector), ``missing`` (the table is gone),
    ``damaged`` (it cannot be read; ``damage`` says why) or
    ``unchecked`` (object storage: not contacted by a status); ``fix`` says what to run."""
    from indexer.locations import storage_options, vectors_uri
    from indexer.phases.semantic import STAMP_META
    from indexer.vectors.table import table_damage, table_missing

    model = store.get_meta(db, "embed_model")
    if not model:
        return None
    done, total = GraphReads(db.conn).vector_coverage()
    uri = vectors_uri(config, db.conn)
    missing = table_missing(uri)
    dim = store.get_meta(db, "embed_dim") or ""
    damage = table_damage(uri, storage_options(config), store.get_meta(db, STAMP_META), model,
                          int(dim) if dim.isdigit() else 0)
    if damage:
        state, fix = "damaged", "run `repoctx index verify --repair` to set it aside and re-embed"
        missing = True  # no vector can be read: coverage 0
    elif missing:
        state, fix = "missing", "run `repoctx index build` to re-embed"
    elif done < total:
        state, fix = "behind", "run `repoctx index build` to embed the rest"
    else:
        state, fix = ("unchecked" if missing is None else "ok"), ""
    return {
        "model": model,
        "uri": uri,
        "state": state,
        "coverage": (0.0 if missing else int(10000 * done / total) / 10000) if total else 1.0,
        "chunks": total,
        "fix": fix,
        **({"damage": damage} if damage else {}),
    }


def _history(config: Config) -> dict[str, Any]:
    """The git-history index: state (``ok``, ``no_git``, ``error``...), commits, and a note."""
    from indexer.history.store import history_status

    return history_status(config.index_path)


def index_status(config: Config) -> dict[str, Any]:
    db = store.open_for_read(config.index_path)
    conn = db.conn
    try:
        last = store.get_meta(db, "last_build")
        lb = json.loads(last) if last else {}
        return {
            "index_dir": str(config.index_path),
            "root": str(config.root),
            "schema_version": store.schema_version(db),
            "generation": int(store.get_meta(db, "generation", "0") or 0),
            "files": GraphReads(conn).parsed_file_count(),
            "symbols": lb.get("symbols", 0),
            "references": lb.get("references", 0),
            "resolved_pct": lb.get("resolved_pct", 0.0),
            **files_by_language(conn),
            "pending": pending_changes(config, conn),
            "vectors": _vectors(config, db),
            "history": _history(config),
            "last_build": lb,
            "build": build_progress(config.index_path, conn),
            "graph": store.disk_usage(config.index_path),
        }
    finally:
        conn.close()
