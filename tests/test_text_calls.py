"""Tool calls written in a reply's text, in every form models emit them (agent/models/text_calls)."""

from __future__ import annotations

import pytest

from agent.models import ToolCall, parse_text_calls, prose
from agent.models.text_calls import tools_prompt
from agent.tools import default_registry

NAMES = {"read_span", "list_dir", "run_tests", "finish", "edit"}


def calls(text: str) -> list[tuple[str, dict | None]]:
    return [(c.name, c.arguments) for c in parse_text_calls(text, names=NAMES).calls]


# Shapes copied from what llama-cpp-python 0.3.36 + Qwen2.5-Coder wrote in `content` with
# `tools` in the request and no `tool_choice` (tool_calls empty, finish_reason "stop").
FENCED = (
    '```json\n{"name": "read_span", "arguments": {"path": "pkg/calc.py", "start_line": 1}}\n```'
)
BARE = '{"name": "list_dir", "arguments": {"path": "pkg"}}'
TAGGED = '<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call>'


@pytest.mark.parametrize(
    ("text", "expected", "form"),
    [
        (FENCED, [("read_span", {"path": "pkg/calc.py", "start_line": 1})], "fenced"),
        (BARE, [("list_dir", {"path": "pkg"})], "json"),
        (TAGGED, [("run_tests", {})], "tag"),
        # `parameters` (Llama 3 style) instead of `arguments`
        (
            '{"name": "list_dir", "parameters": {"path": "."}}',
            [("list_dir", {"path": "."})],
            "json",
        ),
        # arguments as a JSON string, as on the wire
        (
            '{"name": "finish", "arguments": "{\\"summary\\": \\"done\\"}"}',
            [("finish", {"summary": "done"})],
            "json",
        ),
        # the OpenAI wire shape, and a tool without arguments given by name alone
        (
            '{"type": "function", "function": {"name": "list_dir", "arguments": {"path": "a"}}}',
            [("list_dir", {"path": "a"})],
            "json",
        ),
        ('<tool_call>{"name": "run_tests"}</tool_call>', [("run_tests", {})], "tag"),
        # an unclosed tag (the server stopped at the end token), braces inside strings
        (
            '<tool_call>\n{"name": "finish", "arguments": {"summary": "fixed {x} and }"}}',
            [("finish", {"summary": "fixed {x} and }"})],
            "tag",
        ),
        # seen from Qwen2.5-Coder-1.5B (tests/recordings): doubled braces, a `<tools>` wrapper
        (
            '{{"name": "find_symbol", "arguments": {"name": "add"}}}}',
            [("find_symbol", {"name": "add"})],
            "json",
        ),
        (
            '<tools>\n  {"type": "function", "function": {"name": "read_span", '
            '"arguments": {"path": "a.py"}}}\n</tools>',
            [("read_span", {"path": "a.py"})],
            "json",
        ),
        # Llama's python tag, Mistral's marker with a list
        ('<|python_tag|>{"name": "run_tests", "parameters": {}}', [("run_tests", {})], "json"),
        (
            '[TOOL_CALLS][{"name": "list_dir", "arguments": {"path": "x"}}]',
            [("list_dir", {"path": "x"})],
            "json",
        ),
    ],
)
def test_each_form_is_read(text: str, expected: list, form: str) -> None:
    parsed = parse_text_calls(text, names=NAMES)
    assert [(c.name, c.arguments) for c in parsed.calls] == expected
    assert parsed.form == form and parsed.malformed == "" and parsed.text == ""
    assert all(c.error is None for c in parsed.calls)


def test_several_calls_in_one_reply_keep_their_order_and_the_prose() -> None:
    text = (
        "I will look at the code first.\n\n"
        + TAGGED.replace("run_tests", "list_dir").replace("{}", '{"path": "pkg"}')
        + "\n"
        + FENCED
        + "\nThen "
        + BARE
        + " and finally:\n"
        + '[{"name": "run_tests", "arguments": {}}, {"name": "finish", "arguments": {"summary": "ok"}}]'
    )
    parsed = parse_text_calls(text, names=NAMES, id_prefix="text_3")
    assert [c.name for c in parsed.calls] == [
        "list_dir",
        "read_span",
        "list_dir",
        "run_tests",
        "finish",
    ]
    assert [c.id for c in parsed.calls] == [f"text_3_{i}" for i in range(5)]
    assert parsed.text == "I will look at the code first.\n\nThen  and finally:"
    assert "<tool_call>" not in parsed.text and "```" not in parsed.text


def test_raw_arguments_are_kept_and_bad_arguments_are_reported_per_call() -> None:
    parsed = parse_text_calls(
        '{"name": "read_span", "arguments": {"path": "a.py"}}\n'
        '{"name": "read_span", "arguments": [1, 2]}',
        names=NAMES,
    )
    good, bad = parsed.calls
    assert good == ToolCall("text_call_0", "read_span", {"path": "a.py"}, '{"path": "a.py"}')
    # Read as a call, so the registry explains the arguments (bad_arguments), not dropped.
    assert bad.arguments is None and "JSON object" in (bad.error or "")


@pytest.mark.parametrize(
    "text",
    [
        "The bug is in `add`: it returns a - b. Use {a + b} instead.",
        '{"steps": [{"title": "Find the bug"}]}',  # a plan, not a call
        '{"name": "Alice", "age": 3}',  # data with a name
        '{"name": "unknown_thing"}',  # a bare name that is no tool
        "def f():\n    return {'a': 1}\n",
        "",
    ],
)
def test_text_that_is_no_call_is_left_alone(text: str) -> None:
    parsed = parse_text_calls(text, names=NAMES)
    assert parsed.calls == () and parsed.malformed == "" and parsed.form == ""
    assert parsed.text == text.strip()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        # a missing closing brace, in tags (the correction names the JSON error and the place)
        (
            '<tool_call>\n{"name": "edit", "arguments": {"path": "a.py", "old_text": "x"}\n</tool_call>',
            "Expecting ',' delimiter",
        ),
        # a trailing comma, fenced
        (
            '```json\n{"name": "read_span", "arguments": {"path": "a.py",}}\n```',
            "Expecting property name enclosed in double quotes",
        ),
        # a Python dict instead of JSON
        ("{'name': 'read_span', 'arguments': {'path': 'a.py'}}", "double quotes"),
        # a tag holding no JSON at all
        ("<tool_call>read_span path=a.py</tool_call>", "does not start with a JSON object"),
    ],
)
def test_malformed_calls_get_a_specific_correction(text: str, why: str) -> None:
    parsed = parse_text_calls(text, names=NAMES)
    assert parsed.calls == ()
    assert parsed.malformed.startswith(
        "Your reply looks like a tool call, but it could not be read"
    )
    assert why in parsed.malformed
    assert "Nothing was run" in parsed.malformed
    # The model's own call is quoted back (clipped), never a made-up example it could copy.
    wrote = parsed.malformed.split("You wrote: ", 1)[1]
    assert "a.py" in wrote and "src/app.py" not in parsed.malformed
    # ... and a summary shows none of it.
    assert prose(text, NAMES) == ""


def test_a_good_call_beside_a_broken_one_runs_and_the_broken_one_is_reported() -> None:
    text = BARE + '\n<tool_call>{"name": "run_tests", "arguments": {</tool_call>'
    parsed = parse_text_calls(text, names=NAMES)
    assert [c.name for c in parsed.calls] == ["list_dir"]
    assert "could not be read" in parsed.malformed


def test_prose_removes_calls_and_keeps_the_words() -> None:
    text = "Fixed the sign in add.\n" + FENCED
    assert prose(text, NAMES) == "Fixed the sign in add."
    assert prose("All done, nothing else to do.") == "All done, nothing else to do."


def test_tools_prompt_describes_every_tool_for_text_mode() -> None:
    specs = default_registry().specs()
    text = tools_prompt(specs)
    assert text.count('{"type": "function", "function": {"name": ') == len(specs)
    assert "<tool_call>" in text and '"arguments": <args-json-object>' in text


def test_keys_written_beside_the_arguments_are_arguments():
    """Qwen2.5-Coder 1.5B writes `reason` next to `arguments`: it is kept (the schema check
    still judges it), and the arguments' own value wins on a clash."""
    text = '{"name": "update_plan", "arguments": {"complete": true, "reason": "a"}, "reason": "b", "steps": []}'
    (call,) = parse_text_calls(text, names={"update_plan"}).calls
    assert call.arguments == {"complete": True, "reason": "a", "steps": []}
    (call,) = parse_text_calls(
        '{"name": "update_plan", "arguments": {"complete": true}, "reason": "x"}',
        names={"update_plan"},
    ).calls
    assert call.arguments == {"complete": True, "reason": "x"}
