"""indexer.graph.reads: the one place that reads references as resolved edges and ambiguous
candidates together, on a real index; and no other layer reads those tables itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from indexer.graph.reads import GraphReads
from tests.lang_graph import graph_of

FILES = {
    "a/x.py": "def dup():\n    pass\n",
    "b/y.py": "def dup():\n    pass\n",
    "c/z.py": "def use():\n    dup()\n\n\ndef other():\n    dup()\n    dup()\n",
    "c/w.py": "from a.x import dup\n\n\ndef direct():\n    return dup()\n",
    "a/__init__.py": "",
}


@pytest.fixture(scope="module")
def conn(tmp_path_factory):
    yield from graph_of(tmp_path_factory, "graph", FILES)


def sym(conn, qualname: str) -> int:
    return conn.execute("SELECT id FROM symbols WHERE qualname = ?", [qualname]).fetchone()[0]


def test_references_are_resolved_first_then_candidates(conn):
    x_dup = sym(conn, "a.x.dup")
    rows = GraphReads(conn).references_to([x_dup], kinds=("call",))
    resolved = [r for r in rows if not r.ambiguous]
    ambiguous = [r for r in rows if r.ambiguous]
    assert [(r.path, r.line, r.enclosing) for r in resolved] == [("c/w.py", 5, "w.direct")]
    assert sorted((r.path, r.line) for r in ambiguous) == [("c/z.py", 2), ("c/z.py", 6), ("c/z.py", 7)]
    assert rows == resolved + ambiguous  # resolved come first
    assert all(r.target_id == x_dup for r in rows)
    assert all(r.confidence < resolved[0].confidence for r in ambiguous)
    # without candidates only the resolved edge; a kind filter that matches nothing: none
    assert GraphReads(conn).references_to([x_dup], candidates=False) == [
        r for r in GraphReads(conn).references_to([x_dup]) if not r.ambiguous
    ]
    assert GraphReads(conn).references_to([x_dup], kinds=("inherit",)) == []


def test_referrers_and_counts_include_candidates(conn):
    y_dup = sym(conn, "y.dup")  # reached only as a candidate
    assert GraphReads(conn).referrer_ids([y_dup]) == {sym(conn, "z.use"), sym(conn, "z.other")}
    counts = GraphReads(conn).reference_counts([y_dup, sym(conn, "a.x.dup")])
    assert counts[y_dup] == 3  # three ambiguous calls list it
    assert counts[sym(conn, "a.x.dup")] >= 4  # the same three, the resolved call, the import


def test_strongest_edges_group_pairs_and_keep_the_fanout(conn):
    other = sym(conn, "z.other")
    cands = GraphReads(conn).strongest_edges([other], outgoing=True, fanout=10, candidates=True)
    # two calls of dup() from other(): one edge per candidate, not per call
    assert sorted(t for _, t, _, _ in cands) == sorted([sym(conn, "a.x.dup"), sym(conn, "y.dup")])
    one = GraphReads(conn).strongest_edges([other], outgoing=True, fanout=1, candidates=True)
    assert len(one) == 1
    incoming = GraphReads(conn).strongest_edges([sym(conn, "a.x.dup")], outgoing=False, fanout=10, candidates=False
    )
    assert [(e, k) for e, _, k, _ in incoming if k == "call"] == [(sym(conn, "w.direct"), "call")]


def test_no_layer_above_the_indexer_reads_the_candidate_table():
    root = Path(__file__).resolve().parent.parent
    offenders = [
        str(p.relative_to(root))
        for layer in ("retrieval", "agent", "cli")
        for p in (root / layer).rglob("*.py")
        if re.search(r"\bref_candidates\b", p.read_text())
    ]
    assert offenders == []


def test_definition_reads(conn):
    rows = GraphReads(conn).definitions_in_file("c/z.py")
    assert sorted((r[1], r[2], r[4], r[5]) for r in rows) == [
        ("z", "module", 1, 7),
        ("z.other", "function", 5, 7),
        ("z.use", "function", 1, 2),
    ]
    use = GraphReads(conn).definition_id("z.use", "function")
    assert use == sym(conn, "z.use") and GraphReads(conn).definition_id("z.use", "class") is None
    assert GraphReads(conn).sibling_named("other", use, None) == "z.other"
    assert GraphReads(conn).sibling_named("absent", use, None) is None
    assert GraphReads(conn).definitions_named("dup", "function") and all(
        q.endswith(".dup") for q, _, _ in GraphReads(conn).definitions_named("dup", "function")
    )
    assert [r[3] for r in GraphReads(conn).symbol_rows([use])] == ["z.use"]
    assert GraphReads(conn).resolved_reference_count(sym(conn, "a.x.dup")) == 2  # the call, the import
    assert "c/z.py" in GraphReads(conn).files_with_phrase("dup")
    assert GraphReads(conn).unresolved_named("dup", ["c/z.py"]) == set()  # ambiguous, not unresolved


def test_a_lexical_only_index_has_no_model_and_no_vectors(conn):
    done, total = GraphReads(conn).vector_coverage()
    assert done == 0 and total > 0
    assert GraphReads(conn).embed_model() is None


#: Statements against a database, and SQL text.
_SQL = re.compile(r"\.execute(many|script)?\(|\bSELECT\b|sqlite3\.connect\(")


def _layer_files(root: Path, layer: str) -> list[Path]:
    return sorted((root / layer).rglob("*.py"))


def test_no_sql_outside_the_indexer():
    """The schema is the indexer's: the other layers read through indexer.graph.reads (references,
    definitions, files), indexer.graph.lexical_reads (FTS5, chunks) and indexer.history.reads."""
    root = Path(__file__).resolve().parent.parent
    offenders = [
        f"{p.relative_to(root)}:{i}"
        for layer in ("retrieval", "agent", "cli")
        for p in _layer_files(root, layer)
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if _SQL.search(line)
    ]
    assert offenders == [], "read the index through indexer.graph.reads, indexer.graph.lexical_reads or indexer.history.reads"


def test_retrieval_imports_sqlite3_for_annotations_only():
    """Retrieval names sqlite3 only under TYPE_CHECKING (the connection's type): it opens and
    queries nothing itself."""
    import ast

    root = Path(__file__).resolve().parent.parent
    offenders = []
    for p in _layer_files(root, "retrieval"):
        tree = ast.parse(p.read_text())
        typing_only = {
            id(n)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and ast.unparse(block.test).endswith("TYPE_CHECKING")
            for n in ast.walk(block)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            names = (
                [a.name for a in node.names] if isinstance(node, ast.Import)
                else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            )
            if any(n.split(".")[0] == "sqlite3" for n in names):
                offenders.append(f"{p.relative_to(root)}:{node.lineno}")
    assert offenders == []
