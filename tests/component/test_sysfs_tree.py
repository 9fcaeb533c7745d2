"""The fake sysfs tree: written under a temp root, read back by walking it the way discovery code reads /sys."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakedev.errors import FakedevError
from fakedev.model.inventory import NodeInventory, resolve_inventory
from fakedev.profiles import load_profile
from fakedev.sysfs import read_pci_devices, write_sysfs


def _tree(tmp_path: Path, profile: str) -> tuple[Path, NodeInventory]:
    inventory = resolve_inventory(load_profile(profile), node_name="node-s")
    return write_sysfs(inventory, root=tmp_path / "sys"), inventory


def test_bus_link_resolves_below_the_root_complex(tmp_path: Path) -> None:
    root, _ = _tree(tmp_path, "dgx-h100")
    link = root / "bus" / "pci" / "devices" / "0000:53:00.0"
    assert link.is_symlink() and not str(link.readlink()).startswith("/")  # relative, like sysfs
    assert link.resolve() == root / "devices" / "pci0000:50" / "0000:50:01.0" / "0000:53:00.0"


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("vendor", "0x10de"),
        ("device", "0x2330"),
        ("class", "0x030200"),
        ("subsystem_vendor", "0x10de"),
        ("subsystem_device", "0x16c1"),
        ("numa_node", "1"),
        ("local_cpulist", "56-111,168-223"),
    ],
    ids=["vendor", "device", "class", "subsystem_vendor", "subsystem_device", "numa_node", "local_cpulist"],
)
def test_gpu_attribute_files(tmp_path: Path, name: str, content: str) -> None:
    root, _ = _tree(tmp_path, "dgx-h100")
    assert (root / "bus" / "pci" / "devices" / "0000:97:00.0" / name).read_text() == content + "\n"


def test_discovery_walk_sees_every_function_of_the_model(tmp_path: Path) -> None:
    root, inventory = _tree(tmp_path, "a100-mixed")
    found = {d.bdf: d for d in read_pci_devices(root)}
    assert set(found) == {f.bdf for f in inventory.pci_functions()}
    for function in inventory.pci_functions():
        seen = found[function.bdf]
        assert (seen.vendor, seen.device, seen.class_code) == (
            function.ids.vendor,
            function.ids.device,
            function.ids.class_code,
        )
        assert seen.pcie_root == function.root.name  # the pcieRoot attribute, derived as upstream defines it
        assert (seen.numa_node, seen.iommu_group, seen.driver) == (
            function.numa_node,
            function.iommu_group,
            function.driver,
        )


def test_iommu_group_links_both_ways(tmp_path: Path) -> None:
    root, inventory = _tree(tmp_path, "dgx-h100")
    gpu = inventory.gpus[0].pci
    device = root / "bus" / "pci" / "devices" / gpu.bdf.render()
    group = (device / "iommu_group").resolve()
    assert group == root / "kernel" / "iommu_groups" / str(gpu.iommu_group)
    assert (group / "devices" / gpu.bdf.render()).resolve() == device.resolve()
    assert (device / "driver").resolve() == root / "bus" / "pci" / "drivers" / "nvidia"


def test_sriov_pf_and_vf_links(tmp_path: Path) -> None:
    root, _ = _tree(tmp_path, "nic-only")
    pf = root / "bus" / "pci" / "devices" / "0000:08:00.0"
    assert (pf / "sriov_totalvfs").read_text() == "16\n" and (pf / "sriov_numvfs").read_text() == "8\n"
    vf0 = (pf / "virtfn0").resolve()
    assert vf0.name == "0000:08:00.2"
    assert (vf0 / "physfn").resolve() == pf.resolve()
    assert (vf0 / "device").read_text() == "0x101e\n"
    [pf_seen] = [d for d in read_pci_devices(root) if d.bdf.render() == "0000:08:00.0"]
    assert [v.render() for v in pf_seen.virtfns][:3] == ["0000:08:00.2", "0000:08:00.3", "0000:08:00.4"]


def test_netdevs_and_rdma(tmp_path: Path) -> None:
    root, inventory = _tree(tmp_path, "nic-only")
    pf = inventory.nics[0]
    net = root / "class" / "net" / pf.ifname
    assert net.resolve().parent.parent == (root / "bus" / "pci" / "devices" / pf.pci.bdf.render()).resolve()
    assert (net / "address").read_text() == pf.mac + "\n"
    assert (net / "mtu").read_text() == "9000\n"
    rdma = root / "class" / "infiniband" / "mlx5_0"
    assert (rdma / "hca_type").read_text() == "MT4129\n"
    assert (rdma / "ports" / "1" / "rate").read_text() == "400 Gb/sec (4X NDR)\n"


def test_virtual_nic_has_no_device_link(tmp_path: Path) -> None:
    root, _ = _tree(tmp_path, "nic-only")
    veth = root / "class" / "net" / "veth-fast0"
    assert veth.resolve() == root / "devices" / "virtual" / "net" / "veth-fast0"
    assert not (veth / "device").exists()


def test_mdev_supported_types_on_gpu_vfs(tmp_path: Path) -> None:
    root, inventory = _tree(tmp_path, "vgpu-host")
    time_sliced_gpu = inventory.gpus[0]
    vf = root / "bus" / "pci" / "devices" / time_sliced_gpu.vfs[0].bdf.render()
    types = vf / "mdev_supported_types"
    names = {(t / "name").read_text().strip(): t for t in types.iterdir()}
    assert "GRID H100XM-1-10C" in names and "GRID H100XM-10C" in names
    ten_c = names["GRID H100XM-10C"]
    assert (ten_c / "device_api").read_text() == "vfio-pci\n"
    assert (ten_c / "available_instances").read_text() == "1\n"  # this GPU runs time-sliced vGPU
    assert (names["GRID H100XM-1-10C"] / "available_instances").read_text() == "0\n"
    assert (ten_c / "create").exists() and (ten_c / "devices").is_dir()
    assert "max_instance=8" in (ten_c / "description").read_text()
    assert (root / "bus" / "mdev" / "devices").is_dir()


@pytest.mark.parametrize("target", ["/sys", "/sys/devices/fake", "/"], ids=["sys", "under-sys", "slash"])
def test_refuses_the_hosts_sysfs(target: str) -> None:
    inventory = resolve_inventory(load_profile("seed-example"), node_name="n")
    with pytest.raises(FakedevError, match="refusing"):
        write_sysfs(inventory, root=Path(target))


def test_refuses_a_non_empty_root(tmp_path: Path) -> None:
    (tmp_path / "something").write_text("x")
    with pytest.raises(FakedevError, match="must be empty"):
        write_sysfs(resolve_inventory(load_profile("seed-example"), node_name="n"), root=tmp_path)
