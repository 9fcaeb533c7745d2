"""Producer to runtime: write specs into temp CDI dirs, resolve the IDs, inject into an OCI config.json."""

from __future__ import annotations

import copy
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from cdi import (
    ContainerEdits,
    Device,
    DeviceNode,
    Hook,
    Mount,
    NetDevice,
    ResolveError,
    Spec,
    find_spec_problems,
    inject_devices,
    load_registry,
    render_qualified_name,
    with_minimum_version,
    write_spec,
)

CLAIM_UID = "0c8b9a3e-5d41-4f3a-9d7e-1a2b3c4d5e6f"

# What `runc spec` produces, trimmed to the fields the edits touch.
BASE_OCI: dict[str, Any] = {
    "ociVersion": "1.2.0",
    "process": {
        "terminal": False,
        "user": {"uid": 1000, "gid": 1000},
        "args": ["sh"],
        "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm"],
        "cwd": "/",
    },
    "root": {"path": "rootfs", "readonly": True},
    "hostname": "runc",
    "mounts": [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
    ],
    "linux": {
        "resources": {"devices": [{"allow": False, "access": "rwm"}]},
        "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
    },
}


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    layout = {name: tmp_path / name for name in ("etc-cdi", "run-cdi", "host", "metadata")}
    for path in layout.values():
        path.mkdir()
    os.mkfifo(layout["host"] / "fake-events")
    return layout


def gpu_spec(*, host: Path) -> Spec:
    device = Device(
        name=f"{CLAIM_UID}_gpu0",
        container_edits=ContainerEdits(
            env=("FAKE_VISIBLE_DEVICES=GPU-0", "TERM=dumb"),
            device_nodes=(
                DeviceNode(path="/dev/fake0", host_path="/dev/null", permissions="rw"),
                DeviceNode(path="/dev/fake-events", host_path=str(host / "fake-events")),
            ),
        ),
    )
    spec = Spec(
        version="",
        kind="fake.example.com/gpu",
        devices=(device,),
        container_edits=ContainerEdits(
            env=("FAKE_DRIVER_VERSION=1.0",),
            hooks=(Hook(hook_name="createContainer", path="/usr/bin/fake-hook", args=("fake-hook", "ldcache")),),
        ),
    )
    return with_minimum_version(spec)


def nic_spec() -> Spec:
    device = Device(
        name=f"{CLAIM_UID}_nic0",
        container_edits=ContainerEdits(net_devices=(NetDevice(host_interface_name="fk0vf1", name="net1"),)),
    )
    return with_minimum_version(Spec(version="", kind="fake.example.com/nic", devices=(device,)))


def metadata_spec(*, metadata: Path) -> Spec:
    device = Device(
        name=f"{CLAIM_UID}_req",
        container_edits=ContainerEdits(
            mounts=(
                Mount(
                    host_path=str(metadata / "metadata.json"),
                    container_path="/var/run/kubernetes.io/dra-device-attributes/resourceclaims/c/req/fake-metadata.json",
                    options=("ro", "bind"),
                ),
            )
        ),
    )
    return with_minimum_version(Spec(version="", kind="fake.example.com/metadata", devices=(device,)))


def test_written_specs_pick_their_minimum_versions_and_validate(dirs: dict[str, Path]) -> None:
    specs = [gpu_spec(host=dirs["host"]), nic_spec(), metadata_spec(metadata=dirs["metadata"])]

    assert [s.version for s in specs] == ["0.5.0", "1.1.0", "0.5.0"]
    assert [find_spec_problems(s) for s in specs] == [(), (), ()]


def test_resolved_devices_are_injected_into_the_oci_config(dirs: dict[str, Path]) -> None:
    write_spec(spec=gpu_spec(host=dirs["host"]), cdi_dir=dirs["run-cdi"], file_name=f"fake-gpu_{CLAIM_UID}.json")
    write_spec(spec=nic_spec(), cdi_dir=dirs["run-cdi"], file_name=f"fake-nic_{CLAIM_UID}.yaml")
    write_spec(
        spec=metadata_spec(metadata=dirs["metadata"]),
        cdi_dir=dirs["run-cdi"],
        file_name=f"fake_metadata_{CLAIM_UID}_req.json",
    )
    ids = [
        render_qualified_name(kind="fake.example.com/gpu", device=f"{CLAIM_UID}_gpu0"),
        render_qualified_name(kind="fake.example.com/metadata", device=f"{CLAIM_UID}_req"),
        render_qualified_name(kind="fake.example.com/nic", device=f"{CLAIM_UID}_nic0"),
    ]
    original = copy.deepcopy(BASE_OCI)

    registry = load_registry(spec_dirs=[dirs["etc-cdi"], dirs["run-cdi"]])
    result = inject_devices(oci_spec=BASE_OCI, registry=registry, device_ids=ids)

    dev_null = Path("/dev/null").stat()
    fifo_mode = stat.S_IMODE((dirs["host"] / "fake-events").stat().st_mode)
    expected = copy.deepcopy(BASE_OCI)
    expected["process"]["env"] = [
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "TERM=dumb",
        "FAKE_DRIVER_VERSION=1.0",
        "FAKE_VISIBLE_DEVICES=GPU-0",
    ]
    expected["linux"]["devices"] = [
        {
            "path": "/dev/fake0",
            "type": "c",
            "major": os.major(dev_null.st_rdev),
            "minor": os.minor(dev_null.st_rdev),
            "fileMode": stat.S_IMODE(dev_null.st_mode),
            "uid": 1000,
            "gid": 1000,
        },
        {
            "path": "/dev/fake-events",
            "type": "p",
            "major": 0,
            "minor": 0,
            "fileMode": fifo_mode,
            "uid": 1000,
            "gid": 1000,
        },
    ]
    expected["linux"]["resources"]["devices"].append(
        {
            "allow": True,
            "type": "c",
            "major": os.major(dev_null.st_rdev),
            "minor": os.minor(dev_null.st_rdev),
            "access": "rw",
        }
    )
    expected["linux"]["netDevices"] = {"fk0vf1": {"name": "net1"}}
    expected["hooks"] = {"createContainer": [{"path": "/usr/bin/fake-hook", "args": ["fake-hook", "ldcache"]}]}
    proc, dev, dev_pts, sys = BASE_OCI["mounts"]
    # All mounts are re-sorted by depth, so the runtime's own /sys moves ahead of /dev/pts.
    expected["mounts"] = [
        proc,
        dev,
        sys,
        dev_pts,
        {
            "destination": "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/c/req/fake-metadata.json",
            "source": str(dirs["metadata"] / "metadata.json"),
            "options": ["ro", "bind"],
        },
    ]
    assert registry.errors == ()
    assert result == expected
    assert original == BASE_OCI  # the input was not mutated


def test_a_static_spec_is_overridden_by_a_dynamic_one(dirs: dict[str, Path]) -> None:
    static = Spec(
        version="0.5.0",
        kind="fake.example.com/gpu",
        devices=(Device(name="gpu0", container_edits=ContainerEdits(env=("SOURCE=static",))),),
    )
    dynamic = Spec(
        version="0.5.0",
        kind="fake.example.com/gpu",
        devices=(Device(name="gpu0", container_edits=ContainerEdits(env=("SOURCE=dynamic",))),),
    )
    write_spec(spec=static, cdi_dir=dirs["etc-cdi"], file_name="fake-gpu.yaml")
    write_spec(spec=dynamic, cdi_dir=dirs["run-cdi"], file_name="fake-gpu.json")

    result = inject_devices(
        oci_spec=BASE_OCI,
        registry=load_registry(spec_dirs=[dirs["etc-cdi"], dirs["run-cdi"]]),
        device_ids=["fake.example.com/gpu=gpu0"],
    )

    assert result["process"]["env"][-1] == "SOURCE=dynamic"


def test_yaml_and_json_specs_are_read_alike_and_env_set_by_a_device_overrides_its_specs(
    dirs: dict[str, Path],
) -> None:
    """What NVIDIA's releases write (YAML, spec-level ``NVIDIA_VISIBLE_DEVICES=void``) next to fakedev's JSON."""
    claim = Spec(
        version="",
        kind="k8s.gpu.nvidia.com/claim",
        devices=(
            Device(name=f"{CLAIM_UID}-gpu-0", container_edits=ContainerEdits(env=("NVIDIA_VISIBLE_DEVICES=GPU-1",))),
        ),
        container_edits=ContainerEdits(env=("NVIDIA_VISIBLE_DEVICES=void",)),
    )
    example = Spec(
        version="",
        kind="k8s.gpu.example.com/device",
        devices=(Device(name=f"{CLAIM_UID}-gpu-1", container_edits=ContainerEdits(env=("X=json",))),),
    )
    yaml_path = write_spec(
        spec=with_minimum_version(claim),
        cdi_dir=dirs["run-cdi"],
        file_name=f"k8s.gpu.nvidia.com-claim_{CLAIM_UID}.yaml",
    )
    write_spec(
        spec=with_minimum_version(example), cdi_dir=dirs["run-cdi"], file_name="k8s.gpu.example.com-device_x.json"
    )
    assert yaml_path.read_text().startswith("---\n")
    registry = load_registry(spec_dirs=[dirs["run-cdi"]])
    oci = inject_devices(
        oci_spec=BASE_OCI,
        registry=registry,
        device_ids=[f"k8s.gpu.nvidia.com/claim={CLAIM_UID}-gpu-0", f"k8s.gpu.example.com/device={CLAIM_UID}-gpu-1"],
    )
    assert oci["process"]["env"][-2:] == ["NVIDIA_VISIBLE_DEVICES=GPU-1", "X=json"]


def test_a_corrupt_spec_is_named_when_its_device_cannot_be_resolved(dirs: dict[str, Path]) -> None:
    (dirs["run-cdi"] / f"k8s.gpu.nvidia.com-claim_{CLAIM_UID}.yaml").write_text("kind: [unclosed\n")
    registry = load_registry(spec_dirs=[dirs["run-cdi"]])
    with pytest.raises(ResolveError) as caught:
        inject_devices(oci_spec=BASE_OCI, registry=registry, device_ids=[f"k8s.gpu.nvidia.com/claim={CLAIM_UID}-gpu-0"])
    message = str(caught.value)
    assert f"k8s.gpu.nvidia.com-claim_{CLAIM_UID}.yaml" in message and "invalid YAML" in message
