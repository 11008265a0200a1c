"""What the command sandbox costs (agent/sandbox.py).

1. Per command: the median wall time of ``agent.runner.run_command`` for `true` and for
   `python -c pass`, unsandboxed and in each sandbox mode (Landlock + mount/net namespaces, the
   user-namespace path, Landlock alone, namespaces without the network namespace), in the same
   process, runs interleaved so load drifts hit every mode alike. Also the two parts on their
   own: preparing in the parent (``sandbox.prepare``) and entering the sandbox in the forked
   child (timed inside the child, before it exits).
2. The workspace walk that finds the secret files and `.git` directories to hide
   (``sandbox_walk.secrets_in``) on a large tree (by default the standard library directory with its
   site-packages, read in place): first walk, then the cached walk every later command pays.

Prints one JSON object to stdout, progress to stderr.

    .venv/bin/python benchmarks/sandbox_overhead.py --runs 50
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from _common import STDLIB_ROOT, log

from agent import landlock, sandbox, sandbox_walk
from agent.runner import run_command
from agent.sandbox import SandboxPolicy
from agent.workspace import Workspace


def median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


def per_command(runs: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="repoctx-sbx-bench-") as tmp:
        ws = Path(tmp)
        (ws / "pkg").mkdir()
        (ws / "pkg" / "a.py").write_text("x = 1\n")
        (ws / ".env").write_text("TOKEN=x\n")
        base = SandboxPolicy(ws, is_secret=Workspace(ws).is_secret)
        modes: dict[str, SandboxPolicy | None] = {
            "unsandboxed": None,
            "landlock+mountns+netns": base,
            "landlock+userns+mountns+netns": replace(base, userns="always"),
            "landlock+mountns (network on)": replace(base, network=True),
            "landlock only": replace(base, use_namespaces=False),
        }
        commands = {"true": ["true"], "python -c pass": [sys.executable, "-c", "pass"]}
        out: dict[str, object] = {}
        for name, argv in commands.items():
            samples: dict[str, list[float]] = {m: [] for m in modes}
            layers: dict[str, list[str]] = {}
            for mode, policy in modes.items():  # warm the caches
                layers[mode] = list(run_command(argv, ws, sandbox=policy).sandbox)
            for i in range(runs):
                for mode, policy in modes.items():
                    t0 = time.perf_counter()
                    res = run_command(argv, ws, sandbox=policy)
                    samples[mode].append(time.perf_counter() - t0)
                    if res.exit_code != 0:
                        raise SystemExit(f"{mode}: {name} exited {res.exit_code}: {res.stderr}")
                if i % 10 == 9:
                    log(f"{name}: {i + 1}/{runs}")
            medians = {m: median_ms(s) for m, s in samples.items()}
            out[name] = {
                "median_ms": medians,
                "overhead_ms": {
                    m: round(v - medians["unsandboxed"], 2)
                    for m, v in medians.items()
                    if m != "unsandboxed"
                },
                "layers": layers,
            }
        out["prepare_ms"] = {}
        out["child_setup_ms"] = {}
        for mode, policy in modes.items():
            if policy is None:
                continue
            prep, setup = [], []
            for _ in range(runs):
                t0 = time.perf_counter()
                prepared = sandbox.prepare(policy, ws, dict(os.environ))
                prep.append(time.perf_counter() - t0)
                setup.append(child_setup(prepared))
                prepared.cleanup()
            out["prepare_ms"][mode] = median_ms(prep)
            out["child_setup_ms"][mode] = median_ms(setup)
        return out


def child_setup(prepared: sandbox.Prepared) -> float:
    """Seconds the forked child takes to enter the sandbox (it reports them through a pipe)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            t0 = time.perf_counter()
            assert prepared.child is not None
            prepared.child()
            os.write(write, repr(time.perf_counter() - t0).encode())
        except BaseException:
            code = 1
        os._exit(code)
    os.close(write)
    data = os.read(read, 64)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise SystemExit(f"the child could not enter the sandbox: {prepared.failure()}")
    return float(data)


def walk(root: Path, repeats: int) -> dict[str, object]:
    ws = Workspace(root)
    t0 = time.perf_counter()
    hits = sandbox_walk.secrets_in(str(root), ws.is_secret)
    first = time.perf_counter() - t0
    cached = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sandbox_walk.secrets_in(str(root), ws.is_secret)
        cached.append(time.perf_counter() - t0)
    dirs = files = 0
    for _, _dirnames, filenames in os.walk(root):
        dirs += 1
        files += len(filenames)
    return {
        "root": str(root),
        "dirs": dirs,
        "files": files,
        "secrets_and_git_found": len(hits),
        "first_walk_ms": round(first * 1000, 1),
        "cached_walk_ms": median_ms(cached),
        "pruned": sorted(sandbox_walk.PRUNED_DIRS) + ["virtualenvs (pyvenv.cfg)"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--tree", type=Path, default=STDLIB_ROOT)
    parser.add_argument("--skip-walk", action="store_true")
    args = parser.parse_args()
    result: dict[str, object] = {
        "machine": {
            "kernel": platform.release(),
            "landlock_abi": landlock.abi_version(),
            "euid": os.geteuid(),
            "cpus": os.cpu_count(),
            "load_avg": os.getloadavg(),
        },
        "runs": args.runs,
    }
    log("per-command overhead")
    result["per_command"] = per_command(args.runs)
    if not args.skip_walk:
        log(f"workspace walk of {args.tree}")
        result["walk"] = walk(args.tree, repeats=5)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
