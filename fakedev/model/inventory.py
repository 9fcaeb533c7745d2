"""The resolved node: every device of a profile with its identity, PCI facts, NUMA node and parent.

``resolve_inventory(profile, node_name=...)`` is the one place where a profile meets a node name; everything it
returns is deterministic in those two inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import ClassVar, Final, TypeGuard

from fakedev.model import identity
from fakedev.model.catalog import GpuProduct
from fakedev.model.mig import MigProfile, Placement
from fakedev.model.nic import LinkType, NicProduct, pf_ifname, vf_ifname
from fakedev.model.pci import Bdf, PcieRoot, PciIds
from fakedev.model.profile import (
    GpuSpec,
    MigMode,
    NicSpec,
    NodeProfile,
    VgpuMode,
    gpu_vf_addresses,
    nic_vf_addresses,
)
from fakedev.model.vgpu import VgpuType

IOMMU_GROUP_BASE: Final = 16  # real hosts number groups from 0 for chipset devices; keep endpoints clear of those
NVIDIA_DRIVER: Final = "nvidia"
VFIO_DRIVER: Final = "vfio-pci"


class DeviceKind(StrEnum):
    """What a device model object is; code that treats kinds differently looks this up in a table, never the class."""

    GPU = "gpu"
    MIG = "mig"
    VGPU = "vgpu"
    PASSTHROUGH_GPU = "passthrough-gpu"
    NIC_PF = "nic-pf"
    NIC_VF = "nic-vf"
    VIRTUAL_NIC = "virtual-nic"
    EXAMPLE_GPU = "example-gpu"


@dataclass(frozen=True, kw_only=True)
class MdevType:
    vgpu: VgpuType
    available_instances: int


@dataclass(frozen=True, kw_only=True)
class PciFunction:
    """Everything sysfs says about one PCI function."""

    bdf: Bdf
    ids: PciIds
    root: PcieRoot
    numa_node: int | None
    local_cpulist: str
    iommu_group: int
    driver: str
    sriov_totalvfs: int = 0
    vfs: tuple[Bdf, ...] = ()
    physfn: Bdf | None = None
    netdev: str | None = None
    mac: str | None = None
    mtu: int | None = None
    rdma_device: str | None = None
    rdma_hca_type: str | None = None
    rdma_port_rate: str | None = None
    mdev_types: tuple[MdevType, ...] = ()


@dataclass(frozen=True, kw_only=True)
class GpuDevice:
    kind: ClassVar[DeviceKind] = DeviceKind.GPU

    minor: int
    uuid: str
    product: GpuProduct
    pci: PciFunction
    mig_mode: MigMode
    vgpu_modes: tuple[VgpuMode, ...]
    vfs: tuple[PciFunction, ...]  # mdev parents when vGPU is on

    @property
    def bdf(self) -> Bdf:
        return self.pci.bdf


@dataclass(frozen=True, kw_only=True)
class PassthroughGpu:
    """A GPU bound to vfio-pci for a VM: only PCI facts (no minor, no UUID the host driver could report)."""

    kind: ClassVar[DeviceKind] = DeviceKind.PASSTHROUGH_GPU

    index: int
    product: GpuProduct
    pci: PciFunction

    @property
    def bdf(self) -> Bdf:
        return self.pci.bdf


@dataclass(frozen=True, kw_only=True)
class MigDevice:
    """A GPU instance: a possible placement (dynamic MIG) or a pre-created instance (static MIG, has a uuid)."""

    kind: ClassVar[DeviceKind] = DeviceKind.MIG

    parent: GpuDevice
    profile: MigProfile
    placement: Placement
    uuid: str | None

    @property
    def precreated(self) -> bool:
        return self.uuid is not None


@dataclass(frozen=True, kw_only=True)
class VgpuDevice:
    """One vGPU a GPU can host: MIG-backed (at a placement) or time-sliced (slot ``index`` of its type)."""

    kind: ClassVar[DeviceKind] = DeviceKind.VGPU

    parent: GpuDevice
    vgpu_type: VgpuType
    placement: Placement | None
    index: int
    mdev_uuid: str
    iommu_group: int
    """The group the kernel gives the mdev once created (one per mdev, numbered after every PCI function's)."""


@dataclass(frozen=True, kw_only=True)
class NicVf:
    kind: ClassVar[DeviceKind] = DeviceKind.NIC_VF

    index: int
    pci: PciFunction
    ifname: str
    mac: str
    pf_ifname: str


@dataclass(frozen=True, kw_only=True)
class NicPf:
    kind: ClassVar[DeviceKind] = DeviceKind.NIC_PF

    product: NicProduct
    pci: PciFunction
    ifname: str
    mac: str
    link: LinkType
    mtu: int
    vfs: tuple[NicVf, ...]


@dataclass(frozen=True, kw_only=True)
class VirtualNic:
    kind: ClassVar[DeviceKind] = DeviceKind.VIRTUAL_NIC

    ifname: str
    mac: str
    mtu: int


@dataclass(frozen=True, kw_only=True)
class ExampleGpu:
    kind: ClassVar[DeviceKind] = DeviceKind.EXAMPLE_GPU

    index: int
    uuid: str
    model: str
    memory: str
    driver_version: str
    shares: str | None = None
    fabric_attach: str | None = None
    """"ready" or "fails": attached through a fabric, usable only after the driver's binding condition."""


DeviceModel = GpuDevice | PassthroughGpu | MigDevice | VgpuDevice | NicPf | NicVf | VirtualNic | ExampleGpu
"""Every model object a published device can stand for."""

NicModel = NicPf | NicVf | VirtualNic
NIC_DEVICE_KINDS: Final = frozenset({DeviceKind.NIC_PF, DeviceKind.NIC_VF, DeviceKind.VIRTUAL_NIC})


def is_nic(model: DeviceModel) -> TypeGuard[NicModel]:
    """Whether ``model`` is a NIC function (a netdev on the node), by its kind."""
    return model.kind in NIC_DEVICE_KINDS


@dataclass(frozen=True, kw_only=True)
class NodeInventory:
    node_name: str
    profile: NodeProfile
    gpus: tuple[GpuDevice, ...]
    passthrough_gpus: tuple[PassthroughGpu, ...]
    mig_devices: tuple[MigDevice, ...]
    vgpu_devices: tuple[VgpuDevice, ...]
    nics: tuple[NicPf, ...]
    virtual_nics: tuple[VirtualNic, ...]
    example_gpus: tuple[ExampleGpu, ...]

    def pci_functions(self) -> tuple[PciFunction, ...]:
        functions = [g.pci for g in self.gpus] + [vf for g in self.gpus for vf in g.vfs]
        functions += [g.pci for g in self.passthrough_gpus]
        functions += [n.pci for n in self.nics] + [vf.pci for n in self.nics for vf in n.vfs]
        return tuple(sorted(functions, key=lambda f: f.bdf))


# -- resolution ----------------------------------------------------------------------------------------------------


def resolve_inventory(profile: NodeProfile, *, node_name: str) -> NodeInventory:
    """Turn a profile into the concrete devices of node ``node_name``."""
    cpus = {n.id: n.cpus for n in profile.numa_nodes}
    every_cpu = ",".join(n.cpus for n in profile.numa_nodes) or "0"
    groups = _iommu_groups(profile)

    def cpulist(root: PcieRoot) -> str:
        return cpus.get(root.numa_node, every_cpu) if root.numa_node is not None else every_cpu

    # NVIDIA numbers minors in PCI enumeration order, over the GPUs its driver owns.
    gpu_specs = sorted((g for g in profile.gpus if not g.passthrough), key=lambda g: g.address)
    passthrough = tuple(
        _passthrough(spec, index=i, cpulist=cpulist(spec.root), groups=groups)
        for i, spec in enumerate(sorted((g for g in profile.gpus if g.passthrough), key=lambda g: g.address))
    )
    gpus = tuple(
        _gpu(spec, minor=minor, node_name=node_name, cpulist=cpulist(spec.root), groups=groups)
        for minor, spec in enumerate(gpu_specs)
    )
    mig_devices: list[MigDevice] = []
    vgpu_devices: list[VgpuDevice] = []
    for gpu in gpus:
        spec = gpu_specs[gpu.minor]
        mig_devices += _mig_devices(
            gpu, spec=spec, node_name=node_name, compatibility_groups=profile.features.compatibility_groups
        )
        vgpu_devices += _vgpu_devices(gpu, node_name=node_name)
    first_mdev_group = IOMMU_GROUP_BASE + len(groups)
    vgpu_devices = [replace(v, iommu_group=first_mdev_group + i) for i, v in enumerate(vgpu_devices)]
    nics = _nics(profile.nics, node_name=node_name, cpulist=cpulist, groups=groups)
    return NodeInventory(
        node_name=node_name,
        profile=profile,
        gpus=gpus,
        passthrough_gpus=passthrough,
        mig_devices=tuple(mig_devices),
        vgpu_devices=tuple(vgpu_devices),
        nics=nics,
        virtual_nics=tuple(
            VirtualNic(ifname=v.name, mac=identity.mac_address(node=node_name, key=f"virtual/{v.name}"), mtu=v.mtu)
            for v in profile.virtual_nics
        ),
        example_gpus=tuple(
            ExampleGpu(
                index=i,
                uuid=identity.example_uuid(node=node_name, index=i),
                model=profile.example.model,
                memory=profile.example.memory,
                driver_version=profile.example.driver_version,
                shares=profile.example.shares,
                fabric_attach=profile.example.fabric_attach[i] if i < len(profile.example.fabric_attach) else None,
            )
            for i in range(profile.example.count)
        )
        if profile.example is not None
        else (),
    )


def _iommu_groups(profile: NodeProfile) -> dict[Bdf, int]:
    """One IOMMU group per function (ACS isolates every endpoint on these hosts), numbered in address order."""
    functions = [g.address for g in profile.gpus] + [vf for g in profile.gpus for vf in gpu_vf_addresses(g)]
    functions += [n.address for n in profile.nics] + [vf for n in profile.nics for vf in nic_vf_addresses(n)]
    return {bdf: IOMMU_GROUP_BASE + i for i, bdf in enumerate(sorted(functions))}


def _gpu(spec: GpuSpec, *, minor: int, node_name: str, cpulist: str, groups: dict[Bdf, int]) -> GpuDevice:
    product = spec.product
    vf_addresses = gpu_vf_addresses(spec)
    modes = spec.vgpu.modes if spec.vgpu is not None else ()
    vfs = tuple(
        PciFunction(
            bdf=vf,
            ids=PciIds(
                vendor=product.ids.vendor,
                device=product.vf_device_id,
                subsystem_vendor=product.ids.subsystem_vendor,
                subsystem_device=product.ids.subsystem_device,
                class_code=product.ids.class_code,
            ),
            root=spec.root,
            numa_node=spec.root.numa_node,
            local_cpulist=cpulist,
            iommu_group=groups[vf],
            driver=NVIDIA_DRIVER,
            physfn=spec.address,
            # A VF hosts one vGPU; only the types of the modes the host runs can be created.
            mdev_types=tuple(
                MdevType(vgpu=t, available_instances=1 if _offered(t, modes=modes) else 0) for t in product.vgpu_types
            ),
        )
        for vf in vf_addresses
    )
    pci = PciFunction(
        bdf=spec.address,
        ids=product.ids,
        root=spec.root,
        numa_node=spec.root.numa_node,
        local_cpulist=cpulist,
        iommu_group=groups[spec.address],
        driver=NVIDIA_DRIVER,
        sriov_totalvfs=product.vgpu_vf_count if spec.vgpu is not None else 0,
        vfs=tuple(vf_addresses),
    )
    return GpuDevice(
        minor=minor,
        uuid=identity.gpu_uuid(node=node_name, key=spec.address.render()),
        product=product,
        pci=pci,
        mig_mode=spec.mig.mode if spec.vgpu is None else MigMode.DYNAMIC,
        vgpu_modes=modes,
        vfs=vfs,
    )


def _passthrough(spec: GpuSpec, *, index: int, cpulist: str, groups: dict[Bdf, int]) -> PassthroughGpu:
    pci = PciFunction(
        bdf=spec.address,
        ids=spec.product.ids,
        root=spec.root,
        numa_node=spec.root.numa_node,
        local_cpulist=cpulist,
        iommu_group=groups[spec.address],
        driver=VFIO_DRIVER,
    )
    return PassthroughGpu(index=index, product=spec.product, pci=pci)


def _offered(vgpu_type: VgpuType, *, modes: tuple[VgpuMode, ...]) -> bool:
    wanted = VgpuMode.MIG_BACKED if vgpu_type.mig_backed else VgpuMode.TIME_SLICED
    return wanted in modes


def _mig_key(gpu: GpuDevice, profile: MigProfile, start: int) -> str:
    return f"{gpu.bdf.render()}/gi{profile.gi_profile_id}/start{start}"


def _mig_devices(gpu: GpuDevice, *, spec: GpuSpec, node_name: str, compatibility_groups: bool) -> list[MigDevice]:
    if spec.vgpu is not None and not compatibility_groups:
        return []  # without compatibility groups nothing could keep bare MIG and vGPU apart on this GPU
    if gpu.mig_mode is MigMode.STATIC:
        return [
            MigDevice(
                parent=gpu,
                profile=inst.profile,
                placement=Placement(start=inst.start, size=inst.profile.shape.size),
                uuid=identity.mig_uuid(node=node_name, key=_mig_key(gpu, inst.profile, inst.start)),
            )
            for inst in spec.mig.instances
        ]
    if gpu.mig_mode is MigMode.DISABLED:
        return []
    return [
        MigDevice(parent=gpu, profile=profile, placement=placement, uuid=None)
        for profile in gpu.product.mig_profiles
        for placement in profile.placements()
    ]


def _vgpu_devices(gpu: GpuDevice, *, node_name: str) -> list[VgpuDevice]:
    devices: list[VgpuDevice] = []
    for vgpu_type in gpu.product.vgpu_types:
        if not _offered(vgpu_type, modes=gpu.vgpu_modes):
            continue
        if vgpu_type.mig_profile is not None:
            profile = gpu.product.mig_profile(vgpu_type.mig_profile)
            assert profile is not None, "the catalogue derives MIG-backed types from the product's profiles"
            slots: list[tuple[int, Placement | None]] = [(p.start, p) for p in profile.placements()]
        else:
            slots = [(n, None) for n in range(vgpu_type.max_per_gpu)]
        for index, placement in slots:
            key = f"{gpu.bdf.render()}/vgpu/{vgpu_type.name}/{index}"
            devices.append(
                VgpuDevice(
                    parent=gpu,
                    vgpu_type=vgpu_type,
                    placement=placement,
                    index=index,
                    mdev_uuid=identity.mdev_uuid(node=node_name, key=key),
                    iommu_group=0,  # numbered node-wide by resolve_inventory
                )
            )
    return devices


def _nics(
    specs: tuple[NicSpec, ...], *, node_name: str, cpulist: Callable[[PcieRoot], str], groups: dict[Bdf, int]
) -> tuple[NicPf, ...]:
    ordered = sorted(specs, key=lambda s: s.address)
    # mlx5 names RDMA devices in probe order: every PF first, then the VFs as they are created.
    rdma: dict[Bdf, str] = {}
    for spec in ordered:
        rdma[spec.address] = f"mlx5_{len(rdma)}"
    for spec in ordered:
        for vf in nic_vf_addresses(spec):
            rdma[vf] = f"mlx5_{len(rdma)}"
    out: list[NicPf] = []
    for spec in ordered:
        cpus = cpulist(spec.root)
        ifname = pf_ifname(spec.address, link=spec.link)
        vfs = []
        for n, vf in enumerate(nic_vf_addresses(spec)):
            vf_name = vf_ifname(spec.address, index=n, link=spec.link)
            mac = _hardware_address(node_name=node_name, key=vf.render(), link=spec.link)
            vfs.append(
                NicVf(
                    index=n,
                    ifname=vf_name,
                    mac=mac,
                    pf_ifname=ifname,
                    pci=PciFunction(
                        bdf=vf,
                        ids=spec.product.ids(link=spec.link, vf=True),
                        root=spec.root,
                        numa_node=spec.root.numa_node,
                        local_cpulist=cpus,
                        iommu_group=groups[vf],
                        driver=spec.product.driver,
                        physfn=spec.address,
                        netdev=vf_name,
                        mac=mac,
                        mtu=spec.mtu,
                        rdma_device=rdma[vf],
                        rdma_hca_type=spec.product.hca_type,
                        rdma_port_rate=spec.product.port_rate,
                    ),
                )
            )
        mac = _hardware_address(node_name=node_name, key=spec.address.render(), link=spec.link)
        out.append(
            NicPf(
                product=spec.product,
                ifname=ifname,
                mac=mac,
                link=spec.link,
                mtu=spec.mtu,
                vfs=tuple(vfs),
                pci=PciFunction(
                    bdf=spec.address,
                    ids=spec.product.ids(link=spec.link, vf=False),
                    root=spec.root,
                    numa_node=spec.root.numa_node,
                    local_cpulist=cpus,
                    iommu_group=groups[spec.address],
                    driver=spec.product.driver,
                    sriov_totalvfs=spec.product.sriov_totalvfs,
                    vfs=tuple(v.pci.bdf for v in vfs),
                    netdev=ifname,
                    mac=mac,
                    mtu=spec.mtu,
                    rdma_device=rdma[spec.address],
                    rdma_hca_type=spec.product.hca_type,
                    rdma_port_rate=spec.product.port_rate,
                ),
            )
        )
    return tuple(out)


def _hardware_address(*, node_name: str, key: str, link: LinkType) -> str:
    if link is LinkType.INFINIBAND:
        return identity.ib_hardware_address(node=node_name, key=key)
    return identity.mac_address(node=node_name, key=key)
