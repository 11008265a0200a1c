"""End-to-end agent tasks against a real OpenAI-compatible model server.

A small set of real tasks in real fixture repositories, each run as a user runs it — the CLI
(`repoctx agent run … --yes --json`, `repoctx ask … --json`) with `REPOCTX_MODEL_BASE_URL`
pointing at a recording proxy on 127.0.0.1 in front of the server:

* ``fix_bug``: a planted bug with a failing test (shop repository);
* ``add_param``: add a parameter to a function and thread it through its two callers (report);
* ``ask_coupon``, ``ask_unknown_sku``, ``ask_vat``: three questions, answered with citations.

Per task: outcome (judged from the files and the citations, not from what the model says), the
run's status and reason, steps, tool calls parsed per form (native, or text: tag / fenced /
json), invalid calls, replies that wrote a call the loop did not read, prompt tokens estimated
(the agent's own estimate from its trace) against the server's count, wall time. The proxy
counts requests in flight at once, and — llama.cpp's server reports no usage on streamed
replies, and the CLI streams — asks the server for each request's prompt token count right
after it (the same request, not streamed, ``max_tokens`` 1: the server reuses the prompt it has
just evaluated, so this costs about one token). Invariants: no call written and not read, no
``done`` without ``finish`` on a change task, every estimate within 3 % of the server's count,
no request overlap, no crash.

    PID=$(../shared/tools/local-llm/start.sh 1.5b 8087)
    .venv/bin/python benchmarks/agent_e2e.py --base-url http://127.0.0.1:8087/v1 \
        --model qwen2.5-coder-1.5b > e2e.json 2> e2e.log
    kill $PID

Prints one JSON object to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import http.client
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

if __package__ in (None, ""):  # run as a script: make `benchmarks` and the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "benchmarks"

from agent.budget import MESSAGE_OVERHEAD  # noqa: E402
from agent.models import parse_text_calls  # noqa: E402
from agent.trace import list_runs, read_trace, trace_path  # noqa: E402
from benchmarks._common import REPO, bench_tmpdir, git_revision, log, repoctx_command  # noqa: E402
from benchmarks.e2e_tasks import REPOS, TASKS, TASKS_BY_NAME, Task  # noqa: E402

FORMAT = 1
#: A per-call estimate further than this from the server's count breaks the invariant.
ESTIMATE_TOLERANCE_PCT = 3.0
#: Exit statuses of `repoctx agent run` that are results (done, stopped/failed, no_progress,
#: blocked/gave_up).
AGENT_EXITS = (0, 2, 3, 4)
FORMS = ("native", "tag", "fenced", "json")


# -- setup and checks ----------------------------------------------------------------------------

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def cli_env(base_url: str | None = None) -> dict[str, str]:
    """The environment of the repoctx commands: the caller's REPOCTX_* settings dropped, the
    model server (the proxy) named as a user would, pytest without third-party plugins."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPOCTX_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    if base_url:
        env["REPOCTX_MODEL_BASE_URL"] = base_url
    return env


def write_repo(
    root: Path, files: Mapping[str, str], *, tokenizer: str = "", embed_model: str = ""
) -> Path:
    """The fixture as a committed git repository at ``root``; ``tokenizer`` and ``embed_model``
    go into its .repoctx.toml (as a user would set them) when given."""
    root.mkdir(parents=True, exist_ok=True)
    files = dict(files)
    settings = "".join(
        f'{key} = "{value}"\n'
        for key, value in (("tokenizer", tokenizer), ("embed_model", embed_model))
        if value
    )
    if settings:
        files[".repoctx.toml"] = settings + files.get(".repoctx.toml", "")
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (root / ".gitignore").write_text(".repoctx/\n__pycache__/\n.pytest_cache/\n")
    env = {**os.environ, **_GIT_ENV}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "init"]):
        subprocess.run(["git", *args], cwd=root, check=True, env=env, capture_output=True)
    return root


def build_index(root: Path, embed: str, env: Mapping[str, str]) -> dict[str, Any]:
    """`repoctx index build ROOT --json -q` (``embed`` "none": --no-embed)."""
    argv = [*repoctx_command(), "index", "build", str(root), "--json", "-q"]
    if embed == "none":
        argv.append("--no-embed")
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=dict(env), check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"index build failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    return {"seconds": round(time.monotonic() - t0, 2)}


def apply_fix(task: Task, root: Path) -> None:
    """Apply the known solution of ``task`` (for the benchmark's own tests)."""
    for rel, old, new in task.fix:
        path = root / rel
        text = path.read_text(encoding="utf-8")
        if text.count(old) != 1:
            raise ValueError(f"{task.name}: the known fix does not apply to {rel}")
        path.write_text(text.replace(old, new), encoding="utf-8")


def run_pytest(root: Path, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts="],
        cwd=root,
        capture_output=True,
        text=True,
        env=dict(env or cli_env()),
        timeout=300,
        check=False,
    )
    lines = [ln for ln in proc.stdout.strip().splitlines() if ln.strip()]
    return {"passed": proc.returncode == 0, "summary": lines[-1] if lines else proc.stderr[-200:]}


def check_change(task: Task, root: Path, files: Mapping[str, str]) -> dict[str, Any]:
    """Whether the repository now does what ``task`` asked: the whole test suite passes, the
    tests it had to pass are unchanged, and ``task.verify`` (if any) exits 0."""
    tests = run_pytest(root)
    changed_tests = [
        rel
        for rel in task.keep
        if not (root / rel).is_file() or (root / rel).read_text(encoding="utf-8") != files[rel]
    ]
    verified = None
    detail = ""
    if task.verify:
        proc = subprocess.run(
            [sys.executable, "-c", task.verify],
            cwd=root,
            capture_output=True,
            text=True,
            env=cli_env(),
            timeout=120,
            check=False,
        )
        verified = proc.returncode == 0
        if not verified:
            detail = (proc.stderr.strip().splitlines() or [""])[-1][:300]
    solved = tests["passed"] and not changed_tests and verified is not False
    return {
        "solved": solved,
        "tests_passed": tests["passed"],
        "tests_summary": tests["summary"],
        "tests_changed": changed_tests,
        "verified": verified,
        "verify_error": detail,
    }


def symbol_span(text: str, name: str) -> tuple[int, int]:
    """Lines of the function, class or module-level assignment ``name`` in ``text``."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == name:
                return node.lineno, node.end_lineno or node.lineno
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return node.lineno, node.end_lineno or node.lineno
    raise KeyError(name)


def expected_spans(task: Task) -> list[tuple[str, int, int]]:
    files = REPOS[task.repo]
    return [(path, *symbol_span(files[path], name)) for path, name in task.expect]


# -- the recording proxy -------------------------------------------------------------------------


class RecordingProxy:
    """A proxy on 127.0.0.1 between the CLI and the model server. It forwards each request as it
    comes (streamed replies line by line, so the client's silence timer sees every ping), keeps
    what was asked and answered, counts requests in flight at once, and — when the reply carried
    no usage — asks the server for the prompt token count of the same chat request afterwards.
    Every path is forwarded as it is (a client may ask the server's tokenize endpoints too);
    only chat completions are scored.

    Requests reach the server one at a time (the probe must follow its own request); a request
    that arrives while another is still being answered is counted as an overlap either way. A
    client that goes away mid-reply has its upstream connection closed at once, as the client
    itself would have closed it."""

    def __init__(
        self, base_url: str, *, probe: bool = True, upstream_timeout: float = 3600
    ) -> None:
        parts = urlsplit(base_url.rstrip("/"))
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        #: The base URL's path (``/v1``): the proxy's URL has the same, so paths map 1:1.
        self.prefix = parts.path.rstrip("/")
        self.probe = probe
        self.upstream_timeout = upstream_timeout
        self.exchanges: list[dict[str, Any]] = []
        self.in_flight = self.max_in_flight = self.overlaps = 0
        self.on_exchange: Callable[[dict[str, Any]], None] | None = None
        self._state = threading.Lock()
        self._server = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}{self.prefix}"

    def start(self) -> RecordingProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                proxy._handle(self, "POST", body)

            def do_GET(self) -> None:
                proxy._handle(self, "GET", None)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> RecordingProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one request ---------------------------------------------------------------------------

    def _arrive(self) -> bool:
        with self._state:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            overlapped = self.in_flight > 1
            self.overlaps += overlapped
            return overlapped

    def _leave(self, record: dict[str, Any]) -> None:
        with self._state:
            if not record.get("_left"):
                record["_left"] = True
                self.in_flight -= 1

    def _handle(self, handler: BaseHTTPRequestHandler, method: str, body: bytes | None) -> None:
        t0 = time.monotonic()
        record: dict[str, Any] = {
            "index": None,
            "method": method,
            "path": handler.path,
            "chat": method == "POST" and handler.path.split("?")[0].endswith("/chat/completions"),
            "started": round(time.time(), 3),
            "overlapped": self._arrive(),
            "stream": False,
            "status": None,
            "complete": False,
            "client_gone": False,
            "content": "",
            "finish_reason": None,
            "server_usage": None,
            "prompt_tokens": None,
            "seconds": None,
            "probe_s": None,
            "error": "",
        }
        try:
            payload = json.loads(body) if body else {}
        except ValueError:
            payload = {}
        payload = payload if isinstance(payload, dict) else {}
        record["stream"] = bool(payload.get("stream"))
        record["request"] = payload
        try:
            with self._server:
                self._forward(handler, method, body, record, t0)
                probe = record["chat"] and record["complete"] and record["server_usage"] is None
                if self.probe and probe:
                    p0 = time.monotonic()
                    record["prompt_tokens"] = self._probe(payload)
                    record["probe_s"] = round(time.monotonic() - p0, 3)
        except Exception as exc:  # the benchmark's own failure: recorded, the client sees 502
            record["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            self._leave(record)
            with self._state:
                record["index"] = len(self.exchanges)
                self.exchanges.append(record)
        if self.on_exchange is not None:
            self.on_exchange(record)

    def _forward(
        self,
        handler: BaseHTTPRequestHandler,
        method: str,
        body: bytes | None,
        record: dict[str, Any],
        t0: float,
    ) -> None:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.upstream_timeout)
        gone = threading.Event()
        done = threading.Event()
        try:
            try:
                headers = {
                    k: v
                    for k in ("Content-Type", "Authorization", "Accept")
                    if (v := handler.headers.get(k))
                }
                conn.request(method, handler.path, body, headers)
                resp = conn.getresponse()
            except OSError as exc:
                record["error"] = f"upstream: {exc}"
                handler.send_error(502, "upstream unreachable")
                return
            record["status"] = resp.status
            ctype = resp.headers.get("Content-Type", "")
            threading.Thread(
                target=_watch_client, args=(handler.connection, conn, gone, done), daemon=True
            ).start()
            kept: list[bytes] = []
            try:
                if "event-stream" not in ctype:
                    # A whole reply (JSON, an error, a tokenize count) is read upstream first, so
                    # the request has left the server before the client sees a byte of it: a
                    # client that acts on the status line alone is not an overlap.
                    kept.append(resp.read())
                    done.set()
                    self._leave(record)
                    handler.send_response(resp.status)
                    handler.send_header("Content-Type", ctype or "application/json")
                    handler.send_header("Content-Length", str(len(kept[0])))
                    handler.end_headers()
                    handler.wfile.write(kept[0])
                    handler.wfile.flush()
                else:
                    handler.send_response(resp.status)
                    for key in ("Content-Type", "Content-Length"):
                        if resp.headers.get(key):
                            handler.send_header(key, resp.headers[key])
                    handler.end_headers()
                    pending: bytes | None = None
                    while line := resp.readline():
                        if pending is not None:
                            handler.wfile.write(pending)
                            handler.wfile.flush()
                        kept.append(line)
                        pending = line
                    # The reply is complete upstream: the request is no longer in flight, even
                    # before the client has read its last line and moved on to the next one
                    # (and the client closing after that line is no hang-up).
                    done.set()
                    self._leave(record)
                    if pending is not None:
                        handler.wfile.write(pending)
                        handler.wfile.flush()
            except (OSError, http.client.HTTPException):
                record["client_gone"] = True
            finally:
                done.set()
            record["client_gone"] = record["client_gone"] or gone.is_set()
            record["seconds"] = round(time.monotonic() - t0, 3)
            if record["chat"]:
                _read_reply(b"".join(kept), ctype, resp.status, record)
            else:
                record["complete"] = not gone.is_set()
                record["reply"] = b"".join(kept)[:2000].decode("utf-8", "replace")
            if record["client_gone"]:
                record["complete"] = False
            # The end of the reply for a client that reads to the end of the connection.
            with contextlib.suppress(OSError):
                handler.connection.shutdown(socket.SHUT_WR)
        finally:
            done.set()
            conn.close()

    def _probe(self, payload: dict[str, Any]) -> int | None:
        """The server's prompt token count of ``payload``: the same request, not streamed,
        one token long."""
        drop = ("stream", "stream_options", "max_completion_tokens")
        probe = {k: v for k, v in payload.items() if k not in drop}
        probe["max_tokens"] = 1
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.upstream_timeout)
        try:
            path = f"{self.prefix}/chat/completions"
            conn.request("POST", path, json.dumps(probe), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = json.loads(resp.read() or b"{}")
        finally:
            conn.close()
        usage = data.get("usage") if isinstance(data, dict) else None
        tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        return tokens if isinstance(tokens, int) else None


def _watch_client(
    client: socket.socket,
    upstream: http.client.HTTPConnection,
    gone: threading.Event,
    done: threading.Event,
) -> None:
    """Close the upstream connection as soon as the client hangs up (it sends nothing after its
    request, so a readable socket means it went away)."""
    while not done.is_set():
        try:
            ready, _, _ = select.select([client], [], [], 0.25)
            if not ready:
                continue
            if client.recv(1, socket.MSG_PEEK):  # bytes after the request: not a hang-up
                time.sleep(0.25)
                continue
        except (OSError, ValueError):
            pass
        if done.is_set():
            return
        gone.set()
        sock = upstream.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        return


def _read_reply(raw: bytes, ctype: str, status: int, record: dict[str, Any]) -> None:
    """Content, finish reason, usage and completeness of a reply, streamed or not."""
    if "event-stream" in ctype:
        content: list[str] = []
        for line in raw.decode("utf-8", "replace").splitlines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                record["complete"] = status == 200
                continue
            try:
                chunk = json.loads(data)
            except ValueError:
                continue
            if isinstance(chunk.get("usage"), dict):
                record["server_usage"] = chunk["usage"]
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                if isinstance(delta.get("content"), str):
                    content.append(delta["content"])
                if choice.get("finish_reason"):
                    record["finish_reason"] = choice["finish_reason"]
        record["content"] = "".join(content)
        record["complete"] = record["complete"] or (
            status == 200 and record["finish_reason"] is not None
        )
    else:
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        choice = (body.get("choices") or [{}])[0] if isinstance(body, dict) else {}
        record["content"] = ((choice.get("message") or {}).get("content")) or ""
        record["finish_reason"] = choice.get("finish_reason")
        if isinstance(body, dict) and isinstance(body.get("usage"), dict):
            record["server_usage"] = body["usage"]
        record["complete"] = status == 200 and bool(choice)
    usage = record["server_usage"]
    if usage and isinstance(usage.get("prompt_tokens"), int) and usage["prompt_tokens"] > 0:
        record["prompt_tokens"] = usage["prompt_tokens"]
    else:
        record["server_usage"] = None


# -- scoring -------------------------------------------------------------------------------------

_CALL_MARKERS = ("<tool_call>", "[TOOL_CALLS]", "<|python_tag|>", "<|tool_call|>")


def wrote_call(content: str, names: Iterable[str]) -> bool:
    """Whether a reply looks like it calls a tool — an independent check of the loop's parser:
    a call marker, or a key `name` set to one of the tools (JSON or Python quoting)."""
    if any(m in content for m in _CALL_MARKERS):
        return True
    alt = "|".join(re.escape(n) for n in names)
    return bool(alt) and re.search(rf"""["']name["']\s*:\s*["']({alt})["']""", content) is not None


def token_comparison(pairs: Sequence[tuple[int, int | None]]) -> dict[str, Any]:
    """Estimated against reported prompt tokens, per call and in total (calls the server gave
    no count for are left out and counted)."""
    known = [(e, r) for e, r in pairs if r]
    errors = [round((e - r) / r * 100, 2) for e, r in known]
    est, rep = sum(e for e, _ in known), sum(r for _, r in known)
    return {
        "estimated": est,
        "reported": rep,
        "error_pct": round((est - rep) / rep * 100, 2) if rep else None,
        "max_abs_call_error_pct": max((abs(x) for x in errors), default=None),
        "calls_compared": len(known),
        "calls_without_count": len(pairs) - len(known),
        "calls_over_tolerance": sum(abs(x) > ESTIMATE_TOLERANCE_PCT for x in errors),
        "per_call": [[e, r, x] for (e, r), x in zip(known, errors, strict=True)],
    }


def match_exchanges(
    model_calls: Sequence[Mapping[str, Any]], exchanges: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any] | None]:
    """The proxy exchange of each model call of a trace: the completed exchanges in order, a
    call paired only with an exchange whose reply text is the same."""
    done = [x for x in exchanges if x.get("complete")]
    out: list[Mapping[str, Any] | None] = []
    i = 0
    for call in model_calls:
        j = i
        while j < len(done) and done[j].get("content", "") != call.get("content", ""):
            j += 1
        if j < len(done):
            out.append(done[j])
            i = j + 1
        else:
            out.append(None)
    return out


def score_agent(
    task: Task,
    events: Sequence[Mapping[str, Any]],
    exchanges: Sequence[Mapping[str, Any]],
    *,
    exit_code: int | None,
    stdout: str,
    stderr: str,
    wall_s: float,
    check: Mapping[str, Any] | None,
    killed: bool = False,
) -> dict[str, Any]:
    """The row of one agent task from its trace, the proxy's exchanges and the CLI's output."""
    report: dict[str, Any] | None
    try:
        report = json.loads(stdout) if stdout.strip() else None
    except ValueError:
        report = None
    traceback_seen = "Traceback (most recent call last)" in stderr
    crash = bool(
        killed
        or traceback_seen
        or exit_code is None
        or exit_code < 0
        or exit_code not in (*AGENT_EXITS, 1)
        or (exit_code in AGENT_EXITS and report is None)
    )
    header = events[0] if events else {}
    names = set(header.get("tools") or ())
    model_calls = [e for e in events if e.get("type") == "model_call"]
    tool_events = [e for e in events if e.get("type") == "tool_call"]
    notices = [e for e in events if e.get("type") == "notice"]
    malformed_steps = {e.get("step") for e in notices if e.get("kind") == "malformed_call"}
    steps_with_calls = {e.get("step") for e in tool_events}
    end = next((e for e in reversed(events) if e.get("type") == "end"), None)
    acts = [e for e in events if e.get("type") == "model_call" and e.get("purpose") == "act"]
    if end and end.get("reason") == "repetition" and acts:
        # The repeated calls were read (that is how they were found repeated), then not run.
        steps_with_calls.add(acts[-1].get("step"))

    forms: Counter[str] = Counter()
    replies_with_call = 0
    missed: list[dict[str, Any]] = []
    for e in model_calls:
        if e.get("purpose") != "act":
            continue
        content = e.get("content") or ""
        if e.get("tool_calls"):
            forms["native"] += len(e["tool_calls"])
        else:
            parsed = parse_text_calls(content, names=names)
            if parsed.calls:
                forms[parsed.form] += len(parsed.calls)
        if e.get("tool_calls") or wrote_call(content, names):
            replies_with_call += 1
            step = e.get("step")
            if step not in steps_with_calls and step not in malformed_steps:
                missed.append({"step": step, "content": content[:300]})

    failures = Counter(e.get("kind") or "?" for e in tool_events if not e.get("ok"))
    malformed = sum(e.get("kind") == "malformed_call" for e in notices)
    schema = sum(
        1
        for e in tool_events
        if e.get("kind") == "bad_arguments" and "match_count" not in (e.get("data") or {})
    )
    unknown = failures.get("unknown_tool", 0)
    finish_ok = any(e.get("name") == "finish" and e.get("ok") for e in tool_events)
    status = end.get("status") if end else (report or {}).get("status")
    reason = end.get("reason") if end else (report or {}).get("reason")
    summary = (end or {}).get("summary") or {}

    chat = [x for x in exchanges if x.get("chat", True)]
    matched = match_exchanges(model_calls, chat)
    pairs = [
        (int(e.get("prompt_tokens_est") or 0), (x or {}).get("prompt_tokens"))
        for e, x in zip(model_calls, matched, strict=True)
    ]
    if crash:
        outcome = "crash"
    elif exit_code == 1:
        outcome = "error"
    elif check is not None and check.get("solved"):
        outcome = "solved"
    else:
        outcome = "unsolved"
    row: dict[str, Any] = {
        "task": task.name,
        "kind": "agent",
        "repo": task.repo,
        "outcome": outcome,
        "status": status,
        "reason": reason,
        "exit_code": exit_code,
        "steps": summary.get("steps", (report or {}).get("steps")),
        "model_calls": len(model_calls),
        "tool_format": summary.get("tool_format")
        or {"setting": header.get("tool_format"), "used": (report or {}).get("tool_format")},
        "calls": {f: forms.get(f, 0) for f in FORMS},
        "calls_total": sum(forms.values()),
        "tool_calls_run": len(tool_events),
        "tools_used": dict(Counter(e.get("name") for e in tool_events)),
        "invalid_calls": malformed + schema + unknown,
        "invalid": {"malformed": malformed, "bad_arguments": schema, "unknown_tool": unknown},
        "failed_calls_by_kind": dict(failures),
        "replies_with_call": replies_with_call,
        "calls_missed": len(missed),
        "missed_examples": missed[:3],
        "finish_called": finish_ok,
        "completed_without_finish": status == "done" and not finish_ok,
        # The run says done, the files say otherwise (the model's `finish` was not checked).
        "done_but_unsolved": status == "done" and not (check or {}).get("solved", False),
        "prompt_tokens": token_comparison(pairs),
        "exchanges_unmatched": sum(x is None for x in matched),
        **_request_figures(exchanges),
        "wall_s": round(wall_s, 1),
        "check": dict(check) if check is not None else None,
        "changed": [c.get("path") for c in summary.get("changed") or []],
        "final": ((end or {}).get("message") or "")[:400],
        "run_id": header.get("run_id"),
        "crash": crash,
        "killed": killed,
    }
    if crash or exit_code == 1:
        row["stderr_tail"] = stderr.strip()[-1500:]
    return row


def score_ask(
    task: Task,
    exchanges: Sequence[Mapping[str, Any]],
    *,
    exit_code: int | None,
    stdout: str,
    stderr: str,
    wall_s: float,
    count: Callable[[str], int],
    killed: bool = False,
) -> dict[str, Any]:
    """The row of one question: citations checked against the lines a right answer cites, and
    the request's tokens estimated as the agent estimates a prompt (each message's text plus
    MESSAGE_OVERHEAD) against the server's count."""
    try:
        answer = json.loads(stdout) if stdout.strip() else None
    except ValueError:
        answer = None
    crash = bool(
        killed
        or "Traceback (most recent call last)" in stderr
        or exit_code is None
        or exit_code not in (0, 1)
        or (exit_code == 0 and not isinstance(answer, dict))
    )
    answer = answer if isinstance(answer, dict) else {}
    spans = expected_spans(task)
    cites = answer.get("citations") or []
    on_target = [
        c
        for c in cites
        if c.get("valid")
        and any(
            c.get("path") == p and c.get("start_line", 0) <= end and c.get("end_line", 0) >= start
            for p, start, end in spans
        )
    ]
    text = answer.get("answer") or ""
    mentions = any(k.lower() in text.lower() for k in task.keywords)
    if crash:
        outcome = "crash"
    elif exit_code == 1:
        outcome = "error"
    elif on_target:
        outcome = "correct"
    elif not cites:
        outcome = "uncited"
    else:
        outcome = "off_target"
    chat = [x for x in exchanges if x.get("chat", True)]
    done = [x for x in chat if x.get("complete")]
    # ask's own estimate of its prompt (`prompt_tokens_est`) is of the request it sent last;
    # without one, the benchmark counts each message's text plus MESSAGE_OVERHEAD.
    own = answer.get("prompt_tokens_est")
    counted = [
        sum(count(m.get("content") or "") + MESSAGE_OVERHEAD for m in messages)
        for x in done
        for messages in [(x.get("request") or {}).get("messages") or []]
    ]
    if isinstance(own, int) and own > 0 and done:
        pairs = [(own, done[-1].get("prompt_tokens"))]
        source = "ask prompt_tokens_est"
    else:
        pairs = [(est, x.get("prompt_tokens")) for est, x in zip(counted, done, strict=True)]
        source = f"benchmark: text tokens + {MESSAGE_OVERHEAD} per message"
    row: dict[str, Any] = {
        "task": task.name,
        "kind": "ask",
        "repo": task.repo,
        "question": task.prompt,
        "outcome": outcome,
        "exit_code": exit_code,
        "steps": None,
        "model_calls": len([x for x in chat if x.get("complete")]),
        "calls": None,
        "invalid_calls": None,
        "citations": {
            "total": len(cites),
            "valid": sum(bool(c.get("valid")) for c in cites),
            "invalid": sum(not c.get("valid") for c in cites),
            "in_context": sum(bool(c.get("in_context")) for c in cites),
            "on_target": len(on_target),
        },
        "expected": [f"{p}:{s}-{e}" for p, s, e in spans],
        "mentions_expected": mentions,
        "completed_without_finish": False,
        "prompt_tokens": {**token_comparison(pairs), "source": source},
        "benchmark_estimate": counted,
        "context_tokens": (answer.get("context") or {}).get("used_tokens"),
        "tokenizer": (answer.get("context") or {}).get("tokenizer"),
        "notes": answer.get("notes") or [],
        **_request_figures(exchanges),
        "wall_s": round(wall_s, 1),
        "answer": text[:600],
        "crash": crash,
        "killed": killed,
    }
    if crash or exit_code == 1:
        row["stderr_tail"] = stderr.strip()[-1500:]
    return row


def _request_figures(exchanges: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the proxy saw of a task: chat requests and others (tokenize endpoints ...), overlaps,
    time in the server and in the benchmark's own count probes."""
    chat = [x for x in exchanges if x.get("chat", True)]
    other = Counter(
        f"{x.get('method')} {x.get('path')} {x.get('status')}"
        for x in exchanges
        if not x.get("chat", True)
    )
    return {
        "usage_from_server": any(x.get("server_usage") for x in chat),
        "overlaps": sum(bool(x.get("overlapped")) for x in exchanges),
        "requests": len(chat),
        "other_requests": dict(other),
        "failed_requests": sum(not x.get("complete") for x in chat),
        "model_s": round(sum(x.get("seconds") or 0 for x in chat), 1),
        "probe_s": round(sum(x.get("probe_s") or 0 for x in chat), 1),
    }


def invariants(rows: Sequence[Mapping[str, Any]], proxy_overlaps: int) -> dict[str, Any]:
    """What must hold whatever the model manages: every call written is read, no completed
    change task without `finish`, estimates within tolerance, no overlap, no crash."""
    missed = sum(r.get("calls_missed") or 0 for r in rows)
    cwf = [r["task"] for r in rows if r.get("completed_without_finish")]
    calls = [c for r in rows for c in (r.get("prompt_tokens") or {}).get("per_call", [])]
    worst = max((abs(c[2]) for c in calls), default=None)
    over = sum(abs(c[2]) > ESTIMATE_TOLERANCE_PCT for c in calls)
    no_count = sum((r.get("prompt_tokens") or {}).get("calls_without_count", 0) for r in rows)
    crashes = [r["task"] for r in rows if r.get("crash")]
    return {
        "calls_parsed_when_written": {"missed": missed, "pass": missed == 0},
        "completed_without_finish": {"tasks": cwf, "pass": not cwf},
        "estimate_within_3pct": {
            "calls": len(calls),
            "calls_without_server_count": no_count,
            "calls_over": over,
            "max_abs_error_pct": worst,
            "pass": bool(calls) and over == 0 and no_count == 0,
        },
        "no_request_overlap": {"overlaps": proxy_overlaps, "pass": proxy_overlaps == 0},
        "no_crashes": {"tasks": crashes, "pass": not crashes},
    }


# -- running -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Proc:
    exit_code: int | None
    stdout: str
    stderr: str
    wall_s: float
    killed: bool


def run_cli(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float) -> Proc:
    """A CLI command in its own session; past ``timeout`` the whole group is killed (the agent's
    pytest children too)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    killed = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        killed = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    return Proc(proc.returncode, out, err, time.monotonic() - t0, killed)


def _save_output(where: Path, name: str, proc: Proc) -> None:
    """The command's stdout and stderr beside the repositories (kept with --keep)."""
    (where / f"{name}.stdout").write_text(proc.stdout, encoding="utf-8")
    (where / f"{name}.stderr").write_text(proc.stderr, encoding="utf-8")


class TraceTail:
    """Logs a running agent's trace as it grows (the CLI prints nothing with --json)."""

    def __init__(self, runs: Path) -> None:
        self.runs, self.stop = runs, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TraceTail:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)

    def _run(self) -> None:
        before = set(self.runs.glob("*.jsonl")) if self.runs.is_dir() else set()
        path, pos = None, 0
        while not self.stop.wait(2.0):
            if path is None:
                new = sorted(set(self.runs.glob("*.jsonl")) - before) if self.runs.is_dir() else []
                if not new:
                    continue
                path = new[0]
            with open(path, encoding="utf-8") as fh:
                fh.seek(pos)
                chunk = fh.read()
            end = chunk.rfind("\n") + 1
            pos += len(chunk[:end].encode("utf-8"))
            for line in chunk[:end].splitlines():
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                text = _event_line(event)
                if text:
                    log(f"    {text}")


def _event_line(e: Mapping[str, Any]) -> str:
    kind = e.get("type")
    if kind == "plan":
        return f"plan: {len(e['plan'].get('steps', []))} step(s) {e.get('reason') or ''}".strip()
    if kind == "context":
        return f"step {e['step']}: prompt ~{e['prompt_tokens']:,} tokens"
    if kind == "model_call":
        calls = [c["name"] for c in e.get("tool_calls") or []]
        said = " ".join((e.get("content") or "").split())[:100]
        return f"  model {e.get('latency_s', 0):.1f} s: {calls or said!r}"
    if kind == "tool_call":
        state = "ok" if e.get("ok") else f"FAILED [{e.get('kind')}]"
        return f"  > {e['name']} {' '.join(str(e.get('arguments', '')).split())[:90]} — {state}"
    if kind in ("notice", "model_error") and e.get("kind") != "index":
        return f"  [{e.get('kind')}] {str(e.get('message', ''))[:120]}"
    if kind == "end":
        return f"end: {e['status']} / {e['reason']}"
    return ""


def run_agent_task(
    task: Task, root: Path, proxy: RecordingProxy, args: argparse.Namespace
) -> dict[str, Any]:
    argv = [
        *repoctx_command(),
        "agent",
        "run",
        task.prompt,
        "--model",
        f"openai:{args.model}",
        "--yes",
        "--json",
        "--root",
        str(root),
        "--max-steps",
        str(args.limit_steps),
        "--budget",
        str(args.budget),
        "--model-timeout",
        str(args.model_timeout),
        "--timeout",
        str(max(60, args.task_timeout - 120)),
        "--tool-format",
        args.tool_format,
    ]
    first = len(proxy.exchanges)
    with TraceTail(root / ".repoctx" / "runs"):
        proc = run_cli(argv, cwd=root, env=cli_env(proxy.url), timeout=args.task_timeout)
    _save_output(root.parent, task.name, proc)
    exchanges = proxy.exchanges[first:]
    events: list[dict[str, Any]] = []
    try:
        report = json.loads(proc.stdout) if proc.stdout.strip() else {}
    except ValueError:
        report = {}
    path = Path(report["trace_path"]) if report.get("trace_path") else None
    if path is None:  # no report (a crash): the newest trace of the repository
        index_dir = root / ".repoctx"
        runs = list_runs(index_dir)
        path = trace_path(index_dir, runs[-1]) if runs else None
    if path is not None and path.is_file():
        events = read_trace(path)
    check = check_change(task, root, REPOS[task.repo])
    return score_agent(
        task,
        events,
        exchanges,
        exit_code=proc.exit_code,
        stdout=proc.stdout,
        stderr=proc.stderr,
        wall_s=proc.wall_s,
        check=check,
        killed=proc.killed,
    )


def run_ask_task(
    task: Task,
    root: Path,
    proxy: RecordingProxy,
    args: argparse.Namespace,
    count: Callable[[str], int],
) -> dict[str, Any]:
    argv = [
        *repoctx_command(),
        "ask",
        task.prompt,
        "--model",
        f"openai:{args.model}",
        "--json",
        "--root",
        str(root),
        "--budget",
        str(args.ask_budget),
        "--max-tokens",
        str(args.answer_tokens),
        "--model-timeout",
        str(args.model_timeout),
    ]
    first = len(proxy.exchanges)
    proc = run_cli(argv, cwd=root, env=cli_env(proxy.url), timeout=args.task_timeout)
    _save_output(root.parent, task.name, proc)
    return score_ask(
        task,
        proxy.exchanges[first:],
        exit_code=proc.exit_code,
        stdout=proc.stdout,
        stderr=proc.stderr,
        wall_s=proc.wall_s,
        count=count,
        killed=proc.killed,
    )


def server_models(base_url: str) -> list[str]:
    parts = urlsplit(base_url.rstrip("/"))
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=10)
    try:
        conn.request("GET", parts.path.rstrip("/") + "/models")
        data = json.loads(conn.getresponse().read() or b"{}")
    finally:
        conn.close()
    return [m.get("id", "") for m in data.get("data") or []]


def _log_exchange(x: Mapping[str, Any]) -> None:
    what = (
        "complete" if x.get("complete") else ("client gone" if x.get("client_gone") else "failed")
    )
    if not x.get("chat", True):  # tokenize requests: many and quick, counted in the row
        if x.get("overlapped") or x.get("status") != 200:
            log(f"      {x.get('method')} {x.get('path')}: {x.get('status')} {x.get('seconds')} s")
        return
    log(
        f"      request {x['index'] + 1}: {x.get('seconds')} s, {what}, server prompt "
        f"{x.get('prompt_tokens')} tokens"
        + (f" (probe {x['probe_s']} s)" if x.get("probe_s") is not None else "")
        + (" OVERLAP" if x.get("overlapped") else "")
        + (f" error {x['error']}" if x.get("error") else "")
    )


def _table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The per-task table in Markdown, for the log and notes."""
    head = (
        "| task | outcome | status / reason | steps | calls native/tag/fenced/json | invalid | "
        "missed | prompt est / server (err %, worst call) | wall s |"
    )
    out = [head, "|" + "---|" * 9]
    for r in rows:
        pt = r.get("prompt_tokens") or {}
        calls = r.get("calls")
        forms = "/".join(str(calls[f]) for f in FORMS) if calls else "—"
        status = (
            f"{r.get('status')} / {r.get('reason')}"
            if r["kind"] == "agent"
            else (f"citations {r['citations']['on_target']}/{r['citations']['total']} on target")
        )
        out.append(
            f"| {r['task']} | {r['outcome']} | {status} | {r.get('steps') if r.get('steps') is not None else '—'} | "
            f"{forms} | {r.get('invalid_calls') if r.get('invalid_calls') is not None else '—'} | "
            f"{r.get('calls_missed') if r.get('calls_missed') is not None else '—'} | "
            f"{pt.get('estimated')} / {pt.get('reported')} ({pt.get('error_pct')}, "
            f"{pt.get('max_abs_call_error_pct')}) | {r.get('wall_s')} |"
        )
    return "\n".join(out)


def _modified_files() -> list[str]:
    """Files changed in the working tree the run used (others may edit it meanwhile)."""
    proc = subprocess.run(
        ["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True, check=False
    )
    return [line[3:] for line in proc.stdout.splitlines() if line.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8087/v1", help="the model server")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b", help="the server's model name")
    ap.add_argument("--tasks", default="", help="comma-separated task names (default: all)")
    ap.add_argument("--limit-steps", type=int, default=10, help="agent --max-steps per task")
    ap.add_argument("--budget", type=int, default=5000, help="agent prompt budget (--budget)")
    ap.add_argument("--ask-budget", type=int, default=1500, help="context budget of each ask")
    ap.add_argument("--answer-tokens", type=int, default=512, help="ask --max-tokens")
    ap.add_argument("--model-timeout", type=float, default=1800, help="--model-timeout (s)")
    ap.add_argument(
        "--task-timeout",
        type=float,
        default=3600,
        help="wall limit per task (s); the agent's --timeout is 120 s less",
    )
    ap.add_argument("--tool-format", default="auto", choices=("auto", "native", "text"))
    ap.add_argument(
        "--tokenizer",
        default="",
        help="`tokenizer` in the fixtures' .repoctx.toml (default: none, repoctx's default)",
    )
    ap.add_argument(
        "--embed-model",
        default="",
        help="`embed_model` of the fixtures (default: repoctx's "
        "default model; `hashing` for a light run; `none` builds without vectors)",
    )
    ap.add_argument(
        "--wait-server", type=float, default=600, help="seconds to wait for a busy server"
    )
    ap.add_argument("--no-probe", action="store_true", help="do not ask the server for counts")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument(
        "--dump",
        type=Path,
        default=None,
        help="write every exchange (request, reply text, counts) to this JSON-lines file",
    )
    args = ap.parse_args(argv)

    names = [n.strip() for n in args.tasks.split(",") if n.strip()] or [t.name for t in TASKS]
    unknown = [n for n in names if n not in TASKS_BY_NAME]
    if unknown:
        ap.error(f"unknown task(s) {', '.join(unknown)} — known: {', '.join(TASKS_BY_NAME)}")
    deadline = time.monotonic() + args.wait_server
    while True:  # a server still busy with an abandoned request answers nothing meanwhile
        try:
            models = server_models(args.base_url)
            break
        except OSError as exc:
            if time.monotonic() >= deadline:
                print(
                    f"No model server at {args.base_url} ({exc}) — start one first.",
                    file=sys.stderr,
                )
                return 1
            log(f"server not answering ({exc}); waiting")
            time.sleep(10)
    from retrieval.tokens import get_tokenizer

    counter = get_tokenizer(args.tokenizer or None)
    tmp = bench_tmpdir("e2e")
    log(f"temp dir {tmp}; server {args.base_url} models {models}")
    embed = "none" if args.embed_model == "none" else args.embed_model
    rows: list[dict[str, Any]] = []
    builds: dict[str, Any] = {}
    t0 = time.monotonic()
    load0 = os.getloadavg()
    proxy = RecordingProxy(args.base_url, probe=not args.no_probe)
    proxy.on_exchange = _log_exchange
    try:
        with proxy:
            ask_root: Path | None = None
            for name in names:
                task = TASKS_BY_NAME[name]
                log(f"task {name} ({task.kind}, {task.repo})")
                try:
                    if task.kind == "agent" or ask_root is None:
                        root = write_repo(
                            tmp / (name if task.kind == "agent" else f"{task.repo}-ask"),
                            REPOS[task.repo],
                            tokenizer=args.tokenizer,
                            embed_model="" if embed in ("", "none") else embed,
                        )
                        builds[root.name] = build_index(root, embed, cli_env())
                        log(f"  index built in {builds[root.name]['seconds']} s")
                        if task.kind == "ask":
                            ask_root = root
                    if task.kind == "agent":
                        row = run_agent_task(task, root, proxy, args)
                    else:
                        assert ask_root is not None
                        row = run_ask_task(task, ask_root, proxy, args, counter.count)
                except Exception as exc:  # the benchmark's own failure: recorded, go on
                    row = {
                        "task": name,
                        "kind": task.kind,
                        "outcome": "bench_error",
                        "error": f"{type(exc).__name__}: {exc}",
                        "traceback": traceback.format_exc()[-2000:],
                        "crash": False,
                    }
                rows.append(row)
                log(
                    f"  -> {row['outcome']} ({row.get('status')}/{row.get('reason')}) "
                    f"{row.get('wall_s')} s, tokens {(row.get('prompt_tokens') or {}).get('error_pct')} %"
                )
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.dump is not None:
        with open(args.dump, "w", encoding="utf-8") as fh:
            for x in proxy.exchanges:
                fh.write(json.dumps({k: v for k, v in x.items() if k != "_left"}) + "\n")
    checks = invariants(rows, proxy.overlaps)
    table = _table([r for r in rows if r.get("outcome") != "bench_error"])
    log("\n" + table)
    result = {
        "format": FORMAT,
        "benchmark": "agent_e2e",
        "revision": {**git_revision(), "modified": _modified_files()},
        "server": {"base_url": args.base_url, "model": args.model, "models": models},
        "settings": {
            "tasks": names,
            "limit_steps": args.limit_steps,
            "budget": args.budget,
            "ask_budget": args.ask_budget,
            "answer_tokens": args.answer_tokens,
            "model_timeout_s": args.model_timeout,
            "task_timeout_s": args.task_timeout,
            "tool_format": args.tool_format,
            "tokenizer": counter.name,
            "embed_model": args.embed_model or "default (all-MiniLM-L6-v2)",
            "probe": not args.no_probe,
            "streamed": "the CLI streams; the prompt counts come from the proxy's probe",
        },
        "machine": {
            "cpus": os.cpu_count(),
            "load_start": [round(x, 2) for x in load0],
            "load_end": [round(x, 2) for x in os.getloadavg()],
        },
        "tasks": rows,
        "invariants": checks,
        "completed_without_finish": len(checks["completed_without_finish"]["tasks"]),
        "overlaps": proxy.overlaps,
        "max_in_flight": proxy.max_in_flight,
        "crashes": len(checks["no_crashes"]["tasks"]),
        "done_but_unsolved": [r["task"] for r in rows if r.get("done_but_unsolved")],
        "bench_errors": sum(r.get("outcome") == "bench_error" for r in rows),
        "estimate_max_abs_error_pct": checks["estimate_within_3pct"]["max_abs_error_pct"],
        "requests": len(proxy.exchanges),
        "index_builds": builds,
        "table": table,
        "seconds": round(time.monotonic() - t0, 1),
        "temp_dir": str(tmp) if args.keep else None,
    }
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
