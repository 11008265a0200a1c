"""Attack pass on the host side of indexing an untrusted clone (issue 38, review time).

A cloned repository can ship its own `.repoctx/` index directory — git keeps symbolic links, and
`git add -f` gets past the `.gitignore` repoctx writes there — or make `.repoctx` itself a link.
SQLite, LanceDB, the write lock and the watcher open their files by path, following links: on
17a1ef1 a shipped `write.lock → ~/.bashrc` emptied the user's file, `graph.db`, `history.db` or
`token_counts.db → ~/x.db` had the index written into it, `.repoctx → ~/dir` put the whole index
there. `indexer.safety.index_dir_guard` refuses, before any writer writes, an index directory that is a
link or holds a link or special file repoctx never makes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from indexer.errors import UnsafeIndexDirError
from indexer.ops.watch_daemon import check_index
from tests.conftest import git, index, make_repo

CODE_ROOT = Path(__file__).resolve().parents[1]
FILES = {
    "pkg/a.py": "def foo():\n    return bar()\n\n\ndef bar():\n    return 1\n",
    "main.py": "import pkg.a\n\n\nclass K:\n    def m(self):\n        return pkg.a.foo()\n",
}
SECRET = b"SECRET-HOME-MARKER\nexport TOKEN=abc\n"


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` with its type, bytes and mtime: any write shows."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            data = p.read_bytes() if p.is_file() and not p.is_symlink() else None
            out[str(p.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, data)
    return out


@pytest.fixture
def home(tmp_path) -> Path:
    """A stand-in for the user's home: a dotfile with content, an empty file (SQLite takes an
    empty file for a new database and writes one into it) and a directory."""
    h = tmp_path / "home"
    (h / "dir").mkdir(parents=True)
    (h / ".bashrc").write_bytes(SECRET)
    (h / "empty.db").write_bytes(b"")
    return h


def _plant(idx: Path, shape: str, home: Path) -> None:
    """Put one shape of planted link into the index directory ``idx`` (inside the clone)."""
    idx.mkdir(exist_ok=True)
    target_file = home / (".bashrc" if shape.endswith(":text") else "empty.db")
    name = shape.split(":")[0]
    if name == "graph.N.db":  # repoctx's own link, to a generation file that is the link
        (idx / "graph.1.db").symlink_to(target_file)
        (idx / "graph.db").symlink_to("graph.1.db")
    elif name == "vectors.lance/chunks.lance":  # the table, inside a real vectors directory
        (idx / "vectors.lance").mkdir()
        (idx / "vectors.lance" / "chunks.lance").symlink_to(home / "dir")
    else:
        (idx / name).symlink_to(target_file)


SHAPES = [
    "write.lock:text", "write.lock:empty", "graph.db:text", "graph.db:empty", "graph.N.db:empty",
    "history.db:empty", "token_counts.db:empty", ".gitignore:text",
    "vectors.lance/chunks.lance",
]


@pytest.mark.parametrize("shape", SHAPES)
def test_a_shipped_index_directory_is_never_written_through_its_links(tmp_path, home, shape):
    repo = make_repo(tmp_path / "repo", FILES)
    _plant(repo / ".repoctx", shape, home)
    before = snapshot(home)
    for full in (False, True):
        with pytest.raises(UnsafeIndexDirError) as err:
            index(repo, full=full)
        assert "\n" not in str(err.value) and str(repo / ".repoctx") in str(err.value)
    with pytest.raises(UnsafeIndexDirError):
        check_index(repo / ".repoctx")  # what `index watch` checks before it opens its files
    assert snapshot(home) == before


@pytest.mark.parametrize("relative", [True, False])
def test_the_index_directory_itself_may_not_be_a_link(tmp_path, home, relative):
    repo = make_repo(tmp_path / "repo", FILES)
    (repo / ".repoctx").symlink_to(os.path.relpath(home / "dir", repo) if relative
                                   else home / "dir")
    before = snapshot(home)
    with pytest.raises(UnsafeIndexDirError) as err:
        index(repo)
    assert "is a link" in str(err.value) and "\n" not in str(err.value)
    assert snapshot(home) == before


def test_a_special_file_in_the_index_directory_is_refused(tmp_path, home):
    repo = make_repo(tmp_path / "repo", FILES)
    (repo / ".repoctx").mkdir()
    os.mkfifo(repo / ".repoctx" / "history.db")
    with pytest.raises(UnsafeIndexDirError) as err:
        index(repo)
    assert "special file" in str(err.value)


def test_a_real_clone_that_ships_its_index_directory_cannot_touch_the_home(tmp_path, home):
    """End to end: the links are committed (`git add -f`), the user clones and runs
    `repoctx index build` — one line, exit 1, the home untouched."""
    origin = make_repo(tmp_path / "origin", FILES)
    idx = origin / ".repoctx"
    idx.mkdir()
    # Relative to the clone's place, as a real attacker would guess `../../.bashrc`-style paths.
    (idx / "write.lock").symlink_to(home / ".bashrc")
    (idx / "history.db").symlink_to(home / "empty.db")
    git(origin, "add", "-f", ".repoctx")
    git(origin, "commit", "-q", "-m", "ship an index")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    assert (clone / ".repoctx" / "write.lock").is_symlink()
    before = snapshot(home)
    env = {**os.environ, "HOME": str(home)}
    res = subprocess.run(
        [sys.executable, "-c", "from cli.main import cli; cli()", "index", "build", str(clone)],
        cwd=CODE_ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert snapshot(home) == before
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    line = res.stderr.strip().removeprefix("Error: ")
    assert "\n" not in line and "rm -r" in line, line


def test_repoctx_own_layout_passes_through_every_kind_of_build(tmp_path):
    """The control: the one link repoctx makes (`graph.db` → a generation) is accepted, across
    incremental and full builds and the watcher's check."""
    repo = make_repo(tmp_path / "repo", FILES)
    for full in (False, False, True, False, True):
        index(repo, full=full)
    assert os.readlink(repo / ".repoctx" / "graph.db").startswith("graph.")
    check_index(repo / ".repoctx")


# -- terminal codes in file *contents* -----------------------------------------------------------
#
# `shown` escapes file names; the lines of a file that `search`, `context` and `ask` print went
# out raw: a repository's file could write the user's clipboard (OSC 52), set the terminal's
# title, clear or hide lines, or reorder them (bidi, "Trojan Source"). On a terminal click strips
# none of it, so the commands run on a real pseudo-terminal.

PAYLOADS = {
    "osc52-clipboard": "\x1b]52;c;cm0gLXJmIH4K\x07",
    "osc0-title": "\x1b]0;pwned-title\x07",
    "csi-clear": "\x1b[2J\x1b[H",
    "csi-conceal": "\x1b[8m",
    "c1-csi": "\x9b2J",
    "carriage-return": "\rfake = 'overwritten'",
    "bidi-override": "\u202e",
}


def _on_a_terminal(argv: list[str], home: Path) -> bytes:
    import pty
    import select

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", "from cli.main import cli; cli()", *argv], cwd=CODE_ROOT,
        stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env={**os.environ, "HOME": str(home)})
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        if not ready:
            proc.kill()
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(timeout=60) == 0, out[-2000:]
    return out


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_file_contents_reach_the_terminal_with_their_control_codes_visible(tmp_path, home, name):
    payload = PAYLOADS[name]
    repo = make_repo(tmp_path / "repo", {
        **FILES,
        "evil.py": f'def zebracorn():\n    """zebracorn {payload} tail"""\n    return 1\n',
    })
    index(repo)
    outputs = {
        cmd: _on_a_terminal([*cmd.split(), "zebracorn", "--root", str(repo)], home)
        for cmd in ("search", "context", "context --prompt", "ask")
    }
    raw = payload.encode().split(b"\r")[0] if name == "carriage-return" else payload.encode()
    for cmd, out in outputs.items():
        text = out.decode("utf-8", "replace")
        assert "zebracorn" in text and "tail" in text, (cmd, text[-1500:])
        if name == "carriage-return":
            # The pty turns \n into \r\n: what must not be there is a bare \r that sends the
            # cursor back over the line (Python's splitlines may also show it as a line break).
            assert b"\r" + b"fake" not in out, cmd
        else:
            assert raw not in out, (cmd, out[-800:])
            assert "\\x" in text or "\\u" in text, cmd  # shown as an escape, not dropped


# -- a shipped graph with SQL of its own -----------------------------------------------------------
#
# SQLite refuses `load_extension` from a trigger and Python registers no function with side
# effects, so a trigger in a shipped graph runs nothing outside the database — but it ran inside
# every build's writes (a counter trigger with another body, one that empties a table) or broke
# the build with a 40-line traceback. The graph's schema is now checked: repoctx's own triggers,
# by their exact text, and nothing else.

SQL_SHAPES = {
    "foreign-trigger": "CREATE TRIGGER evil AFTER INSERT ON files BEGIN "
                       "SELECT load_extension('/nonexistent/evil.so'); END",
    "own-name-other-body": "DROP TRIGGER symbols_count_del; CREATE TRIGGER symbols_count_del "
                           "AFTER DELETE ON symbols BEGIN DELETE FROM refs; END",
    "view": "CREATE VIEW v AS SELECT * FROM files",
    "insert-trigger-on-chunks": "CREATE TRIGGER t2 BEFORE INSERT ON chunks BEGIN "
                                "SELECT RAISE(IGNORE); END",
}


@pytest.mark.parametrize("shape", list(SQL_SHAPES))
def test_a_graph_with_sql_repoctx_never_wrote_is_refused_then_set_aside(tmp_path, shape):
    import sqlite3

    from indexer.errors import IndexDamagedError
    from indexer.graph import store

    repo = make_repo(tmp_path / "repo", FILES)
    cfg = index(repo)
    conn = sqlite3.connect(store.graph_file(cfg.index_path))
    conn.executescript(SQL_SHAPES[shape])
    conn.close()
    (repo / "new.py").write_text("def zz():\n    return 2\n")
    for attempt in (lambda: index(repo), lambda: store.open_for_read(cfg.index_path)):
        with pytest.raises(IndexDamagedError) as err:
            attempt()
        assert "--full" in str(err.value) and "\n" not in str(err.value)
    index(repo, full=True)  # the documented repair: the file is set aside, a new one built
    db = store.open_for_read(cfg.index_path)
    names = {r[0] for r in db.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('trigger', 'view')")}
    db.conn.close()
    assert names <= {"refs_count_del", "refs_count_upd", "symbols_count_del"}


# -- a shipped watch.pid ---------------------------------------------------------------------------


@pytest.mark.parametrize("relative", [True, False])
def test_watch_stop_never_signals_a_process_a_shipped_pid_file_leads_to(tmp_path, home, relative):
    """`index watch --stop` signals the holder of a flock-ed `watch.pid`: a shipped link to
    another program's flock-ed pid file made it SIGTERM (then SIGKILL) that program."""
    from indexer.config import load_config
    from indexer.ops.watch_daemon import stop_watcher, watch_status

    daemon_pid_file = home / "daemon.pid"
    daemon = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(daemon_pid_file)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "os.write(fd, str(os.getpid()).encode())\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert daemon.stdout.readline().strip() == "ready"
        repo = make_repo(tmp_path / "repo", FILES)
        (repo / ".repoctx").mkdir()
        (repo / ".repoctx" / "watch.pid").symlink_to(
            os.path.relpath(daemon_pid_file, repo / ".repoctx") if relative else daemon_pid_file)
        config = load_config(repo, env={})
        assert not watch_status(config).running
        result = stop_watcher(config, timeout=2.0)
        assert not result.was_running
        assert daemon.poll() is None, "the daemon was signalled"
    finally:
        daemon.kill()
        daemon.wait()
