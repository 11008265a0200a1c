"""Two bug-fix tasks of benchmarks/agent_e2e.py, each a failing test that names the bug: an
off-by-one in pagination (catalog) and an end date left out of a date range (bookings)."""

from __future__ import annotations

from benchmarks.e2e_tasks.base import COMMON, Task, src

CATALOG = {
    **COMMON,
    "README.md": "# catalog\n\nThe product catalogue's listing pages.\n\n"
    "## Running the tests\n\n    python -m pytest\n",
    "catalog/__init__.py": "",
    "catalog/products.py": src(
        '''
        """The products of the catalogue."""

        from dataclasses import dataclass


        @dataclass(frozen=True)
        class Product:
            sku: str
            name: str
            price: float


        PRODUCTS = [
            Product("F310", "Fuse", 0.9),
            Product("A100", "Anchor bolt", 0.4),
            Product("H550", "Hinge", 3.2),
            Product("C210", "Cable tie", 0.1),
            Product("E480", "Eye hook", 1.1),
            Product("B120", "Bracket", 2.5),
            Product("D330", "Drill bit", 4.75),
        ]


        def by_name(products):
            """``products`` sorted by name, ignoring case."""
            return sorted(products, key=lambda p: p.name.lower())
        '''
    ),
    "catalog/pagination.py": src(
        '''
        """Splitting a list into pages; pages are numbered from 1."""

        import math


        def page_count(total, per_page):
            """How many pages ``total`` items fill (at least one, for an empty list)."""
            return max(1, math.ceil(total / per_page))


        def paginate(items, page, per_page=3):
            """The items on ``page`` (1 is the first page); an empty list past the last page."""
            if page < 1:
                raise ValueError("pages are numbered from 1")
            start = page * per_page
            return items[start : start + per_page]
        '''
    ),
    "catalog/listing.py": src(
        '''
        """The catalogue's listing pages."""

        from catalog.pagination import page_count, paginate
        from catalog.products import PRODUCTS, by_name


        def listing_page(page, per_page=3):
            """One page of the listing: the products' names, the page number and the page count."""
            products = by_name(PRODUCTS)
            return {
                "page": page,
                "pages": page_count(len(products), per_page),
                "names": [p.name for p in paginate(products, page, per_page)],
            }
        '''
    ),
    "tests/test_listing.py": src(
        """
        import pytest

        from catalog.listing import listing_page
        from catalog.pagination import page_count, paginate


        def test_page_count():
            assert page_count(7, 3) == 3
            assert page_count(0, 3) == 1


        def test_pages_start_at_one():
            with pytest.raises(ValueError):
                paginate([1, 2, 3], 0)


        def test_first_page_starts_with_the_first_product():
            page = listing_page(1)
            assert page["names"] == ["Anchor bolt", "Bracket", "Cable tie"]
            assert page["pages"] == 3


        def test_last_page_holds_the_rest():
            assert listing_page(3)["names"] == ["Hinge"]
        """
    ),
}

BOOKINGS = {
    **COMMON,
    "README.md": "# bookings\n\nRoom bookings of a small hotel and the nightly occupancy.\n\n"
    "## Running the tests\n\n    python -m pytest\n",
    "bookings/__init__.py": "",
    "bookings/models.py": src(
        '''
        """Room bookings."""

        from dataclasses import dataclass
        from datetime import date


        @dataclass(frozen=True)
        class Booking:
            guest: str
            room: int
            first_night: date
            last_night: date

            def nights(self):
                """Number of nights booked, the first and the last included."""
                return (self.last_night - self.first_night).days + 1
        '''
    ),
    "bookings/dates.py": src(
        '''
        """Date ranges. Both ends of a range are included."""

        from datetime import timedelta


        def in_range(day, start, end):
            """Whether ``day`` falls between ``start`` and ``end``, both included."""
            return start <= day < end


        def days(start, end):
            """Every date from ``start`` to ``end``, both included."""
            return [start + timedelta(n) for n in range((end - start).days + 1)]
        '''
    ),
    "bookings/occupancy.py": src(
        '''
        """Who stays on which night."""

        from bookings.dates import days, in_range


        def guests_on(bookings, night):
            """Names of the guests staying on ``night``, sorted."""
            return sorted(b.guest for b in bookings if in_range(night, b.first_night, b.last_night))


        def occupancy(bookings, start, end):
            """Rooms taken per night from ``start`` to ``end`` (both included)."""
            return {night: len(guests_on(bookings, night)) for night in days(start, end)}
        '''
    ),
    "tests/test_occupancy.py": src(
        """
        from datetime import date

        from bookings.models import Booking
        from bookings.occupancy import guests_on, occupancy

        BOOKINGS = [
            Booking("Ada", 1, date(2024, 5, 1), date(2024, 5, 3)),
            Booking("Grace", 2, date(2024, 5, 3), date(2024, 5, 4)),
        ]


        def test_nights():
            assert BOOKINGS[0].nights() == 3


        def test_guests_on_a_middle_night():
            assert guests_on(BOOKINGS, date(2024, 5, 2)) == ["Ada"]


        def test_guest_stays_on_the_last_night_booked():
            assert guests_on(BOOKINGS, date(2024, 5, 3)) == ["Ada", "Grace"]


        def test_occupancy():
            assert occupancy(BOOKINGS, date(2024, 5, 1), date(2024, 5, 4)) == {
                date(2024, 5, 1): 1,
                date(2024, 5, 2): 1,
                date(2024, 5, 3): 2,
                date(2024, 5, 4): 1,
            }
        """
    ),
}

REPOS = {"catalog": CATALOG, "bookings": BOOKINGS}

TASKS = (
    Task(
        "fix_pagination",
        "agent",
        "catalog",
        "tests/test_listing.py::test_first_page_starts_with_the_first_product fails: page 1 of "
        "the catalogue listing starts at the fourth product, and the last page is empty. Fix the "
        "bug in the code (not the tests).",
        fix=(
            (
                "catalog/pagination.py",
                "start = page * per_page\n",
                "start = (page - 1) * per_page\n",
            ),
        ),
        verify=(  # inputs the tests do not use
            "from catalog.pagination import paginate\n"
            "items = list(range(10))\n"
            "assert paginate(items, 1, 4) == [0, 1, 2, 3], paginate(items, 1, 4)\n"
            "assert paginate(items, 3, 4) == [8, 9], paginate(items, 3, 4)\n"
            "assert paginate(items, 4, 4) == [], paginate(items, 4, 4)\n"
        ),
        keep=("tests/test_listing.py",),
        files=("catalog/pagination.py",),
        category="bug",
    ),
    Task(
        "fix_date_range",
        "agent",
        "bookings",
        "tests/test_occupancy.py::test_guest_stays_on_the_last_night_booked fails: a guest is "
        "not counted on the last night of their booking. Fix the bug in the code (not the tests).",
        fix=(("bookings/dates.py", "return start <= day < end\n", "return start <= day <= end\n"),),
        verify=(  # inputs the tests do not use
            "from datetime import date\n"
            "from bookings.dates import in_range\n"
            "a, b = date(2024, 2, 27), date(2024, 3, 1)\n"
            "assert in_range(a, a, b) and in_range(b, a, b) and in_range(date(2024, 2, 29), a, b)\n"
            "assert not in_range(date(2024, 3, 2), a, b) and not in_range(date(2024, 2, 26), a, b)\n"
        ),
        keep=("tests/test_occupancy.py",),
        files=("bookings/dates.py",),
        category="bug",
    ),
)
