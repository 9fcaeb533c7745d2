"""A fake sysfs tree, under a root the caller owns, that mirrors a node's device model.

Discovery code reads it exactly as it reads ``/sys``: ``bus/pci/devices/<bdf>`` links into
``devices/pci<dom>:<bus>/<root port>/<bdf>`` with ``vendor``/``device``/``class``/``numa_node``/``local_cpulist``,
``iommu_group`` and ``driver`` links, SR-IOV ``sriov_*``/``virtfn<N>``/``physfn``, netdevs under ``net/`` and
``class/net``, mlx5 RDMA devices, and vGPU ``mdev_supported_types``. pyudev cannot enumerate it: libudev (systemd
252 here) rejects any syspath whose filesystem is not sysfs (an ``fstatfs`` magic check), even when the tree is
bind-mounted over ``/sys``; :func:`read_pci_devices` walks it the way sysfs-reading discovery code does instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from fakedev.driver.fsutil import DIR_MODE, FILE_MODE, make_dirs, write_new_file
from fakedev.errors import FakedevError
from fakedev.model.inventory import MdevType, NodeInventory, PciFunction, VirtualNic
from fakedev.model.pci import CLASS_INFINIBAND, CLASS_PCI_BRIDGE, Bdf, PcieRoot
from fakedev.model.vgpu import MDEV_DEVICE_API

_FORBIDDEN_ROOTS: Final = (Path("/"), Path("/sys"), Path("/proc"), Path("/dev"))
_ROOT_PORT_IDS: Final = (0x8086, 0x352A)  # an Intel Xeon PCIe root port
ARPHRD_ETHER: Final = 1
ARPHRD_INFINIBAND: Final = 32


def _check_root(root: Path) -> Path:
    resolved = root.resolve()
    if resolved in _FORBIDDEN_ROOTS or resolved.is_relative_to("/sys") or resolved.is_relative_to("/proc"):
        raise FakedevError(f"{root}: refusing to write a fake sysfs tree over the host's {resolved}")
    if resolved.exists() and any(resolved.iterdir()):
        raise FakedevError(f"{root}: the fake sysfs root must be empty or not exist yet")
    return resolved


def _write(path: Path, text: str) -> None:
    """A file of the tree, 0644 in 0755 directories whatever the umask (as sysfs shows them to root)."""
    make_dirs(path.parent, mode=DIR_MODE)
    write_new_file(path, (text if text.endswith("\n") else text + "\n").encode(), mode=FILE_MODE)


def _link(link: Path, target: Path) -> None:
    """A relative symlink, as sysfs uses, so the tree still works after being moved or bind-mounted."""
    make_dirs(link.parent, mode=DIR_MODE)
    link.symlink_to(os.path.relpath(target, link.parent))


class _Tree:
    def __init__(self, root: Path) -> None:
        self.root = root

    def device_dir(self, pci: PciFunction) -> Path:
        return self.root / "devices" / pci.root.name / pci.root.root_port.render() / pci.bdf.render()

    def bridge(self, root: PcieRoot) -> None:
        host = self.root / "devices" / root.name
        _write(host / "uevent", "")
        port = host / root.root_port.render()
        if (port / "vendor").exists():
            return
        vendor, device = _ROOT_PORT_IDS
        _write(port / "vendor", f"0x{vendor:04x}")
        _write(port / "device", f"0x{device:04x}")
        _write(port / "class", f"0x{CLASS_PCI_BRIDGE:06x}")
        _write(port / "numa_node", str(root.numa_node if root.numa_node is not None else -1))
        _link(port / "subsystem", self.root / "bus" / "pci")
        _link(port / "driver", self.root / "bus" / "pci" / "drivers" / "pcieport")
        _write(port / "uevent", f"DRIVER=pcieport\nPCI_SLOT_NAME={root.root_port.render()}")

    def function(self, pci: PciFunction) -> None:
        self.bridge(pci.root)
        here = self.device_dir(pci)
        ids = pci.ids
        for name, value in (
            ("vendor", ids.vendor),
            ("device", ids.device),
            ("subsystem_vendor", ids.subsystem_vendor),
            ("subsystem_device", ids.subsystem_device),
        ):
            _write(here / name, f"0x{value:04x}")
        _write(here / "class", ids.class_text)
        _write(here / "numa_node", str(pci.numa_node if pci.numa_node is not None else -1))
        _write(here / "local_cpulist", pci.local_cpulist)
        _write(
            here / "uevent",
            "\n".join(
                (
                    f"DRIVER={pci.driver}",
                    f"PCI_CLASS={ids.class_code:X}",
                    f"PCI_ID={ids.vendor:04X}:{ids.device:04X}",
                    f"PCI_SUBSYS_ID={ids.subsystem_vendor:04X}:{ids.subsystem_device:04X}",
                    f"PCI_SLOT_NAME={pci.bdf.render()}",
                    f"MODALIAS=pci:v{ids.vendor:08X}d{ids.device:08X}sv{ids.subsystem_vendor:08X}"
                    f"sd{ids.subsystem_device:08X}bc{ids.class_code >> 16:02X}sc{(ids.class_code >> 8) & 0xFF:02X}"
                    f"i{ids.class_code & 0xFF:02X}",
                )
            ),
        )
        _link(here / "subsystem", self.root / "bus" / "pci")
        driver_dir = self.root / "bus" / "pci" / "drivers" / pci.driver
        _link(here / "driver", driver_dir)
        _link(driver_dir / pci.bdf.render(), here)
        group = self.root / "kernel" / "iommu_groups" / str(pci.iommu_group)
        _link(here / "iommu_group", group)
        _link(group / "devices" / pci.bdf.render(), here)
        _link(self.root / "bus" / "pci" / "devices" / pci.bdf.render(), here)
        if pci.sriov_totalvfs:
            _write(here / "sriov_totalvfs", str(pci.sriov_totalvfs))
            _write(here / "sriov_numvfs", str(len(pci.vfs)))
            for n, vf in enumerate(pci.vfs):
                _link(here / f"virtfn{n}", here.parent / vf.render())
        if pci.physfn is not None:
            _link(here / "physfn", here.parent / pci.physfn.render())
        if pci.netdev is not None:
            self.netdev(
                here / "net" / pci.netdev,
                name=pci.netdev,
                mac=pci.mac or "",
                mtu=pci.mtu or 1500,
                arphrd=ARPHRD_INFINIBAND if ids.class_code == CLASS_INFINIBAND else ARPHRD_ETHER,
            )
        if pci.rdma_device is not None:
            self.rdma(here, pci=pci)
        for mdev in pci.mdev_types:
            self.mdev_type(here / "mdev_supported_types" / mdev.vgpu.mdev_type, mdev=mdev)

    def netdev(self, here: Path, *, name: str, mac: str, mtu: int, arphrd: int) -> None:
        _write(here / "address", mac)
        _write(here / "mtu", str(mtu))
        _write(here / "operstate", "up")
        _write(here / "type", str(arphrd))
        _write(here / "uevent", f"INTERFACE={name}")
        _link(self.root / "class" / "net" / name, here)

    def rdma(self, device: Path, *, pci: PciFunction) -> None:
        assert pci.rdma_device is not None
        here = device / "infiniband" / pci.rdma_device
        _write(here / "hca_type", pci.rdma_hca_type or "")
        _write(here / "ports" / "1" / "rate", pci.rdma_port_rate or "")
        _link(self.root / "class" / "infiniband" / pci.rdma_device, here)

    def mdev_type(self, here: Path, *, mdev: MdevType) -> None:
        vgpu = mdev.vgpu
        _write(here / "name", vgpu.grid_name)
        _write(
            here / "description",
            f"num_heads=1, frl_config=60, framebuffer={vgpu.framebuffer_mib}M, max_resolution=4096x2160, "
            f"max_instance={vgpu.max_per_gpu}",
        )
        _write(here / "available_instances", str(mdev.available_instances))
        _write(here / "device_api", MDEV_DEVICE_API)
        _write(here / "create", "")
        make_dirs(here / "devices", mode=DIR_MODE)

    def virtual(self, nic: VirtualNic) -> None:
        # veths have no device link: only /sys/devices/virtual/net/<if>.
        self.netdev(
            self.root / "devices" / "virtual" / "net" / nic.ifname,
            name=nic.ifname,
            mac=nic.mac,
            mtu=nic.mtu,
            arphrd=ARPHRD_ETHER,
        )


def write_sysfs(inventory: NodeInventory, *, root: Path) -> Path:
    """Write the tree for ``inventory`` under ``root`` (which must be empty or absent); returns the resolved root."""
    resolved = _check_root(root)
    tree = _Tree(resolved)
    for directory in ("bus/pci/devices", "bus/pci/drivers", "bus/mdev/devices", "class/net", "kernel/iommu_groups"):
        make_dirs(resolved / directory, mode=DIR_MODE)
    for pci in inventory.pci_functions():
        tree.function(pci)
    for nic in inventory.virtual_nics:
        tree.virtual(nic)
    return resolved


# -- reading it back the way discovery code does ------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SysfsPciDevice:
    """What a sysfs-walking discovery loop learns about one PCI function."""

    bdf: Bdf
    vendor: int
    device: int
    class_code: int
    numa_node: int | None
    local_cpulist: str
    iommu_group: int
    driver: str | None
    pcie_root: str
    physfn: Bdf | None
    virtfns: tuple[Bdf, ...]
    netdevs: tuple[str, ...]
    mdev_types: tuple[str, ...]


def _read(path: Path) -> str:
    return path.read_text().strip()


def read_pci_devices(root: Path) -> list[SysfsPciDevice]:
    """Enumerate ``<root>/bus/pci/devices`` and resolve each entry as ``/sys`` discovery would."""
    devices_root = (root / "devices").resolve()
    out = []
    for entry in sorted((root / "bus" / "pci" / "devices").iterdir()):
        real = entry.resolve()
        numa = int(_read(real / "numa_node"))
        virtfns = sorted(
            (p for p in real.iterdir() if p.name.startswith("virtfn")), key=lambda p: int(p.name.removeprefix("virtfn"))
        )
        out.append(
            SysfsPciDevice(
                bdf=Bdf.parse(entry.name),
                vendor=int(_read(real / "vendor"), 16),
                device=int(_read(real / "device"), 16),
                class_code=int(_read(real / "class"), 16),
                numa_node=None if numa < 0 else numa,
                local_cpulist=_read(real / "local_cpulist"),
                iommu_group=int((real / "iommu_group").resolve().name),
                driver=(real / "driver").resolve().name if (real / "driver").exists() else None,
                # The first component under devices/ of the resolved path, as the pcieRoot attribute is defined.
                pcie_root=real.relative_to(devices_root).parts[0],
                physfn=Bdf.parse((real / "physfn").resolve().name) if (real / "physfn").exists() else None,
                virtfns=tuple(Bdf.parse(p.resolve().name) for p in virtfns),
                netdevs=tuple(sorted(p.name for p in (real / "net").iterdir())) if (real / "net").is_dir() else (),
                mdev_types=tuple(sorted(p.name for p in (real / "mdev_supported_types").iterdir()))
                if (real / "mdev_supported_types").is_dir()
                else (),
            )
        )
    return out


# -- mediated devices, created and removed as a vGPU manager does it ----------------------------------------------

_AVAILABLE_BEFORE: Final = ".fakedev-available-before"
"""Inside an mdev instance: what each type's available_instances said before, so removal restores it."""


def create_mdev(root: Path, *, parents: tuple[PciFunction, ...], mdev_type: str, uuid: str, iommu_group: int) -> Path:
    """Create mdev ``uuid`` of ``mdev_type`` on the first parent (a vGPU VF) that has room; idempotent.

    As on hardware: ``<parent>/<uuid>/{mdev_type,iommu_group,remove}``, ``bus/mdev/devices/<uuid>``, a new IOMMU
    group holding just the mdev, and the parent's ``available_instances`` dropping to 0 (one vGPU per VF).
    """
    existing = root / "bus" / "mdev" / "devices" / uuid
    if existing.exists():
        return existing.resolve()
    tree = _Tree(root)
    for parent in parents:
        here = tree.device_dir(parent)
        type_dir = here / "mdev_supported_types" / mdev_type
        available = type_dir / "available_instances"
        if not available.exists() or int(available.read_text()) < 1:
            continue
        instance = here / uuid
        instance.mkdir(mode=DIR_MODE)
        instance.chmod(DIR_MODE)  # mkdir's mode went through the umask
        before = {t.name: (t / "available_instances").read_text().strip() for t in type_dir.parent.iterdir()}
        _write(instance / _AVAILABLE_BEFORE, "\n".join(f"{k} {v}" for k, v in sorted(before.items())))
        _link(instance / "mdev_type", type_dir)
        _link(type_dir / "devices" / uuid, instance)
        group = root / "kernel" / "iommu_groups" / str(iommu_group)
        _link(instance / "iommu_group", group)
        _link(group / "devices" / uuid, instance)
        _write(instance / "remove", "")
        _write(instance / "uevent", f"MDEV_TYPE={mdev_type}")
        for name in before:
            _write(type_dir.parent / name / "available_instances", "0")
        _link(existing, instance)
        return instance
    raise FakedevError(f"no parent function has room for an mdev of type {mdev_type}")


def remove_mdev(root: Path, *, uuid: str) -> None:
    """Remove mdev ``uuid`` (as ``echo 1 > remove`` does) and give its parent's capacity back; idempotent."""
    link = root / "bus" / "mdev" / "devices" / uuid
    if not link.is_symlink():
        return
    instance = link.resolve()
    types = instance.parent / "mdev_supported_types"
    saved = instance / _AVAILABLE_BEFORE
    if saved.exists():
        for line in saved.read_text().splitlines():
            name, value = line.split()
            _write(types / name / "available_instances", value)
    mdev_type = (instance / "mdev_type").resolve().name
    group = (instance / "iommu_group").resolve()
    (types / mdev_type / "devices" / uuid).unlink(missing_ok=True)
    (group / "devices" / uuid).unlink(missing_ok=True)
    for path in (group / "devices", group):
        if path.exists() and not any(path.iterdir()):
            path.rmdir()
    for child in instance.iterdir():
        child.unlink()
    instance.rmdir()
    link.unlink()
