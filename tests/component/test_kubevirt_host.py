"""The kubevirt-host profile on disk: vfio-bound passthrough GPUs in slices and sysfs, mdevs created and removed."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakedev.driver.preparers import preparer_for
from fakedev.model.inventory import NodeInventory, resolve_inventory
from fakedev.profiles import load_profile
from fakedev.render import render_node
from fakedev.sysfs import create_mdev, read_pci_devices, remove_mdev, write_sysfs


@pytest.fixture
def inventory() -> NodeInventory:
    return resolve_inventory(load_profile("kubevirt-host"), node_name="kv-1")


def test_passthrough_gpus_are_published_as_vfio_devices(inventory: NodeInventory) -> None:
    rendered = render_node(inventory)
    vfio = {r.device: p for r, p in rendered.devices.items() if r.device.startswith("gpu-vfio-")}
    assert sorted(vfio) == ["gpu-vfio-0", "gpu-vfio-1"]
    attrs = vfio["gpu-vfio-0"].attributes
    assert attrs["type"] == {"string": "vfio"}
    assert attrs["resource.kubernetes.io/pciBusID"] == {"string": "0000:4b:00.0"}
    assert attrs["deviceID"] == {"string": "0x2330"} and attrs["vendorID"] == {"string": "0x10de"}
    assert "mdevUUID" not in attrs
    assert not attrs["uuid"]["string"].startswith("GPU-")  # the driver's name-based UUID of the PCI address
    assert vfio["gpu-vfio-0"].capacity["addressableMemory"] == {"value": "81559Mi"}
    # The host driver owns only the vGPU GPU: it is minor 0, and the passthrough GPUs are not NVIDIA devices.
    assert [g.bdf.render() for g in inventory.gpus] == ["0000:cc:00.0"]


def test_vfio_binding_and_group_nodes(inventory: NodeInventory, tmp_path: Path) -> None:
    root = write_sysfs(inventory, root=tmp_path / "sys")
    devices = {d.bdf.render(): d for d in read_pci_devices(root)}
    gpu = inventory.passthrough_gpus[0]
    seen = devices[gpu.bdf.render()]
    assert seen.driver == "vfio-pci" and seen.iommu_group == gpu.pci.iommu_group
    assert devices["0000:cc:00.0"].driver == "nvidia"
    prep = preparer_for(gpu)
    # The group node is the device's; the API node is placed by the driver release (cdi_layout.VfioApiNode).
    assert [n.container_path for n in prep.fake_nodes(gpu)] == [f"/dev/vfio/{gpu.pci.iommu_group}"]
    assert [n.container_path for n in prep.api_nodes(gpu)] == ["/dev/vfio/vfio"]


def test_mdev_created_on_a_free_vf_and_removed_again(inventory: NodeInventory, tmp_path: Path) -> None:
    root = write_sysfs(inventory, root=tmp_path / "sys")
    first, second = [v for v in inventory.vgpu_devices if v.vgpu_type.name == "H100XM-20C"][:2]
    parent = first.parent
    kwargs = {"parents": parent.vfs, "mdev_type": first.vgpu_type.mdev_type}
    instance = create_mdev(root, uuid=first.mdev_uuid, iommu_group=first.iommu_group, **kwargs)  # type: ignore[arg-type]
    assert create_mdev(root, uuid=first.mdev_uuid, iommu_group=first.iommu_group, **kwargs) == instance  # type: ignore[arg-type]
    assert instance.parent.name == parent.vfs[0].bdf.render()
    link = root / "bus" / "mdev" / "devices" / first.mdev_uuid
    assert link.resolve() == instance
    assert (instance / "mdev_type" / "name").read_text().strip() == "GRID H100XM-20C"
    assert (instance / "iommu_group").resolve().name == str(first.iommu_group)
    types = instance.parent / "mdev_supported_types"
    assert {(t / "available_instances").read_text().strip() for t in types.iterdir()} == {"0"}
    other = create_mdev(root, uuid=second.mdev_uuid, iommu_group=second.iommu_group, **kwargs)  # type: ignore[arg-type]
    assert other.parent.name == parent.vfs[1].bdf.render()  # one vGPU per VF
    remove_mdev(root, uuid=first.mdev_uuid)
    remove_mdev(root, uuid=first.mdev_uuid)  # idempotent
    assert not link.exists() and not instance.exists()
    assert (types / first.vgpu_type.mdev_type / "available_instances").read_text().strip() == "1"
    assert not (root / "kernel" / "iommu_groups" / str(first.iommu_group)).exists()
