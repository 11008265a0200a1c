"""The command line, driven through click's CliRunner against real indexes."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from cli.main import cli
from tests.conftest import make_repo

FILES = {
    "shop/__init__.py": "",
    "shop/cart.py": '''
        """Shopping cart."""


        class Cart:
            """Holds items."""

            def add(self, item):
                self.items.append(item)
                return total([item])


        def total(items):
            return sum(items)
        ''',
    "shop/api.py": """
        from shop.cart import Cart


        def checkout():
            cart = Cart()
            return cart.add(1)
        """,
}


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path / "r", FILES)


def run(*args, ok=True):
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, result.output
    return result


def test_build_then_query(repo):
    out = json.loads(run("index", "build", repo, "--embed-model", "hashing", "--json", "-q").stdout)
    assert out["files_total"] == 3 and out["by_language"] == {"python": 3}
    assert out["symbols"] == 4 and out["resolved_pct"] > 50

    syms = json.loads(run("symbol", "Cart", "-C", repo, "--json").stdout)["symbols"]
    assert [(s["qualname"], s["kind"], s["path"], s["start_line"]) for s in syms] == [
        ("shop.cart.Cart", "class", "shop/cart.py", 4)
    ]
    prefix = json.loads(run("symbol", "tot", "-C", repo, "--json").stdout)["symbols"]
    assert [s["qualname"] for s in prefix] == ["shop.cart.total"]
    by_kind = run("symbol", "Cart.add", "-C", repo, "--kind", "method").stdout
    assert "shop/cart.py:7" in by_kind and "def add(self, item):" in by_kind

    refs = json.loads(run("refs", "total", "-C", repo, "--json").stdout)["references"]
    assert [(r["path"], r["line"], r["enclosing"], r["resolution"]) for r in refs] == [
        ("shop/cart.py", 9, "shop.cart.Cart.add", "scope")
    ]
    callers = run("callers", "shop.cart.total", "-C", repo).stdout
    assert "shop.cart.Cart.add" in callers
    callees = json.loads(run("callees", "checkout", "-C", repo, "--json").stdout)["edges"]
    assert {e["symbol"]["qualname"] for e in callees} >= {"shop.cart.Cart"}


def test_results_carry_generation_and_stale_flags(repo):
    run("index", "build", repo, "--embed-model", "hashing", "-q")
    out = json.loads(run("symbol", "Cart", "-C", repo, "--json").stdout)
    assert out["generation"] == 1 and out["symbols"][0]["stale"] is False
    (repo / "shop" / "cart.py").write_text((repo / "shop" / "cart.py").read_text() + "# edited\n")
    out = json.loads(run("symbol", "Cart", "-C", repo, "--json").stdout)
    assert out["symbols"][0]["stale"] is True
    assert "[stale]" in run("symbol", "Cart", "-C", repo).stdout
    run("index", "build", repo, "--embed-model", "hashing", "-q")
    out = json.loads(run("symbol", "Cart", "-C", repo, "--json").stdout)
    assert out["generation"] == 2 and out["symbols"][0]["stale"] is False


def test_status_reports_pending_changes(repo):
    run("index", "build", repo, "--embed-model", "hashing", "-q")
    st = json.loads(run("index", "status", repo, "--json").stdout)
    assert st["pending"] == {"changed": 0, "added": 0, "deleted": 0}
    (repo / "shop" / "new.py").write_text("x = 1\n")
    (repo / "shop" / "api.py").write_text("def checkout():\n    return 2\n")
    st = json.loads(run("index", "status", repo, "--json").stdout)
    assert st["pending"] == {"changed": 1, "added": 1, "deleted": 0}
    # A deletion, and files no build indexes (no language, no #! line): not pending.
    (repo / "shop" / "cart.py").unlink()
    (repo / "shop" / "blob.xyz").write_text("x\n")
    (repo / "shop" / "NOTES").write_text("no shebang\n")
    st = json.loads(run("index", "status", repo, "--json").stdout)
    assert st["pending"] == {"changed": 1, "added": 1, "deleted": 1}


def test_read_commands_without_index_name_the_build_command(tmp_path):
    for args in (["symbol", "x"], ["refs", "x"], ["callers", "x"], ["index", "status", str(tmp_path)]):
        if args[0] != "index":
            args += ["-C", str(tmp_path)]
        result = run(*args, ok=False)
        assert result.exit_code == 1
        assert "repoctx index build" in result.output


def test_unknown_symbol_is_a_clear_error(repo):
    run("index", "build", repo, "--embed-model", "hashing", "-q")
    result = run("refs", "does_not_exist", "-C", repo, ok=False)
    assert result.exit_code == 1 and "No symbol matches" in result.output


def test_index_dir_for_read_only_trees(repo, tmp_path, monkeypatch):
    idx = tmp_path / "elsewhere"
    run("index", "build", repo, "--embed-model", "hashing", "--index-dir", idx, "-q")
    assert (idx / "graph.db").exists() and not (repo / ".repoctx").exists()
    monkeypatch.setenv("REPOCTX_INDEX_DIR", str(idx))
    assert "shop.cart.Cart" in run("symbol", "Cart", "-C", repo).stdout


def test_config_precedence(repo, monkeypatch):
    from indexer.config import load_config

    (repo / "pyproject.toml").write_text("[tool.repoctx]\nmax_file_bytes = 10\n")
    monkeypatch.setenv("REPOCTX_MAX_FILE_BYTES", "20")
    assert load_config(repo).max_file_bytes == 10  # file beats env
    assert load_config(repo, max_file_bytes=30).max_file_bytes == 30  # flag beats file
    (repo / ".repoctx.toml").write_text("max_file_bytes = 40\n")
    assert load_config(repo).max_file_bytes == 40  # .repoctx.toml before pyproject
    out = json.loads(run("index", "build", repo, "--embed-model", "hashing", "--json", "-q").stdout)
    assert out["skipped"]["too_large"] == 2  # cart.py and api.py exceed 40 bytes


def _all_commands(group: click.Group, prefix=()):
    for name, cmd in group.commands.items():
        yield (*prefix, name), cmd
        if isinstance(cmd, click.Group):
            yield from _all_commands(cmd, (*prefix, name))


def test_every_command_has_help():
    for path, cmd in _all_commands(cli):
        assert cmd.help or cmd.short_help, f"{' '.join(path)} has no help text"
        result = run(*path, "--help")
        assert "Usage:" in result.stdout


def test_search_modes_filters_and_output(repo):
    run("index", "build", repo, "--embed-model", "hashing", "-q")
    lexical = json.loads(run("search", "Cart add item", "-C", repo, "-m", "lexical", "--json").stdout)
    assert lexical["mode"] == "lexical" and lexical["hits"]
    assert lexical["hits"][0]["path"] == "shop/cart.py"
    assert {s for h in lexical["hits"] for s in h["ranks"]} == {"lexical"}
    hybrid = json.loads(run("search", "Cart add item", "-C", repo, "--json").stdout)
    assert {"lexical", "semantic"} <= {s for h in hybrid["hits"] for s in h["ranks"]}
    assert hybrid["semantic_coverage"] == 1.0

    scoped = run("search", "Cart", "-C", repo, "-m", "lexical", "--path", "shop/api.py", "--json")
    hits = json.loads(scoped.stdout)["hits"]
    assert hits and {h["path"] for h in hits} == {"shop/api.py"}
    assert json.loads(run("search", "Cart", "-C", repo, "--lang", "go", "--json").stdout)["hits"] == []

    text = run("search", "Cart add item", "-C", repo, "-m", "lexical", "-k", "1").stdout
    assert text.splitlines()[0].startswith("shop/cart.py:1-")
    assert "shop/api.py" not in text  # -k 1: one result
    bad = run("search", "Cart", "-C", repo, "-m", "fuzzy", ok=False)
    assert bad.exit_code == 2 and "fuzzy" in bad.output
