"""Byte-exact undo for agent writes, persisted so another process can roll a run back later.

Layout under the store directory::

    <run_id>/<step:08d>/manifest.json   entries in recording order, plus a rolled_back flag
    <run_id>/<step:08d>/blobs/<n>       original bytes of each file that existed

Each path is recorded once per step, before its first change in that step, so rolling the steps
back newest first walks every file back to its state before the run.

Paths are recorded as real paths (no link on them). Recording and rollback reach them from the
workspace root (from `/` for a store made without one) with no link followed (agent/safe_fs.py):
a directory that a command swapped for a link to `$HOME` between the write and the undo makes
the undo of that file fail with one line; nothing is read, written or deleted through the link.
A store that knows its workspace also refuses a recorded path outside it, so not even a forged
manifest can make an undo write elsewhere.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import AgentError, CheckpointError, PathEscapeError, RollbackError
from .safe_fs import Beneath

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_MANIFEST = "manifest.json"
_FORMAT = 1


@dataclass(frozen=True)
class StepRef:
    run_id: str
    step: int
    path: Path


@dataclass(frozen=True)
class RollbackReport:
    run_id: str
    #: Steps rolled back now, in the order they were undone (already-undone steps are skipped).
    steps: tuple[int, ...] = ()
    restored: tuple[Path, ...] = ()
    deleted: tuple[Path, ...] = ()
    removed_dirs: tuple[Path, ...] = ()


@dataclass
class _Step:
    ref: StepRef
    entries: list[dict[str, Any]] = field(default_factory=list)
    rolled_back: bool = False

    @property
    def recorded(self) -> set[str]:
        return {e["path"] for e in self.entries}


class CheckpointStore:
    """Records the state of files before the agent changes them; restores it on rollback."""

    def __init__(self, dir: Path, root: str | os.PathLike[str] | None = None) -> None:
        self.dir = Path(dir)
        #: The workspace every recorded path must lie in (None: any real path).
        self.root = os.path.realpath(root) if root is not None else None
        #: The root as given: the store's path may be spelled from it rather than its real path.
        self._given_root = os.path.abspath(root) if root is not None else None
        self._active: _Step | None = None

    def _tree(self) -> _Anchored:
        return _Anchored(self.root or "/")

    # -- recording -------------------------------------------------------------------------------

    def begin_step(self, run_id: str, step: int) -> StepRef:
        """Make (run_id, step) the step that following writes are recorded in; resumes if it exists."""
        ref = self._ref(run_id, step)
        loaded = self._load(ref) if (ref.path / _MANIFEST).is_file() else None
        if loaded is not None and loaded.rolled_back:
            raise CheckpointError(
                f"Step {step} of run {run_id} was rolled back — record new writes under a new step number."
            )
        self._active = loaded or _Step(ref)
        return ref

    @property
    def active(self) -> StepRef | None:
        return self._active.ref if self._active else None

    def record_before_write(self, path: Path) -> bool:
        """Save ``path``'s current bytes, mode and mtime (or its absence) unless already saved in
        this step. Returns True when a new record was written."""
        if self._active is None:
            raise CheckpointError()
        path = Path(os.path.abspath(path))
        key = str(path)
        current = self._active
        if key in current.recorded:
            return False
        entry: dict[str, Any] = {"path": key}
        with self._tree() as base:
            try:
                rel = base.rel(path)
                st = base.lstat(rel)
            except AgentError as exc:
                raise CheckpointError(f"{path}: {exc} Nothing was written.") from exc
            if st is None:
                entry["kind"] = "absent"
                entry["created_dirs"] = [str(d) for d in _missing_parents(base, path)]
            elif stat.S_ISLNK(st.st_mode):
                with base.parent(rel) as (dfd, name):
                    entry.update(kind="symlink", target=os.readlink(name, dir_fd=dfd))
            elif stat.S_ISREG(st.st_mode):
                blob = f"{len(current.entries):06d}"
                try:
                    # The bytes come from the descriptor that was checked, never from a name
                    # that could be re-pointed between the check and the copy.
                    fd, st = base.read_fd(rel)
                except AgentError as exc:
                    raise CheckpointError(f"{path}: {exc} Nothing was written.") from exc
                with os.fdopen(fd, "rb") as src:
                    data = src.read()
                self._write_own(f"{_step_rel(current.ref)}/blobs/{blob}", data)
                entry.update(
                    kind="file", blob=blob, mode=stat.S_IMODE(st.st_mode), mtime_ns=st.st_mtime_ns
                )
            else:
                raise CheckpointError(
                    f"{path} is not a regular file or symlink — the agent can only change files."
                )
        current.entries.append(entry)
        self._save(current)
        return True

    # -- reading ---------------------------------------------------------------------------------

    def runs(self) -> tuple[str, ...]:
        if not self.dir.is_dir():
            return ()
        return tuple(
            sorted(p.name for p in self.dir.iterdir() if p.is_dir() and _RUN_ID.match(p.name))
        )

    def steps(self, run_id: str) -> tuple[int, ...]:
        """Step numbers recorded for ``run_id``, ascending (including rolled-back ones)."""
        run_dir = self._run_dir(run_id)
        if not run_dir.is_dir():
            return ()
        return tuple(
            sorted(
                int(p.name)
                for p in run_dir.iterdir()
                if p.name.isdigit() and (p / _MANIFEST).is_file()
            )
        )

    def changed_files(self, run_id: str) -> tuple[Path, ...]:
        """Every path recorded in a step of ``run_id`` that has not been rolled back, sorted."""
        paths: set[str] = set()
        for step in self.steps(run_id):
            loaded = self._load(self._ref(run_id, step))
            if not loaded.rolled_back:
                paths |= loaded.recorded
        return tuple(Path(p) for p in sorted(paths))

    # -- rollback --------------------------------------------------------------------------------

    def rollback_step(self, run_id: str, step: int) -> RollbackReport:
        """Put every file recorded in ``step`` back as it was before the step. Idempotent."""
        ref = self._ref(run_id, step)
        if not (ref.path / _MANIFEST).is_file():
            raise RollbackError(
                f"No checkpoint for step {step} of run {run_id} in {self.dir} — "
                "check the run id and step (see `changed_files` / `steps`)."
            )
        loaded = self._load(ref)
        if loaded.rolled_back:
            return RollbackReport(run_id)
        restored: list[Path] = []
        deleted: list[Path] = []
        failures: list[str] = []
        removed_dirs: list[Path] = []
        with self._tree() as base:
            for entry in reversed(loaded.entries):
                path = Path(entry["path"])
                try:
                    if entry["kind"] == "absent":
                        if _remove(base, path):
                            deleted.append(path)
                    else:
                        blob = self.blob(run_id, step, entry["blob"]) if entry["kind"] == "file" else b""
                        _restore(base, entry, blob)
                        restored.append(path)
                except (OSError, AgentError) as exc:
                    failures.append(f"{path}: {_one_line(exc)}")
            created = {d for e in loaded.entries for d in e.get("created_dirs", ())}
            # Deepest first, so a created tree empties bottom-up; a non-empty dir holds files the
            # step did not record (made by a command, say) and is left alone, and so is a link
            # put in a directory's place (rmdir does not follow it; the walk refuses it).
            for d in sorted(created, key=lambda p: p.count(os.sep), reverse=True):
                try:
                    base.rmdir(base.rel(Path(d)))
                    removed_dirs.append(Path(d))
                except (OSError, AgentError):
                    continue
        if failures:
            raise RollbackError(
                f"Step {step} of run {run_id}: could not restore "
                + "; ".join(failures)
                + " — fix these paths (permissions, directories in the way) and roll back again."
            )
        loaded.rolled_back = True
        self._save(loaded)
        if self._active is not None and self._active.ref == ref:
            self._active = None
        return RollbackReport(run_id, (step,), tuple(restored), tuple(deleted), tuple(removed_dirs))

    def rollback_run(self, run_id: str) -> RollbackReport:
        """Roll back every step of ``run_id``, newest first. Resumable after a RollbackError."""
        steps: list[int] = []
        restored: list[Path] = []
        deleted: list[Path] = []
        removed: list[Path] = []
        if not self.steps(run_id):
            raise RollbackError(
                f"No checkpoints for run {run_id} in {self.dir} — check the run id (see `runs`)."
            )
        for step in reversed(self.steps(run_id)):
            report = self.rollback_step(run_id, step)
            steps += report.steps
            restored += report.restored
            deleted += report.deleted
            removed += report.removed_dirs
        return RollbackReport(
            run_id,
            tuple(steps),
            tuple(dict.fromkeys(restored)),
            tuple(dict.fromkeys(deleted)),
            tuple(removed),
        )

    # -- storage ---------------------------------------------------------------------------------

    def _run_dir(self, run_id: str) -> Path:
        if not _RUN_ID.match(run_id):
            raise CheckpointError(
                f"Invalid run id {run_id!r} — use letters, digits, '.', '_' and '-' (max 128)."
            )
        return self.dir / run_id

    def _ref(self, run_id: str, step: int) -> StepRef:
        if not isinstance(step, int) or step < 0:
            raise CheckpointError(f"Invalid step {step!r} — steps are integers from 0.")
        return StepRef(run_id, step, self._run_dir(run_id) / f"{step:08d}")

    # The store's own files are reached with no link followed too: where the sandbox has no
    # mount namespace, a command can plant links in the index directory.

    def _own_base(self) -> tuple[str, str]:
        """Where the store's own files are reached from, and the store below it. Inside the
        workspace that is the workspace root: the index directory may not exist yet when a
        command runs (then no read-only mount covers it), and the command may put a link in
        its place, so no directory from the root down is followed. Outside it (an index
        directory of the user's choosing) it is the store's parent, so the store directory
        itself is not followed either when a link has taken its place."""
        if self.root is not None:
            for root in {self.root, self._given_root}:
                rel = os.path.relpath(os.path.abspath(self.dir), root)
                if rel != os.pardir and not rel.startswith(os.pardir + os.sep):
                    return root, rel
        self.dir.parent.mkdir(parents=True, exist_ok=True)
        return os.fspath(self.dir.parent), self.dir.name

    def _write_own(self, rel: str, data: bytes) -> None:
        base, store = self._own_base()
        with Beneath(base) as own:
            own.write(f"{store}/{rel}", data)

    def _read_own(self, rel: str) -> bytes:
        base, store = self._own_base()
        with Beneath(base) as own:
            return own.read_bytes(f"{store}/{rel}")

    def blob(self, run_id: str, step: int, name: str) -> bytes:
        """The bytes saved as ``name`` in (run_id, step)."""
        return self._read_own(f"{_step_rel(self._ref(run_id, step))}/blobs/{name}")

    def load(self, run_id: str, step: int) -> tuple[list[dict[str, Any]], bool]:
        """The entries of (run_id, step) in recording order, and whether it was rolled back."""
        loaded = self._load(self._ref(run_id, step))
        return loaded.entries, loaded.rolled_back

    def _load(self, ref: StepRef) -> _Step:
        try:
            data = json.loads(self._read_own(f"{_step_rel(ref)}/{_MANIFEST}"))
        except (OSError, ValueError, AgentError) as exc:
            raise RollbackError(
                f"Checkpoint {ref.path / _MANIFEST} is unreadable ({exc}) — it cannot be used to undo."
            ) from exc
        return _Step(ref, list(data["entries"]), bool(data.get("rolled_back", False)))

    def _save(self, current: _Step) -> None:
        data = {
            "format": _FORMAT,
            "run_id": current.ref.run_id,
            "step": current.ref.step,
            "rolled_back": current.rolled_back,
            "entries": current.entries,
        }
        # Atomic (a new file renamed over the old): a crash leaves the old manifest or the new
        # one, never half of one.
        manifest = json.dumps(data, indent=1).encode()
        self._write_own(f"{_step_rel(current.ref)}/{_MANIFEST}", manifest)


def _step_rel(ref: StepRef) -> str:
    return f"{ref.run_id}/{ref.step:08d}"


class _Anchored(Beneath):
    """The store's base directory: the workspace root, or `/`."""

    def rel(self, path: Path) -> str:
        """``path`` (a recorded real path) beneath the base; PathEscapeError when outside it."""
        path = os.path.normpath(path)
        if self.base == "/":
            return path.lstrip("/")
        if not path.startswith(self.base.rstrip("/") + "/"):
            raise PathEscapeError(
                f"{path} is outside the workspace {self.base} — checkpoints hold only paths "
                "inside it, so it is left alone."
            )
        return path[len(self.base.rstrip("/")) + 1 :]

    def inside(self, path: Path) -> bool:
        return self.base == "/" or os.path.normpath(path).startswith(self.base.rstrip("/") + "/")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _missing_parents(base: _Anchored, path: Path) -> list[Path]:
    missing: list[Path] = []
    parent = path.parent
    while parent != parent.parent and base.inside(parent) and base.lstat(base.rel(parent)) is None:
        missing.append(parent)
        parent = parent.parent
    return missing


def _remove(base: _Anchored, path: Path) -> bool:
    """Delete what is at ``path`` now (file, symlink or empty directory); False if nothing was."""
    rel = base.rel(path)
    st = base.lstat(rel)
    if st is None:
        return False
    if stat.S_ISDIR(st.st_mode):
        try:
            base.rmdir(rel)
        except OSError as exc:
            raise RollbackError(f"a non-empty directory is in the way ({exc.strerror})") from exc
    else:
        base.unlink(rel)
    return True


def _restore(base: _Anchored, entry: dict[str, Any], data: bytes) -> None:
    path = Path(entry["path"])
    rel = base.rel(path)
    if "/" in rel:
        base.makedirs(rel.rpartition("/")[0])
    st = base.lstat(rel)
    if st is not None and stat.S_ISDIR(st.st_mode):
        _remove(base, path)
    if entry["kind"] == "symlink":
        base.symlink(rel, entry["target"])
        return
    # A new file renamed over the name, so a reader never sees a half-restored file.
    base.write(rel, data, mode=entry["mode"], mtime_ns=entry["mtime_ns"], create_parents=False)
