"""`ask` reads the citations small models write in prose and checks them like `path:line`.

A real index of a small shop package; the answers are the shapes Qwen2.5-Coder-1.5B and its
kind write ("line 34 of shop/discount.py", "the `apply_coupon` function (shop/cart.py)"), and
prose that only looks like a place ("Python 3.11", "version 2.5 of the API", "e.g.").
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from agent.ask import ask, verify_citations
from agent.models import ScriptedModel
from cli.main import cli
from indexer import Index
from tests.conftest import index, make_repo

SHOP = {
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
    "shop/cart.py": '''
        """Shopping cart."""
        from shop.discount import apply_discount


        class Cart:
            """Items, a coupon, and the total."""

            def __init__(self):
                self.items = []
                self.coupon = None

            def add(self, name: str, price: float, qty: int = 1) -> None:
                self.items.append((name, price, qty))

            def subtotal(self) -> float:
                return sum(price * qty for _, price, qty in self.items)

            def apply_coupon(self, code: str) -> None:
                """Remember a coupon code for the total."""
                self.coupon = code

            def total(self) -> float:
                return apply_discount(self.subtotal(), self.coupon or "")
        ''',
    "README.md": "# shop\n\nA toy shop. Needs Python 3.11.\n",
}


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    root = make_repo(tmp_path_factory.mktemp("cite") / "shop", SHOP)
    cfg = index(root)
    idx = Index.open(cfg)
    pack = ask(idx, "apply a coupon discount", budget_tokens=3000, tokenizer="minilm").pack
    yield root, idx, pack
    idx.close()


def lines_of(root, path: str, needle: str) -> int:
    return next(
        n for n, line in enumerate((root / path).read_text().splitlines(), 1) if needle in line
    )


def span_of(root, path: str, name: str) -> tuple[int, int]:
    """The lines of method or function ``name`` as its definition and body run."""
    text = (root / path).read_text().splitlines()
    start = next(n for n, line in enumerate(text, 1) if f"def {name}(" in line)
    indent = len(text[start - 1]) - len(text[start - 1].lstrip())
    end = start
    for n in range(start + 1, len(text) + 1):
        line = text[n - 1]
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        if line.strip():
            end = n
    return start, end


# (text, [(path, start, end, valid)]); shop/discount.py has 13 lines, shop/cart.py 23, and
# `apply_coupon` is lines 18-20 (checked by test_the_line_numbers_above_are_the_files).
POSITIVE = [
    (
        "The percentage is looked up on line 7 of shop/discount.py.",
        [("shop/discount.py", 7, 7, True)],
    ),
    ("See line 7 of `shop/discount.py`.", [("shop/discount.py", 7, 7, True)]),
    ("Line 12 in shop/discount.py rounds the amount.", [("shop/discount.py", 12, 12, True)]),
    ("It is in `shop/discount.py` at line 12.", [("shop/discount.py", 12, 12, True)]),
    ("It rounds in shop/discount.py (line 12).", [("shop/discount.py", 12, 12, True)]),
    ("shop/discount.py, lines 6-8, holds the lookup.", [("shop/discount.py", 6, 8, True)]),
    ("Look at lines 6 to 8 in shop/discount.py", [("shop/discount.py", 6, 8, True)]),
    ("lines 6 through 8 of the file shop/discount.py", [("shop/discount.py", 6, 8, True)]),
    ("L17 in shop/cart.py stores it.", [("shop/cart.py", 17, 17, True)]),
    ("L6-L8 in shop/discount.py", [("shop/discount.py", 6, 8, True)]),
    ("See shop/cart.py L17.", [("shop/cart.py", 17, 17, True)]),
    ("shop/cart.py on line #17", [("shop/cart.py", 17, 17, True)]),
    ("line 7 of discount.py (the only discount.py)", [("shop/discount.py", 7, 7, True)]),
    ("File: shop/discount.py, Line: 8", [("shop/discount.py", 8, 8, True)]),
    ("(shop/discount.py: lines 6-8)", [("shop/discount.py", 6, 8, True)]),
    ("In the file `shop/discount.py`, on lines 11 – 13:", [("shop/discount.py", 11, 13, True)]),
    ("lines 18-20 of the `apply_coupon` method in shop/cart.py", [("shop/cart.py", 18, 20, True)]),
    # past the end of the file, or a file that does not exist: flagged, not dropped
    ("line 400 of shop/discount.py", [("shop/discount.py", 400, 400, False)]),
    ("lines 3 to 90 in `shop/cart.py`", [("shop/cart.py", 3, 90, False)]),
    ("line 3 of shop/coupons.py", [("shop/coupons.py", 3, 3, False)]),
    (
        "L2 in shop/discount.py and shop/discount.py:6",
        [("shop/discount.py", 2, 2, True), ("shop/discount.py", 6, 6, True)],
    ),
]


@pytest.mark.parametrize("text,expected", POSITIVE, ids=[t for t, _ in POSITIVE])
def test_prose_line_citations_are_read_and_checked(shop, text, expected):
    root, idx, pack = shop
    got = [
        (c.path, c.start_line, c.end_line, c.valid)
        for c in verify_citations(text, root, pack, idx)
    ]
    assert got == expected


def test_the_line_numbers_above_are_the_files(shop):
    root, _, _ = shop
    assert lines_of(root, "shop/discount.py", "return CODES.get") == 8
    assert lines_of(root, "shop/discount.py", "return round(") == 13
    assert span_of(root, "shop/cart.py", "apply_coupon") == (18, 20)
    assert len((root / "shop/discount.py").read_text().splitlines()) == 13
    assert len((root / "shop/cart.py").read_text().splitlines()) == 23


SYMBOLS = [
    "`apply_coupon` in shop/cart.py",
    "the `apply_coupon` function (shop/cart.py)",
    "the `apply_coupon` method in `shop/cart.py`",
    "`apply_coupon()` is defined in shop/cart.py",
    "apply_coupon() in shop/cart.py",
    "the method `apply_coupon` of shop/cart.py",
    "the apply_coupon method in shop/cart.py",
    "`Cart.apply_coupon` (cart.py)",
    "`apply_coupon`, in shop/cart.py",
]


@pytest.mark.parametrize("text", SYMBOLS)
def test_a_definition_cited_with_its_file_is_resolved_through_the_index(shop, text):
    root, idx, pack = shop
    (c,) = verify_citations(f"The coupon is kept by {text}, then used.", root, pack, idx)
    start, end = span_of(root, "shop/cart.py", "apply_coupon")
    assert (c.path, c.start_line, c.end_line, c.symbol) == (
        "shop/cart.py",
        start,
        end,
        text.split("`")[1].removesuffix("()") if "`" in text else "apply_coupon",
    )
    assert c.valid and c.in_context and not c.problem


@pytest.mark.parametrize(
    "text,problem",
    [
        ("`apply_coupons` in shop/cart.py", "`apply_coupons` is not in shop/cart.py"),
        ("the `redeem` function (shop/discount.py)", "`redeem` is not in shop/discount.py"),
        ("`apply_coupon` in shop/coupons.py", "no such file in the repository"),
        ("redeem() in shop/cart.py", "`redeem` is not in shop/cart.py"),
    ],
)
def test_a_definition_the_file_lacks_is_flagged(shop, text, problem):
    root, idx, pack = shop
    (c,) = verify_citations(text, root, pack, idx)
    assert not c.valid and c.problem == problem


NOT_CITATIONS = [
    "It needs Python 3.11.",
    "This is version 2.5 of the API.",
    "Use a code, e.g. SAVE10, for a discount.",
    "e.g. line 5 of the docstring",
    "line 3 of the output shows it",
    "Since version 3.11 line 2, in shop/cart.py, is new.",
    "lines 3 to 9 of the loop",
    "L34 in the loop",
    "A helper function in shop/cart.py does it.",  # a word, not a definition's name
    "the `items` list in shop/cart.py",  # a name the file uses, not a definition
    "`apply_discount` is imported in shop/cart.py",  # prose between the name and "in"
    "version 2.5 of shop.toml",
    "see section 4.2 in the README",
    "the v1.x line 5 in e.g",
    "line 5, in a file",
    "the class in shop/cart.py",
]


@pytest.mark.parametrize("text", NOT_CITATIONS)
def test_prose_that_is_not_a_citation_is_left_alone(shop, text):
    root, idx, pack = shop
    assert verify_citations(text, root, pack, idx) == ()


def test_an_answer_in_prose_is_checked_end_to_end(shop):
    """A scripted answer as a 1.5B model writes it: every place it names is checked, the
    invented one is flagged, and the CLI marks them."""
    root, idx, _ = shop
    text = (
        "The discount is computed by `apply_discount` in shop/discount.py, which looks the "
        "code up on line 8 of shop/discount.py. The coupon is stored by the `apply_coupon` "
        "method (shop/cart.py). Rounding happens at line 40 of shop/discount.py."
    )
    answer = ask(
        idx,
        "How is a coupon applied?",
        model=ScriptedModel([text]),
        budget_tokens=3000,
        tokenizer="minilm",
    )
    got = {(c.path, c.start_line, c.end_line, c.valid, c.symbol) for c in answer.citations}
    assert got == {
        ("shop/discount.py", 11, 13, True, "apply_discount"),
        ("shop/discount.py", 8, 8, True, ""),
        ("shop/cart.py", 18, 20, True, "apply_coupon"),
        ("shop/discount.py", 40, 40, False, ""),
    }
    assert [c.problem for c in answer.invalid_citations] == [
        "line 40 is past the end of the file (13 lines)"
    ]


def test_cli_marks_prose_citations(shop, tmp_path):
    root, _, _ = shop
    script = tmp_path / "a.json"
    script.write_text(
        json.dumps(
            ["It is kept by the `apply_coupon` method (shop/cart.py); see line 99 of shop/cart.py."]
        )
    )
    res = CliRunner().invoke(
        cli,
        [
            "ask",
            "How is a coupon kept?",
            "-C",
            str(root),
            "-b",
            "3000",
            "--tokenizer",
            "minilm",
            "--model",
            f"scripted:{script}",
        ],
        catch_exceptions=False,
        env={"REPOCTX_MODEL": ""},
    )
    assert res.exit_code == 0, res.output
    assert "✓ shop/cart.py:18-20  verified" in res.stdout
    assert "✗ shop/cart.py:99  INVALID — line 99 is past the end of the file" in res.stdout
    assert "1 cited location(s) do not exist" in res.stderr
