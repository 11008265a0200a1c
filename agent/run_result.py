"""What a run is given and what it returns: its options (`RunOptions`), its report
(`RunReport`), what it changed (lines added and removed per file, `git diff --stat`), and the
commit of the run's files on a branch of its own (`agent run --commit`)."""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from indexer import GitConfigError, git_env

from .budget import Limits
from .errors import AgentError
from .models.base import Usage
from .models.prompt_tokens import PromptCounter
from .trace import TestRecord


class CommitError(AgentError):
    """The run's changes could not be committed — the files are changed but not committed; commit
    them yourself or undo the run."""


@dataclass(frozen=True)
class FileStat:
    path: str
    added: int
    removed: int
    status: str  # modified | created | deleted | unchanged


def diff_stats(root: Path, originals: Mapping[str, bytes | None]) -> list[FileStat]:
    """Lines added and removed per file since the run started (originals from the checkpoints)."""
    out = []
    for abspath, old in sorted(originals.items()):
        path = Path(abspath)
        rel = os.path.relpath(path, root)
        new = path.read_bytes() if path.is_file() else None
        if old == new:
            continue
        a = (old or b"").decode("utf-8", "replace").splitlines()
        b = (new or b"").decode("utf-8", "replace").splitlines()
        added = removed = 0
        for line in difflib.unified_diff(a, b, lineterm="", n=0):
            if line.startswith("+") and not line.startswith("+++"):
                added += 1
            elif line.startswith("-") and not line.startswith("---"):
                removed += 1
        status = "created" if old is None else "deleted" if new is None else "modified"
        out.append(FileStat(Path(rel).as_posix(), added, removed, status))
    return out


def git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """git in ``root`` with the user's own environment (identity), but nothing the repository
    configures runs: no hooks, fsmonitor, filters or external diff (indexer.safety.gitsafe, which asks
    git for the configuration before every call)."""
    try:
        return subprocess.run(
            ["git", *args],
            cwd=root,
            capture_output=True,
            text=True,
            check=check,
            timeout=120,
            env=git_env(root, read_only=False),
        )
    except GitConfigError as exc:
        raise CommitError(f"{exc} The run's files are changed but not committed.") from exc
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        raise CommitError(f"git {' '.join(args[:2])} failed: {detail.strip()[:500]}") from exc


def git_stat(root: Path, paths: Iterable[str]) -> str:
    """`git diff --stat` of ``paths`` against HEAD; '' outside a git repository, one line
    saying why when git cannot read the repository's configuration."""
    paths = list(paths)
    if not paths or not (root / ".git").exists():
        return ""
    # The flags keep diff drivers and submodules' own configuration out whatever the
    # configuration says (filters are neutralised by git_env alone).
    flags = ("--no-ext-diff", "--no-textconv", "--ignore-submodules=dirty")
    try:
        res = git(root, "diff", "--stat", "--no-color", *flags, "HEAD", "--", *paths, check=False)
    except CommitError as exc:
        if isinstance(exc.__cause__, GitConfigError):
            return f"(not shown: {exc.__cause__})"
        raise
    return res.stdout.rstrip() if res.returncode == 0 else ""


def branch_name(run_id: str, task: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", task.lower()).strip("-")[:40].rstrip("-") or "task"
    return f"repoctx/{run_id}-{slug}"


@dataclass(frozen=True)
class CommitResult:
    branch: str
    commit: str
    message: str


def commit_run(
    root: Path, run_id: str, task: str, summary: str, paths: list[str], tests: list[TestRecord]
) -> CommitResult:
    """Commit the run's files (only those) on a new branch `repoctx/<run-id>-<slug>`. Never pushes."""
    if not (root / ".git").exists():
        raise CommitError(f"{root} is not a git repository — --commit needs one.")
    branch = branch_name(run_id, task)
    title = " ".join(task.split())
    title = title if len(title) <= 68 else title[:67] + "…"
    body = [summary.strip() or "(no summary)", "", "Files:"] + [f"  {p}" for p in paths]
    if tests:
        body += ["", f"Tests: {tests[-1].summary}"]
    body += ["", f"Run: {run_id} (repoctx agent replay {run_id})"]
    message = f"repoctx: {title}\n\n" + "\n".join(body) + "\n"
    git(root, "switch", "-q", "-c", branch)
    git(root, "add", "-A", "--", *paths)
    git(root, "commit", "-q", "-m", message)
    sha = git(root, "rev-parse", "HEAD").stdout.strip()
    return CommitResult(branch, sha, message)


@dataclass(frozen=True)
class RunOptions:
    limits: Limits = field(default_factory=Limits)
    granted: frozenset[str] = frozenset({"read"})
    #: Asked before write/execute tools that are not granted (interactive terminals).
    confirm: Callable[[str], bool] | None = None
    commit: bool = False
    #: Run id (or unique prefix, or `last`) to continue.
    resume: str | None = None
    run_id: str | None = None
    #: Called with every trace event as it is written (progress display).
    on_event: Callable[[dict[str, Any]], None] | None = None
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    #: How tool calls are read: native (the API's `tool_calls` only), text (the tools are
    #: described in the prompt and the calls read from the reply's text) or auto (native first,
    #: else text). None: `agent.tool_format` of the configuration, else auto.
    tool_format: str | None = None
    #: How prompts are counted in the model's tokens (agent/models/prompt_tokens.py). None: the
    #: `model_tokenizer` setting without asking the server (the CLI passes one that asked).
    tokenizer: PromptCounter | None = None
    #: loop | pipeline (agent/strategy.py; `run_task` picks it, and says why here).
    strategy: str | None = None
    strategy_why: str = ""
    #: pipeline: model calls after localization (None: agent/pipeline.py ATTEMPTS).
    attempts: int | None = None


@dataclass(frozen=True)
class RunReport:
    run_id: str
    #: done (completed: `finish` called, or a question answered) | blocked | gave_up (what the
    #: model told `finish`) | no_progress (a change was asked for, none was made) | stopped |
    #: failed | interrupted
    status: str
    #: finished | answered | no_change | no_finish | max_steps | max_tokens | timeout |
    #: consecutive_failures | repetition | empty_answer | model_error | model_service |
    #: context_overflow | interrupted | error (the index or the checkpoints failed); the
    #: pipeline's own: tests_passed | untested (done) | declined (blocked) | tests_failing |
    #: blocks_unplaced (stopped) | read_only (failed)
    reason: str
    message: str
    final: str  # the model's summary (finish) or answer
    steps: int
    usage: Usage
    model_calls: int
    elapsed_s: float
    changed: tuple[FileStat, ...]
    git_stat: str
    tests: tuple[TestRecord, ...]
    trace_path: str
    plan: dict[str, Any]
    branch: str | None = None
    commit: str | None = None
    #: How the model's tool calls came: native, text, or '' (it made none).
    tool_format: str = ""
    #: The strategy that ran (loop | pipeline) and why it was picked.
    strategy: str = "loop"
    strategy_why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
