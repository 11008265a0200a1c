"""Fixture repositories and the checks of benchmarks/agent_e2e.py: each task's repository
written and committed into a temp dir, its index built, its known fix applied (for the
benchmark's own tests), and the judge — the repository's tests, the task's check, the files a
run changed — which looks at the files only, never at what a system says it did."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import repoctx_command
from benchmarks.e2e_tasks import REPOS, Task

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
}
#: The ref of the commit a run starts from.
START_REF = "refs/bench/start"


def cli_env(base_url: str | None = None) -> dict[str, str]:
    """The environment of the repoctx commands: the caller's REPOCTX_* settings dropped, the
    model server (the proxy) named as a user would, pytest without third-party plugins."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPOCTX_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    if base_url:
        env["REPOCTX_MODEL_BASE_URL"] = base_url
    return env


def write_repo(
    root: Path, files: Mapping[str, str], *, tokenizer: str = "", embed_model: str = ""
) -> Path:
    """The fixture as a committed git repository at ``root``; ``tokenizer`` and ``embed_model``
    go into its .repoctx.toml (as a user would set them) when given."""
    root.mkdir(parents=True, exist_ok=True)
    files = dict(files)
    settings = "".join(
        f'{key} = "{value}"\n'
        for key, value in (("tokenizer", tokenizer), ("embed_model", embed_model))
        if value
    )
    if settings:
        files[".repoctx.toml"] = settings + files.get(".repoctx.toml", "")
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (root / ".gitignore").write_text(".repoctx/\n__pycache__/\n.pytest_cache/\n")
    env = {**os.environ, **_GIT_ENV}
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["commit", "-q", "-m", "init"],
        # What the run started from, out of sight of `git log` / `git tag` (a system that
        # commits its change is still judged against it).
        ["update-ref", START_REF, "HEAD"],
    ):
        subprocess.run(["git", *args], cwd=root, check=True, env=env, capture_output=True)
    # Files a peer keeps beside the code (Aider's chat history and tag cache) are not changes.
    (root / ".git" / "info").mkdir(exist_ok=True)
    (root / ".git" / "info" / "exclude").write_text(".aider*\n")
    return root


def changed_files(root: Path) -> list[str]:
    """Files that differ from what the run started from: tracked files changed, added or
    removed (committed or not), and new files not ignored."""
    out: set[str] = set()
    for args in (
        ["diff", "--name-only", "-z", START_REF],
        ["ls-files", "--others", "--exclude-standard", "-z"],
    ):
        proc = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, check=True, env=_git_env()
        )
        out.update(p for p in proc.stdout.split("\0") if p)
    return sorted(out)


def _git_env() -> dict[str, str]:
    return {**os.environ, **_GIT_ENV}


def build_index(root: Path, embed: str, env: Mapping[str, str]) -> dict[str, Any]:
    """`repoctx index build ROOT --json -q` (``embed`` "none": --no-embed)."""
    argv = [*repoctx_command(), "index", "build", str(root), "--json", "-q"]
    if embed == "none":
        argv.append("--no-embed")
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=dict(env), check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"index build failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    return {"seconds": round(time.monotonic() - t0, 2)}


def apply_fix(task: Task, root: Path) -> None:
    """Apply the known solution of ``task`` (for the benchmark's own tests)."""
    for rel, old, new in task.fix:
        path = root / rel
        text = path.read_text(encoding="utf-8")
        if text.count(old) != 1:
            raise ValueError(f"{task.name}: the known fix does not apply to {rel}")
        path.write_text(text.replace(old, new), encoding="utf-8")


def run_pytest(root: Path, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts="],
        cwd=root,
        capture_output=True,
        text=True,
        env=dict(env or cli_env()),
        timeout=300,
        check=False,
    )
    lines = [ln for ln in proc.stdout.strip().splitlines() if ln.strip()]
    return {"passed": proc.returncode == 0, "summary": lines[-1] if lines else proc.stderr[-200:]}


def check_change(task: Task, root: Path, files: Mapping[str, str]) -> dict[str, Any]:
    """Whether the repository now does what ``task`` asked: the whole test suite passes, the
    tests it had to pass are unchanged, and ``task.verify`` (if any) exits 0 — or, for a task
    whose right outcome is no change, that no file changed (see :func:`judge` for the rest).
    Judged from the files alone."""
    tests = run_pytest(root)
    changed = changed_files(root)
    changed_tests = [
        rel
        for rel in task.keep
        if not (root / rel).is_file() or (root / rel).read_text(encoding="utf-8") != files[rel]
    ]
    verified = None
    detail = ""
    if task.verify:
        proc = subprocess.run(
            [sys.executable, "-c", task.verify],
            cwd=root,
            capture_output=True,
            text=True,
            env=cli_env(),
            timeout=120,
            check=False,
        )
        verified = proc.returncode == 0
        if not verified:
            detail = (proc.stderr.strip().splitlines() or [""])[-1][:300]
    solved = tests["passed"] and not changed_tests and verified is not False
    if task.unchanged:
        solved = tests["passed"] and not changed
    return {
        "solved": solved,
        "changed_files": changed,
        "tests_passed": tests["passed"],
        "tests_summary": tests["summary"],
        "tests_changed": changed_tests,
        "verified": verified,
        "verify_error": detail,
    }


def repoctx_claimed(status: str | None, reason: str | None) -> bool | None:
    """Whether a repoctx run reported success at the task: status ``done``, except an answer
    (reason ``answered``: a question was answered and nothing was changed, which is what a
    vague "can you look into it?" should end with); None when it reported nothing."""
    if not status:
        return None
    return status == "done" and reason != "answered"


def judge(task: Task, check: Mapping[str, Any], claimed_success: bool | None) -> dict[str, Any]:
    """The verdict of one run from the files (``check``) and what the system said
    (``claimed_success``: True when it reported success — repoctx's status ``done``,
    mini-swe-agent's ``Submitted`` —, False when it reported anything else, None when it reports
    no outcome, as Aider). A task whose right outcome is no change is solved only when nothing
    changed *and* no success was reported; nothing done reported as success is counted apart."""
    nothing_done = not check.get("changed_files")
    solved = bool(check.get("solved")) and not (task.unchanged and claimed_success is True)
    return {
        "solved": solved,
        "nothing_done": nothing_done,
        "claimed_success": claimed_success,
        "nothing_done_reported_success": nothing_done and claimed_success is True,
        "success_claimed_but_unsolved": claimed_success is True and not solved,
    }


def symbol_span(text: str, name: str) -> tuple[int, int]:
    """Lines of the function, class or module-level assignment ``name`` in ``text``."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == name:
                return node.lineno, node.end_lineno or node.lineno
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return node.lineno, node.end_lineno or node.lineno
    raise KeyError(name)


def expected_spans(task: Task) -> list[tuple[str, int, int]]:
    files = REPOS[task.repo]
    return [(path, *symbol_span(files[path], name)) for path, name in task.expect]


# -- running a command ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Proc:
    exit_code: int | None
    stdout: str
    stderr: str
    wall_s: float
    killed: bool


def run_cli(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float) -> Proc:
    """A CLI command in its own session; past ``timeout`` the whole group is killed (the agent's
    pytest children too)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    killed = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        killed = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    return Proc(proc.returncode, out, err, time.monotonic() - t0, killed)
