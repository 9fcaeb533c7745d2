"""Which release of each real driver a node imitates, and what fakedev adds that no release has.

A release is written ``<schema>@<release>`` (``nvidia@v0.4.1``, ``dranet@main``), on the command line (``--schema``)
and in a profile (``releases: {nvidia: v25.12.0}``). The default is each driver's newest *release*, never main: a
selector that works on fakedev's default must work on what a cluster installs from the driver's chart.
The enums are in release order, oldest first; renderers compare with :func:`at_least`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Final, TypeVar

from fakedev.errors import ProfileError


class NvidiaRelease(StrEnum):
    """Releases of kubernetes-sigs/dra-driver-nvidia-gpu (SemVer from 0.4; v0.4.1 is the one after v25.12.0)."""

    V25_8_1 = "v25.8.1"
    V25_12_0 = "v25.12.0"
    V0_4_1 = "v0.4.1"
    MAIN = "main"


class DranetRelease(StrEnum):
    """Releases of kubernetes-sigs/dranet."""

    V1_4_0 = "v1.4.0"
    MAIN = "main"


class Extension(StrEnum):
    """What fakedev can publish that no release of the real driver does; a profile must opt in to each."""

    VGPU = "vgpu"
    """NVIDIA vGPU devices (time-sliced and MIG-backed) and the compatibility groups that keep them apart."""


NVIDIA_DEFAULT: Final = NvidiaRelease.V0_4_1
DRANET_DEFAULT: Final = DranetRelease.V1_4_0

# The schemas that have releases, by the name used before the '@'.
RELEASES: Final[dict[str, type[NvidiaRelease] | type[DranetRelease]]] = {
    "nvidia": NvidiaRelease,
    "dranet": DranetRelease,
}


_R = TypeVar("_R", NvidiaRelease, DranetRelease)


def at_least(release: _R, since: _R) -> bool:
    """Whether ``release`` is ``since`` or newer (main is newer than every release)."""
    order = list(type(release))
    return order.index(release) >= order.index(since)


@dataclass(frozen=True, kw_only=True)
class DriverReleases:
    """The release of each real driver a node imitates."""

    nvidia: NvidiaRelease = NVIDIA_DEFAULT
    dranet: DranetRelease = DRANET_DEFAULT

    def pinned(self, pin: SchemaPin) -> DriverReleases:
        """These releases with ``pin`` applied (a pin without a release changes nothing)."""
        match pin.schema, pin.release:
            case _, None:
                return self
            case "nvidia", NvidiaRelease() as nvidia:
                return replace(self, nvidia=nvidia)
            case "dranet", DranetRelease() as dranet:
                return replace(self, dranet=dranet)
        raise ProfileError(f"{pin.render()}: not a release of the {pin.schema} schema")  # parse_schema_pin prevents it

    def name_of(self, schema: str) -> str:
        """``nvidia@v0.4.1`` for the nvidia schema; a schema without releases is just its name."""
        match schema:
            case "nvidia":
                return f"nvidia@{self.nvidia.value}"
            case "dranet":
                return f"dranet@{self.dranet.value}"
        return schema

    def render(self) -> tuple[str, ...]:
        return (f"nvidia@{self.nvidia.value}", f"dranet@{self.dranet.value}")


@dataclass(frozen=True, kw_only=True)
class SchemaPin:
    """A schema as a user names it: ``nvidia``, ``nvidia@v25.12.0``, ``example``."""

    schema: str
    release: NvidiaRelease | DranetRelease | None = None

    def render(self) -> str:
        return self.schema if self.release is None else f"{self.schema}@{self.release.value}"


def known_pins(schemas: tuple[str, ...]) -> list[str]:
    """Every way to name a schema, for help texts and errors: ``nvidia``, ``nvidia@v25.8.1``, …"""
    out: list[str] = []
    for schema in schemas:
        out.append(schema)
        out += [f"{schema}@{r.value}" for r in RELEASES.get(schema, ())]
    return out


def parse_schema_pin(text: str, *, schemas: tuple[str, ...]) -> SchemaPin:
    """Parse ``schema[@release]``; ``schemas`` are the schema names there are. Errors list what is known."""
    schema, at, release = text.partition("@")
    if schema not in schemas:
        raise ProfileError(f"unknown schema {schema!r} in {text!r} (known: {', '.join(known_pins(schemas))})")
    if not at:
        return SchemaPin(schema=schema)
    releases = RELEASES.get(schema)
    if releases is None:
        raise ProfileError(f"the {schema} schema has no releases to choose from: write just {schema!r}")
    try:
        return SchemaPin(schema=schema, release=releases(release))
    except ValueError:
        names = ", ".join(r.value for r in releases)
        raise ProfileError(f"unknown {schema} release {release!r} in {text!r} (known: {names})") from None
