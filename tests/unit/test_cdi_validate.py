"""Each CDI spec rule is enforced and reported with its JSON path and the file."""

from __future__ import annotations

import functools

import pytest

from cdi import (
    ContainerEdits,
    Device,
    DeviceNode,
    Hook,
    IntelRdt,
    Mount,
    NetDevice,
    Spec,
    SpecError,
    find_spec_problems,
    validate_spec,
)
from tests.helpers import one_device_spec

GOOD_EDITS = ContainerEdits(
    env=("FAKE_VISIBLE_DEVICES=0",),
    device_nodes=(DeviceNode(path="/dev/fake0", type="c", major=240, minor=0, permissions="rw"),),
    mounts=(Mount(host_path="/tmp/meta", container_path="/var/run/meta", options=("ro", "bind")),),
    hooks=(Hook(hook_name="createContainer", path="/usr/bin/hook", timeout=3),),
)


# Every broken spec below differs from a valid one in one place: by default its device carries every kind of edit.
make_spec = functools.partial(one_device_spec, edits=GOOD_EDITS)


D = "$.devices[0].containerEdits"

BROKEN_SPECS = [
    pytest.param(make_spec(version="0.9.0"), "$.cdiVersion", "unknown CDI version", id="unknown-version"),
    pytest.param(
        make_spec(version="0.5.0", annotations={"a": "b"}),
        "$.cdiVersion",
        "annotations or a '.' in the kind's class needs at least 0.6.0",
        id="version-too-old-annotations",
    ),
    pytest.param(
        make_spec(version="1.0.0", edits=ContainerEdits(net_devices=(NetDevice(host_interface_name="e1", name="n1"),))),
        "$.cdiVersion",
        "needs at least 1.1.0",
        id="version-too-old-net-devices",
    ),
    pytest.param(make_spec(kind="fake.example.com"), "$.kind", "vendor/class", id="kind-without-class"),
    pytest.param(make_spec(kind="fake.example.com/gpu/x"), "$.kind", "invalid character '/'", id="kind-two-slashes"),
    pytest.param(make_spec(kind="-fake/gpu"), "$.kind", "must start with a letter", id="kind-bad-vendor"),
    pytest.param(make_spec(devices=()), "$.devices", "at least one device", id="no-devices"),
    pytest.param(
        make_spec(devices=(Device(name="gpu 0", container_edits=GOOD_EDITS),)),
        "$.devices[0].name",
        "invalid character ' '",
        id="device-name-chars",
    ),
    pytest.param(
        make_spec(
            devices=(Device(name="gpu0", container_edits=GOOD_EDITS), Device(name="gpu0", container_edits=GOOD_EDITS))
        ),
        "$.devices[1].name",
        "duplicate device name 'gpu0' (also $.devices[0])",
        id="duplicate-device",
    ),
    pytest.param(
        make_spec(edits=ContainerEdits(), spec_edits=GOOD_EDITS),
        D,
        "non-empty container edits",
        id="empty-device-edits-spec-edits-do-not-count",
    ),
    pytest.param(make_spec(edits=ContainerEdits(env=("=1",))), f"{D}.env[0]", "NAME=VALUE", id="env-empty-name"),
    pytest.param(make_spec(edits=ContainerEdits(env=("NOVALUE",))), f"{D}.env[0]", "NAME=VALUE", id="env-no-equals"),
    pytest.param(
        make_spec(edits=ContainerEdits(device_nodes=(DeviceNode(path="dev/fake0"),))),
        f"{D}.deviceNodes[0].path",
        "must be absolute",
        id="device-node-relative-path",
    ),
    pytest.param(
        make_spec(edits=ContainerEdits(device_nodes=(DeviceNode(path=""),))),
        f"{D}.deviceNodes[0].path",
        "is empty",
        id="device-node-empty-path",
    ),
    pytest.param(
        make_spec(edits=ContainerEdits(device_nodes=(DeviceNode(path="/dev/a", host_path="a"),))),
        f"{D}.deviceNodes[0].hostPath",
        "must be absolute",
        id="device-node-relative-host-path",
    ),
    pytest.param(
        make_spec(edits=ContainerEdits(device_nodes=(DeviceNode(path="/dev/a", type="x"),))),
        f"{D}.deviceNodes[0].type",
        "not one of b, c, u, p",
        id="device-node-type",
    ),
    pytest.param(
        make_spec(edits=ContainerEdits(device_nodes=(DeviceNode(path="/dev/a", permissions="rx"),))),
        f"{D}.deviceNodes[0].permissions",
        "'rwm' or 'none'",
        id="device-node-permissions",
    ),
    pytest.param(
        make_spec(edits=ContainerEdits(device_nodes=(DeviceNode(path="/dev/a", uid=-1),))),
        f"{D}.deviceNodes[0].uid",
        "uint32",
        id="device-node-uid-range",
    ),
    pytest.param(
        make_spec(edits=ContainerEdits(device_nodes=(DeviceNode(path="/dev/a", major=2**63),))),
        f"{D}.deviceNodes[0].major",
        "int64",
        id="device-node-major-range",
    ),
    pytest.param(
        make_spec(edits=ContainerEdits(mounts=(Mount(host_path="", container_path="/x"),))),
        f"{D}.mounts[0].hostPath",
        "host path is empty",
        id="mount-empty-host-path",
    ),
    pytest.param(
        make_spec(edits=ContainerEdits(mounts=(Mount(host_path="/x", container_path="x"),))),
        f"{D}.mounts[0].containerPath",
        "must be absolute",
        id="mount-relative-container-path",
    ),
    pytest.param(
        make_spec(edits=ContainerEdits(hooks=(Hook(hook_name="preStart", path="/bin/h"),))),
        f"{D}.hooks[0].hookName",
        "unknown hook name 'preStart'",
        id="hook-name",
    ),
    pytest.param(
        make_spec(edits=ContainerEdits(hooks=(Hook(hook_name="poststop", path="h"),))),
        f"{D}.hooks[0].path",
        "must be absolute",
        id="hook-relative-path",
    ),
    pytest.param(
        make_spec(edits=ContainerEdits(hooks=(Hook(hook_name="poststop", path="/h", env=("X",)),))),
        f"{D}.hooks[0].env[0]",
        "NAME=VALUE",
        id="hook-env",
    ),
    pytest.param(
        make_spec(edits=ContainerEdits(hooks=(Hook(hook_name="poststop", path="/h", timeout=0),))),
        f"{D}.hooks[0].timeout",
        "greater than zero",
        id="hook-timeout",
    ),
    pytest.param(
        make_spec(version="1.1.0", edits=ContainerEdits(net_devices=(NetDevice(host_interface_name="", name="n1"),))),
        f"{D}.netDevices[0].hostInterfaceName",
        "is empty",
        id="net-device-empty-host-name",
    ),
    pytest.param(
        make_spec(version="1.1.0", edits=ContainerEdits(net_devices=(NetDevice(host_interface_name="e1", name=""),))),
        f"{D}.netDevices[0].name",
        "is empty",
        id="net-device-empty-name",
    ),
    pytest.param(
        make_spec(
            version="1.1.0",
            edits=ContainerEdits(
                net_devices=(
                    NetDevice(host_interface_name="e1", name="n1"),
                    NetDevice(host_interface_name="e1", name="n2"),
                )
            ),
        ),
        f"{D}.netDevices[1].hostInterfaceName",
        "duplicate hostInterfaceName 'e1'",
        id="net-device-duplicate-host-name",
    ),
    pytest.param(
        make_spec(
            version="1.1.0",
            edits=ContainerEdits(
                net_devices=(
                    NetDevice(host_interface_name="e1", name="n1"),
                    NetDevice(host_interface_name="e2", name="n1"),
                )
            ),
        ),
        f"{D}.netDevices[1].name",
        "duplicate name 'n1'",
        id="net-device-duplicate-name",
    ),
    pytest.param(
        make_spec(
            version="1.1.0",
            edits=ContainerEdits(net_devices=(NetDevice(host_interface_name="e1", name="a-very-long-name0"),)),
        ),
        f"{D}.netDevices[0].name",
        "1-15 characters",
        id="net-device-name-too-long",
    ),
    pytest.param(
        make_spec(version="0.7.0", edits=ContainerEdits(intel_rdt=IntelRdt(clos_id="a/b"))),
        f"{D}.intelRdt.closID",
        "valid file name",
        id="intel-rdt-clos-id",
    ),
    pytest.param(
        make_spec(version="0.7.0", edits=ContainerEdits(additional_gids=(2**32,))),
        f"{D}.additionalGids[0]",
        "uint32",
        id="additional-gid-range",
    ),
    pytest.param(
        make_spec(version="0.6.0", annotations={"bad key": "v"}),
        "$.annotations['bad key']",
        "annotation key name",
        id="annotation-key",
    ),
    pytest.param(
        make_spec(version="0.6.0", annotations={"a/b/c": "v"}),
        "$.annotations['a/b/c']",
        "at most one '/'",
        id="annotation-key-two-slashes",
    ),
    pytest.param(
        make_spec(version="0.6.0", annotations={"a": "x" * 300_000}),
        "$.annotations",
        "more than the limit",
        id="annotations-too-large",
    ),
    pytest.param(
        make_spec(spec_edits=ContainerEdits(mounts=(Mount(host_path="/x", container_path="rel"),))),
        "$.containerEdits.mounts[0].containerPath",
        "must be absolute",
        id="spec-level-edits-checked",
    ),
]


@pytest.mark.parametrize(("spec", "json_path", "rule"), BROKEN_SPECS)
def test_each_rule_is_reported_at_its_json_path(spec: Spec, json_path: str, rule: str) -> None:
    problems = find_spec_problems(spec)

    assert [(p.json_path, rule in p.rule) for p in problems] == [(json_path, True)]


def test_a_valid_spec_has_no_problems() -> None:
    assert find_spec_problems(make_spec()) == ()


@pytest.mark.parametrize("version", ["v0.5.0", "0.3.0", "1.1.0"], ids=["leading-v", "old-known", "newest"])
def test_any_known_version_at_or_above_the_requirement_is_accepted(version: str) -> None:
    assert find_spec_problems(make_spec(version=version, edits=ContainerEdits(env=("A=1",)))) == ()


@pytest.mark.parametrize(
    "permissions", ["", "r", "rwm", "mrw", "none"], ids=["default", "r", "rwm", "reordered", "none"]
)
def test_device_node_permissions_accepted(permissions: str) -> None:
    spec = make_spec(edits=ContainerEdits(device_nodes=(DeviceNode(path="/dev/a", permissions=permissions),)))

    assert find_spec_problems(spec) == ()


def test_validate_spec_names_the_file_and_every_problem() -> None:
    spec = make_spec(kind="nokind", edits=ContainerEdits(env=("X",)))

    with pytest.raises(SpecError) as caught:
        validate_spec(spec, source="/var/run/cdi/fake.json")

    assert str(caught.value).splitlines() == [
        "/var/run/cdi/fake.json: $.kind: kind 'nokind' must have the form vendor/class",
        "/var/run/cdi/fake.json: $.devices[0].containerEdits.env[0]: "
        "environment entry 'X' must be NAME=VALUE with a non-empty NAME",
    ]
