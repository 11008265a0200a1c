"""The fast lane's list of slow modules names modules that exist (a renamed module would
otherwise slip into `make test-fast` unnoticed, or out of it)."""

from pathlib import Path

from tests.conftest import SLOW_MODULES


def test_every_slow_module_exists():
    here = Path(__file__).parent
    missing = sorted(m for m in SLOW_MODULES if not (here / f"{m}.py").is_file())
    assert missing == []


def test_the_fast_lane_keeps_most_modules():
    modules = {p.stem for p in Path(__file__).parent.glob("test_*.py")}
    assert len(SLOW_MODULES) < len(modules) / 2
