"""Every JSON-RPC request to `repoctx serve --mcp` gets exactly one answer, with the right code,
and one slow tool call holds up no other: a real server process, spoken to over raw stdio lines
and raw HTTP bodies (the SDK's client would refuse to send most of these)."""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.settings import load_config
from indexer.build import build
from indexer.lock import WriteLock
from tests.conftest import make_repo

PARSE, INVALID_REQUEST, NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
MAX_MESSAGE_BYTES = 4 * 1024 * 1024  # the server's limit (cli.mcp_protocol), as the SDK's HTTP
INIT = {
    "jsonrpc": "2.0",
    "id": "init",
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw-test", "version": "1"},
    },
}


def req(rid, method="ping", **extra) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, **extra}).encode()


def call(rid, name, arguments) -> bytes:
    return req(rid, "tools/call", params={"name": name, "arguments": arguments})


#: (case, raw message, expected answers as (id, error code); "result" for an ordinary answer).
CASES = [
    ("not json", b"{bad", [(None, PARSE)]),
    ("not utf-8", b"\xff\xfe{", [(None, PARSE)]),
    ("trailing garbage", req(1) + b" x", [(None, PARSE)]),
    ("NaN", b'{"jsonrpc":"2.0","id":2,"method":"ping","params":{"x":NaN}}', [(None, PARSE)]),
    ("nested 5000 deep", b'{"jsonrpc":"2.0","id":3,"method":"ping","params":{"x":'
     + b"[" * 5000 + b"]" * 5000 + b"}}", [(None, PARSE)]),
    ("lone surrogate id", b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}', [(None, PARSE)]),
    ("empty object", b"{}", [(None, INVALID_REQUEST)]),
    ("empty array", b"[]", [(None, INVALID_REQUEST)]),
    ("a string", b'"ping"', [(None, INVALID_REQUEST)]),
    ("a number", b"42", [(None, INVALID_REQUEST)]),
    ("null", b"null", [(None, INVALID_REQUEST)]),
    ("true", b"true", [(None, INVALID_REQUEST)]),
    ("no method", b'{"jsonrpc":"2.0","id":10}', [(10, INVALID_REQUEST)]),
    ("method a number", b'{"jsonrpc":"2.0","id":11,"method":7}', [(11, INVALID_REQUEST)]),
    ("method null", b'{"jsonrpc":"2.0","id":12,"method":null}', [(12, INVALID_REQUEST)]),
    ("method empty", b'{"jsonrpc":"2.0","id":13,"method":""}', [(13, INVALID_REQUEST)]),
    ("method an object", b'{"jsonrpc":"2.0","id":14,"method":{}}', [(14, INVALID_REQUEST)]),
    ("jsonrpc 1.0", b'{"jsonrpc":"1.0","id":15,"method":"ping"}', [(15, INVALID_REQUEST)]),
    ("jsonrpc missing", b'{"id":16,"method":"ping"}', [(16, INVALID_REQUEST)]),
    ("jsonrpc a number", b'{"jsonrpc":2.0,"id":17,"method":"ping"}', [(17, INVALID_REQUEST)]),
    ("id a fraction", b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', [(None, INVALID_REQUEST)]),
    ("id true", b'{"jsonrpc":"2.0","id":true,"method":"ping"}', [(None, INVALID_REQUEST)]),
    ("id null", b'{"jsonrpc":"2.0","id":null,"method":"ping"}', [(None, INVALID_REQUEST)]),
    ("id an object", b'{"jsonrpc":"2.0","id":{},"method":"ping"}', [(None, INVALID_REQUEST)]),
    ("id an array", b'{"jsonrpc":"2.0","id":[1],"method":"ping"}', [(None, INVALID_REQUEST)]),
    ("params a list", req(20, "tools/list", params=[1]), [(20, INVALID_PARAMS)]),
    ("params a string", req(21, "tools/call", params="find_symbol"), [(21, INVALID_PARAMS)]),
    ("params a number", req(22, "ping", params=3), [(22, INVALID_PARAMS)]),
    ("params true", req(23, "initialize", params=True), [(23, INVALID_PARAMS)]),
    ("unknown method", req(30, "tools/execute"), [(30, NOT_FOUND)]),
    ("unknown tool", call(31, "write_file", {"path": "x"}), [(31, INVALID_PARAMS)]),
    ("tool name a number", req(32, "tools/call", params={"name": 5}), [(32, INVALID_PARAMS)]),
    ("arguments a list", call(33, "find_symbol", [1]), [(33, INVALID_PARAMS)]),
    ("tools/call without params", req(34, "tools/call"), [(34, INVALID_PARAMS)]),
    # Arguments that fail the tool's schema are a tool error the model can read and correct
    # (MCP 2025-11-25: input validation errors are tool execution errors), not silence.
    ("argument of the wrong type", call(35, "find_symbol", {"name": 5}), [(35, "tool error")]),
    ("huge id", req(10**30), [(10**30, "result")]),
    ("negative id", req(-7), [(-7, "result")]),
    ("string id with a newline", req("a\nb\u2028c"), [("a\nb\u2028c", "result")]),
    ("batch of requests", b"[" + req(40) + b"," + req(41) + b',{"x":1}]',
     [(40, INVALID_REQUEST), (41, INVALID_REQUEST), (None, INVALID_REQUEST)]),
    ("batch of notifications", b'[{"jsonrpc":"2.0","method":"notifications/progress"}]', []),
    ("notification, bad params",
     b'{"jsonrpc":"2.0","method":"notifications/initialized","params":[1]}', []),
    ("notification, unknown method", b'{"jsonrpc":"2.0","method":"nothing/here"}', []),
    ("a response from the client", b'{"jsonrpc":"2.0","id":77,"result":{}}', []),
    ("a malformed response", b'{"jsonrpc":"2.0","id":78,"result":5}', []),
]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = make_repo(tmp_path_factory.mktemp("proto") / "repo", {
        "shop/cart.py": "def total(items):\n    return sum(items)\n",
    })
    build(load_config(root, env={}, jobs=1))
    return root


#: The tree these tests belong to: the server runs its code (not an installed copy's).
TREE = Path(__file__).resolve().parents[1]


def serve_argv(*args: str) -> list[str]:
    return [sys.executable, "-c", "from cli.main import main; main()", "serve", "--mcp", *args]


def server_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPOCTX_")}
    return {**env, "PYTHONPATH": str(TREE)}


class RawStdio:
    """`repoctx serve --mcp` over stdio, spoken to line by line."""

    def __init__(self, root: Path, *extra: str) -> None:
        self.proc = subprocess.Popen(
            serve_argv(str(root), *extra),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=server_env(),
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._drain, daemon=True).start()
        self.send(json.dumps(INIT).encode())
        assert self.until("init", timeout=60)[-1].get("result"), "initialize was not answered"
        self.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def send(self, raw: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(raw + b"\n")
        self.proc.stdin.flush()

    def until(self, *rids, timeout: float = 20) -> list:
        """Every message received until the answers to all of ``rids`` are in (tool calls run
        side by side, so a later ping may be answered first)."""
        got, end, waiting = [], time.monotonic() + timeout, list(rids)
        while waiting:
            try:
                line = self.lines.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no answer to {waiting} in {timeout}s; got {got}") from None
            message = json.loads(line)
            got.append(message)
            if isinstance(message, dict) and message.get("id") in waiting:
                waiting.remove(message["id"])
        return got

    def stop(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def stdio(repo):
    server = RawStdio(repo, "--no-refresh")
    yield server
    server.stop()


def answers(messages: list) -> list:
    """(id, code) per answer; a batch answer is flattened; "result" or "tool error" if not an
    error."""
    out = []
    for m in messages:
        for one in m if isinstance(m, list) else [m]:
            if "error" in one:
                out.append((one["id"], one["error"]["code"]))
            else:
                out.append((one["id"], "tool error" if one["result"].get("isError") else "result"))
    return out


@pytest.mark.parametrize(("case", "raw", "expected"), CASES, ids=[c[0] for c in CASES])
def test_stdio_answers_every_request_exactly_once(stdio, case, raw, expected):
    stdio.send(raw)
    probe = f"after {case}"
    stdio.send(req(probe))  # the server is alive and answers what comes next
    got = stdio.until(probe)
    # A tool call runs in a thread of its own: its answer may come just after the ping's.
    seen = {m.get("id") for m in got if isinstance(m, dict)}
    late = [rid for rid, _ in expected if rid is not None and len(expected) == 1
            and rid not in seen]
    got += stdio.until(*late, timeout=3) if late else []
    assert {"jsonrpc": "2.0", "id": probe, "result": {}} in got
    assert answers([m for m in got if not (isinstance(m, dict) and m.get("id") == probe)]) \
        == expected


def test_stdio_answers_an_oversized_line_and_reads_on(stdio):
    stdio.send(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"'
               + b"a" * (MAX_MESSAGE_BYTES + 10) + b'"}}')
    stdio.send(req("after big"))
    got = stdio.until("after big")
    assert answers(got) == [(None, INVALID_REQUEST), ("after big", "result")]
    assert "4 MiB" in got[0]["error"]["message"]


# --------------------------------------------------------------------------- HTTP


class RawHttp:
    """`repoctx serve --mcp --http 127.0.0.1:0`, spoken to with one POST per message."""

    def __init__(self, root: Path) -> None:
        self.proc = subprocess.Popen(
            serve_argv(str(root), "--no-refresh", "--http", "127.0.0.1:0"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=server_env(),
        )
        assert self.proc.stderr is not None
        self.url = ""
        for line in self.proc.stderr:
            if "MCP server at " in line:
                self.url = line.split("MCP server at ", 1)[1].split()[0]
                break
        assert self.url, "the server did not start"
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()
        self.headers = {"Accept": "application/json, text/event-stream",
                        "Content-Type": "application/json"}
        status, init, headers = self.post(json.dumps(INIT).encode())
        assert status == 200 and init[0]["result"], init
        self.headers["mcp-session-id"] = headers["mcp-session-id"]
        self.headers["mcp-protocol-version"] = "2025-06-18"
        self.post(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')

    def post(self, body: bytes) -> tuple[int, list, dict]:
        """HTTP status, the JSON-RPC messages in the answer (SSE or JSON), the headers."""
        request = urllib.request.Request(self.url, data=body, headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                status, headers, text = resp.status, resp.headers, resp.read().decode()
        except urllib.error.HTTPError as exc:
            status, headers, text = exc.code, exc.headers, exc.read().decode()
        if headers.get("content-type", "").startswith("text/event-stream"):
            # SSE lines end at CR or LF only (str.splitlines would also cut at U+2028).
            lines = re.split(r"\r\n|\r|\n", text)
            datas = [ln[5:].strip() for ln in lines if ln.startswith("data:")]
            messages = [json.loads(d) for d in datas if d]
        else:
            messages = [json.loads(text)] if text.strip() else []
        return status, messages, dict(headers)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def http(repo):
    server = RawHttp(repo)
    yield server
    server.stop()


# The oversized body is the SDK's own 413; everything else as over stdio.
@pytest.mark.parametrize(("case", "raw", "expected"), CASES, ids=[c[0] for c in CASES])
def test_http_answers_every_request_exactly_once(http, case, raw, expected):
    status, got, _ = http.post(raw)
    assert answers(got) == expected
    if expected and all(code not in ("result", "tool error") for _, code in expected):
        assert status >= 200, status  # an answer, whatever the HTTP status says
    if not expected:
        assert status == 202
    ok_status, ping, _ = http.post(req("after"))
    assert ok_status == 200 and answers(ping) == [("after", "result")]


# --------------------------------------------------------------------------- slow calls


def test_a_call_stuck_in_its_refresh_holds_up_nothing_else(repo):
    """A call whose refresh waits for another process's write lock (30 s allowed) is answered
    with a tool error at the call time limit, while ping, tools/list and another tool call are
    answered at once; closing stdin then ends the server although that thread still waits."""
    server = RawStdio(repo, "--lock-wait", "30", "--call-timeout", "4")
    extra = repo / "shop" / "late.py"
    try:
        server.send(call("warm", "find_symbol", {"name": "total"}))
        assert answers(server.until("warm", timeout=60)[-1:]) == [("warm", "result")]
        with WriteLock(repo / ".repoctx").acquire():
            extra.write_text("def late():\n    return 1\n")
            t0 = time.monotonic()
            server.send(call("stuck", "find_symbol", {"name": "late"}))
            time.sleep(0.5)  # the stuck call is inside its refresh now
            for rid, raw in (("ping", req("ping")), ("list", req("list", "tools/list")),
                             ("other", call("other", "find_symbol", {"name": "total"}))):
                sent = time.monotonic()
                server.send(raw)
                got = server.until(rid, timeout=15)
                assert answers(got[-1:])[0] == (rid, "result"), got
                # ping and tools/list at once; another call after its wait for the refresh
                # (2 s here), far from the 30 s the stuck refresh may wait for the lock
                assert time.monotonic() - sent < (3 if rid != "other" else 10), rid
            other = got[-1]["result"]
            assert "another call is still refreshing" in other["content"][0]["text"]
            stuck = server.until("stuck", timeout=15)[-1]
            waited = time.monotonic() - t0
            assert stuck["result"]["isError"] and stuck["result"]["structuredContent"]["timed_out"]
            assert "did not finish within 4s" in stuck["result"]["content"][0]["text"]
            assert 3.5 < waited < 10, waited
            ended = time.monotonic()
            server.proc.stdin.close()
            server.proc.wait(10)  # the abandoned thread (still waiting) does not hold it
            assert time.monotonic() - ended < 10
    finally:
        server.stop()
        extra.unlink(missing_ok=True)


def test_a_read_of_a_fifo_is_answered_and_holds_up_nothing(repo):
    """read_span on a FIFO with no writer: answered with an error (at once where reads refuse
    non-regular files, else at the time limit), and the next call is answered meanwhile."""
    fifo = repo / "pipe.py"
    os.mkfifo(fifo)
    server = RawStdio(repo, "--no-refresh", "--call-timeout", "4")
    try:
        t0 = time.monotonic()
        server.send(call("fifo", "read_span", {"path": "pipe.py"}))
        server.send(call("next", "find_symbol", {"name": "total"}))
        got = server.until("next", timeout=15)
        assert time.monotonic() - t0 < 3.5
        got += [] if any(m.get("id") == "fifo" for m in got) else server.until("fifo", timeout=15)
        fifo_answer = next(m for m in got if m.get("id") == "fifo")
        assert fifo_answer["result"]["isError"]
        assert time.monotonic() - t0 < 10
    finally:
        server.stop()
        fifo.unlink()


# --------------------------------------------------------------------------- the checker


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20,
)
messages = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]) | json_values,
        "id": st.integers() | st.text(max_size=5) | json_values,
        "method": st.sampled_from(["ping", "tools/call", "tools/list"]) | json_values,
        "params": st.dictionaries(st.text(max_size=5), json_values, max_size=3) | json_values,
        "result": json_values,
    },
)


@settings(max_examples=2000, deadline=None)
@given(st.one_of(messages, st.lists(messages, max_size=3), json_values))
def test_every_message_is_dispatched_answered_or_is_one_nobody_waits_for(value):
    """The invariant the transports rely on: a message the SDK is not handed is answered,
    unless nobody waits for an answer (a notification or a response)."""
    from cli.mcp_protocol import check

    verdict = check(json.dumps(value).encode())
    assert (verdict.message is None) or (verdict.reply is None)
    if verdict.message is None and verdict.reply is None:
        items = value if isinstance(value, list) else [value]
        assert value != [] and all(
            isinstance(m, dict) and ("id" not in m or "method" not in m) for m in items
        ), value
    if isinstance(verdict.reply, dict):
        json.dumps(verdict.reply)  # always encodable
        assert verdict.reply["error"]["code"] in (PARSE, INVALID_REQUEST, INVALID_PARAMS)
