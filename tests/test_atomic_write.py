"""indexer.atomic: a name holds the old file or the new one, whole — after an exception, after a
kill -9 in the middle of a write, and while readers read it; the data and then the directory
are synced; links at the name are replaced, never written through."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from indexer.atomic import atomic_writer, replace_durably, write_atomic

OLD = b"old " * 1000
NEW = b"new " * 1000


def _temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_writes_and_replaces(tmp_path):
    target = tmp_path / "state.json"
    write_atomic(target, "héllo")
    assert target.read_bytes() == "héllo".encode()
    write_atomic(target, NEW)
    assert target.read_bytes() == NEW
    assert _temps(tmp_path) == []


def test_an_exception_keeps_the_old_file_and_removes_the_temporary_one(tmp_path):
    target = tmp_path / "memory.json"
    target.write_bytes(OLD)
    with pytest.raises(RuntimeError), atomic_writer(target) as fh:
        fh.write(NEW[:100])
        raise RuntimeError("serialising failed half way")
    assert target.read_bytes() == OLD
    assert _temps(tmp_path) == []


def test_a_directory_at_the_name_is_an_error_and_leaves_nothing(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(IsADirectoryError):
        write_atomic(tmp_path / "d", NEW)
    assert (tmp_path / "d").is_dir()
    assert _temps(tmp_path) == []


def _child(code: str, *args: str) -> subprocess.Popen:
    repo = Path(__file__).resolve().parent.parent
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=repo, stdout=subprocess.PIPE, text=True,
    )


def test_a_writer_killed_in_the_middle_leaves_the_old_file(tmp_path):
    target = tmp_path / "watch.json"
    target.write_bytes(OLD)
    child = _child(
        """
        import os, signal, sys
        from indexer.atomic import atomic_writer
        with atomic_writer(sys.argv[1]) as fh:
            fh.write(b"new " * 500)
            fh.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        """,
        str(target),
    )
    assert child.wait(timeout=60) == -signal.SIGKILL
    assert target.read_bytes() == OLD
    # What a kill may leave is a temporary file beside the name, whole or not, never at it.
    assert len(_temps(tmp_path)) == 1


def test_readers_and_a_killed_writer_see_only_whole_files(tmp_path):
    """A writer alternates two 2 MB contents; a reader checks every read while it runs, and the
    writer is killed at some point of its loop: every read, and the file after, is one of the two
    whole (writing in place, a reader sees a truncated or mixed file within a few reads)."""
    target = tmp_path / "state.json"
    a, b = b"a" * 2_000_000, b"b" * 2_000_000
    target.write_bytes(a)
    child = _child(
        """
        import sys
        from indexer.atomic import write_atomic
        data = [b"a" * 2_000_000, b"b" * 2_000_000]
        i = 0
        while True:
            write_atomic(sys.argv[1], data[i % 2])
            i += 1
            if i == 3:
                print("writing", flush=True)
        """,
        str(target),
    )
    try:
        assert child.stdout.readline() == "writing\n"
        seen = set()
        for _ in range(300):
            data = target.read_bytes()
            assert data in (a, b), f"a read saw {len(data)} bytes starting {data[:8]!r}"
            seen.add(data[:1])
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    assert target.read_bytes() in (a, b)
    assert seen  # the reader did read


def test_mode(tmp_path):
    old_umask = os.umask(0o022)
    try:
        write_atomic(tmp_path / "plain", b"x")
        write_atomic(tmp_path / "private", b"x", mode=0o600)
        write_atomic(tmp_path / "empty", b"", mode=0o444)
        # Rewriting does not keep the old bits: the caller says which it wants.
        (tmp_path / "plain").chmod(0o640)
        write_atomic(tmp_path / "plain", b"y")
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE((tmp_path / "plain").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "private").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "empty").stat().st_mode) == 0o444
    write_atomic(tmp_path / "empty", b"", mode=0o444)  # a read-only file is replaced all the same
    assert (tmp_path / "empty").read_bytes() == b""


def test_a_link_at_the_name_is_replaced_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.write_bytes(OLD)
    (tmp_path / "idx").mkdir()
    target = tmp_path / "idx" / "memory.json"
    target.symlink_to(outside)
    write_atomic(target, NEW)
    assert not target.is_symlink() and target.read_bytes() == NEW
    assert outside.read_bytes() == OLD

    other = tmp_path / "other"
    other.write_bytes(OLD)
    os.unlink(target)
    os.link(other, target)
    write_atomic(target, NEW)
    assert target.read_bytes() == NEW and other.read_bytes() == OLD  # the hard link split off


def test_long_names(tmp_path):
    target = tmp_path / ("n" * 255)
    write_atomic(target, NEW)
    assert target.read_bytes() == NEW


def test_relative_to_a_directory_descriptor(tmp_path):
    (tmp_path / "d").mkdir()
    dfd = os.open(tmp_path / "d", os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_atomic("f.py", b"x = 1\n", dir_fd=dfd, mode=0o640)
        with pytest.raises(ValueError):
            write_atomic("sub/f.py", b"", dir_fd=dfd)
    finally:
        os.close(dfd)
    assert (tmp_path / "d" / "f.py").read_bytes() == b"x = 1\n"
    assert stat.S_IMODE((tmp_path / "d" / "f.py").stat().st_mode) == 0o640
    assert _temps(tmp_path / "d") == []


def test_relative_name_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_atomic("here.json", b"{}")
    assert (tmp_path / "here.json").read_bytes() == b"{}"


def _record_syncs(monkeypatch) -> list[tuple[str, str]]:
    """What is fsynced and renamed, in order (the file each descriptor names, by /proc)."""
    events: list[tuple[str, str]] = []
    fsync, replace = os.fsync, os.replace

    def recording_fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    def recording_replace(src, dst, **kw):
        events.append(("replace", os.path.basename(dst)))
        replace(src, dst, **kw)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "replace", recording_replace)
    return events


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_the_data_is_synced_before_the_rename_and_the_directory_after(tmp_path, monkeypatch):
    events = _record_syncs(monkeypatch)
    write_atomic(tmp_path / "watch.json", b"{}")
    assert len(events) == 3
    (op1, file1), (op2, name), (op3, dir3) = events
    assert op1 == "fsync" and Path(file1).parent == tmp_path and file1.endswith(".tmp")
    assert (op2, name) == ("replace", "watch.json")
    assert (op3, dir3) == ("fsync", str(tmp_path))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_replace_durably_syncs_the_directory(tmp_path, monkeypatch):
    (tmp_path / "graph.1.db").write_bytes(b"")
    os.symlink("graph.1.db", tmp_path / ".graph.db.1.tmp")
    events = _record_syncs(monkeypatch)
    replace_durably(tmp_path / ".graph.db.1.tmp", tmp_path / "graph.db")
    assert events == [("replace", "graph.db"), ("fsync", str(tmp_path))]
    assert os.readlink(tmp_path / "graph.db") == "graph.1.db"


def test_times_and_mode_set_in_the_block_survive(tmp_path):
    """What `agent.safe_fs` relies on to restore a checkpoint: an mtime set through ``fileno()``
    after the data is flushed, and the mode given, are the replaced file's."""
    target = tmp_path / "data.bin"
    target.write_bytes(OLD)
    when = 1_600_000_000_000_000_000
    with atomic_writer(target, mode=0o751) as fh:
        fh.write(NEW)
        fh.flush()
        os.utime(fh.fileno(), ns=(when, when))
    st = target.stat()
    assert (target.read_bytes(), stat.S_IMODE(st.st_mode), st.st_mtime_ns) == (NEW, 0o751, when)
