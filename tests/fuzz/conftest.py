"""The fuzz suite's long budget (``--fuzz-long``, registered in ``tests/conftest.py`` so that it
works from the project root) and its summary of cases tried per target."""

from __future__ import annotations

import pytest

from . import harness


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--fuzz-long", default=False):
        harness.CONFIG.long = True


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not harness.STATS:
        return
    terminalreporter.section("graphrt fuzz: cases tried per target")
    for line in harness.summary_lines():
        terminalreporter.write_line(line)
    if harness.os.environ.get("GRAPHRT_FUZZ_SLOWEST"):
        for stats in harness.STATS.values():
            terminalreporter.write_line(f"slowest {stats.target}: {stats.slowest[0]:.2f} s "
                                        f"{stats.slowest[1][:300]}")
