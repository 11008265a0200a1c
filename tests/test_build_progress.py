"""Answers before a first build ends: the build records its phase in the graph it writes, so
`index status` says what is ready, `symbol` works as soon as a file's definitions are written,
and `refs` warns while references are still being resolved; a build that stopped says how to
finish it, and the next build clears that."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from cli.main import cli
from indexer import Index
from indexer.build import build
from indexer.config import load_config
from retrieval.symbols import find_symbols
from tests.conftest import make_repo

FILES = {
    "pkg/__init__.py": "",
    "pkg/core.py": "def alpha():\n    return 1\n\n\nclass Store:\n    def get(self):\n        return alpha()\n",
    "pkg/use.py": "from pkg.core import alpha, Store\n\n\ndef main():\n    return alpha() + Store().get()\n",
}


class Seen(Exception):
    pass


def _config(root):
    return load_config(root, env={}, jobs=1)


def _read(cfg):
    return Index.open(cfg)


def test_a_first_build_says_what_is_ready_while_references_resolve(tmp_path):
    root = make_repo(tmp_path / "repo", FILES)
    cfg = _config(root)
    seen: dict = {}

    def progress(p):
        if p.phase != "resolve" or seen:
            return
        index = _read(cfg)  # another connection, as another process would open it
        try:
            seen["build"] = index.build_progress()
            seen["symbols"] = [(h.qualname, h.stale) for h in find_symbols(index, "alpha")]
            seen["status"] = Index(cfg).status()["build"]
            runner = CliRunner()
            res = runner.invoke(cli, ["refs", "alpha", "--root", str(root), "--json"])
            seen["refs_rc"], seen["refs_err"] = res.exit_code, res.stderr
            res = runner.invoke(cli, ["index", "status", str(root)])
            seen["status_text"] = res.stdout
        finally:
            index.close()

    build(cfg, progress=progress)
    b = seen["build"]
    assert (b["phase"], b["running"]) == ("resolve", True)
    assert "definitions and lexical search are ready" in b["ready"]
    # definitions answer before the build ends, checked against the tree (not stale)
    assert seen["symbols"] == [("pkg.core.alpha", False)]
    assert seen["status"]["phase"] == "resolve"
    assert seen["refs_rc"] == 0 and "a build is running (phase resolve)" in seen["refs_err"]
    assert "Build in progress" in seen["status_text"] and "phase resolve" in seen["status_text"]
    with _read(cfg) as index:
        assert index.build_progress() is None  # done: nothing left to say


def test_a_build_that_stopped_says_how_to_finish_and_the_next_build_clears_it(tmp_path):
    root = make_repo(tmp_path / "repo", FILES)
    cfg = _config(root)

    def stop_in_resolve(p):
        if p.phase == "resolve":
            raise Seen

    with pytest.raises(Seen):
        build(cfg, progress=stop_in_resolve)
    with _read(cfg) as index:
        b = index.build_progress()
    assert (b["phase"], b["running"]) == ("resolve", False)
    assert "repoctx index build" in b["fix"]
    res = CliRunner().invoke(cli, ["index", "status", str(root)])
    assert "Build stopped during phase resolve" in res.stdout

    build(cfg)  # finishes what the stopped one left
    with _read(cfg) as index:
        assert index.build_progress() is None
        refs = index.db.conn.execute(
            "SELECT count(*) FROM refs WHERE resolution = 'pending'").fetchone()[0]
    assert refs == 0


def test_a_no_op_build_records_no_phase_and_an_edit_records_its_phases(tmp_path, monkeypatch):
    from indexer.graph import write as graph_write

    root = make_repo(tmp_path / "repo", FILES)
    cfg = _config(root)
    build(cfg)
    calls: list[str | None] = []
    real = graph_write.set_build_phase

    def spy(conn, phase):
        calls.append(phase)
        real(conn, phase)

    monkeypatch.setattr(graph_write, "set_build_phase", spy)
    build(cfg)
    assert calls == []  # a no-op build writes nothing, not even its phase
    (root / "pkg" / "core.py").write_text(FILES["pkg/core.py"] + "\n\ndef beta():\n    return 2\n")
    build(cfg)
    assert calls == ["parse", "resolve", "history", None]
