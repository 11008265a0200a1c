"""Polyglot benchmark: what a graph-only build indexes in real repositories of many languages.

For each ``--repo LANG=PATH`` (and a sample of a docs tree with ``--docs``): a full graph-only
build (no chunks, no vectors, no history, one parser process) into a temp index outside the
tree; files per language and per kind; definitions, references and the share of references
resolved to a target per language (from the SQLite graph); parse CPU seconds per MB per
language (the parse dispatch timed over every indexed file, in-process, single core); and the
share of files skipped by reason — as built now, and recomputed as if only
``--baseline-languages`` existed (files of any other language count as ``no_grammar``), so one
run reports "before" and "after" new languages. Languages whose grammar, query or parser is not
usable yet (a query still being written) are left out of the build, counted as ``no_grammar``,
and listed under ``formats.unavailable``. Prints one JSON object to stdout, progress to stderr.

    .venv/bin/python benchmarks/polyglot.py --repo ruby=/work/polyglot/rack \\
        --repo lua=/work/polyglot/luarocks --docs /path/to/site-packages --docs-limit 2000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` and the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "benchmarks"

import indexer.build as build_mod  # noqa: E402
import indexer.changes as changes_mod  # noqa: E402
from benchmarks._common import bench_tmpdir, git_revision, log  # noqa: E402
from indexer.config import load_config  # noqa: E402
from indexer.graph import store
from indexer.parse import languages as langs  # noqa: E402
from indexer.parse import parser
from indexer.parse import worker as parse_worker
from indexer.parse.discovery import discover  # noqa: E402

#: The languages repoctx parsed before the polyglot work: "before" is recomputed from them.
BASELINE_LANGUAGES = ("python", "javascript", "typescript", "tsx", "go", "rust", "java", "c", "cpp")
#: Docs-tree files sampled by ``--docs`` (by extension), whether or not a parser exists yet.
DOCS_EXTENSIONS = (".rst", ".md", ".markdown", ".txt", ".json", ".yaml", ".yml", ".toml")
INDEXED = ("ok", "syntax_error")
#: Label of files no language or text format claims.
NONE = "(none)"
MB = float(2**20)

ParseFn = Callable[[str, bytes, str, str], object]


# --------------------------------------------------------------------------- what parses now


def _formats() -> dict[str, langs.LanguageSpec]:
    """Every language and text format this checkout declares (FORMATS once text formats exist)."""
    return dict(getattr(langs, "FORMATS", langs.LANGUAGES))


def _probe_path(spec: langs.LanguageSpec) -> str:
    if spec.extensions:
        return f"probe{spec.extensions[0]}"
    return spec.filenames[0] if spec.filenames else "probe"


def _via_source(path: str, data: bytes, language: str, module: str) -> object:
    return parser.parse_source(path, data, language, module)


def _via_content(path: str, data: bytes, language: str, module: str) -> object:
    """The build's per-file dispatch (content classification included), where parse_source does
    not take the format (a text format parsed by another module)."""
    r = parse_worker.parse_content(path, data, len(data), 0, "", language, module, None)
    if r.status not in INDEXED:
        raise ValueError(f"{r.status}: {r.error}".strip(": "))
    return r.rows


DISPATCH: dict[str, ParseFn] = {
    "indexer.parse.parser.parse_source": _via_source,
    "indexer.parse.worker.parse_content": _via_content,
}


def probe_formats() -> dict[str, dict]:
    """For each declared language or text format: whether this checkout parses it (grammar
    wheel, query file, parser all there) and which function parses it. A language whose query
    is still missing would fail the whole build, so the benchmark leaves it out."""
    out: dict[str, dict] = {}
    for name, spec in sorted(_formats().items()):
        path = _probe_path(spec)
        info: dict = {"kind": langs.kind_of(name), "parser": getattr(spec, "parser", "tree-sitter")}
        errors = []
        for label, fn in DISPATCH.items():
            try:
                fn(path, b"x\n", name, "probe")
            except Exception as exc:  # noqa: BLE001 - any failure means "not usable now"
                errors.append(f"{label}: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            info.update(available=True, timed=label)
            break
        else:
            info.update(available=False, errors=errors)
            if spec.query and not _query_exists(spec):
                info["reason"] = f"no query file indexer/queries/{spec.query}"
            elif info["parser"] == "text":
                info["reason"] = "no text-format parser reachable"
            else:
                info["reason"] = "parse failed"
        out[name] = info
    return out


def _query_exists(spec: langs.LanguageSpec) -> bool:
    from importlib import resources

    return resources.files("indexer").joinpath("queries", spec.query).is_file()


@contextmanager
def only_languages(available: set[str]) -> Iterator[None]:
    """Builds see files of unavailable languages as files of no language (``no_grammar``)."""
    real = changes_mod.language_for_file  # the change set names each file's language

    def gated(path: str, abs_path: str) -> str | None:
        lang = real(path, abs_path)
        return lang if lang in available else None

    changes_mod.language_for_file = gated
    try:
        yield
    finally:
        changes_mod.language_for_file = real


# --------------------------------------------------------------------------- one tree


def _share(skipped: dict[str, int], indexed: int) -> dict:
    total = indexed + sum(skipped.values())
    n = sum(skipped.values())
    return {
        "files_seen": total,
        "indexed": indexed,
        "skipped": n,
        "skipped_share": round(n / total, 4) if total else 0.0,
        "by_reason": dict(sorted(skipped.items())),
    }


def skipped_as_if(
    disc_skipped: dict[str, int],
    files: list[tuple[str, str | None]],
    status: dict[str, str],
    languages: set[str],
) -> dict:
    """The skipped share had only ``languages`` existed: discovery's own skips (made before any
    language is looked at) stand; a file of another language is ``no_grammar``; the others keep
    the outcome this build gave them."""
    skipped = Counter(disc_skipped)
    indexed = 0
    for path, lang in files:
        st = status.get(path)
        if lang is None or lang not in languages or st is None:
            skipped["no_grammar"] += 1
        elif st in INDEXED:
            indexed += 1
        else:
            skipped[st.removeprefix("skipped:")] += 1
    return _share(dict(skipped), indexed)


def _graph_counts(db_path: Path) -> dict[str, dict]:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        per: dict[str, dict] = defaultdict(
            lambda: {
                "definitions": 0,
                "references": 0,
                "resolved": 0,
                "ambiguous": 0,
                "references_non_import": 0,
                "resolved_non_import": 0,
                "definitions_by_kind": {},
                "resolution": {},
            }
        )
        for lang, n in conn.execute(
            "SELECT f.language, count(*) FROM symbols s JOIN files f ON f.id = s.file_id "
            "WHERE s.kind != 'module' GROUP BY 1"  # one 'module' row per file is not a definition
        ):
            per[lang]["definitions"] = n
        for lang, kind, n in conn.execute(
            "SELECT f.language, s.kind, count(*) FROM symbols s JOIN files f ON f.id = s.file_id "
            "GROUP BY 1, 2 ORDER BY 3 DESC"
        ):
            per[lang]["definitions_by_kind"][kind] = n
        for lang, n, res, amb, ni, ni_res in conn.execute(
            "SELECT f.language, count(*), count(r.target_id), "
            "coalesce(sum(r.resolution = 'ambiguous'), 0), coalesce(sum(r.kind != 'import'), 0), "
            "coalesce(sum(r.kind != 'import' AND r.target_id IS NOT NULL), 0) "
            "FROM refs r JOIN files f ON f.id = r.file_id GROUP BY 1"
        ):
            per[lang].update(
                references=n,
                resolved=res,
                ambiguous=amb,
                references_non_import=ni,
                resolved_non_import=ni_res,
            )
        for lang, how, n in conn.execute(
            "SELECT f.language, r.resolution, count(*) FROM refs r JOIN files f ON f.id = r.file_id "
            "GROUP BY 1, 2 ORDER BY 3 DESC"
        ):
            per[lang]["resolution"][how] = n
        rows = conn.execute("SELECT path, language, module, status, size FROM files").fetchall()
    finally:
        conn.close()
    for d in per.values():
        d["resolved_pct"] = _pct(d["resolved"], d["references"])
        d["resolved_pct_non_import"] = _pct(d["resolved_non_import"], d["references_non_import"])
    return {"languages": dict(per), "files": rows}


def _pct(a: int, b: int) -> float | None:
    return round(100.0 * a / b, 1) if b else None


def time_parses(root: Path, rows: list, fmt: dict[str, dict]) -> dict[str, dict]:
    """Parse every indexed file again, in-process, with the dispatch the probe found for its
    language: CPU (process_time) and wall seconds per MB."""
    per: dict[str, dict] = defaultdict(
        lambda: {"files": 0, "bytes": 0, "cpu_s": 0.0, "wall_s": 0.0, "errors": 0}
    )
    for path, lang, module, status, _size in rows:
        if status not in INDEXED:
            continue
        fn = DISPATCH[fmt[lang]["timed"]]
        try:
            data = (root / path).read_bytes()
        except OSError:
            continue
        d = per[lang]
        c0, w0 = time.process_time(), time.perf_counter()
        try:
            fn(path, data, lang, module or "")
        except Exception:  # noqa: BLE001 - counted, never fatal
            d["errors"] += 1
        d["cpu_s"] += time.process_time() - c0
        d["wall_s"] += time.perf_counter() - w0
        d["files"] += 1
        d["bytes"] += len(data)
    out = {}
    for lang, d in sorted(per.items()):
        mb = d["bytes"] / MB
        out[lang] = {
            "files": d["files"],
            "bytes": d["bytes"],
            "cpu_seconds": round(d["cpu_s"], 6),
            "wall_seconds": round(d["wall_s"], 6),
            "cpu_s_per_mb": round(d["cpu_s"] / mb, 3) if mb else None,
            "wall_s_per_mb": round(d["wall_s"] / mb, 3) if mb else None,
            "errors": d["errors"],
            "timed": fmt[lang]["timed"],
        }
    return out


def bench_tree(label: str, root: Path, args: argparse.Namespace, fmt: dict[str, dict]) -> dict:
    available = {n for n, i in fmt.items() if i["available"]}
    baseline = set(args.baseline_languages)
    tmp = bench_tmpdir(label.replace("/", "-").replace(":", "-"))
    index_dir = tmp / "index"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPOCTX_")}
    config = load_config(root, env=env, index_dir=index_dir, jobs=args.jobs, history=False)
    log(f"{label}: {root}, index in {index_dir}")
    try:
        c0, w0 = time.process_time(), time.perf_counter()
        with only_languages(available):
            stats = build_mod.build(config, full=True, chunks=False, embed=False)
        build_wall, build_cpu = time.perf_counter() - w0, time.process_time() - c0
        log(
            f"  build: {build_wall:.2f}s, {stats.files_total} files indexed, "
            f"{stats.symbols} definitions, {stats.references} references"
        )
        disc = discover(config)
        graph = _graph_counts(store.graph_file(index_dir) or index_dir / "graph.db")
        rows = graph["files"]
        status = {r[0]: r[3] for r in rows}
        base = os.path.join(str(root), "")
        files = [(f.path, langs.language_for_file(f.path, base + f.path)) for f in disc.files]
        t0 = time.perf_counter()
        timing = time_parses(root, rows, fmt) if args.parse_timing else {}
        if args.parse_timing:
            log(f"  parse timing: {time.perf_counter() - t0:.2f}s")
    finally:
        if args.keep:
            log(f"  kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    by_lang: dict[str, dict] = {}
    outcome: dict[str, Counter] = defaultdict(Counter)
    errors: Counter = Counter()  # indexed files whose tree has ERROR/MISSING nodes
    for path, lang in files:
        key = lang or NONE
        st = status.get(path)
        if lang is not None and lang not in available:
            outcome[key]["unavailable"] += 1
        elif st in INDEXED:
            outcome[key]["indexed"] += 1
            errors[key] += st == "syntax_error"
        elif st is None:
            outcome[key]["no_grammar"] += 1
        else:
            outcome[key][st.removeprefix("skipped:")] += 1
    sizes = {r[0]: r[4] for r in rows}
    for key, c in sorted(outcome.items(), key=lambda kv: -sum(kv[1].values())):
        lang = None if key == NONE else key
        g = graph["languages"].get(key, {})
        by_lang[key] = {
            "kind": langs.kind_of(lang) if lang else None,
            "available": lang in available if lang else False,
            "files": sum(c.values()),
            "indexed": c.get("indexed", 0),
            "syntax_errors": errors[key],
            "outcome": dict(c),
            "mb_indexed": round(
                sum(sizes.get(p, 0) for p, la in files if la == lang and status.get(p) in INDEXED)
                / MB,
                3,
            ),
            **{k: g.get(k, 0) for k in ("definitions", "references", "resolved", "ambiguous")},
            "resolved_pct": g.get("resolved_pct"),
            "resolved_pct_non_import": g.get("resolved_pct_non_import"),
            "resolution": g.get("resolution", {}),
            "definitions_by_kind": g.get("definitions_by_kind", {}),
            "parse": timing.get(key),
        }
    by_kind: dict[str, Counter] = defaultdict(Counter)
    for path, lang in files:
        kind = langs.kind_of(lang) if lang else NONE
        by_kind[kind]["files"] += 1
        by_kind[kind]["indexed"] += status.get(path) in INDEXED
    unclaimed = Counter(
        os.path.splitext(path)[1].lower() or path.rsplit("/", 1)[-1]
        for path, lang in files
        if lang is None
    )
    current = _share(dict(stats.skipped), stats.files_total)
    recomputed = skipped_as_if(disc.skipped, files, status, available)
    return {
        "root": str(root),
        "build": {
            "wall_seconds": round(build_wall, 3),
            "cpu_seconds": round(build_cpu, 3),
            "phases": stats.phases,
            "files_total": stats.files_total,
            "files_with_errors": stats.files_with_errors,
            "lines": stats.lines,
            "symbols": stats.symbols,
            "references": stats.references,
            "resolved": stats.resolved,
            "resolved_pct": round(stats.resolved_pct, 1),
            "ambiguous": stats.ambiguous,
            "failed": dict(list(stats.failed.items())[:10]),
        },
        "files_discovered": len(files),
        "by_language": by_lang,
        "by_kind": {k: dict(v) for k, v in sorted(by_kind.items())},
        # what the files no language claims are (extension, or name without one): top 15
        "unclaimed": dict(unclaimed.most_common(15)),
        "skipped": {
            "current": current,
            "baseline": skipped_as_if(disc.skipped, files, status, baseline),
            # the same rule applied to today's languages: must equal `current`
            "current_recomputed_matches": recomputed == current,
            "examples": {k: list(v) for k, v in disc.skipped_paths.items()},
        },
    }


# --------------------------------------------------------------------------- docs sample


def sample_docs(src: Path, limit: int, exts: tuple[str, ...], dest: Path) -> dict:
    """Copy an evenly spread sample of ``limit`` docs files of ``src`` (by path order) to
    ``dest``, keeping relative paths: a bounded tree to index."""
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", ".git"))
        for name in filenames:
            if os.path.splitext(name)[1].lower() in exts:
                found.append(os.path.relpath(os.path.join(dirpath, name), src))
    found.sort()
    picked = (
        found if len(found) <= limit else [found[i * len(found) // limit] for i in range(limit)]
    )
    for rel in picked:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(src / rel, target)
        except OSError:
            continue
    ext_counts = Counter(os.path.splitext(p)[1].lower() for p in picked)
    return {
        "source": str(src),
        "found": len(found),
        "sampled": len(picked),
        "by_extension": dict(ext_counts.most_common()),
    }


# --------------------------------------------------------------------------- summary


def summarize(trees: dict[str, dict], fmt: dict[str, dict]) -> dict:
    """Per language over every tree, and the skipped shares of all trees together (trees
    whose build failed are left out)."""
    trees = {label: t for label, t in trees.items() if "error" not in t}
    agg: dict[str, Counter] = defaultdict(Counter)
    for tree in trees.values():
        for lang, d in tree["by_language"].items():
            a = agg[lang]
            for k in (
                "files",
                "indexed",
                "syntax_errors",
                "definitions",
                "references",
                "resolved",
                "ambiguous",
            ):
                a[k] += d[k]
            p = d.get("parse") or {}
            a["parse_bytes"] += p.get("bytes", 0)
            a["parse_cpu_s"] += p.get("cpu_seconds", 0.0)
            a["parse_wall_s"] += p.get("wall_seconds", 0.0)
    per_lang = {}
    for lang, a in sorted(agg.items(), key=lambda kv: -kv[1]["files"]):
        mb = a["parse_bytes"] / MB
        info = fmt.get(lang, {})
        per_lang[lang] = {
            "kind": info.get("kind"),
            "available": info.get("available", False),
            "files": a["files"],
            "indexed": a["indexed"],
            "syntax_errors": a["syntax_errors"],
            "definitions": a["definitions"],
            "references": a["references"],
            "resolved_pct": _pct(a["resolved"], a["references"]),
            "mb_parsed": round(mb, 3),
            "cpu_s_per_mb": round(a["parse_cpu_s"] / mb, 3) if mb else None,
            "wall_s_per_mb": round(a["parse_wall_s"] / mb, 3) if mb else None,
        }
    shares = {}
    for which in ("baseline", "current"):
        skipped: Counter = Counter()
        indexed = 0
        for tree in trees.values():
            s = tree["skipped"][which]
            skipped.update(s["by_reason"])
            indexed += s["indexed"]
        shares[which] = _share(dict(skipped), indexed)
    per_tree = {
        label: {
            "files": t["files_discovered"],
            "skipped_share_baseline": t["skipped"]["baseline"]["skipped_share"],
            "skipped_share_current": t["skipped"]["current"]["skipped_share"],
            "resolved_pct": t["build"]["resolved_pct"],
        }
        for label, t in trees.items()
    }
    return {"by_language": per_lang, "skipped_all_trees": shares, "by_tree": per_tree}


# --------------------------------------------------------------------------- main


def _repo_arg(text: str) -> tuple[str, Path]:
    lang, sep, path = text.partition("=")
    if not sep or not lang or not path:
        raise argparse.ArgumentTypeError(f"--repo wants LANG=PATH, got {text!r}")
    return lang, Path(path).expanduser()


def _lang_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--repo",
        type=_repo_arg,
        action="append",
        default=[],
        metavar="LANG=PATH",
        help="a repository tree and its main language (repeatable)",
    )
    ap.add_argument(
        "--docs",
        type=Path,
        default=None,
        help="a docs tree (e.g. site-packages): a sample of its docs/config files",
    )
    ap.add_argument("--docs-limit", type=int, default=2000, help="files sampled from --docs")
    ap.add_argument(
        "--docs-ext",
        type=_lang_list,
        default=list(DOCS_EXTENSIONS),
        help="extensions sampled from --docs (comma-separated)",
    )
    ap.add_argument(
        "--baseline-languages",
        type=_lang_list,
        default=list(BASELINE_LANGUAGES),
        help="the 'before' language set for the recomputed skipped share",
    )
    ap.add_argument(
        "--meta",
        type=Path,
        default=None,
        help="JSON object {tree dir name: {repo, commit, ...}} copied into the output",
    )
    ap.add_argument("--jobs", type=int, default=1, help="parser processes of each build")
    ap.add_argument(
        "--no-parse-timing",
        dest="parse_timing",
        action="store_false",
        help="skip the second, timed parse of every indexed file",
    )
    ap.add_argument("--keep", action="store_true", help="keep the temp dirs (indexes, docs sample)")
    args = ap.parse_args(argv)
    if not args.repo and args.docs is None:
        ap.error("give at least one --repo LANG=PATH or --docs PATH")
    for _, path in args.repo:
        if not path.is_dir():
            ap.error(f"{path} is not a directory")
    return args


def _guarded(label: str, fn, *args) -> dict:
    """One tree's figures; a failure is recorded in its place so the other trees still report."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - a half-written query must not lose the run
        log(f"  {label} failed: {type(exc).__name__}: {exc}")
        return {"error": f"{type(exc).__name__}: {str(exc)[-3000:]}"}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    started = time.time()
    load_before = os.getloadavg()
    fmt = probe_formats()
    unavailable = {n: i.get("reason") for n, i in fmt.items() if not i["available"]}
    log(
        f"formats: {sum(i['available'] for i in fmt.values())} usable, "
        f"unavailable: {', '.join(sorted(unavailable)) or 'none'}"
    )
    meta = json.loads(args.meta.read_text()) if args.meta else {}
    result: dict = {
        "benchmark": "polyglot",
        "repoctx": {"source": str(Path(__file__).resolve().parents[1]), "checkout": git_revision()},
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": sys.version.split()[0],
            "loadavg_before": [round(x, 2) for x in load_before],
        },
        "params": {
            "repos": [f"{lang}={path}" for lang, path in args.repo],
            "docs": str(args.docs) if args.docs else None,
            "docs_limit": args.docs_limit if args.docs else None,
            "baseline_languages": args.baseline_languages,
            "jobs": args.jobs,
            "build": "indexer.build.build(config, full=True, chunks=False, embed=False), "
            "history=False, index in a temp dir (--index-dir equivalent)",
            "parse_timing": args.parse_timing,
        },
        "formats": {
            "available": sorted(n for n, i in fmt.items() if i["available"]),
            "unavailable": unavailable,
            "probe": fmt,
        },
        "trees": {},
    }
    for lang, path in args.repo:
        label = f"{lang}:{path.name}"
        tree = _guarded(label, bench_tree, label, path.resolve(), args, fmt)
        tree["main_language"] = lang
        if path.name in meta:
            tree["source"] = meta[path.name]
        result["trees"][label] = tree
    if args.docs is not None:
        tmp = bench_tmpdir("docs-sample")
        try:
            sample = sample_docs(args.docs, args.docs_limit, tuple(args.docs_ext), tmp / "docs")
            log(f"docs: sampled {sample['sampled']} of {sample['found']} files from {args.docs}")
            tree = _guarded("docs", bench_tree, "docs", tmp / "docs", args, fmt)
            tree["sample"] = sample
            result["trees"]["docs"] = tree
        finally:
            if not args.keep:
                shutil.rmtree(tmp, ignore_errors=True)
    result["summary"] = summarize(result["trees"], fmt)
    result["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    result["total_seconds"] = round(time.time() - started, 1)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
