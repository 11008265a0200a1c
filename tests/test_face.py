"""The indexer's face: every exported name resolves, importing it loads nothing inside, and an
`Index` reads, builds and re-reads a real index (SQLite graph, history, missing vectors)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import indexer
from indexer import Index, NoIndexError
from indexer.config import load_config
from tests.conftest import make_repo

ROOT = Path(__file__).resolve().parents[1]


def test_every_exported_name_resolves_to_what_its_module_defines():
    for name in indexer.__all__:
        value = getattr(indexer, name)
        module = sys.modules[indexer._EXPORTS[name]]
        assert getattr(module, name) is value, name


def test_the_type_checking_imports_name_exactly_the_exports():
    """The face's table and its imports for type checkers are one list written twice: held
    equal here, so neither drifts."""
    import ast

    tree = ast.parse(Path(indexer.__file__).read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If)
                 and getattr(n.test, "id", "") == "TYPE_CHECKING")
    imported = {(a.asname or a.name): node.module for node in block.body
                for a in node.names if isinstance(node, ast.ImportFrom)}
    assert imported == indexer._EXPORTS


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        indexer.no_such_name  # noqa: B018


def test_importing_the_face_imports_nothing_inside_it():
    code = ("import sys, indexer; print(sorted(m for m in sys.modules "
            "if m.startswith('indexer.')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "[]"


def _repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {
        "shop/__init__.py": "",
        "shop/cart.py": "def total(items):\n    return sum(items)\n",
        "shop/checkout.py": "from shop.cart import total\n\ndef pay(items):\n    return total(items)\n",
    })


def test_an_index_that_was_never_built_says_what_to_run(tmp_path):
    root = _repo(tmp_path)
    with pytest.raises(NoIndexError, match="repoctx index build"):
        Index.open(root)
    assert not Index(load_config(root, env={})).exists()


def test_an_index_builds_reads_and_sees_its_next_generation(tmp_path):
    root = _repo(tmp_path)
    index = Index(load_config(root, env={}, jobs=1))
    stats = index.build()
    assert stats.files_parsed == 3 and index.exists()
    assert [d.qualname for d in index.graph.find_definitions("total")] == ["shop.cart.total"]
    callers = index.graph.referrer_ids([index.graph.find_definitions("total")[0].id])
    # the import and the call: the module and the function refer to it
    assert {index.graph.definition_record(i).qualname for i in callers} == {
        "shop.checkout", "shop.checkout.pay"}
    assert index.graph.generation() == 1
    assert index.open_vectors() is None  # built without vectors: nothing to open, nothing made
    assert index.history is not None and index.history.conn is not None

    (root / "shop" / "cart.py").write_text("def total(items):\n    return sum(items)\n\n"
                                           "def discount(items):\n    return 0\n")
    first = index.db.file
    index.build(full=True)  # a new generation file: reads must move to it
    assert index.db.file != first and index.graph.generation() == 2
    assert [d.qualname for d in index.graph.find_definitions("discount")] == ["shop.cart.discount"]
    assert {m.path for m in index.lexical.chunk_bm25("chunks_fts", "discount", (1.0, 1.0, 1.0),
                                                     5)} == {"shop/cart.py"}
    index.close()


def test_open_reads_the_index_of_a_root_and_closes_as_a_context(tmp_path):
    root = _repo(tmp_path)
    Index(load_config(root, env={}, jobs=1)).build()
    with Index.open(root) as index:
        assert index.root == root.resolve() and index.dir == root.resolve() / ".repoctx"
        assert sorted(index.graph.all_paths()) == [
            "shop/__init__.py", "shop/cart.py", "shop/checkout.py"]
        conn = index.db.conn
    with pytest.raises(Exception, match="closed"):
        conn.execute("SELECT 1")
