"""A repository's config may only tighten (issue 38, item 4), and a config file that cannot be
read is one line in bounded time (item 8).

Trusted: flags, REPOCTX_* variables, the user's `$XDG_CONFIG_HOME/repoctx/config.toml`.
Untrusted: the repository's `.repoctx.toml` and `[tool.repoctx]` of pyproject.toml. Every test
loads real files from a real git repository, through `load_config` and the real CLI (CliRunner,
and a subprocess where a hang is the failure)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from agent.settings import AgentSettings
from agent.workspace import Workspace
from cli.main import cli
from cli.settings import SETTINGS, load_config
from indexer.config_files import changes_repo_config, is_config_path, user_config_path
from indexer.errors import ConfigError, UntrustedConfigError
from indexer.settings import env_name
from tests.conftest import make_repo

FILES = {"pkg/__init__.py": "", "pkg/calc.py": "def add(a, b):\n    return a + b\n"}
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _user_env(monkeypatch, tmp_path):
    """No REPOCTX_* of the developer's; the user's config directory is a fresh one."""
    for name in list(os.environ):
        if name.startswith("REPOCTX_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", FILES)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "elsewhere"
    d.mkdir()
    return d


def env(tmp_path: Path, **more: str) -> dict[str, str]:
    """The whole environment load_config sees: only the user's config directory, and ``more``."""
    return {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), **more}


def user_file(tmp_path: Path) -> Path:
    return tmp_path / "xdg" / "repoctx" / "config.toml"


def write_user(tmp_path: Path, text: str) -> None:
    user_file(tmp_path).parent.mkdir(parents=True, exist_ok=True)
    user_file(tmp_path).write_text(text)


def toml_for(key: str, value: str) -> str:
    """``key = value`` as a TOML document (a dotted key goes in its table)."""
    section, dot, name = key.rpartition(".")
    return f"[{section}]\n{name} = {value}\n" if dot else f"{key} = {value}\n"


def write_repo(repo: Path, place: str, key: str, value: str) -> None:
    text = toml_for(key, value)
    if place == "pyproject.toml":
        section, dot, name = key.rpartition(".")
        text = (f"[tool.repoctx.{section}]\n{name} = {value}\n" if dot
                else f"[tool.repoctx]\n{key} = {value}\n")
        text = "[project]\nname = 'demo'\n\n" + text
    (repo / place).write_text(text)


def invoke(*args: str, **kw):
    return CliRunner().invoke(cli, list(args), **kw)


def one_line_error(result) -> str:
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)  # not a crash
    assert "Traceback" not in result.output and result.stdout == ""
    message = result.stderr.strip()
    assert message.startswith("Error: ") and "\n" not in message, message
    return message


# -- each loosening key, refused from the repository ---------------------------------------------

#: (key, a TOML value that loosens it, a fragment of why). `{out}` is a directory outside the
#: repository. Every setting with a `weakens` in SETTINGS has a case here (checked below).
LOOSENING = [
    ("agent.sandbox", '"off"', 'confines commands less than "auto"'),
    ("agent.sandbox_write", '["{out}"]', "makes more paths writable"),
    ("agent.sandbox_read", '["~"]', "makes more paths readable"),
    ("agent.network", "true", "gives commands the network"),
    ("agent.env_allow", '["PATH", "SSH_AUTH_SOCK"]', "environment variables to commands (SSH_AUTH_SOCK)"),
    ("agent.allow_commands", '["python", "bash", "curl"]', "allows more programs (bash, curl)"),
    ("agent.git_write", "true", "lets git commands change the repository"),
    ("agent.deny", '["!.env"]', "re-allows denied paths (!.env)"),
    ("agent.write_deny", '["!.git/"]', "re-allows denied paths (!.git/)"),
    ("agent.sandbox_deny_read", '["!x"]', "re-allows denied paths"),
    ("index_dir", '"{out}"', "points outside the repository"),
    ("index_dir", '"../elsewhere/idx"', "points outside the repository"),
    ("index_dir", '"~/.cache/idx"', "points outside the repository"),
    ("vectors_uri", '"s3://attacker-bucket/vectors"', "object storage"),
    ("vectors_uri", '"../elsewhere/vectors"', "points outside the repository"),
    ("vectors_uri", '"{out}/vectors"', "points outside the repository"),
    ("snapshot_uri", '"gs://attacker-bucket/snaps"', "object storage"),
    ("snapshot_uri", '"file://{out}/snaps"', "points outside the repository"),
    ("snapshot_uri", '"file://snaps"', "is a file: URI without an absolute path"),
    ("vectors_uri", '"file:vectors"', "is a file: URI without an absolute path"),
    ("storage_options", '{{ aws_endpoint = "https://collector.example" }}',
     "changes object-storage options (aws_endpoint)"),
    ("ray_address", '"ray://collector.example:10001"', "sends the build to a Ray cluster"),
]
PLACES = [".repoctx.toml", "pyproject.toml"]


def case_id(case) -> str:
    return f"{case[0]}={case[1][:18]}"


def test_every_loosening_setting_has_a_case():
    covered = {key for key, _, _ in LOOSENING}
    assert covered == {k for k, s in SETTINGS.items() if s.weakens is not None}
    # the keys the issue names, at least
    assert {"agent.sandbox", "agent.sandbox_write", "agent.sandbox_read", "agent.network",
            "agent.env_allow", "agent.allow_commands", "agent.git_write", "index_dir"} <= covered


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("case", LOOSENING, ids=case_id)
def test_loosening_value_from_the_repository_is_refused(repo, outside, tmp_path, place, case):
    key, value, why = case
    write_repo(repo, place, key, value.format(out=outside))
    with pytest.raises(UntrustedConfigError) as err:
        load_config(repo, env=env(tmp_path))
    message = str(err.value)
    assert "\n" not in message
    for part in (f"{place}", f"sets `{key}`", why, "may only tighten",
                 str(user_file(tmp_path)), env_name(key), "--trust-repo-config"):
        assert part in message, (part, message)
    # the same through the CLI: `agent run` refuses before any model is opened or tool made
    result = invoke("agent", "run", "fix it", "-m", f"scripted:{tmp_path / 'none.jsonl'}",
                    "--yes", "-C", str(repo))
    cli_message = one_line_error(result)
    assert f"sets `{key}`" in cli_message and str(user_file(tmp_path)) in cli_message
    assert not (repo / ".repoctx").exists()


@pytest.mark.parametrize("case", LOOSENING, ids=case_id)
def test_the_same_value_from_the_user_config_or_the_environment_is_honoured(
        repo, outside, tmp_path, case):
    key, value, _ = case
    value = value.format(out=outside)
    write_user(tmp_path, toml_for(key, value))
    from_user = load_config(repo, env=env(tmp_path))
    # and the repository may repeat what the user already allows
    write_repo(repo, ".repoctx.toml", key, value)
    assert settings_of(load_config(repo, env=env(tmp_path)), key) == settings_of(from_user, key)
    user_file(tmp_path).unlink()
    with pytest.raises(UntrustedConfigError):
        load_config(repo, env=env(tmp_path))
    trusted = load_config(repo, env=env(tmp_path), trust_repo=True)
    assert settings_of(trusted, key) == settings_of(from_user, key) is not None
    for variables in ({"REPOCTX_TRUST_REPO_CONFIG": "1"}, {"REPOCTX_TRUST_REPO_CONFIG": "yes"}):
        assert settings_of(load_config(repo, env=env(tmp_path, **variables)), key) == \
            settings_of(from_user, key)


def settings_of(cfg, key: str):
    section, dot, name = key.partition(".")
    if dot:
        return cfg.extra.get(section, {}).get(name)
    value = getattr(cfg, key)
    return os.fspath(value) if isinstance(value, os.PathLike) else value


@pytest.mark.parametrize("how", ["global", "command", "env"])
def test_trust_repo_config_through_the_cli(repo, tmp_path, how):
    write_repo(repo, ".repoctx.toml", "agent.network", "true")
    base = ["agent", "replay", "--list", "-C", str(repo)]
    one_line_error(invoke(*base))
    args = {"global": ["--trust-repo-config", *base], "command": [*base, "--trust-repo-config"],
            "env": base}[how]
    result = invoke(*args, env={"REPOCTX_TRUST_REPO_CONFIG": "1"} if how == "env" else None)
    assert result.exit_code == 0, result.output
    one_line_error(invoke(*base))  # nothing carried over to the next invocation


def test_the_user_config_and_flags_are_honoured_through_the_cli(repo, outside, tmp_path):
    write_repo(repo, ".repoctx.toml", "index_dir", f'"{outside}/idx"')
    one_line_error(invoke("index", "build", str(repo), "-q", "--no-embed"))
    assert not (outside / "idx").exists()
    # the flag wins over the repository's value: nothing of the repository's is used
    result = invoke("index", "build", str(repo), "-q", "--no-embed", "--index-dir",
                    str(outside / "flag"))
    assert result.exit_code == 0, result.output
    assert (outside / "flag" / "graph.db").exists() and not (outside / "idx").exists()
    write_user(tmp_path, f'index_dir = "{outside}/idx"\n[agent]\nnetwork = true\n')
    (repo / ".repoctx.toml").unlink()
    result = invoke("index", "build", str(repo), "-q", "--no-embed")
    assert result.exit_code == 0, result.output
    assert (outside / "idx" / "graph.db").exists()
    cfg = load_config(repo, env=env(tmp_path))
    assert AgentSettings.from_config(cfg).network is True


def test_every_command_that_loads_config_takes_the_trust_flag():
    def walk(cmd: click.Command, path: str):
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                yield from walk(sub, f"{path} {name}")
        else:
            yield path, {p.name for p in cmd.params}

    commands = list(walk(cli, "repoctx"))
    loading = [(p, names) for p, names in commands if "index_dir" in names]
    assert len(loading) >= 10
    for path, names in loading:
        assert "trust_repo_config" in names, path
    assert "trust_repo_config" in {p.name for p in cli.params}


def test_a_bad_trust_variable_is_an_error(repo, tmp_path):
    with pytest.raises(ConfigError, match="REPOCTX_TRUST_REPO_CONFIG = 'maybe' is not a boolean"):
        load_config(repo, env=env(tmp_path, REPOCTX_TRUST_REPO_CONFIG="maybe"))


# -- tightening is honoured; "looser" is measured against the trusted value ----------------------

def test_tightening_values_from_the_repository_are_honoured(repo, tmp_path):
    (repo / ".repoctx.toml").write_text(
        'index_dir = "sub/idx"\nvectors_uri = "vecs"\n'
        '[agent]\nsandbox = "required"\nnetwork = false\nallow_commands = ["echo", "git"]\n'
        'env_allow = ["PATH"]\nsandbox_deny_read = [".pgpass"]\ndeny = ["*.secret"]\n'
        'write_deny = ["docs/"]\ngit_write = false\nsandbox_read = []\nsandbox_write = []\n')
    cfg = load_config(repo, env=env(tmp_path, REPOCTX_AGENT_NETWORK="1"))
    s = AgentSettings.from_config(cfg)
    assert (s.sandbox, s.network, s.git_write) == ("required", False, False)
    assert s.allow_commands == ("echo", "git") and s.env_allow == ("PATH",)
    assert s.sandbox_deny_read == (".pgpass",)
    assert cfg.index_dir == repo.resolve() / "sub" / "idx"
    # a path in the repository's file is the repository's, wherever repoctx runs from
    assert cfg.vectors_uri == str(repo.resolve() / "vecs")
    ws = Workspace.from_config(cfg)
    assert ws.is_secret("x.secret") and ws.is_secret(".env")
    with pytest.raises(Exception, match="docs/"):
        ws.check_writable("docs/readme.md")


def test_looser_is_measured_against_the_users_own_value(repo, tmp_path):
    write_user(tmp_path, '[agent]\nsandbox = "required"\nallow_commands = ["git", "ls"]\n'
                         'sandbox_deny_read = [".pgpass"]\nsandbox_write = ["/srv/cache"]\n')
    for body, why in [('sandbox = "auto"', 'confines commands less than "required"'),
                      ('allow_commands = ["git", "ls", "cat"]', "allows more programs (cat)"),
                      ("sandbox_deny_read = []", "drops denied paths (.pgpass)"),
                      ('sandbox_write = ["/srv/cache", "/srv"]', "makes more paths writable (/srv)")]:
        (repo / ".repoctx.toml").write_text(f"[agent]\n{body}\n")
        with pytest.raises(UntrustedConfigError, match=re.escape(why)):
            load_config(repo, env=env(tmp_path))
    write_user(tmp_path, '[storage_options]\naws_region = "eu-west-1"\n'
                         'aws_endpoint = "http://minio.internal:9000"\n'
                         + user_file(tmp_path).read_text())
    for body, why in [('[storage_options]\naws_region = "eu-west-1"\n',
                       "changes object-storage options (aws_endpoint)"),
                      ('[storage_options]\naws_region = "us-east-1"\n'
                       'aws_endpoint = "http://minio.internal:9000"\n',
                       "changes object-storage options (aws_region)")]:
        (repo / ".repoctx.toml").write_text(body)
        with pytest.raises(UntrustedConfigError, match=re.escape(why)):
            load_config(repo, env=env(tmp_path))
    (repo / ".repoctx.toml").write_text(
        '[agent]\nsandbox = "required"\nallow_commands = ["git"]\n'
        'sandbox_deny_read = [".pgpass", ".netrc"]\nsandbox_write = []\n')
    s = AgentSettings.from_config(load_config(repo, env=env(tmp_path)))
    assert s.allow_commands == ("git",) and s.sandbox_deny_read == (".pgpass", ".netrc")
    assert s.sandbox_write == ()


def test_index_dir_through_a_symlink_that_leaves_the_repository_is_refused(repo, outside, tmp_path):
    (repo / "idx").symlink_to(outside, target_is_directory=True)
    (repo / "inside").mkdir()
    (repo / "alias").symlink_to(repo / "inside", target_is_directory=True)
    for value in ('"idx"', '"idx/deeper"', '"./alias/../idx"'):
        (repo / ".repoctx.toml").write_text(f"index_dir = {value}\n")
        with pytest.raises(UntrustedConfigError, match="points outside the repository"):
            load_config(repo, env=env(tmp_path))
    for value in ('"alias"', '"inside/idx"', '".repoctx-other"', f'"{repo}/abs-inside"'):
        (repo / ".repoctx.toml").write_text(f"index_dir = {value}\n")
        assert load_config(repo, env=env(tmp_path)).index_dir is not None
    (repo / ".repoctx.toml").write_text('index_dir = "idx"\n')
    result = invoke("index", "build", str(repo), "-q", "--no-embed")
    one_line_error(result)
    assert list(outside.iterdir()) == []


def test_a_loosening_value_written_mid_run_is_refused_on_reload(repo, tmp_path):
    """A watcher (the MCP server's refresh, `index watch`) reloads the config through the same
    loader: a `.repoctx.toml` the agent wrote is refused there too."""
    from cli.common import make_config

    assert make_config(repo).extra == {}
    (repo / ".repoctx.toml").write_text('[agent]\nsandbox = "off"\n')
    with pytest.raises(UntrustedConfigError):
        make_config(repo)
    # the watcher's reload, decided when the command started (no click context in its thread)
    assert make_config(repo, trust_repo=True).extra == {"agent": {"sandbox": "off"}}


# -- the agent run end to end: a repository's narrower allowlist holds ----------------------------

def test_agent_run_obeys_a_narrower_allowlist_from_the_repository(repo, tmp_path):
    (repo / ".repoctx.toml").write_text('[agent]\nallow_commands = ["echo"]\n')
    script = tmp_path / "script.jsonl"
    plan = json.dumps({"steps": [{"title": "List the files", "done_when": "listed"}]})
    calls = [plan,
             {"tool_calls": [{"name": "run_command", "arguments": {"command": "ls"}}]},
             {"tool_calls": [{"name": "run_command", "arguments": {"command": "echo hi"}}]},
             {"tool_calls": [{"name": "finish", "arguments": {"summary": "done"}}]}]
    script.write_text("\n".join(json.dumps(c) for c in calls) + "\n")
    result = invoke("agent", "run", "list the files", "-m", f"scripted:{script}", "--yes",
                    "--json", "-C", str(repo))
    assert result.exit_code == 0, result.output
    events = json.loads(invoke("agent", "replay", "last", "--json", "-C", str(repo)).stdout)
    runs = [e for e in events if e["type"] == "tool_call" and e.get("name") == "run_command"]
    assert len(runs) == 2, events
    assert not runs[0]["ok"] and "agent.allow_commands" in json.dumps(runs[0])
    assert runs[1]["ok"], runs[1]


# -- config files that cannot be read: one line, bounded time -------------------------------------

def deep(kind: str, depth: int) -> str:
    if kind == "arrays":
        return "x = " + "[" * depth + "]" * depth + "\n"
    if kind == "inline tables":
        return "x = " + "{a = " * depth + "1" + "}" * depth + "\n"
    return "".join(f"[{'.'.join(['t'] * (i + 1))}]\n" for i in range(depth))  # dotted tables


UNREADABLE = [
    *[(f"{k} {d}", deep(k, d).encode(), "nested more than")
      for k in ("arrays", "inline tables") for d in (40, 990, 5000, 100_000)],
    ("dotted tables 100", deep("dotted", 100).encode(), "nested more than"),
    ("bad UTF-8", b"jobs = 1\n# \xff\xfe caf\xe9\n", "is not UTF-8"),
    ("bad TOML", b"jobs = = 1\n", "fix the file's TOML syntax"),
    ("3 MiB", b"# " + b"x" * (3 << 20) + b"\n", "larger than 1 MiB"),
]


def plant(path: Path, what: str | bytes) -> None:
    if what == "fifo":
        os.mkfifo(path)
    elif what == "directory":
        path.mkdir()
    elif what == "device":
        path.symlink_to("/dev/zero")
    elif what == "sparse":
        with open(path, "wb") as f:
            f.truncate(64 << 20)  # 64 MiB of zeros, none of it on disk
    else:
        assert isinstance(what, bytes)
        path.write_bytes(what)


SPECIAL = [("fifo", "is a FIFO"), ("directory", "is a directory"), ("device", "is a device"),
           ("sparse", "larger than 1 MiB")]


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("name, content, expect",
                         [*UNREADABLE, *[(w, w, e) for w, e in SPECIAL]],
                         ids=[*(u[0] for u in UNREADABLE), *(w for w, _ in SPECIAL)])
def test_an_unreadable_config_is_one_line(repo, tmp_path, place, name, content, expect):
    plant(repo / place, content)
    start = time.monotonic()
    with pytest.raises(ConfigError) as err:
        load_config(repo, env=env(tmp_path))
    assert time.monotonic() - start < 5
    message = str(err.value)
    assert "\n" not in message and len(message) < 300 and expect in message, message
    assert message.startswith(f"Cannot read {place}")
    result = invoke("index", "build", str(repo), "-q", "--no-embed")
    assert expect in one_line_error(result)


@pytest.mark.parametrize("what", ["fifo", b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n"],
                         ids=["fifo", "deep"])
def test_an_unreadable_config_never_blocks_the_cli_process(repo, tmp_path, what):
    """In a real process: a FIFO nobody writes to used to be waited on forever by an open()."""
    plant(repo / ".repoctx.toml", what)
    proc = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", "search", "add", "-C",
         str(repo)], capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Cannot read .repoctx.toml" in proc.stderr


@pytest.mark.parametrize("content", [deep("arrays", 5000).encode(), b"\xff", "fifo", "directory"],
                         ids=["deep", "utf8", "fifo", "directory"])
def test_an_unreadable_user_config_is_one_line_naming_it(repo, tmp_path, content):
    user_file(tmp_path).parent.mkdir(parents=True)
    plant(user_file(tmp_path), content)
    with pytest.raises(ConfigError) as err:
        load_config(repo, env=env(tmp_path))
    assert str(err.value).startswith(f"Cannot read {user_file(tmp_path)}")
    assert "\n" not in str(err.value)


# -- the user's config file: where it is, where it sits in the precedence -------------------------

def test_user_config_location_and_precedence(repo, tmp_path):
    assert user_config_path({"XDG_CONFIG_HOME": "/x"}) == Path("/x/repoctx/config.toml")
    assert user_config_path({"HOME": "/h"}) == Path("/h/.config/repoctx/config.toml")
    assert user_config_path({"XDG_CONFIG_HOME": "rel", "HOME": "/h"}) == \
        Path("/h/.config/repoctx/config.toml")  # a relative XDG_CONFIG_HOME is ignored
    assert user_config_path({}) is None
    write_user(tmp_path, "jobs = 2\nbatch_size = 3\nmax_file_bytes = 4\ncontext_budget = 5\n")
    (repo / ".repoctx.toml").write_text("batch_size = 30\nmax_file_bytes = 40\n")
    cfg = load_config(repo, env=env(tmp_path, REPOCTX_JOBS="20", REPOCTX_MAX_FILE_BYTES="400"),
                      max_file_bytes=4000)
    # flag > repository > environment > user > default
    assert (cfg.max_file_bytes, cfg.batch_size, cfg.jobs) == (4000, 30, 20)
    assert cfg.extra["context_budget"] == 5
    write_user(tmp_path, "jobz = 2\n")
    with pytest.raises(ConfigError, match=rf"Unknown setting `jobz` in {user_file(tmp_path)}"):
        load_config(repo, env=env(tmp_path))
    write_user(tmp_path, "jobs = -1\n")
    with pytest.raises(ConfigError, match=rf"`jobs` = -1 in {user_file(tmp_path)} is out of range"):
        load_config(repo, env=env(tmp_path))


# -- repoctx's own files, for the agent's write tools --------------------------------------------

@pytest.mark.parametrize("rel, expected", [
    (".repoctx.toml", True), ("sub/.repoctx.toml", True), ("./.repoctx.toml", True),
    (".repoctx/graph.db", True), (".repoctx", True), ("a/.repoctx/x", True),
    ("pyproject.toml", False), ("repoctx.toml", False), (".repoctx.toml.bak", False),
    ("src/.repoctxignore", False), ("docs/.repoctx.toml.md", False),
])
def test_is_config_path(rel, expected):
    assert is_config_path(rel) is expected


def test_changes_repo_config_in_pyproject_only_for_its_repoctx_table():
    base = "[project]\nname = 'demo'\n"
    assert not changes_repo_config("pyproject.toml", base, base + "version = '1'\n")
    assert changes_repo_config("pyproject.toml", base, base + "[tool.repoctx.agent]\nnetwork = true\n")
    assert changes_repo_config("sub/pyproject.toml", None, "[tool.repoctx]\njobs = 1\n")
    assert not changes_repo_config("pyproject.toml", base, "not toml [")  # fails closed on load
    assert changes_repo_config(".repoctx.toml", None, "")
    assert not changes_repo_config("src/app.py", None, "[tool.repoctx]\n")


def test_is_config_path_covers_the_users_config_inside_a_workspace(tmp_path):
    """A run whose workspace holds the user's config directory (an agent run in $HOME)."""
    user_file(tmp_path).parent.mkdir(parents=True)
    (tmp_path / "link").symlink_to(user_file(tmp_path).parent, target_is_directory=True)
    for rel in ("xdg/repoctx/config.toml", "xdg/repoctx/new.toml", "link/config.toml",
                "xdg/./repoctx/../repoctx/config.toml"):
        assert is_config_path(rel, tmp_path), rel
    for rel in ("xdg/other.toml", "xdg/repoctx-not/config.toml", "pkg/calc.py"):
        assert not is_config_path(rel, tmp_path), rel
