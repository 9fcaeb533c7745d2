"""Every conformance check can be shown to fail: the faulty driver plants exactly one defect per check of the suite."""

from __future__ import annotations

from collections import Counter

from harness.conformance.checks import CATALOG
from tests.drivers.faulty_plugin import DEFECTS


def test_every_check_has_a_planted_defect() -> None:
    targeted = {check for check, _ in DEFECTS.values()}
    missing = sorted(c.id for c in CATALOG if c.id not in targeted)
    assert missing == [], f"no defect in tests/drivers/faulty_plugin.py breaks these checks: {missing}"


def test_every_defect_targets_a_check_that_exists() -> None:
    known = {c.id for c in CATALOG}
    stale = sorted(f"{defect} -> {check}" for defect, (check, _) in DEFECTS.items() if check not in known)
    assert stale == [], f"defects aimed at checks the suite no longer has: {stale}"


def test_no_check_has_two_defects() -> None:
    counts = Counter(check for check, _ in DEFECTS.values())
    assert sorted(check for check, n in counts.items() if n > 1) == []
