"""MCP round-trip latency: `repoctx serve --mcp` over stdio, driven by the MCP SDK's client.

Indexes the CPython stdlib (site-packages excluded) into a temp `--index-dir` (graph and
lexical index only unless `--embed`), starts the server as an MCP client would, and times
every tool: the client-side round trip of `tools/call`, including the server's freshness
check (a sync marker through the file watcher) before each answer. Prints one JSON object to
stdout and progress to stderr.

    .venv/bin/python benchmarks/mcp_latency.py --n 40
    .venv/bin/python benchmarks/mcp_latency.py --index-dir /tmp/stdlib-index   # reuse an index
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import anyio
from _common import (
    CORPORA,
    bench_tmpdir,
    build_argv,
    git_revision,
    log,
    repoctx_command,
    run_cmd,
    source_label,
    use_source,
)
from mcp import Client, StdioServerParameters

#: p50 target for the interactive tools, in milliseconds.
TARGET_P50_MS = 150.0
TARGETED = ("find_symbol", "search_code")

#: Arguments cycled through per tool: realistic questions about the stdlib.
CALLS: dict[str, list[dict]] = {
    "find_symbol": [
        {"name": "OrderedDict"},
        {"name": "json.loads"},
        {"name": "urlparse"},
        {"name": "HTTPConnection.request"},
        {"name": "Path.resolve"},
        {"name": "ThreadPoolExecutor"},
        {"name": "dataclass"},
        {"name": "getLogger"},
        {"name": "ArgumentParser.parse_args"},
        {"name": "TemporaryDirectory"},
        {"name": "shutil.rmtree"},
        {"name": "Decimal.quantize"},
    ],
    "search_code": [
        {"query": "parse a JSON document from a string"},
        {"query": "http request headers"},
        {"query": "thread pool executor shutdown"},
        {"query": "quote url path segments"},
        {"query": "read members of a zip archive"},
        {"query": "temporary directory cleanup"},
        {"query": "SSLContext load_cert_chain"},
        {"query": "copy file metadata permissions"},
        {"query": "parse command line arguments subcommands"},
        {"query": "decimal rounding modes"},
    ],
    "find_references": [
        {"name": "urlparse"},
        {"name": "getLogger"},
        {"name": "OrderedDict"},
        {"name": "shutil.rmtree"},
        {"name": "TemporaryDirectory"},
        {"name": "json.dumps"},
    ],
    "read_span": [
        {"path": "json/__init__.py", "start_line": 299, "end_line": 360},
        {"path": "urllib/parse.py", "start_line": 374, "end_line": 420},
        {"path": "shutil.py", "start_line": 1, "end_line": 200},
        {"path": "collections/__init__.py", "start_line": 80, "end_line": 140},
    ],
    "get_context": [
        {
            "query": "How does json.loads decode a string into Python objects?",
            "budget_tokens": 4000,
        },
        {"query": "urlparse splits the netloc wrongly for IPv6 addresses", "budget_tokens": 4000},
        {"query": "TemporaryDirectory cleanup fails on read-only files", "budget_tokens": 4000},
    ],
    "index_status": [{}],
}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary(ms: list[float], errors: int, chars: list[int]) -> dict:
    return {
        "n": len(ms),
        "p50_ms": round(pct(ms, 0.5), 2),
        "p95_ms": round(pct(ms, 0.95), 2),
        "mean_ms": round(statistics.fmean(ms), 2),
        "max_ms": round(max(ms), 2),
        "errors": errors,
        "median_answer_chars": int(statistics.median(chars)) if chars else 0,
    }


async def measure(
    argv: list[str], env: dict[str, str], n: int, warmup: int, tools: list[str]
) -> dict:
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env)
    t0 = time.perf_counter()
    async with Client(params, read_timeout_seconds=600) as client:
        connect_s = time.perf_counter() - t0
        listed = [t.name for t in (await client.list_tools()).tools]
        t1 = time.perf_counter()
        first = await client.call_tool("find_symbol", {"name": "OrderedDict"})
        first_s = time.perf_counter() - t1
        log(
            f"connected in {connect_s:.2f}s, first answer in {first_s:.2f}s "
            f"({'error' if first.is_error else 'ok'})"
        )
        out: dict[str, dict] = {}
        generation = (first.structured_content or {}).get("freshness", {}).get("generation")
        for tool in tools:
            cycle = itertools.cycle(CALLS[tool])
            for _ in range(warmup):
                await client.call_tool(tool, next(cycle))
            ms: list[float] = []
            chars: list[int] = []
            errors = 0
            samples: dict[str, str] = {}
            count = n if tool != "index_status" else max(3, n // 5)
            for _ in range(count):
                args = next(cycle)
                t = time.perf_counter()
                res = await client.call_tool(tool, args)
                ms.append((time.perf_counter() - t) * 1000)
                text = "\n".join(c.text for c in res.content if c.type == "text")
                chars.append(len(text))
                if res.is_error:
                    errors += 1
                    samples.setdefault("error", text[:300])
            out[tool] = summary(ms, errors, chars) | (
                {"sample_error": samples["error"]} if samples else {}
            )
            log(
                f"{tool}: p50 {out[tool]['p50_ms']} ms, p95 {out[tool]['p95_ms']} ms"
                + (f", {errors} errors" if errors else "")
            )
        status = await client.call_tool("index_status", {})
        server_state = (status.structured_content or {}).get("server")
    return {
        "server_state": server_state,
        "connect_s": round(connect_s, 3),
        "first_answer_s": round(first_s, 3),
        "tools_listed": listed,
        "generation": generation,
        "tools": out,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", choices=sorted(CORPORA), default="stdlib")
    ap.add_argument("--n", type=int, default=40, help="timed calls per tool")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls per tool first")
    ap.add_argument("--tools", default=",".join(CALLS), help="comma-separated tool names")
    ap.add_argument(
        "--embed",
        action="store_true",
        help="build vectors too (slow on CPU); default graph + lexical only",
    )
    ap.add_argument(
        "--index-dir",
        type=Path,
        default=None,
        help="use (and keep) this index directory; built when it has no index",
    )
    ap.add_argument("--keep", action="store_true", help="keep the temp index directory")
    ap.add_argument("--src", type=Path, default=None, help="run repoctx from this source tree")
    args = ap.parse_args()
    use_source(args.src)
    corpus = CORPORA[args.corpus]
    env = corpus.env()
    tools = [t for t in args.tools.split(",") if t]
    unknown = set(tools) - set(CALLS)
    if unknown:
        raise SystemExit(f"unknown tools {sorted(unknown)}; choose from {', '.join(CALLS)}")

    index_dir = args.index_dir or bench_tmpdir("mcp")
    build_info: dict = {"reused": True}
    try:
        if not (index_dir / "graph.db").exists():
            log(
                f"indexing {corpus.root} into {index_dir} ({'with' if args.embed else 'no'} "
                "vectors)"
            )
            res = run_cmd(
                build_argv(corpus.root, index_dir, full=True, embed=args.embed),
                env=env,
                timeout=3600,
            )
            if res.returncode != 0:
                raise SystemExit(f"index build failed: {res.stderr[-2000:]}")
            stats = json.loads(res.stdout)
            build_info = {
                "reused": False,
                "seconds": round(res.wall_s, 2),
                "files": stats["files_total"],
                "symbols": stats["symbols"],
                "references": stats["references"],
            }
            log(f"built in {res.wall_s:.1f}s: {stats['files_total']} files")
        argv = [
            *repoctx_command(),
            "serve",
            "--mcp",
            str(corpus.root),
            "--index-dir",
            str(index_dir),
        ]
        result = anyio.run(measure, argv, env, args.n, args.warmup, tools)
    finally:
        if args.index_dir is None and not args.keep:
            shutil.rmtree(index_dir, ignore_errors=True)

    met = {
        t: result["tools"][t]["p50_ms"] < TARGET_P50_MS for t in TARGETED if t in result["tools"]
    }
    print(
        json.dumps(
            {
                "benchmark": "mcp_latency",
                "transport": "stdio",
                "corpus": {
                    "name": corpus.name,
                    "root": str(corpus.root),
                    "exclude": list(corpus.exclude),
                },
                "vectors": args.embed,
                "index": build_info,
                "calls_per_tool": args.n,
                "warmup_per_tool": args.warmup,
                **result,
                "target": {"p50_ms": TARGET_P50_MS, "tools": list(TARGETED), "met": met},
                "machine": {
                    "cpus": os.cpu_count(),
                    "loadavg_1m": round(os.getloadavg()[0], 2),
                    "python": sys.version.split()[0],
                },
                "repoctx": source_label(),
                "git": git_revision(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
