"""The git-history index and its signals, on real git repositories with real commits."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from indexer import Index
from indexer.graph import store
from indexer.history.store import PATCH_MAX_FILES, history_status, open_history, update_history
from retrieval.history import HistoryFiles, HistoryParams, HistorySymbols, similar_commits
from retrieval.query import parse_query
from retrieval.signals import SignalContext
from tests.conftest import git, index, make_repo, write_files

SHAPES = {
    "pkg/__init__.py": "",
    "pkg/shapes.py": """
        import math


        class Square:
            side = 1

            def area(self):
                return self.side ** 2

            def stop(self):
                return None


        class Circle:
            radius = 1

            def area(self):
                return math.pi * self.radius ** 2
        """,
    "pkg/util.py": """
        def clamp(x, lo, hi):
            return max(lo, min(x, hi))
        """,
    "README.md": "shapes\n",
}


def commit(root: Path, message: str, files: dict[str, str] | None = None) -> str:
    if files:
        write_files(root, files)
    git(root, "add", "-A")
    git(root, "commit", "-q", "--allow-empty", "-m", message)
    return git(root, "rev-parse", "HEAD").strip()


def shas(cfg) -> set[str]:
    conn = sqlite3.connect(cfg.index_path / "history.db")
    try:
        return {r[0] for r in conn.execute("SELECT sha FROM commits")}
    finally:
        conn.close()


def reachable(root: Path, rev: str = "HEAD") -> set[str]:
    return set(git(root, "rev-list", rev).split())


def last_update(cfg) -> dict:
    return history_status(cfg.index_path)["last_update"]


def signal_ctx(cfg) -> SignalContext:
    return SignalContext(Index.open(cfg))


def file_hits(cfg, text: str, params: HistoryParams | None = None) -> list:
    return HistoryFiles(params).run(signal_ctx(cfg), parse_query(text), 10)


def symbol_hits(cfg, text: str) -> list:
    return HistorySymbols().run(signal_ctx(cfg), parse_query(text), 10)


def edit_circle_area(root: Path, body: str) -> None:
    path = root / "pkg/shapes.py"
    path.write_text(path.read_text().replace("return math.pi * self.radius ** 2", body))


@pytest.fixture
def repo(tmp_path) -> Path:
    return make_repo(tmp_path / "repo", SHAPES)


def test_build_indexes_commits_files_and_definitions(repo):
    edit_circle_area(repo, "return round(math.pi * self.radius ** 2, 6)")
    fix = commit(repo, "Round the circle area to six digits\n\nFloating noise broke equality.")
    cfg = index(repo)
    assert shas(cfg) == reachable(repo)
    conn = sqlite3.connect(cfg.index_path / "history.db")
    row = conn.execute("SELECT subject, body, parents, files, patched FROM commits WHERE sha = ?", [fix]).fetchone()
    assert row == ("Round the circle area to six digits", "Floating noise broke equality.", 1, 1, 1)
    changes = conn.execute(
        "SELECT path, status, added, removed FROM changes JOIN commits c ON c.id = commit_id WHERE c.sha = ?",
        [fix]).fetchall()
    assert changes == [("pkg/shapes.py", "M", 1, 1)]
    defs = conn.execute(
        "SELECT path, name, parent, how FROM defs JOIN commits c ON c.id = commit_id WHERE c.sha = ?",
        [fix]).fetchall()
    assert defs == [("pkg/shapes.py", "area", "", "changed")]
    assert history_status(cfg.index_path)["state"] == "ok"


def test_build_reports_history_phase(repo):
    from indexer.build import build
    from indexer.config import load_config

    stats = build(load_config(repo, env={}, jobs=1))
    assert "history" in stats.phases
    assert last_update(load_config(repo, env={}))["commits"] == 1


def test_full_graph_rebuild_leaves_history_alone(repo):
    cfg = index(repo)
    db = cfg.index_path / "history.db"
    before = (db.stat().st_ino, db.stat().st_mtime_ns, shas(cfg))
    cfg = index(repo, full=True)
    assert (db.stat().st_ino, db.stat().st_mtime_ns, shas(cfg)) == before


def test_incremental_after_new_commits_reads_only_them(repo):
    cfg = index(repo)
    first = shas(cfg)
    commit(repo, "Add a clamp helper for angles", {"pkg/angles.py": "def wrap(a):\n    return a % 360\n"})
    edit_circle_area(repo, "return math.pi * self.radius * self.radius")
    commit(repo, "Avoid the power operator in Circle.area")
    cfg = index(repo)
    up = last_update(cfg)
    assert (up["mode"], up["added"], up["removed"]) == ("forward", 2, 0)
    assert first < shas(cfg) == reachable(repo)
    hits = file_hits(cfg, "clamp helper for angles")
    assert hits[0].path == "pkg/angles.py"
    assert "Add a clamp helper" in hits[0].note
    # nothing new: nothing read, nothing written
    before = (cfg.index_path / "history.db").stat().st_mtime_ns
    again = update_history(cfg.root, cfg.index_path)
    assert (again.mode, again.added, again.removed, again.commits) == ("unchanged", 0, 0, 3)
    assert (cfg.index_path / "history.db").stat().st_mtime_ns == before


def test_head_moved_back_forgets_later_commits(repo):
    base = git(repo, "rev-parse", "HEAD").strip()
    edit_circle_area(repo, "return 3.14159 * self.radius ** 2")
    later = commit(repo, "Approximate pi in circle area for speed")
    cfg = index(repo)
    assert later in shas(cfg)
    assert file_hits(cfg, "approximate pi circle area speed")[0].path == "pkg/shapes.py"

    git(repo, "checkout", "-q", "--detach", base)
    cfg = index(repo)
    up = last_update(cfg)
    assert (up["mode"], up["added"], up["removed"]) == ("moved", 0, 1)
    assert shas(cfg) == {base}
    ctx = signal_ctx(cfg)
    assert all(c.sha != later for c in similar_commits(ctx, "approximate pi circle area speed", 20))
    assert file_hits(cfg, "approximate pi circle area speed") == []
    assert symbol_hits(cfg, "approximate pi circle area speed") == []

    git(repo, "checkout", "-q", "main")
    cfg = index(repo)
    assert last_update(cfg)["mode"] == "forward"
    assert later in shas(cfg)


def test_a_long_lived_index_reads_the_history_later_builds_write(repo):
    """An Index held across builds (the agent's session, the MCP server) sees the history as
    a reader opened per search would: one built after it opened, one replaced, an update."""
    cfg = index(repo, history=False)
    held = Index.open(cfg)
    try:
        assert held.history is None and similar_commits(SignalContext(held), "circle area") == []
        first = commit(repo, "Approximate pi in circle area for speed",
                       {"pkg/shapes.py": SHAPES["pkg/shapes.py"].replace("math.pi", "3.14159")})
        index(repo)  # with the history now
        assert [c.sha for c in similar_commits(SignalContext(held), "approximate pi", 5)] == [first]
        (cfg.index_path / "history.db").unlink()  # set aside: the next build writes a new one
        second = commit(repo, "Clamp the circle radius before squaring it")
        index(repo)
        got = [c.sha for c in similar_commits(SignalContext(held), "clamp circle radius", 5)]
        assert got[:1] == [second]
    finally:
        held.close()


def test_task_commit_is_never_indexed_at_its_parent(repo):
    """A commit-message task indexes the parent of the commit whose message is the query."""
    edit_circle_area(repo, "return abs(math.pi * self.radius ** 2)")
    task = commit(repo, "Never return a negative area for circles")
    git(repo, "checkout", "-q", "--detach", "HEAD~1")
    cfg = index(repo)
    assert task not in shas(cfg)
    assert shas(cfg) == reachable(repo)
    query = "Never return a negative area for circles"
    assert all(c.sha != task for c in similar_commits(signal_ctx(cfg), query, 10))
    assert all("negative area" not in h.note for h in file_hits(cfg, query) + symbol_hits(cfg, query))


def test_branch_switch_swaps_only_the_difference(repo):
    commit(repo, "Speed up square area on main", {"pkg/util.py": "def clamp(x, lo, hi):\n    return x\n"})
    on_main = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "-b", "feature", "HEAD~1")
    edit_circle_area(repo, "return math.tau * self.radius ** 2 / 2")
    on_feature = commit(repo, "Use tau for the circle area on the feature branch")
    git(repo, "checkout", "-q", "main")
    cfg = index(repo)
    assert on_main in shas(cfg) and on_feature not in shas(cfg)

    git(repo, "checkout", "-q", "feature")
    cfg = index(repo)
    up = last_update(cfg)
    assert (up["mode"], up["added"], up["removed"]) == ("moved", 1, 1)
    assert shas(cfg) == reachable(repo)
    assert on_main not in shas(cfg)
    assert all("on main" not in h.note for h in file_hits(cfg, "speed up square area main"))


def test_commit_touching_a_method_votes_for_its_current_qualname(repo):
    edit_circle_area(repo, "return math.pi * (self.radius ** 2)")
    commit(repo, "Parenthesise the radius power in the circle area")
    # later the module moves: the vote follows the rename to today's definition
    git(repo, "mv", "pkg/shapes.py", "pkg/geometry.py")
    commit(repo, "Move the module")
    cfg = index(repo)
    hits = symbol_hits(cfg, "radius power circle area parenthesise")
    quals = [h.symbol for h in hits]
    # the hunk header says `def area`: both classes define it, so the vote is split
    assert set(quals[:2]) == {"pkg.geometry.Circle.area", "pkg.geometry.Square.area"}
    assert all(h.path == "pkg/geometry.py" for h in hits)
    files = file_hits(cfg, "radius power circle area parenthesise")
    assert files[0].path == "pkg/geometry.py"


def test_enclosing_class_from_the_hunk_header_picks_the_right_method(repo):
    path = repo / "pkg/shapes.py"
    path.write_text(path.read_text().replace(
        "class Circle:\n    radius = 1\n",
        "class Circle:\n    radius = 1\n\n    def stop(self):\n        return 'halt'\n"))
    commit(repo, "Let circles halt")
    cfg = index(repo)
    hits = symbol_hits(cfg, "circles halt")
    assert [h.symbol for h in hits] == ["pkg.shapes.Circle.stop"]  # not Square.stop
    assert hits[0].start_line > 0


def test_merge_commits_keep_their_message_but_do_not_vote(repo):
    git(repo, "checkout", "-q", "-b", "widgets")
    commit(repo, "Add widget frobnication", {"pkg/widgets.py": "def frobnicate(w):\n    return w\n"})
    git(repo, "checkout", "-q", "main")
    commit(repo, "Unrelated readme tweak", {"README.md": "shapes and more\n"})
    git(repo, "merge", "-q", "--no-ff", "widgets", "-m", "Merge frobnication of widgets")
    cfg = index(repo)
    assert shas(cfg) == reachable(repo)
    conn = sqlite3.connect(cfg.index_path / "history.db")
    merge = conn.execute("SELECT parents, files FROM commits WHERE subject LIKE 'Merge%'").fetchone()
    assert merge == (2, 0)
    commits = similar_commits(signal_ctx(cfg), "frobnication widgets", 5, merges=True)
    by_subject = {c.subject: c for c in commits}
    assert by_subject["Merge frobnication of widgets"].votes is False
    assert by_subject["Add widget frobnication"].votes is True
    # for people, merges (which changed nothing of their own) are left out by default
    assert [c.subject for c in similar_commits(signal_ctx(cfg), "frobnication widgets", 5)] == [
        "Add widget frobnication"]
    hits = file_hits(cfg, "frobnication widgets")
    assert [h.path for h in hits] == ["pkg/widgets.py"]
    assert "Add widget frobnication" in hits[0].note


def test_huge_commits_are_stored_but_do_not_vote(repo):
    many = {f"gen/m{i:03}.py": f"X{i} = {i}\n" for i in range(PATCH_MAX_FILES + 5)}
    commit(repo, "Vendor the generated quaternion tables", many)
    commit(repo, "Fix quaternion sign", {"pkg/util.py": "def clamp(x, lo, hi):\n    return -x\n"})
    cfg = index(repo)
    commits = {c.subject: c for c in similar_commits(signal_ctx(cfg), "quaternion tables", 5)}
    huge = commits["Vendor the generated quaternion tables"]
    assert huge.votes is False and huge.files_total == PATCH_MAX_FILES + 5
    paths = [h.path for h in file_hits(cfg, "quaternion tables")]
    assert paths == ["pkg/util.py"]
    # a lower threshold silences smaller commits too
    assert file_hits(cfg, "quaternion sign", HistoryParams(huge=0)) == []


def test_batches_read_in_parallel_store_what_one_batch_stores(repo, monkeypatch, tmp_path):
    from indexer.history import store as history

    for i in range(7):
        commit(repo, f"Tune clamp {i}", {"pkg/util.py": f"def clamp(x, lo, hi):\n    return {i}\n"})
    one = index(repo)

    def dump(index_dir: Path) -> list:
        conn = sqlite3.connect(index_dir / "history.db")
        try:
            return [conn.execute(q).fetchall() for q in (
                "SELECT sha, parents, subject, files, patched FROM commits ORDER BY sha",
                "SELECT c.sha, ch.path, ch.status, ch.added, ch.removed FROM changes ch "
                "JOIN commits c ON c.id = ch.commit_id ORDER BY 1, 2",
                "SELECT c.sha, d.path, d.name, d.parent, d.how FROM defs d "
                "JOIN commits c ON c.id = d.commit_id ORDER BY 1, 2, 3, 4, 5",
                "SELECT term, doc FROM vocab ORDER BY term")]
        finally:
            conn.close()

    monkeypatch.setattr(history, "BATCH", 2)  # 8 commits: 4 batches, read concurrently
    stats = update_history(repo, tmp_path / "other-index")
    assert (stats.mode, stats.added) == ("full", 8)
    assert dump(tmp_path / "other-index") == dump(one.index_path)


def test_issue_numbers_match_past_commits_that_cite_them(repo):
    commit(repo, "Start on conversions (refs #488)", {"pkg/util.py": "def clamp(x, lo, hi):\n    return x\n"})
    edit_circle_area(repo, "return math.pi * self.radius ** 2 * 1.0")
    commit(repo, "Coerce empty strings for #4880")
    cfg = index(repo)
    hits = file_hits(cfg, "Convert TEXT columns to numbers\n\nFixes #488")
    assert hits[0].path == "pkg/util.py"
    assert "refs #488" in hits[0].note


def test_capped_history_keeps_the_newest_commits(repo):
    for i in range(4):
        commit(repo, f"Step {i}", {"pkg/util.py": f"def clamp(x, lo, hi):\n    return {i}\n"})
    cfg = index(repo, history_max_commits=2)
    newest = git(repo, "rev-list", "--max-count=2", "HEAD").split()
    assert shas(cfg) == set(newest)
    commit(repo, "Step 4", {"pkg/util.py": "def clamp(x, lo, hi):\n    return 4\n"})
    cfg = index(repo, history_max_commits=2)
    assert shas(cfg) == set(git(repo, "rev-list", "--max-count=2", "HEAD").split())
    cfg = index(repo)  # cap lifted: the rest is read
    assert shas(cfg) == reachable(repo)


def test_interrupted_update_is_repaired_by_comparing_lists(repo):
    cfg = index(repo)
    conn = open_history(cfg.index_path)
    with conn:  # what a killed update leaves: no recorded head, a commit from elsewhere
        conn.execute("INSERT INTO commits(sha, parents, author_time, commit_time, subject, body, files) "
                     "VALUES ('f' || hex(randomblob(19)), 0, 0, 0, 'stray', '', 1)")
        conn.execute("UPDATE meta SET value = '' WHERE key = 'head'")
        conn.execute("UPDATE meta SET value = 'updating' WHERE key = 'state'")
    conn.close()
    cfg = index(repo)
    up = last_update(cfg)
    assert (up["mode"], up["added"], up["removed"]) == ("sync", 0, 1)
    assert shas(cfg) == reachable(repo)


def test_damaged_store_is_rebuilt(repo):
    cfg = index(repo)
    db = cfg.index_path / "history.db"
    for suffix in ("-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    db.write_bytes(b"this is not a database" * 100)
    assert history_status(cfg.index_path)["state"] == "damaged"
    assert file_hits(cfg, "init") == []  # no votes from a damaged store, no error
    cfg = index(repo)
    assert history_status(cfg.index_path)["state"] == "ok"
    assert shas(cfg) == reachable(repo)


def test_subdirectory_root_sees_paths_relative_to_it(tmp_path):
    root = make_repo(tmp_path / "mono", {
        "svc/pkg/__init__.py": "", "svc/pkg/core.py": "def serve():\n    return 1\n",
        "other/tool.py": "def tool():\n    return 2\n"})
    commit(root, "Serve twice as fast", {"svc/pkg/core.py": "def serve():\n    return 2\n"})
    commit(root, "Faster tool", {"other/tool.py": "def tool():\n    return 3\n"})
    cfg = index(root / "svc")
    hits = file_hits(cfg, "serve fast")
    assert [h.path for h in hits] == ["pkg/core.py"]
    assert [h.symbol for h in symbol_hits(cfg, "serve fast")] == ["pkg.core.serve"]
    assert file_hits(cfg, "faster tool") == []  # outside the root: no vote


def test_not_a_git_repository_has_no_history_and_no_error(tmp_path):
    root = tmp_path / "plain"
    write_files(root, {"a.py": "def f():\n    return 1\n"})
    cfg = index(root)
    st = history_status(cfg.index_path)
    assert st["state"] == "no_git" and st["commits"] == 0 and "not in a git work tree" in st["note"]
    assert file_hits(cfg, "f") == []
    assert similar_commits(signal_ctx(cfg), "f", 5) == []


def test_repository_without_commits_has_no_history_yet(tmp_path):
    root = make_repo(tmp_path / "fresh", {"a.py": "def f():\n    return 1\n"}, commit=False)
    cfg = index(root)
    st = history_status(cfg.index_path)
    assert (st["state"], st["commits"]) == ("no_commits", 0)
    commit(root, "First words about f")
    cfg = index(root)
    assert history_status(cfg.index_path)["state"] == "ok"
    assert [h.path for h in file_hits(cfg, "first words")] == ["a.py"]


def test_git_missing_has_no_history_and_no_error(repo, monkeypatch, tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    cfg = index(repo)
    assert history_status(cfg.index_path)["state"] == "no_git"
    # three Python files and README.md: the graph is built without git
    assert store.open_for_read(cfg.index_path).conn.execute("SELECT count(*) FROM files").fetchone()[0] == 4


def test_history_disabled_removes_the_store(repo):
    cfg = index(repo)
    assert (cfg.index_path / "history.db").exists()
    cfg = index(repo, history=False)
    assert not (cfg.index_path / "history.db").exists()
    assert file_hits(cfg, "init") == []


def test_repository_programs_never_run(repo, tmp_path):
    """A repository's config can name programs (fsmonitor, textconv, external diff): reading
    the history must not run them."""
    marker = tmp_path / "ran"
    script = tmp_path / "evil.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\ncat \"$1\" 2>/dev/null\n")
    script.chmod(0o755)
    git(repo, "config", "core.fsmonitor", str(script))
    git(repo, "config", "diff.external", str(script))
    git(repo, "config", "diff.evil.textconv", str(script))
    (repo / ".gitattributes").write_text("*.py diff=evil\n")
    edit_circle_area(repo, "return 0")
    commit(repo, "Zero area")
    if marker.exists():  # the commit itself may run fsmonitor: start clean
        marker.unlink()
    cfg = index(repo)
    update_history(cfg.root, cfg.index_path / "again")
    assert last_update(cfg)["commits"] == 2
    assert not marker.exists()


def test_git_runs_with_the_environment_of_gitsafe(repo):
    """History's git calls get `indexer.safety.gitsafe.git_env`, as every other git call repoctx
    makes: each program-running key the repository's own config sets (here a filter and an
    alias, which its per-command `-c` list does not name) is overridden, and the user's
    system config is skipped. (Its reading commands already pass --no-ext-diff and
    --no-textconv, so this checks the environment itself.)"""
    from indexer.history.store import _Git

    git(repo, "config", "filter.evil.clean", "touch ran")
    git(repo, "config", "alias.lg", "!touch ran")
    env = _Git(repo).env
    pairs = {env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"]
             for i in range(int(env["GIT_CONFIG_COUNT"]))}
    assert pairs["filter.evil.clean"] == "" and pairs["alias.lg"] == ""
    assert pairs["core.fsmonitor"] == "false" and pairs["credential.helper"] == ""
    assert env["GIT_CONFIG_NOSYSTEM"] == "1" and env["GIT_NO_LAZY_FETCH"] == "1"


CLI_QUERY = "tolerance for nearly equal areas"


def test_cli_search_history(repo):
    edit_circle_area(repo, "return math.pi * self.radius ** 2 + 0.0")
    sha = commit(repo, "Add a tolerance for nearly equal areas")
    index(repo)
    runner = CliRunner()
    res = runner.invoke(cli, ["search", CLI_QUERY, "--history", "-C", str(repo)])
    assert res.exit_code == 0, res.output
    assert sha[:10] in res.output and "pkg/shapes.py" in res.output
    res = runner.invoke(cli, ["search", CLI_QUERY, "--history", "--json", "-k", "1", "-C", str(repo)])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["head"] == sha
    assert [(c["sha"], c["files"], c["votes"]) for c in data["commits"]] == [(sha, ["pkg/shapes.py"], True)]


def test_cli_search_history_without_history_says_what_to_do(tmp_path):
    root = tmp_path / "plain"
    write_files(root, {"a.py": "def f():\n    return 1\n"})
    index(root)
    res = CliRunner().invoke(cli, ["search", "f", "--history", "-C", str(root)])
    assert res.exit_code == 1
    assert "No git history" in res.output and "git work tree" in res.output


def test_index_status_reports_history(repo):
    index(repo)
    res = CliRunner().invoke(cli, ["index", "status", str(repo), "--json"])
    assert res.exit_code == 0, res.output
    hist = json.loads(res.output)["history"]
    assert hist["state"] == "ok" and hist["commits"] == 1


def test_unusual_paths_survive(repo):
    name = "pkg/we ird\tname ü.py"
    commit(repo, "Add an oddly named module", {name: "def odd():\n    return 1\n"})
    cfg = index(repo)
    conn = sqlite3.connect(cfg.index_path / "history.db")
    paths = {r[0] for r in conn.execute("SELECT path FROM changes")}
    assert name in paths
    assert [h.symbol for h in symbol_hits(cfg, "oddly named module")] == [
        next(r[0] for r in store.open_for_read(cfg.index_path).conn.execute(
            "SELECT qualname FROM symbols WHERE name = 'odd'"))]
