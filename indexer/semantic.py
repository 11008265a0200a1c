"""The embedding phase: vectors for chunks that lack them, reused by content hash.

SQLite says which chunks exist; this phase makes LanceDB agree. It runs after the graph and
lexical index are committed (they are usable while vectors fill in), commits per batch
(a killed run resumes where it stopped) and never embeds the same content twice.
"""

from __future__ import annotations

import os
import re
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import sqlite_utils

from . import store
from .chunking import chunk_hash
from .config import Config
from .errors import ModelMismatchError
from .models import Progress

#: Chunks fetched, reused or embedded, and committed together.
BATCH = 256
_TEST_PATH_SQL = (
    "(f.path GLOB 'test*/*' OR f.path GLOB '*/test*/*' OR f.path GLOB '*/test_*.py' "
    "OR f.path GLOB 'test_*.py' OR f.path GLOB '*_test.*' OR f.path GLOB '*/tests/*')"
)


@dataclass(frozen=True, slots=True)
class EmbedStats:
    chunks: int
    embedded: int  # chunks that needed the model
    reused: int  # chunks whose content hash already had a vector
    removed: int  # vectors of chunks that no longer exist
    model: str
    seconds: float
    coverage: float  # share of chunks with a vector, 0..1


def vectors_uri(config: Config) -> str:
    return str(config.extra.get("vectors_uri") or (config.index_path / "vectors.lance"))


def coverage(conn) -> tuple[int, int]:
    """(chunks with a vector, all chunks)."""
    done, total = conn.execute("SELECT coalesce(sum(embedded), 0), count(*) FROM chunks").fetchone()
    return int(done), int(total)


def check_model(db: sqlite_utils.Database, model: str, reembed: bool) -> None:
    """Refuse to mix models in one index unless asked to rebuild the vectors."""
    recorded = store.get_meta(db, "embed_model")
    if recorded and recorded != model and not reembed:
        raise ModelMismatchError(
            f"This index was embedded with {recorded!r}, not {model!r} — rerun with `--reembed` "
            f"to rebuild the vectors with {model!r}, or use `--embed-model {recorded}`."
        )


def embed_pending(
    config: Config,
    db: sqlite_utils.Database,
    *,
    embedder=None,
    reembed: bool = False,
    progress: Callable | None = None,
    limit: int | None = None,
) -> EmbedStats:
    """Give every chunk a vector. ``embedder`` defaults to ``config.embed_model``; it is only
    loaded when some chunk has no vector yet."""
    from .vectors import VectorRow, VectorStore

    t0 = time.perf_counter()
    conn = db.conn
    model_name = canonical_model_name(config.embed_model) if embedder is None else embedder.name
    check_model(db, model_name, reembed)
    if reembed:
        with conn:
            conn.execute("UPDATE chunks SET embedded = 0")
    pending_total = conn.execute("SELECT count(*) FROM chunks WHERE embedded = 0").fetchone()[0]
    tombstones = [r[0] for r in conn.execute("SELECT chunk_id FROM vector_tombstones")]
    if not pending_total and not tombstones and not reembed:
        done, total = coverage(conn)
        return EmbedStats(total, 0, 0, 0, model_name, time.perf_counter() - t0, done / total if total else 1.0)
    if embedder is None:
        from .embed import create_embedder

        embedder = create_embedder(config.embed_model, batch_size=config.embed_batch_size)
    uri = vectors_uri(config)
    if reembed:
        vs = VectorStore.reset(uri, embedder.dim, embedder.name)
    else:
        vs = VectorStore.open(uri, embedder.dim, embedder.name)
    with conn:
        store.set_meta(db, "embed_model", embedder.name)
        store.set_meta(db, "embed_dim", str(embedder.dim))
    embedded = reused = done = 0
    total = pending_total if limit is None else min(limit, pending_total)
    t_embed = time.perf_counter()
    while done < total:
        rows = conn.execute(
            "SELECT c.id, c.content_hash, f.path, f.language, c.start_line, c.end_line, c.symbol, c.header "
            "FROM chunks c JOIN files f ON f.id = c.file_id WHERE c.embedded = 0 "
            # product code before tests: coverage that matters most fills in first
            f"ORDER BY {_TEST_PATH_SQL}, c.id LIMIT ?",
            [min(BATCH, total - done)],
        ).fetchall()
        if not rows:
            break
        have = vs.vectors_for_hashes({r[1] for r in rows})
        need: dict[str, str] = {}
        for text_hash, text in _texts(config.root, rows, have).items():
            need[text_hash] = text
        if need:
            hashes = list(need)
            vectors = embedder.embed([need[h] for h in hashes])
            have.update(zip(hashes, vectors, strict=True))
            embedded += len(hashes)
        out, ok_ids = [], []
        for cid, h, path, lang, s, e, sym, _ in rows:
            vec = have.get(h)
            if vec is None:  # the file changed since it was chunked: the next build re-chunks it
                continue
            out.append(VectorRow(str(cid), h, path, lang or "", s, e, sym, embedder.name, vec))
            ok_ids.append((cid,))
        reused += len(out) - min(len(out), len(need))
        vs.upsert(out)
        with conn:
            conn.executemany("UPDATE chunks SET embedded = 1 WHERE id = ?", ok_ids)
            if len(ok_ids) < len(rows):  # unreadable now: leave for the next build, but move on
                stale = [(r[0],) for r in rows if (r[0],) not in set(ok_ids)]
                conn.executemany("UPDATE chunks SET embedded = -1 WHERE id = ?", stale)
        done += len(rows)
        if progress:
            progress(Progress("embed", done, total))
    # Vectors of deleted chunks go last: until now they could still be reused by content hash
    # (a moved function, a renamed file).
    removed = 0
    if tombstones:
        vs.delete_chunk_ids([str(i) for i in tombstones])
        removed = len(tombstones)
        with conn:
            conn.executemany("DELETE FROM vector_tombstones WHERE chunk_id = ?", [(i,) for i in tombstones])
    if embedded > 1000:  # never after a one-file edit: these take seconds on a large table
        vs.maybe_index()
        if vs.needs_optimize():
            vs.optimize()
    done_n, total_n = coverage(conn)
    return EmbedStats(
        chunks=total_n,
        embedded=embedded,
        reused=reused,
        removed=removed,
        model=embedder.name,
        seconds=time.perf_counter() - t_embed,
        coverage=done_n / total_n if total_n else 1.0,
    )


def _texts(root: Path, rows: list, have: dict) -> dict[str, str]:
    """Embedding input (header + code) for the chunks whose hash has no vector yet, read from
    the files (one read per file), checked against the stored content hash."""
    by_file: dict[str, list] = defaultdict(list)
    for r in rows:
        if r[1] not in have:
            by_file[r[2]].append(r)
    out: dict[str, str] = {}
    for path, items in by_file.items():
        try:
            with open(os.path.join(root, path), encoding="utf-8", errors="replace") as fh:
                lines = fh.read().splitlines()
        except OSError:
            continue
        for _, h, _, _, s, e, _, header in items:
            body = "\n".join(lines[s - 1 : e])
            if chunk_hash(header, body) == h:
                out[h] = header + "\n" + body
    return out


@cache
def canonical_model_name(model: str) -> str:
    """The model id an index records: the default's full id, `hashing:DIM`, or as given."""
    m = re.fullmatch(r"hashing(?::(\d+))?", model)
    if m:
        return f"hashing:{m.group(1) or 64}"
    from .embed import load_tokenizer

    return load_tokenizer(model).name
