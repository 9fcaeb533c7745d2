"""What a device preparer is: the per-kind knowledge prepare needs, as pure functions of the device model.

A preparer answers, for one allocated device of its kind: which opaque config kinds apply, which fake device nodes
and CDI container edits it gets (whole, or split into what no claim changes and what the claim adds, for releases
with a node-wide base spec), which attributes its metadata carries, what prepare must do on the host for it (an
mdev, a NIC), what its ``status.devices`` entry adds, and which UUID it contributes to ``NVIDIA_VISIBLE_DEVICES``.
Everything not overridden is "nothing of that".
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, NotRequired, TypedDict, TypeVar

import cdi
from fakedev.driver.cdi_edits import FakeNode
from fakedev.driver.config import GPU_KINDS, DeviceConfig
from fakedev.driver.metadata import NetworkData
from fakedev.model.inventory import PciFunction
from fakedev.nics.plan import HostNic, PreparedNic
from fakedev.render.types import DeviceAttribute

M = TypeVar("M")


class StatusCondition(TypedDict):
    type: str
    status: str
    reason: str
    lastTransitionTime: str
    message: NotRequired[str]
    """Absent in the conditions DraNet writes."""


@dataclass(frozen=True, kw_only=True)
class MdevRequest:
    """A mediated device prepare creates in the node's fake sysfs (on the first of ``parents`` with room)."""

    uuid: str
    parents: tuple[PciFunction, ...]
    mdev_type: str
    iommu_group: int


@dataclass(frozen=True, kw_only=True)
class EditsInput:
    """What a device's container edits may depend on besides its model."""

    device: str
    """The allocated device's name."""
    config: DeviceConfig
    visible_uuids: tuple[str, ...]
    """Every UUID the claim's devices contribute, in allocation order."""
    claim_uuid: str | None
    """The UUID minted for this claim (see :meth:`DevicePreparer.claim_uuid`)."""
    nic: PreparedNic | None
    dev_root: Path


@dataclass(frozen=True, kw_only=True)
class StatusExtras:
    """What a kind adds to its ``status.devices`` entry around the driver's own ``Ready`` condition."""

    before_ready: tuple[StatusCondition, ...] = ()
    ready: StatusCondition | None = None
    """The kind's own ``Ready`` condition in place of the driver's (DraNet words its own); None: the driver's."""
    after_ready: tuple[StatusCondition, ...] = ()
    network_data: NetworkData | None = None
    """Also written into the device's metadata entry."""


class DevicePreparer(ABC, Generic[M]):
    """How devices whose model is an ``M`` are prepared; stateless, one instance per kind in the table."""

    config_kinds: ClassVar[frozenset[str]] = GPU_KINDS
    """The opaque config kinds a claim may give this device."""

    def host_nic(self, model: M, *, device: str) -> HostNic | None:
        """The node's interface this device is (prepare configures it for the pod); None: not a NIC."""
        return None

    def fake_nodes(self, model: M) -> tuple[FakeNode, ...]:
        return ()

    def api_nodes(self, model: M) -> tuple[FakeNode, ...]:
        """Nodes a claim with such a device needs once, however many it has (the VFIO API node); not in
        :meth:`fake_nodes` or the edits: the release decides where they go (:mod:`fakedev.driver.cdi_layout`)."""
        return ()

    def claim_uuid(self, model: M, *, node_name: str, key: str) -> str | None:
        """A UUID that exists only for this claim (a dynamic MIG instance is created at prepare), from ``key``."""
        return None

    def visible_uuid(self, model: M, *, claim_uuid: str | None) -> str | None:
        """What the device adds to ``NVIDIA_VISIBLE_DEVICES``; None: nothing."""
        return None

    @abstractmethod
    def container_edits(self, model: M, *, use: EditsInput) -> cdi.ContainerEdits:
        """Never empty: CDI forbids devices without edits."""

    def device_edits(self, model: M, *, device: str, dev_root: Path) -> cdi.ContainerEdits:
        """The part of the edits no claim changes (device nodes, the device's identity): its entry in the node-wide
        base spec of a release that writes one. Default: empty (no base-spec entry)."""
        return cdi.ContainerEdits()

    def claim_edits(self, model: M, *, use: EditsInput) -> cdi.ContainerEdits:
        """What the claim adds to :meth:`device_edits` when a base spec holds those (its config, a UUID minted for
        it); empty: the device gets no claim-spec entry. Default: all of :meth:`container_edits`."""
        return self.container_edits(model, use=use)

    def mdev(self, model: M) -> MdevRequest | None:
        return None

    def metadata_attributes(self, model: M, *, published: Mapping[str, DeviceAttribute]) -> dict[str, Any]:
        """The device's attributes in the metadata file: as published, plus what a consumer needs beyond them."""
        return {k: dict(v) for k, v in published.items()}

    def status_extras(self, model: M, *, device: str, nic: PreparedNic | None, now: str) -> StatusExtras:
        return StatusExtras()
