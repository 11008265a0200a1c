"""Tasks and fixture repositories of benchmarks/agent_e2e.py, as data: each repository is a
dict of path -> text, written and committed into a temp dir by the benchmark; each task says
what to ask, and how the benchmark judges the result (a known fix for its own tests, a check
run in the repository, the lines a right answer cites). The shop and report tasks are here;
`bugs`, `changes` and `vague` hold the rest, one small repository each."""

from __future__ import annotations

from benchmarks.e2e_tasks import bugs, changes, vague
from benchmarks.e2e_tasks.base import COMMON as _COMMON
from benchmarks.e2e_tasks.base import Task
from benchmarks.e2e_tasks.base import src as _src

__all__ = ["REPOS", "TASKS", "TASKS_BY_NAME", "Task"]

# -- fixture repositories ------------------------------------------------------------------------

SHOP = {
    **_COMMON,
    "README.md": _src(
        """
        # shop

        Cart totals for a small web shop: catalogue prices, coupons and VAT.

        ## Running the tests

            python -m pytest
        """
    ),
    "shop/__init__.py": "",
    "shop/pricing.py": _src(
        '''
        """Unit prices of the catalogue."""

        CATALOGUE = {"apple": 0.5, "bread": 2.25, "cheese": 7.8}


        class UnknownSku(KeyError):
            """The SKU is not in the catalogue."""


        def unit_price(sku):
            """Price of one unit of ``sku``; raises UnknownSku for a SKU not in the catalogue."""
            try:
                return CATALOGUE[sku]
            except KeyError:
                raise UnknownSku(sku) from None
        '''
    ),
    "shop/tax.py": _src(
        '''
        """VAT by country."""

        VAT_RATES = {"DE": 0.19, "FR": 0.20, "LU": 0.17}
        DEFAULT_VAT = 0.21


        def vat_rate(country):
            """The VAT rate of ``country`` (ISO code, any case); others pay DEFAULT_VAT."""
            return VAT_RATES.get(country.upper(), DEFAULT_VAT)


        def with_vat(amount, country):
            """``amount`` with the VAT of ``country`` added, rounded to cents."""
            return round(amount * (1 + vat_rate(country)), 2)
        '''
    ),
    "shop/cart.py": _src(
        '''
        """Cart totals: lines, coupons and VAT."""

        from shop.pricing import unit_price
        from shop.tax import with_vat


        def line_total(sku, qty):
            """Price of one cart line."""
            return unit_price(sku) * qty


        def apply_coupon(amount, percent):
            """``amount`` less a coupon of ``percent`` per cent (10 means 10 %)."""
            return amount - amount * percent


        def cart_total(lines, country, coupon_percent=0):
            """Total of ``lines`` ((sku, qty) pairs) after the coupon, with the VAT of ``country``."""
            subtotal = sum(line_total(sku, qty) for sku, qty in lines)
            if coupon_percent:
                subtotal = apply_coupon(subtotal, coupon_percent)
            return with_vat(subtotal, country)
        '''
    ),
    "tests/test_cart.py": _src(
        """
        from shop.cart import cart_total, line_total


        def test_line_total():
            assert line_total("bread", 2) == 4.5


        def test_total_without_coupon():
            assert cart_total([("cheese", 1)], "DE") == 9.28


        def test_total_with_coupon():
            assert cart_total([("bread", 4)], "FR", coupon_percent=10) == 9.72
        """
    ),
    "tests/test_tax.py": _src(
        """
        from shop.tax import vat_rate, with_vat


        def test_vat_rate():
            assert vat_rate("de") == 0.19
            assert vat_rate("XX") == 0.21


        def test_with_vat():
            assert with_vat(10, "LU") == 11.7
        """
    ),
}

REPORT = {
    **_COMMON,
    "README.md": "# report\n\nFormatting of invoice and report lines.\n\n"
    "## Running the tests\n\n    python -m pytest\n",
    "report/__init__.py": "",
    "report/format.py": _src(
        '''
        """Number formatting for reports."""


        def format_amount(value):
            """``value`` with two decimals and thousands separators: 1234.5 -> '1,234.50'."""
            return f"{value:,.2f}"
        '''
    ),
    "report/invoice.py": _src(
        '''
        """Invoice lines."""

        from report.format import format_amount


        def invoice_line(name, value):
            """One invoice line: the item's name and its formatted amount."""
            return f"{name}: {format_amount(value)}"
        '''
    ),
    "report/summary.py": _src(
        '''
        """Report totals."""

        from report.format import format_amount


        def summary_total(values):
            """The total line of a report."""
            return f"Total: {format_amount(sum(values))}"
        '''
    ),
    "tests/test_report.py": _src(
        """
        from report.format import format_amount
        from report.invoice import invoice_line
        from report.summary import summary_total


        def test_format_amount():
            assert format_amount(1234.5) == "1,234.50"


        def test_invoice_line():
            assert invoice_line("tea", 3) == "tea: 3.00"


        def test_summary_total():
            assert summary_total([1, 2.5]) == "Total: 3.50"
        """
    ),
}

REPOS: dict[str, dict[str, str]] = {
    "shop": SHOP,
    "report": REPORT,
    **bugs.REPOS,
    **changes.REPOS,
    **vague.REPOS,
}

#: Run in the repository after add_param: exit 0 when the parameter does what was asked.
VERIFY_CURRENCY = _src(
    """
    from report.format import format_amount
    from report.invoice import invoice_line
    from report.summary import summary_total

    assert format_amount(1234.5, currency="EUR") == "1,234.50 EUR", format_amount(1234.5, currency="EUR")
    assert format_amount(1234.5) == "1,234.50"
    assert invoice_line("tea", 3, currency="USD") == "tea: 3.00 USD", invoice_line("tea", 3, currency="USD")
    assert invoice_line("tea", 3) == "tea: 3.00"
    assert summary_total([1, 2.5], currency="GBP") == "Total: 3.50 GBP", summary_total([1, 2.5], currency="GBP")
    assert summary_total([1, 2.5]) == "Total: 3.50"
    """
)


TASKS: tuple[Task, ...] = (
    Task(
        "fix_bug",
        "agent",
        "shop",
        "tests/test_cart.py::test_total_with_coupon fails: with a 10 % coupon the cart total "
        "comes out negative. Fix the bug in the code (not the test).",
        fix=(
            (
                "shop/cart.py",
                "return amount - amount * percent\n",
                "return amount - amount * percent / 100\n",
            ),
        ),
        # The cart total the task is about, with coupons the tests do not use: a fix fitted to
        # the test's 10 % (a live run wrote `apply_coupon(subtotal, 0.10)`) is no fix. A fix
        # at the call site (`coupon_percent / 100`) passes: the totals are right, though
        # apply_coupon's docstring ("10 means 10 %") is then still not what it does.
        verify=(
            "from shop.cart import cart_total\n"
            "assert cart_total([('bread', 4)], 'DE', 100) == 0, cart_total([('bread', 4)], 'DE', 100)\n"
            "half, whole = cart_total([('bread', 4)], 'DE', 50), cart_total([('bread', 4)], 'DE')\n"
            "assert abs(half - whole / 2) <= 0.01, (half, whole)\n"
        ),
        keep=("tests/test_cart.py", "tests/test_tax.py"),
        files=("shop/cart.py",),
        category="bug",
    ),
    Task(
        "add_param",
        "agent",
        "report",
        "Add a parameter `currency` (default None) to `format_amount` in report/format.py: when "
        "it is given, the formatted amount is followed by a space and the currency code, so "
        'format_amount(1234.5, currency="EUR") returns "1,234.50 EUR". Add the same '
        "parameter to its two callers, `invoice_line` in report/invoice.py and `summary_total` "
        "in report/summary.py, and pass it through.",
        fix=(
            (
                "report/format.py",
                'def format_amount(value):\n    """``value`` with two decimals and thousands '
                'separators: 1234.5 -> \'1,234.50\'."""\n    return f"{value:,.2f}"\n',
                'def format_amount(value, currency=None):\n    """``value`` with two decimals and '
                'thousands separators: 1234.5 -> \'1,234.50\'."""\n    text = f"{value:,.2f}"\n'
                '    return f"{text} {currency}" if currency else text\n',
            ),
            (
                "report/invoice.py",
                'def invoice_line(name, value):\n    """One invoice line: the item\'s name and its '
                'formatted amount."""\n    return f"{name}: {format_amount(value)}"\n',
                'def invoice_line(name, value, currency=None):\n    """One invoice line: the '
                'item\'s name and its formatted amount."""\n'
                '    return f"{name}: {format_amount(value, currency=currency)}"\n',
            ),
            (
                "report/summary.py",
                'def summary_total(values):\n    """The total line of a report."""\n'
                '    return f"Total: {format_amount(sum(values))}"\n',
                'def summary_total(values, currency=None):\n    """The total line of a report."""\n'
                '    return f"Total: {format_amount(sum(values), currency=currency)}"\n',
            ),
        ),
        verify=VERIFY_CURRENCY,
        keep=("tests/test_report.py",),
        files=("report/format.py", "report/invoice.py", "report/summary.py"),
        category="param",
    ),
    Task(
        "ask_coupon",
        "ask",
        "shop",
        "Where is the coupon percentage subtracted from the cart total?",
        expect=(("shop/cart.py", "apply_coupon"), ("shop/cart.py", "cart_total")),
        keywords=("apply_coupon",),
        category="ask",
    ),
    Task(
        "ask_unknown_sku",
        "ask",
        "shop",
        "What happens when unit_price is given a SKU that is not in the catalogue?",
        expect=(("shop/pricing.py", "unit_price"), ("shop/pricing.py", "UnknownSku")),
        keywords=("UnknownSku",),
        category="ask",
    ),
    Task(
        "ask_vat",
        "ask",
        "shop",
        "Which VAT rate does a country that is not listed in VAT_RATES pay, and where is that "
        "decided?",
        expect=(("shop/tax.py", "vat_rate"), ("shop/tax.py", "DEFAULT_VAT")),
        keywords=("0.21", "DEFAULT_VAT"),
        category="ask",
    ),
    *bugs.TASKS,
    *changes.TASKS,
    *vague.TASKS,
)
TASKS_BY_NAME = {t.name: t for t in TASKS}
