"""Three change tasks of benchmarks/agent_e2e.py: a parameter added to a function and threaded
through its callers (exporter), a function renamed across modules and tests (inventory), and an
edge case an issue describes in prose with no test for it (sensors)."""

from __future__ import annotations

from benchmarks.e2e_tasks.base import COMMON, Task, src

EXPORTER = {
    **COMMON,
    "README.md": "# exporter\n\nOrders and customers exported as CSV.\n\n"
    "## Running the tests\n\n    python -m pytest\n",
    "export/__init__.py": "",
    "export/rows.py": src(
        '''
        """CSV lines."""


        def quote(field):
            """``field`` as text, in double quotes when it holds a comma, a quote or a newline."""
            text = str(field)
            if any(c in text for c in ',"\\n'):
                return '"' + text.replace('"', '""') + '"'
            return text


        def csv_line(fields):
            """One CSV line: ``fields`` quoted where needed and separated by commas."""
            return ",".join(quote(f) for f in fields)
        '''
    ),
    "export/orders.py": src(
        '''
        """Orders as CSV."""

        from export.rows import csv_line

        HEADER = ("order", "customer", "total")


        def orders_csv(orders):
            """``orders`` ((id, customer, total) tuples) as CSV text, the header first."""
            lines = [csv_line(HEADER)]
            lines += [csv_line((oid, customer, f"{total:.2f}")) for oid, customer, total in orders]
            return "\\n".join(lines) + "\\n"
        '''
    ),
    "export/customers.py": src(
        '''
        """Customers as CSV."""

        from export.rows import csv_line


        def customers_csv(customers):
            """``customers`` (dicts with a name and a city) as CSV text, the header first."""
            lines = [csv_line(("name", "city"))]
            lines += [csv_line((c["name"], c["city"])) for c in customers]
            return "\\n".join(lines) + "\\n"
        '''
    ),
    "tests/test_export.py": src(
        """
        from export.customers import customers_csv
        from export.orders import orders_csv
        from export.rows import csv_line, quote


        def test_quote():
            assert quote("plain") == "plain"
            assert quote('say "hi", then go') == '"say ""hi"", then go"'


        def test_csv_line():
            assert csv_line(["a", 1, "b,c"]) == 'a,1,"b,c"'


        def test_orders_csv():
            assert orders_csv([(7, "Ada", 12.5)]) == "order,customer,total\\n7,Ada,12.50\\n"


        def test_customers_csv():
            rows = [{"name": "Ada", "city": "Paris"}]
            assert customers_csv(rows) == "name,city\\nAda,Paris\\n"
        """
    ),
}

VERIFY_DELIMITER = src(
    """
    from export.customers import customers_csv
    from export.orders import orders_csv
    from export.rows import csv_line

    assert csv_line(["a", "b"], delimiter=";") == "a;b", csv_line(["a", "b"], delimiter=";")
    assert csv_line(["a", "b"]) == "a,b"
    got = orders_csv([(1, "Ada", 2.5)], delimiter=";")
    assert got == "order;customer;total\\n1;Ada;2.50\\n", got
    assert orders_csv([(1, "Ada", 2.5)]) == "order,customer,total\\n1,Ada,2.50\\n"
    got = customers_csv([{"name": "Ada", "city": "Paris"}], delimiter="\\t")
    assert got == "name\\tcity\\nAda\\tParis\\n", got
    assert customers_csv([{"name": "Ada", "city": "Paris"}]) == "name,city\\nAda,Paris\\n"
    """
)

INVENTORY = {
    **COMMON,
    "README.md": "# inventory\n\nStock levels of two warehouses, reorder points and the stock "
    "report.\n\n## Running the tests\n\n    python -m pytest\n",
    "inventory/__init__.py": "",
    "inventory/stock.py": src(
        '''
        """Stock levels per warehouse."""

        STOCK = {
            "north": {"A100": 12, "B200": 0, "C300": 5},
            "south": {"A100": 3, "C300": 40},
        }


        def get_stock_level(sku, warehouse=None):
            """Units of ``sku`` in ``warehouse``, or in all warehouses when none is given."""
            if warehouse is not None:
                return STOCK.get(warehouse, {}).get(sku, 0)
            return sum(levels.get(sku, 0) for levels in STOCK.values())
        '''
    ),
    "inventory/reorder.py": src(
        '''
        """Which SKUs to reorder."""

        from inventory.stock import get_stock_level

        REORDER_POINT = 10


        def needs_reorder(sku):
            """Whether the total stock of ``sku`` is below the reorder point."""
            return get_stock_level(sku) < REORDER_POINT
        '''
    ),
    "inventory/report.py": src(
        '''
        """The stock report of one warehouse."""

        from inventory import stock


        def stock_lines(skus, warehouse):
            """One line per SKU: its units in ``warehouse``."""
            return [f"{sku}: {stock.get_stock_level(sku, warehouse)}" for sku in skus]
        '''
    ),
    "tests/test_inventory.py": src(
        """
        from inventory.reorder import needs_reorder
        from inventory.report import stock_lines
        from inventory.stock import get_stock_level


        def test_total_stock():
            assert get_stock_level("A100") == 15
            assert get_stock_level("Z999") == 0


        def test_stock_in_one_warehouse():
            assert get_stock_level("A100", "south") == 3
            assert get_stock_level("B200", "south") == 0


        def test_needs_reorder():
            assert needs_reorder("B200")
            assert not needs_reorder("C300")


        def test_stock_lines():
            assert stock_lines(["A100", "C300"], "north") == ["A100: 12", "C300: 5"]
        """
    ),
}

VERIFY_RENAME = src(
    """
    import ast
    from pathlib import Path

    from inventory import stock

    assert hasattr(stock, "stock_level"), "inventory.stock has no stock_level"
    assert not hasattr(stock, "get_stock_level"), "the old name is still defined"
    assert stock.stock_level("A100") == 15 and stock.stock_level("A100", "south") == 3
    left = [
        str(p)
        for folder in ("inventory", "tests")
        for p in Path(folder).rglob("*.py")
        if "get_stock_level" in p.read_text()
    ]
    assert not left, f"the old name is still used in {left}"
    tests = ast.parse(Path("tests/test_inventory.py").read_text())
    names = [n.name for n in tests.body if isinstance(n, ast.FunctionDef)]
    assert len(names) == 4, f"the tests were not kept: {names}"
    """
)

SENSORS = {
    **COMMON,
    "README.md": "# sensors\n\nThe daily report of the greenhouse's temperature sensors.\n\n"
    "## Running the tests\n\n    python -m pytest\n",
    "sensors/__init__.py": "",
    "sensors/readings.py": src(
        '''
        """Statistics of one sensor's readings."""


        def mean(values):
            """Arithmetic mean of ``values``."""
            return sum(values) / len(values)


        def spread(values):
            """Highest minus lowest of ``values``."""
            return max(values) - min(values)
        '''
    ),
    "sensors/report.py": src(
        '''
        """The daily sensor report."""

        from sensors.readings import mean, spread


        def sensor_line(name, values):
            """One line of the report: the sensor's mean and spread, one decimal each."""
            return f"{name}: mean {mean(values):.1f}, spread {spread(values):.1f}"


        def daily_report(readings):
            """The report of ``readings`` (sensor name -> list of values), one line per sensor."""
            return "\\n".join(sensor_line(name, readings[name]) for name in sorted(readings))
        '''
    ),
    "tests/test_report.py": src(
        """
        from sensors.readings import mean, spread
        from sensors.report import daily_report, sensor_line


        def test_mean_and_spread():
            assert mean([1.0, 2.0, 6.0]) == 3.0
            assert spread([1.0, 2.0, 6.0]) == 5.0


        def test_sensor_line():
            assert sensor_line("cellar", [1.0, 2.0, 4.0]) == "cellar: mean 2.3, spread 3.0"


        def test_daily_report_is_sorted_by_name():
            report = daily_report({"roof": [20.0], "attic": [18.0, 19.0]})
            assert report == "attic: mean 18.5, spread 1.0\\nroof: mean 20.0, spread 0.0"
        """
    ),
}

VERIFY_NO_DATA = src(
    """
    from sensors.report import daily_report, sensor_line

    assert sensor_line("attic", []) == "attic: no data", sensor_line("attic", [])
    got = daily_report({"attic": [], "cellar": [10.0, 12.0]})
    assert got == "attic: no data\\ncellar: mean 11.0, spread 2.0", got
    assert sensor_line("cellar", [1.0, 2.0, 4.0]) == "cellar: mean 2.3, spread 3.0"
    """
)

REPOS = {"exporter": EXPORTER, "inventory": INVENTORY, "sensors": SENSORS}

TASKS = (
    Task(
        "add_delimiter",
        "agent",
        "exporter",
        'Add a parameter `delimiter` (default ",") to `csv_line` in export/rows.py, so that '
        'csv_line(["a", "b"], delimiter=";") returns "a;b". Add the same parameter to its two '
        "callers, `orders_csv` in export/orders.py and `customers_csv` in export/customers.py, "
        "and pass it through.",
        fix=(
            (
                "export/rows.py",
                'def csv_line(fields):\n    """One CSV line: ``fields`` quoted where needed and '
                'separated by commas."""\n    return ",".join(quote(f) for f in fields)\n',
                'def csv_line(fields, delimiter=","):\n    """One CSV line: ``fields`` quoted where '
                'needed and separated by ``delimiter``."""\n'
                "    return delimiter.join(quote(f) for f in fields)\n",
            ),
            (
                "export/orders.py",
                "def orders_csv(orders):",
                'def orders_csv(orders, delimiter=","):',
            ),
            ("export/orders.py", "csv_line(HEADER)", "csv_line(HEADER, delimiter)"),
            ("export/orders.py", 'f"{total:.2f}"))', 'f"{total:.2f}"), delimiter)'),
            (
                "export/customers.py",
                "def customers_csv(customers):",
                'def customers_csv(customers, delimiter=","):',
            ),
            ("export/customers.py", '("name", "city"))', '("name", "city"), delimiter)'),
            ("export/customers.py", 'c["city"]))', 'c["city"]), delimiter)'),
        ),
        verify=VERIFY_DELIMITER,
        keep=("tests/test_export.py",),
        files=("export/rows.py", "export/orders.py", "export/customers.py"),
        category="param",
    ),
    Task(
        "rename_stock_level",
        "agent",
        "inventory",
        "Rename the function `get_stock_level` in inventory/stock.py to `stock_level` and update "
        "every place that uses it, the code and the tests, so that nothing refers to the old "
        "name any more.",
        fix=(
            ("inventory/stock.py", "def get_stock_level(", "def stock_level("),
            ("inventory/reorder.py", "import get_stock_level\n", "import stock_level\n"),
            ("inventory/reorder.py", "return get_stock_level(", "return stock_level("),
            ("inventory/report.py", "stock.get_stock_level(", "stock.stock_level("),
            ("tests/test_inventory.py", "import get_stock_level\n", "import stock_level\n"),
            ("tests/test_inventory.py", 'get_stock_level("A100") ==', 'stock_level("A100") =='),
            ("tests/test_inventory.py", 'get_stock_level("Z999")', 'stock_level("Z999")'),
            ("tests/test_inventory.py", 'get_stock_level("A100", ', 'stock_level("A100", '),
            ("tests/test_inventory.py", 'get_stock_level("B200", ', 'stock_level("B200", '),
        ),
        verify=VERIFY_RENAME,
        files=(
            "inventory/stock.py",
            "inventory/reorder.py",
            "inventory/report.py",
            "tests/test_inventory.py",
        ),
        category="rename",
    ),
    Task(
        "edge_no_readings",
        "agent",
        "sensors",
        "Issue #214: the daily report crashes with ZeroDivisionError when a sensor sent no "
        "readings that day (its list of values is empty). Such a sensor should get the line "
        '"<name>: no data" in the report instead, e.g. "attic: no data", and the lines of the '
        "other sensors should stay as they are.",
        fix=(
            (
                "sensors/report.py",
                '    """One line of the report: the sensor\'s mean and spread, one decimal each."""\n',
                '    """One line of the report: the sensor\'s mean and spread, one decimal each."""\n'
                '    if not values:\n        return f"{name}: no data"\n',
            ),
        ),
        verify=VERIFY_NO_DATA,
        keep=("tests/test_report.py",),
        files=("sensors/report.py", "sensors/readings.py"),
        category="edge",
    ),
)
