"""`run_tests`: the tests that reach the changed code first, then the whole suite; failures come
back as records (test id, location, assertion message, short trace) parsed from JUnit XML."""

from __future__ import annotations

import os
import re
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from indexer import Index

from ..errors import AgentError
from ..runner import CommandResult, run_command
from ..safe_fs import Beneath
from .changes import ChangedSymbol, changed_ranges, changed_symbols
from .command_tools import sandbox_policy
from .core import Tool, ToolContext, ToolResult, fail, ok

#: Lines of traceback kept per failure.
TRACE_LINES = 25
_LOCATION = re.compile(r"^(?P<path>[^\s:][^:\n]*\.py):(?P<line>\d+):", re.M)
_FAILED_LINE = re.compile(r"^(?:FAILED|ERROR) (?P<id>\S+)(?: - (?P<msg>.*))?$", re.M)


# -- selection ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Sym:
    id: int
    kind: str
    name: str
    qualname: str
    parent_id: int | None
    path: str
    module: str
    signature: str


def is_test_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def node_id(sym: _Sym) -> str:
    local = sym.qualname
    if sym.module and local.startswith(sym.module + "."):
        local = local[len(sym.module) + 1 :]
    return f"{sym.path}::{local.replace('.', '::')}"


def _load(index: Index, ids: Iterable[int]) -> dict[int, _Sym]:
    return {row[0]: _Sym(*row) for row in index.graph.symbol_rows(ids)}


def _all_tests(index: Index) -> dict[int, _Sym]:
    """Every pytest-style test function of the index: test_* functions at module level or in
    Test* classes of test_*.py / *_test.py files."""
    rows = index.graph.python_functions_named_test()
    syms = [_Sym(*r) for r in rows if is_test_file(r[5])]
    parents = _load(index, {s.parent_id for s in syms if s.parent_id is not None})
    tests = {}
    for s in syms:
        parent = parents.get(s.parent_id) if s.parent_id is not None else None
        if (
            parent is None
            and s.parent_id is None
            or (parent is not None and parent.kind == "class" and parent.name.startswith("Test"))
        ):
            tests[s.id] = s
    return tests


@dataclass(frozen=True)
class Selection:
    tests: tuple[str, ...]
    total_tests: int
    changed: tuple[ChangedSymbol, ...]
    source: str


def select_tests(
    index: Index, changed: Sequence[ChangedSymbol], hops: int
) -> tuple[list[str], int]:
    """Test node ids whose callees, followed up to ``hops`` references back from the changed
    symbols, include a changed symbol; and how many tests the index knows."""
    tests = _all_tests(index)
    frontier = {c.id for c in changed}
    # A changed method is reached through its class too: calls on instances rarely resolve.
    frontier |= {c.parent_id for c in changed if c.kind == "method" and c.parent_id}
    seen = set(frontier)
    for _ in range(hops):
        if not frontier:
            break
        fresh = index.graph.referrer_ids(frontier) - seen
        seen |= fresh
        # A module-level use (an import) reaches everything in the module: stop there.
        kinds = _load(index, fresh)
        frontier = {i for i in fresh if i in kinds and kinds[i].kind != "module"}
    reached = _load(index, seen)
    selected = {i for i in seen if i in tests}
    # A reached Test* class (it inherits or uses a changed name) runs all its tests.
    classes = {i for i, s in reached.items() if s.kind == "class"}
    selected |= {i for i, t in tests.items() if t.parent_id in classes}
    # Fixtures: a reached non-test function in a test file or conftest.py, named as a
    # parameter of a test.
    fixtures = {
        s.name
        for s in reached.values()
        if s.kind == "function"
        and s.id not in tests
        and (is_test_file(s.path) or PurePosixPath(s.path).name == "conftest.py")
    }
    if fixtures:
        for i, t in tests.items():
            params = set(re.findall(r"[A-Za-z_]\w*", t.signature.split("(", 1)[-1]))
            if params & fixtures:
                selected.add(i)
    return sorted(node_id(tests[i]) for i in selected), len(tests)


# -- running pytest -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    test_id: str
    outcome: str  # failed | error
    location: str
    message: str
    trace: str


@dataclass(frozen=True)
class TestRun:
    scope: str  # selected | full | given
    argv: tuple[str, ...]
    exit_code: int
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    duration_s: float = 0.0
    timed_out: bool = False
    failures: tuple[Failure, ...] = ()
    #: Output tail when the XML report is missing (pytest crashed or is not installed).
    output: str = ""
    test_ids: tuple[str, ...] = field(default=(), repr=False)
    #: Sandbox layers the run had (CommandResult.sandbox), and a one-time warning about them.
    sandbox: tuple[str, ...] = ()
    sandbox_warning: str = ""

    __test__ = False  # not a pytest test class

    @property
    def ok(self) -> bool:
        # 5: nothing collected — nothing failed either.
        return self.exit_code in (0, 5) and not self.timed_out

    def summary(self) -> str:
        parts = [
            f"{n} {w}"
            for n, w in (
                (self.passed, "passed"),
                (self.failed, "failed"),
                (self.errors, "errors"),
                (self.skipped, "skipped"),
            )
            if n
        ]
        state = "PASSED" if self.ok else ("TIMED OUT" if self.timed_out else "FAILED")
        return f"{state} — {', '.join(parts) or 'no tests ran'} in {self.duration_s:.1f} s"


def pytest_argv(ctx: ToolContext) -> list[str]:
    if ctx.agent.test_command:
        return list(ctx.agent.test_command)
    venv_python = ctx.workspace.root / ".venv" / "bin" / "python"
    python = str(venv_python) if venv_python.exists() else sys.executable
    return [python, "-m", "pytest"]


def run_pytest(ctx: ToolContext, node_ids: Sequence[str], scope: str, timeout_s: float) -> TestRun:
    with tempfile.TemporaryDirectory(prefix="repoctx-junit-") as tmp:
        xml_path = Path(tmp) / "report.xml"
        argv = [
            *pytest_argv(ctx),
            "-q",
            "-rfE",
            "--tb=short",
            "-p",
            "no:cacheprovider",
            "-o",
            "junit_family=xunit1",
            f"--junitxml={xml_path}",
            *node_ids,
        ]
        res = run_command(
            argv,
            ctx.workspace.root,
            timeout_s=timeout_s,
            max_output_bytes=ctx.agent.max_output_bytes,
            env_allow=ctx.agent.env_allow,
            allowlist=ctx.agent.allow_commands,
            # Keep the tree clean: no __pycache__ directories from the test run.
            extra_env={**dict(ctx.agent.test_env), "PYTHONDONTWRITEBYTECODE": "1"},
            # The report directory is the one place outside the workspace pytest may write.
            sandbox=sandbox_policy(ctx, write=(tmp,)),
        )
        report = _read_report(tmp)
    return parse_run(scope, res, report, tuple(node_ids))


#: A JUnit report larger than this is not read (the output summary still tells the result).
MAX_REPORT_BYTES = 32 << 20


def _read_report(tmp: str) -> bytes | None:
    """The JUnit report pytest wrote, or None. The tests run the repository's code, which may
    leave a link to a file in $HOME, a FIFO or a device in the report's place: it is opened with
    no link followed and read only when it is a regular file, at once either way."""
    try:
        with Beneath(tmp) as base:
            data = base.read_bytes("report.xml", MAX_REPORT_BYTES)
    except (OSError, AgentError):
        return None
    return None if len(data) > MAX_REPORT_BYTES else data


def parse_run(
    scope: str, res: CommandResult, report: bytes | None, node_ids: tuple[str, ...] = ()
) -> TestRun:
    base = {
        "scope": scope,
        "argv": res.argv,
        "exit_code": res.exit_code,
        "duration_s": round(res.duration_s, 3),
        "timed_out": res.timed_out,
        "test_ids": node_ids,
        "sandbox": res.sandbox,
        "sandbox_warning": res.sandbox_warning,
    }
    tail = (res.stdout + ("\n" + res.stderr if res.stderr else ""))[-3000:]
    if report is None:
        failures = tuple(
            Failure(m["id"], "failed", m["id"].split("::")[0], (m["msg"] or "").strip(), "")
            for m in _FAILED_LINE.finditer(res.stdout)
        )
        return TestRun(**base, failed=len(failures), failures=failures, output=tail)
    try:
        root = ET.fromstring(report)
    except ET.ParseError:
        return TestRun(**base, output=tail)
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failures: list[Failure] = []
    for case in root.iter("testcase"):
        test_id = _case_id(case)
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed" if child.tag == "failure" else "errors"
                failures.append(_failure(test_id, child, case))
                break
            if child.tag == "skipped":
                outcome = "skipped"
        counts[outcome] += 1
    output = tail if res.exit_code not in (0, 1) or res.timed_out else ""
    return TestRun(**base, **counts, failures=tuple(failures), output=output)


def _case_id(case: ET.Element) -> str:
    file = case.get("file") or ""
    classname = case.get("classname") or ""
    name = case.get("name") or ""
    if not file:
        return "::".join(p for p in (classname.replace(".", "/"), name) if p)
    module = file[:-3].replace("/", ".") if file.endswith(".py") else file
    rest = classname[len(module) + 1 :] if classname.startswith(module + ".") else ""
    return "::".join(p for p in (file, rest.replace(".", "::"), name) if p)


def _failure(test_id: str, node: ET.Element, case: ET.Element) -> Failure:
    text = (node.text or "").strip()
    message = (node.get("message") or "").strip()
    file = case.get("file") or test_id.split("::")[0]
    locations = list(_LOCATION.finditer(text))
    in_test = [m for m in locations if m["path"] == file]
    pick = (in_test or locations)[-1] if locations else None
    if pick is not None:
        location = f"{pick['path']}:{pick['line']}"
    elif case.get("line"):
        location = f"{file}:{int(case.get('line') or 0) + 1}"
    else:
        location = file
    if not message:
        errs = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("E ")]
        message = "\n".join(errs[:5]) or (text.splitlines()[-1] if text else "")
    lines = text.splitlines()
    trace = "\n".join(lines[-TRACE_LINES:])
    return Failure(
        test_id, "failed" if node.tag == "failure" else "error", location, message[:1000], trace
    )


# -- the tool -------------------------------------------------------------------------------------


def _check_ids(ctx: ToolContext, ids: Sequence[str]) -> str | None:
    for tid in ids:
        path = tid.split("::", 1)[0]
        if tid.startswith("-"):
            return f"test id {tid!r} looks like an option — pass test ids like path::name."
        ctx.workspace.check_readable(path)
    return None


def _render(run: TestRun, title: str) -> list[str]:
    lines = [f"{title}: {run.summary()}"]
    if run.sandbox_warning:
        lines.append(f"  [sandbox] {run.sandbox_warning}")
    for f in run.failures[:20]:
        lines.append(f"  {f.outcome.upper()} {f.test_id} at {f.location}")
        for ln in f.message.splitlines()[:6]:
            lines.append(f"      {ln}")
    if len(run.failures) > 20:
        lines.append(f"  ... {len(run.failures) - 20} more failures")
    if run.output and not run.ok:
        lines.append(
            "  output (tail):\n"
            + "\n".join("    " + ln for ln in run.output.strip().splitlines()[-30:])
        )
    return lines


def _run_dict(run: TestRun) -> dict[str, Any]:
    d = asdict(run)
    d["argv"] = list(run.argv)
    d["test_ids"] = list(run.test_ids)
    d["sandbox"] = list(run.sandbox)
    d["ok"] = run.ok
    d["failures"] = [asdict(f) for f in run.failures]
    return d


def run_tests(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    timeout = float(args.get("timeout_s") or ctx.agent.test_timeout_s)
    scope = args["scope"]
    lines: list[str] = []
    runs: list[TestRun] = []
    data: dict[str, Any] = {}
    if args.get("tests"):
        bad = _check_ids(ctx, args["tests"])
        if bad:
            return fail(bad)
        run = run_pytest(ctx, args["tests"], "given", timeout)
        runs.append(run)
        lines += _render(run, f"Tests given ({len(args['tests'])})")
    else:
        selected: list[str] = []
        if scope != "full":
            index = ctx.index
            ranges, source = changed_ranges(ctx)
            changed = changed_symbols(index, ranges)
            selected, total = select_tests(index, changed, ctx.agent.test_select_hops)
            names = ", ".join(c.qualname for c in changed[:8]) or "none"
            more = f" (+{len(changed) - 8})" if len(changed) > 8 else ""
            lines.append(f"Changed since the run started ({source}): {names}{more}")
            lines.append(
                f"Selected {len(selected)} of {total} tests that reach the change"
                + (": " + ", ".join(selected[:10]) if selected else "")
                + (" ..." if len(selected) > 10 else "")
            )
            data.update(
                changed_symbols=[c.qualname for c in changed],
                selected=selected,
                total_tests=total,
                change_source=source,
            )
            if selected:
                run = run_pytest(ctx, selected, "selected", timeout)
                runs.append(run)
                lines += _render(run, "Selected tests")
        first_ok = all(r.ok for r in runs)
        if scope == "full" or (scope == "auto" and first_ok):
            run = run_pytest(ctx, [], "full", timeout)
            runs.append(run)
            lines += _render(run, "Full suite")
        elif scope == "auto":
            lines.append("Full suite: not run — fix the selected failures first.")
    passed = all(r.ok for r in runs) if runs else None
    data.update(passed=passed, runs=[_run_dict(r) for r in runs])
    timed_out = [r for r in runs if r.timed_out]
    if timed_out:
        return fail(
            f"The {timed_out[0].scope} test run timed out after {timeout:.0f} s and was killed — "
            "select fewer tests (tests=[...]) or raise timeout_s.",
            "\n".join(lines),
            **data,
        )
    crashed = [r for r in runs if r.exit_code not in (0, 1, 5) and not r.failures]
    if crashed:
        r = crashed[0]
        return fail(
            f"pytest could not run ({os.path.basename(r.argv[0])} exited {r.exit_code}); see "
            "its output — is pytest installed, and do the test ids exist?",
            "\n".join(lines),
            **data,
        )
    return ok("\n".join(lines), **data)


RUN_TESTS = Tool(
    "run_tests",
    "Run the Python tests with pytest. By default (scope auto) first the tests that reach the "
    "code changed in this run through the reference graph, then, if they pass, the full suite. "
    "Failures come back with test id, location, assertion message and a short trace.",
    {
        "type": "object",
        "properties": {
            "scope": {"type": "string", "enum": ["auto", "selected", "full"], "default": "auto"},
            "tests": {
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "maxItems": 500,
                "description": "Run exactly these pytest ids (path::name) instead.",
            },
            "timeout_s": {"type": "integer", "minimum": 1, "maximum": 3600},
        },
        "additionalProperties": False,
    },
    "execute",
    run_tests,
    lambda a: "run the test suite" if not a.get("tests") else f"run {len(a['tests'])} test(s)",
)
