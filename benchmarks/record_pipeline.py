"""Record a real pipeline run (agent/pipeline.py) against a local OpenAI-compatible server, for
the replay test in tests/test_pipeline.py.

Runs the pipeline on the benchmark's `fix_bug` task (benchmarks/e2e_tasks: the shop repository
with a failing coupon test) through a recording proxy on 127.0.0.1 in front of the server, and
writes tests/recordings/<label>-pipeline.json: the repository's files, the task, every chat
request the pipeline sent and the server's reply as it came (the raw server-sent events), the
outcome and the changed files' text. Prints a JSON summary to stdout.

    .venv/bin/python benchmarks/record_pipeline.py --base-url http://127.0.0.1:8087/v1 \
        --model qwen2.5-coder-1.5b --label qwen2.5-coder-1.5b
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

if __package__ in (None, ""):  # run as a script: make `benchmarks` and the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "benchmarks"

from agent.budget import Limits  # noqa: E402
from agent.models import OpenAIClient, RetryPolicy  # noqa: E402
from agent.run_result import RunOptions  # noqa: E402
from agent.strategy import run_task  # noqa: E402
from benchmarks._common import REPO, log  # noqa: E402
from benchmarks.e2e_tasks import REPOS, TASKS_BY_NAME  # noqa: E402
from cli.settings import load_config  # noqa: E402
from tests.conftest import make_repo  # noqa: E402

FORMAT = 1
SERVER = "llama-cpp-python 0.3.36 server, default (GGUF Jinja) chat format"


def proxy(upstream: str, exchanges: list[dict[str, Any]]) -> tuple[ThreadingHTTPServer, str]:
    """A 127.0.0.1 proxy that forwards every request to ``upstream`` and records the chat ones."""
    up = urlsplit(upstream)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            conn = http.client.HTTPConnection(up.hostname, up.port, timeout=1800)
            path = up.path.rstrip("/") + self.path[len("/v1") :]
            conn.request("POST", path, raw, {"Content-Type": "application/json"})
            res = conn.getresponse()
            body = res.read()
            conn.close()
            if self.path.endswith("/chat/completions"):
                request = json.loads(raw)
                events = [e for e in body.decode().split("\r\n\r\n") if e.strip()]
                if len(events) == 1:  # some servers end events with \n\n
                    events = [e for e in body.decode().split("\n\n") if e.strip()]
                exchanges.append(
                    {
                        "request": request,
                        "reply": {
                            "status": res.status,
                            "content_type": res.getheader("Content-Type"),
                            "events": events,
                        },
                    }
                )
            self.send_response(res.status)
            self.send_header("Content-Type", res.getheader("Content-Type") or "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/v1"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--label", required=True)
    ap.add_argument("--task", default="fix_bug")
    args = ap.parse_args()
    task = TASKS_BY_NAME[args.task]
    files = REPOS[task.repo]
    exchanges: list[dict[str, Any]] = []
    httpd, url = proxy(args.base_url, exchanges)
    with tempfile.TemporaryDirectory(prefix="repoctx-record-pipeline-") as tmp:
        root = make_repo(Path(tmp) / task.repo, files)
        client = OpenAIClient(args.model, base_url=url, stream=True,
                              retry=RetryPolicy(max_retries=0))
        t0 = time.perf_counter()
        report = run_task(
            load_config(root, env={}, jobs=1), task.prompt, client,
            RunOptions(limits=Limits(model_retries=0),
                       granted=frozenset({"read", "write", "execute"})),
            setting="pipeline",
        )
        wall = time.perf_counter() - t0
        after = {c.path: (root / c.path).read_text() for c in report.changed}
    httpd.shutdown()
    out = {
        "format": FORMAT,
        "server": SERVER,
        "model": args.model,
        "recorded": datetime.now(UTC).strftime("%Y-%m-%d"),
        "task": task.prompt,
        "files": files,
        "exchanges": exchanges,
        "status": report.status,
        "reason": report.reason,
        "after": after,
    }
    dest = REPO / "tests" / "recordings" / f"{args.label}-pipeline.json"
    dest.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    log(f"wrote {dest}: {report.status}/{report.reason}, {len(exchanges)} exchange(s)")
    print(json.dumps({"status": report.status, "reason": report.reason,
                      "exchanges": len(exchanges), "wall_s": round(wall, 1)}))


if __name__ == "__main__":
    main()
