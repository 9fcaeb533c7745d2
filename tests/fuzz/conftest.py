"""Fixtures of the fuzz targets: each target's figures, and the per-target table `make fuzz` prints at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fuzz.fuzzing import Figures, standing_examples

_PROPERTY = "fuzz-figures"
_collected: dict[str, Figures] = {}


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[Figures]:
    """The running target's figures; handed to the report (so they cross from xdist workers) when it ends."""
    figures = Figures()
    yield figures
    request.node.user_properties.append((_PROPERTY, figures.as_property()))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "teardown":
        return
    for name, value in report.user_properties:
        if name == _PROPERTY and isinstance(value, dict):
            _collected[report.nodeid] = Figures(**value)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _collected:
        return
    mode = f"standing run, {standing_examples()} examples asked" if standing_examples() else "CI examples"
    terminalreporter.section(f"fuzz figures ({mode})")
    terminalreporter.write_line(
        f"{'target':<72} {'examples':>8} {'failed':>6} {'slowest ms':>10} {'heap MiB':>8} {'RSS+ MiB':>8}"
    )
    for nodeid, f in sorted(_collected.items()):
        target = nodeid.removeprefix("tests/fuzz/")
        heap = f"{f.peak_heap_mb:.1f}" if f.peak_heap_mb else "-"
        rss = "-" if f.rss_growth_mb is None else f"{f.rss_growth_mb:.1f}"
        terminalreporter.write_line(
            f"{target:<72} {f.examples:>8} {f.failures:>6} {f.slowest_ms:>10.1f} {heap:>8} {rss:>8}"
        )
    total = sum(f.examples for f in _collected.values())
    failed = sum(f.failures for f in _collected.values())
    terminalreporter.write_line(f"{len(_collected)} targets, {total} examples, {failed} failed")
