"""Pool splitting, API limits, taints, owners, generations and determinism."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from fakedev.errors import RenderError
from fakedev.model.inventory import resolve_inventory
from fakedev.model.profile import parse_profile
from fakedev.profiles import builtin_profile_names, load_profile
from fakedev.render import DeviceRef, Schema, bench_render, render_node
from fakedev.render.limits import slice_problems
from fakedev.render.names import resource_slice, sanitize_label
from fakedev.render.types import DeviceTaint, OwnerReference, ResourceSlice

TWELVE_GPUS = 'name: big\npcieRoots: [{name: "pci0000:00"}]\ngpus:\n' + "".join(
    '  - {product: h100-sxm5-80gb, root: "pci0000:00"}\n' for _ in range(12)
)
MANY_NICS = 'name: nics\npcieRoots: [{name: "pci0000:00"}]\nnics:\n' + "".join(
    '  - {product: connectx-7, root: "pci0000:00", vfs: 16}\n' for _ in range(9)
)


def _json(slices: tuple[ResourceSlice, ...]) -> str:
    return json.dumps(slices, sort_keys=True)


@pytest.mark.parametrize("profile", builtin_profile_names(), ids=builtin_profile_names())
def test_rendering_twice_is_byte_identical(profile: str) -> None:
    first = render_node(resolve_inventory(load_profile(profile), node_name="same"))
    second = render_node(resolve_inventory(load_profile(profile), node_name="same"))
    assert json.dumps(first.slices) == json.dumps(second.slices)


def _identities(node: str) -> set[str]:
    rendered = render_node(resolve_inventory(load_profile("dgx-h100"), node_name=node))
    return {
        attribute["string"]
        for device in rendered.devices.values()
        for name, attribute in device.attributes.items()
        if name in ("uuid", "dra.net/mac")
    }


def test_node_name_seeds_every_uuid_and_mac() -> None:
    one, two = _identities("node-1"), _identities("node-2")
    assert len(one) == 16 and len(two) == 16 and not one & two


def test_more_than_eight_counter_sets_spill_into_a_second_slice() -> None:
    rendered = render_node(resolve_inventory(parse_profile(TWELVE_GPUS, source="big.yaml"), node_name="n"))
    counter_slices = [s for s in rendered.slices if "sharedCounters" in s["spec"]]
    assert [len(s["spec"]["sharedCounters"]) for s in counter_slices] == [8, 4]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in rendered.slices} == {2 + 12}


def test_more_than_128_devices_spill_into_a_second_slice() -> None:
    rendered = render_node(resolve_inventory(parse_profile(MANY_NICS, source="nics.yaml"), node_name="n"))
    assert [len(s["spec"]["devices"]) for s in rendered.slices] == [128, 9 * 17 - 128]
    assert [s["spec"]["pool"]["resourceSliceCount"] for s in rendered.slices] == [2, 2]


def test_a_taint_lands_on_its_device_and_halves_the_slice_limit() -> None:
    inventory = resolve_inventory(parse_profile(MANY_NICS, source="nics.yaml"), node_name="n")
    taint: DeviceTaint = {"key": "fakedev.io/unhealthy", "value": "link-down", "effect": "NoSchedule"}
    ref = DeviceRef(driver="dra.net", pool="n", device="pci-0000-09-00-0")
    rendered = render_node(inventory, taints={ref: [taint]})
    assert [len(s["spec"]["devices"]) for s in rendered.slices] == [64, 64, 25]
    assert [s["spec"]["pool"]["resourceSliceCount"] for s in rendered.slices] == [3, 3, 3]
    tainted = {d["name"]: d["taints"] for s in rendered.slices for d in s["spec"]["devices"] if d.get("taints")}
    assert tainted == {"pci-0000-09-00-0": [taint]}


def test_taints_for_other_pools_are_ignored() -> None:
    inventory = resolve_inventory(parse_profile(MANY_NICS, source="nics.yaml"), node_name="n")
    taint: DeviceTaint = {"key": "fakedev.io/unhealthy", "effect": "NoSchedule"}
    rendered = render_node(
        inventory, taints={DeviceRef(driver="dra.net", pool="other", device="pci-0000-09-00-0"): [taint]}
    )
    assert [len(s["spec"]["devices"]) for s in rendered.slices] == [128, 25]


def test_generation_and_owner_reach_every_slice() -> None:
    owner: OwnerReference = {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "1234"}
    rendered = render_node(resolve_inventory(load_profile("dgx-h100"), node_name="n"), generation=7, owner=owner)
    assert {s["spec"]["pool"]["generation"] for s in rendered.slices} == {7}
    assert all(s["metadata"]["ownerReferences"] == [owner] for s in rendered.slices)


def _slice(**spec: Any) -> ResourceSlice:
    base = {
        "driver": "gpu.nvidia.com",
        "nodeName": "n",
        "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
    }
    document: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "n-0"},
        "spec": {**base, **spec},
    }
    return cast(ResourceSlice, document)


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"devices": [{"name": f"d{i}"} for i in range(129)]}, "129 devices (at most 128)"),
        (
            {
                "devices": [
                    {"name": f"d{i}", "consumesCounters": [{"counterSet": "c", "counters": {}}]} for i in range(65)
                ]
            },
            "65 devices (at most 64)",
        ),
        ({"devices": [{"name": "d", "attributes": {"a": {"string": "x" * 65}}}]}, "longer than 64"),
        (
            {"devices": [{"name": "d", "attributes": {f"a{i}": {"int": i} for i in range(33)}}]},
            "33 attributes and capacities",
        ),
        ({"devices": [{"name": "D"}]}, "not a DNS label"),
        (
            {
                "devices": [
                    {
                        "name": "d",
                        "consumesCounters": [
                            {"counterSet": "c", "counters": {}, "compatibilityGroups": ["a", "b", "c"]}
                        ],
                    }
                ]
            },
            "compatibility groups",
        ),
        ({"sharedCounters": [{"name": f"c{i}", "counters": {}} for i in range(9)]}, "9 counter sets"),
        (
            {"sharedCounters": [{"name": "c", "counters": {f"k{i}": {"value": "1"} for i in range(33)}}]},
            "more than 32 counters",
        ),
        ({"devices": [{"name": "d"}], "sharedCounters": [{"name": "c", "counters": {}}]}, "never both"),
    ],
    ids=[
        "129-devices",
        "65-with-counters",
        "long-string",
        "33-attributes",
        "bad-name",
        "3-groups",
        "9-sets",
        "33-counters",
        "devices-and-counters",
    ],
)
def test_limit_violations_are_named(spec: dict[str, object], problem: str) -> None:
    problems = slice_problems(_slice(**spec))
    assert any(problem in p for p in problems), problems


def test_render_error_when_limits_break() -> None:
    inventory = resolve_inventory(load_profile("seed-example"), node_name="n")
    too_many: list[DeviceTaint] = [{"key": f"k{i}", "effect": "None"} for i in range(17)]
    with pytest.raises(RenderError, match="more than 16 taints"):
        render_node(inventory, taints={DeviceRef(driver="gpu.example.com", pool="n", device="gpu-0"): too_many})


@pytest.mark.parametrize(
    ("text", "label"),
    [("1g.10gb", "1g10gb"), ("1g.10gb+me", "1g10gb-me"), ("H100XM-1-10CME", "h100xm-1-10cme")],
    ids=["dot", "plus", "upper"],
)
def test_sanitize_label(text: str, label: str) -> None:
    assert sanitize_label(text) == label


def test_slice_names_stay_valid_for_long_node_names() -> None:
    node = "n" * 250
    name = resource_slice(node_name=node, driver="gpu.nvidia.com", index=12)
    assert len(name) <= 253 and name.endswith("-12")
    assert name != resource_slice(node_name=node + "x", driver="gpu.nvidia.com", index=12)


def test_bench_render_reports_seconds() -> None:
    assert bench_render(2) > 0.0


def test_schema_drivers() -> None:
    assert {s.value: s.driver for s in Schema} == {
        "nvidia": "gpu.nvidia.com",
        "dranet": "dra.net",
        "example": "gpu.example.com",
    }


def test_devices_of_two_nodes_share_no_dict_a_caller_may_change() -> None:
    """Counters and capacities are built once per profile and copied: a change to one device's maps (a taint, a
    capacity) must not show on another device or another node."""
    first = render_node(resolve_inventory(load_profile("dgx-h100"), node_name="n1"), schemas=[Schema.NVIDIA])
    second = render_node(resolve_inventory(load_profile("dgx-h100"), node_name="n2"), schemas=[Schema.NVIDIA])
    before = _json(second.slices)
    changed = 0
    for piece in first.slices:
        for device in cast(list[dict[str, Any]], piece["spec"].get("devices", [])):
            device["capacity"]["extra"] = {"value": "1"}
            for consumption in device.get("consumesCounters", []):
                consumption["counters"]["extra"] = {"value": "1"}
            changed += 1
    assert changed > 100
    assert _json(second.slices) == before
    devices = [d for s in first.slices for d in cast(list[dict[str, Any]], s["spec"].get("devices", []))]
    assert len({id(d["capacity"]) for d in devices}) == len(devices)
