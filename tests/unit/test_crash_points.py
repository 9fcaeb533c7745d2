"""The hidden crash switch of the plugin (``FAKEDEV_CRASH_AT``): what it accepts and what it refuses."""

from __future__ import annotations

import pytest

from fakedev.driver.crash import CrashAt, CrashPoint, crash_at_from_env, parse_crash_at
from fakedev.errors import CrashPointError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("checkpoint-temp", CrashAt(point=CrashPoint.CHECKPOINT_TEMP, nth=1)),
        ("prepare-after-metadata-file:3", CrashAt(point=CrashPoint.PREPARE_AFTER_METADATA_FILE, nth=3)),
    ],
    ids=["first-passage", "nth-passage"],
)
def test_a_point_and_its_count_are_read(text: str, expected: CrashAt) -> None:
    assert parse_crash_at(text) == expected
    assert parse_crash_at(expected.render()) == expected


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("after-everything", r"unknown crash point 'after-everything' \(known: prepare-after-nics, "),
        ("checkpoint-temp:0", "the count after ':' must be a whole number of at least 1"),
        ("checkpoint-temp:x", "the count after ':' must be a whole number of at least 1"),
    ],
    ids=["unknown-point", "zero", "not-a-number"],
)
def test_a_malformed_switch_is_refused_naming_the_rule(text: str, error: str) -> None:
    with pytest.raises(CrashPointError, match=error):
        parse_crash_at(text)


def test_an_unset_or_empty_variable_arms_nothing() -> None:
    assert crash_at_from_env({}) is None
    assert crash_at_from_env({"FAKEDEV_CRASH_AT": ""}) is None
