"""The second half of the untrusted-repository catalogue (issue 38): namespaces and processes,
links to deny-listed files, MCP replies and blocking reads, damage and exhaustion, control
characters in file names. Same rules as hostile_untrusted: judged by real effect."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from _common import run_cmd
from hostile_lab import PLAN, Case, Lab, McpClient, Skip, Verdict, call, marker, sweep

# --------------------------------------------------------------------------- namespaces


def pid_namespace(shape: str) -> Callable[[Lab], Verdict]:
    def fn(lab: Lab) -> Verdict:
        mark = marker("argv")
        victim = subprocess.Popen(["python3", "-c", "import time; time.sleep(300)", mark])
        try:
            ws = lab.repo("pidns", {"pkg/a.py": "A = 1\n"})
            command = (f"cat /proc/{victim.pid}/cmdline" if shape == "cat /proc/PID/cmdline"
                       else "python3 -c \"import glob\nfor p in glob.glob('/proc/*/cmdline'):"
                            "\n    a = open(p, 'rb').read()\n    if b'hostile-' in a: print(a)\"")
            run = lab.agent(ws, [call("run_command", command=command)])
        finally:
            victim.kill()
            victim.wait()
        return ("a host process's argv was readable" if mark in run.text else None,
                f"agent run: {run.brief()}")
    return fn


def sysv_shm(lab: Lab) -> Verdict:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    key = 0x5E000000 + (os.getpid() & 0xFFFF)
    shmid = libc.shmget(key, 4096, 0o1000 | 0o644)  # IPC_CREAT
    if shmid < 0:
        raise Skip(f"shmget failed: errno {ctypes.get_errno()}")
    mark = marker("shm")
    try:
        addr = libc.shmat(shmid, None, 0)
        ctypes.memmove(addr, mark.encode() + b"\0", len(mark) + 1)
        libc.shmdt(ctypes.c_void_p(addr))
        reader = ("import ctypes\nlibc = ctypes.CDLL(None)\nlibc.shmat.restype = ctypes.c_void_p\n"
                  "libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]\n"
                  f"i = libc.shmget({key}, 0, 0)\nprint('shmid', i)\n"
                  "a = libc.shmat(i, None, 0o10000) if i >= 0 else None\n"
                  "print(ctypes.string_at(a, 64) if a and a != 2**64 - 1 else 'no access')")
        ws = lab.repo("ipcns", {"pkg/a.py": "A = 1\n", "reader.py": reader})
        run = lab.agent(ws, [call("run_command", command="python3 reader.py")])
    finally:
        libc.shmctl(shmid, 0, None)  # IPC_RMID
    return ("a host SysV shared-memory segment was read" if mark in run.text else None,
            f"agent run: {run.brief()}")


GIT_SHAPES = {
    "GIT_EXTERNAL_DIFF=… git diff": "GIT_EXTERNAL_DIFF='sh x.sh' git diff",
    "GIT_CONFIG_COUNT/KEY/VALUE=… git diff": (
        "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=diff.external GIT_CONFIG_VALUE_0='sh x.sh' "
        "git diff"),
    "GIT_CONFIG_PARAMETERS=… git diff": "GIT_CONFIG_PARAMETERS=\"'diff.external'='sh x.sh'\" "
                                        "git diff",
    "git grep -O<cmd>": "git grep -O'sh x.sh' A",
    "GIT_SSH_COMMAND=… git ls-remote": "GIT_SSH_COMMAND='sh x.sh' git ls-remote ssh://h.invalid/r",
}


def git_injection(shape: str) -> Callable[[Lab], Verdict]:
    def fn(lab: Lab) -> Verdict:
        ws = lab.repo("gitinject", {"pkg/a.py": "A = 1\n"})
        ran = ws / "ran-by-git.txt"
        steps = [call("edit", path="pkg/a.py", old_text="A = 1", new_text="A = 2"),
                 call("create_file", path="x.sh", content=f"echo ran >> {ran}\ncat >/dev/null\n"),
                 call("run_command", command=GIT_SHAPES[shape])]
        run = lab.agent(ws, steps)
        return ("git ran a program named by the command's own variables/options"
                if ran.exists() else None, f"agent run: {run.brief()}")
    return fn


def signal_case(sig: signal.Signals, detach: bool = False) -> Callable[[Lab], Verdict]:
    """The run's command sleeps; with ``detach`` an earlier command left a grandchild in its
    own session (double fork + setsid: outside every process group a walk would kill)."""
    def fn(lab: Lab) -> Verdict:
        mark = marker("survivor")
        ws = lab.repo("signals", {"pkg/a.py": "A = 1\n"})
        script = ws.parent / "script.jsonl"
        steps = [json.dumps(PLAN)]
        if detach:
            steps.append(json.dumps(call("run_command", command=(
                "python3 -c \"import os, time\nif os.fork() == 0:\n    os.setsid()\n"
                "    if os.fork() == 0:\n        time.sleep(90)\n    os._exit(0)\n"
                f"os.wait()\" {mark}-detached"))))
        steps.append(json.dumps(call("run_command", timeout_s=120, command=(
            f"python3 -c \"import time; time.sleep(90)\" {mark}"))))
        script.write_text("\n".join(steps) + "\n")
        agent = subprocess.Popen(
            [*lab.repoctx(), "agent", "run", "t", "--model", f"scripted:{script}", "--yes", "-q",
             "-C", str(ws)], cwd=ws, env=lab.env(), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while not pids_with(mark + "\0") and time.monotonic() < deadline:
                time.sleep(0.2)
            if not pids_with(mark + "\0"):
                raise Skip("the command never started")
            os.kill(agent.pid, sig)
            try:
                agent.wait(timeout=20)
                exited = f"agent exited {agent.returncode}"
            except subprocess.TimeoutExpired:
                exited = "agent still running 20 s after the signal"
            time.sleep(1)
            left = pids_with(mark)
            detached_left = pids_with(mark + "-detached")
        finally:
            sweep(mark)
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()
        detached = [p for p in left if p in detached_left]
        return (f"{len(left)} process(es) outlived the run ({len(detached)} detached)" if left
                else None, f"{sig.name}: {exited}")
    return fn


def pids_with(word: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes()
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if word.encode() in argv and state != "Z":
                out.append(int(entry))
    return out


def home_default_deny(rel: str) -> Callable[[Lab], Verdict]:
    def fn(lab: Lab) -> Verdict:
        mark = marker("home-unlisted")
        path = lab.home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"token = {mark}\n")
        ws = lab.repo("homedeny", {"pkg/a.py": "A = 1\n"})
        run = lab.agent(ws, [call("run_command", command=f"cat {path}")])
        return ("a file in $HOME that no deny list names was read" if mark in run.text else None,
                f"agent run: {run.brief()}")
    return fn


# --------------------------------------------------------------------------- links


def link_case(shape: str) -> Callable[[Lab], Verdict]:
    def fn(lab: Lab) -> Verdict:
        mark = marker("linked")
        body = f'API_KEY = "{mark}"\n'
        files: dict[str, str] = {"pkg/a.py": "A = 1\n"}
        if shape == "settings_link.py -> .env":
            files[".env"] = body
            link, target = "settings_link.py", ".env"
        elif shape == "keys.py -> deploy/id_rsa":
            files["deploy/id_rsa"] = body
            link, target = "keys.py", "deploy/id_rsa"
        elif shape == "conf/ (a directory link) -> ~/.aws":
            (lab.home / ".aws").mkdir(exist_ok=True)
            (lab.home / ".aws" / "settings.py").write_text(body)
            link, target = "conf", str(lab.home / ".aws")
        else:
            (lab.home / ".aws").mkdir(exist_ok=True)
            (lab.home / ".aws" / "credentials").write_text(body)
            link, target = "aws_settings.py", str(lab.home / ".aws" / "credentials")
        ws = lab.repo("links", files)
        os.symlink(target, ws / link)
        build = lab.run("index", "build", ".", "-q", "--no-embed", cwd=ws)
        # Queries name the symbol, never the marker (an answer may echo its query).
        outs = {"cli search": lab.run("search", "API_KEY", cwd=ws),
                "cli symbol": lab.run("symbol", "API_KEY", cwd=ws),
                "agent tools": lab.agent(ws, [call("find_symbol", name="API_KEY"),
                                              call("search_code", query="API_KEY")])}
        hit = [k for k, r in outs.items() if mark in r.text]
        return (f"the deny-listed file's content came back through the link: {hit}" if hit
                else None, f"build: {build.brief()}")
    return fn


# --------------------------------------------------------------------------- MCP


def indexed(lab: Lab, name: str, files: dict[str, str] | None = None) -> Path:
    ws = lab.repo(name, files or {"pkg/__init__.py": "", "pkg/a.py": "def add(a, b):\n"
                                  "    return a + b\n"})
    run = lab.run("index", "build", ".", "-q", "--no-embed", cwd=ws)
    if run.rc != 0:
        raise RuntimeError(f"index build failed: {run.brief()}")
    return ws


def fifo_case(shape: str) -> Callable[[Lab], Verdict]:
    def fn(lab: Lab) -> Verdict:
        ws = indexed(lab, "fifo")
        if shape == "FIFO named data.txt":
            os.mkfifo(ws / "data.txt")
            path = "data.txt"
        elif shape == "FIFO named pkg/b.py":
            os.mkfifo(ws / "pkg" / "b.py")
            path = "pkg/b.py"
        else:
            os.mkfifo(ws / ".pipe")
            os.symlink(".pipe", ws / "notes.md")
            path = "notes.md"
        client = McpClient(lab, ws, "--no-refresh")
        try:
            client.initialize()
            t0 = time.monotonic()
            first = client.tool(1, "read_span", {"path": path}, timeout=10)
            took = time.monotonic() - t0
            second = client.tool(2, "index_status", {}, timeout=10)
        finally:
            client.close()
        ev = f"read_span answered: {first is not None} ({took:.1f} s); next call: {second is not None}"
        if first is None or second is None:
            return "the read blocked the server (no reply within 10 s)", ev
        return None, ev
    return fn


def fifo_agent(lab: Lab) -> Verdict:
    ws = indexed(lab, "fifo-agent")
    os.mkfifo(ws / "data.txt")
    run = lab.agent(ws, [call("read_span", path="data.txt")], timeout=60)
    if run.result.timed_out:
        return "agent run blocked on read_span of a FIFO (killed after 60 s)", run.brief()
    return None, run.brief()


MALFORMED: dict[str, tuple[str, Any]] = {  # shape -> (raw line, id the reply must carry)
    "malformed JSON": ('{"jsonrpc": "2.0", "id": 41, "method": ', None),
    "empty object {}": ("{}", None),
    "request without a method": ('{"jsonrpc": "2.0", "id": 42}', 42),
    "tools/call with params an array": (
        '{"jsonrpc": "2.0", "id": 43, "method": "tools/call", "params": [1, 2]}', 43),
    "tools/list with params a string": (
        '{"jsonrpc": "2.0", "id": 44, "method": "tools/list", "params": "x"}', 44),
    "tools/call with arguments a string": (
        '{"jsonrpc": "2.0", "id": 45, "method": "tools/call", "params": '
        '{"name": "search_code", "arguments": "add"}}', 45),
    "method a number": ('{"jsonrpc": "2.0", "id": 46, "method": 7}', 46),
    "not JSON at all (binary)": ("\x00\x01\xff garbage", None),
}


def malformed_case(shape: str) -> Callable[[Lab], Verdict]:
    def fn(lab: Lab) -> Verdict:
        ws = indexed(lab, "mcp-malformed")
        line, ident = MALFORMED[shape]
        client = McpClient(lab, ws, "--no-refresh")
        try:
            client.initialize()
            before = len(client.unmatched) + len(client.replies)
            client.send(line)
            if ident is None:
                client.wait_any(before, 5)
                reply = client.replies.get("null") or next(
                    (m for m in client.unmatched if "error" in m), None)
            else:
                reply = client.wait(ident, 5)
            alive = client.request("after", "ping", {}, timeout=10) is not None
        finally:
            client.close()
        ev = f"reply: {json.dumps(reply)[:200] if reply else None}; answers after: {alive}"
        if reply is None:
            return "no reply at all", ev
        if not alive:
            return "the server stopped answering", ev
        return None, ev
    return fn


# --------------------------------------------------------------------------- damage


def one_line(run_text: str) -> bool:
    return "Traceback" not in run_text


def vector_damage(shape: str) -> Callable[[Lab], Verdict]:
    def fn(lab: Lab) -> Verdict:
        ws = lab.repo("vectors", {"pkg/__init__.py": "", "pkg/a.py": "def add(a, b):\n"
                                  "    return a + b\n", "README.md": "# adding numbers\n"})
        build = lab.run("index", "build", ".", "-q", "--embed-model", "hashing:64", cwd=ws)
        table = next((ws / ".repoctx").glob("vectors*/*.lance"), None)
        if build.rc != 0 or table is None:
            raise RuntimeError(f"no vector table after the build: {build.brief()}")
        data = sorted((table / "data").glob("*"))
        if shape == "data files deleted":
            for p in data:
                p.unlink()
        elif shape == "data files truncated to half":
            for p in data:
                os.truncate(p, p.stat().st_size // 2)
        elif shape == "data files overwritten with noise":
            for p in data:
                p.write_bytes(os.urandom(p.stat().st_size))
        elif shape == "_versions deleted":
            shutil.rmtree(table / "_versions")
        elif shape == "table directory replaced by a plain file":
            shutil.rmtree(table)
            table.write_bytes(b"not a table\n")
        else:  # the whole vectors directory
            shutil.rmtree(table.parent)
            table.parent.write_bytes(b"not a table\n")
        env = lab.env()
        env.pop("REPOCTX_EMBED_MODEL", None)
        search = lab.run("search", "add", "--embed-model", "hashing:64", cwd=ws) \
            if "--embed-model" in lab.run("search", "--help", cwd=ws).text \
            else lab.run("search", "add", cwd=ws)
        verify = lab.run("index", "verify", ".", cwd=ws)
        rebuild = lab.run("index", "build", ".", "--embed-model", "hashing:64", cwd=ws)
        again = lab.run("search", "add", cwd=ws)
        problems = []
        if not one_line(search.text):
            problems.append(f"search: traceback ({search.text.count(chr(10))} lines)")
        if search.rc == 0 and "pkg/a.py" not in search.result.stdout:
            problems.append("search: no answer")
        if verify.rc == 0:
            problems.append("index verify says OK")
        if not one_line(rebuild.text) or rebuild.rc != 0:
            problems.append(f"build: {rebuild.brief()}")
        elif "100.0%" in rebuild.text and not one_line(again.text):
            problems.append("build reports 100% coverage, search still fails")
        if not one_line(again.text):
            problems.append("search after the build: traceback")
        ev = (f"search {search.brief()}; verify {verify.brief()}; build {rebuild.brief()}; "
              f"search again {again.brief()}")
        return ("; ".join(problems) or None), ev
    return fn


def disk_full(lab: Lab) -> Verdict:
    if shutil.which("unshare") is None:
        raise Skip("no unshare(1)")
    ws = lab.repo("diskfull", {f"pkg/m{i:03d}.py": f"def f{i}(x):\n    return x + {i}\n" * 40
                               for i in range(150)})
    mnt = ws.parent / "small"
    mnt.mkdir()
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k none "
                            f"{mnt}"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        raise Skip(f"mounting a small tmpfs is not permitted: {probe.stderr.strip()[:120]}")
    inner = " ".join([*lab.repoctx(), "index", "build", str(ws), "--index-dir",
                      f"{mnt}/idx", "--no-embed", "-q"])
    res = run_cmd(["unshare", "-rm", "sh", "-c",
                   f"mount -t tmpfs -o size=256k none {mnt} && {inner}"],
                  env=lab.env(), cwd=ws, timeout=180)
    text = res.stdout + res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    ev = f"rc {res.returncode}; {len(lines)} stderr lines; last: {lines[-1][:200] if lines else ''}"
    if res.returncode == 0:
        return None, ev + " (the build fit)"
    if "Traceback" in text or len(lines) > 3:
        return f"disk full: {len(lines)}-line error with a traceback", ev
    return None, ev


def nested_toml(shape: str) -> Callable[[Lab], Verdict]:
    def fn(lab: Lab) -> Verdict:
        depth = 20000
        if shape == "nested arrays in .repoctx.toml":
            files = {".repoctx.toml": "jobs = " + "[" * depth + "]" * depth + "\n"}
        elif shape == "nested inline tables in .repoctx.toml":
            files = {".repoctx.toml": "x = " + "{a = " * depth + "1" + "}" * depth + "\n"}
        else:
            files = {"pyproject.toml": "[tool.repoctx]\njobs = " + "[" * depth + "]" * depth
                     + "\n"}
        ws = lab.repo("nested", {**files, "pkg/a.py": "A = 1\n"})
        run = lab.run("index", "build", ".", "-q", "--no-embed", cwd=ws)
        lines = [ln for ln in run.result.stderr.splitlines() if ln.strip()]
        ev = f"{run.brief()[:200]}; {len(lines)} stderr lines"
        if "Traceback" in run.text or "RecursionError" in run.text or len(lines) > 3:
            return f"{len(lines)}-line error with a traceback", ev
        return None, ev
    return fn


def big_line(lab: Lab) -> Verdict:
    size_mb = int(os.environ.get("HOSTILE_BIG_MB", "40"))
    ws = lab.repo("bigline", {"pkg/a.py": "A = 1\n"}, commit=False)
    with open(ws / "table.py", "wb") as fh:
        fh.write(b'TABLE = "')
        chunk = b"abcdefgh" * 131072  # 1 MiB
        for _ in range(size_mb):
            fh.write(chunk)
        fh.write(b'"\n')
    run = lab.run("index", "build", ".", "-q", "--no-embed", "--max-file-bytes",
                  str((size_mb + 8) * 1024 * 1024), cwd=ws, timeout=600, watch_memory=True)
    mem = run.result.memory or {}
    peak = max(mem.get("largest_single_process_rss_mb") or 0,
               mem.get("tree_peak_rss_sum_mb") or 0)
    bound = 1536
    ev = (f"{size_mb} MB one-line file: {run.brief()[:160]}; peak RSS {peak} MB "
          f"(tree sum {mem.get('tree_peak_rss_sum_mb')} MB, largest process "
          f"{mem.get('largest_single_process_rss_mb')} MB)")
    if peak > bound:
        return f"parse memory not bounded: {peak:.0f} MB > {bound} MB", ev
    return None, ev


# --------------------------------------------------------------------------- names


def mcp_texts(reply: dict | None) -> Iterator[str]:
    """The text blocks a client shows (structuredContent is JSON data: its strings are escaped
    on the wire, and a consumer reads them as values, not as lines)."""
    if not reply:
        return
    if "error" in reply:
        yield str(reply["error"].get("message", ""))
        return
    for block in reply.get("result", {}).get("content", []):
        if isinstance(block, dict) and block.get("type") == "text":
            yield str(block.get("text", ""))


def names_case(shape: str) -> Callable[[Lab], Verdict]:
    def fn(lab: Lab) -> Verdict:
        forged = f"forged-{marker('n')[-8:]}.py:7"
        sep = {"newline": "\n", "carriage return": "\r", "escape sequence": "\x1b[2K\r"}[shape]
        name = f"ok{sep}{forged}  function  forged.owned.py"
        ws = lab.repo("names", {"pkg/a.py": "A = 1\n"})
        try:
            (ws / name).write_text("def hostile_forger():\n    return 1\n")
        except OSError as exc:
            raise Skip(f"the file system refuses the name: {exc}") from exc
        lab.run("index", "build", ".", "-q", "--no-embed", cwd=ws)
        texts = {"cli symbol": lab.run("symbol", "hostile_forger", cwd=ws).result.stdout,
                 "cli search": lab.run("search", "hostile_forger", cwd=ws).result.stdout}
        client = McpClient(lab, ws, "--no-refresh")
        try:
            client.initialize()
            for i, (tool, args) in enumerate((("find_symbol", {"name": "hostile_forger"}),
                                              ("search_code", {"query": "hostile_forger"}))):
                reply = client.tool(i + 1, tool, args, timeout=30)
                texts[f"mcp {tool}"] = "\n".join(mcp_texts(reply))
        finally:
            client.close()
        bad = []
        for route, text in texts.items():
            if any(ln.startswith(forged) for ln in text.splitlines()) or "\x1b[" in text:
                bad.append(route)
        found = [r for r, t in texts.items() if "hostile_forger" in t]
        ev = f"routes that found the symbol: {found}"
        return (f"a forged result line / raw control characters in: {bad}" if bad else None), ev
    return fn


# --------------------------------------------------------------------------- catalogue


def more_cases() -> list[Case]:
    cases = [Case(f"PID namespace: {s}", "namespaces", pid_namespace(s))
             for s in ("cat /proc/PID/cmdline", "python lists every /proc/*/cmdline")]
    cases.append(Case("IPC namespace: read a host SysV shared-memory segment", "namespaces",
                      sysv_shm))
    cases += [Case(f"sandboxed git: {s}", "namespaces", git_injection(s)) for s in GIT_SHAPES]
    cases += [Case(f"{s.name} to `agent run` leaves its command running", "namespaces",
                   signal_case(s)) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)]
    cases.append(Case("SIGTERM to `agent run` leaves a detached (setsid) grandchild running",
                      "namespaces", signal_case(signal.SIGTERM, detach=True)))
    cases += [Case(f"$HOME default-deny: ~/{r}", "namespaces", home_default_deny(r))
              for r in (".myservice/token", "notes/passwords.txt", ".local/share/app/session.json")]
    cases += [Case(f"search/find through a link: {s}", "links", link_case(s))
              for s in ("settings_link.py -> .env", "keys.py -> deploy/id_rsa",
                        "aws_settings.py -> ~/.aws/credentials",
                        "conf/ (a directory link) -> ~/.aws")]
    cases += [Case(f"MCP read_span on a {s}", "mcp", fifo_case(s))
              for s in ("FIFO named data.txt", "FIFO named pkg/b.py", "link notes.md -> FIFO")]
    cases.append(Case("agent read_span on a FIFO", "mcp", fifo_agent))
    cases += [Case(f"MCP: {s}", "mcp", malformed_case(s)) for s in MALFORMED]
    cases += [Case(f"vector table: {s}", "damage", vector_damage(s))
              for s in ("data files deleted", "data files truncated to half",
                        "data files overwritten with noise", "_versions deleted",
                        "table directory replaced by a plain file",
                        "vectors directory replaced by a plain file")]
    cases.append(Case("disk full (256 KiB tmpfs as the index directory)", "damage", disk_full))
    cases += [Case(f"deeply nested config: {s}", "damage", nested_toml(s))
              for s in ("nested arrays in .repoctx.toml", "nested inline tables in .repoctx.toml",
                        "nested arrays in [tool.repoctx]")]
    cases.append(Case("one-line file with a raised --max-file-bytes (peak RSS)", "damage",
                      big_line))
    cases += [Case(f"file name with a {s} forges result lines", "names", names_case(s))
              for s in ("newline", "carriage return", "escape sequence")]
    return cases
