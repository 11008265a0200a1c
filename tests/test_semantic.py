"""The semantic index end to end: chunks, vectors in LanceDB, reuse by content hash, model
mismatch, resumable embedding, and search in every mode on a planted answer."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cli.main import cli
from indexer import Index
from indexer.build import build
from indexer.config import load_config
from indexer.errors import ModelMismatchError
from indexer.graph import store
from indexer.phases.semantic import embed_pending
from indexer.vectors.embed import HashingEmbedder
from retrieval.search import Searcher
from tests.conftest import make_repo, write_files

FILES = {
    "net/upload.py": '''
        """Moving files to the storage service."""
        import time


        def push_blob_with_backoff(client, blob, attempts=5):
            """Send a blob again after transient connection errors, waiting longer each time."""
            delay = 0.5
            for _ in range(attempts):
                try:
                    return client.put(blob)
                except ConnectionError:
                    time.sleep(delay)
                    delay *= 2
            raise ConnectionError("gave up")
        ''',
    "text/render.py": '''
        def render_markdown_table(rows):
            """Format rows as a markdown table."""
            header = "| " + " | ".join(rows[0]) + " |"
            return header


        class HTMLEscaper:
            def escape_entities(self, text):
                return text.replace("&", "&amp;")
        ''',
    "web/parseHTTP.js": """
        // Parse the status line of an HTTP response.
        function parseHTTPResponse(raw) {
          const [line] = raw.split("\\r\\n");
          return line.split(" ")[1];
        }
        """,
}


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path / "r", FILES)


def embedded_build(root, embedder, **kw):
    cfg = load_config(root, env={}, jobs=1, embed_model="hashing")
    return cfg, build(cfg, embed=True, embedder=embedder, **kw)


def searcher(cfg, embedder):
    return Searcher(Index.open(cfg), embedder=embedder)


def test_every_chunk_gets_one_vector_and_search_modes_find_planted_answers(repo):
    emb = HashingEmbedder()
    cfg, stats = embedded_build(repo, emb)
    assert stats.embedding["coverage"] == 1.0 and stats.embedding["embedded"] > 0
    s = searcher(cfg, emb)
    lex = s.search("parse http response status", mode="lexical", k=3)
    assert lex.hits[0].path == "web/parseHTTP.js"  # camelCase split into words
    sem = s.search("escape entities html", mode="semantic", k=3)
    assert sem.hits[0].path == "text/render.py" and "semantic" in sem.hits[0].scores
    hyb = s.search("HTMLEscaper.escape_entities", mode="hybrid", k=3)
    assert hyb.hits[0].path == "text/render.py" and hyb.hits[0].ranks.get("symbol") == 1
    assert s.search("markdown", mode="lexical", lang="python", path_glob="web/*").hits == ()


def test_moving_a_function_reembeds_nothing(repo):
    emb = HashingEmbedder()
    cfg, _ = embedded_build(repo, emb)
    before = emb.texts_embedded
    src = (repo / "net/upload.py").read_text()
    (repo / "net/upload.py").unlink()
    (repo / "net/moved").mkdir()
    (repo / "net/moved/upload2.py").write_text(src)
    _, stats = embedded_build(repo, emb)
    assert emb.texts_embedded == before  # same content hash: vector reused
    assert stats.embedding["reused"] > 0 and stats.embedding["removed"] > 0
    s = searcher(cfg, emb)
    assert {h.path for h in s.search("blob backoff", mode="semantic").hits} >= {"net/moved/upload2.py"}
    assert "net/upload.py" not in {h.path for h in s.search("blob backoff", mode="semantic").hits}


def test_one_function_edit_embeds_only_the_changed_chunk(repo):
    emb = HashingEmbedder()
    embedded_build(repo, emb)
    before = emb.texts_embedded
    write_files(repo, {"text/render.py": FILES["text/render.py"].replace("&amp;", "&amp;amp;")})
    embedded_build(repo, emb)
    assert emb.texts_embedded - before == 1


def test_model_mismatch_is_refused_then_reembed(repo):
    cfg, _ = embedded_build(repo, HashingEmbedder(64))
    with pytest.raises(ModelMismatchError, match="--reembed"):
        build(cfg, embed=True, embedder=HashingEmbedder(32))
    _, stats = embedded_build(repo, HashingEmbedder(32), reembed=True)
    assert stats.embedding["model"] == "hashing:32" and stats.embedding["coverage"] == 1.0


def test_embedding_resumes_without_redoing_batches(repo):
    cfg = load_config(repo, env={}, jobs=1)
    build(cfg)  # graph and lexical only
    emb = HashingEmbedder()
    db = store.open_for_write(cfg.index_path)
    first = embed_pending(cfg, db, embedder=emb, limit=2)  # as if killed after 2 chunks
    assert 0 < first.coverage < 1
    second = embed_pending(cfg, db, embedder=emb)
    assert second.coverage == 1.0
    total = db.execute("SELECT count(DISTINCT content_hash) FROM chunks").fetchone()[0]
    assert emb.texts_embedded == total  # nothing embedded twice


def _table(cfg, db, dim):
    from indexer.vectors.table import open_vectors

    vs = open_vectors(cfg, db.conn, dim, f"hashing:{dim}")
    rows = vs._table.search().select(["chunk_id", "content_hash", "vector"]).to_arrow().to_pylist()
    return vs, {r["chunk_id"]: (r["content_hash"], tuple(r["vector"])) for r in rows}


@pytest.mark.parametrize("scan_min", [0, 10**9], ids=["keys-read-once", "asked-per-batch"])
def test_long_run_reads_table_keys_once_and_writes_the_same_table(repo, monkeypatch, scan_min):
    """A long run reads the table's ids and hashes up front, appends rows for new ids and asks
    only about hashes the table holds; the table it writes is the one asking per batch writes,
    a rerun over rows already in the table (a run killed between the table write and the
    marks) merges instead of adding twice, and a copy of a function in another file is
    embedded once."""
    from indexer.phases import semantic

    monkeypatch.setattr(semantic, "BATCH", 2)  # several batches on a small repo
    monkeypatch.setattr(semantic, "KEY_SCAN_MIN", scan_min)
    write_files(repo, {"net/copy.py": FILES["net/upload.py"]})
    emb = HashingEmbedder()
    cfg, stats = embedded_build(repo, emb)
    db = store.open_for_write(cfg.index_path)
    chunks = dict(db.execute("SELECT id, content_hash FROM chunks").fetchall())
    assert len(set(chunks.values())) < len(chunks)  # the copy shares its hashes
    assert emb.texts_embedded == len(set(chunks.values()))  # each content embedded once
    vs, table = _table(cfg, db, emb.dim)
    assert {int(c): h for c, (h, _) in table.items()} == chunks and vs.count() == len(chunks)
    by_hash = {h: v for h, v in table.values()}
    assert all(table[str(c)][1] == by_hash[h] for c, h in chunks.items())
    with db.conn:  # as if killed after writing the table, before marking the chunks
        db.execute("UPDATE chunks SET embedded = 0")
    again = embed_pending(cfg, db, embedder=emb)
    assert again.embedded == 0 and again.reused == len(chunks)
    _, after = _table(cfg, db, emb.dim)
    assert after == table and vs.count() == len(chunks)  # merged, not added twice


def test_search_cli_json_reports_scores_per_source(repo):
    r = CliRunner().invoke(cli, ["index", "build", str(repo), "-q", "--embed-model", "hashing"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["search", "render markdown table", "-C", str(repo), "--json", "-k", "2"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    top = out["hits"][0]
    assert top["path"] == "text/render.py" and set(top["scores"]) >= {"lexical", "semantic"}
    assert out["semantic_coverage"] == 1.0
    r = CliRunner().invoke(cli, ["search", "render", "-C", str(repo), "--mode", "lexical"])
    assert "text/render.py:1-" in r.stdout


def test_real_default_model_end_to_end(repo):
    """The embedded default (all-MiniLM-L6-v2 from the installed package), offline."""
    cfg = load_config(repo, env={}, jobs=1)
    stats = build(cfg, embed=True)
    assert stats.embedding["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    s = searcher(cfg, None)
    hits = s.search("where do we retry failed uploads?", mode="semantic", k=3).hits
    assert hits[0].path == "net/upload.py"
