"""The one test-path rule: Python and SQLite apply the same globs, and every layer uses it."""

import sqlite3

import pytest

from indexer.parse.testpaths import is_test_path, sql_is_test_path

CASES = {
    "tests/test_cart.py": True,
    "pkg/foo_test.go": True,
    "web/app.spec.ts": True,
    "web/app.test.js": True,
    "src/__tests__/cart.js": True,
    "spec/cart_spec.rb": True,
    "src/main/java/shop/CartTest.java": True,
    "a/b/conftest.py": True,
    "test_x.py": True,
    "lib/testing/helpers.py": True,
    "shop/testing_utils.py": False,
    "shop/cart.py": False,
    "atest/x.py": False,
    "src/Testing.py": False,
    "docs/contest.py": False,
}


@pytest.mark.parametrize(("path", "expected"), CASES.items())
def test_python_and_sqlite_agree(path, expected):
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE files (path TEXT)")
    conn.execute("INSERT INTO files VALUES (?)", [path])
    sql, params = sql_is_test_path("f.path")
    (in_sql,) = conn.execute(f"SELECT {sql} FROM files f", params).fetchone()
    assert is_test_path(path) is expected
    assert bool(in_sql) is expected


def test_every_layer_uses_the_one_rule():
    from benchmarks import loc_bm25
    from retrieval import context, search, signals

    for module in (context, search, signals, loc_bm25):
        assert module.is_test_path is is_test_path, module.__name__
