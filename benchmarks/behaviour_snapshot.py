"""The read commands' answers on a fixed corpus, as one JSON document, for before/after diffs.

A restructuring that must not change behaviour runs this once on the old code and once on the
new one and compares the two files (`diff` or `--compare`): the graph's rows, the status, and
the `--json` output of search, context, symbol, refs, callers, callees and `ask` (retrieval only),
with timings taken out.

    python -m benchmarks.behaviour_snapshot --corpus /tmp/corpus --out before.json
    python -m benchmarks.behaviour_snapshot --corpus /tmp/corpus --out after.json --compare before.json

`--code DIR` runs another checkout's CLI (its `cli.main`), so the old code needs no copy of this
script. The corpus (four standard-library packages and a small git history) is made once at
`--corpus`, with fixed commit dates, and indexed afresh (its old index removed) by the code
under test.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
from pathlib import Path

PACKAGES = ("json", "email", "http", "logging")
SYMBOLS = ("JSONDecoder", "Message.get_payload", "HTTPConnection.request", "getLogger", "dump",
           "Handler.emit", "decode")
EDGES = ("JSONDecoder.decode", "HTTPConnection.request", "getLogger", "Message.get_payload")
SEARCHES = ("parse an http response status line", "getLogger", "decode json string escapes",
            "email header folding", "RotatingFileHandler rollover")
TASKS = ("make json.dumps sort nested keys", "HTTP chunked responses are read twice",
         "log records lose their exception text when formatted")
QUESTIONS = ("Where is the status line of an HTTP response parsed?",
             "How does the logging module find a logger by name?")
# keys whose values are clocks, not behaviour
TIMING = re.compile(r"(^|_)(time|times|timings|elapsed|seconds|ms|s|took|latency|duration|"
                    r"started|finished|age|files_per_s|rate|eta|phases)($|_)")
TABLES = ("files", "symbols", "refs", "imports", "chunks")


def make_corpus(corpus: Path) -> None:
    """Copy the packages into a git repository of two commits with fixed dates."""
    if (corpus / ".git").exists():
        return
    corpus.mkdir(parents=True)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    env = {**os.environ, "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z", "GIT_AUTHOR_NAME": "bench",
           "GIT_AUTHOR_EMAIL": "bench@example.com", "GIT_COMMITTER_NAME": "bench",
           "GIT_COMMITTER_EMAIL": "bench@example.com"}

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=corpus, env=env, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    for name in PACKAGES[:2]:
        shutil.copytree(stdlib / name, corpus / name, ignore=shutil.ignore_patterns("__pycache__"))
    git("add", "-A")
    git("commit", "-q", "-m", "json and email parsers")
    for name in PACKAGES[2:]:
        shutil.copytree(stdlib / name, corpus / name, ignore=shutil.ignore_patterns("__pycache__"))
    git("add", "-A")
    git("commit", "-q", "-m", "http client status line parsing and logging handlers")


def strip_timings(value):
    if isinstance(value, dict):
        return {k: strip_timings(v) for k, v in value.items() if not TIMING.search(str(k))}
    if isinstance(value, list):
        return [strip_timings(v) for v in value]
    return value


def run_cli(code: Path, corpus: Path, *args: str):
    env = {**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1",
           "REPOCTX_MODEL": "", "NO_COLOR": "1"}
    env.pop("REPOCTX_INDEX_DIR", None)
    proc = subprocess.run([sys.executable, "-c", "from cli.main import main; main()", *args], cwd=corpus, env=env,
                          capture_output=True, text=True)
    out = proc.stdout
    with contextlib.suppress(ValueError):
        out = json.loads(out)
    return {"rc": proc.returncode, "out": strip_timings(out),
            "err": proc.stderr.strip().splitlines()[-1:] if proc.returncode else []}


def graph_rows(corpus: Path) -> dict:
    """Row-for-row digests of the graph's tables (ids and generations left out)."""
    found = sorted((corpus / ".repoctx").rglob("graph*.db"), key=lambda p: p.stat().st_mtime)
    if not found:
        return {"error": "no graph database under .repoctx"}
    conn = sqlite3.connect(f"file:{found[-1]}?mode=ro", uri=True)
    out = {}
    for table in TABLES:
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        keep = [c for c in cols if c not in ("id", "gen", "mtime_ns") and not c.endswith("_id")]
        rows = sorted(conn.execute(f"SELECT {', '.join(keep)} FROM {table}").fetchall(), key=repr)
        blob = json.dumps(rows, default=str).encode()
        out[table] = {"rows": len(rows), "sha256": hashlib.sha256(blob).hexdigest()[:16]}
    conn.close()
    return out


def snapshot(code: Path, corpus: Path) -> dict:
    shutil.rmtree(corpus / ".repoctx", ignore_errors=True)  # every snapshot indexes afresh
    build = run_cli(code, corpus, "index", "build", ".", "--full", "-q")
    out: dict = {"build_rc": build["rc"], "build_err": build["err"], "graph": graph_rows(corpus),
                 "status": run_cli(code, corpus, "index", "status", ".", "--json")}
    out["symbol"] = {s: run_cli(code, corpus, "symbol", s, "--json") for s in SYMBOLS}
    for cmd in ("refs", "callers", "callees"):
        out[cmd] = {s: run_cli(code, corpus, cmd, s, "--json") for s in EDGES}
    out["search"] = {f"{mode}:{q}": run_cli(code, corpus, "search", q, "-m", mode, "--json")
                     for q in SEARCHES for mode in ("hybrid", "lexical", "semantic")}
    out["context"] = {t: run_cli(code, corpus, "context", t, "--json") for t in TASKS}
    out["ask"] = {q: run_cli(code, corpus, "ask", q, "--json") for q in QUESTIONS}
    return out


def differences(a, b, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in differences(a.get(k), b.get(k), f"{path}/{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {json.dumps(a)[:160]} != {json.dumps(b)[:160]}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--code", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--compare", type=Path, help="an earlier snapshot to diff against")
    args = ap.parse_args()
    make_corpus(args.corpus)
    snap = snapshot(args.code.resolve(), args.corpus.resolve())
    args.out.write_text(json.dumps(snap, indent=1, sort_keys=True) + "\n")
    result = {"out": str(args.out), "commands": sum(len(v) for v in snap.values()
                                                     if isinstance(v, dict) and "rc" not in v)}
    if args.compare:
        diff = differences(json.loads(args.compare.read_text()), snap)
        result.update(identical=not diff, differences=len(diff), first=diff[:20])
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
