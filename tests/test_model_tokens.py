"""Prompt tokens in the model's own tokenizer: the server's tokenize endpoint (real 127.0.0.1
servers in the shapes of llama-cpp-python, llama.cpp and vLLM), a tokenizer.json, the family
table against the usage a real server reported; and what the counts are for — `ask` retrying
once smaller after an overflow, the agent sizing its retry from the reported window, and
`--budget` refused below the fixed prompt."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agent.ask import ask
from agent.budget import Limits
from agent.errors import BudgetTooSmallError
from agent.loop import RunOptions, run_agent
from agent.models import (
    ContextTooLongError,
    Message,
    ModelConfigError,
    OpenAIClient,
    RetryPolicy,
    ScriptedModel,
    ToolCall,
    ToolSpec,
    model_tokenizer,
)
from agent.models.http import error_from_response
from agent.models.prompt_tokens import EST_MARGIN, EXACT_MARGIN, QWEN_TEMPLATE
from agent.trace import read_trace
from cli.main import cli
from cli.settings import load_config
from indexer import Index
from retrieval.tokens import get_tokenizer
from tests.conftest import index, make_repo
from tests.model_server import Answer, ModelServer, Reply, Seen
from tests.test_agent_loop import FILES, PLAN, finish
from tests.test_context import SHOP

RECORDINGS = sorted((Path(__file__).parent / "recordings").glob("token-counts-*.json"))
ALL = frozenset({"read", "write", "execute"})

Handler = Callable[[str, dict[str, Any]], tuple[int, Any]]


def answering(handle: Handler) -> Answer:
    """A fake model server's answer from ``handle(path, body) -> (status, json)``; a None body
    is the empty event stream llama-cpp-python refuses a prompt longer than its window with."""

    def answer(seen: Seen) -> Reply:
        status, payload = handle(seen.path, seen.body)
        if payload is None:
            return Reply(status, b"", content_type="text/event-stream")
        return Reply(status, payload)

    return answer


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], ModelServer]]:
    """Starts fake model servers on 127.0.0.1 answering with ``handle``."""
    with contextlib.ExitStack() as started:

        def start(handle: Handler) -> ModelServer:
            return started.enter_context(ModelServer(answer=answering(handle)))

        yield start


def words(text: str) -> list[str]:
    """The test servers' tokenizer: words and single punctuation marks."""
    return re.findall(r"\w+|[^\w\s]", text)


def chat_reply(text: str) -> dict[str, Any]:
    return {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
    }


NOT_FOUND = (404, {"detail": "Not Found"})


# -- the server's tokenize endpoint ------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "answer"),
    [
        # llama-cpp-python
        ("/extras/tokenize/count", lambda b: {"count": len(words(b["input"]))}),
        # llama.cpp's server
        ("/tokenize", lambda b: {"tokens": list(range(len(words(b["content"]))))}),
        # vLLM
        ("/tokenize", lambda b: {"count": len(words(b["prompt"])), "max_model_len": 8192}),
    ],
    ids=["llama-cpp-python", "llama.cpp", "vllm"],
)
def test_the_servers_tokenize_endpoint_counts_when_it_has_one(serve, path, answer) -> None:
    srv = serve(lambda p, b: (200, answer(b)) if p == path else NOT_FOUND)
    client = OpenAIClient("qwen2.5-coder-7b", base_url=srv.base_url, name="openai:qwen2.5-coder-7b")
    tokens = model_tokenizer(client)
    assert tokens.source == f"server {srv.base_url.removesuffix('/v1')}{path}" and tokens.exact
    assert tokens.margin == EXACT_MARGIN and tokens.template == QWEN_TEMPLATE
    text = "def total(xs):\n    return sum(xs)  # 12 13"
    assert tokens.count(text) == len(words(text)) == 14
    asked = len(srv.requests)
    assert tokens.count(text) == 14 and len(srv.requests) == asked  # each text asked once
    assert all(p in ("/extras/tokenize/count", "/tokenize") for p, _ in srv.requests)


def test_a_family_bpe_that_counts_as_the_server_does_counts_without_requests(serve) -> None:
    qwen3 = get_tokenizer("qwen3")
    srv = serve(
        lambda p, b: (200, {"count": qwen3.count(b["input"])})
        if p == "/extras/tokenize/count"
        else NOT_FOUND
    )
    client = OpenAIClient("qwen2.5-coder-7b", base_url=srv.base_url, name="openai:qwen2.5-coder-7b")
    tokens = model_tokenizer(client)
    assert tokens.source.startswith("qwen3 (qwen family table), agrees with the server http")
    assert tokens.exact and tokens.margin == EXACT_MARGIN
    probes = len(srv.requests)
    assert tokens.count("  12| def f(x):\n  13|     return x") == 17
    assert len(srv.requests) == probes == 3  # the probe texts, then nothing per text

    insist = model_tokenizer(client, "server")
    assert insist.source.startswith("server http") and insist.count("12 13") == 5
    no_endpoint = serve(lambda p, b: NOT_FOUND)
    with pytest.raises(ModelConfigError, match="no tokenize endpoint"):
        model_tokenizer(OpenAIClient("m", base_url=no_endpoint.base_url), "server")


def test_without_a_tokenize_endpoint_the_family_table_counts(serve) -> None:
    srv = serve(lambda p, b: NOT_FOUND)
    client = OpenAIClient("qwen2.5-coder-7b", base_url=srv.base_url, name="openai:qwen2.5-coder-7b")
    tokens = model_tokenizer(client)
    assert tokens.source == "qwen3 (qwen family table)" and tokens.exact
    text = "  12| def f(x):\n  13|     return x"
    assert tokens.count(text) == get_tokenizer("qwen3").count(text)
    # The probe is made once: later counts do not ask again.
    probes = len(srv.requests)
    tokens.count("another text")
    assert probes == 2 and len(srv.requests) == probes

    unknown = model_tokenizer(OpenAIClient("house-model", base_url=srv.base_url), fallback="o200k")
    assert unknown.source == "o200k (model family unknown)" and not unknown.exact
    assert unknown.margin == EST_MARGIN and unknown.usable(10_000) == 9_000


def test_a_server_that_stops_counting_falls_back_and_says_so(serve) -> None:
    state = {"up": True}

    def handle(path: str, body: dict[str, Any]) -> tuple[int, Any]:
        if path == "/extras/tokenize/count" and state["up"]:
            return 200, {"count": len(words(body["input"]))}
        return 500, {"error": "gone"}

    srv = serve(handle)
    client = OpenAIClient("qwen2.5-coder", base_url=srv.base_url, name="openai:qwen2.5-coder")
    tokens = model_tokenizer(client)
    assert tokens.source.startswith("server ")
    state["up"] = False
    text = "  12| def f(x):"
    assert tokens.count(text) == get_tokenizer("qwen3").count(text)
    assert tokens.stats["fallbacks"] == 1 and "1 texts counted by the fallback" in (
        tokens.describe()
    )


def test_a_tokenizer_json_counts_as_the_tokenizers_library_does(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    corpus = [p.read_text() for p in sorted(Path("agent/models").glob("*.py"))]
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=600, special_tokens=["[UNK]"]))
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))

    tokens = model_tokenizer(ScriptedModel([]), str(path))
    assert tokens.source == f"file {path}" and tokens.exact and tokens.margin == EXACT_MARGIN
    library = Tokenizer.from_file(str(path))
    for text in [*corpus[:3], "  12| x = 1\n  13| y = 22", ""]:
        assert tokens.count(text) == len(library.encode(text, add_special_tokens=False).ids)


# -- the estimate against what a real server reported ------------------------------------------


def from_wire(m: dict[str, Any]) -> Message:
    calls = tuple(
        ToolCall.from_raw(c["id"], c["function"]["name"], c["function"]["arguments"])
        for c in m.get("tool_calls") or ()
    )
    if m["role"] == "tool":
        return Message.tool(m["tool_call_id"], m["content"])
    return Message(m["role"], m["content"] or "", calls)


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
def test_estimates_are_within_3_percent_of_the_servers_usage(path: Path) -> None:
    """benchmarks/token_counts.py recorded these requests with llama-cpp-python 0.3.36 and
    Qwen2.5-Coder: the offline estimate (family table, chat template) against the prompt
    tokens the server reported, for `ask`, the plan and agent steps with every tool schema."""
    recording = json.loads(path.read_text())
    tokens = model_tokenizer(ScriptedModel([], name=f"openai:{recording['model']}"), probe=False)
    o200k = model_tokenizer(ScriptedModel([]), "o200k")
    assert len(recording["exchanges"]) >= 5
    worst_o200k = 0.0
    for exchange in recording["exchanges"]:
        request, real = exchange["request"], exchange["usage"]["prompt_tokens"]
        messages = [from_wire(m) for m in request["messages"]]
        tools = [ToolSpec(**t["function"]) for t in request.get("tools", ())]
        estimate = tokens.prompt_tokens(messages, tools)
        assert abs(estimate / real - 1) <= 0.03, (exchange["name"], estimate, real)
        worst_o200k = max(worst_o200k, abs(o200k.prompt_tokens(messages, tools) / real - 1))
    assert worst_o200k > 0.10  # what counting in o200k got wrong (Qwen splits digits)


# -- ask: one retry with a smaller context ------------------------------------------------------


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    root = make_repo(tmp_path_factory.mktemp("tokens") / "shop", SHOP)
    cfg = index(root)
    idx = Index.open(cfg)
    yield root, idx
    idx.close()


def overflow(window: int, prompt: int) -> tuple[int, Any]:
    """llama-cpp-python's answer to a prompt longer than its context."""
    return 400, {
        "error": {
            "message": f"This model's maximum context length is {window} tokens. However, you "
            f"requested {prompt + 300} tokens ({prompt} in the messages, 300 in the "
            "completion). Please reduce the length of the messages or completion.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }


def test_the_overflow_error_carries_the_window_and_the_prompt_size() -> None:
    status, payload = overflow(8192, 9030)
    exc = error_from_response(status, json.dumps(payload).encode(), {})
    assert isinstance(exc, ContextTooLongError)
    assert (exc.context_window, exc.prompt_tokens) == (8192, 9030)
    llama_cpp = {"error": {"code": 400, "message": "the request exceeds the available context "
                           "size", "type": "exceed_context_size_error", "n_prompt_tokens": 9030,
                           "n_ctx": 8192}}  # fmt: skip
    exc = error_from_response(400, json.dumps(llama_cpp).encode(), {})
    assert (exc.context_window, exc.prompt_tokens) == (8192, 9030)


def test_an_empty_stream_is_asked_again_unstreamed_to_learn_why(serve) -> None:
    """llama-cpp-python refuses a prompt longer than its context with 200 and an empty event
    stream; the same request not streamed gets the error with the window in it."""
    srv = serve(lambda p, b: (200, None) if b.get("stream") else overflow(8192, 9030))
    client = OpenAIClient("m", base_url=srv.base_url, stream=True, retry=RetryPolicy(max_retries=0))
    with pytest.raises(ContextTooLongError) as info:
        client.complete([Message.user("long")])
    assert (info.value.context_window, info.value.prompt_tokens) == (8192, 9030)
    assert [b.get("stream", False) for _, b in srv.requests] == [True, False]


def test_ask_retries_once_with_a_smaller_context_after_an_overflow(serve, shop) -> None:
    root, idx = shop
    state: dict[str, int] = {}

    def handle(path: str, body: dict[str, Any]) -> tuple[int, Any]:
        if not path.endswith("/chat/completions"):
            return NOT_FOUND
        size = sum(len(words(m["content"])) for m in body["messages"])
        # A window that holds about two thirds of the first prompt, and the answer.
        room = state.setdefault("room", size * 2 // 3)
        if size > room:
            return overflow(room + body["max_tokens"], size)
        return 200, chat_reply("Tax is computed in shop/tax.py:10-12.")

    srv = serve(handle)
    client = OpenAIClient("qwen2.5-coder", base_url=srv.base_url, retry=RetryPolicy(max_retries=0))
    answer = ask(idx, "Where is the tax of a checkout computed?", model=client,
                 budget_tokens=2000, max_tokens=300)  # fmt: skip
    chats = [b for p, b in srv.requests if p.endswith("/chat/completions")]
    assert len(chats) == 2, "one retry"
    first, second = (sum(len(words(m["content"])) for m in c["messages"]) for c in chats)
    assert first > state["room"] >= second
    assert answer.answer == "Tax is computed in shop/tax.py:10-12."
    assert answer.citations[0].valid and answer.citations[0].in_context
    assert answer.notes and f"({state['room'] + 300:,}-token context)" in answer.notes[0]
    assert answer.pack.budget < 2000 and answer.prompt_tokens_est > 0

    # Only once: a server that overflows again is the user's to hear about.
    srv.answer = answering(
        lambda p, b: overflow(50, 900) if p.endswith("completions") else NOT_FOUND
    )
    with pytest.raises(ContextTooLongError):
        ask(idx, "Where is the tax computed?", model=client, budget_tokens=2000)


# -- the agent: the retry sized from the reported window, the budget's minimum ------------------


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", FILES)


class Overflowing(ScriptedModel):
    """Says the first prompt is too long: a server whose window is ``window`` and whose
    tokenizer counts twice what ours does."""

    def __init__(self, script: list, window: int) -> None:
        super().__init__(script, name="openai:qwen2.5-coder-7b")
        self.window: int | None = window

    def complete(self, messages, tools=(), **kw):
        if self.window is not None:
            ours = model_tokenizer(self, probe=False).prompt_tokens(messages, tools)
            exc = ContextTooLongError(detail="too long", status=400)
            exc.context_window, exc.prompt_tokens, self.window = self.window, 2 * ours, None
            raise exc
        return super().complete(messages, tools, **kw)


def test_the_agent_sizes_its_retry_from_the_reported_window(repo: Path) -> None:
    model = Overflowing([PLAN, finish("nothing to do")], window=17_000)
    limits = Limits(prompt_budget=20_000, completion_tokens=1000)
    options = RunOptions(limits=limits, granted=ALL, sleep=lambda s: None)
    report = run_agent(load_config(repo, env={}, jobs=1), "Fix add", model, options)
    assert report.reason == "finished_without_change"  # it got to `finish`
    trace = read_trace(Path(report.trace_path))
    budgets = [e["budget"] for e in trace if e["type"] == "context"]
    # 16,000 tokens of room beside the answer, in the server's count: 8,000 in ours.
    assert budgets[0] == 19_400 and 7_990 <= budgets[1] <= 8_000
    assert [e["kind"] for e in trace if e["type"] == "model_error"] == ["context_overflow"]
    assert any(e.get("kind") == "tokenizer" for e in trace if e["type"] == "notice")


def test_the_agents_estimate_is_the_model_tokenizers_count_of_what_was_sent(repo: Path) -> None:
    model = ScriptedModel([PLAN, finish("done")], name="openai:qwen2.5-coder-7b")
    options = RunOptions(limits=Limits(), granted=ALL, sleep=lambda s: None)
    report = run_agent(load_config(repo, env={}, jobs=1), "Fix add", model, options)
    tokens = model_tokenizer(model, probe=False)
    trace = read_trace(Path(report.trace_path))
    estimates = [e["prompt_tokens_est"] for e in trace if e["type"] == "model_call"]
    sent = [tokens.prompt_tokens(c.messages, c.tools) for c in model.calls]
    assert estimates == sent


def test_a_budget_below_the_fixed_prompt_is_refused_naming_the_minimum(
    repo: Path, tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([PLAN, finish("done")]))
    args = ["agent", "run", "Fix add", "-C", str(repo), "--model", f"scripted:{script}", "--yes"]
    # Since issue 39 a small budget gets the compact tool set: 2,000 works, 600 does not, and
    # the advice is what can help (a larger budget or window, the pipeline).
    res = CliRunner().invoke(cli, [*args, "--budget", "600"])
    assert res.exit_code == 2, res.output
    minimum = int(re.search(r"pass --budget (\d+) or more", res.output).group(1))
    assert "(the compact set) and the task take about" in res.output and 600 < minimum < 2000
    assert f"the minimum is {minimum:,}" in res.output and "--strategy pipeline" in res.output

    with pytest.raises(BudgetTooSmallError) as info:
        run_agent(load_config(repo, env={}, jobs=1), "Fix add", ScriptedModel([]),
                  RunOptions(limits=Limits(prompt_budget=minimum - 1), granted=ALL))  # fmt: skip
    assert info.value.minimum == minimum
    ok = CliRunner().invoke(cli, [*args, "--budget", str(minimum), "--json"])
    # accepted: the run goes to `finish` (no_progress, exit 3: the script changes nothing)
    assert ok.exit_code == 3, ok.output
    assert json.loads(ok.output)["reason"] == "finished_without_change"
