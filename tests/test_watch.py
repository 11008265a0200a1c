"""The background watcher on real git repositories: every change converges to what a clean build
produces, bursts are coalesced, readers never fail while it writes, and kill -9 of the watcher
or of a concurrent build is repaired by the next run (after which `verify` finds nothing)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from indexer import Index
from indexer.build import build
from indexer.config import load_config
from indexer.graph import store
from indexer.ops.verify import verify
from indexer.ops.watch import Watcher, WatchSettings
from indexer.ops.watch_daemon import WatcherRunningError, stop_watcher, watch_status
from indexer.ops.watch_filter import ChangeFilter
from tests.conftest import dump_graph, git, make_repo, write_files

#: Liveness bound only (a broken watcher never converges); nothing asserts how fast it is.
DEADLINE = 30.0
STDLIB = Path(os.path.dirname(os.__file__))

BASE = {
    ".gitignore": "build/\n*.log\n",
    "pkg/__init__.py": "from .a import alpha\n",
    "pkg/a.py": "def alpha():\n    return beta()\n\n\ndef beta():\n    return 1\n",
    "pkg/b.py": "from pkg import alpha\n\n\nclass B:\n    def go(self):\n        return alpha()\n",
    "pkg/c.py": "from .b import B\n\n\nclass C(B):\n    def run(self):\n        return self.go()\n",
    "tool.py": "import pkg.a\n\n\ndef main():\n    pkg.a.beta()\n    gamma()\n",
}


def config_for(root: Path, **kw):
    return load_config(root, env={}, jobs=1, **kw)


def clean_dump(root: Path, tmp_path: Path) -> dict:
    cfg = config_for(root, index_dir=tmp_path / f"clean-{time.monotonic_ns()}")
    build(cfg, full=True)
    return dump_graph(cfg)


def converge(
    cfg, root: Path, tmp_path: Path, watcher: Watcher | None = None, limit: float = DEADLINE
) -> dict:
    """Wait until the watched index equals a clean build of the tree as it is now."""
    reference = clean_dump(root, tmp_path)
    deadline = time.monotonic() + limit
    current = None
    while time.monotonic() < deadline:
        if (cfg.index_path / "graph.db").exists():
            current = dump_graph(cfg)
            idle = watcher is None or watch_status(cfg).state == "idle"
            if current == reference and idle:
                return current
        time.sleep(0.05)
    assert current == reference
    raise AssertionError("the watcher never went idle")


@contextmanager
def watching(cfg, **settings):
    events = []
    opts = {"debounce_s": 0.1, "max_latency_s": 1.0, **settings}
    watcher = Watcher(cfg, WatchSettings(**opts), on_event=events.append)
    failures: list[BaseException] = []

    def run() -> None:
        try:
            watcher.run()
        except BaseException as exc:  # surfaced in the test thread below
            failures.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + DEADLINE
    while watcher.builds == 0 and not failures and time.monotonic() < deadline:
        time.sleep(0.02)  # the initial catch-up build
    try:
        assert not failures, failures
        watcher.events = events
        yield watcher
    finally:
        watcher.stop()
        thread.join(DEADLINE)
    assert not thread.is_alive()
    assert not failures, failures


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path / "repo", BASE)


def test_create_edit_delete_rename_and_branch_switch_converge(repo, tmp_path):
    # a branch whose tree differs from main's in every way at once
    git(repo, "checkout", "-q", "-b", "feature")
    write_files(
        repo,
        {"pkg/d.py": "def gamma():\n    return 2\n", "pkg/a.py": "def alpha():\n    return 0\n"},
    )
    (repo / "pkg/c.py").unlink()
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "feature")
    git(repo, "checkout", "-q", "main")
    cfg = config_for(repo)
    with watching(cfg) as w:
        assert watch_status(cfg).running and watch_status(cfg).pid == os.getpid()
        converge(cfg, repo, tmp_path, w)
        steps = [
            lambda: write_files(
                repo,
                {
                    "pkg/e.py": "def gamma():\n    return alpha()\n",  # create
                    "pkg/sub/__init__.py": "",
                    "pkg/sub/m.py": "from pkg.a import alpha\nalpha()\n",
                },
            ),
            lambda: write_files(repo, {"pkg/a.py": "def alpha():\n    return 3\n"}),  # edit
            lambda: (repo / "pkg/e.py").rename(repo / "pkg/f.py"),  # rename
            lambda: (repo / "pkg/b.py").unlink(),  # delete a file others import
            lambda: (repo / "pkg/sub").rename(repo / "pkg/sub2"),  # rename a directory
            lambda: git(repo, "checkout", "-q", "--", "."),  # restore main's files
            lambda: git(repo, "checkout", "-q", "feature"),  # branch switch
            lambda: git(repo, "checkout", "-q", "main"),
        ]
        for step in steps:
            step()
            converge(cfg, repo, tmp_path, w)
        assert verify(cfg).ok
        status = watch_status(cfg)
        assert status.fresh and status.generation == dump_generation(cfg)
    assert not watch_status(cfg).running  # the pid lock went with the watcher


def test_package_directory_rename_converges(repo, tmp_path):
    cfg = config_for(repo)
    write_files(
        repo, {"pkg/a.py": "def alpha():\n    return 3\n"}
    )  # tool.py's pkg.a.beta() unresolved
    with watching(cfg) as w:
        converge(cfg, repo, tmp_path, w)
        (repo / "pkg").rename(repo / "lib")  # now pkg.a.beta() is external
        converge(cfg, repo, tmp_path, w, limit=3.0)


def dump_generation(cfg) -> int:
    db = store.open_for_read(cfg.index_path)
    try:
        return int(store.get_meta(db, "generation"))
    finally:
        db.conn.close()


def test_burst_of_1000_writes_is_a_few_builds_and_ignored_paths_none(repo, tmp_path):
    cfg = config_for(repo)
    with watching(cfg) as w:
        converge(cfg, repo, tmp_path, w)
        before = w.builds
        # Ignored by .gitignore, no format repoctx reads, the index's own directory, git
        # internals: no build. (notes.txt would be: plain text is indexed as docs.)
        write_files(repo, {f"build/gen{i}.py": "x = 1\n" for i in range(20)})
        write_files(
            repo,
            {
                "notes.xyz": "hi\n",
                "run.log": "x\n",
                ".repoctx/junk.py": "x = 1\n",
                ".git/scratch": "x\n",
            },
        )
        time.sleep(1.5)  # longer than debounce + max latency: a build would have started
        assert w.builds == before
        # 1,000 writes in one burst
        files = {
            f"burst/m{i:04d}.py": f"from pkg import alpha\n\n\ndef f{i}():\n    return alpha()\n"
            for i in range(1000)
        }
        write_files(repo, files)
        converge(cfg, repo, tmp_path, w)
        burst_builds = w.builds - before
        assert 1 <= burst_builds <= 8, burst_builds  # not one per file
        assert verify(cfg).ok


def test_filter_rules(repo):
    cfg = config_for(repo, index_dir=repo / ".idx")
    f = ChangeFilter(cfg)
    r = f.root + "/"
    kinds = {
        rel: f.classify(r + rel, is_dir)[0]
        for rel, is_dir in [
            ("pkg/a.py", False),
            ("notes.txt", False),  # plain text is docs: indexed, so watched
            ("notes.xyz", False),
            ("bin/deploy", False),  # no suffix: its `#!` line may make it a script
            (".idx/graph.db-wal", False),
            (".git/index", False),
            (".git/objects/ab", True),
            (".git/HEAD", False),
            (".git/refs/heads/main", False),
            (".gitignore", False),
            ("pkg/sub", True),
            ("vendor/.git/HEAD", False),
        ]
    }
    assert kinds == {
        "pkg/a.py": 2,
        "notes.txt": 2,
        "notes.xyz": 0,
        "bin/deploy": 2,
        ".idx/graph.db-wal": 0,
        ".git/index": 0,
        ".git/objects/ab": 0,
        ".git/HEAD": 1,
        ".git/refs/heads/main": 1,
        ".gitignore": 1,
        "pkg/sub": 2,
        "vendor/.git/HEAD": 0,
    }
    assert f.ignored("build/gen.py") and f.ignored("x/y.log") and not f.ignored("pkg/a.py")


_READER = textwrap.dedent("""
    import json, os, sys, time
    from indexer import Index
    from retrieval.symbols import find_symbols, references_to
    root, stop = sys.argv[1], sys.argv[2]
    index = Index.open(root, env={})
    n, errors = 0, []
    while not os.path.exists(stop):
        try:
            if not find_symbols(index, "alpha"):
                errors.append("alpha not found")
            references_to(index, "alpha")
        except Exception as exc:
            errors.append(repr(exc))
        n += 1
    print(json.dumps({"iterations": n, "errors": errors[:20]}))
""")


def test_readers_never_fail_while_the_watcher_writes(repo, tmp_path):
    from retrieval.symbols import find_symbols, references_to

    cfg = config_for(repo)
    stop = threading.Event()
    results: list[tuple[int, list[str]]] = []

    def reader() -> None:
        index = Index.open(cfg)
        n, errors = 0, []
        while not stop.is_set():
            try:
                if not find_symbols(index, "alpha"):
                    errors.append("alpha not found")
                references_to(index, "alpha")
            except Exception as exc:  # any failure is the finding
                errors.append(repr(exc))
            n += 1
        index.close()
        results.append((n, errors))

    with watching(cfg) as w:
        threads = [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        stop_file = tmp_path / "stop-reader"
        proc = subprocess.Popen(
            [sys.executable, "-c", _READER, str(cfg.root), str(stop_file)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
        try:
            before = w.builds
            for round_ in range(3):  # rewrites of the definitions readers ask for, and a burst
                write_files(
                    repo,
                    {
                        "pkg/a.py": f"def alpha():\n    return beta() + {round_}\n\n\n"
                        f"def beta():\n    return {round_}\n"
                    },
                )
                write_files(
                    repo,
                    {
                        f"gen/r{round_}_{i}.py": "from pkg.a import alpha\nalpha()\n"
                        for i in range(100)
                    },
                )
                deadline = time.monotonic() + DEADLINE
                while w.builds < before + round_ + 1 and time.monotonic() < deadline:
                    time.sleep(0.05)
            converge(cfg, repo, tmp_path, w)
        finally:
            stop.set()
            stop_file.touch()
            for t in threads:
                t.join(DEADLINE)
            out, _ = proc.communicate(timeout=DEADLINE)
    sub = json.loads(out)
    assert len(results) == 2
    assert all(n > 0 and not errors for n, errors in results), results
    assert sub["iterations"] > 0 and sub["errors"] == [], sub


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    root.mkdir()
    shutil.copytree(STDLIB / "json", root / "json")
    shutil.copytree(STDLIB / "email", root / "email")
    git(root, "init", "-q", "-b", "main")
    return root


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_kill_9_of_the_watcher_is_repaired_by_the_next_run(tmp_path):
    root = _tree(tmp_path)
    cfg = config_for(root)
    # Small batches: many commits per build, so a kill lands between them, not only around them.
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "REPOCTX_BATCH_SIZE": "4"}
    for seed in range(3):
        rng = random.Random(seed)
        if seed == 1:
            shutil.rmtree(cfg.index_path)  # killed during its very first build
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from cli.main import main; main()",
                "index",
                "watch",
                str(root),
                "--foreground",
                "--no-embed",
                "--debounce",
                "50",
            ],
            env=env,
            start_new_session=True,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(rng.uniform(0.5, 1.5))
            # changes it is busy with when it dies
            write_files(
                root,
                {
                    f"email/new{seed}_{i}.py": f"def fresh{i}():\n    return {seed}\n"
                    for i in range(40)
                },
            )
            (root / "json" / "tool.py").write_text(f"def tool_{seed}():\n    pass\n")
            time.sleep(rng.uniform(0.1, 0.6))
        finally:
            _kill_group(proc)
        assert not watch_status(cfg).running  # a pid file left by kill -9 is not a watcher
        with watching(cfg) as w:  # the next run
            converge(cfg, root, tmp_path, w)
            report = verify(cfg)
            assert report.ok, report.issues


_LOCKED_BUILD = textwrap.dedent("""
    import os, sys, time
    from indexer.build import build
    from indexer.config import load_config

    def slow(progress):  # hold the lock long enough to be killed mid-way
        print(progress.phase, flush=True)
        deadline = time.monotonic() + 60
        # the first step waits until the test has seen the watcher wait for the lock: a build
        # that ended before the watcher noticed the edit would leave it nothing to wait for
        while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.05)

    build(load_config(sys.argv[1], env={}, jobs=1, batch_size=2), full=True, progress=slow)
""")


def test_watcher_waits_for_a_manual_build_and_repairs_it_after_kill_9(tmp_path):
    root = _tree(tmp_path)
    cfg = config_for(root)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    with watching(cfg) as w:
        for seed in range(2):
            rng = random.Random(100 + seed)
            proc = subprocess.Popen(
                [sys.executable, "-c", _LOCKED_BUILD, str(root), str(tmp_path / f"go{seed}")],
                env=env,
                start_new_session=True,
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert proc.stdout.readline()  # it holds the write lock now
                waits = sum(e.kind == "waiting_lock" for e in w.events)
                write_files(root, {f"json/edit{seed}.py": f"def edited_{seed}():\n    return 1\n"})
                deadline = time.monotonic() + DEADLINE
                while sum(e.kind == "waiting_lock" for e in w.events) == waits:
                    assert time.monotonic() < deadline and proc.poll() is None
                    time.sleep(0.02)
                (tmp_path / f"go{seed}").touch()  # the build goes on, to be killed mid-way
                time.sleep(rng.uniform(0.0, 0.6))
            finally:
                _kill_group(proc)
            converge(cfg, root, tmp_path, w)
            report = verify(cfg)
            assert report.ok, report.issues
        assert not [e for e in w.events if e.kind == "error"]


def test_one_watcher_per_index_and_stop(repo, tmp_path):
    cfg = config_for(repo)
    with watching(cfg), pytest.raises(WatcherRunningError):
        Watcher(cfg).run()
    assert stop_watcher(cfg).was_running is False
    # a detached watcher through the CLI: status, then stop
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    cli = [sys.executable, "-c", "from cli.main import main; main()", "index", "watch", str(repo)]
    subprocess.run([*cli, "--detach", "--no-embed"], env=env, check=True, capture_output=True)
    st = json.loads(
        subprocess.run(
            [*cli, "--status", "--json"], env=env, check=True, capture_output=True, text=True
        ).stdout
    )
    assert st["running"] and st["pid"] != os.getpid()
    write_files(repo, {"pkg/z.py": "def zeta():\n    return 0\n"})
    converge(cfg, repo, tmp_path)
    stopped = subprocess.run(
        [*cli, "--stop", "--json"], env=env, check=True, capture_output=True, text=True
    )
    assert json.loads(stopped.stdout)["was_running"] is True
    assert not watch_status(cfg).running
    assert not (cfg.index_path / "watch.pid").exists()
    assert "build 1" in (cfg.index_path / "watch.log").read_text()
