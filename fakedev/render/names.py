"""Names rendered from structured IDs: devices, counter sets, slices, compatibility groups. Never parsed back."""

from __future__ import annotations

import hashlib
import re
from typing import Final

from fakedev.model.mig import MigProfile, Placement
from fakedev.model.pci import Bdf

SLICE_NAME_MAX: Final = 253
_NOT_LABEL: Final = re.compile(r"[^a-z0-9-]+")


def sanitize_label(text: str) -> str:
    """Lowercase, dots dropped (``1g.10gb`` → ``1g10gb``), anything else outside ``[a-z0-9-]`` turned into ``-``."""
    return _NOT_LABEL.sub("-", text.lower().replace(".", "")).strip("-")


def gpu_device(minor: int) -> str:
    return f"gpu-{minor}"


def vfio_device(index: int) -> str:
    """A GPU bound to vfio-pci, as the NVIDIA driver names it (its own index, not an NVIDIA minor)."""
    return f"gpu-vfio-{index}"


def mig_device(*, parent_minor: int, profile: MigProfile, placement: Placement) -> str:
    # gpu-0-mig-1g10gb-19-0: profile, GPU instance profile ID and start tell placements apart.
    return f"gpu-{parent_minor}-mig-{sanitize_label(profile.name)}-{profile.gi_profile_id}-{placement.start}"


def mig_device_by_size(*, parent_minor: int, profile: MigProfile, placement: Placement) -> str:
    """The NVIDIA driver v25.8.1's static MIG name: ``gpu-0-mig-19-0-1`` (GI profile ID, placement start, size)."""
    return f"gpu-{parent_minor}-mig-{profile.gi_profile_id}-{placement.start}-{placement.size}"


def vgpu_device(*, parent_minor: int, vgpu_type: str, index: int) -> str:
    # MIG-backed types use their placement start as index, time-sliced types their slot number.
    return f"gpu-{parent_minor}-vgpu-{sanitize_label(vgpu_type)}-{index}"


def counter_set(minor: int) -> str:
    return f"gpu-{minor}-counter-set"


def pci_device(bdf: Bdf) -> str:
    """DraNet's name for a PCI NIC: ``pci-0000-8a-00-0``."""
    return f"pci-{bdf.domain:04x}-{bdf.bus:02x}-{bdf.device:02x}-{bdf.function:x}"


def compatibility_group(kind: str) -> str:
    return sanitize_label(kind)


def resource_slice(*, node_name: str, driver: str, index: int) -> str:
    """``<node>-<driver with dots dashed>-<n>``; very long node names are shortened with a hash to stay unique."""
    base = f"{node_name}-{driver.replace('.', '-')}"
    suffix = f"-{index}"
    if len(base) + len(suffix) > SLICE_NAME_MAX:
        digest = hashlib.sha256(base.encode()).hexdigest()[:10]
        base = f"{base[: SLICE_NAME_MAX - len(suffix) - len(digest) - 1].rstrip('.-')}-{digest}"
    return base + suffix
