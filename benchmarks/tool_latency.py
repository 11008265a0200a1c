"""Agent tool latency on the standard library: each tool's median over N calls, in process,
through `ToolRegistry.call` (validation, permission check and result rendering included), and the
time from an `edit` to the change being found by `search_code`.

The corpus is a COPY of the standard library's .py files (site-packages and __pycache__ left
out), made in a temp directory, committed to a fresh git repository and indexed there: the write
tools edit the copy, never the interpreter's own files. Prints one JSON object to stdout,
progress to stderr.

    .venv/bin/python benchmarks/tool_latency.py --runs 7
    .venv/bin/python benchmarks/tool_latency.py --embed-model hashing   # with vectors
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from _common import STDLIB_ROOT, bench_tmpdir, git_revision, log

from agent.tools import ToolContext, default_registry
from agent.tools.changes import changed_ranges, changed_symbols
from agent.tools.testing import select_tests
from cli.settings import load_config
from indexer.build import build

#: Targets from the issue, in milliseconds.
TARGET_READ_MS = 100.0
TARGET_EDIT_MS = 500.0
READ_TOOLS = ("search_code", "find_symbol", "find_references", "read_span", "list_dir")

SEARCH_QUERIES = ("json decoder scanstring", "parse url query string", "thread pool shutdown")
SYMBOLS = ("JSONDecoder", "urlsplit", "ThreadPoolExecutor.shutdown")
REF_NAMES = ("JSONDecoder", "urlsplit", "dedent")
SPANS = (("json/decoder.py", 1, 200), ("textwrap.py", 100, 250), ("urllib/parse.py", 350, 450))
DIRS = ((".", 1), ("email", 2), ("concurrent", 3))
#: Files the edit benchmark appends a uniquely named function to, in turn.
EDIT_FILES = ("json/decoder.py", "textwrap.py", "urllib/parse.py", "shlex.py", "fnmatch.py")


def copy_stdlib(src: Path, dest: Path) -> int:
    def ignore(directory: str, names: list[str]) -> list[str]:
        return [
            n
            for n in names
            if n in ("site-packages", "__pycache__")
            or (not n.endswith(".py") and os.path.isfile(os.path.join(directory, n)))
        ]

    shutil.copytree(src, dest, ignore=ignore, symlinks=True)
    return sum(1 for _ in dest.rglob("*.py"))


def git_init(root: Path) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "b",
        "GIT_AUTHOR_EMAIL": "b@example.com",
        "GIT_COMMITTER_NAME": "b",
        "GIT_COMMITTER_EMAIL": "b@example.com",
    }
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "copy"]):
        subprocess.run(["git", *args], cwd=root, check=True, env=env, capture_output=True)


def stats_ms(values: list[float]) -> dict:
    ms = [v * 1000 for v in values]
    return {
        "median_ms": round(statistics.median(ms), 2),
        "min_ms": round(min(ms), 2),
        "max_ms": round(max(ms), 2),
        "runs": len(ms),
    }


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7, help="calls per tool (median reported)")
    ap.add_argument("--source", type=Path, default=STDLIB_ROOT, help="tree to copy and index")
    ap.add_argument(
        "--embed-model",
        default=None,
        help="also keep vectors (e.g. `hashing`, or the default model name)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the temp copy")
    opts = ap.parse_args()

    tmp = bench_tmpdir("tools")
    root = tmp / "stdlib"
    try:
        log(f"copying {opts.source} (without site-packages) to {root}")
        files = copy_stdlib(opts.source, root)
        git_init(root)
        cfg = load_config(root, env={}, embed_model=opts.embed_model)
        log(f"indexing {files} files")
        build_s, _ = timed(lambda: build(cfg, embed=opts.embed_model is not None))
        log(f"index built in {build_s:.1f} s")

        reg = default_registry()
        ctx = ToolContext.create(cfg, granted={"read", "write", "execute"}, run_id="bench")
        n = opts.runs

        def call(name: str, args: dict) -> float:
            elapsed, result = timed(lambda: reg.call(name, args, ctx))
            if not result.ok:
                raise SystemExit(f"{name} {args} failed: {result.error}")
            return elapsed

        # Warm up: the first call opens the index (and loads the embedder, if any).
        call("search_code", {"query": "warm up"})
        call("find_symbol", {"name": "warm"})

        times: dict[str, list[float]] = {t: [] for t in READ_TOOLS}
        times["search_code_lexical"] = []
        for i in range(n):
            times["search_code"].append(call("search_code", {"query": SEARCH_QUERIES[i % 3]}))
            times["search_code_lexical"].append(
                call("search_code", {"query": SEARCH_QUERIES[i % 3], "mode": "lexical"})
            )
            times["find_symbol"].append(call("find_symbol", {"name": SYMBOLS[i % 3]}))
            times["find_references"].append(call("find_references", {"name": REF_NAMES[i % 3]}))
            path, start, end = SPANS[i % 3]
            times["read_span"].append(
                call("read_span", {"path": path, "start_line": start, "end_line": end})
            )
            d, depth = DIRS[i % 3]
            times["list_dir"].append(call("list_dir", {"path": d, "depth": depth}))

        log("edits")
        edit_s, searchable_s, reindex_s = [], [], []
        for i in range(n):
            path = EDIT_FILES[i % len(EDIT_FILES)]
            token = f"bench_marker_{i}_{int(time.time() * 1000) % 100000}"
            text = (root / path).read_text()
            last = text.rstrip("\n").splitlines()[-1]
            step = dataclasses.replace(ctx, step=i)
            t0 = time.perf_counter()
            result = reg.call(
                "edit",
                {
                    "path": path,
                    "old_text": last,
                    "new_text": f"{last}\n\n\ndef {token}():\n    return {i}",
                },
                step,
            )
            t_edit = time.perf_counter()
            if not result.ok:
                raise SystemExit(f"edit failed: {result.error}")
            hits = reg.call("search_code", {"query": token, "mode": "lexical", "k": 3}, step)
            t_found = time.perf_counter()
            if not hits.ok or not hits.data["hits"] or hits.data["hits"][0]["path"] != path:
                raise SystemExit(f"the edit to {path} was not searchable: {hits.output[:300]}")
            edit_s.append(t_edit - t0)
            searchable_s.append(t_found - t0)
            reindex_s.append(result.data["index_seconds"])

        create_s = []
        for i in range(n):
            step = dataclasses.replace(ctx, step=n + i)
            create_s.append(
                call_with(
                    reg,
                    "create_file",
                    {
                        "path": f"bench_pkg/mod_{i}.py",
                        "content": f"def created_{i}():\n    return {i}\n",
                    },
                    step,
                )
            )

        rename_s = []
        names = ("py_scanstring", "py_scanstring_renamed")
        for i in range(n):
            step = dataclasses.replace(ctx, step=2 * n + i)
            old, new = names[i % 2], names[(i + 1) % 2]
            rename_s.append(
                call_with(
                    reg,
                    "rename_symbol",
                    {
                        "symbol": f"json.decoder.{old}",
                        "new_name": new,
                    },
                    step,
                )
            )

        select_s = []
        for _ in range(n):

            def select() -> object:
                index = ctx.session.index(cfg)
                ranges, _src = changed_ranges(ctx)
                return select_tests(index, changed_symbols(index, ranges), 4)

            select_s.append(timed(select)[0])

        diff_s = [call("git_diff", {"stat": True}) for _ in range(n)]
        command_s = [call("run_command", {"command": "ls"}) for _ in range(n)]

        tools = {name: stats_ms(v) for name, v in times.items()}
        for name in READ_TOOLS:
            tools[name].update(
                target_ms=TARGET_READ_MS, ok=tools[name]["median_ms"] <= TARGET_READ_MS
            )
        tools["search_code_lexical"].update(
            target_ms=TARGET_READ_MS, ok=tools["search_code_lexical"]["median_ms"] <= TARGET_READ_MS
        )
        tools["edit"] = {
            **stats_ms(edit_s),
            "target_ms": TARGET_EDIT_MS,
            "ok": statistics.median(edit_s) * 1000 <= TARGET_EDIT_MS,
            "note": "includes the syntax gate, checkpoint, write and re-index",
        }
        tools["create_file"] = {
            **stats_ms(create_s),
            "target_ms": TARGET_EDIT_MS,
            "ok": statistics.median(create_s) * 1000 <= TARGET_EDIT_MS,
        }
        tools["rename_symbol"] = {
            **stats_ms(rename_s),
            "note": "py_scanstring back and forth, verification included",
        }
        tools["run_tests_selection"] = {
            **stats_ms(select_s),
            "note": "changed ranges + changed symbols + graph selection, pytest not run",
        }
        tools["git_diff"] = stats_ms(diff_s)
        tools["run_command"] = {**stats_ms(command_s), "note": "`ls` through the runner"}
        out = {
            "benchmark": "tool_latency",
            "corpus": {"source": str(opts.source), "files": files, "copy": str(root)},
            "embed_model": opts.embed_model,
            "index_build_s": round(build_s, 2),
            "runs": n,
            "tools": tools,
            "edit_to_searchable": {
                **stats_ms(searchable_s),
                "reindex_median_ms": round(statistics.median(reindex_s) * 1000, 2),
                "note": "edit call start until search_code returns the new function",
            },
            "targets_met": all(t.get("ok", True) for t in tools.values()),
            "machine": {
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
            },
            "revision": git_revision(),
        }
        ctx.session.close()
        json.dump(out, sys.stdout, indent=2)
        print()
    finally:
        if opts.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def call_with(reg, name: str, args: dict, ctx: ToolContext) -> float:
    elapsed, result = timed(lambda: reg.call(name, args, ctx))
    if not result.ok:
        raise SystemExit(f"{name} {args} failed: {result.error}")
    return elapsed


if __name__ == "__main__":
    main()
