"""CDI container edits for prepared devices, the way each vendor's runtime integration would expose them (pure).

Device nodes point at char devices under the plugin's fake ``/dev`` root. They are created as 1:3 (the kernel's
``null`` device), so a container may open them harmlessly; their names are the vendor's (``/dev/nvidia0``,
``/dev/nvidiactl``, ``/dev/nvidia-caps/nvidia-cap<N>``, ``/dev/vfio/<group>``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import cdi
from fakedev.driver.config import DeviceConfig
from fakedev.model.inventory import ExampleGpu, GpuDevice, MigDevice, PassthroughGpu, VgpuDevice
from fakedev.render.published import DeviceModel

SAFE_MAJOR: Final = 1
SAFE_MINOR: Final = 3
CDI_CLASS: Final = "device"
_ENV_UNSAFE: Final = re.compile(r"[^A-Z0-9_]")


@dataclass(frozen=True, kw_only=True)
class FakeNode:
    """A char device the plugin creates under its fake /dev root, and where containers see it."""

    container_path: str
    host_relpath: str


def claim_kind(driver: str) -> str:
    """One CDI kind per driver for claim devices; names are keyed by claim UID so they are never reused."""
    return cdi.render_kind(vendor=f"k8s.{driver}", class_name=CDI_CLASS)


def claim_device_name(*, claim_uid: str, device: str) -> str:
    return f"{claim_uid}-{device}"


def claim_spec_file(*, driver: str, claim_uid: str) -> str:
    return f"k8s.{driver}-{CDI_CLASS}_{claim_uid}.json"


def _env_key(text: str) -> str:
    return _ENV_UNSAFE.sub("_", text.upper())


def gpu_control_nodes() -> tuple[FakeNode, ...]:
    return tuple(
        FakeNode(container_path=f"/dev/{n}", host_relpath=n) for n in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
    )


def mig_cap_minor(*, gpu_minor: int, gi: int, ci: int | None) -> int:
    """Stand-in for /proc/driver/nvidia-caps/mig-minors: distinct per (gpu, gi[, ci]), stable across runs."""
    return 3 + gpu_minor * 512 + gi * 9 + (0 if ci is None else ci + 1)


def device_nodes(model: DeviceModel) -> tuple[FakeNode, ...]:
    """Every fake node a device needs in a container."""
    if isinstance(model, GpuDevice):
        return (
            FakeNode(container_path=f"/dev/nvidia{model.minor}", host_relpath=f"nvidia{model.minor}"),
            *gpu_control_nodes(),
        )
    if isinstance(model, MigDevice):
        minor = model.parent.minor
        gi = model.placement.start + 1  # GI 0 is never handed out to a workload here
        caps = [mig_cap_minor(gpu_minor=minor, gi=gi, ci=None), mig_cap_minor(gpu_minor=minor, gi=gi, ci=0)]
        return (
            FakeNode(container_path=f"/dev/nvidia{minor}", host_relpath=f"nvidia{minor}"),
            *gpu_control_nodes(),
            *(
                FakeNode(container_path=f"/dev/nvidia-caps/nvidia-cap{c}", host_relpath=f"nvidia-caps/nvidia-cap{c}")
                for c in caps
            ),
        )
    if isinstance(model, VgpuDevice | PassthroughGpu):
        group = model.iommu_group if isinstance(model, VgpuDevice) else model.pci.iommu_group
        return (
            FakeNode(container_path="/dev/vfio/vfio", host_relpath="vfio/vfio"),
            FakeNode(container_path=f"/dev/vfio/{group}", host_relpath=f"vfio/{group}"),
        )
    return ()


def _cdi_nodes(nodes: Sequence[FakeNode], *, dev_root: Path) -> tuple[cdi.DeviceNode, ...]:
    return tuple(
        cdi.DeviceNode(
            path=n.container_path,
            host_path=str(dev_root / n.host_relpath),
            type="c",
            major=SAFE_MAJOR,
            minor=SAFE_MINOR,
            permissions="rw",
        )
        for n in nodes
    )


def _sharing_env(prefix: str, config: DeviceConfig) -> list[str]:
    if config.sharing is None:
        return []
    env = [f"{prefix}SHARING_STRATEGY={config.sharing.strategy}"]
    if config.sharing.strategy == "TimeSlicing":
        env.append(f"{prefix}TIMESLICE_INTERVAL={config.sharing.interval}")
    if config.sharing.partition_count is not None:
        env.append(f"{prefix}PARTITION_COUNT={config.sharing.partition_count}")
    return env


def render_device_edits(
    *,
    model: DeviceModel,
    device: str,
    config: DeviceConfig,
    visible_uuids: Sequence[str],
    dev_root: Path,
    mig_uuid: str | None = None,
) -> cdi.ContainerEdits:
    """Edits for one prepared device; never empty (CDI forbids devices without edits)."""
    extra = [f"{k}={v}" for k, v in sorted(config.env.items())]
    if isinstance(model, ExampleGpu):
        # The dra-example-driver's contract: GPU_DEVICE_<n>=<device name>, plus sharing settings per device.
        prefix = f"GPU_DEVICE_{model.index}"
        env = [f"{prefix}={device}", f"{prefix}_UUID={model.uuid}", *_sharing_env(f"{prefix}_", config), *extra]
        return cdi.ContainerEdits(env=tuple(env))
    env = [f"NVIDIA_VISIBLE_DEVICES={','.join(visible_uuids)}"]
    key = _env_key(device)
    if isinstance(model, GpuDevice):
        env.append(f"FAKEDEV_{key}_UUID={model.uuid}")
    elif isinstance(model, MigDevice):
        env += [
            f"FAKEDEV_{key}_UUID={mig_uuid or model.uuid}",
            f"FAKEDEV_{key}_PARENT_UUID={model.parent.uuid}",
            f"FAKEDEV_{key}_PROFILE={model.profile.name}",
        ]
    elif isinstance(model, VgpuDevice):
        env = [f"FAKEDEV_{key}_MDEV_UUID={model.mdev_uuid}", f"FAKEDEV_{key}_VGPU_TYPE={model.vgpu_type.name}"]
    elif isinstance(model, PassthroughGpu):
        env = [f"FAKEDEV_{key}_PCI_BUS_ID={model.bdf.render()}", f"FAKEDEV_{key}_IOMMU_GROUP={model.pci.iommu_group}"]
    env += _sharing_env("FAKEDEV_", config) + extra
    return cdi.ContainerEdits(env=tuple(env), device_nodes=_cdi_nodes(device_nodes(model), dev_root=dev_root))


def render_claim_spec(*, driver: str, devices: Sequence[tuple[str, cdi.ContainerEdits]]) -> cdi.Spec:
    """One spec per claim: ``(CDI device name, edits)`` pairs under the driver's claim kind."""
    return cdi.with_minimum_version(
        cdi.Spec(
            version="",
            kind=claim_kind(driver),
            devices=tuple(cdi.Device(name=name, container_edits=edits) for name, edits in devices),
        )
    )


def render_nic_edits(*, host_ifname: str, pod_ifname: str, config: DeviceConfig) -> cdi.ContainerEdits:
    """A NIC reaches the pod through the CDI 1.1 netDevices edit: the runtime moves and renames the interface."""
    env = tuple(f"{k}={v}" for k, v in sorted(config.env.items()))
    return cdi.ContainerEdits(env=env, net_devices=(cdi.NetDevice(host_interface_name=host_ifname, name=pod_ifname),))
