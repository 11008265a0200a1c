"""VectorStore on real LanceDB tables in tmp_path, with HashingEmbedder vectors."""

from __future__ import annotations

import numpy as np
import pytest

from indexer.errors import ModelMismatchError
from indexer.vectors.embed import HashingEmbedder
from indexer.vectors.reader import VectorReader
from indexer.vectors.table import VectorRow, VectorStore, glob_filter

EMB = HashingEmbedder(64)

SNIPPETS = {
    "src/jsonio.py": "def parse_json_document(text):\n    return json.loads(text)",
    "src/net/http.py": "def fetch_url(url):\n    return urllib.request.urlopen(url).read()",
    "src/net/socket_server.py": "class SocketServer:\n    def serve_forever(self): ...",
    "web/app.ts": "function renderWidget(props) { return html`<div>${props.title}</div>` }",
    "lib/math_util.go": "func AddNumbers(a int, b int) int { return a + b }",
    "docs/it's here.md": "Quoted paths with 'quotes' and 100% literal_underscores",
}
LANG = {"py": "python", "ts": "typescript", "go": "go", "md": "markdown"}


def rows_for(files: dict[str, str], model: str = EMB.name) -> list[VectorRow]:
    texts = list(files.values())
    vectors = EMB.embed(texts)
    out = []
    for i, (path, text) in enumerate(files.items()):
        lang = LANG[path.rsplit(".", 1)[1]]
        out.append(
            VectorRow(f"{path}#1", f"h:{text}", path, lang, 1, 2, f"sym{i}", model, vectors[i])
        )
    return out


@pytest.fixture
def store(tmp_path) -> VectorStore:
    vs = VectorStore.open(str(tmp_path / "vectors.lance"), EMB.dim, EMB.name)
    vs.upsert(rows_for(SNIPPETS))
    return vs


def query(text: str) -> np.ndarray:
    return EMB.embed([text])[0]


def test_upsert_search_round_trip(store):
    assert store.count() == len(SNIPPETS)
    hits = store.search(query("parse json document"), k=3)
    assert hits[0].path == "src/jsonio.py"
    assert hits[0].chunk_id == "src/jsonio.py#1"
    assert (hits[0].start_line, hits[0].end_line, hits[0].symbol) == (1, 2, "sym0")
    assert hits[0].score == pytest.approx(
        float(query("parse json document") @ EMB.embed([SNIPPETS["src/jsonio.py"]])[0]), abs=1e-5
    )
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_upsert_replaces_by_chunk_id(store):
    row = rows_for({"src/jsonio.py": "def render_widget_title(): pass"})[0]
    store.upsert([row])
    assert store.count() == len(SNIPPETS)
    assert store.search(query("render widget title"), k=1)[0].path == "src/jsonio.py"
    assert store.vectors_for_hashes([f"h:{SNIPPETS['src/jsonio.py']}"]) == {}


def test_reopen_keeps_rows(store, tmp_path):
    again = VectorStore.open(str(tmp_path / "vectors.lance"), EMB.dim, EMB.name)
    assert again.count() == len(SNIPPETS)
    assert again.chunk_ids() == store.chunk_ids()


def test_vectors_for_hashes_reuses_by_content(store):
    text = SNIPPETS["src/net/http.py"]
    got = store.vectors_for_hashes([f"h:{text}", "h:missing"])
    assert set(got) == {f"h:{text}"}
    np.testing.assert_allclose(got[f"h:{text}"], EMB.embed([text])[0], rtol=1e-6)


def test_vectors_for_many_hashes(tmp_path):
    vs = VectorStore.open(str(tmp_path / "v.lance"), 8, "m")
    n = 1200  # more than one IN (...) batch
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(n, 8)).astype(np.float32)
    vs.upsert(
        [
            VectorRow(f"c{i}", f"h{i}", f"f{i}.py", "python", 1, 1, "", "m", vectors[i])
            for i in range(n)
        ]
    )
    got = vs.vectors_for_hashes([f"h{i}" for i in range(0, n, 2)] + ["nope"])
    assert len(got) == n // 2
    np.testing.assert_array_equal(got["h1100"], vectors[1100])


def test_delete_paths(store):
    store.delete_paths(["src/jsonio.py", "docs/it's here.md", "not/there.py"])
    assert store.count() == len(SNIPPETS) - 2
    assert all(h.path != "src/jsonio.py" for h in store.search(query("parse json"), k=10))


def test_chunk_id_reconciliation(store):
    ids = store.chunk_ids()
    assert ids == {f"{p}#1" for p in SNIPPETS}
    stale = {"src/net/http.py#1", "web/app.ts#1"}
    store.delete_chunk_ids(sorted(stale))
    assert store.chunk_ids() == ids - stale
    store.delete_chunk_ids([])
    assert store.count() == len(SNIPPETS) - 2


def test_model_mismatch(store, tmp_path):
    uri = str(tmp_path / "vectors.lance")
    with pytest.raises(ModelMismatchError) as err:
        VectorStore.open(uri, EMB.dim, "sentence-transformers/all-MiniLM-L6-v2")
    msg = str(err.value)
    assert "hashing:64" in msg and "all-MiniLM-L6-v2" in msg and "--reembed" in msg
    with pytest.raises(ModelMismatchError):
        VectorStore.open(uri, 32, EMB.name)
    fresh = VectorStore.reset(uri, 384, "other")
    assert fresh.count() == 0
    assert VectorStore.open(uri, 384, "other").count() == 0


def test_upsert_rejects_wrong_dim_or_model(store):
    good = rows_for({"a.py": "x"})[0]
    with pytest.raises(ValueError):
        store.upsert([VectorRow("a", "h", "a.py", "python", 1, 1, "", EMB.name, np.ones(3))])
    with pytest.raises(ValueError):
        store.upsert([VectorRow("a", "h", "a.py", "python", 1, 1, "", "other", good.vector)])


def test_language_filter(store):
    hits = store.search(query("parse json document"), k=10, language="go")
    assert [h.path for h in hits] == ["lib/math_util.go"]


@pytest.mark.parametrize(
    ("glob", "expected"),
    [
        ("src/*", {"src/jsonio.py", "src/net/http.py", "src/net/socket_server.py"}),
        ("src/net/*.py", {"src/net/http.py", "src/net/socket_server.py"}),
        ("*.go", {"lib/math_util.go"}),
        ("src/net/[hx]*.py", {"src/net/http.py"}),
        ("docs/it's here.md", {"docs/it's here.md"}),
        ("src/?sonio.py", {"src/jsonio.py"}),
        ("src_*", set()),  # `_` is literal, not LIKE's any-character
    ],
)
def test_path_glob_filter(store, glob, expected):
    hits = store.search(query("parse json document"), k=10, path_glob=glob)
    assert {h.path for h in hits} == expected


def test_glob_filter_translation():
    assert glob_filter("a_b/*.py") == (r"path LIKE 'a\_b/%.py'", False)
    assert glob_filter("it's/100%") == (r"path LIKE 'it''s/100\%'", False)
    assert glob_filter("src/[ab]*.py") == ("path LIKE 'src/%'", True)


def test_path_glob_over_fetches(tmp_path):
    """A [...] glob is post-filtered: the store must fetch past non-matching neighbours."""
    vs = VectorStore.open(str(tmp_path / "v.lance"), 8, "m")
    base = np.ones(8, dtype=np.float32)
    rows = [
        VectorRow(f"a{i}", f"ha{i}", f"src/a{i}.py", "python", 1, 1, "", "m", base)
        for i in range(120)
    ]
    far = base.copy()
    far[0] = -3
    rows.append(VectorRow("b", "hb", "src/b.py", "python", 1, 1, "", "m", far))
    vs.upsert(rows)
    hits = vs.search(base, k=1, path_glob="src/[b]*.py")
    assert [h.chunk_id for h in hits] == ["b"]


def test_ann_index_keeps_nearest_neighbour_after_more_upserts(tmp_path):
    dim = 32
    vs = VectorStore.open(str(tmp_path / "v.lance"), dim, "m")
    rng = np.random.default_rng(7)

    def batch(start: int, n: int) -> tuple[list[VectorRow], np.ndarray]:
        v = rng.normal(size=(n, dim)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        return [
            VectorRow(
                f"c{start + i}",
                f"h{start + i}",
                f"f{(start + i) % 7}.py",
                "python",
                1,
                1,
                "",
                "m",
                v[i],
            )
            for i in range(n)
        ], v

    first, v1 = batch(0, 600)
    vs.upsert(first)
    assert not vs.maybe_index(threshold=10_000)
    assert vs.maybe_index(threshold=500)
    assert vs.has_vector_index()
    assert not vs.maybe_index(threshold=500)  # once
    assert vs.search(v1[123], k=1)[0].chunk_id == "c123"

    second, v2 = batch(600, 50)  # not in the index until optimize()
    vs.upsert(second)
    assert vs.index_coverage() == (600, 50)
    assert vs.search(v2[17], k=1)[0].chunk_id == "c617"
    assert vs.search(v2[17], k=1)[0].score == pytest.approx(1.0, abs=1e-4)
    assert vs.search(v1[5], k=1)[0].chunk_id == "c5"
    vs.delete_chunk_ids(["c5"])
    assert vs.search(v1[5], k=1)[0].chunk_id != "c5"

    vs.optimize()
    assert vs.index_coverage() == (649, 0)
    assert vs.search(v2[17], k=1)[0].chunk_id == "c617"
    assert vs.search(v1[300], k=1, path_glob=f"f{300 % 7}.py")[0].chunk_id == "c300"


def test_empty_table(tmp_path):
    vs = VectorStore.open(str(tmp_path / "v.lance"), 8, "m")
    assert vs.search(np.ones(8), k=5, language="python", path_glob="a[b]*") == []
    assert (vs.count(), vs.chunk_ids(), vs.vectors_for_hashes(["h"])) == (0, set(), {})
    assert not vs.maybe_index(threshold=0)
    assert vs.index_coverage() == (0, 0)
    with pytest.raises(ValueError):
        vs.search(np.ones(3))


def test_needs_optimize_after_many_small_writes(tmp_path):
    vs = VectorStore.open(str(tmp_path / "v.lance"), 4, "m")
    assert not vs.needs_optimize(max_small_fragments=5)
    for i in range(5):
        vs.upsert([VectorRow(f"c{i}", f"h{i}", "a.py", "python", 1, 1, "", "m", np.ones(4))])
    assert vs.needs_optimize(max_small_fragments=5)
    vs.optimize()
    assert not vs.needs_optimize(max_small_fragments=5)
    assert vs.count() == 5


def test_search_in_named_files_is_exact_with_an_ann_index(tmp_path):
    """``paths`` keeps the chunks of those files and orders all of them as brute-force cosine
    similarity does, with the ANN index and the path index in place."""
    dim = 32
    vs = VectorStore.open(str(tmp_path / "v.lance"), dim, "m")
    rng = np.random.default_rng(11)
    v = rng.normal(size=(1200, dim)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    vs.upsert([VectorRow(f"c{i}", f"h{i}", f"f{i % 40}.py", "python", 1, 1, "", "m", v[i])
               for i in range(len(v))])
    assert vs.maybe_index(threshold=500)
    assert {"chunk_id_idx", "content_hash_idx", "path_idx"} <= {ix.name for ix in vs._table.list_indices()}
    q = rng.normal(size=dim).astype(np.float32)
    q /= np.linalg.norm(q)
    files = ["f3.py", "f17.py"]
    got = vs.search(q, k=1000, paths=files)
    mine = [i for i in range(len(v)) if f"f{i % 40}.py" in files]
    want = sorted(mine, key=lambda i: -float(v[i] @ q))
    assert [h.chunk_id for h in got] == [f"c{i}" for i in want]
    assert {h.path for h in got} == set(files)
    assert vs.search(q, k=10, paths=[]) == []


class _ThroughLanceDB(VectorStore):
    """The query as LanceDB's own API runs it (the path before Lance was called directly)."""

    def _query(self, query, limit, where, exact=False):
        from indexer.vectors.table import REFINE_FACTOR, arrow_hits

        q = (self._table.search(query).distance_type("cosine")
             .select(["chunk_id", "path", "start_line", "end_line", "symbol", "_distance"])
             .limit(limit).refine_factor(REFINE_FACTOR))
        if where:
            q = q.where(where, prefilter=True)
        if exact:
            q = q.bypass_vector_index()
        return arrow_hits(q.to_arrow())


def test_lance_queries_answer_as_lancedb_and_readers_follow_later_writes(tmp_path):
    """Searches through Lance return LanceDB's results with and without the ANN index, with
    every filter; a reader opened before a write sees it on its next query; a reader finds no
    table -> None, never creates one, never writes; another model's table is refused."""
    dim = 32
    uri = str(tmp_path / "v.lance")
    assert VectorReader.open(uri, dim, "m") is None and not (tmp_path / "v.lance").exists()
    vs = VectorStore.open(uri, dim, "m")
    rng = np.random.default_rng(5)
    v = rng.normal(size=(1200, dim)).astype(np.float32)
    langs = ("python", "go", "typescript")
    vs.upsert([VectorRow(f"c{i}", f"h{i}", f"pkg{i % 3}/f{i % 40}.py", langs[i % 3], i, i + 1,
                         f"s{i}", "m", v[i]) for i in range(len(v))])
    reader = VectorReader.open(uri, dim, "m")
    ref = _ThroughLanceDB(vs._dataset, uri, dim, "m")
    assert isinstance(reader, VectorReader) and reader.count() == len(v)
    asks = [{}, {"language": "go"}, {"languages": ["go", "python"]}, {"path_glob": "pkg1/*"},
            {"path_glob": "pkg[12]/f1?.py"}, {"paths": ["pkg0/f3.py", "pkg2/f17.py"]}]
    for indexed in (False, True):
        if indexed:
            assert vs.maybe_index(threshold=500)
        for _ in range(3):
            q = rng.normal(size=dim).astype(np.float32)
            for kw in asks:
                want = ref.search(q, k=15, **kw)
                for got in (reader.search(q, k=15, **kw), vs.search(q, k=15, **kw)):
                    assert [h.chunk_id for h in got] == [h.chunk_id for h in want] and want, kw
                    assert [h.score for h in got] == pytest.approx([h.score for h in want],
                                                                   abs=1e-6)
    late = np.ones(dim, dtype=np.float32)
    vs.upsert([VectorRow("late", "hl", "new.py", "python", 1, 2, "late", "m", late)])
    assert reader.count() == len(v) + 1 and "late" in reader.chunk_ids()
    assert reader.search(late, k=1)[0].chunk_id == "late"
    with pytest.raises(TypeError, match="read-only"):
        reader.upsert([VectorRow("x", "hx", "x.py", "python", 1, 2, "x", "m", late)])
    with pytest.raises(TypeError, match="read-only"):
        reader.delete_chunk_ids(["late"])
    with pytest.raises(ModelMismatchError, match="--reembed"):
        VectorReader.open(uri, dim, "other")


def test_searches_and_small_writes_do_not_import_lancedb(tmp_path):
    """A one-shot semantic search, and an edit's embedding run on an existing table (reads,
    upsert, delete), go through Lance: importing LanceDB costs seconds (its namespace client
    builds pydantic schemas at import)."""
    import subprocess
    import sys

    uri = str(tmp_path / "v.lance")
    VectorStore.open(uri, EMB.dim, EMB.name).upsert(rows_for(SNIPPETS))
    code = (
        "import sys, numpy as np\n"
        "from indexer.vectors.reader import VectorReader\n"
        "from indexer.vectors.table import VectorRow, VectorStore\n"
        f"r = VectorReader.open({uri!r}, {EMB.dim}, {EMB.name!r})\n"
        f"hits = r.search(np.ones({EMB.dim}, dtype=np.float32), k=3)\n"
        f"w = VectorStore.open({uri!r}, {EMB.dim}, {EMB.name!r})\n"
        f"row = VectorRow('n', 'hn', 'n.py', 'python', 1, 2, '', {EMB.name!r}, np.ones({EMB.dim}))\n"
        "w.upsert([row]); n = w.count(); w.delete_chunk_ids(['n'])\n"
        "print(len(hits), n - w.count(), 'lancedb' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["3", "1", "False"]
