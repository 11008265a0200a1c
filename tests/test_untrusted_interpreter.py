"""No module of the indexed tree runs in a process repoctx starts (issue 38, item 2).

A tree plants modules named like Python's (`multiprocessing`, `encodings`, `json`, `pickle`,
`concurrent`, `sitecustomize`, `usercustomize`), like repoctx's own (`indexer`), and a `.pth`
file. Each writes a marker into a directory outside the tree and raises. Real builds then run
in that tree — from the CLI with the tree as working directory, and through the Python API
from a process that changed into it — on every path that starts processes: the parse pool,
the one parse helper, the resolution pool, the resource tracker (started by the first of
them), the detached watcher. No marker may appear, and each build indexes every file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cli.settings import load_config
from indexer.build import build
from indexer.phases.parsing import HELPER_THRESHOLD, POOL_THRESHOLD
from tests.conftest import make_repo

ROOT = Path(__file__).resolve().parent.parent
REPOCTX = Path(sys.executable).with_name("repoctx")

#: A module the tree plants (its path in the tree) per name of the module it shadows.
SHADOWS = {
    "multiprocessing": "multiprocessing/__init__.py",
    "encodings": "encodings/__init__.py",
    "json": "json/__init__.py",
    "pickle": "pickle.py",
    "concurrent": "concurrent/__init__.py",
    "sitecustomize": "sitecustomize.py",
    "usercustomize": "usercustomize.py",
    "indexer": "indexer/__init__.py",
}


def _payload(name: str, markers: Path) -> str:
    """Writes a marker, then fails the import. With `os` calls only: a planted `encodings` runs
    while the interpreter starts, before `open` exists."""
    return textwrap.dedent(f"""\
        import os as _os, sys as _sys
        _os.makedirs({str(markers)!r}, exist_ok=True)
        _fd = _os.open(_os.path.join({str(markers)!r}, "{name}-%d" % _os.getpid()),
                       _os.O_WRONLY | _os.O_CREAT, 0o600)
        _os.write(_fd, " ".join(getattr(_sys, "argv", None) or ["(starting)"]).encode())
        _os.close(_fd)
        raise ImportError("the tree's {name} ran")
        """)


def hostile_tree(root: Path, markers: Path, files: int, shadows=tuple(SHADOWS)) -> Path:
    """A git repository of ``files`` ordinary modules plus the planted ``shadows`` (and a
    `.pth` file, which runs code where Python processes a site directory)."""
    tree = {f"pkg/m{i:03}.py": f"def f{i}(x):\n    return g{i}(x) + {i}\n\n\ndef g{i}(y):\n    return y\n"
            for i in range(files)}
    for name in shadows:
        tree[SHADOWS[name]] = _payload(name, markers)
    marker = str(markers / "pth")
    tree["zz-planted.pth"] = f"import os; os.makedirs({str(markers)!r}, exist_ok=True); open({marker!r}, 'w')\n"
    return make_repo(root, tree)


def expected_files(tree: Path, tmp_path: Path) -> int:
    """The files a build of ``tree`` indexes, from a build in this process (no child)."""
    cfg = load_config(tree, env={}, jobs=1, index_dir=str(tmp_path / "reference-index"))
    return build(cfg, full=True).files_total


def fired(markers: Path) -> list[str]:
    return sorted(p.name for p in markers.iterdir()) if markers.exists() else []


def cli_build(tree: Path, index: Path, jobs: int, *extra: str) -> dict:
    proc = subprocess.run(
        [str(REPOCTX), "index", "build", str(tree), "--full", "--no-embed", "--json", "-q",
         "--jobs", str(jobs), "--index-dir", str(index), *extra],
        cwd=tree, capture_output=True, text=True, timeout=240, env=_env(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _env(**extra: str) -> dict[str, str]:
    """The environment of a process under test: this checkout's code first (the installed
    script may point at another), no REPOCTX_* settings of the caller."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPOCTX_")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


@pytest.fixture(autouse=True)
def _repoctx_script():
    if not REPOCTX.exists():
        pytest.skip(f"needs the installed `repoctx` script beside {sys.executable}")


# -- the CLI, with the tree as working directory (the attack) -------------------------


@pytest.mark.parametrize("entry", ["cli", "tree-on-path"])
@pytest.mark.parametrize("shadow", sorted(SHADOWS))
def test_a_planted_module_does_not_run_in_the_parse_pool(tmp_path, shadow, entry):
    """Each planted module alone, in a build from the CLI and from a library user whose
    process has the tree on its path (see `api_build`)."""
    markers = tmp_path / "markers"
    n = POOL_THRESHOLD + 4
    tree = hostile_tree(tmp_path / "tree", markers, n, shadows=(shadow,))
    want = expected_files(tree, tmp_path)
    if entry == "cli":
        stats = cli_build(tree, tmp_path / "index", 2)
        got = [stats["files_total"], stats["files_parsed"], len(stats["failed"])]
    else:
        got = api_build(tmp_path, tree, entry)
    assert fired(markers) == []
    assert got == [want, want, 0]


@pytest.mark.parametrize("files,path", [(POOL_THRESHOLD + 4, "pool"), (HELPER_THRESHOLD + 4, "helper")])
def test_no_planted_module_runs_in_a_cli_build(tmp_path, files, path):
    markers = tmp_path / "markers"
    tree = hostile_tree(tmp_path / "tree", markers, files)
    want = expected_files(tree, tmp_path)
    assert (want >= POOL_THRESHOLD) == (path == "pool") and want >= HELPER_THRESHOLD
    stats = cli_build(tree, tmp_path / "index", 2)
    assert fired(markers) == []
    assert stats["files_total"] == stats["files_parsed"] == want and not stats["failed"]


# -- the Python API, from a process that changed into the tree --------------------------------

#: A library user's script: builds ``tree`` after changing into it (and, with ``on_path``,
#: putting it first on its path: ``python -m tool`` run from the tree does that). What this
#: process imports itself is the user's affair, so the modules repoctx imports lazily are
#: imported before.
API_SCRIPT = """
import os, sys
import multiprocessing, multiprocessing.popen_spawn_posix, concurrent.futures.process, json, pickle
import indexer.safety.lifetime, indexer.vectors.token_counts
from indexer.graph import write as graph_write
from indexer.build import build
from cli.settings import load_config

if __name__ == "__main__":
    tree, index, jobs, resolve_min, on_path = sys.argv[1:6]
    graph_write.PARALLEL_MIN = int(resolve_min)
    os.chdir(tree)
    if on_path == "1":
        sys.path.insert(0, tree)
    stats = build(load_config(tree, env={}, jobs=int(jobs), index_dir=index), full=True)
    print(stats.files_total, stats.files_parsed, len(stats.failed))
"""


def api_build(tmp_path: Path, tree: Path, how: str, resolve_min: int = 10**9) -> list[int]:
    """Build ``tree`` through the Python API with 2 jobs. ``how``: ``script``, a script
    outside the tree (its directory on the path); ``dash-c``, ``python -c`` (``''``, the
    working directory, on the path); ``tree-on-path``, a script with the tree first on its
    path and ``PYTHONPATH`` with an empty entry (``PYTHONPATH=:/x``, a common slip), which
    names the working directory in every child that honours it, as it starts."""
    args = [str(tree), str(tmp_path / "index"), "2", str(resolve_min), str(int(how == "tree-on-path"))]
    env = _env()
    if how == "dash-c":
        argv = [sys.executable, "-c", API_SCRIPT, *args]
    else:
        script = tmp_path / "user" / "reindex.py"
        script.parent.mkdir(exist_ok=True)
        script.write_text(API_SCRIPT)
        argv = [sys.executable, str(script), *args]
        if how == "tree-on-path":
            env["PYTHONPATH"] = os.pathsep + str(ROOT)
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [int(x) for x in proc.stdout.split()]


@pytest.mark.parametrize("files", [POOL_THRESHOLD + 4, HELPER_THRESHOLD + 4], ids=["pool", "helper"])
@pytest.mark.parametrize("how", ["script", "dash-c", "tree-on-path"])
def test_no_planted_module_runs_in_an_api_build(tmp_path, files, how):
    markers = tmp_path / "markers"
    tree = hostile_tree(tmp_path / "tree", markers, files)
    want = expected_files(tree, tmp_path)
    got = api_build(tmp_path, tree, how)
    assert fired(markers) == []
    assert got == [want, want, 0]


@pytest.mark.parametrize("how", ["dash-c", "tree-on-path"])
def test_no_planted_module_runs_in_the_resolution_pool(tmp_path, how):
    """A full build's resolution workers (a threshold of 1 reference instead of 100,000)."""
    markers = tmp_path / "markers"
    tree = hostile_tree(tmp_path / "tree", markers, 8)
    want = expected_files(tree, tmp_path)
    got = api_build(tmp_path, tree, how, resolve_min=1)
    assert fired(markers) == []
    assert got == [want, want, 0]


# -- the mechanism itself -------------------------------------------------------------------

PROBE = """
import json, os, sys


def report():
    return json.dumps({"isolated": sys.flags.isolated, "cwd": os.getcwd(), "path": sys.path,
                       "main": getattr(sys.modules["__main__"], "__file__", None)})
"""

#: The parent: a script that stands in the tree, with it (and ``''``) on its path.
PROBE_MAIN = """
import os, sys
import multiprocessing.popen_spawn_posix, concurrent.futures.process
from indexer.safety import lifetime
from probe import report

if __name__ == "__main__":
    tree = sys.argv[1]
    os.chdir(tree)
    sys.path[:0] = ["", tree]
    with lifetime.spawn_pool(1) as pool:
        print(pool.submit(report).result())
"""


def test_a_worker_starts_isolated_away_from_the_tree(tmp_path):
    """What a worker gets: ``-I``, a neutral working directory, a path without the tree, and
    not the parent's main script (which may live in the tree)."""
    tree = make_repo(tmp_path / "tree", {"a.py": "x = 1\n", "sub/b.py": "y = 2\n"})
    module = tmp_path / "probe_mod"
    module.mkdir()
    (module / "probe.py").write_text(PROBE)
    (module / "main.py").write_text(PROBE_MAIN)
    proc = subprocess.run(
        [sys.executable, str(module / "main.py"), str(tree)],
        cwd=tmp_path, env=_env(PYTHONPATH=f"{ROOT}{os.pathsep}{module}"),
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    assert got["isolated"] == 1
    assert got["cwd"] == os.path.abspath(os.sep)
    real = os.path.realpath(tree)
    assert "" not in got["path"] and str(module) in got["path"]
    assert not [p for p in got["path"] if os.path.realpath(p or ".").startswith(real)]
    assert got["main"] is None


TRACKER = """
import os, sys, time
import multiprocessing.popen_spawn_posix, multiprocessing.resource_tracker as rt
import concurrent.futures.process, pickle
from indexer.safety import lifetime

os.chdir(sys.argv[1])
sys.path.insert(0, "")
with lifetime.spawn_pool(1) as pool:
    assert pool.submit(abs, -1).result() == 1
    pid, deadline = rt._resource_tracker._pid, time.monotonic() + 10
    while os.readlink(f"/proc/{pid}/cwd") != os.sep and time.monotonic() < deadline:
        time.sleep(0.05)
    print(os.readlink(f"/proc/{pid}/cwd"))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/cwd"), reason="reads /proc/PID/cwd")
def test_the_resource_tracker_starts_isolated(tmp_path):
    """The tracker is started once per process, by the first pool, as ``python -c``: from a
    process in the tree with ``''`` on its path, it must run none of the tree either, and
    leave the tree (it lives as long as that process)."""
    markers = tmp_path / "markers"
    tree = hostile_tree(tmp_path / "tree", markers, 2, shadows=("multiprocessing", "pickle"))
    proc = subprocess.run([sys.executable, "-c", TRACKER, str(tree)], cwd=tmp_path,
                          env=_env(PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=60)
    assert fired(markers) == []
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == [os.sep]


# -- the detached watcher --------------------------------------------------------------------


def test_no_planted_module_runs_in_a_detached_watcher(tmp_path):
    markers = tmp_path / "markers"
    tree = hostile_tree(tmp_path / "tree", markers, 4)
    index = tmp_path / "index"
    cli_build(tree, index, 1)
    watch = [str(REPOCTX), "index", "watch", str(tree), "--index-dir", str(index)]
    started = subprocess.run([*watch, "--detach", "--no-embed", "--debounce", "50"], cwd=tree,
                             env=_env(), capture_output=True, text=True, timeout=120)
    try:
        assert started.returncode == 0, started.stderr + started.stdout
        # Enough new files that the watcher's build starts a parse pool, moved in at once.
        staged = tmp_path / "staged"
        staged.mkdir()
        for i in range(POOL_THRESHOLD + 2):
            (staged / f"n{i:03}.py").write_text(f"def n{i}():\n    return {i}\n")
        staged.rename(tree / "new")
        log = index / "watch.log"
        deadline = time.monotonic() + 120
        while f"{POOL_THRESHOLD + 2} files parsed" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, log.read_text() if log.exists() else "no log"
            time.sleep(0.2)
    finally:
        stop = subprocess.run([*watch, "--stop", "--json"], cwd=tree, env=_env(),
                              capture_output=True, text=True, timeout=60)
    assert json.loads(stop.stdout)["was_running"] is True
    assert fired(markers) == []


# -- the reaper of a private Ray's processes --------------------------------------------------


def test_the_reaper_starts_isolated_away_from_the_tree(tmp_path):
    markers = tmp_path / "markers"
    tree = hostile_tree(tmp_path / "tree", markers, 1)
    code = (
        "import os, sys, time, multiprocessing.popen_spawn_posix; from indexer.safety import lifetime\n"
        "os.chdir(sys.argv[1])\n"
        "child = __import__('subprocess').Popen(['sleep', '30'])\n"
        "reaper = lifetime.start_reaper([child.pid])\n"
        "time.sleep(1.0)\n"
        "alive = reaper.poll() is None\n"
        "cwd = os.readlink(f'/proc/{reaper.pid}/cwd')\n"
        "lifetime.stop_reaper(reaper); child.kill(); child.wait()\n"
        "print(alive, cwd)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tree)], cwd=tmp_path,
                          env=_env(PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["True", os.path.abspath(os.sep)]
    assert fired(markers) == []


# -- Ray workers ------------------------------------------------------------------------------


def test_no_planted_module_runs_in_a_ray_worker(tmp_path):
    """`--engine ray` from the tree: Ray puts the driver's working directory first on its
    workers' path unless the job has a working directory of its own."""
    pytest.importorskip("ray")
    markers = tmp_path / "markers"
    tree = hostile_tree(tmp_path / "tree", markers, 6)
    want = expected_files(tree, tmp_path)
    proc = subprocess.run(
        [str(REPOCTX), "index", "build", str(tree), "--full", "--no-embed", "--json", "-q",
         "--engine", "ray", "--jobs", "1", "--index-dir", str(tmp_path / "index")],
        cwd=tree, capture_output=True, text=True, timeout=300,
        env=_env(REPOCTX_RAY_MIN_WORK="1", RAY_ADDRESS=""),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats = json.loads(proc.stdout)
    assert fired(markers) == []
    assert [stats["files_total"], stats["files_parsed"], len(stats["failed"])] == [want, want, 0]


# -- the MCP server's refresh builds ------------------------------------------------------------


def test_no_planted_module_runs_in_an_mcp_refresh_build(tmp_path):
    """`repoctx serve --mcp` started in the tree: a tool call after many files arrived first
    refreshes the index with a build that starts a parse pool."""
    markers = tmp_path / "markers"
    tree = hostile_tree(tmp_path / "tree", markers, 4)
    cli_build(tree, tree / ".repoctx", 1)
    proc = subprocess.Popen([str(REPOCTX), "serve", "--mcp", str(tree)], cwd=tree, env=_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def ask(rid: str, method: str, params: dict | None = None) -> dict:
        message = {"jsonrpc": "2.0", "id": rid, "method": method, **({"params": params} if params else {})}
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()
        while True:  # notifications may come first
            answer = json.loads(proc.stdout.readline() or b"null")
            assert answer is not None, "the server ended"
            if answer.get("id") == rid:
                return answer

    try:
        init = {"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"}}
        assert ask("init", "initialize", init).get("result")
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        staged = tmp_path / "staged"
        staged.mkdir()
        for i in range(POOL_THRESHOLD + 2):
            (staged / f"n{i:03}.py").write_text(f"def newcomer{i}():\n    return {i}\n")
        staged.rename(tree / "new")
        found = ask("find", "tools/call", {"name": "find_symbol", "arguments": {"name": "newcomer7"}})
        assert "new/n007.py" in json.dumps(found), found
    finally:
        proc.stdin.close()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert fired(markers) == []


def test_the_interpreters_own_path_stays_when_the_tree_holds_it():
    """The tree filter never drops what the interpreter itself runs on: a virtualenv kept in
    the repository (`make run` indexes the checkout its `.venv` lives in) or the standard
    library indexed as a corpus. (Dropping them broke every pooled build of such a tree:
    workers could not import tree_sitter.)"""
    import sysconfig

    from indexer.safety import isolation

    site = sysconfig.get_paths()["purelib"]
    stdlib = sysconfig.get_paths()["stdlib"]
    for tree in (os.path.dirname(site), os.path.dirname(os.path.dirname(site)), stdlib):
        path = isolation.child_sys_path(tree)
        assert site in path and stdlib in path, (tree, path)
    # ... while the tree's own entries still go (here: the working directory and the tree).
    assert str(ROOT) not in isolation.child_sys_path(ROOT) or \
        isolation.child_sys_path(ROOT)[-1] == str(ROOT)


def test_a_pooled_build_of_this_checkout_runs(tmp_path):
    """The README's `make run` indexes this checkout with the venv inside it: a pooled build
    (two workers, the real CLI) must parse every file, not lose its workers."""
    proc = subprocess.run(
        [str(REPOCTX), "index", "build", str(ROOT), "--index-dir", str(tmp_path / "idx"),
         "--no-embed", "--jobs", "2", "--full", "-q"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "stopped abruptly" not in proc.stderr
