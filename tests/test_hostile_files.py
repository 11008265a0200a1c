"""Hostile trees, through the real command line on real files and git repositories: file
names that are not UTF-8 or full of odd characters, huge lines, deep nesting, random bytes,
UTF-16 text, a real minified bundle, vectors deleted under the index, honest build summaries,
and a `kill -9` of a build that must leave no worker process behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from indexer.config import Config, load_config
from indexer.graph import store
from indexer.ops.watch import Watcher, WatchSettings
from indexer.parse.classify import classify_content
from indexer.parse.discovery import discover, is_ignored_path
from tests.conftest import git, make_repo

FIXTURES = Path(__file__).parent / "fixtures" / "hostile"
REPOCTX = str(Path(sys.executable).parent / "repoctx")
#: Liveness bound only; nothing asserts how fast anything is.
DEADLINE = 30.0

#: Valid UTF-8 names that shells, git quoting and argument parsers get wrong.
ODD_NAMES = [
    "new\nline.py",
    "tab\there.py",
    'double"quote.py',
    "single'quote.py",
    "-leading_dash.py",
    "back\\slash.py",
    "emoji_\U0001f980.py",
    "sp ace.py",
]
#: Names that are not UTF-8 at all (bytes; Linux allows any but NUL and '/').
BAD_NAMES = [b"latin1_\xe9.py", b"cp1252_\x93quoted\x94.py"]


@pytest.fixture(autouse=True)
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for key in [k for k in os.environ if k.startswith("REPOCTX_")]:
        monkeypatch.delenv(key)


def invoke(*args: str) -> tuple[int, str, str]:
    """Run the CLI in-process; (exit code, stdout, stderr). A traceback fails the test."""
    result = CliRunner().invoke(cli, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"repoctx {' '.join(args)} crashed") from result.exception
    return result.exit_code, result.stdout, result.stderr


def build_json(root: Path, *flags: str) -> dict:
    code, out, err = invoke("index", "build", str(root), "-q", "--json", *flags)
    assert code == 0, out + err
    return json.loads(out)


def symbols(root: Path, name: str) -> list[str]:
    code, out, _ = invoke("symbol", name, "-C", str(root), "--json")
    assert code == 0, out
    return sorted(s["path"] for s in json.loads(out)["symbols"])


def write_named(root: Path, names: list[bytes]) -> None:
    for i, raw in enumerate(names):
        path = os.path.join(os.fsencode(root), raw)
        with open(path, "wb") as fh:
            fh.write(f"def hostile_{i}():\n    return {i}\n".encode())


# --------------------------------------------------------------------------- file names


@pytest.mark.parametrize("mode", ["walk", "git"])
def test_any_file_name_indexes_or_is_skipped_with_a_reason(tmp_path: Path, mode: str) -> None:
    root = tmp_path / "tree"
    if mode == "git":
        make_repo(root, {"keep.py": "def keep():\n    return 1\n"})
    else:
        root.mkdir()
        (root / "keep.py").write_text("def keep():\n    return 1\n")
    names = [n.encode() for n in ODD_NAMES] + BAD_NAMES
    write_named(root, names)
    bad_dir = os.path.join(os.fsencode(root), b"dir_\xff")
    os.mkdir(bad_dir)
    with open(os.path.join(bad_dir, b"inner.py"), "wb") as fh:
        fh.write(b"def inner():\n    return 0\n")
    if mode == "git":  # some tracked (git ls-files -z gives raw bytes), some untracked
        git(root, "add", "--", *[n for n in ODD_NAMES[:4]])
        subprocess.run([b"git", b"add", b"--", BAD_NAMES[0]], cwd=root, check=True)
        git(root, "commit", "-q", "-m", "odd names")

    stats = build_json(root, "--no-embed")

    # every UTF-8 name is indexed under its exact path; the others are counted, not fatal
    assert stats["files_total"] == 1 + len(ODD_NAMES)
    assert stats["skipped"] == {"undecodable_name": len(BAD_NAMES) + 1}
    found = [p for i in range(len(ODD_NAMES)) for p in symbols(root, f"hostile_{i}")]
    assert found == ODD_NAMES
    assert symbols(root, "keep") == ["keep.py"]
    # the second build is a no-op, not a retry of something that failed
    again = build_json(root, "--no-embed")
    assert again["files_parsed"] == 0 and again["files_total"] == stats["files_total"]
    # discovery names the skipped ones in a printable form
    disc = discover(load_config(root, env={}))
    assert set(disc.skipped_paths["undecodable_name"]) >= {"latin1_\\xe9.py"}
    assert all(p.encode() for p in disc.skipped_paths["undecodable_name"])


def test_a_build_that_indexes_nothing_new_still_counts_this_trees_skipped_files(
    tmp_path: Path,
) -> None:
    """Files no build indexes (a name that is not UTF-8, a file of no known language) leave
    the index as it was, so the build takes its no-op path: its summary must still count them
    (before: it repeated the previous build's counts, and the new files went unmentioned)."""
    root = make_repo(tmp_path / "repo", {"a.py": "def alpha():\n    return 1\n"})
    assert build_json(root, "--no-embed")["skipped"] == {}
    write_named(root, BAD_NAMES[:1])
    (root / "notes.xyz").write_text("not code\n")  # no format repoctx knows
    again = build_json(root, "--no-embed")
    assert again["files_parsed"] == 0 and again["files_total"] == 1
    assert again["skipped"] == {"undecodable_name": 1, "no_grammar": 1}
    os.remove(os.path.join(os.fsencode(root), BAD_NAMES[0]))
    (root / "notes.xyz").unlink()
    assert build_json(root, "--no-embed")["skipped"] == {}


def test_the_watcher_survives_names_that_are_not_utf8(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {"a.py": "def alpha():\n    return 1\n"})
    write_named(root, BAD_NAMES)  # present before it starts: the catch-up build sees them
    cfg = load_config(root, env={}, jobs=1)
    events = []
    watcher = Watcher(cfg, WatchSettings(debounce_s=0.1, max_latency_s=1.0), on_event=events.append)
    failures: list[BaseException] = []

    def run() -> None:
        try:
            watcher.run()
        except BaseException as exc:  # surfaced below
            failures.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + DEADLINE
        while watcher.builds == 0 and not failures and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not failures and watcher.builds == 1, (failures, events)
        # events for a new undecodable name, an undecodable directory and odd good names
        write_named(root, [b"later_\xfe.py"])
        os.mkdir(os.path.join(os.fsencode(root), b"d\xfe"))
        (root / "-odd\n\tname \U0001f980.py").write_text("def odd_event():\n    return 3\n")
        (root / "after.py").write_text("def after_event():\n    return 2\n")
        while not failures and time.monotonic() < deadline:
            if symbols(root, "after_event") and symbols(root, "odd_event"):
                break
            time.sleep(0.05)
        assert symbols(root, "after_event") == ["after.py"]
        assert symbols(root, "odd_event") == ["-odd\n\tname \U0001f980.py"]
    finally:
        watcher.stop()
        thread.join(DEADLINE)
    assert not failures, failures
    assert not [e for e in events if e.kind == "error"], events
    assert is_ignored_path(cfg, os.fsdecode(b"later_\xfe.py"))


# --------------------------------------------------------------------------- content


def test_random_bytes_are_binary_whatever_the_extension() -> None:
    for size in (64, 1000, 8191, 8193, 100_000, 3_000_000):
        for name in ("noise.py", "noise.js", "noise.go"):
            assert classify_content(name, os.urandom(size)) == "binary", (name, size)
    no_nul = bytes(b or 1 for b in os.urandom(50_000))
    assert classify_content("noise.py", no_nul) == "binary"
    # the same noise saved through a text API (decoded as Latin-1, written as UTF-8) is valid
    # UTF-8 with long "lines": it was counted as minified
    for size in (2000, 100_000):
        as_text = bytes(b or 1 for b in os.urandom(size)).decode("latin-1").encode("utf-8")
        assert classify_content("noise.py", as_text) == "binary", size


def test_utf16_and_utf32_text_have_their_own_reason() -> None:
    text = 'def f():\n    return "é 漢字"\n' * 300
    for encoding in ("utf-16", "utf-16-le", "utf-16-be", "utf-32"):
        assert classify_content("wide.py", text.encode(encoding)) == "utf16", encoding
    # a NUL-laden binary is not mistaken for UTF-16
    assert classify_content("x.py", b"\x00\x01binary\x00" * 100) == "binary"


def test_a_real_minified_bundle_is_minified_by_content() -> None:
    bundle = (FIXTURES / "underscore-1.13.4.js").read_bytes()
    assert classify_content("vendor/underscore.js", bundle) == "minified"
    assert classify_content("vendor/underscore.ts", bundle) == "minified"


def test_long_lines_of_data_and_deep_nesting_are_not_minified() -> None:
    data_py = b'DATA = "' + b"ab" * 600_000 + b'"\n\ndef after():\n    return 1\n'
    numbers_js = b"export const T = [" + b"1, 2, 3, " * 100_000 + b"];\nexport function f() {}\n"
    string_js = b'export const S = "' + b"x;" * 100_000 + b'";\nexport function g() {}\n'
    brackets = b"x = " + b"[" * 10_000 + b"]" * 10_000 + b"\n"
    objects_js = b"const o = " + b"{a:" * 10_000 + b"1" + b"}" * 10_000 + b";\n"
    for name, data in [("data.py", data_py), ("t.js", numbers_js), ("s.js", string_js),
                       ("deep.py", brackets), ("deep.js", objects_js)]:
        assert classify_content(name, data) is None, name


def _big_tree(root: Path, files: dict[str, bytes]) -> None:
    root.mkdir()
    (root / ".repoctx.toml").write_text("max_file_bytes = 10000000\n")
    for rel, data in files.items():
        (root / rel).write_bytes(data)


def test_definitions_after_a_huge_line_or_deep_nesting_are_indexed(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    words = b"lorem ipsum dolor sit amet consectetur adipiscing elit "
    table = b'TABLE = "' + words * (5_100_000 // len(words)) + b'"\n'  # one 5 MB line
    assert len(table) > 5_000_000 and table.count(b"\n") == 1
    nested_fns = "".join(f"function f{i}() {{\n" for i in range(10_000)) + "}\n" * 10_000
    _big_tree(root, {
        "table.py": table + b"\n\ndef after_table():\n    return TABLE[0]\n",
        "brackets.py": b"x = " + b"[" * 10_000 + b"]" * 10_000
                       + b"\n\ndef after_brackets():\n    return x\n",
        "objects.js": b"const o = " + b"{a:" * 10_000 + b"1" + b"}" * 10_000
                      + b";\nfunction afterObjects() { return o; }\n",
        "nested.js": (nested_fns + "function afterNested() { return 1; }\n").encode(),
        "bundle.js": (FIXTURES / "underscore-1.13.4.js").read_bytes(),
    })

    stats = build_json(root, "--no-embed")

    assert stats["skipped"] == {"minified": 1}  # the bundle (.repoctx.toml is indexed: toml)
    assert stats["files_total"] == 5
    for name, path in [("after_table", "table.py"), ("after_brackets", "brackets.py"),
                       ("afterObjects", "objects.js"), ("afterNested", "nested.js")]:
        assert symbols(root, name) == [path], name
    # nesting deeper than the cap stays inside the deepest definition kept
    assert symbols(root, "f99") == ["nested.js"] and symbols(root, "f100") == []


def test_counts_add_up_and_say_what_each_is(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    for i in range(3):
        (root / f"m{i}.py").write_text(f"def m{i}():\n    return {i}\n")
    (root / "blob.py").write_bytes(os.urandom(4096))
    (root / "wide.py").write_bytes("def w():\n    pass\n".encode("utf-16"))
    (root / "notes.xyz").write_text("not code\n")  # no format repoctx knows

    first = build_json(root, "--no-embed")
    assert (first["files_total"], first["files_parsed"], first["files_unchanged"]) == (3, 3, 0)
    assert first["skipped"] == {"binary": 1, "utf16": 1, "no_grammar": 1}

    (root / "m0.py").write_text("def m0():\n    return 10\n")
    code, out, _ = invoke("index", "build", str(root), "-q", "--no-embed")
    assert code == 0, out
    assert "Indexed 3 files (python 3)" in out
    assert "1 parsed by this build, 2 unchanged; 0 removed." in out
    assert "Skipped (not indexed): binary 1, no_grammar 1, utf16 1." in out
    again = build_json(root, "--no-embed")
    assert again["files_total"] == again["files_parsed"] + again["files_unchanged"] == 3


# --------------------------------------------------------------------------- vectors


def test_vectors_deleted_or_behind_are_reported_and_rebuilt(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {
        "net/upload.py": "def send_with_retry(data):\n    return retry(data)\n",
        "util.py": "def retry(x):\n    return x\n",
    })
    stats = build_json(root, "--embed-model", "hashing:64")
    assert stats["embedding"]["coverage"] == 1.0
    vectors_dir = root / ".repoctx" / "vectors.lance"
    subprocess.run(["rm", "-rf", str(vectors_dir)], check=True)

    code, out, err = invoke("search", "send with retry", "-C", str(root), "--mode", "semantic")
    assert code == 1
    assert "vector table at" in out + err and "missing" in out + err
    assert "repoctx index build" in out + err and "--mode lexical" in out + err
    code, out, err = invoke("search", "send with retry", "-C", str(root), "--json")
    assert code == 0
    result = json.loads(out)
    assert result["hits"] and result["hits"][0]["path"] == "net/upload.py"  # lexical + symbol
    (warning,) = result["warnings"]  # hybrid degrades to lexical + symbol and says so
    assert "missing" in warning and "lexical" in warning and "repoctx index build" in warning
    assert f"warning: {warning}" in err
    assert not vectors_dir.exists()  # a reader never recreates (an empty) table

    code, out, _ = invoke("index", "status", str(root))
    assert code == 0 and "missing — run `repoctx index build` to re-embed" in out
    code, out, _ = invoke("index", "status", str(root), "--json")
    assert json.loads(out)["vectors"]["state"] == "missing"

    rebuilt = build_json(root, "--embed-model", "hashing:64")  # nothing else changed
    assert rebuilt["embedding"]["embedded"] == 2 and rebuilt["embedding"]["coverage"] == 1.0
    code, out, err = invoke("search", "send with retry", "-C", str(root), "--mode", "semantic",
                            "--json")
    assert code == 0 and json.loads(out)["hits"] and json.loads(out)["warnings"] == []

    # behind: a graph-only build leaves the new chunk without a vector
    (root / "extra.py").write_text("def extra_helper():\n    return 3\n")
    build_json(root, "--no-embed")
    code, out, err = invoke("search", "extra helper", "-C", str(root), "--json")
    warnings = json.loads(out)["warnings"]
    assert code == 0 and len(warnings) == 1 and warnings[0].startswith("Vectors cover 66.6% of 3")
    code, out, _ = invoke("index", "status", str(root), "--json")
    v = json.loads(out)["vectors"]
    assert (v["state"], v["chunks"]) == ("behind", 3) and "repoctx index build" in v["fix"]


def test_a_graph_only_build_that_changes_nothing_reports_no_embedding(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {"a.py": "def a():\n    return 1\n"})
    build_json(root, "--embed-model", "hashing:64")
    code, out, _ = invoke("index", "build", str(root), "-q", "--no-embed")
    assert code == 0 and "Vectors" not in out and "embedded" not in out
    assert build_json(root, "--no-embed")["embedding"] == {}
    # a build that does embed still says what it did (nothing, here)
    assert build_json(root, "--embed-model", "hashing:64")["embedding"]["embedded"] == 0


def test_a_never_embedded_index_says_so(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {"a.py": "def parse_header():\n    return 1\n"})
    build_json(root, "--no-embed")
    code, out, err = invoke("search", "parse header", "-C", str(root), "--mode", "semantic")
    assert code == 1 and "built with `--no-embed`" in out + err
    code, out, err = invoke("search", "parse header", "-C", str(root))
    assert code == 0 and "a.py" in out
    code, out, _ = invoke("index", "status", str(root))
    assert "Vectors: none (built with --no-embed)" in out


# --------------------------------------------------------------------------- kill -9


def _session_members(sid: int) -> dict[int, str]:
    """Live processes (not zombies) of session ``sid``, from /proc: pid -> command line."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()  # after "pid (comm) "
        state, session = fields[0], int(fields[3])
        if session == sid and state != b"Z":
            out[int(entry)] = cmd
    return out


def _cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])  # utime + stime


def _children(pid: int, tid: int | None = None) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{tid or pid}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        return []


def _descendants(pid: int) -> dict[int, str]:
    """Every live descendant of ``pid``: pid -> command line."""
    out: dict[int, str] = {}
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            for child in _children(p, int(tid)):
                if child not in out:
                    try:
                        with open(f"/proc/{child}/cmdline", "rb") as fh:
                            out[child] = fh.read().replace(b"\0", b" ").decode(errors="replace")
                    except OSError:
                        continue
                    todo.append(child)
    return out


def _alive(pids) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[0] != b"Z":
                    alive.add(pid)
        except OSError:
            pass
    return alive


def _tree(root: Path, packages: int = 8) -> None:
    for d in range(packages):
        (root / f"pkg{d}").mkdir(parents=True)
        for i in range(40):
            body = "".join(f"def f_{i}_{j}(x):\n    return helper(x) + {j}\n\n" for j in range(150))
            (root / f"pkg{d}" / f"m{i}.py").write_text(body)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_kill_9_of_a_build_leaves_no_worker_behind(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    _tree(root)
    proc = subprocess.Popen(
        [REPOCTX, "index", "build", str(root), "--no-embed", "--jobs", "2", "-q"],
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        # mid-parse: both workers are up and busy (past their imports, into the batches; each
        # gets ~250 ticks of this tree, though not always evenly)
        while True:
            members = _session_members(proc.pid)
            workers = [c for c in _children(proc.pid) if "spawn_main" in members.get(c, "")]
            ticks = [_cpu_ticks(w) for w in workers]
            if len(workers) == 2 and min(ticks) >= 40 and sum(ticks) >= 120:
                break
            assert proc.poll() is None, "the build finished before it could be killed"
            assert time.monotonic() < deadline, members
            time.sleep(0.05)
        members = _session_members(proc.pid)
        assert any("resource_tracker" in cmd for cmd in members.values()), members
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        left = _session_members(proc.pid)
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = _session_members(proc.pid)
        assert left == {}  # no parse worker, no resource tracker
    finally:
        for pid in _session_members(proc.pid):  # only what this test started
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    # the next build finishes what the killed one started
    stats = build_json(root, "--no-embed", "--jobs", "2")
    assert stats["files_total"] == 320


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_kill_9_of_a_ray_build_leaves_no_ray_process_behind(tmp_path: Path) -> None:
    """A private Ray (no --ray-address) goes with the build: GCS and raylet by Ray's own fate
    sharing, its agents (which would linger about a minute) by repoctx's reaper."""
    pytest.importorskip("ray")
    root = tmp_path / "tree"
    _tree(root, packages=4)
    proc = subprocess.Popen(
        [REPOCTX, "index", "build", str(root), "--no-embed", "--engine", "ray", "--jobs", "2",
         "-q", "--index-dir", str(tmp_path / "idx")],
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "REPOCTX_RAY_MIN_WORK": "1"},
    )
    seen: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 180
        # Mid-parse: a first build on Ray parses in shard tasks (`ray_shards.parse_task`), an
        # incremental one in `_parse_blobs` tasks.
        while not any(task in cmd for cmd in seen.values()
                      for task in ("ray::parse_task", "ray::_parse_blobs")):
            assert proc.poll() is None, "the build finished before it could be killed"
            assert time.monotonic() < deadline, seen
            seen.update(_descendants(proc.pid))
            time.sleep(0.05)
        seen.update(_descendants(proc.pid))
        assert any("raylet" in cmd for cmd in seen.values()) and any(
            "Agent" in cmd for cmd in seen.values()), seen
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while _alive(seen) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert {p: seen[p] for p in _alive(seen)} == {}
    finally:
        for pid in _alive(seen):  # only what this test started
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_undecodable_paths_are_ignored_for_the_watcher(tmp_path: Path) -> None:
    cfg = Config(root=tmp_path)
    assert is_ignored_path(cfg, os.fsdecode(b"x_\xe9.py"))
    assert is_ignored_path(cfg, os.fsdecode(b"d\xff/ok.py"))
    assert not is_ignored_path(cfg, "ok \U0001f980.py")


def test_the_index_never_holds_an_undecodable_path(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    write_named(root, BAD_NAMES + [b"fine.py"])
    build_json(root, "--no-embed")
    conn = store.open_for_read(root / ".repoctx").conn
    try:
        assert [r[0] for r in conn.execute("SELECT path FROM files")] == ["fine.py"]
    finally:
        conn.close()
