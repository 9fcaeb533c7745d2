"""Which device mixes each NVIDIA driver release can publish on one node, and the refusal for those it cannot.

Facts: docs/research/nvidia-releases.md sections 1.1, 2.1, 3.1 and 7. A profile's GPU modes stand for the driver's
feature gates: a ``dynamic`` MIG GPU means DynamicMIG is on, a ``passthrough`` GPU means PassthroughSupport is on.
vGPU is fakedev's own model (``extensions: [vgpu]``) and is left out of these rules; bare MIG devices offered beside it
(compatibility groups) are dynamic MIG and count as such.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Final

from fakedev.errors import RenderError
from fakedev.model.catalog import GpuProduct
from fakedev.model.inventory import GpuDevice, NodeInventory
from fakedev.model.profile import MigMode
from fakedev.model.releases import NvidiaRelease

FullGpuRule = Callable[[GpuProduct], bool]

FULL_GPU_UNDER_DYNAMIC_MIG: Final[Mapping[NvidiaRelease, FullGpuRule]] = MappingProxyType(
    {
        NvidiaRelease.V25_8_1: lambda _product: False,  # no DynamicMIG at all (refused below)
        NvidiaRelease.V25_12_0: lambda _product: True,
        # From v0.4.1 an Ampere GPU (MIG mode toggles only with a reset) is dynamic-MIG-capable only with MIG mode
        # already on, and then its full GPU is not published; Hopper and newer keep it.
        NvidiaRelease.V0_4_1: lambda product: not product.mig_needs_reset,
        NvidiaRelease.MAIN: lambda product: not product.mig_needs_reset,
    }
)
"""Whether a GPU's full device is published next to its dynamic MIG devices."""

PARTITIONS_UNDER_DYNAMIC_MIG: Final[Mapping[NvidiaRelease, FullGpuRule]] = MappingProxyType(
    {
        NvidiaRelease.V25_8_1: lambda _product: False,
        NvidiaRelease.V25_12_0: lambda _product: True,  # DynamicMIG covers every GPU, no capability check
        # Ampere with MIG mode off is not dynamic-MIG-capable and stays a plain full GPU.
        NvidiaRelease.V0_4_1: lambda product: not product.mig_needs_reset,
        NvidiaRelease.MAIN: lambda product: not product.mig_needs_reset,
    }
)
"""Whether DynamicMIG turns a GPU whose MIG mode is off into a partitioned one anyway."""


def _where(gpu: GpuDevice) -> str:
    return f"GPU {gpu.minor} ({gpu.product.key} at {gpu.bdf.render()})"


def mix_problems(inventory: NodeInventory, *, release: NvidiaRelease) -> list[str]:
    """Every way this node's devices break what ``release`` can publish; empty when it can publish them all."""
    pin = f"nvidia@{release.value}"
    problems: list[str] = []
    own = [g for g in inventory.gpus if not g.vgpu_modes]
    # GPUs with dynamic MIG devices: dynamic-mode GPUs, and vGPU GPUs offering bare MIG beside (compatibility groups).
    dynamic = list({m.parent.minor: m.parent for m in inventory.mig_devices if not m.precreated}.values())
    static = [g for g in own if g.mig_mode is MigMode.STATIC]
    if release is NvidiaRelease.V25_8_1:
        if dynamic:
            problems.append(
                f"{pin} has no dynamic MIG, but {_where(dynamic[0])} asks for it: set its `mig.mode` to static or "
                "disabled, or pin nvidia@v25.12.0 or newer"
            )
        if inventory.passthrough_gpus:
            problems.append(
                f"{pin} publishes no vfio devices, but the profile has passthrough GPUs: pin nvidia@v0.4.1 or newer"
            )
        return problems
    if dynamic and inventory.passthrough_gpus:
        problems.append(
            f"{pin} cannot publish vfio devices next to dynamic MIG (its DynamicMIG and PassthroughSupport gates "
            f"exclude each other), but {_where(dynamic[0])} is dynamic and the profile has passthrough GPUs: put "
            "them on separate nodes"
        )
    if inventory.passthrough_gpus and release is not NvidiaRelease.V25_12_0:
        # With PassthroughSupport on, v0.4.1 and later also publish a vfio device beside every GPU the host driver
        # owns that has no MIG devices (the scheduler picks one of the two). fakedev models only GPUs already bound
        # to vfio-pci, so it refuses the node rather than publish fewer devices than the release would.
        with_mig = {m.parent.minor for m in inventory.mig_devices}
        for gpu in own:
            if gpu.minor not in with_mig:
                problems.append(
                    f"{pin} publishes a vfio device beside every GPU without MIG devices once passthrough is on "
                    f"(PassthroughSupport), which fakedev does not model, but {_where(gpu)} has none next to the "
                    "passthrough GPUs: make it `passthrough: true` too, give it pre-created MIG instances, or put it "
                    "on a node without passthrough GPUs"
                )
    if dynamic and static:
        problems.append(
            f"{pin} cannot publish pre-created and dynamic MIG devices on one node (under DynamicMIG no static MIG "
            f"device is published), but {_where(static[0])} is static and {_where(dynamic[0])} dynamic: make them "
            "all static or all dynamic"
        )
    if dynamic:
        partitioned = PARTITIONS_UNDER_DYNAMIC_MIG[release]
        for gpu in own:
            if gpu.mig_mode is MigMode.DISABLED and partitioned(gpu.product):
                problems.append(
                    f"{pin} partitions every {'' if release is NvidiaRelease.V25_12_0 else 'Hopper-or-newer '}GPU "
                    f"under DynamicMIG, but {_where(gpu)} has MIG disabled next to dynamic GPUs: set its `mig.mode` "
                    "to dynamic, or put it on a node without dynamic MIG"
                )
    return problems


def check_mix(inventory: NodeInventory, *, release: NvidiaRelease) -> None:
    """Raise :class:`RenderError` naming the release and what would work, when it cannot publish this node."""
    problems = mix_problems(inventory, release=release)
    if problems:
        raise RenderError(f"profile {inventory.profile.name}: " + "; ".join(problems))
