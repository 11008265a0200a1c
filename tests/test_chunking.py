"""Chunk coverage and size properties on real files of every language."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.parse.chunking import chunk_file
from indexer.parse.languages import language_for_path
from indexer.parse.parser import parse_source

FIXTURES = Path(__file__).parent / "fixtures" / "languages"
STDLIB = Path(os.__file__).parent
REAL_FILES = sorted(p for p in FIXTURES.rglob("*") if p.is_file() and language_for_path(p.name)) + [
    STDLIB / "json" / "decoder.py",
    STDLIB / "argparse.py",
    STDLIB / "email" / "message.py",
]


def count(texts):
    """A deterministic stand-in for a model tokenizer: 1 token per word piece, +2 specials."""
    return [len(t.replace("(", " ( ").replace(".", " . ").split()) + 2 for t in texts]


@pytest.fixture(scope="module")
def parsed():
    out = {}
    for p in REAL_FILES:
        data = p.read_bytes()
        lang = language_for_path(p.name)
        out[p] = (data.decode("utf-8"), parse_source(p.name, data, lang, p.stem))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(index=st.integers(0, len(REAL_FILES) - 1), max_tokens=st.integers(40, 600))
def test_chunks_cover_file_without_overlap_and_fit(parsed, index, max_tokens):
    path = REAL_FILES[index]
    text, pf = parsed[path]
    lines = text.splitlines()
    chunks = chunk_file(path.name, text, pf, count, max_tokens)
    assert chunks[0].start_line == 1 and chunks[-1].end_line == len(lines)
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b.start_line == a.end_line + 1  # contiguous: no gap, no overlap
    for c in chunks:
        assert c.text == "\n".join(lines[c.start_line - 1 : c.end_line])  # whole lines only
        over_budget = c.tokens > max_tokens
        # Only a piece that cannot be cut (one line, or no statement start inside) may exceed.
        if over_budget:
            assert c.start_line == c.end_line or c.kind in ("part", "definition")
        if c.symbol:
            assert c.symbol in {d.qualname for d in pf.definitions}
            assert c.header.startswith(path.name + " | " + c.symbol)


def test_large_definitions_split_at_children_and_small_siblings_merge(parsed):
    text, pf = parsed[STDLIB / "json" / "decoder.py"]
    chunks = chunk_file("json/decoder.py", text, pf, count, 256)
    spans = {d.qualname: (d.span.start_line, d.span.end_line) for d in pf.definitions}
    # JSONDecoder does not fit: its too-large __init__ is cut into parts of its own ...
    init = [c for c in chunks if c.symbol == "JSONDecoder.__init__"]
    assert len(init) > 1 and all(c.kind == "part" for c in init)
    start, end = spans["JSONDecoder.__init__"]
    assert init[0].start_line == start and end <= init[-1].end_line <= end + 2  # + blank lines
    # ... while its two small methods share one chunk, labelled with the class
    both = [c for c in chunks if c.start_line <= spans["JSONDecoder.decode"][0]
            and c.end_line >= spans["JSONDecoder.raw_decode"][1]]
    assert len(both) == 1 and both[0].symbol == "JSONDecoder" and both[0].kind == "group"
    # with a budget larger than the file, one chunk
    assert len(chunk_file("json/decoder.py", text, pf, count, 100_000)) == 1


BIG = "def helper(x):\n" + "".join(f"    x = x + {i}  # step number {i}\n" for i in range(12)) + "    return x\n"
OTHER = "def other(y):\n" + "".join(f"    y = y * {i}  # scale factor {i}\n" for i in range(12)) + "    return y\n"


def test_moved_code_keeps_its_content_hash():
    a_src = BIG + "\n\n" + OTHER
    b_src = "import os\n\n\n" + OTHER + "\n\n" + BIG
    a = parse_source("a.py", a_src.encode(), "python", "a")
    b = parse_source("pkg/b.py", b_src.encode(), "python", "pkg.b")
    ca = {c.symbol: c for c in chunk_file("a.py", a_src, a, count, 140)}
    cb = {c.symbol: c for c in chunk_file("pkg/b.py", b_src, b, count, 140)}
    assert ca["helper"].kind == cb["helper"].kind == "definition"
    assert ca["helper"].content_hash == cb["helper"].content_hash
    assert ca["helper"].header == "a.py | helper" and cb["helper"].header == "pkg/b.py | helper"
    assert ca["helper"].content_hash != ca["other"].content_hash


def test_a_long_section_is_cut_into_even_pieces_and_code_greedily():
    # 25 paragraphs of 12 tokens and a budget of 100: greedy windows take 8 each and leave a
    # 1-3 line tail; prose is cut evenly (~6-7 each), code keeps its greedy cuts
    lines = [f"word{i} value compute ( value , {i} , {i} ) plus one" for i in range(25)]
    md = "# Guide\n" + "\n".join(lines) + "\n"
    pf = parse_source("guide.md", md.encode(), "markdown", "guide")
    parts = [c for c in chunk_file("guide.md", md, pf, count, 100 + 2 + 24) if c.symbol == "Guide"]
    total = sum(count([ln])[0] - 2 for ln in md.splitlines())
    assert len(parts) == -(-total // 100)  # no more pieces than the budget needs
    sizes = [c.end_line - c.start_line + 1 for c in parts]
    assert max(sizes) - min(sizes) <= 1, sizes
    assert all(c.tokens <= 100 + 2 + 24 for c in parts)

    body = "".join(f"    value = compute ( value , {i} , {i} ) + 1\n" for i in range(25))
    src = "def long_function(value):\n" + body + "    return value\n"
    code = parse_source("long.py", src.encode(), "python", "long")
    sizes = [c.end_line - c.start_line + 1 for c in chunk_file("long.py", src, code, count, 126)]
    assert sizes[-1] <= 2 < min(sizes[:-1]), sizes  # full windows, the rest last: as before
