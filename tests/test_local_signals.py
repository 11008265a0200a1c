"""The second-stage signals inside the best files (retrieval/local_signals.py) on a real indexed
repository with real vectors (the hashing embedder), and the query-vector reuse they rely on."""

from __future__ import annotations

import numpy as np
import pytest

from indexer import Index
from indexer.build import build
from indexer.config import load_config
from indexer.vectors.embed import HashingEmbedder
from retrieval.fusion import FusionModel, fuse
from retrieval.local_signals import LocalLexical, LocalVectors, best_files
from retrieval.pipeline import default_signals, rank, run_signals
from retrieval.query import parse_query
from retrieval.search import Searcher
from retrieval.signals import Scope, SignalContext
from retrieval.sources import ChunkLexical
from tests.conftest import make_repo

# ``report.py`` talks about rounded invoice totals everywhere: a repository-wide search for a
# rounding question fills its first hits with it. ``billing.py`` is the file the question is
# about, but only one of its functions (``round_invoice_total``) rounds anything.
_REPORT = "\n\n".join(
    f"def rounding_report_{i}(invoices):\n"
    f"    \"\"\"Report {i} of rounded invoice totals: the total in cents, rounded half up,\n"
    f"    and which rounded totals are wrong. Rounded totals, wrong totals, cents.\"\"\"\n"
    + "".join(f"    total_{j} = sum(invoice.total for invoice in invoices if invoice.total > {j})\n"
              for j in range(8))
    + "    return total_0\n"
    for i in range(6)
)
_PAD = "".join(f"    step_{j} = value if value else {j}\n" for j in range(30))
FILES = {
    "app/report.py": _REPORT + "\n",
    "app/billing.py": f'''
"""Billing: invoice lines, taxes, currencies and totals."""


def invoice_lines(invoice, value=None):
    """The lines of an invoice."""
{_PAD}    return list(invoice.lines)


def invoice_tax(invoice, value=None):
    """The tax of an invoice."""
{_PAD}    return sum(line.tax for line in invoice_lines(invoice))


def round_invoice_total(total, value=None):
    """Totals are rounded half up to whole cents."""
{_PAD}    cents = total * 100
    return int(cents + 0.5) / 100


def invoice_currency(invoice, value=None):
    """The currency of an invoice."""
{_PAD}    return invoice.currency or "EUR"
''',
    "app/ledger.py": '''
        def post_entry(book, entry):
            book.append(entry)
        ''',
    # unrelated code, so that the question's words are rare in the index, as in a real one
    **{f"app/misc_{i}.py": f"def helper_{i}(items):\n    return sorted(items)[:{i}]\n" for i in range(12)},
}
QUESTION = "invoice total is rounded wrong: cents rounded half up give a wrong invoice total"


class CountingEmbedder(HashingEmbedder):
    """The hashing embedder, counting the texts it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.texts = 0

    def embed(self, texts):
        self.texts += len(texts)
        return super().embed(texts)


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    root = make_repo(tmp_path_factory.mktemp("local") / "repo", FILES)
    emb = CountingEmbedder()
    cfg = load_config(root, env={}, jobs=1, embed_model="hashing")
    build(cfg, embed=True, embedder=emb)
    with Index.open(cfg) as idx:
        yield root, cfg, idx, emb


def _ctx(indexed, seed_files: list[str] | None = None) -> SignalContext:
    _, _, idx, emb = indexed
    ctx = SignalContext(idx, Scope(), searcher=Searcher(idx, embedder=emb))
    if seed_files is not None:  # a first stage that ranked these files, best first
        from retrieval.signals import Hit

        ctx.cache["seed_ranking"] = fuse(
            {"path": [Hit("file", p, 1.0 / (i + 1)) for i, p in enumerate(seed_files)]},
            idx, FusionModel.rrf(),
        )
    return ctx


def test_stage_two_only_and_inside_the_best_files(indexed):
    q = parse_query(QUESTION)
    assert LocalLexical().run(_ctx(indexed), q, 20) == []  # no first stage: nothing to refine
    assert LocalVectors().run(_ctx(indexed), q, 20) == []
    ctx = _ctx(indexed, ["app/billing.py", "app/ledger.py", "app/report.py"])
    for sig in (LocalLexical(files=1), LocalVectors(files=1)):
        hits = sig.run(ctx, q, 20)
        assert hits and {h.path for h in hits} == {"app/billing.py"}, sig.name
    three = {h.path for h in LocalLexical(files=3).run(ctx, q, 50)}
    assert three == {"app/billing.py", "app/report.py"}  # ledger.py has none of the words


def test_finds_the_definition_the_repository_wide_search_crowds_out(indexed):
    ctx = _ctx(indexed, ["app/billing.py", "app/report.py"])
    q = parse_query(QUESTION)
    k = 4
    wide = ChunkLexical().run(ctx, q, k)
    assert all("round_invoice_total" not in h.symbol for h in wide)  # crowded out at this depth
    local = LocalLexical().run(ctx, q, k)
    assert local[0].symbol.endswith("round_invoice_total")
    # and it is the fused ranking's best definition once the second stage runs
    runs = run_signals(ctx, QUESTION, default_signals(vectors=True, history=False, local_vectors=True), k)
    assert runs.hits["lexical_local"] and runs.hits["semantic_local"]
    ranking = fuse(runs.hits, ctx.index, FusionModel.rrf())
    best = next(r for r in ranking.units if r.unit.path == "app/billing.py")
    assert best.unit.qualname.endswith("round_invoice_total")
    assert {"lexical_local"} <= {e.signal for e in best.evidence}


def test_scope_applies_to_the_best_files(indexed):
    _, _, idx, emb = indexed
    ctx = SignalContext(idx, Scope(path_glob="app/report*"), searcher=Searcher(idx, embedder=emb))
    ctx.cache["seed_ranking"] = _ctx(indexed, ["app/billing.py", "app/report.py"]).cache["seed_ranking"]
    assert best_files(ctx) == ["app/report.py"]
    assert {h.path for h in LocalLexical().run(ctx, parse_query(QUESTION), 20)} == {"app/report.py"}


def test_the_query_is_embedded_once_per_search(indexed):
    *_, emb = indexed
    ctx = _ctx(indexed)
    before = emb.texts
    ranking = rank(ctx, QUESTION, default_signals(vectors=True, history=False, local_vectors=True), FusionModel.rrf())
    assert ranking.units
    # the semantic signal and the one inside the best files share one query vector
    assert emb.texts - before == 1
    vec = ctx.searcher.query_vector(QUESTION[:2000])
    assert emb.texts - before == 1 and np.allclose(vec, HashingEmbedder().embed([QUESTION])[0])


def test_vector_search_in_named_files(indexed):
    _, _, idx, emb = indexed
    s = Searcher(idx, embedder=emb)
    got = s.semantic("ledger entry book", 10, paths=["app/ledger.py"])
    assert got
    paths = {r[0] for r in idx.db.conn.execute(
        f"SELECT f.path FROM chunks c JOIN files f ON f.id = c.file_id WHERE c.id IN "
        f"({','.join(str(c.chunk_id) for c in got)})")}
    assert paths == {"app/ledger.py"}
    assert s.semantic("ledger entry book", 10, paths=[]) == []
    assert {c.chunk_id for c in s.semantic("ledger entry book", 50)} > {c.chunk_id for c in got}


def test_per_file_takes_rounds_so_one_file_cannot_crowd_out_the_others():
    from retrieval.local_signals import per_file
    from retrieval.signals import Hit

    hits = [Hit("chunk", "big.py", 10 - i, chunk_id=i) for i in range(8)]
    hits += [Hit("chunk", "small.py", 1.0, chunk_id=100), Hit("chunk", "other.py", 0.5, chunk_id=200)]
    got = per_file(hits, ["small.py", "big.py", "gone.py"], 6)
    # rounds in the first stage's file order; each file's own order kept; at most 6 // 3 each
    assert [(h.path, h.chunk_id) for h in got] == [("small.py", 100), ("big.py", 0), ("big.py", 1)]
    assert per_file(hits, ["big.py"], 3) == hits[:3]
