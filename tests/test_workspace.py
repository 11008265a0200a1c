"""Workspace containment, the secrets deny list, checked file I/O, and checkpoint rollback."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agent.checkpoints import CheckpointStore
from agent.errors import (
    BinaryFileError,
    CheckpointError,
    NotAFileError,
    PathEscapeError,
    PathNotFoundError,
    RollbackError,
    SecretPathError,
)
from agent.workspace import Workspace
from cli.settings import load_config


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "src").mkdir()
    (root / "src" / "main.py").write_text("print('hi')\n")
    (root / "README.md").write_text("readme\n")
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text("outside secret\n")
    return d


# -- resolve --------------------------------------------------------------------------------------


def test_relative_and_absolute_paths_inside_resolve(repo):
    ws = Workspace(repo)
    assert ws.resolve("src/main.py") == repo.resolve() / "src" / "main.py"
    assert ws.resolve(str(repo / "src" / "main.py")) == repo.resolve() / "src" / "main.py"
    assert ws.resolve("src/../README.md") == repo.resolve() / "README.md"
    assert ws.resolve("new/file.py") == repo.resolve() / "new" / "file.py"  # need not exist
    assert ws.resolve(".") == ws.resolve("") == repo.resolve()


@pytest.mark.parametrize(
    "path", ["../outside/secret.txt", "src/../../outside/secret.txt", "..", "/etc/passwd"]
)
def test_escapes_are_rejected(repo, outside, path):
    with pytest.raises(PathEscapeError) as info:
        Workspace(repo).resolve(path)
    assert "paths must stay inside the workspace" in str(info.value)
    assert str(repo.resolve()) in str(info.value)


def test_absolute_path_to_a_sibling_with_the_same_prefix_is_rejected(tmp_path, repo):
    sibling = tmp_path / "repo-evil"
    sibling.mkdir()
    with pytest.raises(PathEscapeError):
        Workspace(repo).resolve(str(sibling / "x"))


def test_nul_bytes_are_rejected(repo):
    with pytest.raises(PathEscapeError):
        Workspace(repo).resolve("src/main.py\x00.txt")


def test_symlinked_file_pointing_outside_is_rejected(repo, outside):
    (repo / "link.txt").symlink_to(outside / "secret.txt")
    ws = Workspace(repo)
    with pytest.raises(PathEscapeError):
        ws.resolve("link.txt")
    with pytest.raises(PathEscapeError):
        ws.read_text("link.txt")


def test_symlinked_parent_directory_pointing_outside_is_rejected(repo, outside):
    (repo / "linkdir").symlink_to(outside, target_is_directory=True)
    ws = Workspace(repo)
    with pytest.raises(PathEscapeError):
        ws.read_text("linkdir/secret.txt")
    with pytest.raises(PathEscapeError):
        ws.write_text("linkdir/new.txt", "x")  # a file that does not exist yet
    assert not (outside / "new.txt").exists()


def test_dotdot_after_a_symlink_follows_the_real_directory(repo, outside):
    (outside / "deep").mkdir()
    (repo / "hop").symlink_to(outside / "deep", target_is_directory=True)
    # Lexically "hop/../README.md" is inside; the kernel would open outside/README.md.
    with pytest.raises(PathEscapeError):
        Workspace(repo).resolve("hop/../README.md")


def test_symlink_inside_the_workspace_resolves_to_its_target(repo):
    (repo / "alias.py").symlink_to(repo / "src" / "main.py")
    ws = Workspace(repo)
    assert ws.resolve("alias.py") == (repo / "src" / "main.py").resolve()
    assert ws.read_text("alias.py").text == "print('hi')\n"


def test_root_given_through_a_symlink(tmp_path, repo):
    via = tmp_path / "via"
    via.symlink_to(repo, target_is_directory=True)
    ws = Workspace(via)
    assert ws.root == repo.resolve()
    assert ws.resolve(str(via / "README.md")) == repo.resolve() / "README.md"
    assert ws.resolve(str(repo / "README.md")) == repo.resolve() / "README.md"


# -- secrets --------------------------------------------------------------------------------------

DENIED = [
    ".env",
    "sub/.env",
    ".env.local",
    "certs/server.pem",
    "tls.key",
    "id_rsa",
    "keys/id_ed25519",
    ".ssh/config",
    "home/.ssh/known_hosts",
    ".aws/credentials",
    "credentials.json",
    "a.p12",
    "b.pfx",
    ".netrc",
    ".npmrc",
    ".pypirc",
    "config/secrets.yaml",
    "android/release.keystore",
    # issue 13: SSH keys of every type and suffix, tool and cloud credentials, key stores
    "id_dsa",
    "id_ecdsa",
    "deploy/id_ecdsa_sk",
    "id_ed25519_sk",
    "id_rsa.bak",
    ".ssh/id_rsa.pub",
    ".git-credentials",
    "_netrc",
    ".pgpass",
    ".envrc",
    "service-account.json",
    "gcp/my-service-account-key.json",
    "client_secret_1234.apps.googleusercontent.com.json",
    ".config/gcloud/application_default_credentials.json",
    "application_default_credentials.json",
    ".azure/accessTokens.json",
    ".kube/config",
    "deploy/kubeconfig",
    ".docker/config.json",
    ".config/gh/hosts.yml",
    "signing.jks",
    "putty.ppk",
    ".vault-token",
    "infra/terraform.tfstate",
    "infra/terraform.tfstate.backup",
    "infra/prod.tfvars",
    "credentials",
    ".gnupg/secring.gpg",
]
ALLOWED = [
    "src/main.py",
    "environment.py",
    "README.md",
    ".github/workflows/ci.yml",
    "keys.py",
    ".gitignore",
    # ordinary source and public material stays readable
    "key.py",
    "keys.go",
    "pkg/credentials.py",
    "auth/credentials_provider.go",
    "id_utils.py",
    "identity.py",
    "id_rsa.pub",
    "keys/id_ed25519.pub",
    "docker/config.json",
    "kube/config.py",
    "secret_santa.py",
    "certs/server.crt",
    "KEYS.asc",
    ".yarnrc.yml",
]


@pytest.mark.parametrize("rel", DENIED)
def test_default_deny_list(repo, rel):
    ws = Workspace(repo)
    assert ws.is_secret(rel)
    with pytest.raises(SecretPathError):
        ws.check_readable(rel)
    with pytest.raises(SecretPathError):
        ws.check_writable(rel)


@pytest.mark.parametrize("rel", ALLOWED)
def test_ordinary_files_are_not_secret(repo, rel):
    ws = Workspace(repo)
    assert not ws.is_secret(rel)
    ws.check_readable(rel)
    ws.check_writable(rel)


def test_secret_error_names_the_pattern_and_the_config_key(repo):
    (repo / ".env").write_text("API_KEY=x\n")
    with pytest.raises(SecretPathError) as info:
        Workspace(repo).read_text(".env")
    message = str(info.value)
    assert "'.env'" in message and "agent.deny" in message and "!.env" in message
    assert "API_KEY" not in message


def test_git_directory_is_readable_but_not_writable(repo):
    ws = Workspace(repo)
    assert "[core]" in ws.read_text(".git/config").text
    with pytest.raises(SecretPathError):
        ws.write_text(".git/hooks/pre-commit", "#!/bin/sh\nexit 0\n")
    with pytest.raises(SecretPathError):
        ws.write_text("vendor/lib/.git", "gitdir: /elsewhere\n")
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    with pytest.raises(SecretPathError) as info:
        ws.write_text(".git/config", "")
    assert "agent.write_deny" in str(info.value)
    assert not ws.is_secret(".git/config")


def test_symlink_to_a_secret_is_denied(repo):
    (repo / ".env").write_text("TOKEN=x\n")
    (repo / "notes.txt").symlink_to(repo / ".env")
    with pytest.raises(SecretPathError):
        Workspace(repo).read_text("notes.txt")


def test_secret_name_is_denied_even_when_it_links_to_a_plain_file(repo):
    (repo / ".env").symlink_to(repo / "README.md")
    with pytest.raises(SecretPathError):
        Workspace(repo).read_text(".env")


def test_deny_list_is_configurable_from_config(repo):
    (repo / ".repoctx.toml").write_text('[agent]\ndeny = ["!.env.example", "*.secret"]\n')
    (repo / ".env.example").write_text("API_KEY=\n")
    (repo / "x.secret").write_text("s\n")
    # `!` re-allows a denied file: the user's choice, so the repository's config is trusted here
    ws = Workspace.from_config(load_config(repo, env={}, trust_repo=True))
    assert ws.read_text(".env.example").text == "API_KEY=\n"
    with pytest.raises(SecretPathError) as info:
        ws.read_text("x.secret")
    assert "'*.secret'" in str(info.value)
    assert ws.is_secret(".env")  # defaults still apply


# -- reading --------------------------------------------------------------------------------------


def test_read_text_slices_lines(repo):
    (repo / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    ws = Workspace(repo)
    whole = ws.read_text("f.txt")
    assert (whole.start_line, whole.end_line, whole.total_lines, whole.truncated) == (
        1,
        10,
        10,
        False,
    )
    part = ws.read_text("f.txt", start_line=3, end_line=5)
    assert part.text == "line 3\nline 4\nline 5\n"
    assert (part.start_line, part.end_line, part.total_lines, part.truncated) == (3, 5, 10, False)
    capped = ws.read_text("f.txt", start_line=2, max_lines=3)
    assert capped.text == "line 2\nline 3\nline 4\n" and capped.truncated and capped.end_line == 4
    past_end = ws.read_text("f.txt", start_line=20)
    assert past_end.text == "" and past_end.total_lines == 10


def test_read_text_without_final_newline_and_invalid_utf8(repo):
    (repo / "f.txt").write_bytes(b"a\nb\xffc")
    result = Workspace(repo).read_text("f.txt")
    assert result.total_lines == 2
    assert result.text == "a\nb\ufffdc"


def test_read_text_is_bounded_by_bytes_even_for_a_single_huge_line(repo):
    (repo / "min.js").write_bytes(b"x" * 3_000_000)
    ws = Workspace(repo, max_read_bytes=100_000)
    result = ws.read_text("min.js")
    assert result.truncated and result.text == "" and result.total_lines == 1
    (repo / "lines.txt").write_bytes(b"0123456789\n" * 50_000)
    result = ws.read_text("lines.txt")
    assert result.truncated and len(result.text) <= 100_000 and result.text.endswith("\n")


def test_read_errors_are_typed(repo):
    (repo / "blob.bin").write_bytes(b"\x89PNG\x00\x00")
    ws = Workspace(repo)
    with pytest.raises(BinaryFileError):
        ws.read_text("blob.bin")
    with pytest.raises(PathNotFoundError):
        ws.read_text("missing.py")
    with pytest.raises(NotAFileError):
        ws.read_text("src")


# -- writing and listing --------------------------------------------------------------------------


def test_write_text_creates_parents_and_keeps_mode(repo):
    ws = Workspace(repo)
    ws.write_text("pkg/sub/new.py", "x = 1\n")
    assert (repo / "pkg" / "sub" / "new.py").read_text() == "x = 1\n"
    script = repo / "run.sh"
    script.write_text("old\n")
    script.chmod(0o755)
    ws.write_text("run.sh", "new\n")
    assert script.read_text() == "new\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o755


def test_write_outside_or_to_secrets_is_refused(repo, outside):
    ws = Workspace(repo)
    with pytest.raises(PathEscapeError):
        ws.write_text("../outside/x.txt", "x")
    with pytest.raises(SecretPathError):
        ws.write_text("deploy/prod.pem", "x")
    assert not (outside / "x.txt").exists() and not (repo / "deploy").exists()


def test_list_dir_respects_depth_and_hides_secrets(repo, outside):
    (repo / ".env").write_text("x\n")
    (repo / "src" / "pkg").mkdir()
    (repo / "src" / "pkg" / "deep.py").write_text("")
    (repo / "ext").symlink_to(outside, target_is_directory=True)
    ws = Workspace(repo)
    top = {e.path: e for e in ws.list_dir(".", depth=1).entries}
    assert set(top) == {".git", "README.md", "src", "ext"}
    assert top["ext"].kind == "symlink" and top["src"].kind == "dir"
    assert top["README.md"].size == len("readme\n")
    deep = {e.path for e in ws.list_dir(".", depth=3).entries}
    assert "src/pkg/deep.py" in deep
    assert not any(p.startswith(".git/") for p in deep)  # not descended into
    assert not any(p.startswith("ext/") for p in deep)  # symlinked dirs are not followed
    assert ".env" not in deep
    listing = ws.list_dir(".", depth=3, max_entries=2)
    assert listing.truncated and len(listing.entries) == 2


# -- checkpoints ----------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path) -> CheckpointStore:
    return CheckpointStore(tmp_path / "checkpoints")


def snapshot(root: Path) -> dict[str, tuple[bytes, int, int] | str]:
    """Every file (bytes, mode, mtime) and directory under root, .git excluded."""
    out: dict[str, tuple[bytes, int, int] | str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = "dir"
        for f in filenames:
            p = Path(dirpath) / f
            st = p.lstat()
            out[str(p.relative_to(root))] = (
                p.read_bytes(),
                stat.S_IMODE(st.st_mode),
                st.st_mtime_ns,
            )
    return out


BINARY = bytes(range(256)) * 64 + b"\x00\r\n\r\xff"


def test_rollback_step_restores_bytes_mode_and_mtime(repo, store):
    (repo / "data.bin").write_bytes(BINARY)
    (repo / "data.bin").chmod(0o751)
    os.utime(repo / "data.bin", ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    before = snapshot(repo)
    ws = Workspace(repo, recorder=store)
    store.begin_step("run1", 1)
    ws.write_bytes("data.bin", b"changed")
    ws.write_text("data.bin", "changed twice")  # second write in the step: first state kept
    (repo / "data.bin").chmod(0o600)
    ws.write_text("README.md", "rewritten\n")
    assert snapshot(repo) != before
    report = store.rollback_step("run1", 1)
    assert snapshot(repo) == before
    assert set(report.restored) == {repo.resolve() / "data.bin", repo.resolve() / "README.md"}


def test_created_files_and_directories_are_removed(repo, store):
    before = snapshot(repo)
    ws = Workspace(repo, recorder=store)
    store.begin_step("run1", 0)
    ws.write_text("new/a/b/c.py", "x\n")
    ws.write_text("new/a/other.py", "y\n")
    ws.write_text("top.py", "z\n")
    report = store.rollback_run("run1")
    assert snapshot(repo) == before
    assert repo.resolve() / "new" in report.removed_dirs


def test_directory_holding_unrecorded_files_is_kept(repo, store):
    ws = Workspace(repo, recorder=store)
    store.begin_step("run1", 0)
    ws.write_text("gen/out.py", "x\n")
    (repo / "gen" / "made-by-a-command.log").write_text("log\n")
    store.rollback_run("run1")
    assert not (repo / "gen" / "out.py").exists()
    assert (repo / "gen" / "made-by-a-command.log").read_text() == "log\n"


def test_deleted_files_are_restored(repo, store):
    (repo / "keep.bin").write_bytes(BINARY)
    (repo / "keep.bin").chmod(0o640)
    before = snapshot(repo)
    ws = Workspace(repo, recorder=store)
    store.begin_step("run1", 0)
    ws.delete_file("keep.bin")
    ws.delete_file("src/main.py")
    (repo / "src").rmdir()  # the agent's command removed the emptied directory too
    store.rollback_run("run1")
    assert snapshot(repo) == before


def test_rollback_run_walks_steps_back_newest_first(repo, store):
    original = snapshot(repo)
    ws = Workspace(repo, recorder=store)
    store.begin_step("run1", 1)
    ws.write_text("src/main.py", "step one\n")
    after_one = snapshot(repo)
    store.begin_step("run1", 2)
    ws.write_text("src/main.py", "step two\n")
    ws.write_text("added.py", "new\n")
    store.begin_step("run1", 3)
    ws.delete_file("added.py")
    assert [str(p) for p in store.changed_files("run1")] == sorted(
        str(repo.resolve() / p) for p in ("added.py", "src/main.py")
    )
    store.rollback_step("run1", 3)
    store.rollback_step("run1", 2)
    assert snapshot(repo) == after_one
    report = store.rollback_run("run1")
    assert report.steps == (1,)  # 2 and 3 were already undone
    assert snapshot(repo) == original
    assert store.changed_files("run1") == ()
    assert store.rollback_run("run1").steps == ()  # idempotent


def test_rollback_works_from_another_process(repo, tmp_path, store):
    (repo / "data.bin").write_bytes(BINARY)
    before = snapshot(repo)
    ws = Workspace(repo, recorder=store)
    store.begin_step("run-x", 1)
    ws.write_bytes("data.bin", b"\x00" * 10)
    ws.write_text("made.txt", "m\n")
    store.begin_step("run-x", 2)
    ws.delete_file("README.md")
    code = (
        "import sys; from pathlib import Path; from agent.checkpoints import CheckpointStore; "
        "r = CheckpointStore(Path(sys.argv[1])).rollback_run('run-x'); print(r.steps)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(store.dir)],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "(2, 1)"
    assert snapshot(repo) == before


def test_resumed_step_keeps_the_first_recorded_state(repo, tmp_path):
    first = CheckpointStore(tmp_path / "cp")
    first.begin_step("r", 1)
    Workspace(repo, recorder=first).write_text("README.md", "v1\n")
    second = CheckpointStore(tmp_path / "cp")
    second.begin_step("r", 1)
    assert second.record_before_write(repo.resolve() / "README.md") is False
    Workspace(repo, recorder=second).write_text("README.md", "v2\n")
    second.rollback_step("r", 1)
    assert (repo / "README.md").read_text() == "readme\n"


def test_symlinks_are_restored_as_symlinks(tmp_path, store):
    link = tmp_path / "link"
    link.symlink_to("target-that-does-not-exist")
    store.begin_step("r", 0)
    store.record_before_write(link)
    link.unlink()
    link.write_text("now a file")
    store.rollback_step("r", 0)
    assert link.is_symlink() and os.readlink(link) == "target-that-does-not-exist"


def test_failed_rollback_is_reported_and_can_be_retried(repo, store):
    ws = Workspace(repo, recorder=store)
    store.begin_step("r", 0)
    ws.write_text("made.py", "x\n")
    ws.write_text("README.md", "changed\n")
    (repo / "made.py").unlink()
    (repo / "made.py").mkdir()  # something replaced the file with a non-empty directory
    (repo / "made.py" / "inner").write_text("i\n")
    with pytest.raises(RollbackError) as info:
        store.rollback_run("r")
    assert "made.py" in str(info.value) and "roll back again" in str(info.value)
    assert (repo / "README.md").read_text() == "readme\n"  # the rest was still restored
    (repo / "made.py" / "inner").unlink()
    assert store.rollback_run("r").steps == (0,)
    assert not (repo / "made.py").exists()


def test_checkpoint_misuse_is_typed(repo, store):
    with pytest.raises(CheckpointError):
        store.record_before_write(repo / "README.md")
    with pytest.raises(CheckpointError):
        Workspace(repo, recorder=store).write_text("README.md", "x")
    assert (repo / "README.md").read_text() == "readme\n"  # refused before writing
    with pytest.raises(CheckpointError):
        store.begin_step("../escape", 1)
    with pytest.raises(CheckpointError):
        store.begin_step("ok", -1)
    with pytest.raises(RollbackError):
        store.rollback_run("never-ran")
    with pytest.raises(RollbackError):
        store.rollback_step("never-ran", 3)
