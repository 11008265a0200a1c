"""Work trees for the localization benchmark: one per repository, made once from the fetched
bare mirror and moved from commit to commit, so every index build after the first is
incremental. Everything lives outside the project (``~/.cache/repoctx-bench`` by default)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CACHE = Path(os.environ.get("REPOCTX_BENCH_CACHE", "~/.cache/repoctx-bench")).expanduser()
DEFAULT_MIRRORS = Path("/work/.mirror")


def _git(*args: str, cwd: Path | None = None, git_dir: Path | None = None) -> str:
    cmd = ["git"]
    if git_dir is not None:
        cmd.append(f"--git-dir={git_dir}")
    cmd.extend(args)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
    return proc.stdout


@dataclass(frozen=True)
class RepoTree:
    repo: str  # owner/name
    git_dir: Path  # the fetched bare mirror
    tree: Path  # the work tree (checked out at one commit at a time)
    cache: Path  # per-repository cache folder (indexes live here, outside the tree)

    def index_dir(self, label: str) -> Path:
        return self.cache / f"index-{label}"

    def commit_time(self, commit: str) -> int:
        return int(_git("show", "-s", "--format=%ct", commit, git_dir=self.git_dir).strip())

    def checkout(self, commit: str) -> None:
        """Move the tree to ``commit``; git rewrites only files that differ, so the mtimes
        of the others stay and the next build re-parses only what changed."""
        _git("checkout", "--detach", "-f", "-q", commit, cwd=self.tree)
        _git("clean", "-fdq", cwd=self.tree)

    def python_files(self) -> list[tuple[str, str]]:
        """(path, blob sha) of every tracked .py file at the checked-out commit."""
        out = _git("ls-files", "-s", "--", "*.py", cwd=self.tree)
        rows = []
        for line in out.splitlines():
            meta, path = line.split("\t", 1)
            rows.append((path, meta.split()[1]))
        return rows


def commit_time(git_dir: Path, commit: str) -> int | None:
    """The commit's time, or None when the mirror does not have it (a snapshot can lack a
    commit, or a blob it needs)."""
    try:
        return int(_git("show", "-s", "--format=%ct", commit, git_dir=git_dir).strip())
    except RuntimeError:
        return None


def mirror_dir(repo: str, mirrors: Path = DEFAULT_MIRRORS) -> Path:
    git_dir = mirrors / repo.replace("/", "+") / "repo"
    if not git_dir.is_dir():
        raise SystemExit(
            f"No mirror for {repo} at {git_dir} — fetch it first (`fetch github:{repo}`)."
        )
    return git_dir


def materialize(
    repo: str, first_commit: str, cache: Path = DEFAULT_CACHE, mirrors: Path = DEFAULT_MIRRORS
) -> RepoTree:
    """The repository's work tree, created at ``first_commit`` unless it already exists."""
    git_dir = mirror_dir(repo, mirrors)
    folder = cache / repo.replace("/", "+")
    tree = folder / "tree"
    folder.mkdir(parents=True, exist_ok=True)
    if not (tree / ".git").exists():
        _git("worktree", "prune", git_dir=git_dir)
        _git("worktree", "add", "--detach", "-f", str(tree), first_commit, git_dir=git_dir)
    return RepoTree(repo, git_dir, tree, folder)
