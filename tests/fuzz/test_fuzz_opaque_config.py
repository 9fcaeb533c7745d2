"""Fuzz opaque device configuration as it arrives in a claim: any JSON as ``parameters`` either becomes a valid
config (and merges into one, later configs winning) or is a ClaimError of one short line naming the field."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from hypothesis import given
from hypothesis import strategies as st

from fakedev.driver.claims import compute_claim_plan, configs_for
from fakedev.driver.config import (
    API_VERSIONS,
    GPU_KINDS,
    INTERVALS,
    NIC_KINDS,
    STRATEGIES,
    DeviceConfig,
    merge_configs,
    parse_config,
)
from fakedev.errors import ClaimError
from tests.fuzz.fuzzing import MARKS, PURE_SECONDS, TEXT, Figures, big_text, fuzz_settings, json_values

pytestmark = MARKS

DRIVER: Final = "gpu.example.com"
UID: Final = "uid-1"
ENV_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
IFNAME: Final = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")
ERROR: Final = re.compile(r"^invalid opaque config: config\[(\d+)\]\.opaque\.parameters\.\S.*: \S")

ANY: Final = json_values()


def _or_any(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly well-formed values, sometimes any JSON in their place."""
    return st.one_of(strategy, strategy, ANY)


SHARING: Final = _or_any(
    st.fixed_dictionaries(
        {"strategy": _or_any(st.sampled_from(sorted(STRATEGIES)))},
        optional={
            "timeSlicingConfig": _or_any(
                st.fixed_dictionaries({}, optional={"interval": _or_any(st.sampled_from(sorted(INTERVALS)))})
            ),
            "spaceSharingConfig": _or_any(
                st.fixed_dictionaries({}, optional={"partitionCount": _or_any(st.integers(min_value=-5, max_value=60))})
            ),
            "mpsConfig": _or_any(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "partitionCount": _or_any(st.integers(min_value=-5, max_value=60)),
                        "defaultActiveThreadPercentage": ANY,
                    },
                )
            ),
        },
    )
)
ENV: Final = _or_any(
    st.dictionaries(
        st.one_of(st.from_regex(ENV_NAME, fullmatch=True), st.text(TEXT, max_size=20), big_text(limit=100_000)),
        _or_any(st.text(TEXT, max_size=30)),
        max_size=5,
    )
)
PARAMETERS: Final = st.one_of(
    ANY,
    st.fixed_dictionaries(
        {
            "apiVersion": _or_any(st.sampled_from(sorted(API_VERSIONS))),
            "kind": _or_any(st.sampled_from(sorted(GPU_KINDS | NIC_KINDS))),
        },
        optional={
            "sharing": SHARING,
            "env": ENV,
            "interfaceName": _or_any(st.one_of(st.from_regex(IFNAME, fullmatch=True), st.text(TEXT, max_size=20))),
            "mtu": _or_any(st.integers(min_value=0, max_value=70_000)),
            "addresses": _or_any(st.lists(st.text(TEXT, max_size=20), max_size=3)),
            "ipv6": _or_any(st.booleans()),
            "bogus": ANY,
            "x" * 1000: ANY,
        },
    ),
)
CONFIG_ENTRIES: Final = st.lists(
    st.fixed_dictionaries(
        {
            "source": st.sampled_from(["FromClass", "FromClaim"]),
            "opaque": st.fixed_dictionaries({"driver": st.just(DRIVER), "parameters": PARAMETERS}),
        },
        optional={"requests": st.sampled_from([["gpu"], ["other"], []])},
    ),
    min_size=1,
    max_size=4,
)


def _claim(configs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"uid": UID, "namespace": "ns", "name": "c"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}],
                    "config": configs,
                }
            }
        },
    }


def _check_valid(config: DeviceConfig) -> None:
    if config.sharing is not None:
        assert config.sharing.strategy in STRATEGIES and config.sharing.interval in INTERVALS
        assert config.sharing.partition_count is None or 1 <= config.sharing.partition_count <= 48
    assert all(ENV_NAME.match(k) and isinstance(v, str) for k, v in config.env.items())
    assert config.interface_name is None or IFNAME.match(config.interface_name)
    assert config.mtu is None or 68 <= config.mtu <= 65535
    assert all(isinstance(a, str) for a in config.addresses)
    assert isinstance(config.ipv6, bool)


def _check_refusal(exc: ClaimError) -> None:
    message = str(exc)
    assert ERROR.match(message), message
    assert "\n" not in message and len(message) < 400, message


@fuzz_settings(examples=300, deadline_seconds=2 * PURE_SECONDS)
@given(configs=CONFIG_ENTRIES, kinds=st.sampled_from([GPU_KINDS, NIC_KINDS]))
def test_any_opaque_config_is_valid_or_refused_naming_the_field(
    figures: Figures, configs: list[dict[str, Any]], kinds: frozenset[str]
) -> None:
    with figures.example(max_seconds=PURE_SECONDS, max_heap_mb=64):
        try:
            plan = compute_claim_plan(_claim(configs), uid=UID, driver=DRIVER, node_name="n1")
        except ClaimError as exc:  # parameters that are not an object never reach the parser
            assert str(exc) == f"opaque config for {DRIVER} has no parameters object"
            assert any(not isinstance(c["opaque"]["parameters"], Mapping) for c in configs)
            return
        parsed: list[DeviceConfig] = []
        for index, parameters in enumerate(configs_for(plan, "gpu")):
            try:
                parsed.append(parse_config(parameters, kinds=kinds, path=f"config[{index}].opaque.parameters"))
            except ClaimError as exc:
                _check_refusal(exc)
        merged = merge_configs(parsed)
        for config in (*parsed, merged):
            _check_valid(config)
        for key, value in merged.env.items():
            assert value == next(c.env[key] for c in reversed(parsed) if key in c.env)  # the last word wins
