"""Agent-loop overhead: per step, the time spent outside the model — prompt assembly (retrieval
included), re-indexing after writes, tools, trace — and prompt tokens per step against step
number. Runs are driven by scripted models, so the model costs nothing and every remaining
millisecond is the loop's.

Two corpora:

1. fixture: a small package with a planted bug and a pytest suite (real pytest runs), fixed in a
   run of ~25 steps that reads, edits and tests again and again;
2. stdlib: a COPY of the standard library's .py files (site-packages and __pycache__ left out),
   committed to a fresh git repository in a temp dir and indexed without vectors; a run of
   searches, symbol look-ups, reads, references and edits (each edit re-indexes). No test runs
   there: the stdlib's own suite takes an hour.

Per-step overhead = wall time of the step (trace timestamps) minus the model call's latency.
Prints one JSON object to stdout, progress to stderr.

    .venv/bin/python benchmarks/agent_overhead.py                 # fixture + stdlib
    .venv/bin/python benchmarks/agent_overhead.py --skip-stdlib   # fixture only, seconds
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import textwrap
import time
from pathlib import Path

from _common import STDLIB_ROOT, bench_tmpdir, git_revision, log
from tool_latency import copy_stdlib, git_init

from agent.budget import Limits
from agent.loop import RunOptions, run_agent
from agent.models import ScriptedModel
from agent.trace import read_trace
from cli.settings import load_config
from indexer.build import build

TARGET_STEP_MS = 500.0
ALL = frozenset({"read", "write", "execute"})

FIXTURE = {
    ".repoctx.toml": '[agent]\ntest_env = { PYTEST_DISABLE_PLUGIN_AUTOLOAD = "1" }\n',
    "shop/__init__.py": "",
    "shop/cart.py": '''
        """A shopping cart."""
        from shop.tax import compute_tax


        class Cart:
            def __init__(self):
                self.items = []

            def add(self, name, price, qty=1):
                self.items.append((name, price, qty))

            def subtotal(self):
                return sum(price * qty for _, price, qty in self.items)

            def total(self, region="EU"):
                return self.subtotal() + compute_tax(self.subtotal(), region)
        ''',
    "shop/tax.py": '''
        RATES = {"EU": 0.2, "US": 0.07}


        def compute_tax(amount, region):
            """Tax due on ``amount`` in ``region``."""
            return round(amount * RATES.get(region, 0.0) * 10, 2)
        ''',
    "tests/test_cart.py": """
        from shop.cart import Cart


        def test_total_eu():
            c = Cart()
            c.add("book", 10.0, 2)
            assert c.total("EU") == 24.0


        def test_subtotal():
            c = Cart()
            c.add("pen", 1.5, 4)
            assert c.subtotal() == 6.0
        """,
}
PLAN = json.dumps(
    {
        "steps": [
            {"title": "Find why the EU total is wrong", "done_when": "the faulty code is known"},
            {"title": "Fix the tax computation", "done_when": "tests pass", "check": "tests_pass"},
        ]
    }
)


def call(tool: str, **args) -> dict:
    return {"tool_calls": [{"name": tool, "arguments": args}]}


def fixture_script(steps: int) -> list:
    reads = [
        call("find_symbol", name="compute_tax"),
        call("read_span", path="shop/tax.py"),
        call("find_references", name="compute_tax"),
        call("search_code", query="tax rate region"),
        call("read_span", path="shop/cart.py", start_line=1, end_line=20),
        call("list_dir", path="shop"),
    ]
    script: list = [PLAN, call("run_tests")]
    i = 0
    while len(script) < steps - 3:
        script.append(reads[i % len(reads)])
        if i % 5 == 4:  # a harmless edit: re-index and checkpoint on the way
            script.append(
                call(
                    "edit",
                    path="shop/cart.py",
                    old_text="A shopping cart.",
                    new_text=f"A shopping cart (rev {i}).",
                )
                if i == 4
                else call(
                    "edit", path="shop/cart.py", old_text=f"(rev {i - 5}).", new_text=f"(rev {i})."
                )
            )
        i += 1
    script += [
        call("edit", path="shop/tax.py", old_text=" * 10, 2)", new_text=", 2)"),
        call("run_tests"),
        call("finish", summary="Removed the stray factor 10 in compute_tax."),
    ]
    return script


#: (file, a unique line to insert before) for the stdlib edits; each edit re-indexes the file.
EDITS = (
    ("textwrap.py", "def dedent(text):"),
    ("shlex.py", "def split(s, comments=False, posix=True):"),
    ("fnmatch.py", "def fnmatch(name, pat):"),
)


def stdlib_script(steps: int) -> list:
    cycle = [
        lambda i: call(
            "search_code",
            query=["json decoder scanstring", "parse url query", "thread pool shutdown"][i % 3],
        ),
        lambda i: call("find_symbol", name=["JSONDecoder", "urlsplit", "dedent"][i % 3]),
        lambda i: call(
            "read_span",
            path=["json/decoder.py", "urllib/parse.py", "textwrap.py"][i % 3],
            start_line=1 + 40 * (i % 4),
            end_line=80 + 40 * (i % 4),
        ),
        lambda i: call("find_references", name=["urlsplit", "dedent", "JSONDecoder"][i % 3]),
        lambda i: call(
            "edit",
            path=EDITS[(i // 6) % 3][0],
            old_text=EDITS[(i // 6) % 3][1],
            new_text=f"_BENCH_{i} = {i}\n\n\n{EDITS[(i // 6) % 3][1]}",
        ),
        lambda i: call("list_dir", path=["email", "json", "concurrent"][i % 3], depth=2),
    ]
    script: list = [json.dumps({"steps": [{"title": "Survey and edit", "done_when": "done"}]})]
    for i in range(steps - 1):
        script.append(cycle[i % len(cycle)](i))
    script.append(call("finish", summary="done"))
    return script


def measure(root: Path, script: list, budget: int, steps: int) -> dict:
    cfg = load_config(root, env={}, jobs=1)
    model = ScriptedModel(script)
    limits = Limits(max_steps=steps + 5, prompt_budget=budget, max_repeats=5)
    t0 = time.perf_counter()
    report = run_agent(
        cfg,
        "Fix the EU total: the tax is ten times too high.",
        model,
        RunOptions(limits=limits, granted=ALL),
    )
    wall = time.perf_counter() - t0
    events = read_trace(Path(report.trace_path))
    return {"report": report, "events": events, "wall_s": wall}


def analyse(events: list[dict]) -> dict:
    per_step: dict[int, dict] = {}
    failed: list[str] = []
    last_t = None
    for e in events:
        step = e.get("step")
        if e["type"] == "plan":
            last_t = e["t"]
        if step is None or step == 0:
            continue
        s = per_step.setdefault(step, {"step": step, "model_s": 0.0, "tools": [], "reindex_s": 0.0})
        if e["type"] == "context":
            s["assemble_ms"] = e["assemble_ms"]
            s["retrieval_ms"] = e["ms"]
            s["prompt_tokens"] = e["prompt_tokens"]
            s["budget"] = e["budget"]
        elif e["type"] == "model_call":
            s["model_s"] += e["latency_s"]
        elif e["type"] == "tool_call":
            s["tools"].append((e["name"], e["seconds"]))
            if not e["ok"]:
                failed.append(f"{e['name']}: {e['error']}"[:200])
            s["reindex_s"] += (e.get("data") or {}).get("index_seconds") or 0.0
        elif e["type"] == "step":
            s["wall_s"] = e["t"] - last_t if last_t is not None else None
            last_t = e["t"]
    rows = [s for s in per_step.values() if s.get("wall_s") is not None]
    for s in rows:
        s["overhead_ms"] = round((s["wall_s"] - s["model_s"]) * 1000, 1)
        tests = sum(sec for name, sec in s["tools"] if name == "run_tests")
        s["overhead_without_pytest_ms"] = round(s["overhead_ms"] - tests * 1000, 1)
    by_tool: dict[str, list[float]] = {}
    for s in rows:
        for name, sec in s["tools"]:
            by_tool.setdefault(name, []).append(sec * 1000)
    tokens = [s["prompt_tokens"] for s in rows]

    def med(values: list[float]) -> float | None:
        return round(statistics.median(values), 1) if values else None

    edits = [s["reindex_s"] * 1000 for s in rows if s["reindex_s"]]
    return {
        "steps": len(rows),
        "failed_tool_calls": failed,
        "median_overhead_ms": med([s["overhead_ms"] for s in rows]),
        "median_overhead_without_pytest_ms": med([s["overhead_without_pytest_ms"] for s in rows]),
        "max_overhead_without_pytest_ms": max(s["overhead_without_pytest_ms"] for s in rows),
        "median_prompt_assembly_ms": med([s["assemble_ms"] for s in rows]),
        "median_retrieval_ms": med([s["retrieval_ms"] for s in rows]),
        "median_reindex_ms_after_write": med(edits),
        "median_tool_ms": {k: med(v) for k, v in sorted(by_tool.items())},
        "prompt_tokens_by_step": tokens,
        "prompt_tokens": {
            "budget": rows[0]["budget"] if rows else None,
            "min": min(tokens),
            "max": max(tokens),
            "first_5_mean": round(statistics.mean(tokens[:5]), 1),
            "last_5_mean": round(statistics.mean(tokens[-5:]), 1),
            "within_budget": all(s["prompt_tokens"] <= s["budget"] for s in rows),
        },
    }


def write_fixture(root: Path) -> None:
    for rel, text in FIXTURE.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip("\n"))
    git_init(root)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=25, help="steps per run")
    ap.add_argument("--budget", type=int, default=12_000, help="prompt tokens per step")
    ap.add_argument("--source", type=Path, default=STDLIB_ROOT)
    ap.add_argument("--skip-stdlib", action="store_true")
    ap.add_argument(
        "--reuse",
        type=Path,
        default=None,
        help="an indexed stdlib copy from an earlier --keep run (the run edits it)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the temp dirs")
    opts = ap.parse_args()
    os.environ.setdefault("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    tmp = bench_tmpdir("agent")
    out: dict = {
        "benchmark": "agent_overhead",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_avg": os.getloadavg(),
        "git": git_revision(),
        "target_median_step_ms": TARGET_STEP_MS,
    }
    try:
        root = tmp / "fixture"
        write_fixture(root)
        log(f"fixture run, {opts.steps} steps")
        res = measure(root, fixture_script(opts.steps), opts.budget, opts.steps)
        out["fixture"] = {
            "status": res["report"].status,
            "wall_s": round(res["wall_s"], 2),
            "tests_passed": res["report"].tests[-1].passed if res["report"].tests else None,
            **analyse(res["events"]),
        }
        log("fixture run with a small budget (4000): history fills its share, then stays flat")
        small = tmp / "fixture-small"
        write_fixture(small)
        res = measure(small, fixture_script(40), 4000, 40)
        out["fixture_budget_4000"] = {"status": res["report"].status, **analyse(res["events"])}
        if not opts.skip_stdlib:
            root = opts.reuse or tmp / "stdlib"
            if opts.reuse is None:
                log(f"copying {opts.source} (without site-packages) to {root}")
                copy_stdlib(opts.source, root)
                git_init(root)
            files = sum(1 for _ in root.rglob("*.py"))
            cfg = load_config(root, env={})
            t0 = time.perf_counter()
            build(cfg)
            build_s = time.perf_counter() - t0
            log(f"indexed {files} files in {build_s:.1f} s; agent run, {opts.steps} steps")
            res = measure(root, stdlib_script(opts.steps), opts.budget, opts.steps)
            first = next(
                e for e in res["events"] if e["type"] == "notice" and e.get("kind") == "index"
            )
            out["stdlib"] = {
                "files": files,
                "index_build_s": round(build_s, 1),
                "start_reindex": first["message"],
                "status": res["report"].status,
                "wall_s": round(res["wall_s"], 2),
                **analyse(res["events"]),
            }
            med = out["stdlib"]["median_overhead_ms"]
            out["stdlib"]["meets_target"] = med is not None and med < TARGET_STEP_MS
    finally:
        if opts.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    json.dump(out, sys.stdout, indent=2, default=str)
    print()


if __name__ == "__main__":
    main()
