"""Discovery over real trees in tmp_path: plain directories and real git repositories."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from indexer.config import Config
from indexer.parse.classify import classify_content
from indexer.parse.discovery import (
    MAX_EXAMPLES,
    DiscoveredFile,
    Discovery,
    discover,
    is_ignored_path,
)

GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed")


@pytest.fixture(autouse=True)
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Keep git from finding a repository above tmp_path or the user's global excludes file.
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


def write(root: Path, rel: str, text: str = "x\n") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def git(root: Path, *args: str) -> str:
    cmd = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args]
    return subprocess.run(cmd, cwd=root, check=True, capture_output=True, text=True).stdout


def git_repo(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q")
    return root


def paths(d: Discovery) -> list[str]:
    return [f.path for f in d.files]


def run(root: Path, **kw: object) -> Discovery:
    return discover(Config(root=root, **kw))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- git mode


@needs_git
def test_git_lists_tracked_and_untracked_but_not_ignored(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    write(repo, ".gitignore", "*.log\nbuild/\n")
    write(repo, "src/app.py")
    write(repo, "src/gone.py")
    write(repo, "forced.log")
    git(repo, "add", ".gitignore", "src/app.py", "src/gone.py")
    git(repo, "add", "-f", "forced.log")
    git(repo, "commit", "-qm", "init")
    write(repo, "src/new.py")  # untracked, not ignored
    write(repo, "debug.log")  # untracked, ignored
    write(repo, "build/out.py")  # ignored directory
    (repo / "src/gone.py").unlink()  # tracked but deleted on disk

    d = run(repo)

    assert d.git is True
    # A tracked file stays listed even though it matches an ignore pattern (git semantics).
    assert paths(d) == [".gitignore", "forced.log", "src/app.py", "src/new.py"]
    assert d.skipped == {}


@needs_git
def test_git_file_records_carry_stat(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    f = write(repo, "pkg/mod.py", "print('hi')\n")
    os.utime(f, ns=(1_600_000_000_000_000_000, 1_600_000_000_123_456_789))

    d = run(repo)

    assert d.files == (DiscoveredFile("pkg/mod.py", 12, 1_600_000_000_123_456_789),)


@needs_git
def test_git_root_in_subdirectory_lists_relative_to_root(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    write(repo, "top.py")
    write(repo, "sub/inner.py")
    write(repo, "sub/deeper/leaf.py")

    d = run(repo / "sub")

    assert d.git is True
    assert paths(d) == ["deeper/leaf.py", "inner.py"]


@needs_git
def test_git_skips_gitlinks_and_nested_repositories(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    write(repo, "main.py")
    git(repo, "add", "main.py")
    git(repo, "commit", "-qm", "init")
    head = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{head},vendored")
    write(repo, "vendored/file.py")  # checked-out submodule contents
    nested = git_repo(repo / "nested")
    write(nested, "n.py")

    d = run(repo)

    assert paths(d) == ["main.py"]
    assert d.skipped == {"submodule": 2}
    assert d.skipped_paths == {"submodule": ("nested", "vendored")}


@needs_git
def test_git_repoctxignore_and_exclude_apply_on_top(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    write(repo, ".repoctxignore", "fixtures/\n*.snap\n")
    write(repo, "pkg/.repoctxignore", "local_*.py\n!keep.snap\n")
    for rel in [
        "a.py",
        "fixtures/big.py",
        "x.snap",
        "pkg/local_conf.py",
        "pkg/mod.py",
        "pkg/keep.snap",
        "other/local_conf.py",
        "vendor/lib.py",
    ]:
        write(repo, rel)

    d = run(repo, exclude=("vendor/",))

    assert d.git is True
    assert paths(d) == [
        ".repoctxignore",
        "a.py",
        "other/local_conf.py",
        "pkg/.repoctxignore",
        "pkg/keep.snap",
        "pkg/mod.py",
    ]


@needs_git
def test_git_root_ignored_by_enclosing_repo_is_walked(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    write(repo, ".gitignore", ".venv/\n")
    write(repo, ".venv/lib/site/pkg.py")
    write(repo, ".venv/lib/site/.gitignore", "*.pyc\n")
    write(repo, ".venv/lib/site/pkg.pyc")

    d = run(repo / ".venv/lib")

    assert d.git is False
    assert paths(d) == ["site/.gitignore", "site/pkg.py"]


@needs_git
def test_git_symlinks(tmp_path: Path) -> None:
    outside = write(tmp_path, "outside/secret.py")
    repo = git_repo(tmp_path / "repo")
    write(repo, "real/target.py", "abc\n")
    (repo / "inside.py").symlink_to("real/target.py")
    (repo / "escape.py").symlink_to(outside)
    (repo / "dangling.py").symlink_to("missing.py")
    (repo / "dirlink").symlink_to("real")

    d = run(repo)

    # The file link is indexed under its own path; the directory link is not followed
    # because git lists the files under their real path already.
    assert paths(d) == ["inside.py", "real/target.py"]
    assert d.files[0].size == 4
    assert d.skipped == {"symlink_broken": 1, "symlink_outside": 1}


# --------------------------------------------------------------------------- walk mode


def test_walk_gitignore_negation_anchoring_directories_and_nesting(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    write(root, ".gitignore", "*.log\n!keep.log\n/top.txt\nbuild/\ndocs/*.tmp\n")
    write(root, "sub/.gitignore", "!*.log\n/local.txt\n")
    for rel in [
        "a.log",
        "keep.log",
        "top.txt",
        "nested/top.txt",  # /top.txt is anchored to the root
        "build/out.py",  # directory pattern
        "build.py",  # ... matches only a directory named build
        "lib/build/gen.py",  # unanchored directory pattern matches at any depth
        "tools/build",  # a file named build is not a directory
        "docs/x.tmp",
        "docs/deep/x.tmp",  # "docs/*.tmp" has a slash, so * stops at one level
        "sub/b.log",  # re-included by the nested negation
        "sub/local.txt",
        "sub/deeper/local.txt",
        "main.py",
    ]:
        write(root, rel)

    d = run(root)

    assert d.git is False
    assert paths(d) == [
        ".gitignore",
        "build.py",
        "docs/deep/x.tmp",
        "keep.log",
        "main.py",
        "nested/top.txt",
        "sub/.gitignore",
        "sub/b.log",
        "sub/deeper/local.txt",
        "tools/build",
    ]


def test_walk_cannot_reinclude_inside_excluded_directory(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    write(root, ".gitignore", "dist/\n!dist/keep.py\n")
    write(root, "dist/keep.py")
    write(root, "dist/drop.py")
    write(root, "ok.py")

    assert paths(run(root)) == [".gitignore", "ok.py"]


def test_walk_whitelist_idiom(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    write(root, "only_py/.gitignore", "*\n!*/\n!*.py\n")
    write(root, "only_py/a/b.py")
    write(root, "only_py/a/b.txt")
    write(root, "only_py/c.py")
    write(root, "only_py/d.md")

    assert paths(run(root)) == ["only_py/a/b.py", "only_py/c.py"]


def test_walk_double_star_and_classes(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    write(root, ".gitignore", "**/gen/**\na/**/z.py\n[ab].c\n[!x]y.c\n\\#hash\nsp\\ \n")
    for rel in [
        "gen/x.py",
        "deep/gen/x.py",
        "a/z.py",
        "a/q/r/z.py",
        "b/a/z.py",  # a/**/z.py is anchored
        "a.c",
        "c.c",
        "zy.c",
        "xy.c",
        "#hash",
        "sp ",
    ]:
        write(root, rel)

    assert paths(run(root)) == [".gitignore", "b/a/z.py", "c.c", "xy.c"]


@needs_git
def test_walk_agrees_with_git(tmp_path: Path) -> None:
    ignore_files = {
        ".gitignore": "*.log\n!keep.log\nbuild/\n/top.txt\ndocs/*.tmp\n**/gen/**\nout/**\n"
        "!out/keep/\n[ab].c\n# comment\n\\#hash\ntrail   \ndata/\n!data/inner.py\n",
        "white/.gitignore": "*\n!*/\n!*.py\n",
        "sub/.gitignore": "!*.log\n/local.txt\ndeep/\n",
        "sub/x/.gitignore": "!deep/\n",
    }
    files = [
        "a.log", "keep.log", "top.txt", "n/top.txt", "build/f.py", "build.py", "x/build/f",
        "docs/a.tmp", "docs/d/a.tmp", "gen/a", "p/gen/q/r", "out/a", "out/keep/b", "a.c",
        "c.c", "#hash", "trail", "data/inner.py", "white/a.py", "white/a.txt",
        "white/d/e.py", "white/d/e.md", "sub/s.log", "sub/local.txt", "sub/q/local.txt",
        "sub/deep/f", "sub/x/deep/f", "main.py",
    ]  # fmt: skip
    tree = tmp_path / "tree"
    for rel, text in ignore_files.items():
        write(tree, rel, text)
    for rel in files:
        write(tree, rel)
    repo = tmp_path / "repo"
    shutil.copytree(tree, repo)
    git_repo(repo)

    walked, listed = run(tree), run(repo)

    assert (walked.git, listed.git) == (False, True)
    assert paths(walked) == paths(listed)
    assert "out/keep/b" not in paths(walked)
    assert "white/d/e.py" in paths(walked)
    assert "sub/deep/f" not in paths(walked)


def test_walk_never_enters_git_directories(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    write(root, ".git/config")
    write(root, "deps/lib/.git/HEAD")
    write(root, "deps/lib/code.py")

    assert paths(run(root)) == ["deps/lib/code.py"]


def test_walk_repoctxignore_nested_and_exclude(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    write(root, ".repoctxignore", "*.snap\nfixtures/\n")
    write(root, "pkg/.repoctxignore", "!keep.snap\n/local.py\n")
    for rel in ["a.py", "a.snap", "fixtures/f.py", "pkg/keep.snap", "pkg/local.py", "pkg/x.py"]:
        write(root, rel)
    write(root, "third_party/t.py")

    d = run(root, exclude=("third_party/", "*.py", "!pkg/x.py"))

    assert paths(d) == [".repoctxignore", "pkg/.repoctxignore", "pkg/keep.snap", "pkg/x.py"]


def test_walk_repoctxignore_cannot_undo_gitignore(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    write(root, ".gitignore", "*.gen.py\n")
    write(root, ".repoctxignore", "!*.gen.py\n")
    write(root, "a.gen.py")

    assert paths(run(root)) == [".gitignore", ".repoctxignore"]


# --------------------------------------------------------------------------- index dir, limits


@pytest.mark.parametrize("use_git", [False, True])
def test_index_directory_is_excluded(tmp_path: Path, use_git: bool) -> None:
    if use_git and GIT is None:
        pytest.skip("git is not installed")
    root = tmp_path / "repo"
    if use_git:
        git_repo(root)
    write(root, ".repoctx/graph.db")
    write(root, "custom/idx/graph.db")
    write(root, "custom/keep.py")
    write(root, "main.py")

    default = run(root)
    custom = run(root, index_dir=root / "custom/idx")

    assert default.git is use_git
    assert paths(default) == ["custom/idx/graph.db", "custom/keep.py", "main.py"]
    assert paths(custom) == [".repoctx/graph.db", "custom/keep.py", "main.py"]


def test_index_directory_outside_root_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    write(root, ".repoctx/notes.md")

    d = run(root, index_dir=tmp_path / "elsewhere")

    assert paths(d) == [".repoctx/notes.md"]


@pytest.mark.parametrize("use_git", [False, True])
def test_size_cap_and_minified_names(tmp_path: Path, use_git: bool) -> None:
    if use_git and GIT is None:
        pytest.skip("git is not installed")
    root = tmp_path / "repo"
    if use_git:
        git_repo(root)
    write(root, "small.py", "a" * 100)
    write(root, "exact.py", "a" * 101)
    write(root, "big.py", "a" * 102)
    for rel in ["app.min.js", "site.min.css", "app.bundle.js", "app.js.map", "app.js"]:
        write(root, "static/" + rel)

    d = run(root, max_file_bytes=101)

    assert paths(d) == ["exact.py", "small.py", "static/app.js"]
    assert d.skipped == {"minified": 4, "too_large": 1}
    assert d.skipped_paths["too_large"] == ("big.py",)
    assert d.skipped_paths["minified"] == (
        "static/app.bundle.js",
        "static/app.js.map",
        "static/app.min.js",
        "static/site.min.css",
    )


def test_skipped_examples_are_capped(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    for i in range(MAX_EXAMPLES + 5):
        write(root, f"m{i:02d}.map")

    d = run(root)

    assert d.skipped == {"minified": MAX_EXAMPLES + 5}
    assert d.skipped_paths["minified"] == tuple(f"m{i:02d}.map" for i in range(MAX_EXAMPLES))


# --------------------------------------------------------------------------- symlinks (walk)


def test_walk_symlinks(tmp_path: Path) -> None:
    outside = write(tmp_path, "outside/secret.py")
    (tmp_path / "outside_dir").mkdir()
    write(tmp_path, "outside_dir/o.py")
    root = tmp_path / "tree"
    write(root, "real/target.py", "abcd\n")
    write(root, "real/sub/deep.py")
    (root / "inside.py").symlink_to("real/target.py")
    (root / "escape.py").symlink_to(outside)
    (root / "escape_dir").symlink_to(tmp_path / "outside_dir")
    (root / "dangling.py").symlink_to("missing.py")
    (root / "self.py").symlink_to("self.py")
    (root / "real/sub/up").symlink_to("../..")  # points back at the root: a loop
    (root / "again").symlink_to("real")  # already walked under its real path

    d = run(root)

    assert paths(d) == ["inside.py", "real/sub/deep.py", "real/target.py"]
    assert d.files[0].size == 5
    assert d.skipped == {
        "symlink_broken": 1,
        "symlink_loop": 3,
        "symlink_outside": 2,
    }
    assert d.skipped_paths["symlink_loop"] == ("again", "real/sub/up", "self.py")
    assert d.skipped_paths["symlink_outside"] == ("escape.py", "escape_dir")


def test_walk_follows_directory_link_into_unwalked_directory_once(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    write(root, ".gitignore", "/hidden/\n")
    write(root, "hidden/lib/code.py")
    (root / "link").symlink_to("hidden/lib")
    (root / "link2").symlink_to("hidden/lib")

    d = run(root)

    assert paths(d) == [".gitignore", "link/code.py"]
    assert d.skipped == {"symlink_loop": 1}
    assert d.skipped_paths["symlink_loop"] == ("link2",)


def test_walk_link_into_index_is_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    write(root, ".repoctx/graph.db")
    (root / "peek").symlink_to(".repoctx")

    d = run(root)

    assert paths(d) == []
    assert d.skipped == {"symlink_outside": 1}


def test_walk_special_files_are_skipped(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    write(root, "a.py")
    os.mkfifo(root / "pipe")

    d = run(root)

    assert paths(d) == ["a.py"]
    assert d.skipped == {"not_regular": 1}


# --------------------------------------------------------------------------- classify_content


def test_classify_nul_is_binary() -> None:
    assert classify_content("a.bin", b"abc\x00def") == "binary"
    # UTF-16 text is text, not binary: it has a reason of its own
    assert classify_content("a.py", "x = 'é'\n".encode("utf-16")) == "utf16"


def test_classify_multibyte_character_cut_at_sniff_boundary_is_text() -> None:
    # "€" is 3 bytes; place it so the 8 KB sample ends after its first byte.
    data = b"x = 1\n" * 1365 + b"#" + "€".encode() + b"\n" + b"b = 1\n" * 10
    assert data[:8192].endswith(b"\xe2")
    with pytest.raises(UnicodeDecodeError):
        data[:8192].decode("utf-8")
    assert classify_content("a.py", data) is None
    # Valid UTF-8 is text even when it is full of control characters.
    controls = "\x01é\x01\n" * 3000  # 5 bytes a line; byte 8191 starts an "é"
    assert controls.encode()[8191] == 0xC3
    assert classify_content("odd.txt", controls.encode()) is None
    cjk = ("漢字かな交じり文\n" * 2000).encode()
    assert classify_content("doc.txt", cjk) is None


def test_classify_invalid_utf8_at_end_of_short_file_is_not_excused() -> None:
    # Garbage that would be a cut character at the boundary is still garbage in a whole file.
    assert classify_content("x.dat", bytes(range(0x80, 0x100)) * 4) == "binary"


def test_classify_latin1_text_is_text_but_noise_is_binary() -> None:
    latin1 = "Grüße aus Köln, déjà vu, façade.\n".encode("latin-1") * 50
    assert classify_content("readme.txt", latin1) is None
    noise = bytes((i * 73 + 41) % 255 + 1 for i in range(4000))
    assert classify_content("blob", noise) == "binary"


def test_classify_minified_js() -> None:
    minified = ("var a=1;" * 200 + "\n") * 5
    assert classify_content("app.js", minified.encode()) == "minified"
    one_long_line = "x = 1\n" * 200 + "y = '" + "z" * 1500 + "'\n"
    assert classify_content("app.py", one_long_line.encode()) is None
    assert classify_content("vendor.min.js", b"var a = 1;\n") == "minified"


def test_classify_generated_markers() -> None:
    go = b"// Code generated by protoc-gen-go. DO NOT EDIT.\npackage pb\n"
    assert classify_content("x.pb.go", go) == "generated"
    fb = b"/**\n * Copyright\n *\n * @generated SignedSource<<abc>>\n */\nconst a = 1;\n"
    assert classify_content("x.js", fb) == "generated"
    late = b"\n" * 5 + b"# @generated\n"
    assert classify_content("x.py", late) is None
    assert classify_content("x.go", b"// do not edit\n") is None
    assert classify_content("empty.py", b"") is None


# --------------------------------------------------------------------------- is_ignored_path


def _assert_agrees(root: Path, config: Config, candidates: list[str]) -> None:
    listed = set(paths(discover(config)))
    verdicts = {rel: is_ignored_path(config, rel) for rel in candidates}
    assert verdicts == {rel: rel not in listed for rel in candidates}


def test_is_ignored_path_agrees_with_walk(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    write(root, ".gitignore", "*.log\n!keep.log\nbuild/\n")
    write(root, "sub/.gitignore", "!*.log\n")
    write(root, "sub/.repoctxignore", "secret/\n")
    candidates = [
        "a.log", "keep.log", "build/x.py", "sub/b.log", "sub/secret/s.py", "sub/ok.py",
        "main.py", "static/app.min.js", ".repoctx/graph.db", "vendor/v.py",
    ]  # fmt: skip
    for rel in candidates:
        write(root, rel)
    config = Config(root=root, exclude=("vendor/",))

    _assert_agrees(root, config, candidates)
    assert is_ignored_path(config, "build") is True
    assert is_ignored_path(config, "./sub/ok.py") is False
    assert is_ignored_path(config, ".git/HEAD") is True
    assert is_ignored_path(config, "not/there/yet.log") is True
    assert is_ignored_path(config, "not/there/yet.py") is False


@needs_git
def test_is_ignored_path_agrees_with_git(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    write(repo, ".gitignore", "*.log\nbuild/\n")
    write(repo, ".repoctxignore", "fixtures/\n")
    candidates = [
        "a.log", "tracked.log", "build/x.py", "fixtures/f.py", "src/m.py", "custom/idx/g.db",
    ]  # fmt: skip
    for rel in candidates:
        write(repo, rel)
    git(repo, "add", "-f", "tracked.log")
    config = Config(root=repo, index_dir=repo / "custom/idx")

    _assert_agrees(repo, config, candidates)


# --------------------------------------------------------------------------- caches, names


@pytest.mark.parametrize("use_git", [False, pytest.param(True, marks=needs_git)])
def test_cache_directories_are_counted_once_and_not_listed(tmp_path: Path, use_git: bool) -> None:
    root = git_repo(tmp_path / "r") if use_git else tmp_path / "r"
    write(root, "pkg/m.py", "x = 1\n")
    write(root, "pkg/__pycache__/m.cpython-311.pyc", "\x00bytecode")
    write(root, "pkg/__pycache__/n.cpython-311.pyc", "\x00bytecode")
    write(root, ".mypy_cache/3.11/pkg/m.data.json", "{}\n")
    write(root, "docs/__pycache__.md", "a file, not a directory\n")
    if use_git:  # caches committed by mistake are skipped the same way
        git(root, "add", "-A")
    d = run(root)
    assert paths(d) == ["docs/__pycache__.md", "pkg/m.py"]
    assert d.skipped == {"cache": 2}
    assert d.skipped_paths == {"cache": (".mypy_cache", "pkg/__pycache__")}
    cfg = Config(root=root)
    assert is_ignored_path(cfg, "pkg/__pycache__/m.cpython-311.pyc")
    assert is_ignored_path(cfg, ".mypy_cache")
    assert not is_ignored_path(cfg, "docs/__pycache__.md")


@pytest.mark.parametrize("use_git", [False, pytest.param(True, marks=needs_git)])
def test_names_no_language_takes_are_counted_without_being_listed(tmp_path: Path, use_git: bool) -> None:
    root = git_repo(tmp_path / "r") if use_git else tmp_path / "r"
    write(root, "app.py", "x = 1\n")
    write(root, "logo.png", "not really a png\n")
    write(root, "notes.unknownext", "text\n")
    write(root, "bin/deploy", "#!/bin/sh\necho hi\n")  # no suffix: its #! line decides later
    write(root, "Dockerfile.prod", "FROM scratch\n")
    if use_git:
        git(root, "add", "-A")
    everything = discover(Config(root=root))
    assert paths(everything) == ["Dockerfile.prod", "app.py", "bin/deploy", "logo.png", "notes.unknownext"]
    assert everything.skipped == {}
    d = discover(Config(root=root), skip_unparsable=True)
    assert paths(d) == ["Dockerfile.prod", "app.py", "bin/deploy"]
    assert d.skipped == {"no_grammar": 2}
    assert d.skipped_paths == {"no_grammar": ("logo.png", "notes.unknownext")}


def test_unparsable_names_are_exactly_those_no_language_takes_by_name() -> None:
    """Discovery's stat-free test must agree with the build's own decision by name."""
    from indexer.parse.languages import FORMATS, extensionless, language_for_path, unparsable_name

    names = {"Dockerfile.dev", "Containerfile.x", ".gitignore", ".x", "..", "a.", "Makefile",
             "Makefile.am", "x.PY", "README", ".bashrc", "a.b.c.py", "...py", "logo.png",
             "m.cpython-311.pyc", "notes.unknownext", "bin"}
    names |= {f"f{ext}" for spec in FORMATS.values() for ext in spec.extensions}
    names |= {f"f{ext.upper()}" for spec in FORMATS.values() for ext in spec.extensions}
    names |= {name for spec in FORMATS.values() for name in spec.filenames}
    for name in sorted(names):
        expected = language_for_path(name) is None and not extensionless(name)
        assert unparsable_name(name) is expected, name


def test_a_build_walk_skips_by_name_as_the_full_tests_do(tmp_path: Path) -> None:
    # Builds pass skip_unparsable, and the walk then takes most names (x.py) on their suffix
    # alone: the names a suffix does not settle must still meet every test.
    root = tmp_path / "tree"
    for rel in ("a.py", "b.min.js", "c.js", "package-lock.json", "data.json", "yarn.lock",
                "X.PY", ".py", "Makefile", "notes.xyz", "pnpm-lock.yaml", "conf.yaml", "m.min.py"):
        write(root, rel)
    d = discover(Config(root=root), skip_unparsable=True)
    assert paths(d) == [".py", "Makefile", "X.PY", "a.py", "c.js", "conf.yaml", "data.json", "m.min.py"]
    assert d.skipped == {"lockfile": 3, "minified": 1, "no_grammar": 1}
    plain = discover(Config(root=root))
    assert set(paths(d)) < set(paths(plain)) and "notes.xyz" in paths(plain)
