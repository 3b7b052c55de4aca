"""The notebooks' pytest run shares the server suite's hardware marks (`@pytest.mark.needs("vllm")`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpu-server" / "tests"))

from hardware_marks import pytest_collection_modifyitems, pytest_runtest_setup, pytest_terminal_summary  # noqa: F401 (pytest's hooks)


def pytest_configure(config):
    config.addinivalue_line("markers", "needs(capability): hardware the test needs (gpu-server/tests/hardware_marks.py)")
