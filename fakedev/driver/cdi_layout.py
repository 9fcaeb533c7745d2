"""Which CDI specs a driver release writes for prepared devices: kinds, file names, format and spec-level edits (pure).

The vendor is always ``k8s.<driver>``; what differs is keyed by release (``docs/research/nvidia-releases.md`` §1.4,
§2.4, §3.4, §7):

- fakedev's own layout (the example driver and ``dra.net``; DraNet itself writes no CDI spec): one JSON spec per
  claim, ``k8s.<driver>-device_<claim uid>.json``, kind ``k8s.<driver>/device``, devices ``<claim uid>-<device>``;
- NVIDIA v25.12.0, v0.4.1, main: one YAML spec per claim, ``k8s.<driver>-claim_<claim uid>.yaml``, kind
  ``k8s.<driver>/claim``, devices ``<claim uid>-<device>``, spec-level ``NVIDIA_VISIBLE_DEVICES=void``;
- NVIDIA v25.8.1: a node-wide base spec ``k8s.<driver>-device_base.yaml`` (kind ``k8s.<driver>/device``, one
  device per published device under its own name, spec-level ``NVIDIA_VISIBLE_DEVICES=void`` twice, as that
  release writes it) answered as ``k8s.<driver>/device=<device>``; a claim spec and a ``…/claim=<uid>-<device>`` ID
  only for devices whose claim adds edits of its own.

The vfio API node (``/dev/vfio/vfio``) is placed by release too: v25.12.0 always puts it in the claim spec's own
edits; v0.4.1 and later only when the request's ``VfioDeviceConfig`` sets ``iommu.enableAPIDevice``; releases
without vfio devices keep fakedev's placement, on the device next to its group node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

import cdi
from fakedev.model.releases import NvidiaRelease
from fakedev.render.published import Schema

VISIBLE_VOID: Final = "NVIDIA_VISIBLE_DEVICES=void"
FAKEDEV_CLASS: Final = "device"
CLAIM_CLASS: Final = "claim"
BASE_CLASS: Final = "device"
BASE_NAME: Final = "base"


class VfioApiNode(StrEnum):
    """Where a passthrough GPU's VFIO API node goes in the CDI specs."""

    ON_DEVICE = "on-device"
    CLAIM_SPEC = "claim-spec"
    ON_REQUEST = "on-request"
    """In the claim spec's own edits, only for requests whose config asks for it (``iommu.enableAPIDevice``)."""


@dataclass(frozen=True, kw_only=True)
class CdiStyle:
    """What one release writes, independent of the driver name."""

    claim_class: str
    suffix: str
    claim_spec_env: tuple[str, ...]
    base_spec_env: tuple[str, ...] | None
    """The base spec's own env; None: the release writes no base spec."""
    vfio_api_node: VfioApiNode


FAKEDEV_STYLE: Final = CdiStyle(
    claim_class=FAKEDEV_CLASS,
    suffix=".json",
    claim_spec_env=(),
    base_spec_env=None,
    vfio_api_node=VfioApiNode.ON_DEVICE,
)
_CLAIM_SPECS: Final = CdiStyle(
    claim_class=CLAIM_CLASS,
    suffix=".yaml",
    claim_spec_env=(VISIBLE_VOID,),
    base_spec_env=None,
    vfio_api_node=VfioApiNode.ON_REQUEST,
)
NVIDIA_STYLES: Final[Mapping[NvidiaRelease, CdiStyle]] = {
    # The toolkit's common edits set the variable and the plugin appends it again (§1.4).
    NvidiaRelease.V25_8_1: CdiStyle(
        claim_class=CLAIM_CLASS,
        suffix=".yaml",
        claim_spec_env=(),
        base_spec_env=(VISIBLE_VOID, VISIBLE_VOID),
        vfio_api_node=VfioApiNode.ON_DEVICE,
    ),
    NvidiaRelease.V25_12_0: CdiStyle(
        claim_class=CLAIM_CLASS,
        suffix=".yaml",
        claim_spec_env=(VISIBLE_VOID,),
        base_spec_env=None,
        vfio_api_node=VfioApiNode.CLAIM_SPEC,
    ),
    NvidiaRelease.V0_4_1: _CLAIM_SPECS,
    NvidiaRelease.MAIN: _CLAIM_SPECS,
}


@dataclass(frozen=True, kw_only=True)
class CdiLayout:
    """The CDI names and format one plugin uses: its driver name and its release's style."""

    driver: str
    style: CdiStyle

    @property
    def vendor(self) -> str:
        return f"k8s.{self.driver}"

    @property
    def has_base_spec(self) -> bool:
        return self.style.base_spec_env is not None

    def claim_kind(self) -> str:
        """Claim specs' kind; their device names carry the claim UID, so they are never reused."""
        return cdi.render_kind(vendor=self.vendor, class_name=self.style.claim_class)

    def base_kind(self) -> str:
        return cdi.render_kind(vendor=self.vendor, class_name=BASE_CLASS)

    def claim_spec_file(self, claim_uid: str) -> str:
        return f"{self.vendor}-{self.style.claim_class}_{claim_uid}{self.style.suffix}"

    def base_spec_file(self) -> str:
        return f"{self.vendor}-{BASE_CLASS}_{BASE_NAME}.yaml"

    def claim_device_id(self, *, claim_uid: str, device: str) -> str:
        return cdi.render_qualified_name(
            kind=self.claim_kind(), device=claim_device_name(claim_uid=claim_uid, device=device)
        )

    def base_device_id(self, device: str) -> str:
        return cdi.render_qualified_name(kind=self.base_kind(), device=device)


def cdi_layout_for(*, schema: Schema, nvidia: NvidiaRelease, driver: str) -> CdiLayout:
    """The layout of a plugin of ``schema`` serving ``driver``; ``nvidia`` matters only to the NVIDIA schema."""
    style = NVIDIA_STYLES[nvidia] if schema is Schema.NVIDIA else FAKEDEV_STYLE
    return CdiLayout(driver=driver, style=style)


def claim_device_name(*, claim_uid: str, device: str) -> str:
    return f"{claim_uid}-{device}"


def spec_file_prefixes(driver: str) -> tuple[str, ...]:
    """What the spec files of ``driver`` start with, in any layout (no other driver's do): claim specs, the base spec
    and files of earlier releases all carry one of these."""
    return tuple(f"k8s.{driver}-{c}_" for c in dict.fromkeys((FAKEDEV_CLASS, CLAIM_CLASS, BASE_CLASS)))


def claim_spec_files(*, driver: str, claim_uid: str) -> tuple[str, ...]:
    """Every name a claim spec of ``claim_uid`` may have in any layout: unprepare removes them all, so a claim
    prepared under another release (before an upgrade, or a ``--schema`` change) leaves nothing behind."""
    styles = (FAKEDEV_STYLE, *NVIDIA_STYLES.values())
    names = (CdiLayout(driver=driver, style=s).claim_spec_file(claim_uid) for s in styles)
    return tuple(dict.fromkeys(names))


def is_claim_spec(name: str, *, driver: str) -> bool:
    """Whether ``name`` is a claim spec file of ``driver`` (any layout; the base spec is the node's, not a claim's)."""
    base = CdiLayout(driver=driver, style=NVIDIA_STYLES[NvidiaRelease.V25_8_1]).base_spec_file()
    return name != base and name.startswith(spec_file_prefixes(driver))


def render_claim_spec(
    layout: CdiLayout,
    *,
    devices: Sequence[tuple[str, cdi.ContainerEdits]],
    device_nodes: tuple[cdi.DeviceNode, ...] = (),
) -> cdi.Spec:
    """One spec per claim: ``(CDI device name, edits)`` pairs under the claim kind; ``device_nodes`` are the
    release's spec-level nodes (the vfio API node of v25.12.0)."""
    return cdi.with_minimum_version(
        cdi.Spec(
            version="",
            kind=layout.claim_kind(),
            devices=tuple(cdi.Device(name=name, container_edits=edits) for name, edits in devices),
            container_edits=cdi.ContainerEdits(env=layout.style.claim_spec_env, device_nodes=device_nodes),
        )
    )


def render_base_spec(layout: CdiLayout, *, devices: Sequence[tuple[str, cdi.ContainerEdits]]) -> cdi.Spec:
    """The node-wide spec of a release that has one: every device under its own name, with the edits no claim
    changes."""
    return cdi.with_minimum_version(
        cdi.Spec(
            version="",
            kind=layout.base_kind(),
            devices=tuple(cdi.Device(name=name, container_edits=edits) for name, edits in devices),
            container_edits=cdi.ContainerEdits(env=layout.style.base_spec_env or ()),
        )
    )
