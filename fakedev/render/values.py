"""Attribute and quantity constructors, so every renderer spells the JSON the same way."""

from __future__ import annotations

import functools
import re
from typing import Final

from fakedev.render.types import Counter, DeviceAttribute, DeviceCapacity

STANDARD: Final = "resource.kubernetes.io"
PCI_BUS_ID: Final = f"{STANDARD}/pciBusID"
PCIE_ROOT: Final = f"{STANDARD}/pcieRoot"
NUMA_NODE: Final = f"{STANDARD}/numaNode"


def string(value: str) -> DeviceAttribute:
    return {"string": value}


def integer(value: int) -> DeviceAttribute:
    return {"int": value}


def boolean(*, value: bool) -> DeviceAttribute:
    return {"bool": value}


def version(value: str) -> DeviceAttribute:
    return {"version": semver(value)}


@functools.lru_cache(maxsize=256)
def semver(value: str) -> str:
    """Lenient → strict semver, as the NVIDIA driver's semver.MustParse(...).String() does: 580.95.05 → 580.95.5."""
    parts = [str(int(p)) for p in re.findall(r"[0-9]+", value)[:3]]
    return ".".join(parts + ["0"] * (3 - len(parts)))


def binary_quantity(mebibytes: int) -> str:
    """The API server's canonical form of a byte count given in MiB (40960 → ``40Gi``), so a read-back compares
    equal to what we sent."""
    value, suffixes = mebibytes, ["Mi", "Gi", "Ti", "Pi", "Ei"]
    suffix = suffixes.pop(0)
    while value and value % 1024 == 0 and suffixes:
        value //= 1024
        suffix = suffixes.pop(0)
    return f"{value}{suffix}" if value else "0"


def mebibytes(value: int) -> DeviceCapacity:
    return {"value": binary_quantity(value)}


def quantity(value: str) -> DeviceCapacity:
    return {"value": value}


def count(value: int) -> DeviceCapacity:
    return {"value": str(value)}


def counter(value: int) -> Counter:
    return {"value": str(value)}


def counter_mebibytes(value: int) -> Counter:
    return {"value": binary_quantity(value)}
