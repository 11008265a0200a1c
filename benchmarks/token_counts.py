"""How far each token counter is from a model's own, and how close the prompt estimates come to
what the server reports.

1. ``texts``: this repository's Python files, plain and line-numbered as a context pack shows
   them (``{n:>w}| line``), plus real context packs from the repository's index when it has one,
   counted by the server's tokenize endpoint and by every offline counter (qwen3, llama3,
   o200k, cl100k, minilm, and Mistral's tekken and SentencePiece v3 when mistral-common is
   importable, e.g. ``pip install --target /tmp/mc mistral-common sentencepiece`` and
   ``PYTHONPATH=/tmp/mc``): totals, factors over o200k (the FAMILIES table of
   agent/models/prompt_tokens.py), and the per-text spread.
2. ``prompts`` (with ``--base-url``): real requests — `ask` prompts, the agent's plan prompt,
   agent steps with every tool schema, tool calls and results, the text tool format — sent with
   ``max_tokens: 1`` and not streamed, so the server reports ``usage.prompt_tokens``; each
   compared with the estimate of the family table (offline) and of the server counter.
   ``--record FILE`` writes those requests and usages for tests/test_model_tokens.py.
3. ``endpoint``: milliseconds per tokenize request.

    PID=$(../shared/tools/local-llm/start.sh 0.5b 8093)
    .venv/bin/python benchmarks/token_counts.py --base-url http://127.0.0.1:8093/v1 \\
        --model qwen2.5-coder-0.5b --record tests/recordings/token-counts-qwen2.5-coder.json
    kill $PID

Prints one JSON object to stdout, progress to stderr. A 0.5B model on one thread reads ~50
prompt tokens/s, so part 2 takes several minutes; ``--no-prompts`` skips it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _common import REPO, log

from agent.ask import SYSTEM_PROMPT as ASK_SYSTEM
from agent.memory import REMEMBER
from agent.models import Message, OpenAIClient, ToolCall
from agent.models.openai import to_wire_message, to_wire_tool
from agent.models.prompt_tokens import model_tokenizer
from agent.models.text_calls import tools_prompt
from agent.plan import PLAN_PROMPT, UPDATE_PLAN
from agent.prompts import SYSTEM_PROMPT as AGENT_SYSTEM
from agent.tools import default_registry
from retrieval.tokens import get_tokenizer

FORMAT = 1
COUNTERS = ("qwen3", "llama3", "o200k", "cl100k", "minilm")
SOURCES = ("agent", "retrieval", "indexer", "cli")


def numbered(text: str, start: int = 1) -> str:
    lines = text.splitlines()
    width = len(str(start + len(lines) - 1))
    return "\n".join(f"{start + i:>{width}}| {line}" for i, line in enumerate(lines))


def corpus(limit: int) -> list[tuple[str, str, str]]:
    """(kind, name, text): every file plain and line-numbered, then context packs."""
    files = sorted(p for d in SOURCES for p in (REPO / d).rglob("*.py"))[:limit]
    out: list[tuple[str, str, str]] = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        if not text.strip():
            continue
        rel = str(path.relative_to(REPO))
        out += [("plain", rel, text), ("numbered", rel, numbered(text))]
    return out + packs()


PACK_TASKS = (
    "how does the agent shrink the prompt after a context overflow",
    "where are tool calls written as text parsed",
    "how is the retry budget shared between the adapter and the loop",
    "which files does the secret scanner skip",
    "how are citations in an answer checked",
    "how does the index decide a file needs parsing again",
)


def packs() -> list[tuple[str, str, str]]:
    """Context packs for a few tasks, from the repository's own index (none without one)."""
    from cli.settings import load_config
    from indexer import Index
    from retrieval.context import PackPolicy, assemble_context

    config = load_config(REPO)
    if not config.db_path.exists():
        log("no index at .repoctx: no context packs (run `repoctx index build` for them)")
        return []
    policy = replace(PackPolicy(), line_numbers=True)
    out = []
    with Index.open(config) as index:
        for task in PACK_TASKS:
            pack = assemble_context(index, task, 1500, tokenizer="o200k", policy=policy)
            out.append(("pack", task, pack.render()))
    return out


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def mistral_counters() -> dict[str, Any]:
    """Mistral's tokenizers from mistral-common (not a dependency: measured when importable)."""
    try:
        from mistral_common.tokens.tokenizers.sentencepiece import SentencePieceTokenizer
        from mistral_common.tokens.tokenizers.tekken import Tekkenizer
    except ImportError:
        return {}
    import mistral_common

    data = Path(mistral_common.__file__).parent / "data"
    out: dict[str, Any] = {}
    tekken = Tekkenizer.from_file(str(data / "tekken_240911.json"))
    out["mistral_tekken"] = lambda t: len(tekken.encode(t, bos=False, eos=False))
    try:
        sp = SentencePieceTokenizer(str(data / "mistral_instruct_tokenizer_240323.model.v3"))
        out["mistral_sp_v3"] = lambda t: len(sp.encode(t, bos=False, eos=False))
    except ImportError:  # sentencepiece missing
        pass
    return out


def texts_part(items: list[tuple[str, str, str]], client: OpenAIClient | None) -> dict[str, Any]:
    counters: dict[str, Any] = {name: get_tokenizer(name).count for name in COUNTERS}
    counters.update(mistral_counters())
    names = list(counters)
    counts: dict[str, list[int]] = {name: [] for name in names}
    server: list[int] = []
    started = time.perf_counter()
    for _, _, text in items:
        for name, count in counters.items():
            counts[name].append(count(text))
        if client is not None:
            n = client.count_tokens(text)
            if n is None:
                raise SystemExit(f"{client.base_url}: no tokenize endpoint answered")
            server.append(n)
    log(f"counted {len(items)} texts in {time.perf_counter() - started:.1f}s")
    out: dict[str, Any] = {}
    for kind in ("plain", "numbered", "pack", "all"):
        idx = [i for i, (k, _, _) in enumerate(items) if kind in ("all", k)]
        if not idx:
            continue
        totals = {name: sum(counts[name][i] for i in idx) for name in names}
        row: dict[str, Any] = {"texts": len(idx), "totals": totals}
        row["over_o200k"] = {n: round(t / totals["o200k"], 4) for n, t in totals.items()}
        if server:
            s_total = sum(server[i] for i in idx)
            totals["server"] = s_total
            row["server_over_o200k"] = round(s_total / totals["o200k"], 4)
            row["over_server"] = {n: round(totals[n] / s_total, 4) for n in names}
            ratios = [server[i] / max(1, counts["o200k"][i]) for i in idx]
            row["server_over_o200k_per_text"] = {
                "p5": round(percentile(ratios, 0.05), 4),
                "p50": round(percentile(ratios, 0.5), 4),
                "p95": round(percentile(ratios, 0.95), 4),
            }
            row["qwen3_equal_to_server"] = sum(counts["qwen3"][i] == server[i] for i in idx)
        out[kind] = row
    return out


def prompt_cases(items: list[tuple[str, str, str]]) -> list[tuple[str, list[Message], list]]:
    """Requests as `ask` and the agent send them (the same builders, real prompts)."""
    specs = [
        *default_registry().specs(frozenset({"read", "write", "execute"})),
        UPDATE_PLAN,
        REMEMBER,
    ]
    pack_texts = [t for k, _, t in items if k == "pack"] or [t for k, _, t in items][:3]
    small = [t for k, _, t in items if k == "numbered" and 800 < len(t) < 4000]
    code = pack_texts[0]
    task = "# Task\nFix the retry of a context overflow in `ask`.\n\n"
    call = ToolCall.from_raw("call_0", "read_span", {"path": "agent/ask.py", "start_line": 1})
    step = [
        Message.system(AGENT_SYSTEM),
        Message.user(f"{task}# Relevant code (retrieved for the current step)\n{small[0]}"),
    ]
    return [
        ("ask-1", [Message.system(ASK_SYSTEM), Message.user(f"{code}\n\nQuestion: where?")], []),
        (
            "ask-2",
            [
                Message.system(ASK_SYSTEM),
                Message.user(f"{pack_texts[-1]}\n\nQuestion: how are citations checked?"),
            ],
            [],
        ),
        ("plan", [Message.system(PLAN_PROMPT), Message.user(f"{task}{small[1]}")], []),
        ("step-tools", step, specs),
        (
            "step-tools-observation",
            [
                *step,
                Message.assistant("Reading it.", [call]),
                Message.tool("call_0", small[2][:3000], name="read_span"),
            ],
            specs,
        ),
        (
            "step-text-format",
            [Message.system(f"{AGENT_SYSTEM}\n\n{tools_prompt(specs)}"), step[1]],
            [],
        ),
    ]


def usage_of(base_url: str, request: dict[str, Any]) -> dict[str, Any]:
    data = json.dumps(request).encode()
    req = urllib.request.Request(
        f"{base_url.rstrip('/')}/chat/completions",
        data=data,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=1800) as resp:
        return json.loads(resp.read())["usage"]


def prompts_part(
    items: list[tuple[str, str, str]], client: OpenAIClient, model: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    table = model_tokenizer(client, probe=False)
    server = model_tokenizer(client, "server")
    rows, exchanges = {}, []
    for name, messages, tools in prompt_cases(items):
        request: dict[str, Any] = {
            "model": model,
            "messages": [to_wire_message(m) for m in messages],
            "max_tokens": 1,
            "temperature": 0,
        }
        if tools:
            request["tools"] = [to_wire_tool(t) for t in tools]
        t0 = time.perf_counter()
        usage = usage_of(client.base_url, request)
        seconds = time.perf_counter() - t0
        real = usage["prompt_tokens"]
        est_table = table.prompt_tokens(messages, tools)
        est_server = server.prompt_tokens(messages, tools)
        o200k = model_tokenizer(None, "o200k").prompt_tokens(messages, tools)
        rows[name] = {
            "server_prompt_tokens": real,
            "table_estimate": est_table,
            "table_error": round(est_table / real - 1, 4),
            "server_counter_estimate": est_server,
            "server_counter_error": round(est_server / real - 1, 4),
            "o200k_estimate": o200k,
            "o200k_error": round(o200k / real - 1, 4),
            "seconds": round(seconds, 1),
        }
        log(f"{name}: server {real}, table {est_table}, o200k {o200k} ({seconds:.0f}s)")
        exchanges.append({"name": name, "request": request, "usage": usage})
    errors = [abs(r["table_error"]) for r in rows.values()]
    summary = {
        "max_abs_table_error": round(max(errors), 4),
        "max_abs_server_counter_error": round(
            max(abs(r["server_counter_error"]) for r in rows.values()), 4
        ),
        "max_abs_o200k_error": round(max(abs(r["o200k_error"]) for r in rows.values()), 4),
        "table": table.describe(),
        "server_counter": server.describe(),
    }
    return {"cases": rows, "summary": summary}, exchanges


def endpoint_part(client: OpenAIClient, items: list[tuple[str, str, str]]) -> dict[str, Any]:
    texts = [t for _, _, t in items[:60]]
    t0 = time.perf_counter()
    for text in texts:
        client.count_tokens(text)
    ms = (time.perf_counter() - t0) * 1000 / max(1, len(texts))
    chars = statistics.mean(len(t) for t in texts)
    return {"url": client.tokenize_url, "ms_per_text": round(ms, 2), "mean_chars": round(chars)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", help="OpenAI-compatible server with a tokenize endpoint")
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--files", type=int, default=400, help="most files to count")
    ap.add_argument("--no-prompts", action="store_true", help="skip the chat requests")
    ap.add_argument("--record", type=Path, help="write the prompt requests and usages here")
    args = ap.parse_args()
    items = corpus(args.files)
    client = None
    if args.base_url:
        client = OpenAIClient(args.model, base_url=args.base_url, name=f"openai:{args.model}")
    result: dict[str, Any] = {
        "format": FORMAT,
        "model": args.model if client else None,
        "texts": texts_part(items, client),
    }
    if client is not None:
        result["endpoint"] = endpoint_part(client, items)
        if not args.no_prompts:
            result["prompts"], exchanges = prompts_part(items, client, args.model)
            if args.record:
                args.record.write_text(
                    json.dumps(
                        {
                            "format": FORMAT,
                            "server": "llama-cpp-python 0.3.36 server, GGUF Jinja chat format",
                            "model": args.model,
                            "recorded": datetime.now(UTC).date().isoformat(),
                            "exchanges": exchanges,
                        },
                        indent=1,
                        ensure_ascii=False,
                    )
                    + "\n"
                )
                log(f"wrote {args.record}")
    json.dump(result, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
