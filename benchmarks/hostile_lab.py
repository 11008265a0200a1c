"""The lab of the untrusted-repository catalogue (issue 38) and its fuzzing pass: temporary
directories (a fake $HOME with planted secrets, an outside directory, workspaces made as git
repositories), the repoctx under test run as a user runs it (the console script, with
``PYTHONPATH`` naming ``--src`` when given), scripted agent runs, and a raw MCP stdio client
that sends bytes, not SDK objects, so malformed messages reach the server as written.

Nothing here leaves the temporary directory, listens beyond 127.0.0.1 or runs unbounded: every
process has a timeout and is killed with its process group.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import CmdResult, run_cmd

VENV_BIN = Path(sys.executable).parent
PLAN = json.dumps({"steps": [{"title": "Do the task", "done_when": "it is done"}]})


def marker(name: str) -> str:
    """A plain word no redaction pattern knows: if it comes back, the bytes leaked."""
    return f"hostile-{name}-{secrets.token_hex(4)}"


class Skip(Exception):
    """The case cannot run on this machine (the reason is the message)."""


#: A case returns (effect or None, evidence): the effect is what should not have happened.
Verdict = tuple[str | None, str]


@dataclass
class Case:
    name: str
    group: str
    fn: Callable[[Lab], Verdict]


def call(tool: str, **args: Any) -> dict:
    return {"tool_calls": [{"name": tool, "arguments": args}]}


def tree_digest(root: Path) -> str:
    """Names, link targets, modes and contents under ``root`` (links not followed)."""
    h = hashlib.sha256()
    if not root.exists() and not root.is_symlink():
        return "absent"
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted([*filenames, *[d for d in dirnames
                                          if os.path.islink(os.path.join(dirpath, d))]]):
            path = os.path.join(dirpath, name)
            h.update(os.fsencode(os.path.relpath(path, root)) + b"\0")
            st = os.lstat(path)
            h.update(f"{st.st_mode:o}".encode())
            if os.path.islink(path):
                h.update(os.fsencode(os.readlink(path)))
            elif os.path.isfile(path):
                with open(path, "rb") as fh:
                    h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


@dataclass
class Run:
    """One command's result and every text it produced (stdout, stderr, run traces)."""

    result: CmdResult
    text: str
    #: For an agent run: each tool call of the newest trace, in a few words.
    tools: str = ""

    @property
    def rc(self) -> int:
        return self.result.returncode

    def brief(self) -> str:
        err = self.result.stderr.strip().splitlines()
        last = err[-1][:200] if err else ""
        timed = " (timed out)" if self.result.timed_out else ""
        tools = f" [{self.tools}]" if self.tools else ""
        return f"rc {self.rc}{timed}" + (f": {last}" if last else "") + tools


@dataclass
class Lab:
    base: Path
    src: Path | None = None
    home: Path = field(init=False)
    outside: Path = field(init=False)
    home_secrets: dict[str, str] = field(default_factory=dict)
    _n: int = 0

    def __post_init__(self) -> None:
        self.home = self.base / "home"
        self.outside = self.base / "outside"
        self.home.mkdir(parents=True, exist_ok=True)
        self.outside.mkdir(parents=True, exist_ok=True)
        for rel in (".aws/credentials", ".netrc", ".ssh/id_ed25519"):
            m = marker("home-" + rel.replace("/", "_").strip("."))
            (self.home / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.home / rel).write_text(f"# {m}\n")
            self.home_secrets[rel] = m
        (self.home / ".gitconfig").write_text(
            "[user]\n\temail = lab@example.com\n\tname = lab\n[init]\n\tdefaultBranch = main\n")

    # -- environment -------------------------------------------------------------------------

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            "PATH": os.pathsep.join([str(VENV_BIN), "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "GIT_CONFIG_NOSYSTEM": "1",
            "TMPDIR": str(self.base / "tmp"),
            "PYTHONPYCACHEPREFIX": str(Path(tempfile.gettempdir()) / "repoctx-bench-pycache"),
        }
        (self.base / "tmp").mkdir(exist_ok=True)
        if self.src is not None:
            env["PYTHONPATH"] = str(self.src)
        env.update(extra)
        return env

    def repoctx(self) -> list[str]:
        """The console script a user runs; with ``src`` its imports come from PYTHONPATH
        (before site-packages), and its worker processes inherit that."""
        return [str(VENV_BIN / "repoctx")]

    def fresh(self, name: str) -> Path:
        self._n += 1
        path = self.base / f"{self._n:03d}-{name}"
        path.mkdir()
        return path

    def repo(self, name: str, files: dict[str, str | bytes], commit: bool = True) -> Path:
        ws = self.fresh(name) / "ws"
        ws.mkdir()
        for rel, text in files.items():
            path = ws / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(text, bytes):
                path.write_bytes(text)
            else:
                path.write_text(text)
        self.git(ws, "init", "-q", "-b", "main")
        if commit:
            self.git(ws, "add", "-A")
            self.git(ws, "commit", "-q", "-m", "initial", "--no-verify")
        return ws

    def git(self, ws: Path, *args: str) -> subprocess.CompletedProcess:
        # The lab's own git: no repository configuration may run here either.
        env = self.env(GIT_CONFIG_COUNT="2", GIT_CONFIG_KEY_0="core.hooksPath",
                       GIT_CONFIG_VALUE_0="/dev/null", GIT_CONFIG_KEY_1="core.fsmonitor",
                       GIT_CONFIG_VALUE_1="false")
        return subprocess.run(["git", *args], cwd=ws, capture_output=True, text=True,
                              check=False, env=env, timeout=60)

    # -- running repoctx ---------------------------------------------------------------------

    def run(self, *args: str, cwd: Path, timeout: float = 120, env: dict | None = None,
            watch_memory: bool = False) -> Run:
        res = run_cmd([*self.repoctx(), *args], env=env or self.env(), cwd=cwd,
                      timeout=timeout, watch_memory=watch_memory)
        return Run(res, res.stdout + "\n" + res.stderr)

    def agent(self, ws: Path, steps: Iterable[dict], *extra: str, timeout: float = 180,
              env: dict | None = None) -> Run:
        self._n += 1
        script = self.base / f"script-{self._n}.jsonl"
        lines = [PLAN, *steps, call("finish", summary="done")]
        script.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
        run = self.run("agent", "run", "Do the hostile task", "--model", f"scripted:{script}",
                       "--yes", "--json", "-q", "-C", str(ws), "--max-steps", "200", *extra,
                       cwd=ws, timeout=timeout, env=env)
        run.text += "\n" + traces(ws)
        run.tools = tool_summary(ws)
        return run


def tool_summary(ws: Path) -> str:
    """`name: ok|failed: first line of the error or of the command's stderr` per tool call of
    the newest run, so a contained verdict shows what stopped the attempt."""
    runs = sorted((ws / ".repoctx" / "runs").glob("*.jsonl")) if (ws / ".repoctx").is_dir() \
        else []
    if not runs:
        return ""
    out = []
    for line in runs[-1].read_text(errors="replace").splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("type") != "tool_call" or e.get("name") == "finish":
            continue
        detail = e.get("error") or ""
        output = e.get("output") or ""
        if not detail and "--- stderr ---\n" in output:
            detail = output.split("--- stderr ---\n", 1)[1].strip()
        if not detail and "exit code" in output:
            detail = next((ln for ln in output.splitlines() if ln.startswith("exit code")), "")
        first = detail.strip().splitlines()[0][:110] if detail.strip() else ""
        out.append(f"{e['name']}: {'ok' if e.get('ok') else 'failed'}"
                   + (f": {first}" if first else ""))
    return "; ".join(out)


def traces(ws: Path) -> str:
    runs = ws / ".repoctx" / "runs"
    if not runs.is_dir():
        return ""
    out = []
    for path in sorted(runs.glob("*.jsonl")):
        text = path.read_text(errors="replace")
        out.append(text)
        # The tool results as the model saw them (JSON-decoded: newlines are real again).
        for line in text.splitlines():
            try:
                out.append(json.dumps(json.loads(line), ensure_ascii=False).encode()
                           .decode("unicode_escape", "replace"))
            except (ValueError, UnicodeError):
                continue
    return "\n".join(out)


def sweep(word: str) -> list[int]:
    """Kill this benchmark's leftover processes whose argv or environment names ``word`` (a
    per-lab random marker, so nothing else matches); return their pids."""
    killed = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read()
        except OSError:
            continue
        if word.encode() in argv:
            try:
                os.kill(int(entry), signal.SIGKILL)
                killed.append(int(entry))
            except OSError:
                pass
    return killed


# --------------------------------------------------------------------------- raw MCP client


class McpClient:
    """`repoctx serve --mcp` over stdio, one JSON text per line. ``send`` writes any bytes;
    replies are collected by id on a reader thread."""

    def __init__(self, lab: Lab, ws: Path, *extra: str) -> None:
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        self.proc = subprocess.Popen(
            [*lab.repoctx(), "serve", "--mcp", str(ws), *extra], cwd=ws, env=lab.env(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
            start_new_session=True,
        )
        self.replies: dict[Any, dict] = {}
        self.unmatched: list[dict] = []
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace")
            with self._cond:
                self.output.append(line)
                try:
                    msg = json.loads(line)
                except ValueError:
                    msg = None
                if isinstance(msg, dict) and "id" in msg and ("result" in msg or "error" in msg):
                    key = json.dumps(msg["id"])
                    self.replies[key] = msg
                elif isinstance(msg, dict):
                    self.unmatched.append(msg)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, data: bytes | str | dict) -> bool:
        if isinstance(data, dict):
            data = json.dumps(data)
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogatepass")
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(data.rstrip(b"\n") + b"\n")
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def wait(self, ident: Any, timeout: float) -> dict | None:
        key = json.dumps(ident)
        deadline = time.monotonic() + timeout
        with self._cond:
            while key not in self.replies:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    return self.replies.get(key)
                self._cond.wait(min(left, 0.2))
            return self.replies[key]

    def wait_any(self, count_before: int, timeout: float) -> list[dict]:
        """Messages without a known id (an error reply to unparsable input has id null)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.unmatched) + len(self.replies) <= count_before:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    break
                self._cond.wait(min(left, 0.2))
            return list(self.unmatched)

    def request(self, ident: Any, method: str, params: Any = None,
                timeout: float = 30) -> dict | None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
        if params is not None:
            msg["params"] = params
        if not self.send(msg):
            return None
        return self.wait(ident, timeout)

    def initialize(self, timeout: float = 60) -> dict | None:
        reply = self.request("init", "initialize", {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "hostile-fuzz", "version": "0"}}, timeout=timeout)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return reply

    def tool(self, ident: Any, name: str, args: Any, timeout: float = 30) -> dict | None:
        return self.request(ident, "tools/call", {"name": name, "arguments": args}, timeout)

    def stderr_text(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode("utf-8", "replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.stderr.close()


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
