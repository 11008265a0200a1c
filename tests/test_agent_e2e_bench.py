"""benchmarks/agent_e2e.py without a model: the fixture repositories hold what the tasks say
(the planted bug fails its test, the known fixes solve the tasks), the recording proxy forwards
streams, counts overlaps and gets the server's prompt counts, and the scoring turns a trace into
the row and the invariants the benchmark reports — including one whole `repoctx agent run` and
one `repoctx ask` through the proxy, against a scripted server on 127.0.0.1."""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks import agent_e2e as bench
from tests.model_server import ModelServer, Reply, Seen

PROMPT_TOKENS = 1000  # what the scripted server says every prompt counts


class ScriptedServer:
    """An OpenAI-compatible server on 127.0.0.1 (tests/model_server.py): streamed chat requests
    get the next scripted reply as server-sent events, ``delay`` seconds apart (no usage, as
    llama.cpp's server); a request with max_tokens 1 and no stream (the proxy's probe) gets a
    usage count."""

    def __init__(self, replies: list[str], delay: float = 0.0) -> None:
        self.replies = list(replies)
        self.delay = delay
        self.requests: list[dict[str, Any]] = []
        self.probes = 0
        self.server = ModelServer(answer=self.answer)
        self.hung_up = self.server.hung_up
        self.url = self.server.base_url

    def answer(self, seen: Seen) -> Reply:
        if seen.method == "GET":
            return Reply(body={"data": [{"id": "scripted"}]})
        if not seen.path.endswith("/chat/completions"):
            return Reply(404, {"detail": "Not Found"})
        if not seen.body.get("stream"):
            self.probes += 1
            usage = {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": 1}
            message = {"role": "assistant", "content": "x"}
            choice = {"index": 0, "message": message, "finish_reason": "length"}
            return Reply(body={"choices": [choice], "usage": usage})
        self.requests.append(seen.body)
        text = self.replies.pop(0) if self.replies else ""
        pieces = [text[i : i + 40] for i in range(0, len(text), 40)] or [""]
        chunks = [{"delta": {"content": p}, "finish_reason": None} for p in pieces]
        chunks.append({"delta": {}, "finish_reason": "stop"})
        events = []
        for c in chunks:
            event = {"object": "chat.completion.chunk", "choices": [{"index": 0, **c}]}
            events.append(f"data: {json.dumps(event)}\r\n\r\n")
        return Reply(events=[*events, "data: [DONE]\r\n\r\n"], gap=self.delay)

    def __enter__(self) -> ScriptedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.close()


def _post(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    parts = url.split("/", 3)
    host, port = parts[2].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("POST", "/" + parts[3], json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


# -- fixtures ------------------------------------------------------------------------------------


# The first two tasks; every task is checked the same way in tests/test_agent_e2e_tasks.py.
@pytest.mark.parametrize("name", ["fix_bug", "add_param"])
def test_the_known_fix_solves_the_task_and_nothing_else_does(tmp_path: Path, name: str) -> None:
    task = bench.TASKS_BY_NAME[name]
    files = bench.REPOS[task.repo]
    root = bench.write_repo(tmp_path / name, files)
    before = bench.check_change(task, root, files)
    assert not before["solved"]
    if name == "fix_bug":  # the planted bug fails exactly the test the task names
        assert not before["tests_passed"] and before["tests_summary"].startswith("1 failed")
    else:
        assert before["tests_passed"] and before["verified"] is False
    bench.apply_fix(task, root)
    after = bench.check_change(task, root, files)
    assert after["solved"] and after["tests_passed"] and after["tests_changed"] == []
    # Editing the test instead of the code is not a solution.
    (root / task.keep[0]).write_text("def test_nothing():\n    pass\n")
    assert not bench.check_change(task, root, files)["solved"]


def test_questions_expect_lines_that_hold_the_answer() -> None:
    for task in (t for t in bench.TASKS if t.kind == "ask"):
        spans = bench.expected_spans(task)
        assert spans
        for (path, start, end), (_, name) in zip(spans, task.expect, strict=True):
            lines = bench.REPOS[task.repo][path].splitlines()
            assert name in lines[start - 1] and end <= len(lines)


# -- the proxy -----------------------------------------------------------------------------------


def test_proxy_forwards_streams_and_gets_the_servers_prompt_count() -> None:
    text = "x" * 130
    with ScriptedServer([text]) as server, bench.RecordingProxy(server.url) as proxy:
        status, raw = _post(
            f"{proxy.url}/chat/completions",
            {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True},
        )
        other, _ = _post(f"{proxy.url.removesuffix('/v1')}/tokenize", {"content": "hi"})
    assert status == 200 and raw.endswith(b"data: [DONE]\r\n\r\n")
    assert other == 404  # any path goes through as it is
    chat, tokenize = proxy.exchanges
    assert chat["chat"] and chat["complete"] and chat["content"] == text
    assert chat["prompt_tokens"] == PROMPT_TOKENS and server.probes == 1
    assert chat["server_usage"] is None
    assert not tokenize["chat"] and tokenize["status"] == 404
    assert proxy.overlaps == 0 and proxy.max_in_flight == 1


def test_proxy_counts_a_request_sent_while_another_is_answered() -> None:
    server = ScriptedServer(["a" * 200, "b" * 200], delay=0.05)
    with server, bench.RecordingProxy(server.url, probe=False) as proxy:
        body = {"model": "m", "messages": [], "stream": True}
        threads = [
            threading.Thread(target=_post, args=(f"{proxy.url}/chat/completions", body))
            for _ in range(2)
        ]
        for t in threads:
            t.start()
            time.sleep(0.1)
        for t in threads:
            t.join(10)
    assert proxy.overlaps == 1 and proxy.max_in_flight == 2
    assert [x["overlapped"] for x in proxy.exchanges] == [False, True]
    assert all(x["complete"] for x in proxy.exchanges)


def test_proxy_closes_the_upstream_request_when_the_client_hangs_up() -> None:
    server = ScriptedServer(["z" * 4000], delay=0.05)
    with server, bench.RecordingProxy(server.url) as proxy:
        host, port = proxy.url.split("/")[2].split(":")
        sock = socket.create_connection((host, int(port)))
        body = json.dumps({"model": "m", "messages": [], "stream": True}).encode()
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
            b"application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        assert sock.recv(100)
        sock.close()
        assert server.hung_up.wait(5)
        deadline = time.monotonic() + 5
        while not proxy.exchanges and time.monotonic() < deadline:
            time.sleep(0.05)
    (record,) = proxy.exchanges
    assert record["client_gone"] and not record["complete"]
    assert record["prompt_tokens"] is None and server.probes == 0  # no probe for a broken reply


# -- scoring -------------------------------------------------------------------------------------

TOOLS = ["read_span", "edit", "run_tests", "finish", "update_plan", "remember"]


def _trace(act: list[dict[str, Any]], end: dict[str, Any], extra: list[dict[str, Any]]):
    events: list[dict[str, Any]] = [
        {"type": "header", "format": 1, "run_id": "r1", "tools": TOOLS, "tool_format": "auto"},
        {
            "type": "model_call",
            "step": 0,
            "purpose": "plan",
            "content": '{"steps": []}',
            "tool_calls": [],
            "prompt_tokens_est": 500,
        },
    ]
    for i, a in enumerate(act, 1):
        events.append(
            {
                "type": "model_call",
                "step": i,
                "purpose": "act",
                "tool_calls": [],
                "prompt_tokens_est": 990,
                **a,
            }
        )
    events += extra
    events.append({"type": "end", **end})
    return events


def _exchanges(events: list[dict[str, Any]], reported: int) -> list[dict[str, Any]]:
    return [
        {
            "chat": True,
            "complete": True,
            "content": e["content"],
            "prompt_tokens": reported,
            "overlapped": False,
            "seconds": 2.0,
            "probe_s": 0.1,
        }
        for e in events
        if e["type"] == "model_call"
    ]


def test_a_synthetic_trace_scores_each_form_invalid_and_missed_call() -> None:
    fenced = '```json\n{"name": "read_span", "arguments": {"path": "a.py"}}\n```'
    tagged = '<tool_call>{"name": "edit", "arguments": {"path": "a.py", "old_text": "x", "new_text": "y"}}</tool_call>'
    broken = '<tool_call>{"name": "run_tests", "arguments": {"scope": }</tool_call>'
    unread = 'I will now call {"name": "finish", "arguments": {"summary": "done"}}'
    native = {"content": "", "tool_calls": [{"id": "c1", "name": "finish", "arguments": "{}"}]}
    events = _trace(
        [
            {"content": fenced},
            {"content": tagged},
            {"content": broken},
            {"content": unread},
            {"content": "All done."},
            native,
        ],
        {"status": "done", "reason": "answered", "summary": {"steps": 6, "changed": []}},
        [
            {"type": "tool_call", "step": 1, "name": "read_span", "ok": True},
            {
                "type": "tool_call",
                "step": 2,
                "name": "edit",
                "ok": False,
                "kind": "bad_arguments",
                "data": {"match_count": 0},
            },
            {"type": "notice", "step": 3, "kind": "malformed_call", "message": "..."},
            {
                "type": "tool_call",
                "step": 6,
                "name": "finish",
                "ok": False,
                "kind": "bad_arguments",
                "data": {},
            },
        ],
    )
    row = bench.score_agent(
        bench.TASKS_BY_NAME["fix_bug"],
        events,
        _exchanges(events, 1000),
        exit_code=0,
        stdout='{"status": "done"}',
        stderr="",
        wall_s=12.3,
        check={"solved": False},
    )
    assert row["calls"] == {"native": 1, "tag": 1, "fenced": 1, "json": 1}
    # the malformed tag, and finish without its required summary; an edit whose old_text
    # did not match is a failed call, not an invalid one
    assert row["invalid"] == {"malformed": 1, "bad_arguments": 1, "unknown_tool": 0}
    assert row["invalid_calls"] == 2
    assert row["failed_calls_by_kind"] == {"bad_arguments": 2}
    assert row["replies_with_call"] == 5 and row["calls_missed"] == 1
    assert row["missed_examples"][0]["step"] == 4
    assert row["completed_without_finish"] and not row["finish_called"]
    assert row["done_but_unsolved"]
    assert row["outcome"] == "unsolved" and not row["crash"]
    pt = row["prompt_tokens"]
    assert pt["estimated"] == 500 + 6 * 990 and pt["reported"] == 7 * 1000
    assert pt["calls_compared"] == 7 and pt["calls_over_tolerance"] == 1  # the plan call
    assert pt["max_abs_call_error_pct"] == 50.0 and pt["error_pct"] == -8.0
    checks = bench.invariants([row], proxy_overlaps=0)
    assert not checks["calls_parsed_when_written"]["pass"]
    assert checks["completed_without_finish"]["tasks"] == ["fix_bug"]
    assert not checks["estimate_within_3pct"]["pass"]
    assert checks["no_request_overlap"]["pass"] and checks["no_crashes"]["pass"]


def test_a_call_read_and_stopped_as_a_repetition_is_not_missed() -> None:
    call = '```json\n{"name": "update_plan", "arguments": {"reason": "r", "complete": true}}\n```'
    events = _trace(
        [{"content": call}, {"content": call}],
        {"status": "stopped", "reason": "repetition", "summary": {"steps": 1}},
        [{"type": "tool_call", "step": 1, "name": "update_plan", "ok": True}],
    )
    row = bench.score_agent(
        bench.TASKS_BY_NAME["fix_bug"],
        events,
        _exchanges(events, 990),
        exit_code=2,
        stdout='{"status": "stopped"}',
        stderr="",
        wall_s=1.0,
        check={"solved": False},
    )
    assert row["calls"]["fenced"] == 2 and row["tool_calls_run"] == 1
    assert row["calls_missed"] == 0 and not row["done_but_unsolved"]


def test_a_crash_and_a_traceback_are_crashes() -> None:
    events = _trace([], {"status": "stopped", "reason": "max_steps", "summary": {}}, [])
    task = bench.TASKS_BY_NAME["fix_bug"]
    for code, err, out in (
        (1, "Traceback (most recent call last):\n  ...", ""),
        (2, "", "not json"),
        (-9, "", ""),
        (None, "", ""),
    ):
        row = bench.score_agent(
            task,
            events,
            [],
            exit_code=code,
            stdout=out,
            stderr=err,
            wall_s=1.0,
            check=None,
            killed=code is None,
        )
        assert row["crash"] and row["outcome"] == "crash", (code, err)
    clean = bench.score_agent(
        task, events, [], exit_code=1, stdout="", stderr="Error: no model", wall_s=1.0, check=None
    )
    assert not clean["crash"] and clean["outcome"] == "error"


def test_an_answer_is_scored_by_its_citations() -> None:
    task = bench.TASKS_BY_NAME["ask_vat"]
    req = {"messages": [{"role": "system", "content": "a b"}, {"role": "user", "content": "c"}]}
    ex = [{"chat": True, "complete": True, "request": req, "prompt_tokens": 20}]
    cite = {
        "path": "shop/tax.py",
        "start_line": 8,
        "end_line": 9,
        "valid": True,
        "in_context": True,
    }
    off = {**cite, "path": "shop/cart.py", "start_line": 1, "end_line": 2}
    bad = {**cite, "start_line": 90, "end_line": 90, "valid": False, "in_context": False}

    def score(cites: list[dict[str, Any]], text: str = "DEFAULT_VAT, 0.21") -> dict[str, Any]:
        out = json.dumps({"answer": text, "citations": cites, "context": {"used_tokens": 5}})
        return bench.score_ask(task, ex, exit_code=0, stdout=out, stderr="", wall_s=3.0, count=len)

    row = score([cite, bad])
    assert row["outcome"] == "correct" and row["mentions_expected"]
    assert row["citations"] == {
        "total": 2,
        "valid": 1,
        "invalid": 1,
        "in_context": 1,
        "on_target": 1,
    }
    # each message's text plus MESSAGE_OVERHEAD, as the agent estimates a prompt
    assert row["prompt_tokens"]["estimated"] == 3 + 1 + 2 * bench.MESSAGE_OVERHEAD
    assert score([off])["outcome"] == "off_target"
    assert score([bad])["outcome"] == "off_target"
    assert score([], "no idea")["outcome"] == "uncited"
    assert not score([], "no idea")["mentions_expected"]


def test_call_detection_is_independent_of_the_parser() -> None:
    assert bench.wrote_call('{"name": "edit", "arguments": {}}', TOOLS)
    assert bench.wrote_call("{'name': 'finish'}", TOOLS)
    assert bench.wrote_call("<tool_call>oops", TOOLS)
    assert not bench.wrote_call('{"name": "Alice", "age": 3}', TOOLS)
    assert not bench.wrote_call("Call finish when done.", TOOLS)


def test_exchanges_pair_with_model_calls_by_reply_text() -> None:
    calls = [{"content": "a"}, {"content": "b"}, {"content": "c"}]
    xs = [
        {"complete": True, "content": "a"},
        {"complete": False, "content": ""},
        {"complete": True, "content": "b"},
        {"complete": True, "content": "zzz"},
    ]
    assert bench.match_exchanges(calls, xs) == [xs[0], xs[2], None]


# -- whole runs through the CLI, the proxy and a scripted server ---------------------------------


@pytest.fixture
def args() -> argparse.Namespace:
    return argparse.Namespace(
        model="scripted-model",
        limit_steps=4,
        budget=5000,
        model_timeout=30,
        task_timeout=120,
        tool_format="auto",
        ask_budget=1500,
        answer_tokens=200,
    )


@pytest.fixture(scope="module")
def indexed_shop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("e2e") / "shop"
    bench.write_repo(root, bench.REPOS["shop"], embed_model="hashing")
    bench.build_index(root, "hashing", bench.cli_env())
    return root


@pytest.fixture
def shop(indexed_shop: Path) -> Iterator[Path]:
    """The indexed shop repository, its files put back after each test (one index build)."""
    yield indexed_shop
    for rel, text in bench.REPOS["shop"].items():
        (indexed_shop / rel).write_text(text, encoding="utf-8")


@pytest.mark.slow  # whole CLI runs (index build, agent/ask): ~6 s each
def test_an_agent_run_through_the_cli_is_scored_from_its_trace(
    shop: Path, args: argparse.Namespace
) -> None:
    task = bench.TASKS_BY_NAME["fix_bug"]
    ((_, old, new),) = task.fix
    edit = {"path": "shop/cart.py", "old_text": old, "new_text": new}
    replies = [
        json.dumps(
            {"steps": [{"title": "Fix apply_coupon", "done_when": "tests pass", "check": None}]}
        ),
        "<tool_call>" + json.dumps({"name": "edit", "arguments": edit}) + "</tool_call>",
        "```json\n"
        + json.dumps(
            {
                "name": "finish",
                "arguments": {"summary": "apply_coupon now divides the percentage by 100."},
            }
        )
        + "\n```",
    ]
    with ScriptedServer(replies) as server, bench.RecordingProxy(server.url) as proxy:
        row = bench.run_agent_task(task, shop, proxy, args)
    assert row["outcome"] == "solved", row
    assert (row["status"], row["reason"], row["exit_code"]) == ("done", "finished", 0)
    assert row["steps"] == 2 and row["model_calls"] == 3
    assert row["calls"] == {"native": 0, "tag": 1, "fenced": 1, "json": 0}
    assert row["invalid_calls"] == 0 and row["calls_missed"] == 0
    assert row["finish_called"] and not row["completed_without_finish"]
    assert row["changed"] == ["shop/cart.py"] and row["check"]["tests_passed"]
    assert row["prompt_tokens"]["calls_compared"] == 3 and row["exchanges_unmatched"] == 0
    assert row["prompt_tokens"]["reported"] == 3 * PROMPT_TOKENS
    assert row["requests"] == 3 and row["overlaps"] == 0 and not row["crash"]
    assert server.probes == 3


@pytest.mark.slow  # whole CLI runs (index build, agent/ask): ~6 s each
def test_a_question_through_the_cli_is_scored_by_its_citations(
    shop: Path, args: argparse.Namespace
) -> None:
    task = bench.TASKS_BY_NAME["ask_vat"]
    answer = "Countries not in VAT_RATES pay DEFAULT_VAT (0.21): see shop/tax.py:7-9."
    with ScriptedServer([answer]) as server, bench.RecordingProxy(server.url) as proxy:
        row = bench.run_ask_task(task, shop, proxy, args, count=len)
    assert row["outcome"] == "correct", row
    assert row["citations"]["on_target"] == 1 and row["citations"]["invalid"] == 0
    assert row["prompt_tokens"]["reported"] == PROMPT_TOKENS and row["requests"] == 1
    assert not row["crash"] and row["exit_code"] == 0
