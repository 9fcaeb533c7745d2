"""A fleet replica's names, labels, metrics port, stop decision and orphan selection (pure)."""

from __future__ import annotations

from fakedev.cli.fleet.plan import (
    FLEET_LABEL,
    REPLICA_LABEL,
    FleetReplicaId,
    StopKind,
    compute_metrics_port,
    compute_stop_kind,
    select_orphans,
)


def _node(name: str, *, fleet: str, replica: str | None) -> dict[str, object]:
    labels = {FLEET_LABEL: fleet} | ({REPLICA_LABEL: replica} if replica is not None else {})
    return {"metadata": {"name": name, "labels": labels}}


def test_names_are_sharded_by_replica() -> None:
    assert FleetReplicaId(fleet="f", replica=3).node_names(count=2) == ["f-3-0", "f-3-1"]
    assert set(FleetReplicaId(fleet="f", replica=1).node_names(count=11)).isdisjoint(
        FleetReplicaId(fleet="f", replica=11).node_names(count=11)
    )


def test_the_fleet_labels_win_over_extra_ones() -> None:
    labels = FleetReplicaId(fleet="f", replica=2).node_labels(extra={FLEET_LABEL: "other", "team": "ml"})
    assert labels == {FLEET_LABEL: "f", REPLICA_LABEL: "2", "team": "ml"}
    assert FleetReplicaId(fleet="f", replica=2).selector() == "fakedev.io/fleet=f,fakedev.io/fleet-replica=2"


def test_metrics_port_per_replica_only_with_a_stride() -> None:
    assert compute_metrics_port(base=9464, stride=1, replica=3) == 9467
    assert compute_metrics_port(base=9464, stride=0, replica=3) == 9464
    assert compute_metrics_port(base=0, stride=1, replica=3) == 0


def test_stop_kind_tells_scale_down_from_replacement() -> None:
    assert compute_stop_kind(replica=1, statefulset_replicas=2) is StopKind.KUBELET_STOP
    assert compute_stop_kind(replica=1, statefulset_replicas=1) is StopKind.DECOMMISSION
    assert compute_stop_kind(replica=0, statefulset_replicas=None) is StopKind.DECOMMISSION


def test_orphans_are_surplus_own_nodes_and_ordinals_beyond_the_count() -> None:
    me = FleetReplicaId(fleet="f", replica=0)
    nodes = [
        _node("f-0-0", fleet="f", replica="0"),
        _node("f-0-5", fleet="f", replica="0"),  # --nodes lowered
        _node("f-1-0", fleet="f", replica="1"),
        _node("f-4-0", fleet="f", replica="4"),  # died hard during a scale-down
        _node("g-4-0", fleet="g", replica="4"),  # another fleet
        _node("f-x", fleet="f", replica=None),  # no ordinal: not ours to judge
    ]
    assert select_orphans(nodes, me=me, own=me.node_names(count=1), statefulset_replicas=2) == ["f-0-5", "f-4-0"]
    assert select_orphans(nodes, me=me, own=me.node_names(count=1), statefulset_replicas=None) == ["f-0-5"]
