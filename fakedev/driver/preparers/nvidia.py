"""NVIDIA devices: full GPUs and MIG instances (``/dev/nvidia*``), vGPUs (an mdev) and vfio passthrough GPUs.

Containers learn their devices from ``NVIDIA_VISIBLE_DEVICES`` (GPUs and MIG instances by UUID) and from
``FAKEDEV_<DEVICE>_*`` variables with the identity of each device; vGPUs and passthrough GPUs are handed to a VM
through ``/dev/vfio``, so they carry no visible UUID. Under a release with a node-wide base spec (v25.8.1) the
device's nodes and identity are its base-spec entry and ``NVIDIA_VISIBLE_DEVICES`` stays the release's ``void``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import cdi
from fakedev.driver import cdi_edits
from fakedev.driver.cdi_edits import FakeNode
from fakedev.driver.preparers.base import DevicePreparer, EditsInput, MdevRequest
from fakedev.model.identity import mig_uuid
from fakedev.model.inventory import GpuDevice, MigDevice, PassthroughGpu, VgpuDevice
from fakedev.render.types import DeviceAttribute

_CONTROL_NODES: Final = tuple(
    FakeNode(container_path=f"/dev/{n}", host_relpath=n) for n in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
)
"""Every GPU or MIG container gets the driver's control nodes too."""


def mig_cap_minor(*, gpu_minor: int, gi: int, ci: int | None) -> int:
    """Stand-in for /proc/driver/nvidia-caps/mig-minors: distinct per (gpu, gi[, ci]), stable across runs."""
    return 3 + gpu_minor * 512 + gi * 9 + (0 if ci is None else ci + 1)


def _gpu_node(minor: int) -> FakeNode:
    return FakeNode(container_path=f"/dev/nvidia{minor}", host_relpath=f"nvidia{minor}")


VFIO_API_NODE: Final = FakeNode(container_path="/dev/vfio/vfio", host_relpath="vfio/vfio")


def _group_node(group: int) -> FakeNode:
    return FakeNode(container_path=f"/dev/vfio/{group}", host_relpath=f"vfio/{group}")


def _config_env(use: EditsInput) -> list[str]:
    return [*cdi_edits.render_sharing_env("FAKEDEV_", use.config), *cdi_edits.render_config_env(use.config)]


def _edits(own_env: Sequence[str], *, nodes: Sequence[FakeNode], use: EditsInput) -> cdi.ContainerEdits:
    """The device's own variables, then the sharing settings and the config's env; its nodes under the fake /dev."""
    env = [*own_env, *_config_env(use)]
    return cdi.ContainerEdits(env=tuple(env), device_nodes=cdi_edits.render_device_nodes(nodes, dev_root=use.dev_root))


def _fixed(own_env: Sequence[str], *, nodes: Sequence[FakeNode], dev_root: Path) -> cdi.ContainerEdits:
    """A device's base-spec entry: its identity and nodes, nothing of a claim."""
    return cdi.ContainerEdits(env=tuple(own_env), device_nodes=cdi_edits.render_device_nodes(nodes, dev_root=dev_root))


def _claim_part(own_env: Sequence[str], *, use: EditsInput) -> cdi.ContainerEdits:
    """What a claim adds to a base-spec entry. No ``NVIDIA_VISIBLE_DEVICES`` list: with a base spec the container
    sees the release's ``void`` (it learns its devices from their nodes and ``FAKEDEV_<DEVICE>_*``)."""
    return cdi.ContainerEdits(env=(*own_env, *_config_env(use)))


def _visible(use: EditsInput) -> str:
    return f"NVIDIA_VISIBLE_DEVICES={','.join(use.visible_uuids)}"


class GpuPreparer(DevicePreparer[GpuDevice]):
    def fake_nodes(self, model: GpuDevice) -> tuple[FakeNode, ...]:
        return (_gpu_node(model.minor), *_CONTROL_NODES)

    def visible_uuid(self, model: GpuDevice, *, claim_uuid: str | None) -> str | None:
        return model.uuid

    def container_edits(self, model: GpuDevice, *, use: EditsInput) -> cdi.ContainerEdits:
        key = cdi_edits.env_key(use.device)
        return _edits([_visible(use), f"FAKEDEV_{key}_UUID={model.uuid}"], nodes=self.fake_nodes(model), use=use)

    def device_edits(self, model: GpuDevice, *, device: str, dev_root: Path) -> cdi.ContainerEdits:
        key = cdi_edits.env_key(device)
        return _fixed([f"FAKEDEV_{key}_UUID={model.uuid}"], nodes=self.fake_nodes(model), dev_root=dev_root)

    def claim_edits(self, model: GpuDevice, *, use: EditsInput) -> cdi.ContainerEdits:
        return _claim_part([], use=use)


class MigPreparer(DevicePreparer[MigDevice]):
    def fake_nodes(self, model: MigDevice) -> tuple[FakeNode, ...]:
        minor = model.parent.minor
        gi = model.placement.start + 1  # GI 0 is never handed out to a workload here
        caps = (mig_cap_minor(gpu_minor=minor, gi=gi, ci=None), mig_cap_minor(gpu_minor=minor, gi=gi, ci=0))
        return (
            _gpu_node(minor),
            *_CONTROL_NODES,
            *(
                FakeNode(container_path=f"/dev/nvidia-caps/nvidia-cap{c}", host_relpath=f"nvidia-caps/nvidia-cap{c}")
                for c in caps
            ),
        )

    def claim_uuid(self, model: MigDevice, *, node_name: str, key: str) -> str | None:
        # A pre-created (static) instance has its UUID; a dynamic one is created for the claim and gets a new one.
        return None if model.precreated else mig_uuid(node=node_name, key=key)

    def visible_uuid(self, model: MigDevice, *, claim_uuid: str | None) -> str | None:
        return claim_uuid or model.uuid

    def container_edits(self, model: MigDevice, *, use: EditsInput) -> cdi.ContainerEdits:
        key = cdi_edits.env_key(use.device)
        own = [
            _visible(use),
            f"FAKEDEV_{key}_UUID={use.claim_uuid or model.uuid}",
            f"FAKEDEV_{key}_PARENT_UUID={model.parent.uuid}",
            f"FAKEDEV_{key}_PROFILE={model.profile.name}",
        ]
        return _edits(own, nodes=self.fake_nodes(model), use=use)

    def device_edits(self, model: MigDevice, *, device: str, dev_root: Path) -> cdi.ContainerEdits:
        key = cdi_edits.env_key(device)
        # A dynamic instance has no UUID until a claim creates it: the claim's part names it.
        uuid = [f"FAKEDEV_{key}_UUID={model.uuid}"] if model.precreated else []
        own = [*uuid, f"FAKEDEV_{key}_PARENT_UUID={model.parent.uuid}", f"FAKEDEV_{key}_PROFILE={model.profile.name}"]
        return _fixed(own, nodes=self.fake_nodes(model), dev_root=dev_root)

    def claim_edits(self, model: MigDevice, *, use: EditsInput) -> cdi.ContainerEdits:
        key = cdi_edits.env_key(use.device)
        minted = [] if use.claim_uuid is None else [f"FAKEDEV_{key}_UUID={use.claim_uuid}"]
        return _claim_part(minted, use=use)


class VgpuPreparer(DevicePreparer[VgpuDevice]):
    """fakedev's own kind (no release has vGPU devices): its nodes are as fakedev always gave them, API node
    included, whatever the release."""

    def fake_nodes(self, model: VgpuDevice) -> tuple[FakeNode, ...]:
        return (VFIO_API_NODE, _group_node(model.iommu_group))

    def container_edits(self, model: VgpuDevice, *, use: EditsInput) -> cdi.ContainerEdits:
        return _edits(self._own(model, device=use.device), nodes=self.fake_nodes(model), use=use)

    def device_edits(self, model: VgpuDevice, *, device: str, dev_root: Path) -> cdi.ContainerEdits:
        return _fixed(self._own(model, device=device), nodes=self.fake_nodes(model), dev_root=dev_root)

    def claim_edits(self, model: VgpuDevice, *, use: EditsInput) -> cdi.ContainerEdits:
        return _claim_part([], use=use)

    @staticmethod
    def _own(model: VgpuDevice, *, device: str) -> list[str]:
        key = cdi_edits.env_key(device)
        return [f"FAKEDEV_{key}_MDEV_UUID={model.mdev_uuid}", f"FAKEDEV_{key}_VGPU_TYPE={model.vgpu_type.name}"]

    def mdev(self, model: VgpuDevice) -> MdevRequest | None:
        return MdevRequest(
            uuid=model.mdev_uuid,
            parents=model.parent.vfs,
            mdev_type=model.vgpu_type.mdev_type,
            iommu_group=model.iommu_group,
        )

    def metadata_attributes(self, model: VgpuDevice, *, published: Mapping[str, DeviceAttribute]) -> dict[str, Any]:
        # The mdev exists from prepare on; KubeVirt finds the vGPU by this (unqualified) attribute.
        return {**super().metadata_attributes(model, published=published), "mdevUUID": {"string": model.mdev_uuid}}


class PassthroughPreparer(DevicePreparer[PassthroughGpu]):
    """The group node is the device's; the VFIO API node (``/dev/vfio/vfio``) is placed by the release."""

    def fake_nodes(self, model: PassthroughGpu) -> tuple[FakeNode, ...]:
        return (_group_node(model.pci.iommu_group),)

    def api_nodes(self, model: PassthroughGpu) -> tuple[FakeNode, ...]:
        return (VFIO_API_NODE,)

    def container_edits(self, model: PassthroughGpu, *, use: EditsInput) -> cdi.ContainerEdits:
        return _edits(self._own(model, device=use.device), nodes=self.fake_nodes(model), use=use)

    def device_edits(self, model: PassthroughGpu, *, device: str, dev_root: Path) -> cdi.ContainerEdits:
        return _fixed(self._own(model, device=device), nodes=self.fake_nodes(model), dev_root=dev_root)

    def claim_edits(self, model: PassthroughGpu, *, use: EditsInput) -> cdi.ContainerEdits:
        return _claim_part([], use=use)

    @staticmethod
    def _own(model: PassthroughGpu, *, device: str) -> list[str]:
        key = cdi_edits.env_key(device)
        return [f"FAKEDEV_{key}_PCI_BUS_ID={model.bdf.render()}", f"FAKEDEV_{key}_IOMMU_GROUP={model.pci.iommu_group}"]
