"""Secrets (issue 13, defect 6): the deny list keeps credential files out of read_span, list_dir
and the MCP server, and content redaction replaces tokens and keys in everything the tools
return — search results, spans, signatures, context packs, command output, diffs, the agent
loop's prompt — while ordinary code comes back byte for byte."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import shutil
from pathlib import Path

import anyio
import pytest

from agent import redact
from agent.loop import RunOptions, run_agent
from agent.models import ScriptedModel
from agent.tools import ALL_TOOLS, Tool, ToolContext, ToolRegistry, fail, ok
from cli.mcp_server import GET_CONTEXT
from cli.settings import load_config
from indexer.build import build
from tests.conftest import git, make_repo

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

STDLIB = Path(os.__file__).parent
# Built from pieces so that no scanner mistakes this file for a leak.
TOKEN = "ghp_" + "Zq3Xv8Lm2Rt6Wn1Yb5Kc9Hd4Jf7Pg0Se3Ua8"
SLACK = "xoxb-" + "912345678012-1234567890123-Zq3Xv8Lm2Rt6Wn1Yb5Kc9Hd4"
AWS_ID = "AKIA" + "Z7Q3TRW8VNB2PLMX"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYzQ8sT1vW4y"
STRIPE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
GITHUB_PAT = "github_pat_" + "11ABCDEFG0" + "Zq3Xv8Lm2Rt6Wn1Yb5Kc9Hd4Jf7Pg0Se3Ua8" * 2
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
    "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ."
    "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)


def key_body(seed: str, lines: int = 6) -> list[str]:
    out, digest = [], seed.encode()
    for _ in range(lines):
        digest = hashlib.sha512(digest).digest()
        out.append(base64.b64encode(digest).decode()[:64])
    return out


def pem(kind: str, seed: str) -> str:
    body = "\n".join(key_body(seed))
    return f"-----BEGIN {kind} PRIVATE KEY-----\n{body}\n-----END {kind} PRIVATE KEY-----\n"


# Each holds a marker that must never come back from any tool.
SECRET_FILES = {
    "id_ecdsa": pem("OPENSSH", "ecdsa") + "# leakmarker-ecdsa\n",
    "id_dsa": pem("DSA", "dsa") + "# leakmarker-dsa\n",
    "keys/id_ed25519_sk": pem("OPENSSH", "sk") + "# leakmarker-sk\n",
    ".git-credentials": f"https://me:{TOKEN}@github.com\n# leakmarker-gitcred\n",
    ".envrc": "export DEPLOY_PASSWORD=leakmarker-envrc\n",
    "service-account.json": json.dumps(
        {"type": "service_account", "private_key_id": "leakmarker-sa", "client_email": "x@y"}
    ),
    ".pgpass": "db:5432:app:admin:leakmarker-pgpass\n",
    ".config/gcloud/application_default_credentials.json": '{"refresh_token": "leakmarker-adc"}',
    ".kube/config": "users:\n- name: me\n  user:\n    token: leakmarker-kube\n",
    ".docker/config.json": '{"auths": {"r": {"auth": "leakmarker-docker"}}}',
    "infra/terraform.tfstate": '{"password": "leakmarker-tfstate"}',
    "tls/server.key": pem("RSA", "tls") + "# leakmarker-tls\n",
}
SETTINGS = f'''"""Service settings."""

GITHUB_TOKEN = "{TOKEN}"
SLACK_TOKEN = "{SLACK}"
API_URL = "https://api.example.com"


def connect(token="{TOKEN}", retries=3):
    """Open a session with the GitHub API."""
    return {{"Authorization": "token " + token, "retries": retries}}
'''
FILES = {
    "pkg/__init__.py": "",
    "pkg/settings.py": SETTINGS,
    "pkg/app.py": """
        from pkg.settings import connect


        def main():
            return connect()
        """,
    "id_ecdsa.pub": "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTY= me@host\n",
    **SECRET_FILES,
}


def leaked(*texts: str) -> list[str]:
    joined = "\n".join(texts)
    found = [t for t in (TOKEN, SLACK) if t in joined]
    return found + [m for m in _markers() if m in joined]


def _markers() -> list[str]:
    names = ("ecdsa", "dsa", "sk", "gitcred", "envrc", "sa", "pgpass", "adc", "kube", "docker")
    return [f"leakmarker-{w}" for w in (*names, "tfstate", "tls")]


def everything(result) -> str:
    return "\n".join([result.output, result.error or "", json.dumps(result.data, default=str)])


def build_repo(root: Path) -> Path:
    make_repo(root, FILES)
    # git writes the remote into .git/config itself, as `git clone https://user:token@…` does
    git(root, "remote", "add", "origin", f"https://me:{TOKEN}@github.com/o/r.git")
    build(load_config(root, env={}, jobs=1, embed_model="hashing"), embed=True)
    return root


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return build_repo(tmp_path_factory.mktemp("secrets") / "repo")


@pytest.fixture
def repo(built: Path, tmp_path: Path) -> Path:
    """A private copy of the built repository (index included) for tests that change it."""
    dest = tmp_path / "repo"
    shutil.copytree(built, dest, symlinks=True)
    return dest


def context(root: Path, granted=("read",)) -> ToolContext:
    return ToolContext.create(load_config(root, env={}, jobs=1), granted=granted, run_id="s1")


def registry() -> ToolRegistry:
    return ToolRegistry((*ALL_TOOLS, GET_CONTEXT))


# -- the deny list --------------------------------------------------------------------------------


def test_secret_files_are_refused_and_left_out_of_listings(built):
    ctx, reg = context(built), registry()
    for rel in SECRET_FILES:
        result = reg.call("read_span", {"path": rel}, ctx)
        assert not result.ok, rel
        assert "deny pattern" in result.error and "agent.deny" in result.error
        assert not leaked(everything(result)), rel
    listing = reg.call("list_dir", {"path": ".", "depth": 4}, ctx)
    assert listing.ok
    listed = {e["path"] for e in listing.data["entries"]}
    assert not listed & set(SECRET_FILES)
    assert {"pkg/settings.py", "id_ecdsa.pub"} <= listed  # the public key is not a secret
    assert reg.call("read_span", {"path": "id_ecdsa.pub"}, ctx).ok


def test_a_secret_file_is_refused_through_a_symlink_and_as_a_command_argument(repo):
    (repo / "notes.txt").symlink_to(repo / "id_dsa")
    ctx, reg = context(repo, ("read", "execute")), registry()
    linked = reg.call("read_span", {"path": "notes.txt"}, ctx)
    assert not linked.ok and "id_dsa" in linked.error and not leaked(everything(linked))
    cat = reg.call("run_command", {"command": "cat .git-credentials"}, ctx)
    assert not cat.ok and not leaked(everything(cat))


# -- content redaction through the tools ----------------------------------------------------------


def test_a_token_in_the_git_config_remote_url_is_redacted(built):
    result = registry().call("read_span", {"path": ".git/config"}, context(built))
    assert result.ok and not leaked(everything(result))
    assert "url = https://me:[REDACTED:GitHub Token]@github.com/o/r.git" in result.output
    assert result.data["secrets_redacted"] == 1
    # only the secret goes: every line is still there
    lines = (built / ".git" / "config").read_text().splitlines()
    assert result.output.count("\n") == len(lines)
    assert '[remote "origin"]' in result.output


def test_a_token_in_source_is_redacted_in_every_read_tool(built):
    ctx, reg = context(built), registry()
    span = reg.call("read_span", {"path": "pkg/settings.py"}, ctx)
    assert span.ok and not leaked(everything(span))
    assert '3| GITHUB_TOKEN = "[REDACTED:GitHub Token]"' in span.output
    assert '4| SLACK_TOKEN = "[REDACTED:Slack Token]"' in span.output
    assert "5| API_URL = \"https://api.example.com\"" in span.output
    assert span.output.count("\n") == SETTINGS.count("\n")

    hits = reg.call("search_code", {"query": "GITHUB_TOKEN", "mode": "lexical"}, ctx)
    assert hits.ok and "pkg/settings.py" in hits.output and "[REDACTED:GitHub Token]" in hits.output
    assert not leaked(everything(hits))

    sym = reg.call("find_symbol", {"name": "connect"}, ctx)
    assert sym.ok and "connect(token=" in sym.output and not leaked(everything(sym))
    assert "[REDACTED:GitHub Token]" in sym.data["symbols"][0]["signature"]

    refs = reg.call("find_references", {"name": "pkg.settings.connect"}, ctx)
    assert refs.ok and not leaked(everything(refs))

    pack = reg.call("get_context", {"query": "GitHub token settings connect"}, ctx)
    assert pack.ok and "pkg/settings.py" in pack.output, pack.output
    assert "[REDACTED:GitHub Token]" in pack.output and not leaked(everything(pack))
    assert any("[REDACTED:" in i["text"] for i in pack.data["items"])


def test_command_output_and_diffs_are_redacted(repo):
    ctx, reg = context(repo, ("read", "execute")), registry()
    cat = reg.call("run_command", {"command": ["cat", "pkg/settings.py"]}, ctx)
    assert cat.ok, cat.error
    assert 'GITHUB_TOKEN = "[REDACTED:GitHub Token]"' in cat.output and not leaked(everything(cat))

    app = repo / "pkg" / "app.py"
    app.write_text(app.read_text() + f'\n\nFALLBACK = "{TOKEN}"\nAWS = "{AWS_ID}"\n')
    diff = reg.call("git_diff", {}, ctx)
    assert diff.ok and '+FALLBACK = "[REDACTED:GitHub Token]"' in diff.output
    assert '+AWS = "[REDACTED:AWS Access Key]"' in diff.output
    assert not leaked(everything(diff)) and AWS_ID not in everything(diff)


def test_a_line_holding_a_secret_can_be_edited_through_its_marker(repo):
    """The model sees only `[REDACTED:…]`; an edit that copies the marker matches the secret
    behind it, and the same marker in new_text keeps the secret without the model seeing it."""
    ctx, reg = context(repo, ("read", "write")), registry()
    settings = repo / "pkg" / "settings.py"
    shown = reg.call("read_span", {"path": "pkg/settings.py", "start_line": 3, "end_line": 3}, ctx)
    line = shown.output.splitlines()[1].split("| ", 1)[1]
    assert line == 'GITHUB_TOKEN = "[REDACTED:GitHub Token]"'

    moved = reg.call(
        "edit",
        {
            "path": "pkg/settings.py",
            "old_text": line,
            "new_text": 'GITHUB_TOKEN = os.environ.get("GH", "[REDACTED:GitHub Token]")',
        },
        ctx,
    )
    assert moved.ok, moved.error
    assert f'GITHUB_TOKEN = os.environ.get("GH", "{TOKEN}")\n' in settings.read_text()
    assert not leaked(everything(moved))  # the diff shown is redacted too

    before = settings.read_bytes()
    invented = reg.call(
        "edit",
        {
            "path": "pkg/settings.py",
            "old_text": '"[REDACTED:GitHub Token]")',
            "new_text": '"[REDACTED:GitHub Token]", "[REDACTED:GitHub Token]")',
        },
        ctx,
    )
    assert not invented.ok and "markers" in invented.error
    half = reg.call(
        "edit",
        {"path": "pkg/settings.py", "old_text": "Token]\")", "new_text": "x"},
        ctx,
    )
    assert not half.ok and settings.read_bytes() == before

    removed = reg.call(
        "edit",
        {
            "path": "pkg/settings.py",
            "old_text": 'GITHUB_TOKEN = os.environ.get("GH", "[REDACTED:GitHub Token]")',
            "new_text": 'GITHUB_TOKEN = os.environ["GH"]',
        },
        ctx,
    )
    assert removed.ok, removed.error
    assert 'GITHUB_TOKEN = os.environ["GH"]\n' in settings.read_text()
    assert settings.read_text().count(TOKEN) == 1  # the default of connect() is still there


def test_redaction_is_central_so_any_tool_is_covered(built):
    def chatty(ctx, args):
        if args["fail"]:
            return fail(f"could not log in with {TOKEN}", f"tried {SLACK}", tried=[TOKEN])
        return ok(f"token: {TOKEN}", nested={"deep": [f"x {SLACK}", 3]}, n=1)

    tool = Tool(
        "chatty",
        "Says secrets.",
        {
            "type": "object",
            "properties": {"fail": {"type": "boolean", "default": False}},
            "additionalProperties": False,
        },
        "read",
        chatty,
    )
    reg, ctx = ToolRegistry((tool,)), context(built)
    good = reg.call("chatty", {}, ctx)
    assert good.output == "token: [REDACTED:GitHub Token]"
    assert good.data["nested"] == {"deep": ["x [REDACTED:Slack Token]", 3]} and good.data["n"] == 1
    assert good.data["secrets_redacted"] == 2
    bad = reg.call("chatty", {"fail": True}, ctx)
    assert not bad.ok and not leaked(everything(bad))
    assert bad.error == "could not log in with [REDACTED:GitHub Token]"


def test_the_agent_loop_prompt_pack_is_redacted_and_skips_secret_files(repo):
    (repo / "secrets.py").write_text(f"ADMIN_TOKEN = 'leakmarker-sa'  # {TOKEN}\n")
    (repo / "AGENTS.md").write_text(f"Deploy with the token {SLACK}.\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "more")
    plan = json.dumps({"steps": [{"title": "Read the settings", "done_when": "read"}]})
    model = ScriptedModel(
        [plan, {"tool_calls": [{"name": "finish", "arguments": {"summary": "done"}}]}]
    )
    report = run_agent(
        load_config(repo, env={}, jobs=1),
        "Explain GITHUB_TOKEN and ADMIN_TOKEN in pkg/settings.py and secrets.py",
        model,
        RunOptions(granted=frozenset({"read"}), sleep=lambda s: None),
    )
    assert report.status == "done", report.message
    prompts = "\n".join(m.content for c in model.calls for m in c.messages)
    assert "[REDACTED:GitHub Token]" in prompts  # pkg/settings.py came in the pack, redacted
    assert "Deploy with the token [REDACTED:Slack Token]" in prompts  # instructions too
    assert not leaked(prompts)
    trace = Path(report.trace_path).read_text()
    assert not leaked(trace)


def test_ask_prompt_pack_is_redacted_and_skips_secret_files(repo):
    """`ask` puts its context pack into the model's prompt itself, not through the tools: the
    same deny list and the same redaction apply (before: `secrets.py` and the raw token went
    to the model)."""
    from agent.ask import ask
    from indexer import Index

    (repo / "secrets.py").write_text(f"ADMIN_TOKEN = 'leakmarker-sa'  # {TOKEN}\n")
    cfg = load_config(repo, env={}, jobs=1, embed_model="hashing")
    build(cfg, embed=True)
    index = Index.open(cfg)
    model = ScriptedModel(["GITHUB_TOKEN is set at pkg/settings.py:3."])
    try:
        answer = ask(index, "Where are GITHUB_TOKEN and ADMIN_TOKEN set?", model=model,
                     budget_tokens=2000, focus=("secrets.py", "pkg/settings.py"))
    finally:
        index.close()
    prompt = "\n".join(m.content for c in model.calls for m in c.messages)
    assert "[REDACTED:GitHub Token]" in prompt  # pkg/settings.py came in the pack, redacted
    assert not leaked(prompt) and "ADMIN_TOKEN =" not in prompt
    shown = {i.path for i in answer.pack.items}
    assert "pkg/settings.py" in shown and "secrets.py" not in shown
    assert answer.citations[0].valid and answer.citations[0].in_context


# -- through the MCP server -----------------------------------------------------------------------


def test_mcp_server_refuses_secret_files_and_redacts_answers(built):
    from tests.test_mcp import call, stdio, text

    async def main():
        async with stdio(built) as client:
            for rel in SECRET_FILES:
                refused = await call(client, "read_span", path=rel)
                assert refused.is_error and "deny pattern" in text(refused), rel
                assert not leaked(text(refused), json.dumps(refused.structured_content)), rel
            config = await call(client, "read_span", path=".git/config")
            assert not config.is_error
            assert "https://me:[REDACTED:GitHub Token]@github.com/o/r.git" in text(config)
            answers = [
                config,
                await call(client, "read_span", path="pkg/settings.py"),
                await call(client, "search_code", query="GITHUB_TOKEN", mode="lexical"),
                await call(client, "find_symbol", name="connect"),
                await call(client, "get_context", query="GitHub token settings connect"),
            ]
            for answer in answers:
                assert not answer.is_error, text(answer)
                body = text(answer) + json.dumps(answer.structured_content)
                assert "[REDACTED:" in body and not leaked(body)

    anyio.run(main)


# -- what redaction finds, and what it leaves alone -----------------------------------------------


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (f"token = '{TOKEN}'", "GitHub Token"),
        (f"GH = {GITHUB_PAT}", "GitHub Token"),
        (f"key_id = '{AWS_ID}'", "AWS Access Key"),
        (f"aws_secret_access_key = {AWS_SECRET}", "AWS Secret Access Key"),
        (f"stripe.api_key = '{STRIPE}'", "Stripe Access Key"),
        (f"SLACK = '{SLACK}'", "Slack Token"),
        (f"session = '{JWT}'", "JSON Web Token"),
        ("curl -H 'Authorization: Bearer 4f9c2a71d0e84b7c9a3e5f1b2c6d8e0a'", "Authorization Header"),
        ("postgres://admin:S3cr!t$Pa55@db.internal:5432/app", "URL Credentials"),
        ("url = https://me:hunter2x@git.example.com/r.git", "Basic Auth Credentials"),
        ("hf = 'hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh'", "Hugging Face Token"),
        ("npmAuthToken: npm_" + "Zq3Xv8Lm2Rt6Wn1Yb5Kc9Hd4Jf7Pg0Se3Ua8", "NPM tokens"),
    ],
)
def test_each_kind_is_redacted_in_place(line, kind):
    text = f"before\n{line}\nafter\n"
    out = redact.redact(text)
    assert f"[REDACTED:{kind}]" in out, out
    assert out.startswith("before\n") and out.endswith("\nafter\n") and out.count("\n") == 3
    for secret in (TOKEN, GITHUB_PAT, AWS_ID, AWS_SECRET, STRIPE, SLACK, JWT, "S3cr!t", "hunter2x"):
        assert secret not in out


def test_a_private_key_body_is_redacted_line_by_line():
    block = pem("RSA", "unit")
    out = redact.redact(f'KEY = """{block}"""\nx = 1\n')
    assert out.splitlines() == [
        'KEY = """-----BEGIN RSA PRIVATE KEY-----',
        *["[REDACTED:Private Key]"] * 6,
        "-----END RSA PRIVATE KEY-----",
        '"""',
        "x = 1",
    ]
    inline = json.dumps({"private_key": block})  # a service-account file: "\n" escapes
    redacted = redact.redact(inline)
    assert not any(b in redacted for b in key_body("unit"))
    assert "-----BEGIN RSA PRIVATE KEY-----\\n[REDACTED:Private Key]\\n" in redacted
    # a mention of the marker is not a key: the code after it stays
    doc = 'MARK = b"-----BEGIN OPENSSH PRIVATE KEY-----"\nPrivateKeyLoaderFactoryName = 1\n'
    assert redact.redact(doc) == doc


@pytest.mark.parametrize(
    "line",
    [
        "seq = 'AAACCATCTCTACCGGTTCGCTTTCACTGGATATCGCGCTTGGGGCAGGTGGTCTGCCGATGGGCCG'",
        "('http://joe:password@proxy.example.com/', 'http://proxy.example.com/')",
        "PIP_INDEX_URL_FMT = '{scheme}://aws:{auth_token}@{netloc}{path}simple/'",
        "proxy_url='socks5h://<username>:<password>@proxy-host'",
        "url = f'https://{user}:${PASSWORD}@host/'",
        "digest = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'",
        "headers['Authorization'] = 'Bearer ' + token",
        "b32 = b'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567'",
    ],
)
def test_placeholders_hashes_and_sequences_are_left_alone(line):
    assert redact.redact(line + "\n") == line + "\n"


def test_ordinary_code_comes_back_byte_identical(tmp_path):
    """A sample of the standard library: redact() changes nothing, and read_span returns
    every line as it is in the file."""
    files = sorted(p for p in STDLIB.rglob("*.py") if "site-packages" not in p.parts)
    sample = random.Random(13).sample(files, 150) + [
        STDLIB / name
        for name in ("base64.py", "secrets.py", "hashlib.py", "ssl.py", "netrc.py",
                     "urllib/request.py", "http/client.py", "smtplib.py", "test/test_urllib2.py",
                     "test/test_hashlib.py", "test/test_base64.py", "test/test_netrc.py")
    ]
    for path in sample:
        text = path.read_text(encoding="utf-8", errors="replace")
        assert redact.redact(text) == text, path

    root = make_repo(tmp_path / "std", {}, commit=False)
    chosen = [p for p in sample if p.stat().st_size < 60_000][:40]
    for path in chosen:
        dest = root / path.relative_to(STDLIB)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
    ctx, reg = context(root), registry()
    for path in chosen:
        rel = path.relative_to(STDLIB).as_posix()
        if ctx.workspace.is_secret(rel):
            continue  # secrets.py: denied by name
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()[:200]
        result = reg.call("read_span", {"path": rel, "end_line": 200}, ctx)
        assert result.ok and "secrets_redacted" not in result.data, rel
        body = result.output.split("\n", 1)[1] if lines else ""
        shown = [line.split("| ", 1)[1] if "| " in line else "" for line in body.splitlines()]
        assert shown[: len(lines)] == lines, rel

