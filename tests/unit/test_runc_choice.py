"""Which runc the emulator runs pods with, and whether it moves ``linux.netDevices`` itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import ComponentError
from harness.runtime.runc import RUNC_ENV, RuncChoice, compute_net_devices_support, compute_runc_choice

CACHED = Path("/cache/runc/v1.5.3/runc")


@pytest.mark.parametrize(
    ("override", "cached", "on_path", "expected"),
    [
        ("/opt/runc", CACHED, "/usr/sbin/runc", RuncChoice(binary="/opt/runc", origin=f"${RUNC_ENV}")),
        (None, CACHED, "/usr/sbin/runc", RuncChoice(binary=str(CACHED), origin="the cached runc v1.5.3")),
        (None, None, "/usr/sbin/runc", RuncChoice(binary="/usr/sbin/runc", origin="PATH")),
    ],
    ids=["the-override-wins", "the-cached-build-before-path", "path-when-nothing-is-built"],
)
def test_runc_choice_order(
    override: str | None, cached: Path | None, on_path: str | None, expected: RuncChoice
) -> None:
    assert compute_runc_choice(override=override, cached=cached, on_path=on_path) == expected


def test_no_runc_at_all_says_how_to_get_one() -> None:
    with pytest.raises(ComponentError, match="fakedev cluster build --with-node"):
        compute_runc_choice(override=None, cached=None, on_path=None)


@pytest.mark.parametrize(
    ("features", "moves"),
    [
        (json.dumps({"ociVersionMax": "1.3.0", "linux": {"netDevices": {"enabled": True}}}), True),
        (json.dumps({"ociVersionMax": "1.3.0", "linux": {"netDevices": {"enabled": False}}}), False),
        (json.dumps({"ociVersionMax": "1.0.2-dev", "linux": {"namespaces": ["network"]}}), False),
        (json.dumps(["not", "an", "object"]), False),
        ("No help topic for 'features'", False),
    ],
    ids=["runc-1.5", "disabled", "runc-1.1-has-no-field", "odd-json", "no-features-command"],
)
def test_net_devices_support_comes_from_runc_features(features: str, moves: bool) -> None:
    assert compute_net_devices_support(features) is moves
