"""Fuzzing node profiles: any input is a clean ProfileError or a profile that resolves and renders (or, for a device
mix its NVIDIA driver release cannot publish, a RenderError naming the release), in bounded time and memory.
Examples per run: ``FAKEDEV_FUZZ_EXAMPLES`` (default 200)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from hypothesis import given

from fakedev.errors import ProfileError, RenderError
from fakedev.model.inventory import resolve_inventory
from fakedev.model.profile import NodeProfile, parse_profile
from fakedev.render import render_node
from fakedev.render.nvidia_mix import mix_problems
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

SEEDS = seed_files("fakedev/model/profiles/*.yaml", "scenarios/profiles/*.yaml")
STATS = Stats(name="profiles")


@pytest.fixture(scope="module", autouse=True)
def _summary() -> Iterator[None]:
    STATS.restart()
    yield
    print(f"\n{STATS.summary()}")


def test_the_seeds_are_valid_profiles() -> None:
    assert len(SEEDS) >= 10
    for seed in SEEDS:
        assert isinstance(parse_profile(seed.text, source=seed.name), NodeProfile)


@fuzz_target
@given(data=documents(SEEDS))
def test_any_profile_is_a_clean_error_or_renders(data: str | bytes, figures: Figures) -> None:
    with bounded(STATS, data=data, figures=figures) as accept:
        try:
            profile = parse_profile(data, source="fuzz.yaml")
        except ProfileError as exc:
            assert POSITIONED_ERROR.match(str(exc)), str(exc)
            return
        accept()
        assert isinstance(profile, NodeProfile)
        assert_no_nan(profile)
        inventory = resolve_inventory(profile, node_name="fuzz-node")
        if mix_problems(inventory, release=profile.releases.nvidia):
            with pytest.raises(RenderError, match=re.escape(f"nvidia@{profile.releases.nvidia.value}")):
                render_node(inventory)
            return
        render_node(inventory)
