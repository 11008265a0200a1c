"""Configuration is checked in one place (the settings table cli/settings.py composes from each
layer's section) for every source, and a
URI carrying credentials is refused before anything is written, without echoing the secret.

Real git repositories, real `.repoctx.toml` / pyproject.toml files, the real CLI (CliRunner),
real SQLite indexes."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent.settings import AgentSettings
from agent.workspace import Workspace
from cli.main import cli
from cli.settings import SETTINGS, load_config
from indexer.config import Config
from indexer.credentials import redact_uri, uri_credentials
from indexer.errors import ConfigError
from indexer.locations import record_vectors_uri
from indexer.settings import env_name
from retrieval.settings import RetrievalSettings
from tests.conftest import make_repo

FILES = {
    "pkg/__init__.py": "",
    "pkg/calc.py": '''
        def add(a, b):
            return a + b


        def total(items):
            return sum(add(0, i) for i in items)
    ''',
}


@pytest.fixture(autouse=True)
def _no_repoctx_env(monkeypatch):
    """The developer's own REPOCTX_* variables must not leak into these tests."""
    for name in list(os.environ):
        if name.startswith("REPOCTX_"):
            monkeypatch.delenv(name)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", FILES)


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli, list(args), env=env)


def snapshot_dir(path: Path) -> dict[str, str]:
    """Every file under ``path`` with the hash of its bytes: equal before and after means
    untouched."""
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*")) if p.is_file()
    }


def indexed_paths(root: Path) -> list[str]:
    conn = sqlite3.connect(root / ".repoctx" / "graph.db")
    try:
        return sorted(r[0] for r in conn.execute("SELECT path FROM files"))
    finally:
        conn.close()


def all_index_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((root / ".repoctx").rglob("*")) if p.is_file())


def assert_clean_failure(result, *expected: str) -> str:
    """Exit 1 through the CLI's error path: one line, no traceback, every expected part."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)  # not a crash
    assert "Traceback" not in result.output
    assert result.stdout == ""
    message = result.stderr.strip()
    assert message.startswith("Error: ") and "\n" not in message, message
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"
    return message


# -- defect 8: bad values are refused, naming key, source, value and range -----------------------

BAD_FILE_VALUES = [
    ("max_file_bytes = -5",
     "`max_file_bytes` = -5 in .repoctx.toml is out of range — use an integer from 1 to "
     "2147483647 (bytes; default 1000000)."),
    ("max_file_bytes = 1e400",
     "`max_file_bytes` = inf in .repoctx.toml is not a finite number — use an integer from 1 "
     "to 2147483647 (bytes; default 1000000)."),
    ("jobs = -3",
     "`jobs` = -3 in .repoctx.toml is out of range — use an integer from 0 to 256 "
     "(0 = one per core; default 0)."),
    ("jobs = 100000",
     "`jobs` = 100000 in .repoctx.toml is out of range — use an integer from 0 to 256 "
     "(0 = one per core; default 0)."),
    ("[agent]\nmax_read_lines = -1",
     "`agent.max_read_lines` = -1 in .repoctx.toml [agent] is out of range — use an integer "
     "from 1 to 1000000 (lines; default 200)."),
    ('[agent]\ncommand_timeout_s = "x"',
     "`agent.command_timeout_s` = 'x' in .repoctx.toml [agent] is not a number — use a number "
     "greater than 0 and at most 86400 (seconds; default 120)."),
]


@pytest.mark.parametrize("toml, message", BAD_FILE_VALUES, ids=[t for t, _ in BAD_FILE_VALUES])
def test_bad_value_in_file_is_refused_and_the_index_is_untouched(repo, toml, message):
    built = invoke("index", "build", str(repo), "-q", "--no-embed")
    assert built.exit_code == 0, built.output
    before = snapshot_dir(repo / ".repoctx")
    assert indexed_paths(repo) == ["pkg/__init__.py", "pkg/calc.py"]

    (repo / ".repoctx.toml").write_text(toml + "\n")
    result = invoke("index", "build", str(repo), "-q", "--no-embed")
    assert_clean_failure(result, message)
    assert snapshot_dir(repo / ".repoctx") == before  # not a byte written
    assert indexed_paths(repo) == ["pkg/__init__.py", "pkg/calc.py"]


def test_bad_value_on_a_fresh_tree_creates_no_index(repo):
    (repo / ".repoctx.toml").write_text("max_file_bytes = -5\n")
    result = invoke("index", "build", str(repo), "-q", "--no-embed")
    assert_clean_failure(result, "`max_file_bytes` = -5 in .repoctx.toml is out of range")
    assert not (repo / ".repoctx").exists()


@pytest.mark.parametrize("body, message", [
    ("[tool.repoctx]\nmax_file_bytes = -5\n",
     "`max_file_bytes` = -5 in pyproject.toml [tool.repoctx] is out of range"),
    ("[tool.repoctx.agent]\ntest_timeout_s = 0\n",
     "`agent.test_timeout_s` = 0 in pyproject.toml [tool.repoctx.agent] is out of range — use "
     "a number greater than 0 and at most 86400 (seconds; default 600)."),
    ("[tool.repoctx.agent]\nsandbox = \"maybe\"\n",
     "`agent.sandbox` = 'maybe' in pyproject.toml [tool.repoctx.agent] is not a known choice — "
     'use one of auto, required, off (default "auto").'),
])
def test_pyproject_values_are_checked_and_named(repo, body, message):
    (repo / "pyproject.toml").write_text("[project]\nname = 'demo'\n\n" + body)
    assert_clean_failure(invoke("index", "build", str(repo), "-q", "--no-embed"), message)


@pytest.mark.parametrize("name, value, message", [
    ("REPOCTX_JOBS", "abc",
     "`jobs` = 'abc' from REPOCTX_JOBS is not an integer — use an integer from 0 to 256 "
     "(0 = one per core; default 0)."),
    ("REPOCTX_JOBS", "100000", "`jobs` = '100000' from REPOCTX_JOBS is out of range"),
    ("REPOCTX_MAX_FILE_BYTES", "1e400", "`max_file_bytes` = '1e400' from REPOCTX_MAX_FILE_BYTES "
     "is not an integer"),
    ("REPOCTX_MAX_FILE_BYTES", "9" * 5000, "from REPOCTX_MAX_FILE_BYTES is out of range"),
    ("REPOCTX_AGENT_COMMAND_TIMEOUT_S", "nan", "`agent.command_timeout_s` = 'nan' from "
     "REPOCTX_AGENT_COMMAND_TIMEOUT_S is not a finite number"),
    ("REPOCTX_AGENT_NETWORK", "maybe", "`agent.network` = 'maybe' from REPOCTX_AGENT_NETWORK is "
     "not a boolean — use 1, true, yes or 0, false, no (default false)."),
    ("REPOCTX_ENGINE", "spark", "`engine` = 'spark' from REPOCTX_ENGINE is not a known choice — "
     'use one of local, ray (default "local").'),
    ("REPOCTX_STORAGE_OPTIONS", "{not json", "`storage_options` = '{not json' from "
     "REPOCTX_STORAGE_OPTIONS is not a JSON object"),
])
def test_bad_environment_variable_is_refused(repo, name, value, message):
    result = invoke("index", "build", str(repo), "-q", "--no-embed", env={name: value})
    assert_clean_failure(result, message)
    assert not (repo / ".repoctx").exists()


@pytest.mark.parametrize("flag, value, message", [
    ("--jobs", "-3", "`jobs` = -3 from --jobs is out of range — use an integer from 0 to 256"),
    ("--jobs", "100000", "`jobs` = 100000 from --jobs is out of range"),
    ("--max-file-bytes", "0", "`max_file_bytes` = 0 from --max-file-bytes is out of range"),
])
def test_bad_flag_is_refused(repo, flag, value, message):
    result = invoke("index", "build", str(repo), "-q", "--no-embed", flag, value)
    assert_clean_failure(result, message)
    assert not (repo / ".repoctx").exists()


@pytest.mark.parametrize("toml, problem", [
    ('jobs = "4"', "`jobs` = '4' in .repoctx.toml is not an integer"),  # strings only from env
    ("jobs = true", "`jobs` = true in .repoctx.toml is not an integer"),
    ("jobs = 4.0", "`jobs` = 4.0 in .repoctx.toml is not an integer"),
    ("embed_batch_size = -1", "`embed_batch_size` = -1 in .repoctx.toml is out of range"),
    ('embed_model = "  "', "`embed_model` = '  ' in .repoctx.toml is empty"),
    ("exclude = [1, 2]", "`exclude` = [1, 2] in .repoctx.toml is not a list of strings"),
    ("context_budget = -1", "`context_budget` = -1 in .repoctx.toml is out of range"),
    ('[agent]\ngit_write = "yes"', "`agent.git_write` = 'yes' in .repoctx.toml [agent] is not "
     "a boolean — use true or false"),
    ("[agent]\ntest_env = { A = 1 }", "`agent.test_env` = {…} in .repoctx.toml [agent] has a "
     "value for `A` that is not a string"),
    ("[agent]\nmax_edit_bytes = 0", "`agent.max_edit_bytes` = 0 in .repoctx.toml [agent] is "
     "out of range"),
    ("agent = 3", "`agent` in .repoctx.toml is not a table"),
])
def test_wrong_types_in_toml_are_errors(repo, toml, problem):
    (repo / ".repoctx.toml").write_text(toml + "\n")
    with pytest.raises(ConfigError) as err:
        load_config(repo, env={})
    assert problem in str(err.value)


def test_numbers_and_booleans_are_parsed_from_environment_variables_only(repo):
    cfg = load_config(repo, env={
        "REPOCTX_JOBS": " 4 ", "REPOCTX_MAX_FILE_BYTES": "2_000", "REPOCTX_EXCLUDE": "a/, b/",
        "REPOCTX_STORAGE_OPTIONS": '{"aws_region": "eu-west-1"}', "REPOCTX_AGENT_NETWORK": "yes",
        "REPOCTX_AGENT_GIT_WRITE": "0", "REPOCTX_AGENT_COMMAND_TIMEOUT_S": "30.5",
        "REPOCTX_CONTEXT_BUDGET": "", "REPOCTX_ENGINE": "RAY",  # empty counts as unset
        "REPOCTX_AGENT_ALLOW_COMMANDS": "git, ls",
    })
    assert (cfg.jobs, cfg.max_file_bytes, cfg.exclude) == (4, 2000, ("a/", "b/"))
    assert cfg.storage_options == {"aws_region": "eu-west-1"} and cfg.engine == "ray"
    assert "context_budget" not in cfg.extra
    assert cfg.extra["agent"] == {"network": True, "git_write": False, "command_timeout_s": 30.5,
                                  "allow_commands": ("git", "ls")}
    settings = AgentSettings.from_config(cfg)
    assert settings.git_write is False and settings.command_timeout_s == 30.5
    for word, value in [("1", True), ("TRUE", True), ("on", True), ("No", False), ("off", False)]:
        assert SETTINGS.check("agent.network", word, "from X", text=True) is value


def test_unknown_keys_are_errors_with_a_suggestion(repo):
    (repo / ".repoctx.toml").write_text("max_file_byte = 5\n")
    message = assert_clean_failure(
        invoke("index", "build", str(repo), "-q", "--no-embed"),
        "Unknown setting `max_file_byte` in .repoctx.toml — did you mean `max_file_bytes`?",
        "Known settings: agent, batch_size,",
    )
    assert "command_timeout_s" not in message  # the agent's keys are listed under [agent]
    (repo / ".repoctx.toml").write_text("[agent]\nmax_read_line = 5\n")
    with pytest.raises(ConfigError, match=r"Unknown setting `agent.max_read_line` in "
                       r"\.repoctx\.toml \[agent\] — did you mean `agent.max_read_lines`\?"):
        load_config(repo, env={})
    (repo / ".repoctx.toml").write_text("[modles]\nx = 1\n")
    with pytest.raises(ConfigError, match="Unknown setting `modles` .* Known settings: agent"):
        load_config(repo, env={})
    assert not (repo / ".repoctx").exists()


def test_the_indexer_alone_leaves_other_layers_keys_unread(repo):
    """A library caller of the indexer (indexer.load_config, Index.open) reads a repository the
    CLI accepts, [agent] and model keys included, and gets none of them: the agent's keys are
    only read, and trust-checked, through every layer's table."""
    from indexer import Index
    from indexer import load_config as index_load_config

    (repo / ".repoctx.toml").write_text(
        'model = "openai:gpt-4o-mini"\ncontext_budget = 4000\nmax_file_bytes = 5000\n'
        "[agent]\nnetwork = true\nmax_read_lines = 5\n")
    mine = index_load_config(repo, env={})
    assert mine.max_file_bytes == 5000
    assert "network" not in mine.extra.get("agent", {}) and "model" not in mine.extra
    # what the indexer left unread is never stood in for by a default
    with pytest.raises(ConfigError, match="loaded without the `agent.*cli.settings.load_config"):
        AgentSettings.from_config(mine)
    with pytest.raises(ConfigError, match="loaded without the `tokenizer`"):
        RetrievalSettings.from_config(mine)
    with pytest.raises(ConfigError, match="agent.network"):  # the whole table: trust applies
        load_config(repo, env={})
    (repo / ".repoctx.toml").write_text("[agent]\nmax_read_lines = 5\n")
    assert load_config(repo, env={}).extra["agent"]["max_read_lines"] == 5
    Index(index_load_config(repo, env={}, jobs=1)).build()
    with Index.open(repo) as index:
        assert index.graph.generation() == 1


def test_good_config_keeps_working(repo):
    """Every kind of setting, from the file, with flags over file over environment."""
    (repo / ".repoctx.toml").write_text(
        'max_file_bytes = 500000\njobs = 2\nbatch_size = 64\nexclude = ["vendor/"]\n'
        'index_dir = "idx"\nengine = "local"\nvectors_uri = "s3://team/vectors?region=eu-west-1"\n'
        'snapshot_uri = "s3://team/snapshots"\nmodel = "ollama:qwen2.5-coder"\n'
        'tokenizer = "o200k*1.1"\ncontext_budget = 6000\n'
        '[storage_options]\naws_region = "eu-west-1"\nallow_http = true\n'
        '[agent]\nallow_commands = ["python", "git"]\ngit_write = true\ncommand_timeout_s = 30\n'
        'test_timeout_s = 90.5\nmax_read_lines = 50\ntest_env = { B = "2", A = "1" }\n'
        'deny = ["*.secret"]\nsandbox = "required"\nnetwork = false\nsandbox_read = ["/opt"]\n'
    )
    # object storage, git_write and sandbox_read loosen: a trusted repository's config (issue 38)
    cfg = load_config(repo, env={"REPOCTX_JOBS": "7", "REPOCTX_BATCH_SIZE": "8"}, jobs=3,
                      trust_repo=True)
    assert cfg.jobs == 3 and cfg.batch_size == 64 and cfg.max_file_bytes == 500_000  # flag, file
    assert cfg.exclude == ("vendor/",) and cfg.index_dir == repo / "idx"
    assert cfg.vectors_uri == "s3://team/vectors?region=eu-west-1"  # a region is no secret
    assert cfg.storage_options == {"aws_region": "eu-west-1", "allow_http": True}
    assert cfg.extra["context_budget"] == 6000 and cfg.extra["model"] == "ollama:qwen2.5-coder"
    s = AgentSettings.from_config(cfg)
    assert s.allow_commands == ("python", "git") and s.git_write is True
    assert s.command_timeout_s == 30.0 and isinstance(s.command_timeout_s, float)
    assert s.test_timeout_s == 90.5 and s.max_read_lines == 50
    assert s.test_env == (("A", "1"), ("B", "2"))
    assert cfg.extra["agent"]["sandbox"] == "required"
    assert cfg.extra["agent"]["sandbox_read"] == ("/opt",)
    assert "*.secret" in Workspace.from_config(cfg).deny_patterns
    assert load_config(repo, env={"REPOCTX_TRUST_REPO_CONFIG": "1"}).jobs == 2
    (repo / ".repoctx.toml").unlink()
    assert load_config(repo, env={"REPOCTX_JOBS": "7"}).jobs == 7


def test_good_config_builds_and_the_budget_is_read(repo):
    (repo / ".repoctx.toml").write_text("jobs = 1\ncontext_budget = 300\n[agent]\nmax_read_lines = 20\n")
    assert invoke("index", "build", str(repo), "-q", "--no-embed").exit_code == 0
    out = invoke("context", "add two numbers", "-C", str(repo), "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["budget"] == 300


def test_agent_settings_from_a_config_made_in_code_are_checked(tmp_path):
    cfg = Config(root=tmp_path, extra={"agent": {"max_read_lines": -1}})
    with pytest.raises(ConfigError, match=r"`agent.max_read_lines` = -1 in Config.extra is out of "
                       r"range — use an integer from 1 to 1000000"):
        AgentSettings.from_config(cfg)
    with pytest.raises(ConfigError, match=r"`agent.deny` = \[1\] in Config.extra is not a list"):
        Workspace.from_config(Config(root=tmp_path, extra={"agent": {"deny": [1]}}))
    with pytest.raises(ConfigError, match="Unknown setting `agent.max_read_line`"):
        AgentSettings.from_config(Config(root=tmp_path, extra={"agent": {"max_read_line": 5}}))
    # what load_config produced is accepted again unchanged
    good = Config(root=tmp_path, extra={"agent": {"test_env": (("A", "1"),), "deny": ("x",)}})
    assert AgentSettings.from_config(good).test_env == (("A", "1"),)


def test_the_table_covers_every_setting():
    """A field added to Config or AgentSettings needs its type and range in the table, and the
    typed settings start from the table's defaults."""
    config_fields = {f.name for f in dataclasses.fields(Config)} - {"root", "extra", "read_keys"}
    assert config_fields <= set(SETTINGS)
    for f in dataclasses.fields(AgentSettings):
        assert f"agent.{f.name}" in SETTINGS, f"agent.{f.name} is not in the settings table"
    for key, kind, default in [("agent.sandbox", "choice", "auto"), ("agent.network", "bool", False),
                               ("agent.sandbox_read", "list", ()),
                               ("agent.sandbox_write", "list", ()),
                               ("agent.sandbox_deny_read", "list", ())]:
        assert (SETTINGS[key].kind, SETTINGS[key].default) == (kind, default)
    assert AgentSettings().max_read_lines == 200 and AgentSettings().test_env == ()
    assert env_name("agent.max_read_lines") == "REPOCTX_AGENT_MAX_READ_LINES"


# -- defect 5: credentials in URIs ---------------------------------------------------------------

SECRET = "s3cr3tV4lue"
CREDENTIAL_URIS = [
    (f"s3://AKIAEXAMPLE:{SECRET}@bucket/x", "user-info"),
    (f"s3://bucket/x?aws_secret_access_key={SECRET}&region=eu", "query parameter "
     "`aws_secret_access_key`"),
    (f"s3://bucket/x#{SECRET}", "fragment"),
]


@pytest.mark.parametrize("uri, where", CREDENTIAL_URIS, ids=["userinfo", "query", "fragment"])
def test_vectors_uri_flag_with_credentials_is_refused(repo, uri, where):
    result = invoke("index", "build", str(repo), "-q", "--embed-model", "hashing:64",
                    "--vectors-uri", uri)
    message = assert_clean_failure(result, "`vectors_uri` = 's3://", "from --vectors-uri",
                                   f"carries credentials ({where})", "AWS_SECRET_ACCESS_KEY")
    assert SECRET not in result.output and "…" in message
    assert not (repo / ".repoctx").exists()


@pytest.mark.parametrize("uri, where", CREDENTIAL_URIS, ids=["userinfo", "query", "fragment"])
def test_credentials_in_toml_and_env_are_refused_and_an_index_keeps_its_bytes(repo, uri, where):
    assert invoke("index", "build", str(repo), "-q", "--embed-model", "hashing:64").exit_code == 0
    before = snapshot_dir(repo / ".repoctx")
    (repo / ".repoctx.toml").write_text(f'vectors_uri = "{uri}"\n')
    result = invoke("index", "build", str(repo), "-q", "--embed-model", "hashing:64")
    assert_clean_failure(result, "in .repoctx.toml carries credentials", where)
    assert SECRET not in result.output
    (repo / ".repoctx.toml").unlink()
    result = invoke("index", "build", str(repo), "-q", "--embed-model", "hashing:64",
                    env={"REPOCTX_VECTORS_URI": uri})
    assert_clean_failure(result, "from REPOCTX_VECTORS_URI carries credentials", where)
    assert SECRET not in result.output
    assert snapshot_dir(repo / ".repoctx") == before
    assert SECRET.encode() not in all_index_bytes(repo)


@pytest.mark.parametrize("args", [
    ["index", "push", "--to", f"s3://bucket/snaps?X-Amz-Credential=AKIA&X-Amz-Signature={SECRET}"],
    ["index", "pull", "--from", f"gs://bucket/snaps?access_token={SECRET}"],
    ["index", "pull", "--list", "--from", f"az://container/snaps?sv=2024&sig={SECRET}"],
    ["index", "push", "--to", f"s3://key:{SECRET}@bucket/snaps"],
    ["index", "pull", "--from", f"s3://bucket/snaps#{SECRET}"],
], ids=["push-query", "pull-query", "list-sas", "push-userinfo", "pull-fragment"])
def test_push_and_pull_refuse_credential_uris(repo, args):
    assert invoke("index", "build", str(repo), "-q", "--no-embed").exit_code == 0
    before = snapshot_dir(repo / ".repoctx")
    result = invoke(*args, str(repo))
    assert_clean_failure(result, "snapshot URI", f"from {args[-2]}", "carries credentials")
    assert SECRET not in result.output
    assert snapshot_dir(repo / ".repoctx") == before


def test_snapshot_uri_in_config_with_credentials_is_refused(repo):
    (repo / ".repoctx.toml").write_text(f'snapshot_uri = "s3://bucket/s?password={SECRET}"\n')
    result = invoke("index", "push", str(repo))
    assert_clean_failure(result, "`snapshot_uri` = 's3://bucket/s?password=…' in .repoctx.toml "
                         "carries credentials (query parameter `password`)")
    assert SECRET not in result.output
    (repo / ".repoctx.toml").write_text(
        f'[storage_options]\naws_endpoint = "https://minio:{SECRET}@minio.internal:9000"\n')
    result = invoke("index", "build", str(repo), "-q", "--no-embed")
    assert_clean_failure(result, "`storage_options` = {…} in .repoctx.toml has a URI with "
                         "credentials (user-info) for `aws_endpoint`")
    assert SECRET not in result.output


def test_a_secret_recorded_by_an_older_index_is_never_shown(repo):
    """An index written before this check may hold a credential URI: readers refuse it in one
    line without echoing it, and a build with a clean --vectors-uri replaces it."""
    assert invoke("index", "build", str(repo), "-q", "--embed-model", "hashing:64").exit_code == 0
    conn = sqlite3.connect(repo / ".repoctx" / "graph.db")
    with conn:  # what repoctx stored before: the URI as given
        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('vectors_uri', ?)",
                     [f"s3://bucket/v?aws_session_token={SECRET}"])
    conn.close()
    for args in (["index", "status", str(repo), "--json"],
                 ["search", "add numbers", "-C", str(repo), "--json"],
                 ["index", "build", str(repo), "-q", "--embed-model", "hashing:64"]):
        result = invoke(*args)
        assert_clean_failure(result, "recorded in the index carries credentials",
                             "--vectors-uri")
        assert SECRET not in result.output
    local = repo / ".repoctx" / "vectors.lance"
    fixed = invoke("index", "build", str(repo), "-q", "--embed-model", "hashing:64",
                   "--vectors-uri", str(local))
    assert fixed.exit_code == 0, fixed.output
    conn = sqlite3.connect(repo / ".repoctx" / "graph.db")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the pages as a copy of the file holds them
    assert conn.execute("SELECT value FROM meta WHERE key = 'vectors_uri'").fetchone() == ("",)
    conn.close()
    assert SECRET.encode() not in all_index_bytes(repo)  # the replaced value was zeroed too


def test_the_meta_table_never_holds_a_credential(repo):
    """Second layer: whatever reaches the writer is redacted before it is stored."""
    assert invoke("index", "build", str(repo), "-q", "--no-embed").exit_code == 0
    conn = sqlite3.connect(repo / ".repoctx" / "graph.db")
    with conn:
        record_vectors_uri(conn, f"s3://u:{SECRET}@bucket/v?region=eu&Signature={SECRET}")
    stored = conn.execute("SELECT value FROM meta WHERE key = 'vectors_uri'").fetchone()[0]
    conn.close()
    assert stored == "s3://…@bucket/v?region=eu&Signature=…"
    assert SECRET.encode() not in (repo / ".repoctx" / "graph.db").read_bytes()


def test_replacing_a_recorded_secret_zeroes_its_bytes(repo):
    """A value an older repoctx stored is overwritten, not left in a free cell of the file,
    even where SQLite is built without SQLITE_SECURE_DELETE (Debian turns it on, macOS not)."""
    assert invoke("index", "build", str(repo), "-q", "--no-embed").exit_code == 0
    conn = sqlite3.connect(repo / ".repoctx" / "graph.db")
    conn.execute("PRAGMA secure_delete = 0")
    with conn:  # as an older build wrote it: the URI, then more meta rows after it
        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('vectors_uri', ?)",
                     [f"s3://bucket/v?token={SECRET}&prefix=" + "p" * 300])
        conn.execute("INSERT OR REPLACE INTO meta(key, value) SELECT key, value FROM meta "
                     "WHERE key = 'last_build'")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert SECRET.encode() in all_index_bytes(repo)
    with conn:
        record_vectors_uri(conn, "s3://bucket/elsewhere")
    assert conn.execute("PRAGMA secure_delete").fetchone() == (0,)  # the setting is restored
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    assert SECRET.encode() not in all_index_bytes(repo)


@pytest.mark.parametrize("uri, found, shown", [
    ("s3://key:secret@bucket/p", ["user-info"], "s3://…@bucket/p"),
    ("s3://token@bucket/p", ["user-info"], "s3://…@bucket/p"),
    ("s3://b/p?AWS_SECRET_ACCESS_KEY=x", ["query parameter `AWS_SECRET_ACCESS_KEY`"],
     "s3://b/p?AWS_SECRET_ACCESS_KEY=…"),
    ("s3://b/p?X-Amz-Date=1&X-Amz-Signature=x",
     ["query parameter `X-Amz-Date`", "query parameter `X-Amz-Signature`"],
     "s3://b/p?X-Amz-Date=…&X-Amz-Signature=…"),
    ("az://c/p?sv=2024&se=2025&sig=x", ["query parameter `sig`"], "az://c/p?sv=2024&se=2025&sig=…"),
    ("az://c/p?sas_token=x", ["query parameter `sas_token`"], "az://c/p?sas_token=…"),
    ("gs://b/p?x-goog-credential=x", ["query parameter `x-goog-credential`"],
     "gs://b/p?x-goog-credential=…"),
    ("s3://b/p?aws%5Fsecret%5Faccess%5Fkey=x", ["query parameter `aws_secret_access_key`"],
     "s3://b/p?aws%5Fsecret%5Faccess%5Fkey=…"),
    ("https://h/p?Password=x&apiKey=y&page=2",
     ["query parameter `Password`", "query parameter `apiKey`"],
     "https://h/p?Password=…&apiKey=…&page=2"),
    ("s3://b/p?sessionToken=x", ["query parameter `sessionToken`"], "s3://b/p?sessionToken=…"),
    ("s3://b/p?AKIAxyz", ["query value without a name"], "s3://b/p?…"),
    ("s3://b/p#anything", ["fragment"], "s3://b/p#…"),
    ("file://u:pw@/tmp/x", ["user-info"], "file://…@/tmp/x"),
    ("s3://k:s@bucket/p?region=eu&token=t#f", ["user-info", "query parameter `token`", "fragment"],
     "s3://…@bucket/p?region=eu&token=…#…"),
    # no credentials
    ("s3://bucket/prefix", [], "s3://bucket/prefix"),
    ("s3://b/p?region=eu-west-1&endpoint_override=localhost:9000&scheme=http", [],
     "s3://b/p?region=eu-west-1&endpoint_override=localhost:9000&scheme=http"),
    # a plain path: `?`, `#` and `@` are file-name characters
    ("/home/me/proj#2/what?.lance", [], "/home/me/proj#2/what?.lance"),
    ("relative/dir@v2", [], "relative/dir@v2"),
    ("auto", [], "auto"),
    ("ray://head:10001", [], "ray://head:10001"),
])
def test_uri_credentials_and_redaction(uri, found, shown):
    assert uri_credentials(uri) == found
    assert redact_uri(uri) == shown
