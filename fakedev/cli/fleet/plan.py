"""What a fleet replica is, as data: its nodes' names and labels, its metrics port, and what a stop means (pure).

A fleet is a StatefulSet whose pods each emulate K nodes. The ordinal (the ``apps.kubernetes.io/pod-index`` label,
handed in by the downward API) shards the names, so replicas never collide and a replaced pod gets the same nodes
back. Nodes carry the fleet and the replica as labels: clean-up selects by label and never parses a name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

FLEET_LABEL: Final = "fakedev.io/fleet"
REPLICA_LABEL: Final = "fakedev.io/fleet-replica"


class StopKind(StrEnum):
    """What a replica does when it is told to stop."""

    KUBELET_STOP = "kubelet-stop"
    """The pod is replaced (rollout, eviction, deleted by hand): leave the Nodes for the replacement to adopt."""
    DECOMMISSION = "decommission"
    """The replica is gone for good (scaled down, or the StatefulSet deleted): drain and delete its Nodes."""


@dataclass(frozen=True, kw_only=True)
class FleetReplicaId:
    fleet: str
    replica: int

    def node_names(self, *, count: int) -> list[str]:
        return [f"{self.fleet}-{self.replica}-{k}" for k in range(count)]

    def node_labels(self, *, extra: Mapping[str, str]) -> dict[str, str]:
        """The labels of every Node of this replica; the fleet's own win over ``extra`` (clean-up relies on them)."""
        return {**extra, FLEET_LABEL: self.fleet, REPLICA_LABEL: str(self.replica)}

    def selector(self) -> str:
        return f"{FLEET_LABEL}={self.fleet},{REPLICA_LABEL}={self.replica}"


def fleet_selector(fleet: str) -> str:
    return f"{FLEET_LABEL}={fleet}"


def compute_metrics_port(*, base: int, stride: int, replica: int) -> int:
    """Replicas sharing the host network (stride 1) each need a port of their own; 0 stays 0 (no server)."""
    return 0 if base == 0 else base + stride * replica


def compute_stop_kind(*, replica: int, statefulset_replicas: int | None) -> StopKind:
    """``statefulset_replicas`` None: the StatefulSet is gone (uninstall). The controller lowers ``spec.replicas``
    before it deletes the surplus pods, so at SIGTERM a scaled-down ordinal is already outside the range."""
    if statefulset_replicas is None or replica >= statefulset_replicas:
        return StopKind.DECOMMISSION
    return StopKind.KUBELET_STOP


def select_orphans(
    nodes: Sequence[Mapping[str, object]], *, me: FleetReplicaId, own: Sequence[str], statefulset_replicas: int | None
) -> list[str]:
    """Nodes of the fleet that nobody will run again: this replica's beyond its current count (``--nodes`` lowered),
    and those of ordinals at or beyond ``statefulset_replicas`` (a replica that died hard during a scale-down).
    ``nodes``: Node objects of the fleet (selected by its label)."""
    keep = set(own)
    orphans = []
    for node in nodes:
        meta = node.get("metadata")
        if not isinstance(meta, Mapping):
            continue
        name, labels = meta.get("name"), meta.get("labels")
        if not isinstance(name, str) or not isinstance(labels, Mapping) or labels.get(FLEET_LABEL) != me.fleet:
            continue
        raw = labels.get(REPLICA_LABEL)
        replica = int(raw) if isinstance(raw, str) and raw.isdigit() else None
        if replica is None:
            continue
        mine_but_surplus = replica == me.replica and name not in keep
        beyond = statefulset_replicas is not None and replica >= statefulset_replicas
        if mine_but_surplus or beyond:
            orphans.append(name)
    return sorted(orphans)
