"""benchmarks/hostile_untrusted.py and hostile_fuzz.py on a tiny scale, so the benchmark cannot
rot: three cases of different groups (a scripted agent run with a repository git config, an MCP
message, a config file) judged by their real effect, and 50 generated MCP messages plus 25
registry calls with every counter accounted for."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import hostile_untrusted  # noqa: E402

CASES = ["plain → agent run (end-of-run git diff --stat)", "MCP: empty object {}",
         "deeply nested config: nested arrays in .repoctx.toml"]


def run(only: str, fuzz_examples: int = 50) -> dict:
    ns = argparse.Namespace(src=None, only=only, cases=CASES, fuzz_examples=fuzz_examples,
                            big_mb=1, keep=False)
    out = hostile_untrusted.run(ns)
    json.dumps(out)  # what main() prints must be JSON
    return out


def test_catalogue_has_every_group_and_unique_names() -> None:
    cases = hostile_untrusted.catalogue()
    names = [c.name for c in cases]
    assert len(names) == len(set(names))
    assert {c.group for c in cases} == {"shadowing", "git config", "repo config", "undo",
                                        "namespaces", "links", "mcp", "damage", "names"}
    assert len(cases) >= 100


def test_three_cases_are_judged(tmp_path: Path) -> None:
    out = run("untrusted")
    items = out["untrusted"]["items"]
    assert [i["name"] for i in items] == CASES
    for item in items:
        # a harness failure would be "error": the case ran and its effect was judged
        assert item["outcome"] in ("attacked", "contained"), item
        assert item["evidence"]
        assert (item["effect"] is None) == (item["outcome"] == "contained")
    totals = out["untrusted"]["totals"]
    assert totals["cases"] == 3 and totals["attacked"] + totals["contained"] == 3
    assert out["imported"]["indexer"].startswith(str(BENCH.parent))


def test_fuzz_counts_every_message() -> None:
    out = run("fuzz")["fuzz"]
    mcp = out["mcp"]
    assert mcp["messages_sent"] == 50
    # every message is a request due a reply, an invalid message, or a notification
    kinds = mcp["sent_by_kind"]
    assert sum(kinds.values()) == 50
    assert mcp["invalid_messages"] == kinds.get("invalid", 0)
    assert mcp["requests_answered"] <= mcp["requests_expecting_reply"]
    assert mcp["requests_expecting_reply"] > 0
    unanswered = mcp["violations"].get("request unanswered", 0)
    assert mcp["requests_answered"] + unanswered == mcp["requests_expecting_reply"]
    for kind, examples in mcp["examples"].items():
        assert examples and mcp["violations"][kind] >= len(examples)
    assert out["registry"]["calls"] == 25
    assert out["totals"]["messages_sent"] == 50
