"""Secret redaction (agent/redact.py) on ordinary code: what it would change (false positives),
and what it costs per KB, on whole files and on tool-result-sized texts.

    .venv/bin/python benchmarks/redaction.py                      # the stdlib, site-packages left out
    .venv/bin/python benchmarks/redaction.py --paths .venv/lib/python3.11/site-packages
    .venv/bin/python benchmarks/redaction.py --all-plugins        # + every detect-secrets plugin,
                                                                  #   line by line (minutes)
    .venv/bin/python benchmarks/redaction.py --tools              # + read tool calls: the whole
                                                                  #   call and redaction's part

``--all-plugins`` runs each detect-secrets 1.5 plugin as `detect-secrets scan` does (every line
through ``analyze_line``) and counts its hits: the numbers behind the plugin set redact.py uses.
Examples are shown redacted. Prints one JSON object to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from _common import STDLIB_ROOT, git_revision, log

from agent import redact

#: Sizes of texts timed like tool results: a 200-line read_span, the 24,000-character cap.
RESULT_SIZES = (8_000, 24_000)
PLANTED = "ghp_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"


def corpus(paths: list[Path]) -> list[tuple[str, str]]:
    files = []
    for root in paths:
        for directory, dirs, names in os.walk(root):
            dirs[:] = sorted(
                d for d in dirs if d != "__pycache__" and (d != "site-packages" or root.name == d)
            )
            for name in sorted(names):
                if name.endswith(".py"):
                    path = os.path.join(directory, name)
                    try:
                        with open(path, encoding="utf-8") as fh:
                            files.append((os.path.relpath(path, root), fh.read()))
                    except (UnicodeDecodeError, OSError):
                        continue
    return files


def scan(files: list[tuple[str, str]], examples: int) -> dict:
    kinds: Counter[str] = Counter()
    changed = 0
    shown: dict[str, list[str]] = {}
    t0, c0 = time.perf_counter(), time.process_time()
    for path, text in files:
        found = redact.find_secrets(text)
        if not found:
            continue
        changed += 1
        for f in found:
            kinds[f.kind] += 1
            if len(shown.setdefault(f.kind, [])) < examples:
                ls = text.rfind("\n", 0, f.start) + 1
                le = text.find("\n", f.end)
                line = redact.redact(text[ls : le if le >= 0 else len(text)]).strip()
                shown[f.kind].append(f"{path}:{text.count(chr(10), 0, f.start) + 1}: {line[:160]}")
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    kb = sum(len(t.encode()) for _, t in files) / 1024
    return {
        "files": len(files),
        "mb": round(kb / 1024, 1),
        "files_changed": changed,
        "findings_by_kind": dict(kinds.most_common()),
        "examples": shown,
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu, 2),
        "cpu_ms_per_kb_whole_files": round(cpu * 1000 / kb, 4),
    }


def result_sized(files: list[tuple[str, str]], samples: int) -> dict:
    """Median cost of redact() on texts of tool-result size, clean and with planted tokens."""
    text = "".join(t for _, t in files[:400])
    out = {}
    for size in RESULT_SIZES:
        step = max(1, (len(text) - size) // samples)
        clean = [text[i * step : i * step + size] for i in range(samples)]
        planted = [_plant(c) for c in clean]
        for label, texts in (("clean", clean), ("with_tokens", planted)):
            wall, cpu = [], []
            for t in texts:
                w0, c0 = time.perf_counter(), time.process_time()
                redact.redact(t)
                wall.append(time.perf_counter() - w0)
                cpu.append(time.process_time() - c0)
            ms, cpu_ms = statistics.median(wall) * 1000, statistics.median(cpu) * 1000
            out[f"{size // 1000}kb_{label}"] = {
                "median_ms": round(ms, 3),
                "median_cpu_ms": round(cpu_ms, 3),
                "cpu_ms_per_kb": round(cpu_ms / (size / 1024), 4),
            }
    return out


def _plant(text: str) -> str:
    lines = text.split("\n")
    for i in range(0, len(lines), 50):
        lines[i] = f"TOKEN = '{PLANTED}'  # {lines[i]}"
    return "\n".join(lines)


#: Packages of the standard library indexed for the tool-call measurement.
TOOL_PACKAGES = ("json", "email", "urllib", "concurrent", "http", "logging")
TOOL_CALLS = (
    ("search_code", {"query": "parse url query string", "mode": "lexical"}),
    ("find_symbol", {"name": "urlsplit"}),
    ("find_references", {"name": "urlsplit"}),
    ("read_span", {"path": "urllib/parse.py", "start_line": 350, "end_line": 549}),
    ("list_dir", {"path": "email", "depth": 2}),
    ("get_context", {"query": "how are url query strings parsed", "budget_tokens": 4000}),
)


def tool_results(runs: int) -> dict:
    """Per read tool: the whole ToolRegistry.call, and the part of it redaction takes (timed on
    the same handler results), on an index of a few stdlib packages."""
    import shutil
    import subprocess

    from _common import bench_tmpdir

    from agent.tools import ALL_TOOLS, ToolContext, ToolRegistry
    from agent.tools.core import redacted
    from agent.tools.schema import with_defaults
    from cli.mcp_server import GET_CONTEXT
    from cli.settings import load_config
    from indexer.build import build

    tmp = bench_tmpdir("redaction")
    try:
        root = tmp / "std"
        for pkg in TOOL_PACKAGES:
            shutil.copytree(STDLIB_ROOT / pkg, root / pkg, ignore=shutil.ignore_patterns("__pycache__"))
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        cfg = load_config(root, env={}, jobs=1)
        build(cfg)
        ctx = ToolContext.create(cfg, granted=("read",))
        reg = ToolRegistry((*ALL_TOOLS, GET_CONTEXT))
        out = {}
        for name, args in TOOL_CALLS:
            tool = reg.get(name)
            assert tool is not None
            calls, cuts, sizes = [], [], []
            for _ in range(runs):
                t0 = time.perf_counter()
                result = reg.call(name, args, ctx)
                calls.append(time.perf_counter() - t0)
                assert result.ok, result.error
                raw = tool.handler(ctx, with_defaults(dict(args), tool.parameters))
                t0 = time.perf_counter()
                redacted(raw)
                cuts.append(time.perf_counter() - t0)
                sizes.append(len(raw.output) + len(json.dumps(raw.data, default=str)))
            out[name] = {
                "call_median_ms": round(statistics.median(calls) * 1000, 3),
                "redaction_median_ms": round(statistics.median(cuts) * 1000, 3),
                "result_kb": round(statistics.median(sizes) / 1024, 1),
            }
            log(f"{name}: {out[name]}")
        ctx.session.close()
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def all_plugins(files: list[tuple[str, str]], examples: int) -> dict:
    """Every detect-secrets plugin, every line through analyze_line (as `detect-secrets scan`)."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.settings import default_settings

    out = {}
    with default_settings():
        for kind, cls in sorted(get_mapping_from_secret_type_to_class().items()):
            plugin = cls()
            hits, hit_files, shown = 0, set(), []
            t0 = time.perf_counter()
            for path, text in files:
                for n, line in enumerate(text.splitlines(), 1):
                    found = plugin.analyze_line(filename=path, line=line, line_number=n)
                    if found:
                        hits += len(found)
                        hit_files.add(path)
                        if len(shown) < examples:
                            shown.append(f"{path}:{n}: {line.strip()[:160]}")
            seconds = time.perf_counter() - t0
            mb = sum(len(t.encode()) for _, t in files) / 2**20
            out[kind] = {
                "hits": hits,
                "files": len(hit_files),
                "ms_per_mb": round(seconds * 1000 / mb),
                "used_by_redact": kind in _used_kinds(),
                "examples": shown,
            }
            log(f"{kind}: {hits} hits in {len(hit_files)} files")
    return out


def _used_kinds() -> set[str]:
    dets, _ = redact.detectors()
    return {d.kind for d in dets} | {"Private Key"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paths", nargs="*", type=Path, default=[STDLIB_ROOT])
    ap.add_argument("--examples", type=int, default=5)
    ap.add_argument("--samples", type=int, default=31)
    ap.add_argument("--all-plugins", action="store_true")
    ap.add_argument("--tools", action="store_true", help="also time read tool calls")
    ap.add_argument("--runs", type=int, default=7, help="calls per tool with --tools")
    args = ap.parse_args()

    t0 = time.perf_counter()
    redact.detectors()
    load_ms = (time.perf_counter() - t0) * 1000
    log("reading the corpus")
    files = corpus(args.paths)
    log(f"{len(files)} files; scanning")
    result = {
        "benchmark": "redaction",
        "revision": git_revision(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "corpus": [str(p) for p in args.paths],
        "detect_secrets_load_ms": round(load_ms, 1),
        "redactor": scan(files, args.examples),
        "result_sized": result_sized(files, args.samples),
    }
    if args.tools:
        log("read tools on an index of a few stdlib packages")
        result["tool_calls"] = tool_results(args.runs)
    if args.all_plugins:
        log("every detect-secrets plugin, line by line")
        result["detect_secrets_plugins"] = all_plugins(files, args.examples)
    json.dump(result, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
