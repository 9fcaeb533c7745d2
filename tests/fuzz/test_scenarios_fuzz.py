"""Fuzzing drill scenarios: any input is a clean ScenarioError or a scenario whose numbers are all finite and whose
timeouts are within bounds, in bounded time and memory. Examples per run: ``FAKEDEV_FUZZ_EXAMPLES`` (default 200)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given

from harness.drills.scenario import MAX_SECONDS, Scenario, parse_scenario
from harness.errors import ScenarioError
from tests.fuzz.fuzzing import MARKS, Figures
from tests.fuzz.yaml_mutations import (
    POSITIONED_ERROR,
    Stats,
    assert_no_nan,
    bounded,
    documents,
    fuzz_target,
    seed_files,
)

pytestmark = MARKS

SEEDS = seed_files("scenarios/*.yaml", "scenarios/matrix/*.yaml", "scenarios/upstream/*.yaml")
STATS = Stats(name="scenarios")


@pytest.fixture(scope="module", autouse=True)
def _summary() -> Iterator[None]:
    STATS.restart()
    yield
    print(f"\n{STATS.summary()}")


def test_the_seeds_are_valid_scenarios() -> None:
    assert len(SEEDS) >= 30
    for seed in SEEDS:
        assert isinstance(parse_scenario(seed.text, source=seed.name), Scenario)


@fuzz_target
@given(data=documents(SEEDS))
def test_any_scenario_is_a_clean_error_or_well_formed(data: str | bytes, figures: Figures) -> None:
    with bounded(STATS, data=data, figures=figures) as accept:
        try:
            scenario = parse_scenario(data, source="fuzz.yaml")
        except ScenarioError as exc:
            assert POSITIONED_ERROR.match(str(exc)), str(exc)
            return
        accept()
        assert isinstance(scenario, Scenario)
        assert_no_nan(scenario)
        assert all(0 < step.timeout <= MAX_SECONDS for step in scenario.steps)
        assert all(0 <= node.wipe_grace <= MAX_SECONDS for node in scenario.nodes)
