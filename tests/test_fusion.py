"""Signals and their fusion (retrieval/signals.py, sources.py, fusion.py, pipeline.py) on a real
indexed repository: the invariants every caller relies on."""

from __future__ import annotations

import json
import sqlite3

import pytest

from indexer import Index
from indexer.build import build
from indexer.config import load_config
from retrieval.fusion import RRF_K, FusionModel, fuse, ranked_chunks
from retrieval.pipeline import default_signals, rank, run_signals
from retrieval.query import parse_query
from retrieval.signals import Hit, Scope, SignalContext
from retrieval.sources import ChunkLexical, FileLexical, Frames, Names, Paths
from tests.conftest import git, make_repo, write_files

FILES = {
    "shop/__init__.py": '"""A toy shop."""\nfrom shop.tax import compute_tax as compute_tax\n',
    "shop/tax.py": '''
        """Tax rules per region."""


        class TaxError(Exception):
            """No tax rule for a region."""


        def rate_for(region: str) -> float:
            rates = {"eu": 0.2, "us": 0.07}
            if region not in rates:
                raise TaxError(f"no tax rate known for region {region}")
            return rates[region]


        def compute_tax(amount: float, region: str) -> float:
            return round(amount * rate_for(region), 2)
        ''',
    "shop/cart.py": '''
        from shop.tax import compute_tax

        DEFAULT_REGION = "eu"


        class Cart:
            """Items and totals."""

            def __init__(self):
                self.items = []

            def add(self, name, price):
                self.items.append((name, price))

            def subtotal(self):
                def line(item):
                    return item[1]
                return sum(line(i) for i in self.items)

            def checkout_total(self, region=DEFAULT_REGION):
                return self.subtotal() + compute_tax(self.subtotal(), region)
        ''',
    # relevance spread thin: every function mentions the shipping words once
    "shop/shipping.py": '''
        def parcel_weight(items):
            return sum(1 for _ in items)


        def carrier_for(weight):
            return "post" if weight < 5 else "freight"


        def shipping_cost(items):
            return 4.5 * parcel_weight(items)


        def delivery_days(region):
            return 2 if region == "eu" else 7
        ''',
    "tests/test_cart.py": '''
        from shop.cart import Cart


        def test_checkout_total_includes_tax_for_the_region():
            cart = Cart()
            cart.add("tea", 10.0)
            assert cart.checkout_total("eu") == 12.0
        ''',
}


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    root = make_repo(tmp_path_factory.mktemp("fusion") / "repo", FILES)
    cfg = load_config(root, env={}, jobs=1)
    build(cfg)
    with Index.open(cfg) as idx:
        yield root, cfg, idx


def _ctx(indexed, **scope) -> SignalContext:
    return SignalContext(indexed[2], scope=Scope(**scope))


def test_one_signal_alone_keeps_its_own_order(indexed):
    ctx = _ctx(indexed)
    hits = ChunkLexical().run(ctx, parse_query("tax rate for a region"), 20)
    assert hits
    ranking = fuse({"lexical": hits}, ctx.index, FusionModel.rrf())
    first_seen = list(dict.fromkeys(h.path for h in hits))
    assert [f.path for f in ranking.files] == first_seen


def test_every_hit_file_is_ranked_and_evidence_names_the_signals(indexed):
    ctx = _ctx(indexed)
    runs = run_signals(ctx, "Cart.checkout_total ignores the region tax", default_signals(vectors=False, history=False))
    ranking = fuse(runs.hits, ctx.index, FusionModel.rrf())
    hit_files = {h.path for hs in runs.hits.values() for h in hs}
    assert {f.path for f in ranking.files} == hit_files
    top = ranking.units[0]
    assert top.unit.qualname == "shop.cart.Cart.checkout_total"
    assert {e.signal for e in top.evidence} >= {"symbol", "lexical"}


def test_rrf_is_monotone_in_agreeing_signals(indexed):
    ctx = _ctx(indexed)
    a = [Hit("file", "shop/tax.py", 3.0), Hit("file", "shop/cart.py", 2.0)]
    b = [Hit("file", "shop/cart.py", 1.0)]
    alone = {f.path: f.score for f in fuse({"a": a}, ctx.index, FusionModel.rrf()).files}
    both = {f.path: f.score for f in fuse({"a": a, "b": b}, ctx.index, FusionModel.rrf()).files}
    assert both["shop/cart.py"] > alone["shop/cart.py"]
    assert both["shop/tax.py"] == alone["shop/tax.py"]
    assert both["shop/cart.py"] > both["shop/tax.py"]  # second once, first once beats first once


def test_fitted_model_still_counts_signals_it_never_saw(indexed):
    ctx = _ctx(indexed)
    model = FusionModel({"a.rr": 1.0}, {}, "test")
    runs = {"a": [Hit("file", "shop/tax.py", 1.0)], "new": [Hit("file", "shop/cart.py", 1.0)]}
    files = {f.path: f.score for f in fuse(runs, ctx.index, model).files}
    assert files["shop/cart.py"] > 0  # reciprocal rank of the unknown signal


def test_units_are_outermost_definitions_and_module_lines(indexed):
    ctx = _ctx(indexed)
    # a hit on the nested helper `line` names `Cart.subtotal`; one on module-level lines is a
    # module span of its own
    hits = [Hit("chunk", "shop/cart.py", 2.0, "shop.cart.Cart.subtotal", 1, 16, 18),
            Hit("chunk", "shop/cart.py", 1.0, "", 2, 1, 3)]
    ranking = fuse({"lexical": hits}, ctx.index, FusionModel.rrf())
    hit_units = [r.unit for r in ranking.units if r.evidence]
    assert hit_units[0].local == "Cart.subtotal"
    assert any(u.kind == "module" and (u.start, u.end) == (1, 3) for u in hit_units)


def test_a_class_owns_only_the_lines_outside_its_methods(indexed):
    from retrieval.units import file_units

    units = {u.local: u for u in file_units(indexed[2], "shop/cart.py")}
    cart, sub = units["Cart"], units["Cart.subtotal"]
    assert cart.is_class and not sub.is_class and "Cart.subtotal.line" not in units
    # header and docstring belong to the class; a hit inside a method names only the method
    assert cart.overlaps(cart.start, cart.start + 1)
    assert not cart.overlaps(sub.start, sub.end) and sub.overlaps(sub.start, sub.end)
    assert cart.own == frozenset(range(cart.start, cart.end + 1)) - {
        ln for u in units.values() if u is not cart and u.start >= cart.start
        and u.end <= cart.end for ln in range(u.start, u.end + 1)}


def test_units_are_reread_when_the_file_changes(tmp_path):
    from retrieval.units import file_units

    root = make_repo(tmp_path / "r", {"m.py": "def alpha():\n    return 1\n"})
    cfg = load_config(root, env={}, jobs=1)
    build(cfg)
    with Index.open(cfg) as idx:
        assert [u.local for u in file_units(idx, "m.py")] == ["alpha"]
    write_files(root, {"m.py": "class Beta:\n    def gamma(self):\n        pass\n"})
    build(cfg)
    with Index.open(cfg) as idx:
        assert [u.local for u in file_units(idx, "m.py")] == ["Beta", "Beta.gamma"]


def test_name_only_hits_rank_a_chunk(indexed):
    ctx = _ctx(indexed)
    hits = Names().run(ctx, parse_query("why does `compute_tax` round?"), 10)
    assert [h.symbol for h in hits] == ["shop.tax.compute_tax"]
    ranking = fuse({"symbol": hits}, ctx.index, FusionModel.rrf())
    chunks = ranked_chunks(ranking, ctx.index, 5)
    assert chunks and chunks[0].hit.path == "shop/tax.py"
    assert chunks[0].hit.start_line <= 16 <= chunks[0].hit.end_line


def test_paths_and_frames_match_printed_locations(indexed):
    ctx = _ctx(indexed)
    q = parse_query('Traceback (most recent call last):\n'
                    '  File "/opt/venv/lib/python3.11/site-packages/shop/tax.py", line 11, in rate_for\n'
                    'shop.tax.TaxError: no tax rate known for region mars\n')
    assert [h.path for h in Paths().run(ctx, q, 10)] == ["shop/tax.py"]
    frames = Frames().run(ctx, q, 10)
    assert frames[0].symbol == "shop.tax.rate_for"
    # the printed line drifted (the function is named, the line is inside another definition)
    drifted = parse_query('File "shop/tax.py", line 16, in rate_for')
    assert Frames().run(ctx, drifted, 10)[0].symbol == "shop.tax.rate_for"


def test_error_message_finds_the_code_that_raises_it(indexed):
    ctx = _ctx(indexed)
    ranking = rank(ctx, "shop.tax.TaxError: no tax rate known for region 'mars'",
                   default_signals(vectors=False, history=False), FusionModel.rrf())
    assert ranking.runs["error"] and ranking.runs["error"][0].path == "shop/tax.py"


def test_scope_leaves_tests_out_of_every_signal(indexed):
    ctx = _ctx(indexed, exclude_tests=True)
    runs = run_signals(ctx, "test checkout total includes tax for the region Cart",
                       default_signals(vectors=False, history=False))
    assert all(not h.path.startswith("tests/") for hs in runs.hits.values() for h in hs)
    with_tests = run_signals(_ctx(indexed), "test checkout total includes tax for the region",
                             default_signals(vectors=False, history=False))
    assert any(h.path.startswith("tests/") for hs in with_tests.hits.values() for h in hs)


def test_whole_file_lexical_sees_spread_relevance(indexed):
    ctx = _ctx(indexed)
    q = parse_query("parcel weight carrier shipping cost delivery days")
    files = [h.path for h in FileLexical().run(ctx, q, 10)]
    assert files[0] == "shop/shipping.py"


def test_file_documents_follow_edits_deletes_and_old_indexes(tmp_path):
    root = make_repo(tmp_path / "r", {"a.py": "def alpha():\n    return 1\n", "b.py": "def beta():\n    pass\n"})
    cfg = load_config(root, env={}, jobs=1)
    build(cfg)

    def docs() -> dict[str, str]:
        conn = sqlite3.connect(cfg.db_path)
        try:
            return dict(conn.execute(
                "SELECT f.path, t.body FROM files_fts t JOIN files f ON f.id = t.rowid").fetchall())
        finally:
            conn.close()

    assert "alpha" in docs()["a.py"]
    write_files(root, {"a.py": "def gamma_ray():\n    return 2\n"})
    (root / "b.py").unlink()
    git(root, "add", "-A")
    build(cfg)
    got = docs()
    assert set(got) == {"a.py"} and "gamma" in got["a.py"] and "alpha" not in got["a.py"]
    # an index from before the whole-file table (schema 3) gets it on its next build
    conn = sqlite3.connect(cfg.db_path)
    with conn:
        for table in ("files_fts", "files_fts_text", "chunks_fts_text"):  # none holds rows here
            conn.execute(f"DROP TABLE {table}")
        conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    conn.close()
    build(cfg)
    assert "gamma" in docs()["a.py"]


def test_names_follow_the_tasks_imports_and_the_packages_exports(indexed):
    ctx = _ctx(indexed)
    task = (
        "Rounding is off:\n```python\nimport shop as sp\nfrom shop.cart import Cart\n"
        "cart = Cart()\nsp.compute_tax(10.0, 'eu')\ncart.checkout_total()\n```\n"
    )
    q = parse_query(task)
    assert q.aliases["sp"] == "shop" and q.aliases["cart"] == "Cart"
    assert {"shop.compute_tax", "shop.cart.Cart.checkout_total"} <= set(q.identifiers)
    got = {h.symbol for h in Names().run(ctx, q, 10)}
    # `shop.compute_tax` is shop/__init__.py's re-export of shop.tax.compute_tax
    assert {"shop.tax.compute_tax", "shop.cart.Cart.checkout_total"} <= got


def test_fts_row_count_read_from_the_averages_record(indexed):
    _, _, idx = indexed
    conn = idx.db.conn
    for table in ("chunks_fts", "files_fts"):
        assert idx.lexical.table_docs(table) == conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] > 0
    assert idx.lexical.table_docs("no_such_fts") == 0


def test_a_search_without_vectors_uses_the_weights_fitted_without_them(indexed, tmp_path):
    from retrieval.fusion import _from_json

    plain = FusionModel({"lexical.rr": 1.0}, {}, "without semantic")
    model = FusionModel({"semantic.rr": 4.0, "lexical.rr": 0.1}, {}, "all",
                        ((frozenset({"semantic"}), plain),))
    assert model.for_signals({"lexical", "semantic"}) is model
    assert model.for_signals({"lexical", "path"}) is plain
    again = _from_json(model.to_json(), "x")
    assert again.for_signals({"lexical"}).file == plain.file
    assert again.for_signals({"lexical", "semantic"}).file == model.file
    # fuse scores lexical-only hits with the variant's weights, not the base model's
    ctx = _ctx(indexed)
    hits = {"lexical": ChunkLexical().run(ctx, parse_query("tax rate for a region"), 10)}
    got = [(f.path, round(f.score, 6)) for f in fuse(hits, ctx.index, model).files]
    assert got and got == [(f.path, round(f.score, 6)) for f in fuse(hits, ctx.index, plain).files]
    base_only = FusionModel(model.file, model.unit, "base")
    assert got != [(f.path, round(f.score, 6)) for f in fuse(hits, ctx.index, base_only).files]
    # and the shipped weights carry a variant for indexes without vectors
    shipped = FusionModel.load()
    assert "semantic" in {k.split(".")[0] for k in shipped.file}
    assert not any(k.startswith("semantic.") for k in shipped.for_signals({"lexical"}).file)


# --------------------------------------------------------------------------- fusion arithmetic
# Scores checked against the formulas written out by hand (retrieval/fusion.py's docstring).


def test_rrf_file_score_is_the_sum_of_reciprocal_ranks(indexed):
    _, _, idx = indexed
    runs = {
        "a": [Hit("file", "shop/tax.py", 3.0), Hit("file", "shop/cart.py", 2.0)],
        "b": [Hit("file", "shop/cart.py", 9.0)],
    }
    scores = {f.path: f.score for f in fuse(runs, idx, FusionModel.rrf()).files}
    assert scores["shop/tax.py"] == pytest.approx(1 / (RRF_K + 1))
    assert scores["shop/cart.py"] == pytest.approx(1 / (RRF_K + 2) + 1 / (RRF_K + 1))


def test_a_files_second_chunk_does_not_push_the_next_file_down(indexed):
    _, _, idx = indexed
    chunks = [
        Hit("chunk", "shop/tax.py", 5.0, start_line=1, end_line=3),
        Hit("chunk", "shop/tax.py", 4.0, start_line=5, end_line=8),
        Hit("chunk", "shop/cart.py", 3.0, start_line=1, end_line=3),
    ]
    files = fuse({"a": chunks}, idx, FusionModel.rrf()).files
    cart = next(f for f in files if f.path == "shop/cart.py")
    assert cart.score == pytest.approx(1 / (RRF_K + 2))  # second file, not third hit
    assert [e.rank for e in cart.evidence] == [2]


def test_fitted_score_is_bias_plus_weighted_features_plus_rrf_of_unknown_signals(indexed):
    _, _, idx = indexed
    model = FusionModel({"bias": 0.5, "a.rr": 2.0, "a.top1": 1.0, "a.rel": 3.0}, {}, "hand")
    runs = {
        "a": [Hit("file", "shop/tax.py", 4.0), Hit("file", "shop/cart.py", 1.0)],
        "new": [Hit("file", "shop/cart.py", 1.0)],
    }
    scores = {f.path: f.score for f in fuse(runs, idx, model).files}
    # tax: rank 1 of a (rr 1/2, top1, rel 4/4); cart: rank 2 of a (rr 1/3, rel 1/4) + RRF of "new"
    assert scores["shop/tax.py"] == pytest.approx(0.5 + 2 * (1 / 2) + 1.0 + 3 * 1.0)
    assert scores["shop/cart.py"] == pytest.approx(
        0.5 + 2 * (1 / 3) + 3 * 0.25 + 1 / (RRF_K + 1)
    )


def test_a_search_picks_the_variant_fitted_without_the_signals_it_lacks():
    without_sem = FusionModel({"bias": 1.0}, {}, "no semantic")
    without_both = FusionModel({"bias": 2.0}, {}, "no semantic, no history")
    model = FusionModel(
        {"bias": 0.0},
        {},
        "full",
        variants=(
            (frozenset({"semantic"}), without_sem),
            (frozenset({"semantic", "history"}), without_both),
        ),
    )
    assert model.for_signals({"lexical", "semantic", "history"}) is model
    assert model.for_signals({"lexical", "history"}) is without_sem
    assert model.for_signals({"lexical"}) is without_both
    # a variant is never used while a signal it was fitted without is there
    assert model.for_signals({"lexical", "semantic"}) is model


def test_weights_round_trip_through_their_json(tmp_path):
    model = FusionModel(
        {"bias": 0.1, "lexical.rr": 1.5},
        {"bias": -0.2, "semantic.rel": 0.7},
        "fit",
        variants=((frozenset({"semantic"}), FusionModel({"bias": 0.3}, {"bias": 0.4}, "v")),),
    )
    path = tmp_path / "weights.json"
    path.write_text(json.dumps(model.to_json()))
    back = FusionModel.load(path)
    assert dict(back.file) == dict(model.file) and dict(back.unit) == dict(model.unit)
    assert back.for_signals({"lexical"}).file == {"bias": 0.3}
    assert FusionModel.load(tmp_path / "missing.json").name == "rrf"  # no file: plain RRF


def test_prose_is_ranked_apart_from_code_and_never_crowds_it_out(tmp_path):
    """Code and prose have lexical tables of their own, whose BM25 are not on one scale. In a
    search of both, each table gives its own best hits (docs that repeat the task's words do not
    take code's places), and fusion ranks a signal's hits within their table, so every code
    file gets exactly the features it gets in a search of code alone."""
    from retrieval.fusion import file_candidates

    code = {f"shop/tax_{r}.py": f"def tax_{r}(cart):\n    return cart.total * {i}  # regional tax\n"
            for i, r in enumerate(("eu", "us", "uk"), 1)}
    # terms in more than half of a table's rows carry no weight: other code and prose around
    code |= {f"shop/util_{i}.py": f"def helper_{i}(x):\n    return x + {i}\n" for i in range(6)}
    docs = {f"docs/other_{i}.md": f"# Other {i}\n\nNothing about money here.\n" for i in range(6)}
    docs |= {f"docs/tax_{i}.md": "# Regional tax\n\n" + "The regional tax of a cart total.\n" * (3 + i)
            for i in range(3)}
    root = make_repo(tmp_path / "r", {**code, **docs})
    cfg = load_config(root, env={}, jobs=1)
    build(cfg)
    idx = Index.open(cfg)
    try:
        q = parse_query("the regional tax of a cart total")

        def runs(**scope):
            ctx = SignalContext(idx, scope=Scope(**scope))
            return {s.name: s.run(ctx, q, 2) for s in (ChunkLexical("lexical", "all"), FileLexical())}

        both, code_only = runs(), runs(kinds=("code",))
        for name, hits in both.items():
            mine = [h for h in hits if h.path.startswith("shop/")]
            assert mine == code_only[name] and len(mine) == 2, name  # k of code's own
            assert any(h.path.startswith("docs/") for h in hits), name  # and prose's
        feats_both = {p: f for p, f, _ in file_candidates(both)}
        feats_code = {p: f for p, f, _ in file_candidates(code_only)}
        assert feats_code and all(feats_both[p] == f for p, f in feats_code.items())
        assert any(feats_both[p]["lexical.top1"] == 1.0 for p in feats_both if p.startswith("docs/"))
    finally:
        idx.close()
