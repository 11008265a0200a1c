"""No repository git configuration runs on the host (issue 38, item 3).

Each test plants, in a real repository made in tmp_path, configuration whose programs write a
marker — every program-running family at once (filters, diff and merge drivers, textconv,
fsmonitor, hooks, aliases, pagers, signing, ssh, tools, config-based hooks …), in one of many
shapes git accepts (includes in the work tree, `includeIf`, worktree configuration, a BOM,
CRLF, continuation lines, odd case, subsections with quotes, backslashes, brackets or
non-UTF-8 bytes …). A control run of plain git first proves the shape is live (the marker
appears); then every host-side git path of repoctx runs — discovery and history in `index
build`, `snapshot push`/`pull`, the end-of-run `git diff --stat`, `agent run --commit` — and
the marker must stay absent while each path still does its job.

Per-call cost of `gitsafe.git_env` (median of 200 calls, this repository, 2 shared cores):
asking git (`git config --list -z`) 1.4 ms; the hand-written parser it replaces 0.03 ms from
its mtime/size cache, 0.09 ms uncached; `git diff --stat HEAD` itself 31 ms.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent.run_result import CommitError, commit_run, git_stat
from cli.main import cli
from indexer.config import load_config
from indexer.errors import RepoctxError
from indexer.history.store import history_status
from indexer.ops.snapshot import pull, push
from indexer.safety import gitsafe
from tests.conftest import git, make_repo

REPO = Path(__file__).resolve().parents[1]

# Programs a hostile configuration names; each appends its name to the marker.
FILTERS = ("clean", "smudge", "process")
PROGRAMS = (*FILTERS, "textconv", "external", "command", "merge", "fsmonitor", "hook", "alias",
            "pager", "gpg", "ssh", "credential", "altrefs", "uploadpack", "difftool", "tar",
            "difffilter", "hookcmd", "update", "sendemail")


def _scripts(evil: Path, marker: Path) -> None:
    (evil / "hooks").mkdir(parents=True)
    for name in PROGRAMS:
        tail = {"clean": "exec cat", "smudge": "exec cat", "textconv": 'exec cat "$1"',
                # fsmonitor: a failure, so git scans the tree itself (an empty answer would
                # tell the control run that nothing changed)
                "gpg": "exit 1", "fsmonitor": "exit 1"}.get(name, "exit 0")
        script = evil / name
        script.write_text(f'#!/bin/sh\necho {name} >> "{marker}"\n{tail}\n')
        script.chmod(0o755)
    for hook in ("pre-commit", "commit-msg", "prepare-commit-msg", "post-commit", "post-checkout",
                 "reference-transaction", "post-index-change", "pre-auto-gc"):
        (evil / "hooks" / hook).write_bytes((evil / "hook").read_bytes())
        (evil / "hooks" / hook).chmod(0o755)


def _entries(evil: Path, driver: bytes) -> list[tuple[str, bytes | None, str, str]]:
    """(section, subsection, key, value) of a configuration naming every program family."""
    d, p = driver, driver + b"p"
    e = str(evil)
    return [
        ("core", None, "fsmonitor", f"{e}/fsmonitor"),
        ("core", None, "hooksPath", f"{e}/hooks"),
        ("core", None, "sshCommand", f"{e}/ssh"),
        ("core", None, "alternateRefsCommand", f"{e}/altrefs"),
        ("filter", d, "clean", f"{e}/clean"),
        ("filter", d, "smudge", f"{e}/smudge"),
        ("filter", d, "required", "true"),
        ("filter", p, "process", f"{e}/process"),
        ("diff", None, "external", f"{e}/external"),
        ("diff", d, "textconv", f"{e}/textconv"),
        ("diff", d, "command", f"{e}/command"),
        ("merge", d, "driver", f"{e}/merge"),
        ("alias", None, "st", f"!{e}/alias"),
        ("pager", None, "diff", f"{e}/pager"),
        ("gpg", None, "program", f"{e}/gpg"),
        ("commit", None, "gpgSign", "true"),
        ("credential", d, "helper", f"{e}/credential"),
        ("remote", d, "uploadpack", f"{e}/uploadpack"),
        ("difftool", d, "cmd", f"{e}/difftool"),
        ("tar", d, "command", f"{e}/tar"),
        ("interactive", None, "diffFilter", f"{e}/difffilter"),
        ("hook", d, "command", f"{e}/hookcmd"),
        ("hook", d, "event", "pre-commit"),
        ("submodule", d, "update", f"!{e}/update"),
        ("sendemail", None, "toCmd", f"{e}/sendemail"),
    ]


def _quote(sub: bytes) -> bytes:
    return b'"' + sub.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'


def render(entries, *, header=None, line=None, nl=b"\n") -> bytes:
    """Git configuration text for ``entries``; ``header(section, sub)`` and
    ``line(key, value, first)`` give a shape its own spelling."""
    header = header or (lambda s, sub: b"[" + s.encode() + (b" " + _quote(sub) if sub is not None
                                                             else b"") + b"]")
    line = line or (lambda k, v, first: b"\t" + k.encode() + b" = " + v.encode())
    out, last = [], None
    for section, sub, key, value in entries:
        first = (section, sub) != last
        if first:
            out.append(header(section, sub))
            last = (section, sub)
        out.append(line(key, value, first))
    return nl.join(out) + nl


def _same_line(entries) -> bytes:
    """`[section "sub"] key = value`: the first key on the header's line."""
    out, last = [], None
    for section, sub, key, value in entries:
        text = f"{key} = {value}".encode()
        if (section, sub) != last:
            last = (section, sub)
            head = b"[" + section.encode() + (b" " + _quote(sub) if sub is not None else b"") + b"]"
            out.append(head + b" " + text)
        else:
            out.append(b"\t" + text)
    return b"\n".join(out) + b"\n"


class Shape:
    """Where and how the hostile configuration is written."""

    def __init__(self, name: str, driver: bytes = b"evil", *, text: Callable | None = None,
                 place: Callable | None = None) -> None:
        self.name, self.driver = name, driver
        self.text = text or (lambda entries: render(entries))
        self.place = place or _append


def _append(repo: Path, text: bytes) -> None:
    with (repo / ".git" / "config").open("ab") as fh:
        fh.write(text)


def _bom(repo: Path, text: bytes) -> None:
    cfg = repo / ".git" / "config"
    cfg.write_bytes(b"\xef\xbb\xbf" + cfg.read_bytes() + text)


def _include(rel: str, *, header: bytes = b"[include]", prefix: bytes = b"") -> Callable:
    def place(repo: Path, text: bytes) -> None:
        target = repo / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(prefix + text)
        path = os.path.relpath(target, repo / ".git").encode()
        _append(repo, header.replace(b"REPO", str(repo).encode()) + b"\n\tpath = " + path + b"\n")
    return place


def _nested(repo: Path, text: bytes) -> None:
    """An include (BOM, CRLF) that includes another by a path relative to itself."""
    (repo / "cfg" / "deeper").mkdir(parents=True)
    (repo / "cfg" / "deeper" / "b.inc").write_bytes(text)
    (repo / "cfg" / "a.inc").write_bytes(b"\xef\xbb\xbf[include]\r\n\tpath = deeper/b.inc\r\n")
    _append(repo, b"[include]\n\tpath = ../cfg/a.inc\n")


def _worktree_config(repo: Path, text: bytes) -> None:
    git(repo, "config", "core.repositoryformatversion", "1")
    git(repo, "config", "extensions.worktreeConfig", "true")
    (repo / ".git" / "config.worktree").write_bytes(text)


SHAPES = [
    Shape("plain"),
    Shape("bom", place=_bom),
    Shape("crlf", text=lambda e: render(e, nl=b"\r\n")),
    Shape("key_on_header_line", text=_same_line),
    Shape("value_on_continuation_line",
          text=lambda e: render(e, line=lambda k, v, f: b"\t" + k.encode() + b" = \\\n\t\t"
                                + v.encode())),
    Shape("continuation_inside_value",
          text=lambda e: render(e, line=lambda k, v, f: b"\t" + k.encode() + b" = " + v[:6].encode()
                                + b"\\\n" + v[6:].encode())),
    Shape("odd_case", b"EvIl",
          text=lambda e: render(e, header=lambda s, sub: b"[" + s.upper().encode()
                                + (b" " + _quote(sub) if sub is not None else b"") + b"]",
                                line=lambda k, v, f: b"  " + k.swapcase().encode() + b"=" + v.encode())),
    Shape("dotted_subsection",
          text=lambda e: render(e, header=lambda s, sub: b"[" + s.encode()
                                + (b"." + sub if sub is not None else b"") + b"]")),
    Shape("quotes_and_backslashes", b'e"v\\il'),
    Shape("bracket_in_subsection", b"ev]il"),
    Shape("non_utf8_subsection", b"\xff\xfeevil"),
    Shape("comments_and_quoted_values",
          text=lambda e: render(e, header=lambda s, sub: b"\t [" + s.encode()
                                + (b" " + _quote(sub) if sub is not None else b"")
                                + b"] ; ]\"[x] # not a header",
                                line=lambda k, v, f: b"\t" + k.encode() + b' = "' + v.encode()
                                + b'" # ; trailing')),
    Shape("include_in_worktree", place=_include("evil.inc")),
    Shape("include_bom_crlf", text=lambda e: render(e, nl=b"\r\n"),
          place=_include("sub/dir/evil.inc", prefix=b"\xef\xbb\xbf")),
    Shape("include_of_include", text=lambda e: render(e, nl=b"\r\n"), place=_nested),
    Shape("includeif_gitdir", place=_include("evil.inc", header=b'[includeIf "gitdir:REPO/"]')),
    Shape("includeif_gitdir_i", place=_include("evil.inc", header=b'[includeIf "gitdir/i:**/"]')),
    Shape("includeif_onbranch", place=_include("evil.inc", header=b'[includeIf "onbranch:**"]')),
    Shape("worktree_config", place=_worktree_config),
]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user whose own (trusted) git configuration holds an identity only."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = t\n\temail = t@example.com\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    for name in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_COUNT",
                 "GIT_CONFIG_PARAMETERS", "GIT_DIR", "GIT_WORK_TREE"):
        monkeypatch.delenv(name, raising=False)
    return home


CALC = "def add(a, b):\n    return a + b\n"


def _repo(tmp_path: Path, driver: bytes) -> Path:
    """Two commits (so history has a diff to read) of files the hostile drivers apply to."""
    repo = make_repo(tmp_path / "repo", {"pkg/__init__.py": "", "pkg/calc.py": CALC,
                                        "z.txt": "alpha\n"})
    (repo / "pkg" / "calc.py").write_text(CALC.replace("add", "sum"))
    git(repo, "commit", "-qam", "rename")
    attrs = (b"*.py filter=" + driver + b" diff=" + driver + b" merge=" + driver
             + b"\n*.txt filter=" + driver + b"p\n")
    (repo / ".gitattributes").write_bytes(attrs)
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-qm", "attributes")
    return repo


def _modify(repo: Path) -> None:
    # Same sizes, an older mtime: git can only tell by hashing each file, through the clean
    # filter. (z.txt sorts last: its failing process filter ends the control run's git.)
    (repo / "pkg" / "calc.py").write_text(CALC.replace("add", "sum").replace("a + b", "b + a"))
    (repo / "z.txt").write_text("alphb\n")
    for path in (repo / "pkg" / "calc.py", repo / "z.txt"):
        os.utime(path, (path.stat().st_atime - 100, path.stat().st_mtime - 100))


def _plant(tmp_path: Path, shape: Shape) -> tuple[Path, Path, Path]:
    evil, marker = tmp_path / "evil", tmp_path / "ran"
    _scripts(evil, marker)
    repo = _repo(tmp_path, shape.driver)
    shape.place(repo, shape.text(_entries(evil, shape.driver)))
    _modify(repo)
    return repo, evil, marker


def _ran(marker: Path) -> list[str]:
    return marker.read_text().split() if marker.exists() else []


def _control(repo: Path, marker: Path) -> None:
    """Plain git, as the user would run it: the shape is live (git runs its drivers)."""
    subprocess.run(["git", "diff", "--stat", "HEAD"], cwd=repo, capture_output=True,
                   env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"}, check=False)
    assert {"clean", "textconv"} & set(_ran(marker)), (
        f"git did not run this shape's drivers: {_ran(marker)} — the shape tests nothing")
    marker.unlink()


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_no_host_side_git_path_runs_what_the_repository_configures(
    tmp_path: Path, home: Path, shape: Shape
):
    repo, evil, marker = _plant(tmp_path, shape)
    _control(repo, marker)

    # index build: discovery (ls-files, check-ignore) and history (log -p, rev-parse …)
    result = CliRunner().invoke(cli, ["index", "build", str(repo), "--no-embed", "-q", "-j", "1"])
    assert result.exit_code == 0, result.output
    cfg = load_config(repo, env={}, jobs=1)
    assert history_status(cfg.index_path)["state"] == "ok", history_status(cfg.index_path)
    assert _ran(marker) == []

    # the end of `agent run`: git diff --stat of the run's files
    stat = git_stat(repo, ["pkg/calc.py", "z.txt"])
    assert "pkg/calc.py" in stat and "z.txt" in stat, stat
    assert _ran(marker) == []

    # snapshot push (HEAD, the dirty check, rev-list) and pull (ancestors, distance)
    snaps = str(tmp_path / "snaps")
    pushed = push(cfg, snaps, allow_dirty=True)
    assert pushed["dirty"] is True
    assert pull(cfg, snaps)["distance"] == 0
    assert _ran(marker) == []

    # agent run --commit: switch -c, add, commit, rev-parse
    done = commit_run(repo, "r1", "swap operands", "swapped", ["pkg/calc.py", "z.txt"], [])
    assert git(repo, "show", f"{done.commit}:pkg/calc.py").endswith("return b + a\n")
    assert _ran(marker) == []

    # git itself confirms: every program-running key an untrusted file sets is, in the
    # environment repoctx gives git, last set at command level (to a value that runs nothing)
    listed = subprocess.run(["git", "config", "--list", "--show-scope", "-z"], cwd=repo,
                            env=gitsafe.git_env(repo), capture_output=True, check=True).stdout
    last: dict[bytes, bytes] = {}
    for scope, pair in zip(*[iter(listed.split(b"\0")[:-1])] * 2, strict=True):
        last[pair.split(b"\n", 1)[0]] = scope
    expected = _expected_keys(shape)
    assert {k: last.get(k) for k in expected} == dict.fromkeys(expected, b"command")
    alias = subprocess.run(["git", "st"], cwd=repo, env=gitsafe.git_env(repo),
                           capture_output=True, check=False)
    assert alias.returncode != 0 and _ran(marker) == []


def _expected_keys(shape: Shape) -> list[bytes]:
    keys = []
    for section, sub, key, _ in _entries(Path("/x"), shape.driver):
        if (section, key) in (("core", "fsmonitor"), ("core", "hooksPath"), ("hook", "event")):
            continue  # ALWAYS / not a program
        if sub is not None and shape.name == "dotted_subsection":
            sub = sub.lower()
        middle = b"." + sub if sub is not None else b""
        keys.append(section.encode() + middle + b"." + key.lower().encode())
    return keys


def test_a_same_size_rewrite_of_an_included_file_is_seen(tmp_path: Path, home: Path):
    """Same size, same mtime, same inode: the second call still neutralises the new driver."""
    evil, marker = tmp_path / "evil", tmp_path / "ran"
    _scripts(evil, marker)
    repo = _repo(tmp_path, b"bbbb")
    inc = repo / "evil.inc"
    inc.write_text(f'[filter "aaaa"]\n\tclean = {evil}/clean\n[diff "aaaa"]\n\ttextconv = {evil}/textconv\n')
    _append(repo, b"[include]\n\tpath = ../evil.inc\n")
    _modify(repo)
    assert "pkg/calc.py" in git_stat(repo, ["pkg/calc.py"])
    assert _ran(marker) == []
    st = inc.stat()
    with inc.open("r+b") as fh:  # in place: same inode
        fh.write(inc.read_bytes().replace(b"aaaa", b"bbbb"))
    os.utime(inc, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = inc.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)
    assert "pkg/calc.py" in git_stat(repo, ["pkg/calc.py"])
    assert _ran(marker) == []
    _control(repo, marker)  # the rewritten file is live


_PROBE = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from indexer.safety import gitsafe
gitsafe.LIST_TIMEOUT_S = 2.0
from pathlib import Path
from agent.run_result import CommitError, commit_run, git_stat
repo = Path(sys.argv[2])
out = {}
t0 = time.monotonic()
try:
    gitsafe.git_env(repo)
    out["git_env"] = "returned"
except gitsafe.GitConfigError as exc:
    out["git_env"] = str(exc)
out["stat"] = git_stat(repo, ["pkg/calc.py"])
try:
    commit_run(repo, "r1", "t", "s", ["pkg/calc.py"], [])
    out["commit"] = "committed"
except CommitError as exc:
    out["commit"] = str(exc)
out["seconds"] = time.monotonic() - t0
print(json.dumps(out))
"""


def _bounded(argv: list[str], limit: float, what: str) -> subprocess.CompletedProcess:
    """``argv`` in a process group of its own, killed whole past ``limit`` (a git blocked on
    a FIFO would outlive its parent)."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          cwd=REPO, start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            pytest.fail(f"{what} did not return within {limit} s")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _probe(repo: Path, limit: float) -> dict:
    """git_env, the end-of-run stat and --commit in a child (its hang cannot hang the tests)."""
    proc = _bounded([sys.executable, "-c", _PROBE, str(REPO), str(repo)], limit, "git_env")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _cli(repo: Path, limit: float) -> subprocess.CompletedProcess:
    code = ("import sys; sys.argv[0] = 'repoctx'; from indexer.parse import git_listing; from indexer.safety import gitsafe; "
            "gitsafe.LIST_TIMEOUT_S = 2.0; git_listing.GIT_TIMEOUT_S = 2.0; "
            "from cli.main import main; main()")
    return _bounded([sys.executable, "-c", code, "index", "build", str(repo), "--no-embed", "-q",
                     "-j", "1"], limit, "`repoctx index build`")


@pytest.mark.parametrize("target", ["fifo", "include_of_fifo"])
def test_an_include_of_a_fifo_fails_closed_in_bounded_time(tmp_path: Path, home: Path, target: str):
    evil, marker = tmp_path / "evil", tmp_path / "ran"
    _scripts(evil, marker)
    repo = _repo(tmp_path, b"evil")
    os.mkfifo(repo / "pipe")
    if target == "fifo":
        _append(repo, f'[filter "evil"]\n\tclean = {evil}/clean\n[include]\n\tpath = ../pipe\n'.encode())
    else:
        (repo / "a.inc").write_text(f'[filter "evil"]\n\tclean = {evil}/clean\n[include]\n\tpath = pipe\n')
        _append(repo, b"[include]\n\tpath = ../a.inc\n")
    _modify(repo)
    out = _probe(repo, 30)
    assert out["git_env"].startswith("git did not finish reading the configuration"), out
    assert "\n" not in out["git_env"] and out["stat"].startswith("(not shown: git did not"), out
    assert "not committed" in out["commit"] and "\n" not in out["commit"], out
    proc = _cli(repo, 60)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "did not finish reading the configuration" in proc.stderr
    assert _ran(marker) == []
    # nothing committed (plain git would block on the FIFO itself)
    assert (repo / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"


@pytest.mark.parametrize("where", ["config", "include"])
def test_a_configuration_git_rejects_fails_closed(tmp_path: Path, home: Path, where: str):
    """Whatever comes after the line git rejects, nothing runs and the error is one line."""
    evil, marker = tmp_path / "evil", tmp_path / "ran"
    _scripts(evil, marker)
    repo = _repo(tmp_path, b"evil")
    bad = f'[filter "evil"]\n\tclean = {evil}/clean\n[diff\n'.encode()
    if where == "config":
        _append(repo, bad)
    else:
        (repo / "bad.inc").write_bytes(bad)
        _append(repo, b"[include]\n\tpath = ../bad.inc\n")
    _modify(repo)
    with pytest.raises(RepoctxError, match="git rejects the configuration") as err:
        gitsafe.git_env(repo)
    assert "bad config line" in str(err.value) and "\n" not in str(err.value)
    assert git_stat(repo, ["pkg/calc.py"]).startswith("(not shown: git rejects")
    with pytest.raises(CommitError, match="not committed"):
        commit_run(repo, "r1", "t", "s", ["pkg/calc.py"], [])
    result = CliRunner().invoke(cli, ["index", "build", str(repo), "--no-embed", "-q", "-j", "1"])
    assert result.exit_code == 1 and "git rejects the configuration" in result.output
    assert _ran(marker) == []


def test_a_submodule_s_own_configuration_runs_nothing(tmp_path: Path, home: Path):
    """A submodule's git reads the submodule's configuration, which the superproject's listing
    does not show: repoctx's host-side git never starts one."""
    evil, marker = tmp_path / "evil", tmp_path / "ran"
    _scripts(evil, marker)
    sub = make_repo(tmp_path / "sub", {"f.txt": "a\n", ".gitattributes": "*.txt filter=evil\n"})
    repo = make_repo(tmp_path / "repo", {"top.txt": "top\n", "pkg/calc.py": CALC})
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "sub")
    git(repo, "commit", "-qm", "submodule")
    with (repo / ".git" / "modules" / "sub" / "config").open("a") as fh:
        fh.write(f'[filter "evil"]\n\tclean = {evil}/clean\n')
    (repo / "sub" / "f.txt").write_text("b\n")  # same size: git must hash it
    (repo / "pkg" / "calc.py").write_text(CALC.replace("a + b", "b + a"))
    subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, check=True)
    assert set(_ran(marker)) == {"clean"}  # plain git runs the submodule's filter
    marker.unlink()

    result = CliRunner().invoke(cli, ["index", "build", str(repo), "--no-embed", "-q", "-j", "1"])
    assert result.exit_code == 0, result.output
    cfg = load_config(repo, env={}, jobs=1)
    assert "pkg/calc.py" in git_stat(repo, ["pkg/calc.py", "sub"])
    assert push(cfg, str(tmp_path / "snaps"), allow_dirty=True)["dirty"] is True
    commit_run(repo, "r1", "t", "s", ["pkg/calc.py"], [])
    assert _ran(marker) == []


def test_the_user_s_own_drivers_still_run_and_win_over_the_repository_s(tmp_path: Path, home: Path):
    """A trusted global driver the repository redefines is restored (git-lfs's filter, say);
    a file the user's configuration includes from inside the repository is not trusted."""
    evil, marker = tmp_path / "evil", tmp_path / "ran"
    _scripts(evil, marker)
    trusted = home / "lfsish"
    trusted.write_text(f'#!/bin/sh\necho trusted >> "{marker}"\nexec cat\n')
    trusted.chmod(0o755)
    repo = _repo(tmp_path, b"lfsish")
    with (home / ".gitconfig").open("a") as fh:
        fh.write(f'[filter "lfsish"]\n\tclean = {trusted}\n\trequired = true\n'
                 f"[include]\n\tpath = {repo}/.user-looking.inc\n")
    (repo / ".user-looking.inc").write_text(f'[diff "lfsish"]\n\ttextconv = {evil}/textconv\n')
    _append(repo, f'[filter "lfsish"]\n\tclean = {evil}/clean\n'.encode())
    _modify(repo)
    assert "pkg/calc.py" in git_stat(repo, ["pkg/calc.py"])
    assert set(_ran(marker)) == {"trusted"}


def test_git_config_in_the_environment_does_not_blind_the_listing(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
):
    """GIT_CONFIG makes `git config` (only) read another file: the listing ignores it."""
    evil, marker = tmp_path / "evil", tmp_path / "ran"
    _scripts(evil, marker)
    repo = _repo(tmp_path, b"evil")
    _append(repo, render(_entries(evil, b"evil")))
    _modify(repo)
    monkeypatch.setenv("GIT_CONFIG", os.devnull)
    assert "pkg/calc.py" in git_stat(repo, ["pkg/calc.py"])
    assert _ran(marker) == []



@pytest.mark.parametrize("entry", ["bin", "", "."])
def test_a_relative_path_entry_never_finds_git_in_the_repository(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, entry: str
):
    """A PATH entry that is relative (``./node_modules/.bin`` style) or empty is looked up from
    git's working directory — the repository, whose `git` file would run as the user."""
    marker = tmp_path / "ran"
    repo = _repo(tmp_path, b"evil")
    for where in (repo / "bin", repo):
        where.mkdir(exist_ok=True)
        fake = where / "git"
        fake.write_text(f'#!/bin/sh\necho repo-git >> "{marker}"\nexit 1\n')
        fake.chmod(0o755)
    git(repo, "add", "bin/git", "git")
    git(repo, "commit", "-qm", "planted")
    _modify(repo)
    monkeypatch.setenv("PATH", f"{entry}{os.pathsep}{os.environ['PATH']}")
    assert "pkg/calc.py" in git_stat(repo, ["pkg/calc.py"])
    result = CliRunner().invoke(cli, ["index", "build", str(repo), "--no-embed", "-q", "-j", "1"])
    assert result.exit_code == 0, result.output
    assert history_status(load_config(repo, env={}, jobs=1).index_path)["state"] == "ok"
    commit_run(repo, "r1", "t", "s", ["pkg/calc.py"], [])
    assert _ran(marker) == []


@pytest.mark.parametrize("where", [".gitignore", "sub/.gitignore", "core.excludesFile"])
def test_a_fifo_git_reads_as_an_ignore_file_stops_the_build_with_one_line(
    tmp_path: Path, home: Path, where: str
):
    """git blocks opening a FIFO where it reads ignore patterns (an agent's command can make
    one): discovery stops it and says so instead of hanging the build, the agent or the MCP
    server."""
    repo = _repo(tmp_path, b"evil")
    if where == "core.excludesFile":
        os.mkfifo(repo / "pipe")
        _append(repo, f"[core]\n\texcludesFile = {repo}/pipe\n".encode())
    else:
        (repo / where).parent.mkdir(exist_ok=True)
        os.mkfifo(repo / where)
    proc = _cli(repo, 60)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "did not finish in 2 s" in proc.stderr and "FIFO" in proc.stderr
