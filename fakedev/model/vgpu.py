"""NVIDIA vGPU (C-series) types: MIG-backed ``<board>-<slices>-<GB>C[ME]`` and time-sliced ``<board>-<GB>C``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from fakedev.model.mig import MigProfile

MDEV_DEVICE_API: Final = "vfio-pci"


@dataclass(frozen=True, kw_only=True)
class VgpuType:
    """One vGPU type a board offers; ``type_id`` names its ``mdev_supported_types/nvidia-<N>`` directory."""

    name: str
    type_id: int
    framebuffer_mib: int
    max_per_gpu: int
    mig_profile: str | None = None  # set for MIG-backed types

    @property
    def mig_backed(self) -> bool:
        return self.mig_profile is not None

    @property
    def mdev_type(self) -> str:
        return f"nvidia-{self.type_id}"

    @property
    def grid_name(self) -> str:
        # The string /sys/.../mdev_supported_types/nvidia-<N>/name holds.
        return f"GRID {self.name}"


def mig_backed_types(*, board: str, profiles: Sequence[MigProfile], first_type_id: int) -> tuple[VgpuType, ...]:
    """One MIG-backed type per MIG profile: ``1g.10gb`` → ``<board>-1-10C``, ``1g.10gb+me`` → ``<board>-1-10CME``."""
    types = []
    for offset, profile in enumerate(profiles):
        compute, _, rest = profile.name.partition("g.")
        gigabytes = rest.split("gb", 1)[0]
        suffix = "CME" if profile.shape.media_extensions else "C"
        types.append(
            VgpuType(
                name=f"{board}-{compute}-{gigabytes}{suffix}",
                type_id=first_type_id + offset,
                framebuffer_mib=profile.memory_mib,
                max_per_gpu=profile.shape.max_per_gpu,
                mig_profile=profile.name,
            )
        )
    return tuple(types)


def time_sliced_types(*, board: str, sizes: Sequence[tuple[int, int]], first_type_id: int) -> tuple[VgpuType, ...]:
    """Time-sliced types from ``(framebuffer GB, at most per GPU)`` pairs; all instances on a GPU share one size."""
    return tuple(
        VgpuType(
            name=f"{board}-{gigabytes}C",
            type_id=first_type_id + offset,
            framebuffer_mib=gigabytes * 1024,
            max_per_gpu=maximum,
        )
        for offset, (gigabytes, maximum) in enumerate(sizes)
    )


def slot_total(types: Sequence[VgpuType]) -> int:
    """Size of the ``vgpu-slots`` counter: the LCM of every time-sliced maximum, so each type's cost is whole."""
    maxima = [t.max_per_gpu for t in types if not t.mig_backed]
    return math.lcm(*maxima) if maxima else 0


def slot_cost(vgpu_type: VgpuType, *, total: int) -> int:
    """Slots one instance takes: ``total / max_per_gpu``, so exactly ``max_per_gpu`` instances fill a GPU."""
    return total // vgpu_type.max_per_gpu
