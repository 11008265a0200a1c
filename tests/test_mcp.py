"""`repoctx serve --mcp` driven by the MCP SDK's own client: over stdio (a spawned server
process) and over streamable HTTP (a real server on 127.0.0.1)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from cli.main import cli
from cli.settings import load_config
from indexer.build import build
from indexer.lock import WriteLock
from tests.conftest import make_repo

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

FILES = {
    "shop/__init__.py": "",
    "shop/cart.py": '''
        """Shopping cart."""


        class Cart:
            """Holds items and their prices."""

            def add(self, item):
                self.items.append(item)
                return total([item])


        def total(items):
            """Sum of the item prices."""
            return sum(items)
        ''',
    "shop/api.py": """
        from shop.cart import Cart


        def checkout():
            cart = Cart()
            return cart.add(1)
        """,
    "secrets.py": "API_TOKEN = 'do-not-leak'\n",
    ".env": "PASSWORD=hunter2\n",
}

TOOLS = {
    "search_code",
    "find_symbol",
    "find_references",
    "get_context",
    "read_span",
    "index_status",
}


@pytest.fixture
def repo(tmp_path):
    root = make_repo(tmp_path / "repo", FILES)
    build(load_config(root, env={}, jobs=1, embed_model="hashing"), embed=True)
    return root


def serve_argv(*args: str) -> list[str]:
    script = Path(sys.executable).with_name("repoctx")
    if script.exists():
        return [str(script), "serve", "--mcp", *args]
    return [sys.executable, "-c", "from cli.main import main; main()", "serve", "--mcp", *args]


def stdio(root: Path, *extra: str) -> Client:
    argv = serve_argv(str(root), *extra)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPOCTX_")}
    return Client(
        StdioServerParameters(command=argv[0], args=argv[1:], env=env), read_timeout_seconds=60
    )


def text(result) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


async def call(client: Client, tool: str, **args):
    return await client.call_tool(tool, args)


def add_function(root: Path, name: str) -> None:
    (root / "shop" / "extra.py").write_text(f"def {name}(x):\n    return x + 1\n")


# --------------------------------------------------------------------------- shared checks


async def check_tools(client: Client) -> None:
    listed = (await client.list_tools()).tools
    assert {t.name for t in listed} == TOOLS
    for tool in listed:
        assert tool.input_schema["type"] == "object" and tool.description
        assert tool.annotations is not None and tool.annotations.read_only_hint is True

    found = await call(client, "find_symbol", name="Cart")
    assert not found.is_error
    assert "shop.cart.Cart (class) shop/cart.py:4" in text(found)
    assert "[index generation 1" in text(found)
    data = found.structured_content
    assert [s["qualname"] for s in data["symbols"]] == ["shop.cart.Cart"]
    assert data["freshness"]["generation"] == 1 and data["freshness"]["stale_files"] == []

    hits = await call(client, "search_code", query="total price sum", mode="lexical", k=5)
    assert not hits.is_error and "shop/cart.py" in text(hits)
    assert all(h["path"] != "secrets.py" for h in hits.structured_content["hits"])
    leaked = await call(client, "search_code", query="API_TOKEN")
    assert "do-not-leak" not in text(leaked)
    assert all(h["path"] != "secrets.py" for h in leaked.structured_content["hits"])

    refs = await call(client, "find_references", name="total")
    assert "shop/cart.py:9 call in shop.cart.Cart.add" in text(refs)
    assert refs.structured_content["refs"][0]["resolution"] == "scope"

    span = await call(client, "read_span", path="shop/cart.py", start_line=4, end_line=5)
    assert "4| class Cart:" in text(span) and "5|" in text(span) and "6|" not in text(span)
    assert span.structured_content["total_lines"] == 14

    pack = await call(
        client, "get_context", query="How is the cart total computed?", budget_tokens=1000
    )
    assert not pack.is_error, text(pack)
    items = pack.structured_content["items"]
    assert any(i["path"] == "shop/cart.py" and i["reasons"] for i in items)
    assert "Why these spans" in text(pack)

    status = await call(client, "index_status")
    assert status.structured_content["generation"] == 1
    assert status.structured_content["server"]["auto_refresh"] is True


async def check_errors(client: Client) -> None:
    missing = await call(client, "find_symbol", nme="Cart")
    assert missing.is_error
    assert "missing required argument `name`" in text(missing)
    assert "unknown argument `nme`" in text(missing)
    wrong_type = await call(client, "search_code", query="cart", k="ten")
    assert wrong_type.is_error and "`k` must be an integer" in text(wrong_type)
    out_of_range = await call(client, "read_span", path="shop/cart.py", start_line=0)
    assert out_of_range.is_error and "at least 1" in text(out_of_range)

    secret = await call(client, "read_span", path=".env")
    assert secret.is_error and "deny" in text(secret) and "hunter2" not in text(secret)
    escape = await call(client, "read_span", path="../outside.txt")
    assert escape.is_error and "outside the workspace" in text(escape)
    unknown = await call(client, "find_references", name="no_such_thing_anywhere")
    assert unknown.is_error and "no_such_thing_anywhere" in text(unknown)

    with pytest.raises(MCPError) as exc:
        await call(client, "write_file", path="x.py")
    assert exc.value.error.code == INVALID_PARAMS and "find_symbol" in exc.value.error.message


async def check_edit_visible(client: Client, root: Path) -> None:
    before = await call(client, "find_symbol", name="brand_new_function")
    assert before.structured_content["symbols"] == []
    gen = before.structured_content["freshness"]["generation"]
    add_function(root, "brand_new_function")
    after = await call(client, "find_symbol", name="brand_new_function")
    assert [s["path"] for s in after.structured_content["symbols"]] == ["shop/extra.py"]
    fresh = after.structured_content["freshness"]
    assert fresh["refreshed"] and fresh["files_reindexed"] == 1 and fresh["generation"] > gen
    assert "re-indexed before answering" in text(after)


# --------------------------------------------------------------------------- stdio


def git_status(root: Path) -> str:
    return subprocess.run(
        ["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, check=True
    ).stdout


async def check_busy_writer(client: Client, root: Path) -> None:
    """While another process holds the write lock, answers come from the index as it is, say
    so and flag the changed file; once the lock is free the next call catches up."""
    cart = root / "shop" / "cart.py"
    with WriteLock(root / ".repoctx").acquire():
        cart.write_text(cart.read_text() + "\n\ndef discount(x):\n    return x\n")
        busy = await call(client, "find_symbol", name="Cart")
        fresh = busy.structured_content["freshness"]
        assert not fresh["refreshed"] and "another process" in fresh["note"]
        assert fresh["stale_files"] == ["shop/cart.py"]
        assert "another process is writing the index" in text(busy)
        assert "changed on disk since indexed" in text(busy)
        gone = await call(client, "find_symbol", name="discount")
        assert gone.structured_content["symbols"] == []
    back = await call(client, "find_symbol", name="discount")
    assert [s["qualname"] for s in back.structured_content["symbols"]] == ["shop.cart.discount"]
    assert back.structured_content["freshness"]["stale_files"] == []


# One server process per test keeps the file fast: each spawn costs seconds of imports.
def test_stdio_tools_errors_edits_and_a_busy_writer(repo):
    async def main():
        async with stdio(repo, "--lock-wait", "0.1") as client:
            await check_tools(client)
            await check_errors(client)
            assert git_status(repo) == ""  # nothing the tools did wrote to the repository
            await check_edit_visible(client, repo)
            await check_busy_writer(client, repo)

    anyio.run(main)


def test_stdio_without_refresh_flags_stale_files(repo):
    async def main():
        async with stdio(repo, "--no-refresh") as client:
            add_function(repo, "not_indexed_yet")
            (repo / "shop" / "cart.py").write_text(
                "# moved\n" + (repo / "shop/cart.py").read_text()
            )
            miss = await call(client, "find_symbol", name="not_indexed_yet")
            assert miss.structured_content["symbols"] == []
            assert "refresh is off" in miss.structured_content["freshness"]["note"]
            cart = await call(client, "find_symbol", name="Cart")
            assert cart.structured_content["freshness"]["stale_files"] == ["shop/cart.py"]

    anyio.run(main)


# --------------------------------------------------------------------------- streamable HTTP


class HttpServer:
    """`repoctx serve --mcp --http 127.0.0.1:0` in a subprocess; the URL comes from stderr."""

    def __init__(self, root: Path) -> None:
        self.proc = subprocess.Popen(
            serve_argv(str(root), "--http", "127.0.0.1:0"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.url: str | None = None
        self.log: list[str] = []
        self._ready = threading.Event()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)
            if "MCP server at " in line and self.url is None:
                self.url = line.split("MCP server at ", 1)[1].split()[0]
                self._ready.set()
        self._ready.set()

    def wait(self, timeout: float = 60) -> str:
        self._ready.wait(timeout)
        assert self.url, "server did not start:\n" + "".join(self.log)
        return self.url

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def test_http_lists_and_calls_every_tool_and_sees_edits(repo):
    server = HttpServer(repo)
    try:
        url = server.wait()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")

        async def main():
            async with Client(url, read_timeout_seconds=60) as client:
                await check_tools(client)
                await check_errors(client)
                await check_edit_visible(client, repo)

        anyio.run(main)
    finally:
        server.stop()
    assert server.proc.returncode is not None


def test_http_refuses_non_loopback_addresses(repo):
    out = CliRunner().invoke(cli, ["serve", "--mcp", str(repo), "--http", "0.0.0.0:0"])
    assert out.exit_code == 1 and "no authentication" in out.output
    bad = CliRunner().invoke(cli, ["serve", "--mcp", str(repo), "--http", "localhost:http"])
    assert bad.exit_code == 2 and "HOST:PORT" in bad.output


def test_serve_without_an_index_says_how_to_build_one(tmp_path):
    root = make_repo(tmp_path / "bare", {"a.py": "x = 1\n"})
    out = CliRunner().invoke(cli, ["serve", "--mcp", str(root)])
    assert out.exit_code == 1 and "repoctx index build" in out.output
    assert CliRunner().invoke(cli, ["serve", str(root)]).exit_code == 2  # --mcp is required


def test_refresh_follows_the_watchers_filter_ignore_rules_included(tmp_path):
    """The server's live refresh uses `indexer.ops.watch.ChangeFilter`: a change under an ignored
    directory builds nothing, a source file builds, a file no grammar reads builds nothing,
    and a new ignore rule takes effect at once."""
    from cli.mcp_server import RepoctxMCP, ServeOptions

    root = make_repo(tmp_path / "r", {**FILES, ".gitignore": "build/\n"})
    cfg = load_config(root, env={}, jobs=1, embed_model="hashing")
    build(cfg)
    service = RepoctxMCP(cfg, ServeOptions(poll_interval_s=3600)).start()
    try:
        live = service.live

        def refresh():  # serialised with the server's own calls, as the server does
            with service._lock:
                return live.refresh()

        refresh()  # the first call catches up with the tree (or the warm-up did)
        assert not refresh().refreshed  # nothing changed since

        (root / "build").mkdir()
        (root / "build" / "generated.py").write_text("def generated():\n    pass\n")
        assert not refresh().refreshed, "an ignored path started a build"

        (root / "notes.bin").write_bytes(b"\0\1")
        assert not refresh().refreshed, "a file no grammar reads started a build"

        (root / "shop" / "tax.py").write_text("def tax(x):\n    return x\n")
        report = refresh()
        assert report.refreshed and report.files_parsed == 1

        (root / ".gitignore").write_text("build/\nshop/ignored_now.py\n")
        assert refresh().refreshed  # a rule file changed: always a build
        (root / "shop" / "ignored_now.py").write_text("def later():\n    pass\n")
        assert not refresh().refreshed, "the new ignore rule was not applied"
    finally:
        service.close()
