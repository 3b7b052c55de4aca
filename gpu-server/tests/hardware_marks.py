"""`@pytest.mark.needs("vllm")` (and vllm_cpu, cuda, multi_gpu; art_server/hardware.py): a test that
needs hardware this machine lacks is skipped with a reason that names it (`not tested here: ...`,
which scripts/test.mjs sums up at the end); where the hardware is there but what it needs was not
set up, the test fails. Hooks for pytest, shared by the server's suite and the notebooks' (their conftests)."""

from __future__ import annotations

import pytest

from art_server import hardware

HARDWARE = hardware.detect()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        reasons = [r for mark in item.iter_markers("needs") for r in map(HARDWARE.missing, mark.args) if r]
        if reasons:
            item.add_marker(pytest.mark.skip(reason=reasons[0]))


def pytest_runtest_setup(item: pytest.Item) -> None:
    for capability in sorted({c for mark in item.iter_markers("needs") for c in mark.args}):
        problem = HARDWARE.not_set_up(capability)
        if problem:
            pytest.fail(problem, pytrace=False)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """One line per hardware reason, with how many tests it skipped (scripts/test.mjs reads them)."""
    counts: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        if reason.startswith("not tested here: "):
            counts[reason] = counts.get(reason, 0) + 1
    for reason, n in counts.items():
        terminalreporter.write_line(f"[hardware] {n} skipped: {reason}")
