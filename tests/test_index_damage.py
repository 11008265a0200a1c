"""A damaged or foreign graph.db is reported in one line that names the repair, by every command
(no traceback), and `index build --full` / `index verify --repair` set it aside and rebuild it:
afterwards queries answer as before the damage, and no vector is embedded again.

Real index files damaged the way disks and people damage them: 32 KB of garbage in the middle,
a file cut to half its size, a garbage header, another program's SQLite database in its place.
"""

from __future__ import annotations

import json
import os
import random
import re
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent.tools import ToolContext, default_registry
from cli.main import cli
from cli.mcp_server import RepoctxMCP, ServeOptions
from cli.settings import load_config
from indexer.build import build
from indexer.errors import IndexDamagedError
from indexer.graph import store
from indexer.ops.verify import repair
from indexer.vectors.embed import create_embedder
from tests.conftest import make_repo

MODEL = "hashing:64"
DAMAGE_LINE = "is damaged ("
REPAIR_HINT = "run `repoctx index build --full` to set it aside and rebuild."


def module(i: int) -> str:
    callee = f"compute_{(i + 1) % 40}"
    return (
        f'"""Module {i}: values for ledger {i}."""\n\n'
        f"from pkg.m{(i + 1) % 40} import {callee}\n\n\n"
        f"def compute_{i}(value):\n"
        f'    """Compute the ledger value {i} from its input."""\n'
        f"    total = value * {i + 2}\n"
        f"    return {callee}(total) if value > {i} else total\n\n\n"
        f"class Ledger{i}:\n"
        f'    """A ledger of entries number {i}."""\n\n'
        f"    def entry_{i}(self, amount):\n"
        f"        return compute_{i}(amount) + {i}\n"
    )


FILES = {"pkg/__init__.py": ""} | {f"pkg/m{i}.py": module(i) for i in range(40)}

QUERIES = [
    ["symbol", "compute_7", "--json"],
    ["refs", "compute_7", "--json"],
    ["callers", "compute_7", "--json"],
    ["search", "ledger value input", "--mode", "lexical", "--json"],
    ["search", "compute ledger entries", "--json"],
]


# --------------------------------------------------------------------------- helpers


def config(root: Path):
    return load_config(root, env={}, jobs=1, embed_model=MODEL)


@pytest.fixture
def indexed(tmp_path):
    root = make_repo(tmp_path / "repo", FILES)
    cfg = config(root)
    build(cfg, embed=True)
    return cfg


def invoke(args: list[str], root: Path):
    """Run the real command line in-process; an exception that escaped click is a failure."""
    argv = args if args[0] in ("index", "serve") else [*args, "--root", str(root)]
    res = CliRunner().invoke(cli, argv)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise AssertionError(f"{args}: uncaught {res.exception!r}\n{res.output}")
    assert "Traceback" not in res.output, res.output
    return res


def index_cmd(*args: str, root: Path) -> list[str]:
    return ["index", args[0], str(root), *args[1:]]


def answer(res) -> object:
    """What a read command answered, without the generation stamp (a rebuild bumps it)."""
    data = json.loads(res.stdout)
    data.pop("generation", None)
    if "hits" in data:  # search: which chunks, in which order
        return [(h["path"], h["start_line"], h["end_line"], h["symbol"]) for h in data["hits"]]
    return data


def answers(root: Path) -> dict[str, object]:
    out = {}
    for q in QUERIES:
        res = invoke(q, root)
        assert res.exit_code == 0, res.output
        out[" ".join(q)] = answer(res)
    return out


def assert_damage_line(res) -> None:
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 1, res.output
    assert len(lines) == 1, res.output
    assert lines[0].startswith("Error: The index at ") and DAMAGE_LINE in lines[0], lines[0]
    assert lines[0].endswith(REPAIR_HINT), lines[0]


def graph_path(cfg) -> Path:
    path = store.graph_file(cfg.index_path)
    assert path is not None and path.exists()
    return path


def settle(path: Path) -> None:
    """Fold the WAL into the file, so damage to the file is damage to the index."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def overwrite_middle(path: Path) -> None:
    size = path.stat().st_size
    assert size > 4 * 32768, "the fixture index must be larger than the damage"
    with open(path, "r+b") as fh:
        fh.seek(size // 2)
        fh.write(random.Random(13).randbytes(32768))


def truncate_half(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def garbage_header(path: Path) -> None:
    with open(path, "r+b") as fh:
        fh.write(random.Random(7).randbytes(100))


def foreign_database(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO customers(name) VALUES ('Ada')")
    conn.close()


def symbol_pages(path: Path) -> None:
    """Garbage over the root pages of the symbols table and its name indexes: opening works,
    any symbol lookup reads a damaged page."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    roots = [r[0] for r in conn.execute(
        "SELECT rootpage FROM sqlite_master WHERE name IN "
        "('symbols', 'symbols_name', 'symbols_qualname')")]
    conn.close()
    assert len(roots) == 3
    with open(path, "r+b") as fh:
        for root in roots:
            fh.seek((root - 1) * page)
            fh.write(random.Random(root).randbytes(page))


DAMAGES = {
    "overwrite 32 KB in the middle": overwrite_middle,
    "truncate to half": truncate_half,
    "garbage header": garbage_header,
    "foreign SQLite database": foreign_database,
}
#: Damage every opening of the file notices (the rest only shows on the pages it hit).
AT_OPEN = [name for name in DAMAGES if name != "overwrite 32 KB in the middle"]


def damage(cfg, name: str) -> Path:
    path = graph_path(cfg)
    settle(path)
    DAMAGES[name](path)
    return path


# --------------------------------------------------------------------------- detection


@pytest.mark.parametrize("name", AT_OPEN)
def test_every_command_reports_damage_in_one_line(indexed, name):
    root = indexed.root
    damage(indexed, name)
    for args in [
        *QUERIES,
        ["callees", "compute_7"],
        ["context", "how is the ledger value computed"],
        ["ask", "how is the ledger value computed"],
        index_cmd("status", root=root),
        index_cmd("verify", root=root),
        index_cmd("build", "--embed-model", MODEL, "-q", root=root),
        index_cmd("watch", "--foreground", root=root),
        ["serve", str(root), "--mcp"],
    ]:
        assert_damage_line(invoke(args, root))


def test_damage_in_the_middle_is_reported_or_answers_stay_right(indexed):
    """32 KB of garbage in the middle hits some pages: a query that reads one reports the
    damage in one line, one that does not answers exactly as before; `verify` reads every page
    and always reports it, and so does a full rebuild (which then repairs it)."""
    root = indexed.root
    before = answers(root)
    damage(indexed, "overwrite 32 KB in the middle")
    reported = 0
    for q in QUERIES:
        res = invoke(q, root)
        if res.exit_code == 0:
            assert answer(res) == before[" ".join(q)], q
        else:
            assert_damage_line(res)
            reported += 1
    build_cmd = index_cmd("build", "--embed-model", MODEL, "-q", root=root)
    for args in (index_cmd("status", root=root), build_cmd):
        res = invoke(args, root)
        if res.exit_code != 0:
            assert_damage_line(res)
    assert_damage_line(invoke(index_cmd("verify", root=root), root))


def test_a_foreign_database_is_never_migrated_into(indexed):
    """An incremental build refuses another program's SQLite file instead of adding repoctx's
    tables to it (before: it ran the migrations into it)."""
    path = damage(indexed, "foreign SQLite database")
    build_cmd = index_cmd("build", "--embed-model", MODEL, "-q", root=indexed.root)
    assert_damage_line(invoke(build_cmd, indexed.root))
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    conn.close()
    assert tables == {"customers"}


# --------------------------------------------------------------------------- repair


@pytest.mark.parametrize("name", list(DAMAGES))
def test_full_build_sets_the_damaged_file_aside_and_rebuilds(indexed, name):
    root = indexed.root
    before = answers(root)
    bad = damage(indexed, name)
    damaged_bytes = bad.read_bytes()
    res = invoke(index_cmd("build", "--full", "--embed-model", MODEL, "--json", "-q", root=root),
                 root)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    [notice] = out["notices"]
    aside = Path(re.search(r"set it aside as (.+?)(?: \(with |; )", notice).group(1))
    assert aside.parent == indexed.index_path and aside.name.startswith("graph.db.damaged-")
    assert aside.read_bytes() == damaged_bytes  # kept as it was, for inspection
    # Vectors survived and were reused by content hash: the model embedded nothing.
    assert out["embedding"]["embedded"] == 0
    assert out["embedding"]["reused"] == out["embedding"]["chunks"] > 0
    assert answers(root) == before
    verified = invoke(index_cmd("verify", "--json", root=root), root)
    assert verified.exit_code == 0, verified.output
    assert json.loads(verified.stdout)["ok"] is True


@pytest.mark.parametrize("name", ["truncate to half", "overwrite 32 KB in the middle"])
def test_verify_repair_sets_aside_and_rebuilds_without_embedding_again(indexed, name):
    root = indexed.root
    before = answers(root)
    damage(indexed, name)
    embedder = create_embedder(MODEL)
    result = repair(indexed, embedder=embedder)
    assert result.before.kinds() == {"damaged_index"}
    assert any("set it aside as" in a for a in result.actions), result.actions
    assert result.after.ok, result.after
    assert embedder.texts_embedded == 0  # every vector was reused by content hash
    assert answers(root) == before
    # The stray vectors of the lost graph's chunks are gone too: nothing left for verify.
    assert not result.after.notes, result.after.notes


def test_cli_verify_repair_of_a_damaged_index(indexed):
    root = indexed.root
    damage(indexed, "garbage header")
    res = invoke(index_cmd("verify", "--repair", root=root), root)
    assert res.exit_code == 0, res.output
    assert "damaged_index" in res.output and "set it aside as" in res.output
    assert "After repair: OK" in res.output
    assert list(indexed.index_path.glob("graph.db.damaged-*"))


def test_incremental_build_names_the_repair_and_changes_nothing(indexed):
    bad = damage(indexed, "truncate to half")
    kept = bad.read_bytes()
    with pytest.raises(IndexDamagedError, match="index build --full"):
        build(indexed)
    assert bad.read_bytes() == kept and not list(indexed.index_path.glob("graph.db.damaged-*"))


def test_damage_met_in_the_middle_of_a_query_is_one_line_too(indexed):
    """The index opens fine; the query meets the damaged pages (SQLite's error, not ours, is
    raised in the middle of retrieval code): still one line naming the repair."""
    path = graph_path(indexed)
    settle(path)
    symbol_pages(path)
    for args in (["symbol", "compute_7"], ["refs", "compute_7"], ["callers", "compute_7"]):
        assert_damage_line(invoke(args, indexed.root))


# --------------------------------------------------------------------------- MCP


def test_mcp_returns_damage_as_a_tool_error(indexed):
    damage(indexed, "truncate to half")
    with pytest.raises(IndexDamagedError):  # `repoctx serve --mcp` exits 1 with the line
        RepoctxMCP(indexed, ServeOptions(refresh=False))


def test_mcp_tool_error_when_the_index_is_damaged_while_serving(tmp_path):
    root = make_repo(tmp_path / "repo", FILES)
    cfg = config(root)
    build(cfg, embed=True)
    service = RepoctxMCP(cfg, ServeOptions(refresh=False)).start()
    try:
        damage(cfg, "garbage header")  # before the first call opens the index
        out = service.call("find_symbol", {"name": "compute_7"})
        assert out.is_error
        first = out.text.splitlines()[0]
        assert first.startswith("Error: The index at ") and first.endswith(REPAIR_HINT), out.text
        assert out.data["exception"] == "IndexDamagedError"
    finally:
        service.close()


def test_mcp_tool_error_when_a_query_meets_damaged_pages(indexed):
    service = RepoctxMCP(indexed, ServeOptions(refresh=False)).start()
    try:
        path = graph_path(indexed)
        settle(path)
        symbol_pages(path)  # opening still works: the query itself meets the damage
        out = service.call("find_symbol", {"name": "compute_7"})
        assert out.is_error and out.data["exception"] == "IndexDamagedError", out.text
        first = out.text.splitlines()[0]
        assert DAMAGE_LINE in first and first.endswith(REPAIR_HINT), out.text
        refs = service.call("find_references", {"name": "compute_7"})
        assert refs.is_error and REPAIR_HINT in refs.text
    finally:
        service.close()


# --------------------------------------------------------------------------- agent tools


def test_agent_tools_report_damaged_pages_in_one_line(indexed):
    """The agent's tool registry (the agent loop calls it directly, not through the MCP
    server) turns SQLite's "database disk image is malformed", met in the middle of a query,
    into the one line that names the repair (before: SQLite's words alone)."""
    path = graph_path(indexed)
    settle(path)
    symbol_pages(path)  # opening works: the queries meet the damage
    ctx = ToolContext.create(indexed)
    try:
        for name in ("find_symbol", "find_references"):
            result = default_registry().call(name, {"name": "compute_7"}, ctx)
            assert not result.ok and result.data["exception"] == "IndexDamagedError", result
            assert "\n" not in result.error and DAMAGE_LINE in result.error, result.error
            assert result.error.startswith("The index at ") and result.error.endswith(REPAIR_HINT)
    finally:
        ctx.session.close()
