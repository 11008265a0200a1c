"""The index's own state: what it holds, how fresh it is against the working tree, and a build
in progress (`Index.status`, `Index.stale_paths`, `Index.build_progress` ask here).

Freshness is stamped per answer: the generation it came from, and which of its files changed
on disk since they were indexed (one stat per distinct file, at query time).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from indexer.changes import unmatched
from indexer.graph import store
from indexer.graph.reads import GraphReads
from indexer.graph.records import BUILD_PHASE, PHASES
from indexer.parse.discovery import discover
from indexer.parse.languages import kind_of, language_for_file

if TYPE_CHECKING:
    from indexer.config import Config
    from indexer.graph.store import ReadDB


def stale_paths(graph: GraphReads, paths: Iterable[str], root: str) -> set[str]:
    """Paths under ``root`` whose size or mtime on disk differ from what the index saw (or that
    are gone)."""
    out: set[str] = set()
    unique = set(paths)
    seen = graph.file_stats_of(unique) if unique else {}
    for path in unique:
        row = seen.get(path)
        try:
            st = os.stat(os.path.join(root, path))
        except OSError:
            out.add(path)
            continue
        if row is None or (row[0], row[1]) != (st.st_size, st.st_mtime_ns):
            out.add(path)
    return out


def build_progress(index_dir: Path, graph: GraphReads) -> dict[str, Any] | None:
    """A build running on this index (or one that stopped before its end), from the phase it
    records in the graph and the pid in the write lock: ``phase``, ``pid``, ``running``,
    ``ready`` (what can be relied on meanwhile) and, when it stopped, ``fix``. None when no
    build is running and the last one finished."""
    from indexer.lock import WriteLock
    from indexer.safety.lifetime import pid_alive

    pid = WriteLock(index_dir).holder()
    alive = bool(pid) and pid_alive(pid)
    raw = graph.meta_value(BUILD_PHASE)
    state = json.loads(raw) if raw else None
    if state is None:
        if not alive:
            return None
        # writing a new generation (readers keep this one until it is complete) or starting
        return {"phase": "rebuild", "pid": pid, "running": True,
                "ready": "this index stays as it is until the new one replaces it"}
    running = alive and state.get("pid") == pid
    out = {"phase": state["phase"], "pid": state.get("pid"), "running": running,
           "since": state.get("since"), "ready": PHASES.get(state["phase"], "")}
    if not running:
        out["fix"] = "the build stopped before its end: run `repoctx index build` to finish it"
    return out


def pending_changes(config: Config, graph: GraphReads) -> dict[str, int]:
    """Files changed, added or deleted on disk since the last build (stat only). Only the
    files the index does not hold as they are are looked at one by one, as a build does."""
    found = discover(config, skip_unparsable=True).files
    others, gone = unmatched(found, graph.file_stats())
    root = os.path.join(str(config.root), "")
    fresh = {f.path for f in others if language_for_file(f.path, root + f.path) is not None}
    gone_set = set(gone)
    changed = len(fresh & gone_set)
    return {"changed": changed, "added": len(fresh) - changed, "deleted": len(gone_set) - changed}


def files_by_language(graph: GraphReads) -> dict[str, dict[str, int]]:
    """Indexed files by language (most first) and by kind (code | docs | config)."""
    rows = graph.parsed_files_by_language()
    kinds: dict[str, int] = {}
    for lang, n in rows:
        kinds[kind_of(lang)] = kinds.get(kind_of(lang), 0) + n
    return {"by_language": dict(rows), "by_kind": dict(sorted(kinds.items()))}


def _vectors(config: Config, db: ReadDB) -> dict[str, Any] | None:
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


def index_status(config: Config, db: ReadDB) -> dict[str, Any]:
    """What ``repoctx index status`` reports of the graph ``db`` reads (``config``'s index)."""
    graph = GraphReads(db.conn)
    last = store.get_meta(db, "last_build")
    lb = json.loads(last) if last else {}
    return {
        "index_dir": str(config.index_path),
        "root": str(config.root),
        "schema_version": store.schema_version(db),
        "generation": int(store.get_meta(db, "generation", "0") or 0),
        "files": graph.parsed_file_count(),
        "symbols": lb.get("symbols", 0),
        "references": lb.get("references", 0),
        "resolved_pct": lb.get("resolved_pct", 0.0),
        **files_by_language(graph),
        "pending": pending_changes(config, graph),
        "vectors": _vectors(config, db),
        "history": _history(config),
        "last_build": lb,
        "build": build_progress(config.index_path, graph),
        "graph": store.disk_usage(config.index_path),
    }
