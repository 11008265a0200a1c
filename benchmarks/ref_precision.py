"""Reference-resolution benchmark: repoctx's resolved call targets against Jedi's `goto`.

Indexes the CPython stdlib (site-packages excluded) into a temp dir, samples call sites with a
fixed seed, asks Jedi where each call's name goes and compares with the edge repoctx stored.
Prints one JSON object to stdout (precision, recall, breakdowns, example disagreements) and
progress to stderr.

    .venv/bin/python benchmarks/ref_precision.py --n 300 --seed 0
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import sqlite3
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from _common import (
    CORPORA,
    bench_tmpdir,
    build_argv,
    git_revision,
    log,
    median,
    run_cmd,
    source_label,
    use_source,
)

#: Path segments whose files are left out of the sample by default: test suites are a third
#: of the stdlib, mostly `self.assert*()` calls, and `lib2to3/tests/data` is deliberately
#: broken code.
TEST_SEGMENTS = frozenset({"test", "tests", "idle_test"})
THRESHOLDS = (0.9, 0.6, 0.0)
TARGET_PRECISION = 0.90
TARGET_RECALL = 0.85
MAX_EXAMPLES = 15
#: Jedi result types that are definitions repoctx can point at. Module-level assignments are
#: too (repoctx indexes them as variables/constants); other statements and params are not.
_DEF_TYPES = frozenset({"function", "class", "module"})


class JediTimeout(BaseException):
    """BaseException so that Jedi's own `except Exception` handlers cannot swallow it."""


@dataclass
class Target:
    path: str  # relative to the corpus root
    qualname: str  # module-qualified, as repoctx stores it
    line: int | None
    kind: str = ""
    via: str = "goto"  # goto | infer | stub | os.path | repoctx

    def label(self) -> str:
        return f"{self.path}:{self.line} {self.qualname}" + (f" ({self.kind})" if self.kind else "")


@dataclass
class Site:
    ref_id: int
    path: str
    line: int
    col: int  # 0-based byte column (tree-sitter)
    name: str
    receiver: str
    resolution: str
    confidence: float
    repoctx: Target | None
    candidates: list[Target] = field(default_factory=list)
    jedi: list[Target] = field(default_factory=list)
    #: in_corpus (goto reached a definition in the corpus) | infer_only (goto reached a local
    #: or attribute assignment, infer a definition) | outside | non_definition | nothing |
    #: timeout | error
    jedi_status: str = ""
    jedi_outside: list[str] = field(default_factory=list)
    jedi_seconds: float = 0.0
    correct: bool = False
    in_candidates: bool = False


# --------------------------------------------------------------------------- index


def build_index(root: Path, index_dir: Path, env: dict, reuse: bool, timeout: float) -> dict:
    full = not (reuse and (index_dir / "graph.db").exists())
    argv = build_argv(root, index_dir, full=full)
    log(f"{'full' if full else 'no-op'} build of {root} into {index_dir}")
    res = run_cmd(argv, env=env, cwd=index_dir.parent, timeout=timeout)
    if res.returncode != 0 or res.timed_out:
        raise SystemExit(f"repoctx index build failed (rc {res.returncode}): {res.stderr[-3000:]}")
    stats = json.loads(res.stdout)
    log(
        f"  {res.wall_s:.1f}s: {stats['files_total']} files, {stats['references']} refs, "
        f"{stats['resolved_pct']}% resolved"
    )
    keys = (
        "files_total",
        "files_parsed",
        "lines",
        "symbols",
        "references",
        "resolved",
        "resolved_pct",
        "ambiguous",
        "files_with_errors",
    )
    return {"full": full, "wall_seconds": round(res.wall_s, 2), **{k: stats[k] for k in keys}}


def _is_test(path: str) -> bool:
    return any(seg in TEST_SEGMENTS for seg in path.split("/")[:-1])


def sample_sites(
    conn: sqlite3.Connection, n: int, seed: int, include_tests: bool
) -> tuple[list[Site], dict]:
    rows = conn.execute(
        """SELECT r.id, f.path, r.line, r.col, r.name, r.receiver, r.resolution, r.confidence,
                  r.target_id, f.status
           FROM refs r JOIN files f ON f.id = r.file_id
           WHERE r.kind = 'call' AND f.language = 'python' AND f.path LIKE '%.py'"""
    ).fetchall()
    excluded = Counter()
    eligible = []
    for row in rows:
        if row[9] != "ok":
            excluded["file_has_syntax_errors"] += 1
        elif not include_tests and _is_test(row[1]):
            excluded["test_dirs"] += 1
        else:
            eligible.append(row)
    # refs ids follow insertion order, which depends on worker scheduling: sort by position.
    eligible.sort(key=lambda r: (r[1], r[2], r[3], r[4]))
    picked = random.Random(seed).sample(eligible, min(n, len(eligible)))
    population = {
        "call_refs": len(rows),
        "excluded": dict(excluded),
        "eligible": len(eligible),
        "eligible_by_resolution": dict(Counter(r[6] for r in eligible).most_common()),
    }
    sites = []
    for ref_id, path, line, col, name, receiver, resolution, conf, target_id, _ in picked:
        site = Site(
            ref_id,
            path,
            line,
            col,
            name,
            receiver,
            resolution,
            conf,
            _symbol(conn, target_id) if target_id is not None else None,
        )
        site.candidates = [
            t
            for (sid,) in conn.execute(
                "SELECT symbol_id FROM ref_candidates WHERE ref_id = ?", [ref_id]
            )
            if (t := _symbol(conn, sid)) is not None
        ]
        sites.append(site)
    sites.sort(key=lambda s: (s.path, s.line, s.col))
    return sites, population


def _symbol(conn: sqlite3.Connection, sym_id: int) -> Target | None:
    row = conn.execute(
        "SELECT f.path, s.qualname, s.start_line, s.kind FROM symbols s JOIN files f ON f.id = s.file_id "
        "WHERE s.id = ?",
        [sym_id],
    ).fetchone()
    return Target(row[0], row[1], row[2], row[3], via="repoctx") if row else None


# --------------------------------------------------------------------------- jedi


class JediOracle:
    def __init__(self, root: Path, conn: sqlite3.Connection, timeout: float) -> None:
        import jedi

        self.jedi = jedi
        self.root = root.resolve()
        self.conn = conn
        self.timeout = timeout
        # sys_path = the corpus only: stdlib modules resolve to their sources here, not to the
        # environment's; what exists only as a stub or a C module lands outside the corpus.
        self.project = jedi.Project(
            path=self.root, sys_path=[str(self.root)], added_sys_path=(), smart_sys_path=False
        )
        self._sources: dict[str, str] = {}
        self._module_files: dict[str, str | None] = {}
        self._symbols: dict[tuple[str, str], tuple[int, str] | None] = {}

    def _source(self, path: str) -> str:
        if path not in self._sources:
            self._sources[path] = (self.root / path).read_bytes().decode("utf-8", "replace")
        return self._sources[path]

    def ask(self, site: Site) -> None:
        code = self._source(site.path)
        # Not splitlines(): it also breaks at form feeds, which the stdlib has and which
        # neither tree-sitter nor Jedi count as line ends.
        lines = code.split("\n")
        line_text = lines[site.line - 1] if site.line <= len(lines) else ""
        # refs store byte columns; Jedi counts characters.
        col = len(line_text.encode("utf-8")[: site.col].decode("utf-8", "replace"))
        t0 = time.perf_counter()
        signal.signal(signal.SIGALRM, _raise_timeout)
        signal.setitimer(signal.ITIMER_REAL, self.timeout)
        try:
            script = self.jedi.Script(code, path=self.root / site.path, project=self.project)
            names = script.goto(site.line, col, follow_imports=True)
            defs = [n for n in names if self._is_definition(n)]
            via = "goto"
            if names and not defs:
                # A local or attribute assignment (`self.f = g`, `f = g` in a function): what
                # is called is the value. Reported apart: `goto` alone is the reference.
                defs = [
                    n
                    for n in script.infer(site.line, col)
                    if n.type in ("function", "class") and n.name != "<lambda>"
                ]
                via = "infer"
        except JediTimeout:
            site.jedi_status = "timeout"
            self.jedi.cache.clear_time_caches(delete_all=True)
            return
        except (
            AttributeError,
            KeyError,
            ValueError,
            TypeError,
            IndexError,
            RecursionError,
            NotImplementedError,
            AssertionError,
        ) as exc:  # Jedi's own failures on odd code
            site.jedi_status = "error"
            site.jedi_outside = [repr(exc)[:200]]
            return
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            site.jedi_seconds = time.perf_counter() - t0
        for n in defs:
            found = self._targets(n, via)
            if found:
                site.jedi.extend(found)
            else:
                site.jedi_outside.append(f"{n.module_name}:{n.full_name or n.name} ({n.type})")
        if site.jedi:
            site.jedi_status = "in_corpus" if via == "goto" else "infer_only"
        elif site.jedi_outside:
            site.jedi_status = "outside"
        elif names:
            site.jedi_status = "non_definition"
            site.jedi_outside = [f"{n.full_name or n.name} ({n.type})" for n in names[:3]]
        else:
            site.jedi_status = "nothing"

    @staticmethod
    def _is_definition(n) -> bool:
        if n.type in _DEF_TYPES:
            return n.name != "<lambda>"
        if n.type == "statement":
            parent = n.parent()
            return parent is not None and parent.type == "module"
        return False

    def _targets(self, n, via: str) -> list[Target]:
        """Map a Jedi name to definitions in the corpus; empty when it lies outside."""
        path = n.module_path
        if path is None:
            return []
        path = Path(path)
        try:
            rel = path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            rel = None
        if rel is not None and rel.split("/", 1)[0] == "site-packages":
            return []
        qualname = n.full_name or f"{n.module_name}.{n.name}"
        if n.type == "module":
            qualname = n.module_name
        if rel is None or rel.endswith(".pyi"):
            # A typeshed stub: the definition is the same qualified name in the module's source.
            src = self._module_file(n.module_name) if path.suffix == ".pyi" else None
            if src is None:
                return []
            hit = self._symbol_in(src, qualname)
            # Stubbed but not defined in the source: a C function (`os.listdir` comes from
            # `posix`) or a protocol only the stub spells out.
            return [Target(src, qualname, hit[0], hit[1], "stub")] if hit else []
        if rel in ("ntpath.py", "posixpath.py") and qualname.startswith("os.path."):
            # Jedi names both modules `os.path` and takes typeshed's Windows branch for
            # `os.path.X` calls; on this (posix) corpus that is posixpath. Accept either.
            out = []
            for alt in dict.fromkeys((rel, "posixpath.py")):
                alt_qual = alt.removesuffix(".py") + qualname.removeprefix("os.path")
                hit = self._symbol_in(alt, alt_qual)
                if hit:
                    out.append(
                        Target(alt, alt_qual, hit[0], hit[1], via if alt == rel else "os.path")
                    )
            return out
        hit = self._symbol_in(rel, qualname)
        return [Target(rel, qualname, hit[0] if hit else n.line, hit[1] if hit else n.type, via)]

    def _module_file(self, module: str) -> str | None:
        if module not in self._module_files:
            rows = [
                r[0] for r in self.conn.execute("SELECT path FROM files WHERE module = ?", [module])
            ]
            rows.sort(key=lambda p: (p.endswith(".pyi"), len(p), p))
            self._module_files[module] = rows[0] if rows else None
        return self._module_files[module]

    def _symbol_in(self, path: str, qualname: str) -> tuple[int, str] | None:
        key = (path, qualname)
        if key not in self._symbols:
            row = self.conn.execute(
                "SELECT s.start_line, s.kind FROM symbols s JOIN files f ON f.id = s.file_id "
                "WHERE f.path = ? AND s.qualname = ? ORDER BY s.start_line LIMIT 1",
                [path, qualname],
            ).fetchone()
            self._symbols[key] = (row[0], row[1]) if row else None
        return self._symbols[key]


def _raise_timeout(signum, frame) -> None:
    raise JediTimeout()


def same_definition(a: Target, b: Target) -> bool:
    """Same file and same definition: equal qualified names, or equal definition lines
    (Jedi's line is the name's, repoctx's the decorator's or `def`'s: allow the gap)."""
    if a.path != b.path:
        return False
    if a.qualname == b.qualname:
        return True
    return a.line is not None and b.line is not None and a.line == b.line


def matches(t: Target | None, jedi_targets: list[Target]) -> bool:
    return t is not None and any(same_definition(t, j) for j in jedi_targets)


# --------------------------------------------------------------------------- report


def _ratio(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def summarise(sites: list[Site]) -> dict:
    scored = [s for s in sites if s.jedi_status == "in_corpus"]
    resolved = [s for s in sites if s.repoctx is not None]
    both = [s for s in scored if s.repoctx is not None]
    correct = [s for s in both if s.correct]
    thresholds = {}
    for th in THRESHOLDS:
        sel = [s for s in both if s.confidence >= th]
        thresholds[f">={th}" if th else "all"] = {
            "both_resolved": len(sel),
            "correct": sum(s.correct for s in sel),
            "precision": _ratio(sum(s.correct for s in sel), len(sel)),
            "recall": _ratio(sum(s.correct for s in sel), len(scored)),
        }
    by_res: dict[str, dict] = {}
    groups: dict[str, list[Site]] = defaultdict(list)
    for s in sites:
        groups[s.resolution].append(s)
    for res, group in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        g_scored = [s for s in group if s.jedi_status == "in_corpus"]
        g_both = [s for s in g_scored if s.repoctx is not None]
        entry = {
            "sampled": len(group),
            "repoctx_resolved": sum(s.repoctx is not None for s in group),
            "jedi_in_corpus": len(g_scored),
            "both_resolved": len(g_both),
            "correct": sum(s.correct for s in g_both),
            "precision": _ratio(sum(s.correct for s in g_both), len(g_both)),
            "jedi_status": dict(Counter(s.jedi_status for s in group).most_common()),
            "median_confidence": median([s.confidence for s in group]),
        }
        if res == "ambiguous":
            entry["jedi_target_among_candidates"] = sum(s.in_candidates for s in g_scored)
        by_res[res] = entry
    infer = [s for s in sites if s.jedi_status == "infer_only"]
    infer_both = [s for s in infer if s.repoctx is not None]
    times = [s.jedi_seconds for s in sites if s.jedi_status not in ("", "timeout")]
    outside_but_resolved = [s for s in resolved if s.jedi_status == "outside"]
    # Strict: Jedi placed the call anywhere (a C function, a parameter, a local) and repoctx's
    # edge must agree; a Python definition shadowed by a C accelerator counts as wrong here.
    answered = [
        s
        for s in resolved
        if s.jedi_status in ("in_corpus", "infer_only", "outside", "non_definition")
    ]
    strict_ok = sum(s.correct for s in answered)
    return {
        "sampled": len(sites),
        "repoctx_resolved": len(resolved),
        "jedi_status": dict(Counter(s.jedi_status for s in sites).most_common()),
        "jedi_in_corpus": len(scored),
        "both_resolved": len(both),
        "correct": len(correct),
        "precision": _ratio(len(correct), len(both)),
        "recall": _ratio(len(correct), len(scored)),
        "precision_strict": {
            "value": _ratio(strict_ok, len(answered)),
            "correct": strict_ok,
            "repoctx_resolved_and_jedi_answered": len(answered),
            "note": "also counts edges where Jedi places the call outside the corpus (C function, "
            "builtin), at a parameter/local, or (infer_only) at another definition",
        },
        "targets": {
            "precision_ge_0_90": {
                "value": _ratio(len(correct), len(both)),
                "target": f">= {TARGET_PRECISION}",
                "pass": bool(both) and len(correct) / len(both) >= TARGET_PRECISION,
            },
            "recall_ge_0_85": {
                "value": _ratio(len(correct), len(scored)),
                "target": f">= {TARGET_RECALL}",
                "pass": bool(scored) and len(correct) / len(scored) >= TARGET_RECALL,
            },
        },
        "by_confidence": thresholds,
        "by_resolution": by_res,
        "infer_only": {
            "note": "goto stopped at a local/attribute assignment or a parameter; infer() found a "
            "definition in the corpus. Not in precision/recall above.",
            "sites": len(infer),
            "repoctx_resolved": len(infer_both),
            "correct": sum(s.correct for s in infer_both),
        },
        "repoctx_resolved_but_jedi_outside_corpus": len(outside_but_resolved),
        "repoctx_resolved_but_jedi_found_nothing": sum(
            s.jedi_status in ("nothing", "non_definition") for s in resolved
        ),
        "jedi_seconds": {
            "median": median(times),
            "p90": round(statistics.quantiles(times, n=10)[-1], 4) if len(times) >= 10 else None,
            "total": round(sum(times), 1),
        },
    }


def _example(s: Site, why: str) -> dict:
    return {
        "why": why,
        "at": f"{s.path}:{s.line}:{s.col}",
        "call": f"{s.receiver + '.' if s.receiver else ''}{s.name}",
        "resolution": s.resolution,
        "confidence": s.confidence,
        "repoctx": s.repoctx.label() if s.repoctx else None,
        "repoctx_candidates": [c.label() for c in s.candidates][:5],
        "jedi": [f"{j.label()} [{j.via}]" for j in s.jedi][:3] or s.jedi_outside[:3],
    }


def disagreements(sites: list[Site], limit: int) -> list[dict]:
    """Examples in three buckets, each spread over resolution kinds: wrong targets (precision),
    edges where Jedi places the call elsewhere (strict precision), unresolved calls Jedi
    resolves in the corpus (recall). A short bucket leaves its share to the others."""
    buckets = [
        (
            "wrong_target",
            [s for s in sites if s.jedi_status == "in_corpus" and s.repoctx and not s.correct],
        ),
        (
            "jedi_elsewhere",
            [
                s
                for s in sites
                if s.repoctx
                and not s.correct
                and s.jedi_status in ("outside", "non_definition", "infer_only")
            ],
        ),
        ("not_resolved", [s for s in sites if s.jedi_status == "in_corpus" and s.repoctx is None]),
    ]
    spread = []
    for why, bucket in buckets:
        by_kind: dict[str, list[Site]] = defaultdict(list)
        for s in bucket:
            by_kind[s.resolution].append(s)
        order: list[Site] = []
        queues = list(by_kind.values())
        while any(queues):
            for q in queues:
                if q:
                    order.append(q.pop(0))
        spread.append((why, order))
    out: list[dict] = []
    share = limit // len(spread)
    for why, order in spread:
        out.extend(_example(s, why) for s in order[:share])
    for why, order in spread:  # hand unused shares to buckets with more examples
        out.extend(_example(s, why) for s in order[share:][: limit - len(out)])
    return out[:limit]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300, help="call sites to sample")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--index-dir",
        type=Path,
        default=None,
        help="where to build the index (default: a fresh temp dir, removed afterwards)",
    )
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="no-op build when --index-dir already holds an index (do not use after "
        "changing the resolver: unchanged files are not re-resolved)",
    )
    ap.add_argument("--include-tests", action="store_true", help="sample test directories too")
    ap.add_argument("--jedi-timeout", type=float, default=60.0, help="seconds per call site")
    ap.add_argument(
        "--details", type=Path, default=None, help="write every site as JSON lines here"
    )
    ap.add_argument(
        "--src",
        type=Path,
        default=None,
        help="run repoctx from this source tree (e.g. a `git archive HEAD` export)",
    )
    args = ap.parse_args()
    use_source(args.src)
    corpus = CORPORA["stdlib"]
    tmp = None
    index_dir = args.index_dir
    if index_dir is None:
        tmp = bench_tmpdir("refprec")
        index_dir = tmp / "index"
    index_dir = index_dir.resolve()
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    try:
        index = build_index(corpus.root, index_dir, corpus.env(), args.reuse, 3600)
        conn = sqlite3.connect(f"file:{index_dir / 'graph.db'}?mode=ro", uri=True)
        sites, population = sample_sites(conn, args.n, args.seed, args.include_tests)
        log(f"sampled {len(sites)} of {population['eligible']} eligible call sites")
        oracle = JediOracle(corpus.root, conn, args.jedi_timeout)
        for i, site in enumerate(sites, 1):
            oracle.ask(site)
            site.correct = matches(site.repoctx, site.jedi)
            site.in_candidates = any(matches(c, site.jedi) for c in site.candidates)
            if i % 25 == 0 or i == len(sites):
                done = [s for s in sites[:i] if s.jedi_status == "in_corpus" and s.repoctx]
                log(
                    f"  jedi {i}/{len(sites)}: {sum(s.correct for s in done)}/{len(done)} agree so far"
                )
        if args.details:
            with args.details.open("w") as fh:
                for s in sites:
                    fh.write(json.dumps(asdict(s)) + "\n")
        summary = summarise(sites)
        conn.close()
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    result = {
        "benchmark": "ref_precision",
        "repoctx": {"source": source_label(), "checkout": git_revision()},
        "params": {
            "n": args.n,
            "seed": args.seed,
            "corpus": str(corpus.root),
            "exclude": list(corpus.exclude),
            "sample_excludes": "files with syntax errors"
            + (
                "" if args.include_tests else "; paths with a test/, tests/ or idle_test/ directory"
            ),
            "jedi": f"jedi {oracle.jedi.__version__}: Script.goto(follow_imports=True) with "
            "Project(sys_path=[corpus root]); non-definition results (local/attribute "
            "assignments, params) followed with Script.infer() and reported apart "
            "(infer_only); stub results mapped to the same qualified name in the "
            "module's source (outside the corpus when the source lacks it, e.g. C "
            "functions); Jedi's os.path.X in ntpath also accepted as posixpath.X",
            "match": "same file and (same qualified name or same definition line)",
            "jedi_timeout_s": args.jedi_timeout,
        },
        "index": index,
        "population": population,
        **summary,
        "disagreements": disagreements(sites, MAX_EXAMPLES),
        "total_seconds": round(time.time() - started, 1),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
