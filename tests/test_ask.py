"""`ask` end to end: a real index, the scripted model for the answer, citations checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent.ask import MODEL_HINT, SYSTEM_PROMPT, ask, verify_citations
from agent.models import ScriptedModel
from agent.settings import model_spec
from cli.main import cli
from cli.settings import load_config
from indexer import Index
from tests.conftest import index, make_repo
from tests.model_server import Reply
from tests.test_context import SHOP

QUESTION = "Where is the tax of a checkout computed?"
ANSWER = (
    "The cart adds tax in `Cart.checkout_total` (shop/cart.py:24-27), which calls "
    "compute_tax at shop/tax.py:10-12; the rate comes from shop/tax.py#L15-L18. "
    "Rounding happens in shop/money.py:3 and at shop/tax.py:400."
)


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    root = make_repo(tmp_path_factory.mktemp("ask") / "shop", SHOP)
    cfg = index(root)
    idx = Index.open(cfg)
    yield root, idx
    idx.close()


def test_ask_with_a_model_verifies_every_citation(shop):
    root, idx = shop
    model = ScriptedModel([ANSWER])
    # a budget that holds every cited definition (the test is about verifying citations)
    answer = ask(idx, QUESTION, model=model, budget_tokens=700, tokenizer="minilm")

    assert answer.answer == ANSWER and answer.model == "scripted"
    by_text = {c.text: c for c in answer.citations}
    assert set(by_text) == {
        "shop/cart.py:24-27",
        "shop/tax.py:10-12",
        "shop/tax.py#L15-L18",
        "shop/money.py:3",
        "shop/tax.py:400",
    }
    for ok in ("shop/cart.py:24-27", "shop/tax.py:10-12", "shop/tax.py#L15-L18"):
        assert by_text[ok].valid and by_text[ok].in_context and not by_text[ok].problem
    assert (by_text["shop/tax.py#L15-L18"].start_line, by_text["shop/tax.py#L15-L18"].end_line) == (
        15,
        18,
    )
    invented = by_text["shop/money.py:3"]
    assert not invented.valid and "no such file" in invented.problem
    past_end = by_text["shop/tax.py:400"]
    assert not past_end.valid and "past the end" in past_end.problem
    assert {c.text for c in answer.invalid_citations} == {"shop/money.py:3", "shop/tax.py:400"}

    # What the model was sent: the citation rules, then the numbered context and the question.
    (call,) = model.calls
    system, user = call.messages
    assert system.role == "system" and system.content == SYSTEM_PROMPT
    assert user.content.startswith(answer.pack.render()) and user.content.endswith(QUESTION)
    assert "24| " in user.content or "24|     def checkout_total" in user.content
    assert answer.pack.line_numbers and answer.pack.used_tokens <= 700
    assert call.temperature == 0.0


def test_ask_without_a_model_gives_ranked_locations(shop):
    root, idx = shop
    answer = ask(idx, QUESTION, budget_tokens=600, tokenizer="minilm")
    assert answer.answer == "" and answer.model == "" and answer.citations == ()
    assert answer.hint == MODEL_HINT and "--model openai:gpt-4o-mini" in answer.hint
    top = answer.locations[0]
    assert top.path in {"shop/cart.py", "shop/tax.py"} and top.reasons and top.snippet
    first_line = (root / top.path).read_text().splitlines()[top.start_line - 1]
    assert top.snippet.splitlines()[0] == first_line
    assert not answer.pack.line_numbers


@pytest.mark.parametrize(
    "text,expected",
    [
        ("see shop/tax.py:12", [("shop/tax.py", 12, 12, True)]),
        (
            "see shop/tax.py:10–12 and ./shop/cart.py:L3",
            [("shop/tax.py", 10, 12, True), ("shop/cart.py", 3, 3, True)],
        ),
        ("tax.py:10 is short for the one tax.py shown", [("shop/tax.py", 10, 10, True)]),
        ("../outside.py:1", [("../outside.py", 1, 1, False)]),
        ("shop/tax.py:12-10", [("shop/tax.py", 12, 10, False)]),
        ("http://example.com:8080/x and version 3.11:5", []),
        # prose forms
        ("compute_tax is in `shop/tax.py` file at line 10-12.", [("shop/tax.py", 10, 12, True)]),
        ("shop/tax.py line 12 rounds", [("shop/tax.py", 12, 12, True)]),
        ("see `tax.py`, lines 10 to 12", [("shop/tax.py", 10, 12, True)]),
        (
            "The decoder: `pyjson/decoder.py` file at line 20-43",
            [("pyjson/decoder.py", 20, 43, False)],
        ),
        ("shop/cart.py:3 and also line 14", [("shop/cart.py", 3, 3, True)]),
        ("e.g. line 5, version 3.11 line 2, in shop/tax.py. Line 5 is long", []),
    ],
)
def test_citation_forms(shop, text, expected):
    root, idx = shop
    pack = ask(idx, "compute tax", budget_tokens=2000, tokenizer="minilm").pack
    got = [(c.path, c.start_line, c.end_line, c.valid) for c in verify_citations(text, root, pack)]
    assert got == expected


def test_model_spec_precedence(tmp_path):
    """The flag, then `model` in the repository's config, then REPOCTX_MODEL (read once, by
    load_config, as every setting is)."""
    env = {"REPOCTX_MODEL": "ollama:qwen2.5-coder"}
    (tmp_path / ".repoctx.toml").write_text('model = "anthropic:x"\n')
    config = load_config(tmp_path, env=env)
    assert model_spec("openai:gpt-4o-mini", config) == "openai:gpt-4o-mini"
    assert model_spec(None, config) == "anthropic:x"
    (tmp_path / ".repoctx.toml").unlink()
    assert model_spec(None, load_config(tmp_path, env=env)) == "ollama:qwen2.5-coder"
    assert model_spec("", load_config(tmp_path, env={})) is None


def test_cli_ask_with_a_scripted_model(shop, tmp_path):
    root, _ = shop
    script = tmp_path / "answer.json"
    script.write_text(json.dumps([ANSWER]))
    runner = CliRunner()
    args = [
        "ask",
        QUESTION,
        "-C",
        str(root),
        "--budget",
        "600",
        "--tokenizer",
        "minilm",
        "--model",
        f"scripted:{script}",
    ]
    res = runner.invoke(cli, args, catch_exceptions=False, env={"REPOCTX_MODEL": ""})
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert out.startswith(ANSWER)
    assert "✓ shop/cart.py:24-27  verified" in out
    assert "✗ shop/money.py:3  INVALID — no such file in the repository" in out
    assert "2 cited location(s) do not exist" in res.stderr

    res = runner.invoke(cli, [*args, "--json"], catch_exceptions=False, env={"REPOCTX_MODEL": ""})
    data = json.loads(res.stdout)
    assert data["invalid_citations"] == 2 and data["model"] == f"scripted:{script}"
    assert data["context"]["used_tokens"] <= 600 and data["locations"]


def test_cli_ask_without_a_model(shop):
    root, _ = shop
    res = CliRunner().invoke(
        cli,
        ["ask", QUESTION, "-C", str(root), "-b", "600", "--tokenizer", "minilm"],
        catch_exceptions=False,
        env={"REPOCTX_MODEL": ""},
    )
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith(f"Most relevant locations for: {QUESTION}")
    assert " 1. shop/" in res.stdout and "hit #" in res.stdout
    assert MODEL_HINT in res.stderr


def test_cli_ask_model_from_project_config(shop, tmp_path):
    root, _ = shop
    script = tmp_path / "a.json"
    script.write_text(json.dumps(["See shop/tax.py:10."]))
    (root / ".repoctx.toml").write_text(f'model = "scripted:{script}"\n')
    try:
        res = CliRunner().invoke(
            cli,
            ["ask", QUESTION, "-C", str(root), "--tokenizer", "minilm", "--json"],
            catch_exceptions=False,
            env={"REPOCTX_MODEL": ""},
        )
    finally:
        (root / ".repoctx.toml").unlink()
    data = json.loads(res.stdout)
    assert data["answer"] == "See shop/tax.py:10." and data["citations"][0]["valid"]


def test_cli_ask_bad_model_is_a_clear_error(shop):
    root, _ = shop
    res = CliRunner().invoke(
        cli,
        ["ask", QUESTION, "-C", str(root), "--model", "nosuch:model"],
        env={"REPOCTX_MODEL": ""},
    )
    assert res.exit_code == 1 and "Unknown model provider" in res.output


def test_scripted_answer_file_missing(shop, tmp_path: Path):
    root, _ = shop
    res = CliRunner().invoke(
        cli,
        ["ask", QUESTION, "-C", str(root), "--model", f"scripted:{tmp_path / 'none.json'}"],
        env={"REPOCTX_MODEL": ""},
    )
    assert res.exit_code == 1 and "not found" in res.output


def test_ask_shows_similar_past_commits_and_checks_commit_citations(tmp_path):
    from tests.conftest import git, write_files

    root = make_repo(tmp_path / "shop", SHOP)
    write_files(root, {"shop/tax.py": (root / "shop/tax.py").read_text() + "\n# mars has no tax\n"})
    git(
        root,
        "commit",
        "-qam",
        "Tax rate lookup fails for the mars region\n\nrate_for raised KeyError.",
    )
    real = git(root, "rev-parse", "HEAD").strip()
    write_files(root, {"README.md": "# shop\n\nDocs.\n"})
    git(root, "commit", "-qam", "Rewrite the readme")
    cfg = index(root)
    idx = Index.open(cfg)
    try:
        text = f"See commit {real[:9]} and commit deadbeef00 for the mars region tax rate."
        model = ScriptedModel([text])
        answer = ask(
            idx,
            "Why does the tax rate lookup fail for the mars region?",
            model=model,
            budget_tokens=700,
            tokenizer="minilm",
            history=True,
        )
    finally:
        idx.close()
    assert [c.sha for c in answer.commits][:1] == [real]
    (call,) = model.calls
    user = call.messages[1].content
    assert "Past commits similar to the question" in user and real[:10] in user
    assert "Rewrite the readme" not in user
    cited = {c.sha[:9]: c for c in answer.commit_citations}
    assert cited[real[:9]].valid and cited[real[:9]].shown
    assert "mars" in cited[real[:9]].subject
    assert not cited["deadbeef0"].valid
    # the past commits come out of the same budget as the code
    from agent.ask import render_commits
    from retrieval.tokens import get_tokenizer

    used = answer.pack.used_tokens + get_tokenizer("minilm").count(
        render_commits(answer.commits) + "\n\n"
    )
    assert used <= 700


def test_cli_ask_model_timeout_and_retries_reach_the_adapter(shop, model_server):
    """--model-timeout and --model-retries are the adapter's: a server that says nothing is a
    timeout after that many seconds, tried once, and the error names the setting to raise."""
    root, _ = shop
    model_server.answer = lambda seen: Reply(delay=10)  # silent until the test ends
    env = {"REPOCTX_MODEL_BASE_URL": model_server.base_url}
    args = ["ask", QUESTION, "-C", str(root), "--model", "llamacpp:m", "--tokenizer", "minilm"]
    res = CliRunner().invoke(cli, [*args, "--model-timeout", "0.5", "--model-retries", "0"], env=env)
    bad = CliRunner().invoke(cli, args, env={**env, "REPOCTX_MODEL_RETRIES": "many"})
    seen = model_server.bodies
    assert res.exit_code == 1, res.output
    assert "sent nothing for 0.5s" in res.output and "--model-timeout" in res.output
    chats = [s for s in seen if "messages" in s]  # besides the tokenize probe, tried once
    assert len(chats) == 1 and chats[0]["stream"] is True
    assert (
        bad.exit_code == 1 and "`model_retries` = 'many' from REPOCTX_MODEL_RETRIES" in bad.output
    )
