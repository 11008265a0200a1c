"""Prefix-stable prompts (issue 39): across a run, each request to the model server begins with
the previous request — the same system message, the same tools, the same messages — so a
server's prompt cache reuses all of it; the cache figures servers report are read (OpenAI,
llama.cpp's server, Anthropic, Ollama), estimated when a server says nothing
(llama-cpp-python), traced per call and shown by `agent replay`.

The model server is a scripted OpenAI-compatible HTTP server on 127.0.0.1 that records every
request and counts its prompt as Qwen's chat template renders it, in Qwen's tokens; acting as
llama.cpp's server it reports what of the prompt it could reuse (the longest common prefix with
the previous prompt), as that server does in `timings`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.budget import Limits
from agent.loop import RunOptions, run_agent
from agent.models import OpenAIClient, RetryPolicy
from agent.models.anthropic import parse_response as anthropic_response
from agent.models.ollama import parse_response as ollama_response
from agent.replay import render_trace
from agent.trace import read_trace
from cli.settings import load_config
from retrieval.tokens import get_tokenizer
from tests.conftest import make_repo
from tests.model_server import ModelServer

MODEL = "qwen2.5-coder-1.5b"
TASK = "Fix the bug in pkg/calc.py add"
QWEN = get_tokenizer("qwen3")
ALL = frozenset({"read", "write", "execute"})

FILES = {
    ".repoctx.toml": '[agent]\ntest_env = { PYTEST_DISABLE_PLUGIN_AUTOLOAD = "1" }\n',
    "AGENTS.md": "Run the tests with pytest.\n",
    "pkg/__init__.py": "",
    "pkg/calc.py": '''
        """Arithmetic helpers."""


        def add(a, b):
            """Sum of two numbers."""
            return a - b


        def double(x):
            return add(x, x)
        ''',
    "pkg/use.py": """
        from pkg.calc import add


        def total(xs):
            return add(xs[0], xs[1])
        """,
    "tests/test_calc.py": """
        from pkg.calc import add, double
        from pkg.use import total


        def test_add():
            assert add(1, 2) == 3


        def test_double():
            assert double(2) == 4


        def test_total():
            assert total([2, 3]) == 5
        """,
}
PLAN = json.dumps(
    {
        "steps": [
            {"title": "Find the bug in add", "done_when": "the faulty line is known"},
            {"title": "Fix add", "done_when": "all tests pass", "check": "tests_pass"},
        ]
    }
)
FIX = {"path": "pkg/calc.py", "old_text": "return a - b", "new_text": "return a + b"}
#: A run of six steps after the plan: look, read, edit, test, look at the diff, finish.
SIX_STEPS: list[tuple[str, dict[str, Any]]] = [
    ("find_symbol", {"name": "add"}),
    ("read_span", {"path": "pkg/calc.py", "start_line": 1, "end_line": 12}),
    ("edit", FIX),
    ("run_tests", {}),
    ("git_diff", {}),
    ("finish", {"summary": "add adds again."}),
]


# -- the scripted server ---------------------------------------------------------------------------


def render_qwen(body: dict[str, Any]) -> list[str]:
    """A request as Qwen 2.5's chat template renders it (the tools in the system turn, tool
    results as <tool_response> in user turns), split into texts and special tokens."""
    out: list[str] = []
    messages = body["messages"]
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    tools = body.get("tools") or []
    head = system
    if tools:
        head += (
            "\n\n# Tools\n\nYou may call one or more functions to assist with the user query."
            "\n\nYou are provided with function signatures within <tools></tools> XML tags:"
            "\n<tools>\n"
            + "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
            + "\n</tools>\n\nFor each function call, return a json object with function name "
            "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
        )
    out += ["<|im_start|>", f"system\n{head}", "<|im_end|>", "\n"]
    for m in messages[1 if system else 0 :]:
        out += ["<|im_start|>", turn(m), "<|im_end|>", "\n"]
    return out + ["<|im_start|>", "assistant\n"]


def turn(m: dict[str, Any]) -> str:
    if m["role"] == "tool":
        return f"user\n<tool_response>\n{m['content']}\n</tool_response>"
    text = m.get("content") or ""
    for c in m.get("tool_calls") or []:
        f = c["function"]
        text += f'\n<tool_call>\n{{"name": "{f["name"]}", "arguments": {f["arguments"]}}}'
        text += "\n</tool_call>"
    return f"{m['role']}\n{text}"


def count_qwen(parts: list[str]) -> int:
    """Tokens of a rendered prompt: each special marker is one token, the texts in Qwen's BPE."""
    return sum(1 if p in ("<|im_start|>", "<|im_end|>") else QWEN.count(p) for p in parts)


def common_tokens(a: list[str], b: list[str]) -> int:
    """What a prefix cache can reuse: the tokens of the longest common start of two prompts."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x == y:
            n += 1
            continue
        k = 0
        for cx, cy in zip(x, y, strict=False):
            if cx != cy:
                break
            k += 1
        return count_qwen(a[:n]) + max(0, QWEN.count(x[:k]) - 1) if k else count_qwen(a[:n])
    return count_qwen(a[:n])


def chat(content: str | None, calls: list[tuple[str, dict]] = ()) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{name}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}
            for name, args in calls
        ]  # fmt: skip
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
    }


#: How the server reports usage: given the prompt's tokens and what it reused, the fields it adds.
Shape = Callable[[int, int], dict[str, Any]]
SHAPES: dict[str, Shape] = {
    # llama-cpp-python 0.3.36: usage without any cache figure
    "llama-cpp-python": lambda prompt, reused: {
        "usage": {"prompt_tokens": prompt, "completion_tokens": 9, "total_tokens": prompt + 9}
    },
    # llama.cpp's server: timings with cache_n (reused) and prompt_n (processed)
    "llama.cpp": lambda prompt, reused: {
        "usage": {"prompt_tokens": prompt, "completion_tokens": 9, "total_tokens": prompt + 9},
        "timings": {"cache_n": reused, "prompt_n": prompt - reused, "predicted_n": 9},
    },
    # OpenAI and vLLM: usage.prompt_tokens_details.cached_tokens
    "openai": lambda prompt, reused: {
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": 9,
            "total_tokens": prompt + 9,
            "prompt_tokens_details": {"cached_tokens": reused},
        }
    },
    # a server that reports nothing at all (a stream without usage)
    "silent": lambda prompt, reused: {},
}


class LlamaCpp:
    """Answers /v1/chat/completions from a script, records every request with its rendered
    prompt, and (``window``) refuses a prompt longer than the context window with
    llama-cpp-python's own error."""

    def __init__(self, replies: list[dict[str, Any]], shape: str = "llama.cpp",
                 window: int | None = None) -> None:  # fmt: skip
        self.replies, self.shape, self.window = list(replies), SHAPES[shape], window
        self.requests: list[dict[str, Any]] = []
        self.prompts: list[list[str]] = []
        self.sizes: list[int] = []
        self.reused: list[int] = []
        self.overflows: list[tuple[int, int]] = []
        self.held: list[str] = []
        self.url = ""

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.requests.append(body)
        parts = render_qwen(body)
        size = count_qwen(parts)
        if self.window is not None and size >= self.window:
            # llama-cpp-python's server (llama_cpp/server/errors.py), word for word
            self.overflows.append((size, body.get("max_tokens") or 0))
            asked = body.get("max_tokens") or 0
            return 400, {
                "error": {
                    "message": f"This model's maximum context length is {self.window} tokens. "
                    f"However, you requested {size + asked} tokens ({size} in the messages, "
                    f"{asked} in the completion). Please reduce the length of the messages or "
                    "completion.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            }
        # As llama.cpp: the tokens it holds are the last prompt and the reply it generated.
        reused = common_tokens(self.held, parts) if self.held else 0
        self.prompts.append(parts)
        self.sizes.append(size)
        self.reused.append(reused)
        if not self.replies:
            return 400, {"error": {"message": "unscripted request"}}
        reply = self.replies.pop(0)
        self.held = [*parts[:-1], turn(reply["choices"][0]["message"]), "<|im_end|>"]
        return 200, {**reply, **self.shape(size, reused)}


@pytest.fixture
def serve(model_server: ModelServer) -> Callable[..., LlamaCpp]:
    """Starts the shared fake server answering chat requests as a LlamaCpp; other paths 404."""

    def start(replies: list[dict[str, Any]], **kw: Any) -> LlamaCpp:
        srv = LlamaCpp(replies, **kw)
        model_server.answer = lambda seen: (
            srv.answer(seen.body) if seen.path.endswith("/chat/completions") else (404, {})
        )
        srv.url = model_server.base_url
        return srv

    return start


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", FILES)


def client(srv: LlamaCpp) -> OpenAIClient:
    return OpenAIClient(MODEL, base_url=srv.url, retry=RetryPolicy(max_retries=0))


def run(repo: Path, srv: LlamaCpp, limits: Limits | None = None):
    options = RunOptions(limits=limits or Limits(), granted=ALL, sleep=lambda s: None)
    return run_agent(load_config(repo, env={}, jobs=1), TASK, client(srv), options)


def script(steps: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    return [chat(PLAN), *(chat(None, [step]) for step in steps)]


def trace_of(report) -> list[dict[str, Any]]:
    return read_trace(Path(report.trace_path))


def prefix_share(before: list[str], after: list[str]) -> float:
    """Of the earlier prompt, the share (in tokens) the later one starts with."""
    return common_tokens(before, after) / count_qwen(before)


# -- each call extends the previous one -------------------------------------------------------------


def test_every_request_of_a_six_step_run_extends_the_one_before(repo: Path, serve) -> None:
    srv = serve(script(SIX_STEPS))
    report = run(repo, srv)
    assert (report.status, report.reason, report.steps) == ("done", "finished", 6)
    assert "return a + b" in (repo / "pkg/calc.py").read_text()
    reqs = srv.requests
    assert len(reqs) == 7  # the plan call and six steps
    # The plan call shares the prefix too: same system message, same tools, as every step.
    assert all(r["tools"] == reqs[0]["tools"] for r in reqs)
    assert all(r["messages"][0] == reqs[0]["messages"][0] for r in reqs)
    for before, after in zip(reqs, reqs[1:], strict=False):
        n = len(before["messages"])
        assert after["messages"][:n] == before["messages"], "a request rewrote the one before"
        assert len(after["messages"]) > n
    # As a prefix cache sees it: each prompt, whole, starts the next one (before issue 39,
    # ~0 %: every step rebuilt one user message with everything in it).
    shares = [prefix_share(a, b) for a, b in zip(srv.prompts, srv.prompts[1:], strict=False)]
    assert min(shares) > 0.99, shares
    # The task is in the fixed system message, never repeated; code shown once is not shown
    # again in a later step's new message.
    system = reqs[0]["messages"][0]["content"]
    assert "# Task\nFix the bug in pkg/calc.py add" in system
    shown = [r["messages"][-1]["content"].count('"""Sum of two numbers."""') for r in reqs]
    assert shown[0] == 1 and sum(shown) == 1
    assert trace_of(report)[-1]["summary"]["compactions"] == 0


def test_a_conversation_outgrowing_the_budget_is_compacted_keeping_the_fixed_prefix(
    repo: Path, serve
) -> None:
    reads = [("read_span", {"path": "tests/test_calc.py", "start_line": i % 9 + 1,
                            "end_line": 14}) for i in range(14)]  # fmt: skip
    steps = [*reads, ("finish", {"summary": "read enough"})]
    srv = serve(script(steps))
    report = run(repo, srv, Limits(prompt_budget=2_600, max_steps=20))
    assert report.reason in ("finished", "finished_without_change")
    end = trace_of(report)[-1]
    compactions = end["summary"]["compactions"]
    assert compactions >= 1
    rewrites = 0
    for before, after in zip(srv.requests, srv.requests[1:], strict=False):
        assert after["messages"][0] == before["messages"][0]  # the system message, always
        assert after["tools"] == before["tools"]
        if after["messages"][: len(before["messages"])] != before["messages"]:
            rewrites += 1
    # Every request extends the one before, except at a counted compaction.
    assert rewrites == compactions
    notices = [e for e in trace_of(report) if e.get("kind") == "compaction"]
    assert len(notices) == compactions
    # A compaction leaves one line per dropped step, as a record (not as calls to copy).
    compacted = next(
        r for b, r in zip(srv.requests, srv.requests[1:], strict=False)
        if r["messages"][: len(b["messages"])] != b["messages"]
    )  # fmt: skip
    # The plan call's exchange is kept too: the cache matches through it even then.
    assert compacted["messages"][:3] == srv.requests[1]["messages"][:3]
    recap = compacted["messages"][3]["content"]
    assert recap.startswith("Earlier steps of this run") and "step 1: read_span" in recap
    assert "read_span(" not in recap and "->" not in recap
    assert all(r["messages"][-1]["content"] for r in srv.requests)
    for size in srv.sizes:
        assert size <= 2_600


# -- cache figures -------------------------------------------------------------------------------------


def cache_events(report) -> list[dict[str, Any]]:
    return [e["cache"] for e in trace_of(report) if e["type"] == "model_call"]


def test_llama_cpp_server_timings_are_the_reused_tokens(repo: Path, serve) -> None:
    srv = serve(script(SIX_STEPS), shape="llama.cpp")
    report = run(repo, srv)
    cache = cache_events(report)
    assert [c["reused"] for c in cache] == srv.reused
    assert [c["processed"] for c in cache] == [s - r for s, r in zip(srv.sizes, srv.reused,
                                                                        strict=True)]  # fmt: skip
    assert {c["source"] for c in cache} == {"server"}
    # After the first call the server processes at most 30 % of each prompt (the target).
    assert all(c["processed"] <= 0.3 * s for c, s in zip(cache[1:], srv.sizes[1:], strict=True))
    assert report.usage.cached_tokens == sum(srv.reused)
    assert report.usage.cache_source == "server"


def test_openai_cached_tokens_are_read(repo: Path, serve) -> None:
    srv = serve(script(SIX_STEPS), shape="openai")
    report = run(repo, srv)
    cache = cache_events(report)
    assert [c["reused"] for c in cache] == srv.reused and cache[0]["reused"] == 0
    assert {c["source"] for c in cache} == {"server"}


def test_without_figures_from_the_server_the_reuse_is_estimated(repo: Path, serve) -> None:
    """llama-cpp-python reports no cache use: the common prefix with the previous request,
    in the model's tokens, is the estimate — and it agrees with what the server reused."""
    srv = serve(script(SIX_STEPS), shape="llama-cpp-python")
    report = run(repo, srv)
    cache = cache_events(report)
    assert {c["source"] for c in cache} == {"estimate"} and cache[0]["reused"] == 0
    for c, truth, size in zip(cache[1:], srv.reused[1:], srv.sizes[1:], strict=True):
        assert abs(c["reused"] - truth) <= 0.02 * size, (c, truth)
        assert c["processed"] <= 0.3 * size
    assert report.usage.cache_source == "estimate"


def test_a_server_that_reports_no_usage_gets_the_requests_own_count(repo: Path, serve) -> None:
    srv = serve(script(SIX_STEPS), shape="silent")
    report = run(repo, srv)
    calls = [e for e in trace_of(report) if e["type"] == "model_call"]
    for e, size in zip(calls, srv.sizes, strict=True):
        assert e["usage"]["prompt_tokens"] == e["prompt_tokens_est"]
        assert abs(e["usage"]["prompt_tokens"] - size) <= 0.05 * size
    assert calls[-1]["cache"]["source"] == "estimate" and calls[-1]["cache"]["reused"] > 0


def test_replay_shows_processed_and_reused_per_call_and_in_total(repo: Path, serve) -> None:
    srv = serve(script(SIX_STEPS), shape="llama.cpp")
    report = run(repo, srv)
    text = render_trace(trace_of(report))
    for size, reused in zip(srv.sizes, srv.reused, strict=True):
        assert f"(prompt: {size - reused:,} processed, {reused:,} reused)" in text
    total, reused = sum(srv.sizes), sum(srv.reused)
    assert f"Prompt tokens: {total - reused:,} processed, {reused:,} reused" in text
    assert "reported by the server" in text


def test_anthropic_and_ollama_cache_fields_are_read() -> None:
    anthropic = anthropic_response(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn",
            "usage": {
                "input_tokens": 20,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 1800,
                "output_tokens": 5,
            },
        },
        0.1,
        "claude",
    ).usage
    assert (anthropic.prompt_tokens, anthropic.cached_tokens) == (1820, 1800)
    assert (anthropic.processed_tokens, anthropic.cache_source) == (20, "server")
    ollama = ollama_response(
        {
            "model": "qwen2.5-coder:1.5b",
            "message": {"role": "assistant", "content": "ok"},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": 1500,
            "prompt_eval_cached_count": 1400,
            "eval_count": 3,
        },
        0.1,
        "qwen",
    ).usage
    assert (ollama.prompt_tokens, ollama.cached_tokens, ollama.cache_source) == (
        1500,
        1400,
        "server",
    )
    older = ollama_response(
        {"model": "m", "message": {"role": "assistant", "content": "ok"}, "done": True,
         "prompt_eval_count": 1500, "eval_count": 3},
        0.1,
        "m",
    ).usage  # fmt: skip
    assert (older.prompt_tokens, older.cache_source) == (1500, "")
