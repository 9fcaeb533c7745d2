"""The drill command's sets and --repeat: which scenarios a command line selects, before any cluster is involved."""

from __future__ import annotations

import argparse

import pytest

from fakedev.cli.args import positive_count
from fakedev.cli.drill import drill_set, repeated, shipped_scenario
from harness.drills.scenario import load_scenario


def test_upstream_reproducers_are_shipped_but_not_in_the_set_that_must_pass() -> None:
    upstream = drill_set("upstream")
    assert "upstream/consumable-capacity-inflight" in upstream
    assert not set(upstream) & set(drill_set("all"))
    for name in upstream:
        scenario = load_scenario(shipped_scenario(name))
        # Its profile resolves next to the scenario like the matrix drills' do.
        assert (scenario.path.parent / scenario.nodes[0].profile).resolve().is_file()


def test_the_inflight_reproducer_fills_the_device_exactly() -> None:
    scenario = load_scenario(shipped_scenario("upstream/consumable-capacity-inflight"))
    text = scenario.path.read_text()
    # Ten 100m shares of a device whose compute is 1: the sum fits exactly, so every refusal is the scheduler's.
    assert text.count("compute: 100m") == 10 and text.count("kind: Pod\n") == 10
    assert "shares: 100m" in (scenario.path.parent / scenario.nodes[0].profile).read_text()


def test_repeat_names_each_run_and_keeps_the_order() -> None:
    a = load_scenario(shipped_scenario("driver-loss"))
    b = load_scenario(shipped_scenario("node-reboot"))
    runs = repeated([a, b], times=3)
    assert [s.name for s in runs] == [f"{a.name}-{i}" for i in (1, 2, 3)] + [f"{b.name}-{i}" for i in (1, 2, 3)]
    assert all(s.steps == a.steps for s in runs[:3])
    assert repeated([a], times=1) == [a]


@pytest.mark.parametrize(("text", "error"), [("0", "must be at least 1, got 0"), ("two", "not a whole number: 'two'")])
def test_repeat_refuses_what_is_not_a_positive_count(text: str, error: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=error):
        positive_count(text)
    assert positive_count("12") == 12
