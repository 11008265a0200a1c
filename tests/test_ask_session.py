"""`repoctx ask --session`: follow-up questions whose prompts extend the previous one byte for
byte (so llama.cpp reuses its cache), token figures counted when the server streams none, and
the session file under the index directory, written atomically and checked when read.

A real index of a small repository in tmp_path, the real CLI and OpenAI adapter, and a scripted
OpenAI-compatible server on 127.0.0.1 that records every request and streams its answers as
llama-cpp-python does (no usage, no tokenize endpoint here). The last test replays a real
two-question exchange with llama-cpp-python + Qwen2.5-Coder-1.5B (tests/recordings/).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agent.ask import SYSTEM_PROMPT
from agent.ask_session import FOLLOW_UP_HEADER, SESSIONS_DIR, load_session
from agent.models import Message, OpenAIClient, model_tokenizer
from cli.main import cli
from tests.conftest import index, make_repo
from tests.model_server import ModelServer, Reply, Seen
from tests.model_server import recorded as recorded_reply

RECORDING = Path(__file__).parent / "recordings" / "qwen2.5-coder-1.5b-ask-session.json"
MODEL = "qwen2.5-coder-1.5b"

FILES = {
    "shop/__init__.py": '"""A toy shop."""\n',
    "shop/discount.py": '''
        """Discount codes and what they take off."""

        CODES = {"SAVE10": 10, "HALF": 50}


        def discount_percent(code: str) -> int:
            """Percent off for a code; 0 when unknown."""
            return CODES.get(code.upper(), 0)


        def apply_discount(amount: float, code: str) -> float:
            """The amount after the code's discount, rounded to cents."""
            return round(amount * (1 - discount_percent(code) / 100), 2)
        ''',
    "shop/tax.py": '''
        """Tax per region."""

        RATES = {"eu": 0.2, "us": 0.07}


        def tax_for(amount: float, region: str) -> float:
            """Tax owed on an amount in a region; KeyError for an unknown region."""
            return round(amount * RATES[region], 2)
        ''',
    "shop/cart.py": '''
        """Shopping cart."""
        from shop.discount import apply_discount
        from shop.tax import tax_for


        class Cart:
            """Items, a coupon, and the total."""

            def __init__(self, region: str = "eu"):
                self.items = []
                self.coupon = None
                self.region = region

            def add(self, name: str, price: float, qty: int = 1) -> None:
                self.items.append((name, price, qty))

            def apply_coupon(self, code: str) -> None:
                """Remember a coupon code for the total."""
                self.coupon = code

            def total(self) -> float:
                net = apply_discount(sum(p * q for _, p, q in self.items), self.coupon or "")
                return net + tax_for(net, self.region)
        ''',
}
Q1 = "How is a coupon code applied to the cart total?"
Q2 = "How is the tax for a region computed?"
A1 = "The coupon is stored by `apply_coupon` in shop/cart.py and applied in line 13 of shop/discount.py."
A2 = "tax_for at shop/tax.py:6-8 multiplies the amount by the region's rate."


class Scripted:
    """Answers chat requests in order, streamed like llama-cpp-python (no usage unless
    ``usage`` is set), or with ``recorded`` replies as they came; every chat request body is
    kept. Other paths are 404: no tokenize endpoint here."""

    def __init__(self, server: ModelServer) -> None:
        self.server = server
        self.answers: list[str] = []
        self.usage: dict[str, Any] | None = None
        self.recorded: list[dict[str, Any]] = []  # recorded replies, served as they came

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self.server.chats

    def answer(self, seen: Seen) -> Reply:
        if not seen.path.endswith("/chat/completions"):
            return Reply(404, b"")
        if self.recorded:
            return recorded_reply(self.recorded.pop(0))
        text = self.answers.pop(0) if self.answers else "No more answers."
        chunks: list[Any] = [{"choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
        chunks += [
            {"choices": [{"index": 0, "delta": {"content": text[i : i + 7]}}]}
            for i in range(0, len(text), 7)
        ]
        chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if self.usage:
            chunks.append({"choices": [], "usage": self.usage})
        return Reply(events=[*chunks, "data: [DONE]\n\n"])


@pytest.fixture
def server(model_server: ModelServer) -> tuple[Scripted, str]:
    state = Scripted(model_server)
    model_server.answer = state.answer
    return state, model_server.base_url


@pytest.fixture
def shop(tmp_path: Path) -> tuple[Path, Path]:
    root = make_repo(tmp_path / "shop", FILES)
    cfg = index(root)
    return root, cfg.index_path


def run_ask(root: Path, url: str, question: str, *extra: str, json_out: bool = True):
    args = ["ask", question, "-C", str(root), "--model", f"openai:{MODEL}", *extra]
    res = CliRunner().invoke(
        cli,
        [*args, "--json"] if json_out else args,
        env={"REPOCTX_MODEL": "", "REPOCTX_MODEL_BASE_URL": url, "OPENAI_API_KEY": ""},
    )
    return res


def shown_lines(prompt: str) -> set[tuple[str, int]]:
    """(path, line) of every non-blank code line of the full blocks in a prompt."""
    out, path = set(), None
    for line in prompt.splitlines():
        head = re.match(r"^(\S+\.\w+):(\d+)(?:-\d+)?(?: \(|$)", line)
        if head:
            path = head.group(1)
        elif line.startswith("```") and not line.strip("`"):
            path = None  # a block's closing fence
        elif path and (m := re.match(r"^\s*(\d+)\| (.*)$", line)) and m.group(2).strip():
            out.add((path, int(m.group(1))))
    return out


def counter():
    return model_tokenizer(OpenAIClient(MODEL, base_url="http://127.0.0.1:1/v1"), probe=False)


def test_a_follow_up_extends_the_previous_request_byte_for_byte(server, shop) -> None:
    state, url = server
    root, index_dir = shop
    state.answers = [A1, A2]
    first = run_ask(root, url, Q1, "--session", "cart", "-b", "900")
    assert first.exit_code == 0, first.output
    second = run_ask(root, url, Q2, "--session", "cart", "-b", "900")
    assert second.exit_code == 0, second.output
    r1, r2 = state.requests
    # system, first context + Q1, A1: the second request starts with exactly those bytes
    prefix = [*r1["messages"], {"role": "assistant", "content": A1}]
    assert json.dumps(r2["messages"][:3]) == json.dumps(prefix)
    assert r2["messages"][0]["content"] == SYSTEM_PROMPT and len(r2["messages"]) == 4
    follow = r2["messages"][3]["content"]
    assert follow.endswith(f"Question: {Q2}") and Q1 not in follow
    # only context not shown before: tax.py is new, cart.py's blocks are not repeated
    assert follow.startswith(FOLLOW_UP_HEADER) and "shop/tax.py" in follow
    again = shown_lines(follow) & shown_lines(r1["messages"][1]["content"])
    assert shown_lines(follow) and not again, f"lines shown again: {sorted(again)}"

    d1, d2 = json.loads(first.stdout), json.loads(second.stdout)
    # The server streamed no usage: the figures are the request's own count, said so.
    tokens = counter()
    sent = [Message(m["role"], m["content"]) for m in r2["messages"]]
    assert d2["usage"]["source"] == "counted"
    assert d2["usage"]["prompt_tokens"] == tokens.prompt_tokens(sent) > 0
    assert d2["usage"]["completion_tokens"] == tokens.count(A2) > 0
    # what the server can reuse: the messages it saw last and its answer
    reused = sum(tokens.message_tokens(m) for m in sent[:3])
    assert d2["usage"]["cached_tokens"] == reused and d2["usage"]["cache_source"] == "estimate"
    assert d2["usage"]["processed_tokens"] == d2["usage"]["prompt_tokens"] - reused
    assert d1["usage"]["cache_source"] == "" and d1["usage"]["source"] == "counted"
    s = d2["session"]
    assert (s["name"], s["question"], s["started_afresh"]) == ("cart", 2, False)
    assert s["new_context_items"] >= 1 and [t["question"] for t in s["turns"]] == [Q1, Q2]
    assert s["turns"][1]["cached_tokens"] == reused
    # The citation of a block shown in the first context counts as shown in the follow-up.
    assert d2["citations"][0]["in_context"] and d2["citations"][0]["valid"]

    # on disk: the last request and its answer, atomically written (no temporary left)
    saved = load_session(index_dir, "cart")
    assert [m.content for m in saved.messages] == [*(m.content for m in sent), A2]
    files = os.listdir(index_dir / SESSIONS_DIR)
    assert files == ["cart.json"]
    assert (os.stat(index_dir / SESSIONS_DIR / "cart.json").st_mode & 0o777) == 0o600


def test_text_output_says_counted_and_reused(server, shop) -> None:
    state, url = server
    root, _ = shop
    state.answers = [A1, A2]
    run_ask(root, url, Q1, "--session", "s1", "-b", "900")
    res = run_ask(root, url, Q2, "--session", "s1", "-b", "900", json_out=False)
    assert res.exit_code == 0, res.output
    assert "0 prompt + 0 completion" not in res.stdout
    assert "completion tokens (counted here: the server reported none)" in res.stdout
    assert " reused + " in res.stdout and "processed (estimated)" in res.stdout
    assert "session s1 question 2" in res.stdout


def test_plain_ask_counts_tokens_when_the_server_streams_none(server, shop) -> None:
    """The issue: `ask` printed "0 prompt + 0 completion" for llama-cpp-python."""
    state, url = server
    root, _ = shop
    state.answers = [A1]
    res = run_ask(root, url, Q1, "-b", "900", json_out=False)
    assert res.exit_code == 0, res.output
    sent = [Message(m["role"], m["content"]) for m in state.requests[0]["messages"]]
    n = counter().prompt_tokens(sent)
    assert f", {n:,} prompt + {counter().count(A1):,} completion tokens (counted here" in res.stdout
    assert "reused" not in res.stdout  # nothing known about the server's cache


def test_reported_usage_and_cache_are_the_servers(server, shop) -> None:
    state, url = server
    root, _ = shop
    state.answers = [A1]
    state.usage = {
        "prompt_tokens": 812,
        "completion_tokens": 31,
        "total_tokens": 843,
        "prompt_tokens_details": {"cached_tokens": 700},
    }
    res = run_ask(root, url, Q1, "-b", "900", "--session", "r")
    assert res.exit_code == 0, res.output
    usage = json.loads(res.stdout)["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["source"]) == (
        812,
        31,
        "reported",
    )
    assert (usage["cached_tokens"], usage["cache_source"], usage["processed_tokens"]) == (
        700,
        "server",
        112,
    )


def test_a_session_that_outgrows_its_budget_starts_the_tail_afresh(server, shop) -> None:
    state, url = server
    root, index_dir = shop
    long_answer = "The coupon is applied in shop/cart.py. " + "It is stored, then used. " * 300
    state.answers = [long_answer, A2]
    assert run_ask(root, url, Q1, "--session", "big", "-b", "600").exit_code == 0
    res = run_ask(root, url, Q2, "--session", "big", "-b", "600")
    assert res.exit_code == 0, res.output
    r2 = state.requests[1]["messages"]
    # afresh: the system prompt (still a reused prefix), a whole new context and the question
    assert [m["role"] for m in r2] == ["system", "user"] and r2[0]["content"] == SYSTEM_PROMPT
    assert long_answer not in r2[1]["content"] and r2[1]["content"].endswith(f"Question: {Q2}")
    assert "outgrew its" in res.stderr and "started afresh after the system prompt" in res.stderr
    data = json.loads(res.stdout)
    assert data["session"]["started_afresh"] and data["session"]["question"] == 2
    system = counter().message_tokens(Message.system(SYSTEM_PROMPT))
    assert data["usage"]["cached_tokens"] == system and data["usage"]["cache_source"] == "estimate"
    # the next follow-up extends the fresh tail
    state.answers = ["See shop/tax.py:6."]
    assert (
        run_ask(root, url, "And for the us region?", "--session", "big", "-b", "600").exit_code == 0
    )
    r3 = state.requests[2]["messages"]
    assert json.dumps(r3[:3]) == json.dumps([*r2, {"role": "assistant", "content": A2}])
    assert len(load_session(index_dir, "big").turns) == 3


def test_new_session_forgets_the_earlier_questions(server, shop) -> None:
    state, url = server
    root, index_dir = shop
    state.answers = [A1, A2]
    run_ask(root, url, Q1, "--session", "n", "-b", "900")
    res = run_ask(root, url, Q2, "--session", "n", "--new-session", "-b", "900")
    assert res.exit_code == 0, res.output
    assert [m["role"] for m in state.requests[1]["messages"]] == ["system", "user"]
    assert [t.question for t in load_session(index_dir, "n").turns] == [Q2]


BAD_SESSIONS = {
    "not json": b"{",
    "a list": b"[]",
    "wrong format": json.dumps({"format": 9, "name": "x"}).encode(),
    "another name": json.dumps({"format": 1, "name": "y", "messages": []}).encode(),
    "roles out of turn": json.dumps(
        {
            "format": 1,
            "name": "x",
            "shown": [],
            "turns": [],
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "assistant", "content": "a"},
                {"role": "user", "content": "u"},
            ],
        }
    ).encode(),
    "a shown path outside": json.dumps(
        {
            "format": 1,
            "name": "x",
            "turns": [],
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": "u"},
                {"role": "assistant", "content": "a"},
            ],
            "shown": [{"path": "../../etc/passwd", "start_line": 1, "end_line": 2, "kind": "full"}],
        }
    ).encode(),
    "a turn of another shape": json.dumps(
        {
            "format": 1,
            "name": "x",
            "messages": [],
            "shown": [],
            "turns": [{"question": 1}],
        }
    ).encode(),
}


@pytest.mark.parametrize("content", list(BAD_SESSIONS.values()), ids=list(BAD_SESSIONS))
def test_a_damaged_or_planted_session_file_is_refused_before_any_call(
    server, shop, content: bytes
) -> None:
    state, url = server
    root, index_dir = shop
    (index_dir / SESSIONS_DIR).mkdir(exist_ok=True)
    (index_dir / SESSIONS_DIR / "x.json").write_bytes(content)
    res = run_ask(root, url, Q1, "--session", "x", "-b", "900")
    assert res.exit_code == 1 and "is not a valid ask session" in res.output, res.output
    assert "rm " in res.output and state.requests == []


def test_a_linked_or_special_session_file_is_not_followed(server, shop, tmp_path) -> None:
    state, url = server
    root, index_dir = shop
    outside = tmp_path / "elsewhere.json"
    outside.write_text("{}")
    (index_dir / SESSIONS_DIR).mkdir(exist_ok=True)
    (index_dir / SESSIONS_DIR / "l.json").symlink_to(outside)
    os.mkfifo(index_dir / SESSIONS_DIR / "f.json")
    for name in ("l", "f"):
        res = run_ask(root, url, Q1, "--session", name, "-b", "900")
        assert res.exit_code == 1 and "Cannot read the ask session" in res.output, res.output
    assert state.requests == [] and outside.read_text() == "{}"


def test_a_session_that_cannot_be_saved_still_prints_the_answer(server, shop, tmp_path) -> None:
    state, url = server
    root, index_dir = shop
    (index_dir / SESSIONS_DIR).write_text("not a directory")
    state.answers = [A1]
    res = run_ask(root, url, Q1, "--session", "s", "-b", "900", json_out=False)
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith(A1)
    assert "warning: session s was not saved:" in res.stderr
    assert (index_dir / SESSIONS_DIR).read_text() == "not a directory"


def test_a_linked_session_directory_is_not_followed(server, shop, tmp_path) -> None:
    state, url = server
    root, index_dir = shop
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.json").write_text("{}")
    (index_dir / SESSIONS_DIR).symlink_to(outside)
    state.answers = [A1]
    res = run_ask(root, url, Q1, "--session", "x", "-b", "900")
    assert res.exit_code == 1 and "Cannot read the ask session" in res.output, res.output
    assert state.requests == [] and os.listdir(outside) == ["x.json"]


@pytest.mark.parametrize("name", ["../x", "a/b", ".hidden", "", "x" * 65])
def test_a_session_name_is_one_plain_word(server, shop, name: str) -> None:
    state, url = server
    root, _ = shop
    res = run_ask(root, url, Q1, "--session", name)
    assert res.exit_code != 0 and "session" in res.output.lower() and state.requests == []


def test_the_recorded_exchange_replays_and_the_server_reused_the_prefix(server, tmp_path) -> None:
    """A real two-question session with llama-cpp-python 0.3.36 + Qwen2.5-Coder-1.5B
    (benchmarks/record_ask_session.py): replayed through the CLI, the follow-up's request is
    the one sent to the server, it starts with the first one and its answer and adds only
    lines not shown before; the server's log says it reused all of that prefix, and the
    repoctx estimate of the reused prefix is within 3 % of it."""
    state, url = server
    rec = json.loads(RECORDING.read_text())
    root = make_repo(tmp_path / "repo", rec["files"])
    index(root)
    state.recorded = [e["reply"] for e in rec["exchanges"]]
    outs = []
    for q in rec["questions"]:
        res = run_ask(
            root,
            url,
            q,
            "--session",
            "rec",
            "-b",
            str(rec["budget"]),
            "--max-tokens",
            str(rec["max_tokens"]),
        )
        assert res.exit_code == 0, res.output
        outs.append(json.loads(res.stdout))
    r1, r2 = state.requests
    answer1 = outs[0]["answer"]
    assert json.dumps(r2["messages"][:3]) == json.dumps(
        [*r1["messages"], {"role": "assistant", "content": answer1}]
    )
    # only lines not shown before were added (a class after its methods: its other lines)
    follow = r2["messages"][3]["content"]
    assert shown_lines(follow) and not shown_lines(follow) & shown_lines(
        r1["messages"][1]["content"]
    )
    # the same requests as were sent to the real server
    for sent, recorded in zip(state.requests, rec["exchanges"], strict=True):
        assert sent["messages"] == recorded["request"]["messages"]
    measured = rec["measured"]
    hit = measured["followup_prefix_hit"]
    est = outs[1]["usage"]["cached_tokens"]
    assert outs[1]["usage"]["cache_source"] == "estimate"
    assert abs(est - hit) <= 0.03 * hit, (est, hit)
    # The server reused the whole first request and its answer (all but the last token of the
    # answer, which it never evaluated): it processed only the follow-up's new message.
    first = rec["exchanges"][0]["reply"]["body"]["usage"]
    assert hit >= first["prompt_tokens"] + first["completion_tokens"] - 2
    assert measured["followup_remaining"] == outs[1]["usage"]["prompt_tokens"] - hit
    # The request's own count is the server's (its usage came with the unstreamed answers):
    # what `ask` reports as counted when a server streams none.
    tokens = counter()
    for out in outs:
        assert out["usage"]["source"] == "reported"
        server = out["usage"]["prompt_tokens"]
        assert abs(out["prompt_tokens_est"] - server) <= 0.01 * server
        assert tokens.count(out["answer"]) == out["usage"]["completion_tokens"]
