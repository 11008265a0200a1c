"""Fuzzing pass of the untrusted-input benchmark (issue 38): hypothesis-generated MCP messages
sent as raw lines to a real `repoctx serve --mcp` over stdio, and generated tool arguments sent
through the real tool registry in this process, on a small indexed workspace with planted
secrets (`.env` in the workspace, the fake $HOME's credentials, a file outside reached only by
links planted in the workspace).

Invariants, checked per message: every request with a valid id is answered (an invalid message
gets an error reply: counted apart), the server is alive (a dead or stuck server is restarted
and the restart counted), nothing outside the workspace changed (digests of the fake $HOME and
the outside directory, every 500 messages and at the end), no secret marker in any output
(replies and the server's stderr). Hypothesis only generates here (no shrinking, no example
database): a violation is recorded with its message, never raised.

    .venv/bin/python benchmarks/hostile_untrusted.py --only fuzz [--fuzz-examples 10000]
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _common import log
from hostile_lab import Lab, McpClient, marker, tree_digest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

TOOLS = ["search_code", "find_symbol", "find_references", "read_span", "get_context",
         "index_status"]
ARG_KEYS = ["query", "mode", "k", "lang", "path_glob", "name", "kind", "limit", "kinds", "path",
            "start_line", "end_line", "task", "budget", "paths", "depth", "max_entries"]
METHODS = ["tools/call"] * 8 + ["tools/list", "ping", "initialize", "resources/list",
                                "resources/read", "prompts/list", "prompts/get",
                                "completion/complete", "logging/setLevel",
                                "notifications/initialized", "notifications/cancelled",
                                "notifications/progress", "", "tools/call/x", "rpc.discover"]
ANSWER_S = 10.0
CONTROL = "".join(chr(c) for c in range(32)) + "\x7f\u2028\u202e\ufeff"


def workspace(lab: Lab) -> tuple[Path, Path, dict[str, str]]:
    """An indexed workspace, an outside directory beside it, and the secret markers."""
    secrets = {"ws .env": marker("fuzz-env"), "outside": marker("fuzz-outside"),
               **{f"home {k}": v for k, v in lab.home_secrets.items()}}
    files = {
        "pkg/__init__.py": "",
        "pkg/a.py": "def add(a, b):\n    return a + b\n\n\nclass Calc:\n    def run(self):\n"
                    "        return add(1, 2)\n",
        "pkg/b.py": "from pkg.a import add\n\n\ndef twice(x):\n    return add(x, x)\n",
        "README.md": "# calc\n\nAdds numbers.\n",
        ".env": f"API_KEY = \"{secrets['ws .env']}\"\n",
    }
    ws = lab.repo("fuzz", files)
    outside = ws.parent / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(f"SECRET = \"{secrets['outside']}\"\n")
    os.symlink("../outside", ws / "escape_link")
    os.symlink(str(lab.home / ".aws"), ws / "home_link")
    os.symlink(".env", ws / "env_link.py")
    run = lab.run("index", "build", ".", "-q", "--no-embed", cwd=ws)
    if run.rc != 0:
        raise RuntimeError(f"index build failed: {run.brief()}")
    return ws, outside, secrets


PATHS = ["pkg/a.py", "pkg/b.py", "README.md", ".env", "env_link.py", "escape_link/secret.txt",
         "home_link/credentials", "../outside/secret.txt", "pkg/../../outside/secret.txt",
         "/etc/passwd", "~/.netrc", "~/.aws/credentials", ".git/config", ".repoctx/graph.db",
         "pkg/../.env", "pkg/a.py\x00.txt", "pkg/a.py\n", "pkg\\a.py", "%2e%2e/.env", ".",
         "", "/", "pkg/", "pkg/a.py/../../../../etc/shadow", "\x1b[2Jpkg/a.py"]


def json_values() -> st.SearchStrategy:
    leaves = (st.none() | st.booleans()
              | st.integers(min_value=-2**80, max_value=2**80)
              | st.sampled_from([0, -1, 2**31, 2**63, 10**30, -10**30])
              | st.floats(allow_nan=False, allow_infinity=False)
              | st.text(max_size=40) | st.text(alphabet=CONTROL, max_size=10)
              | st.sampled_from(PATHS))
    return st.recursive(leaves, lambda c: st.lists(c, max_size=4)
                        | st.dictionaries(st.text(max_size=8), c, max_size=4), max_leaves=8)


def paths() -> st.SearchStrategy:
    segments = st.sampled_from(["..", ".", "pkg", "a.py", ".env", "escape_link", "home_link",
                                "credentials", "secret.txt", "\n", "\x1b", "~", ""])
    return (st.sampled_from(PATHS) | st.text(max_size=60)
            | st.lists(segments, min_size=1, max_size=8).map("/".join)
            | st.integers(1, 3000).map(lambda n: "a/" * n))


#: What a client looking for secrets or code would ask for.
WORDS = ["API_KEY", "SECRET", "token", "password", "credentials", "aws", "netrc", "env", "add",
         "Calc", "Calc.run", "twice", "*", "pkg.a.add"]


def words() -> st.SearchStrategy:
    return st.sampled_from(WORDS) | st.text(max_size=30)


def wellformed(name: str) -> st.SearchStrategy:
    """Arguments the schema of ``name`` accepts, with values that probe it."""
    ints = st.integers(-5, 10**9) | st.integers(-2**70, 2**70)
    return {
        "search_code": st.fixed_dictionaries({"query": words()}, optional={
            "mode": st.sampled_from(["lexical", "semantic", "hybrid"]), "k": ints,
            "path_glob": paths(), "lang": st.text(max_size=8)}),
        "find_symbol": st.fixed_dictionaries({"name": words()}, optional={
            "kind": st.text(max_size=10), "limit": ints}),
        "find_references": st.fixed_dictionaries({"name": words()}, optional={"limit": ints}),
        "read_span": st.fixed_dictionaries({"path": paths()}, optional={
            "start_line": ints, "end_line": ints}),
        "get_context": st.fixed_dictionaries({"task": words()}, optional={
            "budget": st.integers(-10, 10**7)}),
    }.get(name, st.fixed_dictionaries({}))


def named_args(names: list[str]) -> st.SearchStrategy:
    """(tool name, arguments): mostly a known tool with schema-shaped arguments, else any."""
    known = st.sampled_from(names).flatmap(
        lambda n: st.tuples(st.just(n), st.one_of(wellformed(n), wellformed(n), tool_args())))
    return st.one_of(known, known, known, st.tuples(st.text(max_size=15), tool_args()))


def tool_args() -> st.SearchStrategy:
    typed = st.fixed_dictionaries({}, optional={
        "path": paths(), "query": st.text(max_size=80) | words(),
        "name": st.text(max_size=40) | st.sampled_from(["add", "Calc.run", "twice", "API_KEY"]),
        "start_line": st.integers(-2**70, 2**70) | st.integers(0, 20),
        "end_line": st.integers(-2**70, 2**70) | st.integers(0, 20),
        "k": st.integers(-2**70, 2**70) | st.integers(0, 50),
        "limit": st.integers(-10, 10**12), "mode": st.sampled_from(["lexical", "semantic",
                                                                   "hybrid", "x"]),
        "path_glob": paths(), "task": st.text(max_size=200), "budget": json_values(),
        "kind": st.text(max_size=10), "kinds": json_values()})
    loose = st.dictionaries(st.sampled_from(ARG_KEYS) | st.text(max_size=10),
                            json_values() | paths(), max_size=5)
    return typed | loose | json_values()


def ids() -> st.SearchStrategy:
    # Mostly valid ids, so most messages are requests the server must answer.
    return st.sampled_from(["int"] * 8 + ["str"] * 3 + ["big", "float", "bool", "null", "list",
                                                         "object", "missing"])


def messages() -> dict[str, st.SearchStrategy]:
    tool_call = st.fixed_dictionaries({
        "id": ids(), "method": st.just("tools/call"),
        "params": named_args(TOOLS).map(lambda p: {"name": p[0], "arguments": p[1]})})
    anything = st.fixed_dictionaries({
        "id": ids(), "method": st.sampled_from(METHODS) | st.text(max_size=20) | json_values(),
        "params": json_values()})
    # Blank lines are not messages (line framing); everything else on one line is.
    raw = (st.binary(min_size=1, max_size=200).map(lambda b: b.replace(b"\n", b" "))
           .filter(lambda b: b.strip())
           | st.text(min_size=1, max_size=200).map(lambda s: s.replace("\n", " ")
                                                   .replace("\r", " ")).filter(str.strip)
           | st.sampled_from(["{}", "[]", "null", "1", '"x"', "[{}]", '{"jsonrpc": "2.0"}',
                              '{"jsonrpc": "2.0", "id": 1', "{" * 5000 + "}" * 5000,
                              "[" * 100000 + "]" * 100000]))
    return {"tool": tool_call, "any": anything, "raw": raw,
            "batch": st.lists(tool_call, min_size=1, max_size=3)}


#: How often each kind is sent: a sampled_from over repeated names (a one_of would lean
#: towards its cheapest branch, here raw bytes).
MIX = ["tool"] * 12 + ["any"] * 5 + ["raw"] * 2 + ["batch"]


class Fuzzer:
    def __init__(self, lab: Lab, ws: Path, outside: Path, secrets: dict[str, str]) -> None:
        self.lab, self.ws, self.outside, self.secrets = lab, ws, outside, secrets
        self.sent = self.expected = self.answered = self.invalid = self.invalid_answered = 0
        self.restarts = 0
        self.violations: dict[str, list[str]] = {}
        self.counts: Counter[str] = Counter()
        self.seq = 0
        self.before = (tree_digest(lab.home), tree_digest(outside))
        self.client = self._start()

    def _start(self) -> McpClient:
        client = McpClient(self.lab, self.ws)
        if client.initialize(timeout=120) is None:
            raise RuntimeError(f"the server did not initialize: {client.stderr_text()[-400:]}")
        return client

    def violation(self, kind: str, example: str) -> None:
        self.counts[kind] += 1
        found = self.violations.setdefault(kind, [])
        if len(found) < 5:
            found.append(example[:300])

    def restart(self, why: str) -> None:
        self.restarts += 1
        self.check_secrets(self.client.stderr_text(), "server stderr")
        self.client.close()
        log(f"fuzz: restart after {why}")
        self.client = self._start()

    def check_secrets(self, text: str, where: str) -> None:
        hits = [k for k, m in self.secrets.items() if m in text]
        if hits:
            self.violation("secret marker in output", f"{where}: {hits}")

    def make_id(self, kind: str) -> Any:
        self.seq += 1
        return {"int": self.seq, "str": f"s{self.seq}-\u00e9\x1b", "big": 2**62 + self.seq,
                "float": self.seq + 0.5, "bool": True, "null": None, "list": [self.seq],
                "object": {"n": self.seq}}.get(kind, "missing")

    def one(self, kind: str, body: Any) -> None:
        if kind == "raw":
            line = body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")
            self.send_invalid(line, repr(body)[:200])
            return
        items = body if kind == "batch" else [body]
        msgs, wanted, invalid = [], [], kind == "batch"
        for item in items:
            msg: dict[str, Any] = {"jsonrpc": "2.0"}
            ident = self.make_id(item["id"])
            if ident != "missing":
                msg["id"] = ident
            msg["method"] = item["method"]
            if item.get("params") is not None or kind == "tool":
                msg["params"] = item["params"]
            msgs.append(msg)
            if ident == "missing":
                # a notification: no reply is due; without a string method it is invalid
                invalid = invalid or not isinstance(item["method"], str)
            elif isinstance(ident, int | str) and not isinstance(ident, bool):
                wanted.append(ident)
            else:
                invalid = True
        data = json.dumps(msgs if kind == "batch" else msgs[0]).encode()
        if kind == "batch" and all("id" not in m for m in msgs):
            # a batch of notifications only: JSON-RPC 2.0 says to send nothing back
            self.sent += 1
            self.counts["sent notification batch"] += 1
            if not self.client.send(data):
                self.violation("server dead", data.decode()[:200])
                self.restart("a dead server")
            return
        if invalid:
            self.send_invalid(data, data.decode()[:200])
            return
        valid_ids = wanted
        self.sent += 1
        self.counts[f"sent {kind}"] += 1
        if not self.client.send(data):
            self.violation("server dead", data.decode()[:200])
            self.restart("a dead server")
            return
        # A ping right behind it: once the ping is answered the server has read the request,
        # so a request still unanswered after a grace (longer for a tool call, which may be
        # working) got no reply, and a server that answers no ping is stuck or dead.
        self.seq += 1
        probe = f"probe-{self.seq}"
        if self.client.request(probe, "ping", {}, timeout=ANSWER_S) is None:
            alive = self.client.alive()
            self.violation("server dead" if not alive else "server stuck (no reply to ping)",
                           data.decode()[:200])
            self.restart("a dead server" if not alive else "no reply to ping")
            return
        grace = 2.0 if kind == "tool" else 0.2
        for ident in valid_ids:
            self.expected += 1
            reply = self.client.wait(ident, grace)
            if reply is None:
                self.violation("request unanswered", data.decode()[:200])
                continue
            self.answered += 1
            self.check_secrets(json.dumps(reply, ensure_ascii=False), data.decode()[:120])

    def send_invalid(self, data: bytes, shown: str) -> None:
        """An invalid message: JSON-RPC wants an error reply (id null or its id); a ping after
        it tells when the server has read it."""
        self.sent += 1
        self.invalid += 1
        self.counts["sent invalid"] += 1
        with self.client._cond:
            before = len(self.client.output)
        if not self.client.send(data):
            self.violation("server dead", shown)
            self.restart("a dead server")
            return
        self.seq += 1
        probe = f"probe-{self.seq}"
        if self.client.request(probe, "ping", {}, timeout=ANSWER_S) is None:
            alive = self.client.alive()
            self.violation("server dead" if not alive else "request unanswered",
                           f"ping after {shown}")
            self.restart("a dead server" if not alive else "no reply to ping")
            return
        time.sleep(0.002)
        with self.client._cond:
            new = self.client.output[before:]
        others = [ln for ln in new if f'"{probe}"' not in ln]
        for ln in others:
            self.check_secrets(ln, shown)
        if others:
            self.invalid_answered += 1
        else:
            self.violation("invalid message without an error reply", shown)

    def outside_check(self, where: str) -> None:
        now = (tree_digest(self.lab.home), tree_digest(self.outside))
        if now != self.before:
            self.violation("outside changed", where)
            self.before = now


def run_mcp(lab: Lab, n: int, ws: Path, outside: Path, secrets: dict[str, str]) -> dict:
    fz = Fuzzer(lab, ws, outside, secrets)
    t0 = time.monotonic()

    strategies = messages()

    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), derandomize=False)

    @given(st.data())
    def send(data: st.DataObject) -> None:
        kind = data.draw(st.sampled_from(MIX))
        body = data.draw(strategies[kind])
        fz.one(kind, body)
        if not fz.client.alive():
            fz.violation("server dead", f"after {kind} {body!r}"[:200])
            fz.restart("a dead server")
        if fz.sent % 500 == 0:
            fz.outside_check(f"after message {fz.sent}")
            log(f"fuzz: {fz.sent} messages, {sum(fz.counts[k] for k in fz.violations)} "
                f"violations, {time.monotonic() - t0:.0f} s")

    try:
        send()
    finally:
        fz.outside_check("at the end")
        fz.check_secrets(fz.client.stderr_text(), "server stderr")
        fz.client.close()
    return {
        "messages_sent": fz.sent,
        "requests_expecting_reply": fz.expected,
        "requests_answered": fz.answered,
        "invalid_messages": fz.invalid,
        "invalid_messages_answered_with_error": fz.invalid_answered,
        "server_restarts": fz.restarts,
        "sent_by_kind": {k[5:]: v for k, v in fz.counts.items() if k.startswith("sent ")},
        "violations": {k: fz.counts[k] for k in fz.violations},
        "examples": fz.violations,
        "seconds": round(time.monotonic() - t0, 1),
    }


def run_registry(lab: Lab, n: int, ws: Path, outside: Path, secrets: dict[str, str]) -> dict:
    """Generated arguments through the real tool registry (read and write tools; commands are
    the catalogue's business), with the workspace's own config."""
    from agent.tools import default_registry
    from agent.tools.core import ToolContext
    from cli.settings import load_config

    reg = default_registry()
    names = [s.name for s in reg.specs() if s.name not in ("run_command", "run_tests")]
    cfg = load_config(ws, env={}, jobs=1)
    ctx = ToolContext.create(cfg, granted={"read", "write"}, run_id="hostile-fuzz")
    before = (tree_digest(lab.home), tree_digest(outside))
    counts: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    calls = 0
    t0 = time.monotonic()

    def bad(kind: str, ex: str) -> None:
        counts[kind] += 1
        if len(examples.setdefault(kind, [])) < 5:
            examples[kind].append(ex[:300])

    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(named_args(names))
    def one(pair: tuple[str, Any]) -> None:
        name, args = pair
        nonlocal calls
        calls += 1
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["r"] = reg.call(name, args, ctx)
            except BaseException as exc:  # recorded: an exception is a missing answer
                box["e"] = exc

        th = threading.Thread(target=target, daemon=True)
        th.start()
        th.join(ANSWER_S)
        shown = f"{name}({json.dumps(args, default=str)[:200]})"
        if th.is_alive():
            bad("call did not return", shown)
            return
        if "e" in box:
            bad("exception escaped the registry", f"{shown}: {box['e']!r}"[:300])
            return
        r = box["r"]
        text = "\n".join([r.output or "", r.error or "", json.dumps(r.data, default=str)])
        hits = [k for k, m in secrets.items() if m in text]
        if hits:
            bad("secret marker in output", f"{shown}: {hits}")

    try:
        one()
    finally:
        ctx.session.close()
    if (tree_digest(lab.home), tree_digest(outside)) != before:
        bad("outside changed", "after the registry pass")
    return {"calls": calls, "violations": dict(counts), "examples": examples,
            "seconds": round(time.monotonic() - t0, 1)}


def fuzz(lab: Lab, n: int) -> dict:
    ws, outside, secrets = workspace(lab)
    out: dict[str, Any] = {"examples_requested": n}
    log(f"fuzz: {n} MCP messages")
    out["mcp"] = run_mcp(lab, n, ws, outside, secrets)
    reg_n = max(1, n // 2)
    log(f"fuzz: {reg_n} registry calls")
    try:
        out["registry"] = run_registry(lab, reg_n, ws, outside, secrets)
    except (ImportError, TypeError, AttributeError) as exc:  # the API of another checkout
        out["registry"] = {"error": repr(exc)[:300]}
    mcp = out["mcp"]
    out["totals"] = {
        "messages_sent": mcp["messages_sent"],
        "answered": mcp["requests_answered"] + mcp["invalid_messages_answered_with_error"],
        "violations": dict(Counter(mcp["violations"])
                           + Counter(out["registry"].get("violations", {}))),
    }
    return out
