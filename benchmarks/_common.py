"""Shared plumbing for the benchmark scripts: corpora, timed subprocesses with per-process
peak memory, and small statistics helpers. Benchmarks print one JSON object to stdout and
progress to stderr."""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STDLIB_ROOT = Path("/root/.pyenv/versions/3.11.7/lib/python3.11")


@dataclass(frozen=True)
class Corpus:
    name: str
    root: Path
    #: gitignore-style patterns passed to repoctx (REPOCTX_EXCLUDE) and ctags (--exclude).
    exclude: tuple[str, ...] = ()

    def env(self) -> dict[str, str]:
        """The environment for repoctx commands on this corpus. Inherited REPOCTX_* settings
        are dropped so the numbers do not depend on the caller's shell."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("REPOCTX_")}
        if self.exclude:
            env["REPOCTX_EXCLUDE"] = ",".join(self.exclude)
        return with_source(env)

    def ctags_excludes(self) -> list[str]:
        return [f"--exclude={p.rstrip('/')}" for p in self.exclude]


CORPORA = {
    "stdlib": Corpus("stdlib", STDLIB_ROOT, ("site-packages/",)),
    "large": Corpus("large", STDLIB_ROOT),
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


#: Source tree to run repoctx from instead of the installed one (set by ``--src``).
_SRC: Path | None = None


def use_source(src: Path | None) -> None:
    """Run repoctx (CLI and parser workers) from ``src``, e.g. a `git archive HEAD` export,
    instead of the editable install: PYTHONPATH comes before site-packages."""
    global _SRC
    _SRC = src.resolve() if src is not None else None


def source_label() -> str:
    return str(_SRC) if _SRC is not None else f"installed ({REPO})"


#: Bytecode cache for the commands benchmarked. A user's install has .pyc files; with
#: PYTHONDONTWRITEBYTECODE set (as in some sandboxes) or a fresh `--src` tree every command
#: would compile repoctx from source and the start-up time would be measured wrongly.
PYCACHE = Path(tempfile.gettempdir()) / "repoctx-bench-pycache"


def with_source(env: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    if _SRC is not None:
        env["PYTHONPATH"] = str(_SRC)
    return env


def repoctx_command() -> list[str]:
    """The installed console script next to this interpreter (what a user runs), or the same
    entry point run from ``--src``."""
    if _SRC is not None:
        # -P: no cwd on sys.path, which would come before PYTHONPATH and could import the
        # checkout the benchmark runs from instead of ``--src``.
        return [sys.executable, "-P", "-c", "from cli.main import main; main()"]
    script = Path(sys.executable).parent / "repoctx"
    if script.exists():
        return [str(script)]
    found = shutil.which("repoctx")
    if found:
        return [found]
    raise SystemExit("repoctx is not installed in this environment — run `pip install -e .` first.")


_BUILD_HELP: str | None = None


def build_argv(root: Path, index_dir: Path, *, full: bool, embed: bool = False) -> list[str]:
    """`repoctx index build ROOT --index-dir D --json -q [--full]`, plus `--no-embed` unless
    ``embed`` when this repoctx embeds by default (the graph benchmarks leave vectors out)."""
    global _BUILD_HELP
    argv = [*repoctx_command(), "index", "build", str(root), "--index-dir", str(index_dir)]
    argv += ["--json", "-q"]
    if full:
        argv.append("--full")
    if not embed:
        if _BUILD_HELP is None:
            proc = subprocess.run(
                [*repoctx_command(), "index", "build", "--help"],
                capture_output=True,
                text=True,
                env=with_source(dict(os.environ)),
                check=False,
            )
            _BUILD_HELP = proc.stdout
        if "--no-embed" in _BUILD_HELP:
            argv.append("--no-embed")
    return argv


def bench_tmpdir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"repoctx-bench-{prefix}-"))


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 4) if values else None


def rounded(values: list[float], digits: int = 4) -> list[float]:
    return [round(v, digits) for v in values]


def git_revision() -> dict:
    def git(*args: str) -> str:
        proc = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
        return proc.stdout.strip()

    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "-uno"))}


# --------------------------------------------------------------------------- process tree memory


def _status_kb(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) in kB of a live process, None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    rss = hwm = None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
    return (rss, hwm) if rss is not None and hwm is not None else None


def _children_map() -> dict[int, list[int]]:
    """ppid -> pids, from /proc/*/stat (the kernel here has no /proc/PID/task/TID/children)."""
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        # The command name may contain spaces and parentheses: split after the last ')'.
        fields = data[data.rfind(b")") + 2 :].split()
        out.setdefault(int(fields[1]), []).append(int(entry))
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _role(cmdline: str) -> str:
    if "resource_tracker" in cmdline:
        return "resource_tracker"
    if "multiprocessing" in cmdline or "spawn_main" in cmdline or "forkserver" in cmdline:
        return "worker"
    return "other"


@dataclass
class _TreeWatch:
    root_pid: int
    hwm_kb: dict[int, int] = field(default_factory=dict)
    roles: dict[int, str] = field(default_factory=dict)
    tree_peak_kb: int = 0
    samples: int = 0

    def sample(self) -> None:
        kids = _children_map()
        pids, stack = [], [self.root_pid]
        while stack:
            pid = stack.pop()
            pids.append(pid)
            stack.extend(kids.get(pid, ()))
        total = 0
        for pid in pids:
            st = _status_kb(pid)
            if st is None:
                continue
            rss, hwm = st
            total += rss
            self.hwm_kb[pid] = max(self.hwm_kb.get(pid, 0), hwm)
            if self.roles.get(pid, "other") == "other":
                # Re-read until known: between fork and exec a child shows its parent's cmdline.
                self.roles[pid] = "main" if pid == self.root_pid else _role(_cmdline(pid))
        self.tree_peak_kb = max(self.tree_peak_kb, total)
        self.samples += 1


@dataclass(frozen=True)
class CmdResult:
    argv: list[str]
    returncode: int
    wall_s: float
    stdout: str
    stderr: str
    timed_out: bool = False
    memory: dict | None = None
    #: user + system CPU seconds of the command and the children it waited for (workers):
    #: less sensitive than wall time to other load on a shared machine.
    cpu_s: float = 0.0


def run_cmd(
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 3600.0,
    watch_memory: bool = False,
    interval: float = 0.02,
) -> CmdResult:
    """Run ``argv``, timing the whole command (process start to exit). With ``watch_memory``,
    poll the process tree's /proc status every ``interval`` s for per-process peak RSS
    (VmHWM) and the peak of the summed RSS, and take ``wait4``'s ru_maxrss (the largest
    single process in the tree, exact)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            argv, stdout=out, stderr=err, env=env, cwd=cwd, start_new_session=True
        )
        watch = _TreeWatch(proc.pid) if watch_memory else None
        deadline = t0 + timeout
        timed_out = False
        ru = None
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                wall = time.perf_counter() - t0
                break
            if time.perf_counter() > deadline:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                _, status, ru = os.wait4(proc.pid, 0)
                wall = time.perf_counter() - t0
                break
            if watch is not None:
                watch.sample()
                # Peaks (VmHWM) never decrease, so after start-up a slower poll loses little
                # and keeps this scan of /proc from competing with the command measured.
                time.sleep(interval if time.perf_counter() - t0 < 2.0 else 5 * interval)
            else:
                time.sleep(0.002)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    memory = None
    if watch is not None:
        memory = _memory_report(watch, ru.ru_maxrss if ru else 0)
    cpu = ru.ru_utime + ru.ru_stime if ru else 0.0
    return CmdResult(argv, proc.returncode, wall, stdout, stderr, timed_out, memory, cpu)


def _memory_report(watch: _TreeWatch, wait4_max_kb: int) -> dict:
    by_role: dict[str, list[int]] = {}
    for pid, hwm in watch.hwm_kb.items():
        by_role.setdefault(watch.roles.get(pid, "other"), []).append(hwm)
    workers = by_role.get("worker", [])
    main_sampled = max(by_role.get("main", [0]))
    others = [*workers, *by_role.get("resource_tracker", []), *by_role.get("other", [])]
    # ru_maxrss from wait4 is the largest single process of the tree, exact. When it exceeds
    # every child's sampled peak it can only be the main process's (whose last growth before
    # exit the sampler may have missed).
    main_kb = wait4_max_kb if wait4_max_kb > max(others, default=0) else main_sampled
    mb = 1024.0
    return {
        "main_peak_rss_mb": round(main_kb / mb, 1),
        "worker_peak_rss_mb": round(max(workers) / mb, 1) if workers else None,
        "workers_seen": len(workers),
        "worker_peak_rss_mb_each": sorted(round(w / mb, 1) for w in workers),
        "other_children_peak_rss_mb": round(max(by_role.get("other", [0])) / mb, 1),
        "resource_tracker_peak_rss_mb": (
            round(max(by_role["resource_tracker"]) / mb, 1)
            if "resource_tracker" in by_role
            else None
        ),
        "tree_peak_rss_sum_mb": round(watch.tree_peak_kb / mb, 1),
        "largest_single_process_rss_mb": round(wait4_max_kb / mb, 1),
        "samples": watch.samples,
        "method": (
            "Per-process peak = VmHWM from /proc/PID/status polled every 20 ms (100 ms after "
            "2 s) over the process tree (workers = multiprocessing spawn children); "
            "tree_peak_rss_sum = largest sum of VmRSS over the tree at one sample; "
            "largest_single_process = wait4 ru_maxrss (exact)."
        ),
    }
