"""Record real exchanges with a local OpenAI-compatible model server, for replay tests.

With the server of ../shared/tools/local-llm (llama-cpp-python + Qwen2.5-Coder GGUF) running,
this writes tests/recordings/<name>.json:

1. ``single``: requests built by the real adapter with the agent's real system prompt and tool
   schemas and a task that calls for a tool, sent as the agent sends them (streamed, and once
   not streamed); each recorded with the server's reply as it came (the raw server-sent events,
   or the JSON body).
2. ``run``: a whole agent run (real loop, real adapter, streaming, tool format auto) on a small
   repository with a planted bug, through a recording proxy on 127.0.0.1 in front of the server:
   every request the loop sent and every event the server answered, with the repository's files
   and the limits, so a test can replay the run byte for byte from its own 127.0.0.1 server.

Requests are stored without the tool schemas (their names only) to keep the files small.
Prints one JSON object (what was recorded, timings) to stdout, progress to stderr.

    PID=$(../shared/tools/local-llm/start.sh 1.5b 8091)
    .venv/bin/python benchmarks/record_llm.py --base-url http://127.0.0.1:8091/v1 \
        --model qwen2.5-coder-1.5b --label qwen2.5-coder-1.5b
    kill $PID
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from _common import REPO, log

from agent.budget import Limits
from agent.loop import RunOptions, run_agent
from agent.memory import REMEMBER
from agent.models import Message, OpenAIClient
from agent.plan import UPDATE_PLAN
from agent.prompts import SYSTEM_PROMPT
from agent.tools import default_registry
from agent.trace import read_trace
from cli.settings import load_config

FORMAT = 1
SERVER = "llama-cpp-python 0.3.36 server, default (GGUF Jinja) chat format"
ALL = frozenset({"read", "write", "execute"})

#: The repository of the recorded run: a planted bug (add subtracts) and its tests.
FILES = {
    ".repoctx.toml": '[agent]\ntest_env = { PYTEST_DISABLE_PLUGIN_AUTOLOAD = "1" }\n',
    "pkg/__init__.py": "",
    "pkg/calc.py": '"""Arithmetic helpers."""\n\n\ndef add(a, b):\n    """Sum of two numbers."""\n'
    "    return a - b\n\n\ndef double(x):\n    return add(x, x)\n",
    "tests/test_calc.py": "from pkg.calc import add, double\n\n\ndef test_add():\n"
    "    assert add(1, 2) == 3\n\n\ndef test_double():\n    assert double(2) == 4\n",
}
RUN_TASK = "Fix the bug in pkg/calc.py: add(1, 2) returns -1 instead of 3."
RUN_LIMITS = Limits(max_steps=5, prompt_budget=5000, completion_tokens=400, model_retries=0)
#: Single exchanges: a task, and the tools offered (None: all of the agent's).
SINGLE = [
    (
        "list",
        "# Task\nList the files in the directory pkg.\n\nBegin with the current plan step.",
        True,
    ),
    (
        "read",
        "# Task\nShow me lines 1 to 12 of pkg/calc.py.\n\nBegin with the current plan step.",
        True,
    ),
    (
        "search",
        "# Task\nWhere is the function compute_tax defined? Search the code.\n\n"
        "Begin with the current plan step.",
        False,
    ),
]


def agent_tools() -> list:
    return [*default_registry().specs(ALL), UPDATE_PLAN, REMEMBER]


#: Characters kept of each message of a stored request (the replies are kept whole).
KEEP_CHARS = 1500


def slim(request: dict[str, Any]) -> dict[str, Any]:
    """The request as stored: tool names instead of their schemas, each message's content cut
    to KEEP_CHARS (with how much was cut)."""
    out = {k: v for k, v in request.items() if k not in ("tools", "messages")}
    out["messages"] = [
        {**m, "content": clip(m["content"])} if isinstance(m.get("content"), str) else m
        for m in request.get("messages", [])
    ]
    if "tools" in request:
        out["tools"] = [t["function"]["name"] for t in request["tools"]]
    return out


def clip(text: str) -> str:
    if len(text) <= KEEP_CHARS:
        return text
    return text[:KEEP_CHARS] + f"\n[... {len(text) - KEEP_CHARS} characters not kept]"


class Upstream:
    """Sends one request to the real server and yields what it answers, as it arrives."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.path = parts.path.rstrip("/") + "/chat/completions"

    def exchange(self, body: bytes) -> tuple[int, str, Iterator[bytes]]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=1800)
        conn.request("POST", self.path, body, {"Content-Type": "application/json"})
        resp = conn.getresponse()

        def lines() -> Iterator[bytes]:
            try:
                while line := resp.readline():
                    yield line
            finally:
                conn.close()

        return resp.status, resp.headers.get("Content-Type", ""), lines()


def record_reply(status: int, ctype: str, lines: Iterator[bytes]) -> dict[str, Any]:
    raw = b"".join(lines)
    if "event-stream" in ctype:
        events = [e for e in raw.decode("utf-8").replace("\r\n", "\n").split("\n\n") if e.strip()]
        return {"status": status, "content_type": "text/event-stream", "events": events}
    return {"status": status, "content_type": ctype, "body": json.loads(raw)}


def record_single(upstream: Upstream, model: str) -> list[dict[str, Any]]:
    client = OpenAIClient(model, base_url="http://127.0.0.1:1/v1")  # builds requests only
    out = []
    for name, user, stream in SINGLE:
        payload = client.build_request(
            [Message.system(SYSTEM_PROMPT), Message.user(user)], agent_tools(), max_tokens=300
        )
        if stream:
            payload = {**payload, "stream": True, "stream_options": {"include_usage": True}}
        log(f"single {name} (stream={stream}) ...")
        t0 = time.monotonic()
        reply = record_reply(*upstream.exchange(json.dumps(payload).encode()))
        seconds = round(time.monotonic() - t0, 1)
        log(f"  {seconds} s")
        out.append({"name": name, "request": slim(payload), "reply": reply, "seconds": seconds})
    return out


def record_run(upstream: Upstream, model: str, workdir: Path) -> dict[str, Any]:
    exchanges: list[dict[str, Any]] = []

    class Proxy(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            log(f"  model call {len(exchanges) + 1} ...")
            t0 = time.monotonic()
            status, ctype, lines = upstream.exchange(body)
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.end_headers()
            kept: list[bytes] = []
            for line in lines:  # forwarded as it comes: the client's silence timer sees it
                kept.append(line)
                self.wfile.write(line)
                self.wfile.flush()
            reply = record_reply(status, ctype, iter(kept))
            seconds = round(time.monotonic() - t0, 1)
            exchanges.append(
                {"request": slim(json.loads(body)), "reply": reply, "seconds": seconds}
            )
            log(f"    {seconds} s")

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    try:
        root = make_repo(workdir / "repo")
        client = OpenAIClient(
            model,
            base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1",
            stream=True,
            timeout=1800,
        )
        log(f"agent run: {RUN_TASK}")
        report = run_agent(
            load_config(root, env={}, jobs=1),
            RUN_TASK,
            client,
            RunOptions(limits=RUN_LIMITS, granted=ALL, tool_format="auto"),
        )
    finally:
        httpd.shutdown()
        httpd.server_close()
    events = read_trace(Path(report.trace_path))
    calls = [{"name": e["name"], "ok": e["ok"]} for e in events if e["type"] == "tool_call"]
    return {
        "task": RUN_TASK,
        "files": FILES,
        "limits": {k: getattr(RUN_LIMITS, k) for k in RUN_LIMITS.__dataclass_fields__},
        "exchanges": exchanges,
        "outcome": {
            "status": report.status,
            "reason": report.reason,
            "tool_format": report.tool_format,
            "tool_calls": calls,
            "steps": report.steps,
            "model_calls": report.model_calls,
            "changed": [c.path for c in report.changed],
        },
    }


def make_repo(root: Path) -> Path:
    import subprocess

    root.mkdir(parents=True)
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "PATH": "/usr/bin:/bin",
    }
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "init"]):
        subprocess.run(["git", *args], cwd=root, check=True, env=env, capture_output=True)
    return root


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8091/v1")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b", help="the server's model alias")
    ap.add_argument("--label", default=None, help="file name stem (default: the model)")
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "recordings")
    ap.add_argument("--skip-run", action="store_true", help="single exchanges only")
    args = ap.parse_args()
    upstream = Upstream(args.base_url)
    label = args.label or args.model
    args.out.mkdir(parents=True, exist_ok=True)
    common = {
        "format": FORMAT,
        "server": SERVER,
        "model": args.model,
        "recorded": datetime.now(UTC).strftime("%Y-%m-%d"),
        "tools": [t.name for t in agent_tools()],
    }
    written = []
    t0 = time.monotonic()
    single = {**common, "exchanges": record_single(upstream, args.model)}
    path = args.out / f"{label}-single.json"
    path.write_text(json.dumps(single, indent=1, ensure_ascii=False) + "\n")
    written.append(str(path))
    if not args.skip_run:
        with tempfile.TemporaryDirectory(prefix="record-llm-") as tmp:
            run = {**common, **record_run(upstream, args.model, Path(tmp))}
        path = args.out / f"{label}-run.json"
        path.write_text(json.dumps(run, indent=1, ensure_ascii=False) + "\n")
        written.append(str(path))
        log(f"run: {run['outcome']}")
    print(json.dumps({"written": written, "seconds": round(time.monotonic() - t0, 1)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
