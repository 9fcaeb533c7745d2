"""Deterministic identities (GPU/MIG/mdev UUIDs, MACs, InfiniBand GUIDs) from node name + device identity.

Every value is a hash of ``(kind, node name, device key)``: the same node and device always get byte-identical
identities, and two nodes never share one. Device keys are built from stable facts (the PCI address, the MIG
placement), never from names we render.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Final

_NAMESPACE: Final = "fakedev.io/identity/v1"


def _digest(*, kind: str, node: str, key: str) -> bytes:
    return hashlib.sha256(f"{_NAMESPACE}\0{kind}\0{node}\0{key}".encode()).digest()


def _uuid_text(raw: bytes) -> str:
    h = raw[:16].hex()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def gpu_uuid(*, node: str, key: str) -> str:
    """``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` as NVML prints it (no version bits are implied)."""
    return "GPU-" + _uuid_text(_digest(kind="gpu", node=node, key=key))


def mig_uuid(*, node: str, key: str, incarnation: int = 0) -> str:
    """``MIG-…`` with version nibble 5; a new ``incarnation`` models destroying and re-creating the instance."""
    raw = _digest(kind="mig", node=node, key=f"{key}#{incarnation}")[:16]
    return "MIG-" + str(uuid.UUID(bytes=raw, version=5))


def mdev_uuid(*, node: str, key: str) -> str:
    """A lowercase mdev UUID (what KubeVirt reads as ``mdevUUID``)."""
    return str(uuid.UUID(bytes=_digest(kind="mdev", node=node, key=key)[:16], version=4))


def example_uuid(*, node: str, index: int) -> str:
    """The dra-example-driver's ``gpu-<uuid>`` form."""
    return "gpu-" + str(uuid.UUID(bytes=_digest(kind="example", node=node, key=str(index))[:16], version=4))


def mac_address(*, node: str, key: str) -> str:
    """A unicast, locally administered MAC (first octet ``xxxxxx10``), so it can never clash with a vendor's."""
    raw = bytearray(_digest(kind="mac", node=node, key=key)[:6])
    raw[0] = (raw[0] & 0xFC) | 0x02
    return ":".join(f"{b:02x}" for b in raw)


def ib_hardware_address(*, node: str, key: str) -> str:
    """A 20-byte IPoIB hardware address: QPN + the fe80:: subnet prefix + a port GUID derived from the device."""
    guid = _digest(kind="ib-guid", node=node, key=key)[:8]
    raw = bytes.fromhex("00000ca9fe80000000000000") + guid
    return ":".join(f"{b:02x}" for b in raw)
