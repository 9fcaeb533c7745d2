"""The GPU catalogue: A100-SXM4-40GB/80GB, H100 80GB HBM3 SXM, H200 141GB (SXM, NVL) and B200.

Numbers follow the project's reference (shared/reference/devices.md); where it gives none or a different one, the
source is cited where the number is used. Engines are listed as SM / copy engines / decoders / encoders / JPEG / OFA;
none of these datacenter parts has NVENC, so encoders are 0 throughout (the NVIDIA driver still publishes the
counter).

``addressingMode`` follows live captures where one exists (A100, H100, H200, B200: HMM on x86 hosts; for reference,
A30 shows None and the Grace-coupled GB200/GB300 show ATS, neither in this catalogue); the entries marked "inferred"
have no capture of their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Final

from fakedev.model import mig
from fakedev.model.mig import Engines, MigProfile
from fakedev.model.pci import CLASS_3D_CONTROLLER, PciIds
from fakedev.model.vgpu import VgpuType, mig_backed_types, time_sliced_types

NVIDIA_VENDOR: Final = 0x10DE
# First VF of an NVIDIA GPU PF sits at function 4 (A100/H100 PF xx:00.0 → VFs xx:00.4, xx:00.5, …).
GPU_VF_OFFSET: Final = 4
GPU_VF_STRIDE: Final = 1


class AddressingMode(StrEnum):
    """NVML's memory addressing mode (the NVIDIA driver's ``addressingMode`` attribute from v25.12.0)."""

    ATS = "ATS"  # address translation services: Grace-coupled GPUs (GB200, GB300)
    HMM = "HMM"  # heterogeneous memory management on x86 hosts
    NONE = "None"


@dataclass(frozen=True, kw_only=True)
class GpuProduct:
    key: str  # the name profiles use
    product_name: str  # NVML's device name, published as productName
    pci_name: str  # the PCI IDs database's name (pci.ids), what the driver publishes as a vfio device's productName
    addressing_mode: AddressingMode | None  # None: NVML says not supported, and the driver omits the attribute
    architecture: str
    compute_capability: str
    ids: PciIds
    vf_device_id: int  # device ID of the SR-IOV VFs that parent vGPUs
    memory_mib: int
    multiprocessors: int
    mig_profiles: tuple[MigProfile, ...]
    mig_needs_reset: bool  # A100 needs a GPU reset to toggle MIG mode; Hopper and newer do not
    vgpu_board: str | None = None
    vgpu_types: tuple[VgpuType, ...] = ()

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * mig.MIB

    @property
    def full_engines(self) -> Engines:
        """The counters of the whole GPU: the 7g profile's engines (MIG mode hides SMs the 7g instance lacks)."""
        return self.mig_profile_by_shape(mig.SHAPE_7G).engines

    def mig_profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)

    def mig_profile_by_shape(self, shape: mig.MigShape) -> MigProfile:
        return next(p for p in self.mig_profiles if p.shape is shape)

    def vgpu_type(self, name: str) -> VgpuType | None:
        return next((t for t in self.vgpu_types if t.name == name), None)

    @property
    def vgpu_vf_count(self) -> int:
        """VFs the vGPU manager enables: one per vGPU instance the densest type allows."""
        return max((t.max_per_gpu for t in self.vgpu_types), default=0)


def _profiles(
    rows: tuple[tuple[str, mig.MigShape, tuple[int, int, int, int, int, int], int], ...],
) -> tuple[MigProfile, ...]:
    return tuple(
        MigProfile(
            name=name,
            shape=shape,
            memory_mib=memory,
            engines=Engines(
                multiprocessors=e[0],
                copy_engines=e[1],
                decoders=e[2],
                encoders=e[3],
                jpeg_engines=e[4],
                ofa_engines=e[5],
            ),
        )
        for name, shape, e, memory in rows
    )


_A100_ENGINES: Final = {
    "1g": (14, 1, 0, 0, 0, 0),
    "1g+me": (14, 1, 1, 0, 1, 1),
    "1g double": (14, 1, 1, 0, 0, 0),
    "2g": (28, 2, 1, 0, 0, 0),
    "3g": (42, 3, 2, 0, 0, 0),
    "4g": (56, 4, 2, 0, 0, 0),
    "7g": (98, 7, 5, 0, 1, 1),
}

A100_40: Final = GpuProduct(
    key="a100-sxm4-40gb",
    product_name="NVIDIA A100-SXM4-40GB",
    pci_name="GA100 [A100 SXM4 40GB]",
    # HMM: a live A100-PCIE-40GB capture (dra-driver-nvidia-gpu PR #717) and driver 0.5.0 on p4d (A100-SXM4-40GB).
    addressing_mode=AddressingMode.HMM,
    architecture="Ampere",
    compute_capability="8.0",
    ids=PciIds(
        vendor=NVIDIA_VENDOR,
        device=0x20B0,
        subsystem_vendor=NVIDIA_VENDOR,
        subsystem_device=0x134F,
        class_code=CLASS_3D_CONTROLLER,
    ),
    vf_device_id=0x20B0,
    memory_mib=40960,
    multiprocessors=108,
    mig_needs_reset=True,
    mig_profiles=_profiles(
        (
            ("1g.5gb", mig.SHAPE_1G, _A100_ENGINES["1g"], 4864),
            ("1g.5gb+me", mig.SHAPE_1G_ME, _A100_ENGINES["1g+me"], 4864),
            ("1g.10gb", mig.SHAPE_1G_DOUBLE, _A100_ENGINES["1g double"], 9856),
            ("2g.10gb", mig.SHAPE_2G, _A100_ENGINES["2g"], 9856),
            ("3g.20gb", mig.SHAPE_3G, _A100_ENGINES["3g"], 19968),
            ("4g.20gb", mig.SHAPE_4G, _A100_ENGINES["4g"], 19968),
            ("7g.40gb", mig.SHAPE_7G, _A100_ENGINES["7g"], 40192),
        )
    ),
)

A100_80: Final = GpuProduct(
    key="a100-sxm4-80gb",
    product_name="NVIDIA A100-SXM4-80GB",
    pci_name="GA100 [A100 SXM4 80GB]",
    # HMM inferred from the A100-40GB captures (same chip, same x86 hosts).
    addressing_mode=AddressingMode.HMM,
    architecture="Ampere",
    compute_capability="8.0",
    ids=PciIds(
        vendor=NVIDIA_VENDOR,
        device=0x20B2,
        subsystem_vendor=NVIDIA_VENDOR,
        subsystem_device=0x1463,
        class_code=CLASS_3D_CONTROLLER,
    ),
    # nvidia-smi reports 81920 MiB total on A100-SXM4-80GB.
    vf_device_id=0x20B2,
    memory_mib=81920,
    multiprocessors=108,
    mig_needs_reset=True,
    mig_profiles=_profiles(
        (
            ("1g.10gb", mig.SHAPE_1G, _A100_ENGINES["1g"], 9856),
            ("1g.10gb+me", mig.SHAPE_1G_ME, _A100_ENGINES["1g+me"], 9856),
            ("1g.20gb", mig.SHAPE_1G_DOUBLE, _A100_ENGINES["1g double"], 19968),
            ("2g.20gb", mig.SHAPE_2G, _A100_ENGINES["2g"], 19968),
            ("3g.40gb", mig.SHAPE_3G, _A100_ENGINES["3g"], 40192),
            ("4g.40gb", mig.SHAPE_4G, _A100_ENGINES["4g"], 40192),
            ("7g.80gb", mig.SHAPE_7G, _A100_ENGINES["7g"], 80384),
        )
    ),
)

# GH100 engines per profile; identical on H100 and H200 (`nvidia-smi mig -lgip`, NVIDIA MIG user guide tables 7/8).
_HOPPER_ENGINES: Final = {
    "1g": (16, 1, 1, 0, 1, 0),
    "1g+me": (16, 1, 1, 0, 1, 1),
    "1g double": (26, 1, 1, 0, 1, 0),
    "2g": (32, 2, 2, 0, 2, 0),
    "3g": (60, 3, 3, 0, 3, 0),
    "4g": (64, 4, 4, 0, 4, 0),
    "7g": (132, 8, 7, 0, 7, 1),
}

_H100_PROFILES: Final = _profiles(
    (
        ("1g.10gb", mig.SHAPE_1G, _HOPPER_ENGINES["1g"], 9984),
        ("1g.10gb+me", mig.SHAPE_1G_ME, _HOPPER_ENGINES["1g+me"], 9984),
        ("1g.20gb", mig.SHAPE_1G_DOUBLE, _HOPPER_ENGINES["1g double"], 20096),
        ("2g.20gb", mig.SHAPE_2G, _HOPPER_ENGINES["2g"], 20096),
        ("3g.40gb", mig.SHAPE_3G, _HOPPER_ENGINES["3g"], 40448),
        ("4g.40gb", mig.SHAPE_4G, _HOPPER_ENGINES["4g"], 40448),
        ("7g.80gb", mig.SHAPE_7G, _HOPPER_ENGINES["7g"], 81152),
    )
)

H100_SXM: Final = GpuProduct(
    key="h100-sxm5-80gb",
    product_name="NVIDIA H100 80GB HBM3",
    pci_name="GH100 [H100 SXM5 80GB]",
    # HMM: driver 0.5.0 on p5.48xlarge (H100 80GB HBM3).
    addressing_mode=AddressingMode.HMM,
    architecture="Hopper",
    compute_capability="9.0",
    ids=PciIds(
        vendor=NVIDIA_VENDOR,
        device=0x2330,
        subsystem_vendor=NVIDIA_VENDOR,
        subsystem_device=0x16C1,
        class_code=CLASS_3D_CONTROLLER,
    ),
    vf_device_id=0x2330,
    memory_mib=81559,
    multiprocessors=132,
    mig_needs_reset=False,
    mig_profiles=_H100_PROFILES,
    vgpu_board="H100XM",
    # mdev type IDs in this catalogue are synthetic (stable, but not the numbers NVIDIA's manager assigns).
    vgpu_types=mig_backed_types(board="H100XM", profiles=_H100_PROFILES, first_type_id=1100)
    + time_sliced_types(
        board="H100XM",
        # 16C: at most 5 per GPU (5 × 16 GB fills the 80 GB board; the reference's "6" would oversubscribe it).
        sizes=((80, 1), (40, 2), (20, 4), (16, 5), (10, 8), (8, 10), (5, 16), (4, 20)),
        first_type_id=1120,
    ),
)

# H200 per-profile memory is not in NVIDIA's documentation; these are what `nvidia-smi mig -lgip` printed on an
# H200 SXM (NVIDIA/mig-parted issue #120): 16.00, 32.25, 69.50 and 139.75 GiB.
_H200_PROFILES: Final = _profiles(
    (
        ("1g.18gb", mig.SHAPE_1G, _HOPPER_ENGINES["1g"], 16384),
        ("1g.18gb+me", mig.SHAPE_1G_ME, _HOPPER_ENGINES["1g+me"], 16384),
        ("1g.35gb", mig.SHAPE_1G_DOUBLE, _HOPPER_ENGINES["1g double"], 33024),
        ("2g.35gb", mig.SHAPE_2G, _HOPPER_ENGINES["2g"], 33024),
        ("3g.71gb", mig.SHAPE_3G, _HOPPER_ENGINES["3g"], 71168),
        ("4g.71gb", mig.SHAPE_4G, _HOPPER_ENGINES["4g"], 71168),
        ("7g.141gb", mig.SHAPE_7G, _HOPPER_ENGINES["7g"], 143104),
    )
)

# Time-sliced H200 maxima beyond floor(141 GB / size) are capped by the board's 32 VFs; 8C at 16 follows NVIDIA's
# habit of power-of-two densities for the small types. Unverified against NVIDIA's vGPU type tables.
_H200_TIME_SLICED: Final = ((141, 1), (70, 2), (35, 4), (28, 5), (17, 8), (14, 10), (8, 16), (7, 20), (4, 32))

H200_SXM: Final = GpuProduct(
    key="h200-sxm-141gb",
    product_name="NVIDIA H200",
    pci_name="GH100 [H200 SXM 141GB]",
    # HMM: what the H200 captures on x86 HGX hosts show.
    addressing_mode=AddressingMode.HMM,
    architecture="Hopper",
    compute_capability="9.0",
    ids=PciIds(
        vendor=NVIDIA_VENDOR,
        device=0x2335,
        subsystem_vendor=NVIDIA_VENDOR,
        subsystem_device=0x18BE,
        class_code=CLASS_3D_CONTROLLER,
    ),
    vf_device_id=0x2335,
    memory_mib=143771,
    multiprocessors=132,
    mig_needs_reset=False,
    mig_profiles=_H200_PROFILES,
    vgpu_board="H200X",
    vgpu_types=mig_backed_types(board="H200X", profiles=_H200_PROFILES, first_type_id=1300)
    + time_sliced_types(board="H200X", sizes=_H200_TIME_SLICED, first_type_id=1320),
)

H200_NVL: Final = GpuProduct(
    key="h200-nvl-141gb",
    product_name="NVIDIA H200 NVL",
    pci_name="GH100 [H200 NVL]",
    # HMM inferred: same chip as the H200 SXM, on x86 PCIe hosts.
    addressing_mode=AddressingMode.HMM,
    architecture="Hopper",
    compute_capability="9.0",
    ids=PciIds(
        vendor=NVIDIA_VENDOR,
        device=0x233B,
        subsystem_vendor=NVIDIA_VENDOR,
        subsystem_device=0x1996,
        class_code=CLASS_3D_CONTROLLER,
    ),
    vf_device_id=0x233B,
    memory_mib=143771,
    multiprocessors=132,
    mig_needs_reset=False,
    mig_profiles=_H200_PROFILES,
    vgpu_board="H200",
    vgpu_types=mig_backed_types(board="H200", profiles=_H200_PROFILES, first_type_id=1400)
    + time_sliced_types(board="H200", sizes=_H200_TIME_SLICED, first_type_id=1420),
)

# B200: 1g.23gb, 1g.23gb+me, 1g.45gb and 2g.45gb are `nvidia-smi mig -lgip` output on a B200 (NVIDIA/mig-parted
# PR #187, driver of March 2025: 20.50 and 44.25 GiB; 2g.45gb shows 4 copy engines where NVIDIA's guide says 3).
# 3g.90gb, 4g.90gb and 7g.180gb are what the NVIDIA DRA driver 0.5.0 published on a p6-b200 node with dynamic MIG
# (aws/karpenter-provider-aws, pkg/providers/nvidiadra, commit 971ab0b0; tests/data/captures/nvidia-karpenter-p6-b200):
# 89 GiB and 70/72 SMs for the 3g/4g profiles, 182784 MiB for 7g.
_B200_MIB: Final = 183359

B200: Final = GpuProduct(
    key="b200-180gb",
    product_name="NVIDIA B200",
    pci_name="GB100 [B200]",
    # HMM: driver 0.5.0 on p6-b200 (x86 HGX B200).
    addressing_mode=AddressingMode.HMM,
    architecture="Blackwell",
    compute_capability="10.0",
    ids=PciIds(
        vendor=NVIDIA_VENDOR,
        device=0x2901,
        subsystem_vendor=NVIDIA_VENDOR,
        subsystem_device=0x1999,
        class_code=CLASS_3D_CONTROLLER,
    ),
    vf_device_id=0x2901,
    memory_mib=_B200_MIB,
    multiprocessors=148,
    mig_needs_reset=False,
    mig_profiles=_profiles(
        (
            ("1g.23gb", mig.SHAPE_1G, (18, 2, 1, 0, 1, 0), 20992),
            ("1g.23gb+me", mig.SHAPE_1G_ME, (18, 2, 1, 0, 1, 1), 20992),
            ("1g.45gb", mig.SHAPE_1G_DOUBLE, (30, 2, 1, 0, 1, 0), 45312),
            ("2g.45gb", mig.SHAPE_2G, (36, 4, 2, 0, 2, 0), 45312),
            ("3g.90gb", mig.SHAPE_3G, (70, 6, 3, 0, 3, 0), 91136),
            ("4g.90gb", mig.SHAPE_4G, (72, 8, 4, 0, 4, 0), 91136),
            ("7g.180gb", mig.SHAPE_7G, (148, 16, 7, 0, 7, 1), 182784),
        )
    ),
)

GPU_PRODUCTS: Final[Mapping[str, GpuProduct]] = MappingProxyType(
    {p.key: p for p in (A100_40, A100_80, H100_SXM, H200_SXM, H200_NVL, B200)}
)
