"""The lowest CDI version a spec's content needs (rules of the reference specs-go/version.go)."""

from __future__ import annotations

import pytest

from cdi import (
    KNOWN_VERSIONS,
    WRITABLE_VERSIONS,
    ContainerEdits,
    DeviceNode,
    IntelRdt,
    Mount,
    NetDevice,
    Spec,
    compute_minimum_version,
    compute_required_version,
    with_minimum_version,
)
from tests.helpers import one_device_spec

MINIMUM_CASES = [
    pytest.param(one_device_spec(), "0.5.0", id="plain-env-floor"),
    pytest.param(
        one_device_spec(edits=ContainerEdits(mounts=(Mount(host_path="/a", container_path="/a", type="bind"),))),
        "0.5.0",
        id="mount-type-0.4-lifted-to-floor",
    ),
    pytest.param(one_device_spec(name="0abc"), "0.5.0", id="device-name-leading-digit"),
    pytest.param(
        one_device_spec(edits=ContainerEdits(device_nodes=(DeviceNode(path="/dev/a", host_path="/dev/b"),))),
        "0.5.0",
        id="device-node-host-path",
    ),
    pytest.param(
        one_device_spec(edits=ContainerEdits(device_nodes=(DeviceNode(path="/dev/a", permissions="r"),))),
        "0.5.0",
        id="device-node-permissions-need-nothing",
    ),
    pytest.param(one_device_spec(annotations={"a": "b"}), "0.6.0", id="spec-annotations"),
    pytest.param(one_device_spec(device_annotations={"a": "b"}), "0.6.0", id="device-annotations"),
    pytest.param(one_device_spec(kind="example.com/gpu.v2"), "0.6.0", id="dot-in-class"),
    pytest.param(one_device_spec(kind="example.com/gpu"), "0.5.0", id="dot-in-vendor-only"),
    pytest.param(
        one_device_spec(edits=ContainerEdits(intel_rdt=IntelRdt(clos_id="c"))), "0.7.0", id="device-intel-rdt"
    ),
    pytest.param(one_device_spec(spec_edits=ContainerEdits(intel_rdt=IntelRdt())), "0.7.0", id="spec-intel-rdt"),
    pytest.param(one_device_spec(edits=ContainerEdits(additional_gids=(44,))), "0.7.0", id="device-additional-gids"),
    pytest.param(one_device_spec(spec_edits=ContainerEdits(additional_gids=(44,))), "0.7.0", id="spec-additional-gids"),
    pytest.param(
        one_device_spec(edits=ContainerEdits(net_devices=(NetDevice(host_interface_name="eth1", name="net1"),))),
        "1.1.0",
        id="device-net-devices",
    ),
    pytest.param(
        one_device_spec(spec_edits=ContainerEdits(net_devices=(NetDevice(host_interface_name="eth1", name="net1"),))),
        "1.1.0",
        id="spec-net-devices",
    ),
    pytest.param(
        one_device_spec(edits=ContainerEdits(intel_rdt=IntelRdt(schemata=()))), "1.1.0", id="intel-rdt-schemata-present"
    ),
    pytest.param(
        one_device_spec(edits=ContainerEdits(intel_rdt=IntelRdt(enable_monitoring=True))),
        "1.1.0",
        id="intel-rdt-monitoring",
    ),
    pytest.param(
        one_device_spec(annotations={"a": "b"}, edits=ContainerEdits(additional_gids=(5,))),
        "0.7.0",
        id="newest-feature-wins",
    ),
]


@pytest.mark.parametrize(("spec", "expected"), MINIMUM_CASES)
def test_minimum_version_is_the_lowest_writable_version_the_content_needs(spec: Spec, expected: str) -> None:
    assert compute_minimum_version(spec) == expected


REQUIRED_CASES = [
    pytest.param(one_device_spec(), "0.3.0", id="nothing-special-earliest"),
    pytest.param(
        one_device_spec(edits=ContainerEdits(mounts=(Mount(host_path="/a", container_path="/a", type="bind"),))),
        "0.4.0",
        id="mount-type",
    ),
    pytest.param(one_device_spec(name="7"), "0.5.0", id="leading-digit"),
]


@pytest.mark.parametrize(("spec", "expected"), REQUIRED_CASES)
def test_required_version_goes_below_the_writing_floor(spec: Spec, expected: str) -> None:
    assert compute_required_version(spec) == expected


def test_writable_versions_span_0_5_to_1_1() -> None:
    assert WRITABLE_VERSIONS == ("0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
    assert KNOWN_VERSIONS[-1] == "1.1.0"


def test_with_minimum_version_sets_only_the_version() -> None:
    spec = one_device_spec(annotations={"a": "b"})

    updated = with_minimum_version(spec)

    assert updated.version == "0.6.0"
    assert updated.devices == spec.devices
