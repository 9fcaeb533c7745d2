"""Applying CDI edits to an OCI spec the way a runtime does (reference ContainerEdits.Apply / InjectDevices)."""

from __future__ import annotations

import copy
import errno
from pathlib import Path
from typing import Any

import pytest

from cdi import (
    ContainerEdits,
    Device,
    DeviceNode,
    Hook,
    HostDevice,
    InjectError,
    IntelRdt,
    LoadedSpec,
    Mount,
    NetDevice,
    ResolveError,
    ScanResult,
    Spec,
    apply_edits,
    build_registry,
    inject_devices,
)

HOST_DEVICES = {
    "/dev/fake0": HostDevice(type="c", major=240, minor=0, file_mode=0o666),
    "/host/dev/fake1": HostDevice(type="c", major=240, minor=1, file_mode=0o660),
    "/dev/blk0": HostDevice(type="b", major=8, minor=0, file_mode=0o660),
    "/dev/fifo": HostDevice(type="p", major=0, minor=0, file_mode=0o600),
}


def fake_stat(path: str) -> HostDevice:
    """Stands in for stat-ing the host: only HOST_DEVICES exist."""
    try:
        return HOST_DEVICES[path]
    except KeyError:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path) from None


def apply(edits: ContainerEdits, oci: dict[str, Any] | None = None) -> dict[str, Any]:
    return apply_edits(oci_spec=oci or {}, edits=[edits], stat_device=fake_stat)


def test_env_overrides_by_name_and_appends_new_names() -> None:
    oci = {"process": {"env": ["PATH=/bin", "A=old"]}}

    result = apply(ContainerEdits(env=("A=new", "B=1")), oci)

    assert result["process"]["env"] == ["PATH=/bin", "A=new", "B=1"]


def test_device_node_numbers_and_mode_come_from_the_host() -> None:
    result = apply(ContainerEdits(device_nodes=(DeviceNode(path="/dev/fake0"),)))

    assert result["linux"]["devices"] == [
        {"path": "/dev/fake0", "type": "c", "major": 240, "minor": 0, "fileMode": 0o666}
    ]


def test_device_node_host_path_is_stat_ed_instead_of_the_container_path() -> None:
    result = apply(ContainerEdits(device_nodes=(DeviceNode(path="/dev/fake1", host_path="/host/dev/fake1"),)))

    assert result["linux"]["devices"] == [
        {"path": "/dev/fake1", "type": "c", "major": 240, "minor": 1, "fileMode": 0o660}
    ]


def test_a_fully_specified_device_node_needs_no_host_device() -> None:
    node = DeviceNode(path="/dev/absent", type="c", major=10, minor=200, uid=1000, gid=44)

    result = apply(ContainerEdits(device_nodes=(node,)))

    assert result["linux"]["devices"] == [
        {"path": "/dev/absent", "type": "c", "major": 10, "minor": 200, "uid": 1000, "gid": 44}
    ]


def test_a_partly_specified_missing_host_device_is_an_error() -> None:
    with pytest.raises(InjectError, match="cannot stat CDI host device '/dev/absent'"):
        apply(ContainerEdits(device_nodes=(DeviceNode(path="/dev/absent", type="c"),)))


def test_a_type_that_differs_from_the_host_device_is_an_error() -> None:
    with pytest.raises(InjectError, match="does not match host device"):
        apply(ContainerEdits(device_nodes=(DeviceNode(path="/dev/blk0", type="c"),)))


def test_device_node_owner_defaults_to_the_non_root_process_user() -> None:
    oci = {"process": {"user": {"uid": 1000, "gid": 1000}}}

    result = apply(ContainerEdits(device_nodes=(DeviceNode(path="/dev/fake0", gid=44),)), oci)

    assert (result["linux"]["devices"][0]["uid"], result["linux"]["devices"][0]["gid"]) == (1000, 44)


def test_a_device_node_replaces_an_existing_one_with_the_same_path() -> None:
    oci = {"linux": {"devices": [{"path": "/dev/fake0", "type": "c", "major": 1, "minor": 1}, {"path": "/dev/x"}]}}

    result = apply(ContainerEdits(device_nodes=(DeviceNode(path="/dev/fake0"),)), oci)

    assert [(d["path"], d.get("major")) for d in result["linux"]["devices"]] == [("/dev/x", None), ("/dev/fake0", 240)]


@pytest.mark.parametrize(
    ("node", "rules"),
    [
        pytest.param(
            DeviceNode(path="/dev/fake0"),
            [{"allow": True, "type": "c", "major": 240, "minor": 0, "access": "rwm"}],
            id="default-rwm",
        ),
        pytest.param(
            DeviceNode(path="/dev/fake0", permissions="r"),
            [{"allow": True, "type": "c", "major": 240, "minor": 0, "access": "r"}],
            id="read-only",
        ),
        pytest.param(
            DeviceNode(path="/dev/fake0", permissions="none"),
            [{"allow": True, "type": "c", "major": 240, "minor": 0}],
            id="none-no-access",
        ),
        pytest.param(
            DeviceNode(path="/dev/blk0"),
            [{"allow": True, "type": "b", "major": 8, "minor": 0, "access": "rwm"}],
            id="block",
        ),
        pytest.param(DeviceNode(path="/dev/fifo"), None, id="fifo-no-rule"),
        pytest.param(DeviceNode(path="/dev/u0", type="u", major=4, minor=1), None, id="unbuffered-no-rule"),
    ],
)
def test_cgroup_device_rules(node: DeviceNode, rules: list[dict[str, Any]] | None) -> None:
    result = apply(ContainerEdits(device_nodes=(node,)))

    assert result["linux"].get("resources", {}).get("devices") == rules


def test_net_devices_are_keyed_by_host_interface() -> None:
    edits = ContainerEdits(
        net_devices=(
            NetDevice(host_interface_name="fk0v1", name="net1"),
            NetDevice(host_interface_name="fk0v2", name="net2"),
        )
    )

    result = apply(edits)

    assert result["linux"]["netDevices"] == {"fk0v1": {"name": "net1"}, "fk0v2": {"name": "net2"}}


def test_mounts_replace_same_destination_and_sort_by_depth() -> None:
    oci = {
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts"},
            {"destination": "/var/run/meta", "source": "/old"},
        ]
    }
    edits = ContainerEdits(
        mounts=(
            Mount(host_path="/h/meta", container_path="/var/run/meta", options=("ro", "bind")),
            Mount(host_path="/h/lib", container_path="/usr/lib/fake", type="bind", options=("ro",)),
            Mount(host_path="/h/x", container_path="/x"),
        )
    )

    result = apply(edits, oci)

    assert result["mounts"] == [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/x", "source": "/h/x"},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts"},
        {"destination": "/var/run/meta", "source": "/h/meta", "options": ["ro", "bind"]},
        {"destination": "/usr/lib/fake", "source": "/h/lib", "type": "bind", "options": ["ro"]},
    ]


@pytest.mark.parametrize(
    ("mount", "options"),
    [
        pytest.param(
            Mount(host_path="/h", container_path="/c", options=("ro", "bind")), ["ro", "bind", "idmap"], id="bind"
        ),
        pytest.param(Mount(host_path="/h", container_path="/c", options=("rbind",)), ["rbind", "ridmap"], id="rbind"),
        pytest.param(Mount(host_path="/h", container_path="/c", type="bind"), ["idmap"], id="bind-type"),
        pytest.param(
            Mount(host_path="/h", container_path="/c", options=("bind", "idmap")),
            ["bind", "idmap"],
            id="already-mapped",
        ),
        pytest.param(Mount(host_path="tmpfs", container_path="/c", type="tmpfs"), None, id="not-a-bind"),
    ],
)
def test_bind_mounts_are_id_mapped_in_a_user_namespace(mount: Mount, options: list[str] | None) -> None:
    oci = {"linux": {"namespaces": [{"type": "mount"}, {"type": "user"}]}}

    result = apply(ContainerEdits(mounts=(mount,)), oci)

    assert result["mounts"][0].get("options") == options


def test_hooks_are_appended_per_phase() -> None:
    oci = {"hooks": {"createContainer": [{"path": "/existing"}]}}
    edits = ContainerEdits(
        hooks=(
            Hook(hook_name="createContainer", path="/usr/bin/fake-hook", args=("fake-hook", "create"), timeout=5),
            Hook(hook_name="poststop", path="/usr/bin/fake-hook", env=("A=1",)),
        )
    )

    result = apply(edits, oci)

    assert result["hooks"] == {
        "createContainer": [
            {"path": "/existing"},
            {"path": "/usr/bin/fake-hook", "args": ["fake-hook", "create"], "timeout": 5},
        ],
        "poststop": [{"path": "/usr/bin/fake-hook", "env": ["A=1"]}],
    }


def test_an_unknown_hook_name_is_refused() -> None:
    with pytest.raises(InjectError, match="unknown CDI hook name 'preStart'"):
        apply(ContainerEdits(hooks=(Hook(hook_name="preStart", path="/h"),)))


def test_additional_gids_are_added_once_and_zero_is_skipped() -> None:
    oci = {"process": {"user": {"uid": 1000, "gid": 1000, "additionalGids": [44]}}}

    result = apply(ContainerEdits(additional_gids=(0, 44, 45, 45)), oci)

    assert result["process"]["user"] == {"uid": 1000, "gid": 1000, "additionalGids": [44, 45]}


def test_the_last_intel_rdt_wins() -> None:
    edits = [
        ContainerEdits(intel_rdt=IntelRdt(clos_id="a")),
        ContainerEdits(intel_rdt=IntelRdt(clos_id="b", schemata=())),
    ]

    result = apply_edits(oci_spec={}, edits=edits, stat_device=fake_stat)

    assert result["linux"]["intelRdt"] == {"closID": "b"}


def test_the_input_spec_is_not_mutated() -> None:
    oci = {"process": {"env": ["A=1"]}, "mounts": [{"destination": "/a/b"}, {"destination": "/c"}]}
    before = copy.deepcopy(oci)

    apply(ContainerEdits(env=("A=2",), mounts=(Mount(host_path="/h", container_path="/d"),)), oci)

    assert oci == before


def make_loaded(*, path: str, kind: str, spec_env: tuple[str, ...], devices: dict[str, str]) -> LoadedSpec:
    spec = Spec(
        version="0.5.0",
        kind=kind,
        devices=tuple(Device(name=n, container_edits=ContainerEdits(env=(e,))) for n, e in devices.items()),
        container_edits=ContainerEdits(env=spec_env),
    )
    return LoadedSpec(spec=spec, path=Path(path), priority=0)


def test_spec_edits_apply_once_just_before_their_first_device() -> None:
    registry = build_registry(
        scan=ScanResult(
            specs=(
                make_loaded(
                    path="/c/gpu.json", kind="v.com/gpu", spec_env=("GPU_SPEC=1",), devices={"g0": "G0=1", "g1": "G1=1"}
                ),
                make_loaded(path="/c/nic.json", kind="v.com/nic", spec_env=("NIC_SPEC=1",), devices={"n0": "N0=1"}),
            ),
            errors=(),
        )
    )

    result = inject_devices(
        oci_spec={"process": {"env": []}},
        registry=registry,
        device_ids=["v.com/gpu=g1", "v.com/nic=n0", "v.com/gpu=g0"],
        stat_device=fake_stat,
    )

    assert result["process"]["env"] == ["GPU_SPEC=1", "G1=1", "NIC_SPEC=1", "N0=1", "G0=1"]


def test_inject_devices_refuses_unknown_ids_before_applying_anything() -> None:
    registry = build_registry(scan=ScanResult(specs=(), errors=()))

    with pytest.raises(ResolveError) as caught:
        inject_devices(oci_spec={}, registry=registry, device_ids=["v.com/gpu=g9"], stat_device=fake_stat)

    assert caught.value.unresolved == ("v.com/gpu=g9",)
