"""What a run changed: lines added and removed per file, `git diff --stat`, and the commit of
the run's files on a branch of its own (`agent run --commit`)."""

from __future__ import annotations

import difflib
import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from indexer.gitsafe import git_env

from .errors import AgentError
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
    configures runs: no hooks, fsmonitor, filters or external diff (indexer.gitsafe)."""
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
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        raise CommitError(f"git {' '.join(args[:2])} failed: {detail.strip()[:500]}") from exc


def git_stat(root: Path, paths: Iterable[str]) -> str:
    """`git diff --stat` of ``paths`` against HEAD; '' outside a git repository."""
    paths = list(paths)
    if not paths or not (root / ".git").exists():
        return ""
    res = git(root, "diff", "--stat", "--no-color", "HEAD", "--", *paths, check=False)
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
