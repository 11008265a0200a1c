"""Byte-exact undo for agent writes, persisted so another process can roll a run back later.

Layout under the store directory::

    <run_id>/<step:08d>/manifest.json   entries in recording order, plus a rolled_back flag
    <run_id>/<step:08d>/blobs/<n>       original bytes of each file that existed

Each path is recorded once per step, before its first change in that step, so rolling the steps
back newest first walks every file back to its state before the run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import CheckpointError, RollbackError

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

    def __init__(self, dir: Path) -> None:
        self.dir = Path(dir)
        self._active: _Step | None = None

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
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            entry["kind"] = "absent"
            entry["created_dirs"] = [str(d) for d in _missing_parents(path)]
        else:
            if stat.S_ISLNK(st.st_mode):
                entry.update(kind="symlink", target=os.readlink(path))
            elif stat.S_ISREG(st.st_mode):
                blob = f"{len(current.entries):06d}"
                blob_path = current.ref.path / "blobs" / blob
                blob_path.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, blob_path, follow_symlinks=False)
                _fsync(blob_path)
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
        for entry in reversed(loaded.entries):
            path = Path(entry["path"])
            try:
                if entry["kind"] == "absent":
                    if _remove(path):
                        deleted.append(path)
                else:
                    _restore(entry, ref.path / "blobs")
                    restored.append(path)
            except (OSError, RollbackError) as exc:
                failures.append(f"{path}: {exc}")
        removed_dirs: list[Path] = []
        created = {d for e in loaded.entries for d in e.get("created_dirs", ())}
        # Deepest first, so a created tree empties bottom-up; a non-empty dir holds files the
        # step did not record (made by a command, say) and is left alone.
        for d in sorted(created, key=lambda p: p.count(os.sep), reverse=True):
            try:
                os.rmdir(d)
                removed_dirs.append(Path(d))
            except (FileNotFoundError, OSError):
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

    def _load(self, ref: StepRef) -> _Step:
        try:
            data = json.loads((ref.path / _MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RollbackError(
                f"Checkpoint {ref.path / _MANIFEST} is unreadable ({exc}) — it cannot be used to undo."
            ) from exc
        return _Step(ref, list(data["entries"]), bool(data.get("rolled_back", False)))

    def _save(self, current: _Step) -> None:
        current.ref.path.mkdir(parents=True, exist_ok=True)
        data = {
            "format": _FORMAT,
            "run_id": current.ref.run_id,
            "step": current.ref.step,
            "rolled_back": current.rolled_back,
            "entries": current.entries,
        }
        fd, tmp = tempfile.mkstemp(dir=current.ref.path, prefix=".manifest-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(data, fh, indent=1)
                fh.flush()
                os.fsync(fh.fileno())
            # Atomic: a crash leaves the old manifest or the new one, never half of one.
            os.replace(tmp, current.ref.path / _MANIFEST)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _missing_parents(path: Path) -> list[Path]:
    missing: list[Path] = []
    parent = path.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    return missing


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: Path) -> bool:
    """Delete what is at ``path`` now (file, symlink or empty directory); False if nothing was."""
    if not os.path.lexists(path):
        return False
    if path.is_dir() and not path.is_symlink():
        try:
            path.rmdir()
        except OSError as exc:
            raise RollbackError(f"a non-empty directory is in the way ({exc.strerror})") from exc
    else:
        path.unlink()
    return True


def _restore(entry: dict[str, Any], blobs: Path) -> None:
    path = Path(entry["path"])
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        _remove(path)
    if entry["kind"] == "symlink":
        if os.path.lexists(path):
            path.unlink()
        os.symlink(entry["target"], path)
        return
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.repoctx-restore-")
    os.close(fd)
    try:
        shutil.copyfile(blobs / entry["blob"], tmp)
        os.chmod(tmp, entry["mode"])
        os.utime(tmp, ns=(entry["mtime_ns"], entry["mtime_ns"]))
        # Replace, so a reader never sees a half-restored file.
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
