"""Issue 38, items 5 and 7: host-side file operations on the workspace never follow a planted
link, a link with an ordinary name never shows a deny-listed file's content, and reads of FIFOs,
sockets and devices fail at once with one line.

The attacker here is a command the agent ran: it may replace any file or directory of the
workspace with a link — at the leaf, at a directory on the path, at the top, relative, through a
chain of links — between two steps of repoctx's own work (a checkpoint and the undo, a path
check and the write). "Outside" stands in for $HOME: nothing in it may change, whatever the link.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.checkpoints import CheckpointStore
from agent.errors import AgentError, RollbackError
from agent.loop import RunOptions, run_agent
from agent.memory import read_instructions
from agent.models import ScriptedModel
from agent.tools import ALL_TOOLS, ToolContext, ToolRegistry
from agent.workspace import Workspace
from cli.mcp_server import GET_CONTEXT
from cli.settings import load_config
from indexer.build import build
from indexer.parse.discovery import discover
from tests.conftest import git, make_repo

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
CODE_ROOT = Path(__file__).resolve().parents[1]

FILES = {
    "pkg/__init__.py": "",
    "pkg/top.py": "TOP = 1\n",
    "pkg/sub/__init__.py": "",
    "pkg/sub/mod.py": "def area(w, h):\n    return w * h\n",
    "pkg/sub/gone.py": "GONE = 1\n",
    "pkg/sub/use.py": "from pkg.sub.mod import area\n\n\ndef total():\n    return area(2, 3)\n",
}


def snapshot(root: Path) -> dict[str, object]:
    """Every entry under ``root``: a file's bytes and mode, a link's target, "dir"."""
    out: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = "dir"
            else:
                out[rel] = (p.read_bytes(), stat.S_IMODE(st.st_mode))
    return out


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", FILES)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """$HOME's stand-in: the same layout as the workspace, so a redirected write, restore or
    delete would find a file of the same name to hit."""
    home = tmp_path / "home"
    for rel in ("pkg/sub/mod.py", "pkg/sub/new.py", "pkg/sub/gone.py", "pkg/top.py", "pkg/new.py"):
        p = home / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"HOME {rel}\n")
    (home / "pkg/sub/deeper").mkdir()
    (home / "pkg/sub/deeper/keep.txt").write_text("keep\n")
    return home


def _swap_dir(repo: Path, rel: str, target: str | Path) -> None:
    """Move directory ``rel`` aside and put a link to ``target`` in its place."""
    (repo / rel).rename(repo / f"{rel}.orig")
    (repo / rel).symlink_to(target, target_is_directory=True)


def _leaf(repo: Path, home: Path, files: tuple[str, ...] = ("mod.py", "new.py", "gone.py")) -> None:
    for name in files:
        p = repo / "pkg/sub" / name
        if p.exists() or p.is_symlink():
            p.unlink()
        p.symlink_to(home / "pkg/sub" / name)


def _chain(repo: Path, home: Path) -> None:
    (repo / "hop2").symlink_to(home / "pkg/sub", target_is_directory=True)
    (repo / "hop1").symlink_to("hop2", target_is_directory=True)
    _swap_dir(repo, "pkg/sub", "../hop1")


#: Ways a command can put a link on the path of pkg/sub/<file>, all leading into the home.
SHAPES: dict[str, Callable[[Path, Path], None]] = {
    "leaf": _leaf,
    "directory": lambda repo, home: _swap_dir(repo, "pkg/sub", home / "pkg/sub"),
    "top-level": lambda repo, home: _swap_dir(repo, "pkg", home / "pkg"),
    "relative": lambda repo, home: _swap_dir(repo, "pkg/sub", "../../home/pkg/sub"),
    "chain": _chain,
}


def one_line_about_a_link(message: str) -> None:
    assert "\n" not in message.strip(), message
    assert "link" in message, message


# -- a checkpoint, a swap, then the undo ----------------------------------------------------------


def _agent_writes(repo: Path, store: CheckpointStore) -> None:
    ws = Workspace(repo, recorder=store)
    store.begin_step("run1", 1)
    ws.write_text("pkg/sub/mod.py", "def area(w, h):\n    return 0\n")  # restored on undo
    ws.write_text("pkg/sub/new.py", "NEW = 1\n")  # deleted on undo
    ws.write_text("pkg/sub/deeper/made.py", "MADE = 1\n")  # file and directory removed on undo
    ws.delete_file("pkg/sub/gone.py")  # re-created on undo


@pytest.mark.parametrize("shape", list(SHAPES))
def test_undo_after_a_swap_never_touches_what_the_link_points_to(repo, outside, tmp_path, shape):
    store = CheckpointStore(tmp_path / "checkpoints")
    _agent_writes(repo, store)
    home_before = snapshot(outside)
    SHAPES[shape](repo, outside)
    error = None
    try:
        store.rollback_run("run1")
    except RollbackError as exc:
        error = str(exc)
    assert snapshot(outside) == home_before
    if shape == "leaf":
        # A link at the name is replaced or removed, never written through: the undo completes.
        assert error is None
        assert (repo / "pkg/sub/mod.py").read_text() == FILES["pkg/sub/mod.py"]
        assert not (repo / "pkg/sub/mod.py").is_symlink()
        assert not (repo / "pkg/sub/new.py").exists() and not (repo / "pkg/sub/new.py").is_symlink()
    else:
        assert error is not None
        one_line_about_a_link(error)


def test_cli_undo_from_another_process_refuses_a_swapped_directory(tmp_path, outside):
    """The whole path: an agent run writes through the tools, a directory becomes a link to the
    home, `repoctx agent undo` runs as its own process."""
    repo = make_repo(tmp_path / "repo", FILES)
    script = [
        json.dumps({"steps": [{"title": "Change area", "done_when": "done"}]}),
        {"tool_calls": [{"name": "edit", "arguments": {
            "path": "pkg/sub/mod.py", "old_text": "return w * h", "new_text": "return h * w"}}]},
        {"tool_calls": [{"name": "create_file", "arguments": {
            "path": "pkg/sub/new.py", "content": "NEW = 1\n"}}]},
        {"tool_calls": [{"name": "finish", "arguments": {"summary": "done"}}]},
    ]
    options = RunOptions(granted=frozenset({"read", "write"}), sleep=lambda s: None)
    report = run_agent(load_config(repo, env={}, jobs=1), "t", ScriptedModel(script), options)
    assert {c.path for c in report.changed} == {"pkg/sub/mod.py", "pkg/sub/new.py"}
    home_before = snapshot(outside)
    _swap_dir(repo, "pkg/sub", outside / "pkg/sub")
    res = subprocess.run(
        [sys.executable, "-c", "from cli.main import cli; cli()", "agent", "undo", "last",
         "--root", str(repo)],
        cwd=CODE_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert snapshot(outside) == home_before
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    one_line_about_a_link(res.stderr.strip().removeprefix("Error: "))


def test_undo_never_writes_or_deletes_outside_the_workspace_whatever_the_manifest_says(
    tmp_path, outside
):
    """Where the sandbox has no mount namespace the index directory is writable by commands: a
    forged checkpoint entry naming a file in the home is refused, not restored or deleted."""
    repo = make_repo(tmp_path / "repo", FILES)
    script = [
        json.dumps({"steps": [{"title": "Add", "done_when": "done"}]}),
        {"tool_calls": [{"name": "create_file", "arguments": {
            "path": "pkg/sub/new.py", "content": "NEW = 1\n"}}]},
        {"tool_calls": [{"name": "finish", "arguments": {"summary": "done"}}]},
    ]
    options = RunOptions(granted=frozenset({"read", "write"}), sleep=lambda s: None)
    config = load_config(repo, env={}, jobs=1)
    report = run_agent(config, "t", ScriptedModel(script), options)
    step_dir = next((config.index_path / "checkpoints" / report.run_id).iterdir())
    manifest = json.loads((step_dir / "manifest.json").read_text())
    (step_dir / "blobs").mkdir(exist_ok=True)
    (step_dir / "blobs" / "999999").write_text("pwned\n")
    manifest["entries"] += [
        {"path": str(outside / "pkg/top.py"), "kind": "file", "blob": "999999",
         "mode": 0o644, "mtime_ns": 0},
        {"path": str(outside / "pkg/new.py"), "kind": "absent",
         "created_dirs": [str(outside / "pkg")]},
        {"path": str(repo.resolve() / "../home/pkg/sub/mod.py"), "kind": "absent"},
    ]
    (step_dir / "manifest.json").write_text(json.dumps(manifest))
    home_before = snapshot(outside)
    res = subprocess.run(
        [sys.executable, "-c", "from cli.main import cli; cli()", "agent", "undo", "last",
         "--root", str(repo)],
        cwd=CODE_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert snapshot(outside) == home_before
    assert res.returncode == 1 and "outside the workspace" in res.stderr, res.stderr
    assert "\n" not in res.stderr.strip()
    assert not (repo / "pkg/sub/new.py").exists()  # the run's own write was still undone


# -- a swap between the path check and the write --------------------------------------------------


class SwapAtRecord(CheckpointStore):
    """A real checkpoint store; on the ``at``-th recording the attacker swaps — the moment after
    the workspace has checked the path and before it writes."""

    def __init__(self, dir: Path, attack: Callable[[], None], at: int) -> None:
        super().__init__(dir)
        self.attack, self.at, self.calls = attack, at, 0

    def record_before_write(self, path: Path) -> bool:
        recorded = super().record_before_write(path)
        self.calls += 1
        if self.calls == self.at:
            self.attack()
        return recorded


def _workspace_op(op: str) -> Callable[[Workspace], object]:
    return {
        "write": lambda ws: ws.write_text("pkg/sub/mod.py", "X = 1\n"),
        "create": lambda ws: ws.write_text("pkg/sub/new.py", "X = 1\n"),
        "create-deep": lambda ws: ws.write_text("pkg/sub/deeper/new/x.py", "X = 1\n"),
        "delete": lambda ws: ws.delete_file("pkg/sub/gone.py"),
    }[op]


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("op", ["write", "create", "create-deep", "delete"])
def test_a_swap_after_the_path_check_cannot_redirect_a_workspace_write(
    repo, outside, tmp_path, op, shape
):
    home_before = snapshot(outside)
    store = SwapAtRecord(tmp_path / "cp", lambda: SHAPES[shape](repo, outside), at=1)
    store.begin_step("r", 0)
    ws = Workspace(repo, recorder=store)
    try:
        _workspace_op(op)(ws)
        error = None
    except AgentError as exc:
        error = str(exc)
    assert store.calls == 1
    assert snapshot(outside) == home_before
    if shape != "leaf":
        assert error is not None
        one_line_about_a_link(error)


@pytest.fixture(scope="module")
def indexed(tmp_path_factory) -> Path:
    root = make_repo(tmp_path_factory.mktemp("nofollow") / "repo", FILES)
    build(load_config(root, env={}, jobs=1, embed_model="hashing"))
    return root


@pytest.fixture
def indexed_copy(indexed: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "repo"
    shutil.copytree(indexed, dest, symlinks=True)
    return dest


TOOL_CALLS = {
    "edit": ("edit", {"path": "pkg/sub/mod.py", "old_text": "w * h", "new_text": "h * w"}),
    "create_file": ("create_file", {"path": "pkg/sub/new.py", "content": "X = 1\n"}),
    "create_file-overwrite": (
        "create_file", {"path": "pkg/sub/mod.py", "content": "X = 1\n", "overwrite": True}
    ),
    "rename_symbol": ("rename_symbol", {"symbol": "area", "new_name": "surface"}),
}


@pytest.mark.parametrize("shape", [s for s in SHAPES if s != "leaf"])
@pytest.mark.parametrize("tool", list(TOOL_CALLS))
def test_a_swap_after_the_path_check_cannot_redirect_a_tool_write(
    indexed_copy, tmp_path, tool, shape
):
    repo = indexed_copy
    home = tmp_path / "home"
    for rel in ("pkg/sub/mod.py", "pkg/sub/new.py", "pkg/sub/use.py", "pkg/top.py"):
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(f"HOME {rel}\n")
    home_before = snapshot(home)
    # The tool records a file, then the workspace checks the path again and records once more
    # just before writing (call 2): the swap lands after both checks.
    store = SwapAtRecord(tmp_path / "cp", lambda: SHAPES[shape](repo, home), at=2)
    ctx = ToolContext.create(
        load_config(repo, env={}, jobs=1, embed_model="hashing"),
        granted=("read", "write"), checkpoints=store, run_id="r1",
    )
    name, args = TOOL_CALLS[tool]
    result = ToolRegistry(ALL_TOOLS).call(name, args, ctx)
    assert store.calls >= 2
    assert snapshot(home) == home_before
    assert not result.ok
    one_line_about_a_link(result.error)


# -- a link with an ordinary name to a deny-listed file -------------------------------------------

MARKERS = {
    ".env": "leakmarker_dotenv",
    "conf/.aws/config.py": "leakmarker_aws",
    "home/.ssh/id_rsa": "leakmarker_ssh",
}


def _secret_tree(base: Path, as_git: bool) -> Path:
    root = base / "repo"
    files = {
        "pkg/__init__.py": "",
        "pkg/real.py": "def visiblemarker_plain():\n    return 1\n",
        ".env": f"def {MARKERS['.env']}():\n    return 'TOKEN'\n",
        "conf/.aws/config.py": f"def {MARKERS['conf/.aws/config.py']}():\n    return 'KEY'\n",
        ".gitignore": "conf/\n",
    }
    if as_git:
        make_repo(root, files, commit=False)
    else:
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
    ssh = base / "home/.ssh"
    ssh.mkdir(parents=True)
    (ssh / "id_rsa").write_text(f"def {MARKERS['home/.ssh/id_rsa']}():\n    return 'PRIVATE'\n")
    (root / "notes.py").symlink_to(".env")  # leaf, inside the tree
    (root / "pkg/settings.py").symlink_to("../notes.py")  # a chain ending at .env
    (root / "keys.py").symlink_to(ssh / "id_rsa")  # leaf, outside the tree
    (root / "docs").symlink_to("conf/.aws", target_is_directory=True)  # a directory component
    (root / "home_ssh").symlink_to(ssh, target_is_directory=True)  # a directory outside
    (root / "plain.py").symlink_to("pkg/real.py")  # an ordinary link: still indexed
    build(load_config(root, env={}, jobs=1, embed_model="hashing"), embed=True)
    return root


@pytest.fixture(scope="module", params=["git", "walk"])
def secret_tree(request, tmp_path_factory) -> Path:
    return _secret_tree(tmp_path_factory.mktemp(f"secret-{request.param}"), request.param == "git")


def _everything(result) -> str:
    return "\n".join([result.output, result.error or "", json.dumps(result.data, default=str)])


def test_discovery_counts_links_to_secrets_and_keeps_ordinary_links(secret_tree):
    config = load_config(secret_tree, env={}, jobs=1)
    found = discover(config, skip_unparsable=True)
    paths = {f.path for f in found.files}
    assert "plain.py" in paths and "pkg/real.py" in paths
    assert not paths & {"notes.py", "pkg/settings.py", "keys.py", "docs/config.py"}
    assert found.skipped.get("link_to_secret", 0) >= 2  # notes.py, pkg/settings.py (docs/ in walk)
    assert found.skipped.get("symlink_outside", 0) >= 1  # keys.py


@pytest.mark.parametrize(
    "call",
    [
        *[("search_code", {"query": m, "mode": mode}) for m in MARKERS.values()
          for mode in ("lexical", "hybrid")],
        *[("find_symbol", {"name": m}) for m in MARKERS.values()],
        *[("find_references", {"name": m}) for m in MARKERS.values()],
        *[("get_context", {"query": f"{m} function"}) for m in MARKERS.values()],
        *[("read_span", {"path": p}) for p in
          ("notes.py", "pkg/settings.py", "keys.py", "docs/config.py", "home_ssh/id_rsa")],
        ("list_dir", {"path": ".", "depth": 3}),
    ],
    ids=lambda c: c if isinstance(c, str) else None,
)
def test_no_tool_shows_a_secret_reached_through_a_link(secret_tree, call):
    ctx = ToolContext.create(load_config(secret_tree, env={}, jobs=1), granted=("read",))
    result = ToolRegistry((*ALL_TOOLS, GET_CONTEXT)).call(*call, ctx)
    text = _everything(result)
    # The query may echo a marker's name; what must never come back is the secret's content.
    for secret in ("'TOKEN'", "'KEY'", "'PRIVATE'", *(f"def {m}" for m in MARKERS.values())):
        assert secret not in text, (call, text[:500])


def test_an_ordinary_link_is_still_searchable(secret_tree):
    """The control: the tests above can tell a hidden result from a missing one."""
    ctx = ToolContext.create(load_config(secret_tree, env={}, jobs=1), granted=("read",))
    result = ToolRegistry(ALL_TOOLS).call(
        "search_code", {"query": "visiblemarker_plain", "mode": "lexical"}, ctx
    )
    assert result.ok and "def visiblemarker_plain" in result.output


@pytest.mark.parametrize(
    "rel,hidden",
    [
        ("notes.py", True), ("pkg/settings.py", True), ("keys.py", True),
        ("docs/config.py", True), ("home_ssh/id_rsa", True), ("plain.py", False),
        ("pkg/real.py", False),
    ],
)
def test_tools_check_the_resolved_target_against_the_deny_list(secret_tree, rel, hidden):
    assert Workspace(secret_tree).is_hidden(rel) is hidden


# -- FIFOs, sockets and devices -------------------------------------------------------------------


def _make_special(repo: Path, kind: str, rel: str) -> Callable[[], None]:
    """Put a ``kind`` at ``rel`` (replacing what is there); returns a clean-up that unblocks a
    reader stuck on it."""
    p = repo / rel
    if p.exists() or p.is_symlink():
        p.unlink()
    if kind == "fifo":
        os.mkfifo(p)
        return _unblocker(p)
    if kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(p))
        return sock.close
    if kind == "device":
        try:
            os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 5))  # a /dev/zero
        except PermissionError:
            pytest.skip("mknod needs CAP_MKNOD; the link-to-/dev/zero case covers devices")
        return lambda: None
    if kind == "fifo-link":
        os.mkfifo(repo / "pipe")
        p.symlink_to("../../pipe")
        return _unblocker(repo / "pipe")
    if kind == "dev-zero-link":
        p.symlink_to("/dev/zero")
        return lambda: None
    raise ValueError(kind)


def _unblocker(p: Path) -> Callable[[], None]:
    def unblock() -> None:
        # A reader blocked in open() returns once a writer opens the other end; with no reader
        # the open fails (ENXIO), which is fine: nobody is waiting.
        with contextlib.suppress(OSError):
            os.close(os.open(p, os.O_WRONLY | os.O_NONBLOCK))

    return unblock


def _call_bounded(fn: Callable[[], object], unblock: Callable[[], None], limit: float = 10.0):
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test thread
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(limit)
    blocked = t.is_alive()
    unblock()
    t.join(5)
    assert not blocked, f"the call blocked for {limit} s"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["result"]


SPECIALS = ["fifo", "socket", "device", "fifo-link", "dev-zero-link"]
SPECIAL_CALLS = {
    "read_span": ("read_span", {"path": "pkg/sub/use.py"}),
    "list_dir": ("list_dir", {"path": "pkg/sub/use.py"}),
    "edit": ("edit", {"path": "pkg/sub/use.py", "old_text": "area", "new_text": "x"}),
    "create_file": (
        "create_file", {"path": "pkg/sub/use.py", "content": "X = 1\n", "overwrite": True}
    ),
    # Reads each referencing file's line from disk: a FIFO in place of one must not hang it.
    "find_references": ("find_references", {"name": "area"}),
}


@pytest.mark.parametrize("kind", SPECIALS)
@pytest.mark.parametrize("tool", list(SPECIAL_CALLS))
def test_special_files_fail_at_once_with_one_line(indexed_copy, kind, tool):
    repo = indexed_copy
    unblock = _make_special(repo, kind, "pkg/sub/use.py")
    ctx = ToolContext.create(
        load_config(repo, env={}, jobs=1, embed_model="hashing"),
        granted=("read", "write"), run_id="r1",
    )
    name, args = SPECIAL_CALLS[tool]
    result = _call_bounded(lambda: ToolRegistry(ALL_TOOLS).call(name, args, ctx), unblock)
    if tool == "find_references":
        assert result.ok  # the references still come back, without that file's line
        return
    assert not result.ok, result.output
    assert "\n" not in result.error.strip(), result.error
    assert "Traceback" not in _everything(result)
    if tool in ("read_span", "list_dir") and kind in ("fifo", "socket", "device"):
        assert {"fifo": "FIFO", "socket": "socket", "device": "device"}[kind] in result.error


# -- repoctx's own configuration ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,args",
    [
        ("create_file", {"path": ".repoctx.toml", "content": "[agent]\nsandbox = 'off'\n",
                         "overwrite": True}),
        ("create_file", {"path": "pkg/.repoctx.toml", "content": "[agent]\nnetwork = true\n"}),
        ("create_file", {"path": ".repoctx/config.toml", "content": "x = 1\n"}),
        ("create_file", {"path": "cfg.toml", "content": "[agent]\nsandbox = 'off'\n",
                         "overwrite": True}),
        ("edit", {"path": "cfg.toml", "old_text": "jobs = 1", "new_text": "jobs = 2"}),
        ("edit", {"path": ".repoctx.toml", "old_text": "jobs = 1", "new_text": "jobs = 2"}),
    ],
)
def test_the_tools_may_not_write_repoctx_config(repo, name, args):
    (repo / ".repoctx.toml").write_text("jobs = 1\n")
    (repo / "cfg.toml").symlink_to(".repoctx.toml")  # an ordinary name for the config
    before = snapshot(repo)
    ctx = ToolContext.create(load_config(repo, env={}, jobs=1), granted=("read", "write"))
    result = ToolRegistry(ALL_TOOLS).call(name, args, ctx)
    assert not result.ok, result.output
    assert "repoctx" in result.error and "\n" not in result.error.strip()
    after = snapshot(repo)
    after.pop(".repoctx", None)  # the checkpoint store may have been made
    assert {k: v for k, v in after.items() if not k.startswith(".repoctx/")} == {
        k: v for k, v in before.items() if not k.startswith(".repoctx/")
    }
    git(repo, "status", "--short")  # the repository is intact


# -- instruction files read into the agent's prompt -----------------------------------------------


@pytest.mark.parametrize("kind", ["outside", "secret", "fifo", "dev-zero", "chain-outside"])
def test_instruction_files_never_bring_in_what_a_link_or_fifo_points_to(repo, outside, kind):
    (outside / ".netrc").write_text("machine example.com password leakmarker_netrc\n")
    agents = repo / "AGENTS.md"
    (repo / ".env").write_text("TOKEN=leakmarker_env\n")
    if kind == "outside":
        agents.symlink_to(outside / ".netrc")
    elif kind == "secret":
        agents.symlink_to(".env")
    elif kind == "fifo":
        os.mkfifo(agents)
    elif kind == "dev-zero":
        agents.symlink_to("/dev/zero")
    else:
        (repo / "docs").symlink_to(outside, target_is_directory=True)
        agents.symlink_to("docs/.netrc")
    (repo / "CONTRIBUTING.md").write_text("Run pytest.\n")
    unblock = _unblocker(agents) if kind == "fifo" else (lambda: None)
    got = _call_bounded(lambda: read_instructions(repo), unblock)
    assert "leakmarker" not in got.text and "\0" not in got.text
    assert got.files == ("CONTRIBUTING.md",)  # the ordinary file is still read


def test_an_instruction_file_linked_inside_the_workspace_is_read(repo):
    (repo / "docs").mkdir()
    (repo / "docs/AGENTS.md").write_text("Keep functions small.\n")
    (repo / "AGENTS.md").symlink_to("docs/AGENTS.md")
    assert "Keep functions small." in read_instructions(repo).text


# -- the JUnit report of run_tests, written where the repository's code runs -----------------------

JUNIT = (
    '<?xml version="1.0"?><testsuite name="pytest" tests="1" failures="1">'
    '<testcase classname="tests.test_a" name="test_a" file="tests/test_a.py" line="1">'
    '<failure message="leakmarker_junit">leakmarker_junit</failure></testcase></testsuite>'
)
CONFTEST = '''
import os


def pytest_unconfigure(config):
    # Runs after the junitxml plugin wrote its report: put something else in its place.
    path = config.option.xmlpath
    os.unlink(path)
    if {kind!r} == "fifo":
        os.mkfifo(path)
        with open("fifo_path.txt", "w") as fh:
            fh.write(path)
    else:
        os.symlink({target!r}, path)
'''


@pytest.mark.parametrize("kind", ["link-outside", "fifo", "dev-zero"])
def test_run_tests_never_reads_through_what_the_tests_put_at_the_report(tmp_path, kind):
    home = tmp_path / "home"
    home.mkdir()
    (home / "report.xml").write_text(JUNIT)  # a readable file outside, shaped like a report
    target = {"link-outside": str(home / "report.xml"), "dev-zero": "/dev/zero"}.get(kind, "")
    repo = make_repo(tmp_path / "repo", {
        "tests/test_a.py": "def test_a():\n    assert True\n",
        "conftest.py": CONFTEST.format(kind=kind, target=target),
    })
    ctx = ToolContext.create(load_config(repo, env={}, jobs=1), granted=("read", "execute"))

    def unblock() -> None:
        if (repo / "fifo_path.txt").exists():
            _unblocker(Path((repo / "fifo_path.txt").read_text()))()

    result = _call_bounded(
        lambda: ToolRegistry(ALL_TOOLS).call("run_tests", {"scope": "full"}, ctx), unblock, 60
    )
    assert "leakmarker_junit" not in _everything(result)
    assert result.ok and result.data["passed"] is True  # told by pytest's exit code and summary


# -- an indexed file replaced after the build: results are read from disk at query time ----------

ORDINARY = "def ordinary_helper():\n    return 'plain words here'\n"


def _replace_after_index(repo: Path, home: Path, kind: str) -> Callable[[], None]:
    """Replace the indexed pkg/notes.py (what a command can do between two tool calls)."""
    notes = repo / "pkg/notes.py"
    notes.unlink()
    (repo / ".env").write_text("def ordinary_helper():\n    return 'leakmarker_env_swap'\n")
    (home / "id_rsa").write_text("def ordinary_helper():\n    return 'leakmarker_home_swap'\n")
    if kind == "link-to-secret":
        notes.symlink_to("../.env")
    elif kind == "link-outside":
        notes.symlink_to(home / "id_rsa")
    elif kind == "directory-link-outside":
        (repo / "pkg").rename(repo / "pkg.orig")
        (home / "pkg").mkdir()
        (home / "pkg/notes.py").write_text((home / "id_rsa").read_text())
        (repo / "pkg").symlink_to(home / "pkg", target_is_directory=True)
    elif kind == "fifo":
        os.mkfifo(notes)
        return _unblocker(notes)
    elif kind == "dev-zero-link":
        notes.symlink_to("/dev/zero")
    return lambda: None


@pytest.mark.parametrize(
    "kind", ["link-to-secret", "link-outside", "directory-link-outside", "fifo", "dev-zero-link"]
)
@pytest.mark.parametrize(
    "call",
    [("search_code", {"query": "ordinary_helper plain words", "mode": "lexical"}),
     ("get_context", {"query": "ordinary_helper plain words"})],
    ids=["search_code", "get_context"],
)
def test_results_read_at_query_time_never_follow_a_swapped_link_or_wait_on_a_fifo(
    tmp_path, kind, call
):
    repo = make_repo(tmp_path / "repo", {"pkg/__init__.py": "", "pkg/notes.py": ORDINARY})
    build(load_config(repo, env={}, jobs=1, embed_model="hashing"))
    home = tmp_path / "home"
    home.mkdir()
    unblock = _replace_after_index(repo, home, kind)
    ctx = ToolContext.create(load_config(repo, env={}, jobs=1), granted=("read",))
    reg = ToolRegistry((*ALL_TOOLS, GET_CONTEXT))
    result = _call_bounded(lambda: reg.call(*call, ctx), unblock)
    assert "leakmarker" not in _everything(result)


@pytest.fixture
def walk_only(monkeypatch):
    """The component walk a kernel without openat2 gets, instead of openat2."""
    from indexer.safety import nofollow

    monkeypatch.setattr(nofollow._OPENAT2, "usable", False)


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("op", ["write", "create-deep", "delete"])
def test_the_component_walk_holds_as_openat2_does(walk_only, repo, outside, tmp_path, op, shape):
    from agent.safe_fs import openat2_available

    assert not openat2_available()
    test_a_swap_after_the_path_check_cannot_redirect_a_workspace_write(
        repo, outside, tmp_path, op, shape
    )


@pytest.mark.parametrize("shape", list(SHAPES))
def test_undo_holds_with_the_component_walk(walk_only, repo, outside, tmp_path, shape):
    test_undo_after_a_swap_never_touches_what_the_link_points_to(repo, outside, tmp_path, shape)


def test_openat2_is_used_where_the_kernel_has_it():
    """Tells which path the other tests took here: on Linux ≥ 5.6 without a seccomp filter
    refusing it, openat2."""
    from agent.safe_fs import openat2_available

    release = tuple(int(x) for x in os.uname().release.split(".")[:2] if x.isdigit())
    if release < (5, 6):
        pytest.skip(f"kernel {os.uname().release} has no openat2 (5.6+): the walk is used")
    assert openat2_available()


# -- the parse worker's read, after discovery ------------------------------------------------------


@pytest.mark.parametrize("kind", ["link-to-secret", "link-outside", "fifo", "dev-zero-link"])
def test_the_parse_workers_read_refuses_what_was_swapped_in_after_discovery(tmp_path, kind):
    """Discovery saw a regular file; by the time a parse worker reads it, it is something else."""
    from indexer.parse.worker import load_file

    repo = make_repo(tmp_path / "repo", {"pkg/notes.py": ORDINARY})
    home = tmp_path / "home"
    home.mkdir()
    unblock = _replace_after_index(repo, home, kind)
    result = _call_bounded(lambda: load_file(str(repo), "pkg/notes.py", None), unblock)
    assert not isinstance(result, tuple), "the swapped-in content was read"
    assert result.status == "skipped:unreadable" and "leakmarker" not in repr(result)


# -- the MCP server's sync marker in the index directory ------------------------------------------


def test_the_mcp_servers_sync_marker_never_writes_through_a_planted_link(repo, outside):
    from agent.tools.session import ToolSession
    from cli.mcp_live import SYNC_PREFIX, LiveIndex, ServeOptions

    config = load_config(repo, env={}, jobs=1)
    config.index_path.mkdir(parents=True, exist_ok=True)
    victim = outside / "pkg/top.py"
    before = victim.read_bytes()
    # The marker names are predictable: plant a link at the next one.
    (config.index_path / f"{SYNC_PREFIX}{os.getpid()}-1").symlink_to(victim)
    live = LiveIndex(config, ServeOptions(), ToolSession())
    live._catch_up(0.1)
    assert victim.read_bytes() == before


@pytest.mark.parametrize(
    "call",
    [("search_code", {"query": "ordinary_helper plain words", "mode": "lexical"}),
     ("get_context", {"query": "ordinary_helper plain words"})],
    ids=["search_code", "get_context"],
)
def test_a_link_swapped_in_to_a_file_only_agent_deny_names_is_not_shown(tmp_path, call):
    """The retrieval layer knows only the built-in deny list; the tools and context packs check
    the resolved target against the whole list, `agent.deny` included."""
    repo = make_repo(tmp_path / "repo", {
        "pkg/__init__.py": "", "pkg/notes.py": ORDINARY,
        ".repoctx.toml": '[agent]\ndeny = ["*.secret"]\n',
    })
    build(load_config(repo, env={}, jobs=1, embed_model="hashing"))
    (repo / "vault.secret").write_text(
        "def ordinary_helper():\n    return 'leakmarker_agent_deny'\n"
    )
    (repo / "pkg/notes.py").unlink()
    (repo / "pkg/notes.py").symlink_to("../vault.secret")
    ctx = ToolContext.create(load_config(repo, env={}, jobs=1), granted=("read",))
    result = ToolRegistry((*ALL_TOOLS, GET_CONTEXT)).call(*call, ctx)
    assert "leakmarker" not in _everything(result)


@pytest.mark.parametrize("planted", ["step", "run", "blobs", "store"])
def test_the_checkpoint_store_never_writes_its_own_files_through_a_planted_link(
    repo, outside, tmp_path, planted
):
    """Where the sandbox has no mount namespace a command can plant links in the index
    directory: the next checkpoint must not write a manifest or a blob through one."""
    store = CheckpointStore(tmp_path / "cp", repo)
    ws = Workspace(repo, recorder=store)
    store.begin_step("r", 0)
    ws.write_text("pkg/top.py", "TOP = 2\n")
    target = outside / "pkg"
    if planted == "store":  # the whole store replaced by a link to a copy of it in the home
        shutil.copytree(tmp_path / "cp", outside / "pkg/cp")
        shutil.rmtree(tmp_path / "cp")
        (tmp_path / "cp").symlink_to(outside / "pkg/cp", target_is_directory=True)
    else:
        link = {"step": "r/00000001", "run": "s", "blobs": "r/00000001/blobs"}[planted]
        (tmp_path / "cp" / link).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "cp" / link).symlink_to(target, target_is_directory=True)
    home_before = snapshot(outside)
    with pytest.raises(AgentError) as info:
        store.begin_step("s" if planted == "run" else "r", 1)
        ws.write_text("pkg/sub/mod.py", "X = 1\n")
    assert snapshot(outside) == home_before
    assert "\n" not in str(info.value)
    assert (repo / "pkg/sub/mod.py").read_text() == FILES["pkg/sub/mod.py"]  # refused first


@pytest.mark.parametrize("mode", ["openat2", "walk"])
@pytest.mark.parametrize("shape", [s for s in SHAPES if s != "leaf"])
def test_a_rename_never_moves_a_file_through_a_swapped_directory(
    repo, outside, monkeypatch, mode, shape
):
    from agent.safe_fs import Beneath
    from indexer.safety import nofollow

    if mode == "walk":
        monkeypatch.setattr(nofollow._OPENAT2, "usable", False)
    (repo / "moving.py").write_text("MOVING = 1\n")
    SHAPES[shape](repo, outside)
    home_before = snapshot(outside)
    with Beneath(repo.resolve()) as base, pytest.raises(AgentError) as info:
        base.rename("moving.py", "pkg/sub/moved.py")
    assert (repo / "moving.py").exists()
    assert snapshot(outside) == home_before
    one_line_about_a_link(str(info.value))


@pytest.mark.parametrize(("mode", "name"), [
    ("walk", ".gitignore"), ("walk", "sub/.gitignore"), ("walk", ".repoctxignore"),
    ("git", ".repoctxignore"),
])
def test_an_ignore_file_that_is_a_fifo_never_hangs_discovery(tmp_path, name, mode):
    """The ignore files discovery reads itself (every layer in walk mode, .repoctxignore always):
    one that a repository or a command made a FIFO is skipped at once, the build completes.
    (A FIFO .gitignore under git is read by git: bounded by `GIT_TIMEOUT_S` instead, see
    tests/test_untrusted_git.py.)"""
    root = tmp_path / "repo"
    files = {"a.py": "def a():\n    return 1\n", "sub/b.py": "def b():\n    return 2\n"}
    if mode == "git":
        make_repo(root, files)
    else:
        root.mkdir()
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
    os.mkfifo(root / name)
    done: list[object] = []

    def run() -> None:
        done.append(discover(load_config(root, env={})))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive(), f"discovery blocked on the FIFO {name}"
    paths = {f.path for f in done[0].files}
    assert {"a.py", "sub/b.py"} <= paths
