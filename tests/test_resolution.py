"""Reference resolution on real Python code: each import form, scopes, members, fallbacks."""

from __future__ import annotations

import pytest

from indexer.graph import store
from tests.conftest import index
from tests.lang_graph import graph_of

FILES = {
    "app/__init__.py": """
        from .models import User as PublicUser
        from .util.text import slug
        """,
    "app/models.py": '''
        """Data models."""
        import json
        import app.util.text
        import app.util.text as txt
        from app.util import text
        from app.util.text import slug as make_slug
        from . import storage
        from .storage import save
        from .util import *


        class Base:
            def save(self):
                return save(self)

            def describe(self):
                return json.dumps({})


        class User(Base):
            """A user."""

            MAX = 3

            def rename(self, name):
                self.describe()
                super().save()
                app.util.text.slug(name)
                txt.slug(name)
                text.slug(name)
                make_slug(name)
                storage.save(self)
                helper_from_star()
                return local_helper(name)


        def local_helper(name):
            def nested():
                return name

            return nested()
        ''',
    "app/storage.py": """
        def save(obj):
            return obj
        """,
    "app/util/__init__.py": """
        from ..util.text import slug

        def helper_from_star():
            return 1
        """,
    "app/util/text.py": """
        def slug(value: str) -> str:
            return value.lower()
        """,
    "app/views.py": """
        from app import PublicUser, slug


        def show(u: PublicUser):
            sibling_func()
            unique_somewhere_else()
            len([])
            collide()
            return slug(u)


        def sibling_func():
            return PublicUser()
        """,
    "app/helpers.py": """
        def collide():
            pass
        """,
    "other/far.py": """
        def unique_somewhere_else():
            pass


        def collide():
            pass
        """,
    "other/more.py": """
        def collide():
            pass
        """,
}


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    yield from graph_of(tmp_path_factory, "res", FILES)


def ref(conn, path, line, name):
    row = conn.execute(
        "SELECT t.qualname, r.resolution, r.confidence, r.id FROM refs r JOIN files f ON f.id = r.file_id "
        "LEFT JOIN symbols t ON t.id = r.target_id WHERE f.path = ? AND r.line = ? AND r.name = ?",
        [path, line, name],
    ).fetchone()
    assert row is not None, f"no reference {name} at {path}:{line}"
    return row


@pytest.mark.parametrize(
    ("line", "name", "target", "how"),
    [
        (14, "save", "app.storage.save", "import"),  # from .storage import save
        (17, "dumps", None, "external"),  # json is not in the index
        (26, "describe", "app.models.Base.describe", "self"),
        (27, "save", "app.models.Base.save", "self"),  # super().save()
        (28, "slug", "app.util.text.slug", "import"),  # import app.util.text
        (29, "slug", "app.util.text.slug", "import"),  # import app.util.text as txt
        (30, "slug", "app.util.text.slug", "import"),  # from app.util import text
        (31, "make_slug", "app.util.text.slug", "import"),  # from ... import slug as make_slug
        (32, "save", "app.storage.save", "import"),  # from . import storage
        (33, "helper_from_star", "app.util.helper_from_star", "import"),  # from .util import *
        (34, "local_helper", "app.models.local_helper", "scope"),
        (41, "nested", "app.models.local_helper.nested", "scope"),
    ],
)
def test_python_resolution(graph, line, name, target, how):
    qual, resolution, conf, _ = ref(graph, "app/models.py", line, name)
    assert (qual, resolution) == (target, how)
    if target:
        assert conf >= 0.8  # a wildcard import is the weakest import edge


def test_reexport_through_package_init(graph):
    # from app import PublicUser -> app/__init__: from .models import User as PublicUser
    qual, how, _, _ = ref(graph, "app/views.py", 13, "PublicUser")
    assert (qual, how) == ("app.models.User", "import")
    qual, how, _, _ = ref(graph, "app/views.py", 9, "slug")
    assert (qual, how) == ("app.util.text.slug", "import")


def test_inheritance_and_annotations(graph):
    qual, how, _, _ = ref(graph, "app/models.py", 20, "Base")
    assert (qual, how) == ("app.models.Base", "scope")
    kind = graph.execute(
        "SELECT r.kind FROM refs r JOIN files f ON f.id = r.file_id WHERE f.path='app/views.py' AND r.line=4"
    ).fetchone()[0]
    assert kind == "type"
    qual, how, _, _ = ref(graph, "app/views.py", 4, "PublicUser")
    assert qual == "app.models.User"


def test_same_directory_then_unique_global(graph):
    assert ref(graph, "app/views.py", 5, "sibling_func")[:2] == ("app.views.sibling_func", "scope")
    qual, how, conf, _ = ref(graph, "app/views.py", 6, "unique_somewhere_else")
    assert (qual, how) == ("far.unique_somewhere_else", "global") and conf < 0.9
    # collide() exists in app/helpers.py (same directory) and twice under other/
    assert ref(graph, "app/views.py", 8, "collide")[:2] == ("app.helpers.collide", "package")


def test_builtins_are_not_guessed(graph):
    assert ref(graph, "app/views.py", 7, "len")[:2] == (None, "builtin")


def test_ambiguous_keeps_candidates(tmp_path):
    from tests.conftest import make_repo

    root = make_repo(tmp_path / "amb", {
        "a/x.py": "def dup():\n    pass\n",
        "b/y.py": "def dup():\n    pass\n",
        "c/z.py": "def use():\n    dup()\n",
    })
    cfg = index(root)
    conn = store.open_for_read(cfg.index_path).conn
    qual, how, conf, ref_id = ref(conn, "c/z.py", 2, "dup")
    assert qual is None and how == "ambiguous" and conf == pytest.approx(0.3)
    cands = sorted(r[0] for r in conn.execute(
        "SELECT s.qualname FROM ref_candidates c JOIN symbols s ON s.id = c.symbol_id WHERE c.ref_id = ?",
        [ref_id]))
    assert cands == ["x.dup", "y.dup"]  # no __init__.py: top-level modules


def test_definitions_carry_signature_doc_and_kind(graph):
    rows = {r[0]: r[1:] for r in graph.execute(
        "SELECT s.qualname, s.kind, s.signature, s.doc, s.start_line FROM symbols s"
    )}
    assert rows["app.models.User"][:3] == ("class", "class User(Base):", "A user.")
    assert rows["app.models.User.rename"][0] == "method"
    assert rows["app.models.local_helper"][0] == "function"
    assert rows["app.util.text.slug"][1] == "def slug(value: str) -> str:"
    assert rows["app.models"][0] == "module" and rows["app.models"][2] == "Data models."


def test_worker_page_loads_base_classes_after_its_warm_up(tmp_path):
    """A resolution worker (`graph_write.resolve_page`) loads the symbols on a warm-up page, sent
    before the build has committed the inherit edges, and the edges on its first real page:
    a method found through a base class resolves as the serial build resolved it."""
    import sqlite3

    from indexer.graph import write as graph_write
    from tests.conftest import make_repo

    root = make_repo(tmp_path / "inherit", {
        "m.py": "class Base:\n    def describe(self):\n        return 1\n\n\n"
                "class User(Base):\n    def run(self):\n        return self.describe()\n",
    })
    db_file = str(store.graph_file(index(root).index_path))
    conn = sqlite3.connect(db_file)
    qual, how, _, _ = ref(conn, "m.py", 8, "describe")
    assert (qual, how) == ("m.Base.describe", "self")  # found through the base class
    cols = "id, file_id, name, kind, receiver, enclosing_id"
    rows = conn.execute(f"SELECT {cols} FROM refs WHERE kind != 'inherit' ORDER BY id").fetchall()
    want = conn.execute("SELECT id, target_id, resolution, confidence FROM refs "
                        "WHERE kind != 'inherit' ORDER BY id").fetchall()
    edges = conn.execute("SELECT target_id, resolution, confidence, id FROM refs "
                         "WHERE kind = 'inherit'").fetchall()
    assert edges and all(e[0] is not None for e in edges)
    try:
        with conn:  # the build's state when the warm-up arrives: inherit edges not yet resolved
            conn.execute("UPDATE refs SET target_id = NULL, resolution = 'pending' "
                         "WHERE kind = 'inherit'")
        assert graph_write.resolve_page(db_file, "build-1", []) == []
        with conn:
            conn.executemany("UPDATE refs SET target_id = ?, resolution = ?, confidence = ? "
                             "WHERE id = ?", edges)
        got = graph_write.resolve_page(db_file, "build-1", rows)
    finally:
        graph_write._WORKER_TABLE.clear()
        conn.close()
    assert [g[:4] for g in got] == want
