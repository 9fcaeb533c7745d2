"""Golden shapes: fakedev's render of each driver release against real ResourceSlices (tests/data/captures).

Each capture file names the releases it stands for and fakedev hardware equivalent to the captured node. Rendered at
each of those releases, fakedev's devices of every captured kind must carry the captured attribute names (all of them
and no others, or at least them where the capture was truncated), with the captured value types and formats, names of
the captured pattern, the captured capacity names and counter sets, and, where the capture has them, capacity and
counter values and every partition of one GPU. These compare with what the real driver published, so they fail
until the renderer of that release matches it: never loosen a capture to make one pass (say why in the capture's
`hardware_differences` when the difference is fakedev's hardware, not the release). Plus: one release renders one
shape for one kind of hardware, whatever else the profile says.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from fakedev.model.inventory import resolve_inventory
from fakedev.model.profile import parse_profile
from fakedev.model.releases import RELEASES, DranetRelease, NvidiaRelease, SchemaPin
from fakedev.render import PublishedDevice, RenderedNode, Schema, render_node
from fakedev.render.release_table import (
    DRANET_REFERENCE_NODES,
    NVIDIA_REFERENCE_NODES,
    PublishedKind,
    published_kind,
    reference_document,
    row_name,
)
from fakedev.render.types import DeviceAttribute

CAPTURES: Final = Path(__file__).parents[1] / "data" / "captures"
NODE: Final = "capture-node"
SCHEMAS: Final = {"gpu.nvidia.com": Schema.NVIDIA, "dra.net": Schema.DRANET}


def _captures() -> list[dict[str, Any]]:
    return [yaml.safe_load(path.read_text(encoding="utf-8")) for path in sorted(CAPTURES.glob("*.yaml"))]


@dataclass(frozen=True, kw_only=True)
class Case:
    capture: str
    release: str
    kind: PublishedKind | None = None

    @property
    def id(self) -> str:
        return f"{self.capture}@{self.release}" + (f"/{self.kind.value}" if self.kind else "")


@functools.cache
def _by_name() -> dict[str, dict[str, Any]]:
    return {c["capture"]: c for c in _captures()}


def _node_cases() -> list[Case]:
    return [Case(capture=c["capture"], release=r) for c in _captures() for r in c["releases"]]


def _kind_cases(*, modelled: bool = True) -> list[Case]:
    """Every captured (capture, release, kind); ``modelled`` False: the kinds fakedev has no hardware for yet."""
    return [
        Case(capture=c["capture"], release=r, kind=PublishedKind(d["kind"]))
        for c in _captures()
        for r in c["releases"]
        for d in c["devices"]
        if (d["kind"] in c.get("kinds_not_modelled", {})) is not modelled
    ]


@functools.cache
def _render(capture_name: str, release: str) -> RenderedNode:
    capture = _by_name()[capture_name]
    schema = SCHEMAS[capture["driver"]]
    profile = parse_profile(capture["equivalent_profile"], source=f"{capture_name}: equivalent_profile")
    pin = SchemaPin(schema=schema.value, release=RELEASES[schema.value](release))
    profile = replace(profile, releases=profile.releases.pinned(pin))
    # Interface addresses are live facts the plugin reads over netlink; the capture states the ones its node had.
    addresses = capture.get("equivalent_addresses") or None
    return render_node(resolve_inventory(profile, node_name=NODE), schemas=[schema], addresses=addresses)


def _entry(case: Case) -> dict[str, Any]:
    assert case.kind is not None
    return next(d for d in _by_name()[case.capture]["devices"] if d["kind"] == case.kind.value)


def _devices(case: Case) -> list[PublishedDevice]:
    rendered = _render(case.capture, case.release)
    return [d for d in rendered.devices.values() if published_kind(d) is case.kind]


def _ignored(capture: dict[str, Any]) -> set[str]:
    return set(capture.get("not_modelled", ())) | set(capture.get("hardware_differences", {}))


def _expected_attributes(case: Case) -> dict[str, dict[str, Any]]:
    capture = _by_name()[case.capture]
    renamed = capture.get("renamed_since_capture", {})
    ignored = _ignored(capture)
    return {
        renamed.get(name, name): spec
        for name, spec in _entry(case).get("attributes", {}).items()
        if renamed.get(name, name) not in ignored
    }


def _value_type(attribute: DeviceAttribute) -> str:
    [key] = attribute.keys()
    return key


def _text(attribute: DeviceAttribute) -> str:
    value = next(iter(attribute.values()))
    return json.dumps(value) if isinstance(value, bool) else str(value)


KIND_CASES: Final = _kind_cases()
UNMODELLED_CASES: Final = _kind_cases(modelled=False)
NODE_CASES: Final = _node_cases()


@pytest.mark.parametrize("case", UNMODELLED_CASES, ids=[c.id for c in UNMODELLED_CASES])
def test_a_kind_fakedev_cannot_model_yet_is_not_rendered(case: Case) -> None:
    """A known gap (the capture says why): the day fakedev renders the kind, the capture must be compared in full."""
    assert _devices(case) == [], f"{case.id}: fakedev renders {case.kind} now; drop it from kinds_not_modelled"


@pytest.mark.parametrize("case", KIND_CASES, ids=[c.id for c in KIND_CASES])
def test_the_captured_kind_is_rendered(case: Case) -> None:
    assert _devices(case), f"{case.id}: fakedev renders no {case.kind} device for the captured hardware"


@pytest.mark.parametrize("case", KIND_CASES, ids=[c.id for c in KIND_CASES])
def test_attribute_names_are_the_captured_ones(case: Case) -> None:
    capture = _by_name()[case.capture]
    expected = set(_expected_attributes(case))
    for device in _devices(case):
        actual = set(device.attributes) - _ignored(capture)
        extra, missing = sorted(actual - expected), sorted(expected - actual)
        if capture["compare"] == "exact":
            assert (extra, missing) == ([], []), (
                f"{device.ref.device}: only fakedev has {extra}, only the capture {missing}"
            )
        else:
            assert missing == [], f"{device.ref.device}: fakedev lacks the captured {missing}"


@pytest.mark.parametrize("case", KIND_CASES, ids=[c.id for c in KIND_CASES])
def test_attribute_types_and_formats_are_the_captured_ones(case: Case) -> None:
    expected = _expected_attributes(case)
    for device in _devices(case):
        for name, spec in expected.items():
            if name not in device.attributes:
                continue  # the names test reports it
            attribute = device.attributes[name]
            assert _value_type(attribute) == spec["type"], f"{device.ref.device}: {name}"
            if "format" in spec:
                assert re.fullmatch(spec["format"], _text(attribute)), (
                    f"{device.ref.device}: {name}={_text(attribute)!r} does not match {spec['format']!r}"
                )


@pytest.mark.parametrize("case", KIND_CASES, ids=[c.id for c in KIND_CASES])
def test_device_names_follow_the_captured_pattern(case: Case) -> None:
    pattern = _entry(case).get("name_pattern")
    examples = _entry(case).get("examples", [])
    if pattern is not None:
        assert all(re.fullmatch(pattern, e) for e in examples), "the capture's own examples must match its pattern"
    for device in _devices(case):
        assert pattern is None or re.fullmatch(pattern, device.ref.device), device.ref.device


@pytest.mark.parametrize("case", KIND_CASES, ids=[c.id for c in KIND_CASES])
def test_capacity_names_are_the_captured_ones(case: Case) -> None:
    if "capacity" not in _entry(case):
        return  # the capture does not show this kind's capacities
    expected = set(_entry(case)["capacity"])
    ignored = _ignored(_by_name()[case.capture])
    for device in _devices(case):
        assert sorted(set(device.capacity) - ignored) == sorted(expected), device.ref.device


def _cases_with(key: str) -> list[Case]:
    return [c for c in KIND_CASES if key in _entry(c)]


@pytest.mark.parametrize("case", _cases_with("capacity_values"), ids=lambda c: c.id)
def test_capacity_values_are_the_captured_ones(case: Case) -> None:
    expected = _entry(case)["capacity_values"]
    for device in _devices(case):
        actual = {name: device.capacity[name]["value"] for name in expected if name in device.capacity}
        assert actual == expected, device.ref.device


@pytest.mark.parametrize("case", _cases_with("profile_capacities"), ids=lambda c: c.id)
def test_each_partition_has_its_profiles_captured_capacities(case: Case) -> None:
    expected = _entry(case)["profile_capacities"]
    for device in _devices(case):
        profile = device.attributes["profile"].get("string", "")
        assert profile in expected, f"{device.ref.device}: profile {profile!r} is not in the capture"
        actual = {name: c["value"] for name, c in device.capacity.items()}
        assert actual == expected[profile], device.ref.device


@pytest.mark.parametrize("case", _cases_with("partitions_of_one_gpu"), ids=lambda c: c.id)
def test_one_gpu_has_exactly_the_captured_partitions(case: Case) -> None:
    spec = _entry(case)["partitions_of_one_gpu"]
    devices = _render(case.capture, case.release).devices.values()
    [gpu] = [d for d in devices if d.ref.device == spec["gpu"]]
    uuid = gpu.attributes["uuid"]
    names = {d.ref.device for d in _devices(case) if d.attributes.get("parentUUID") == uuid}
    assert (sorted(names - set(spec["names"])), sorted(set(spec["names"]) - names)) == ([], []), (
        "(only fakedev, only the capture)"
    )


@pytest.mark.parametrize("case", _cases_with("consumes_counters"), ids=lambda c: c.id)
def test_counter_consumption_is_the_captured_one(case: Case) -> None:
    spec = _entry(case)["consumes_counters"]
    names = {d.ref.device for d in _devices(case)}
    rendered = [d for s in _render(case.capture, case.release).slices for d in s["spec"].get("devices", [])]
    for device in (d for d in rendered if d["name"] in names):
        [consumption] = device.get("consumesCounters", [])
        assert re.fullmatch(spec["counter_set_pattern"], consumption["counterSet"]), device["name"]
        counters = set(consumption["counters"])
        slices = {c for c in counters if re.fullmatch(spec["memory_slice_pattern"], c)}
        assert (sorted(counters - slices), bool(slices)) == (sorted(spec["counters"]), True), device["name"]


@pytest.mark.parametrize("case", NODE_CASES, ids=[c.id for c in NODE_CASES])
def test_counter_sets_are_the_captured_ones(case: Case) -> None:
    captured = _by_name()[case.capture].get("counter_sets", [])
    rendered = [cs for s in _render(case.capture, case.release).slices for cs in s["spec"].get("sharedCounters", [])]
    if not captured:
        assert rendered == [], "the captured node publishes no counter sets"
        return
    [spec] = captured
    assert rendered, "the captured node publishes counter sets"
    for counter_set in rendered:
        assert re.fullmatch(spec["name_pattern"], counter_set["name"]), counter_set["name"]
        assert sorted(counter_set["counters"]) == sorted(spec["counters"]), counter_set["name"]
        wanted = spec.get("counter_values", {})
        values = {n: counter_set["counters"][n]["value"] for n in wanted if n in counter_set["counters"]}
        assert values == wanted, counter_set["name"]


@pytest.mark.parametrize("case", [c for c in NODE_CASES if "pool" in _by_name()[c.capture]], ids=lambda c: c.id)
def test_the_pool_has_the_captured_slice_count(case: Case) -> None:
    expected = _by_name()[case.capture]["pool"]["resourceSliceCount"]
    slices = _render(case.capture, case.release).slices
    assert {s["spec"]["pool"]["name"] for s in slices} == {NODE}
    assert [s["spec"]["pool"]["resourceSliceCount"] for s in slices] == [expected] * len(slices)


VALUE_TYPES: Final = {"string", "int", "bool", "version"}


@pytest.mark.parametrize("capture", _captures(), ids=lambda c: c["capture"])
def test_a_capture_file_is_consistent(capture: dict[str, Any]) -> None:
    """The test data itself: known driver, releases and kinds; each example matches its own format and pattern."""
    schema = SCHEMAS[capture["driver"]]
    assert all(RELEASES[schema.value](r) for r in capture["releases"])
    assert capture["compare"] in {"exact", "subset"}
    assert capture["source"]["repository"] and capture["source"]["location"] and capture["certainty"]
    kinds = [PublishedKind(d["kind"]) for d in capture["devices"]]
    assert len(kinds) == len(set(kinds)), "one entry per kind"
    gaps = capture.get("kinds_not_modelled", {})
    assert set(gaps) <= {k.value for k in kinds} and all(gaps.values()), "each gap is a captured kind, with a reason"
    for device in capture["devices"]:
        for name, spec in device.get("attributes", {}).items():
            assert spec["type"] in VALUE_TYPES, name
            if "format" in spec and "example" in spec:
                example = json.dumps(spec["example"]) if isinstance(spec["example"], bool) else str(spec["example"])
                assert re.fullmatch(spec["format"], example), f"{name}: example {example!r}"
        for example in device.get("examples", []):
            assert re.fullmatch(device["name_pattern"], example), example


# -- one release, one shape -----------------------------------------------------------------------------------------

Shape = dict[PublishedKind, set[tuple[frozenset[tuple[str, str]], frozenset[str]]]]


def _shape(rendered: RenderedNode, *, driver: str) -> Shape:
    shape: Shape = {}
    for device in rendered.devices.values():
        if device.ref.driver != driver:
            continue
        attributes = frozenset((row_name(n), _value_type(v)) for n, v in device.attributes.items())
        capacity = frozenset(row_name(n) for n in device.capacity)
        shape.setdefault(published_kind(device), set()).add((attributes, capacity))
    return shape


def _other_details(document: dict[str, Any]) -> dict[str, Any]:
    """The same kinds of hardware with everything else changed: name, description, NUMA ids and CPUs, PCIe roots and
    addresses, driver versions, and twice as many of each device."""
    other = copy.deepcopy(document)
    other["name"] = "another-node"
    other["description"] = "the same hardware, other details"
    other["nvidia"] = {"driverVersion": "595.58.03", "cudaDriverVersion": "13.2"}
    other["numaNodes"] = [{"id": 3, "cpus": "8-15"}, {"id": 5, "cpus": "16-23"}]
    other["pcieRoots"] = [{"name": "pci0000:40", "numaNode": 3}, {"name": "pci0001:80", "numaNode": 5}]
    for key in ("gpus", "nics"):
        items = other.get(key, [])
        other[key] = [dict(i, root=r) for r in ("pci0000:40", "pci0001:80") for i in items]
    other["virtualNics"] = [dict(v, name=f"{v['name']}x{n}") for n in (1, 2) for v in other.get("virtualNics", [])]
    if not other["virtualNics"]:
        del other["virtualNics"]
    return other


def _shape_cases() -> list[tuple[Schema, NvidiaRelease | DranetRelease, frozenset[PublishedKind]]]:
    nvidia = [(Schema.NVIDIA, r, k) for r, nodes in NVIDIA_REFERENCE_NODES.items() for k in nodes]
    dranet = [(Schema.DRANET, r, k) for r, nodes in DRANET_REFERENCE_NODES.items() for k in nodes]
    return [*nvidia, *dranet]


SHAPE_CASES: Final = _shape_cases()


@pytest.mark.parametrize(
    ("schema", "release", "kinds"),
    SHAPE_CASES,
    ids=[f"{s.value}@{r.value}/{'+'.join(sorted(k))}" for s, r, k in SHAPE_CASES],
)
def test_a_release_renders_one_shape_per_kind_whatever_else_the_profile_says(
    schema: Schema, release: NvidiaRelease | DranetRelease, kinds: frozenset[PublishedKind]
) -> None:
    document = reference_document(schema=schema, release=release, kinds=kinds)
    shapes = []
    for node, variant in (("reference-node", document), ("another-node", _other_details(document))):
        profile = parse_profile(json.dumps(variant), source=f"{variant['name']}.yaml")
        shapes.append(_shape(render_node(resolve_inventory(profile, node_name=node)), driver=schema.driver))
    base, other = shapes
    assert base == other
    assert {kind: len(s) for kind, s in base.items()} == dict.fromkeys(base, 1), "one shape per kind"
