"""The fast lane's lists of slow modules and slow tests name modules and tests that exist (a
renamed one would otherwise slip into `make test-fast` unnoticed, or out of it)."""

from pathlib import Path

from tests.conftest import SLOW_MODULES, SLOW_TESTS


def test_every_slow_module_exists():
    here = Path(__file__).parent
    missing = sorted(m for m in SLOW_MODULES if not (here / f"{m}.py").is_file())
    assert missing == []


def test_every_slow_test_exists():
    here = Path(__file__).parent
    missing = []
    for entry in sorted(SLOW_TESTS):
        module, name = entry.split("::")
        path = here / f"{module}.py"
        if not path.is_file() or f"def {name}(" not in path.read_text():
            missing.append(entry)
    assert missing == []


def test_the_fast_lane_keeps_most_modules():
    modules = {p.stem for p in Path(__file__).parent.glob("test_*.py")}
    assert len(SLOW_MODULES) < len(modules) / 2
