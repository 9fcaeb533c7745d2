"""Removing a fleet's Nodes that no replica will run again: after a hard death, or by hand (``fakedev fleet clean``).

A Node goes with its slices and Lease (:func:`harness.cluster.nodes.delete_node`); pods bound to it go first,
deleted at once: no kubelet is left to end them, and without a pod garbage collector they would stay forever.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from harness.cluster.nodes import delete_node
from kubeclient import ApiError, KubeClient
from kubeclient.resources import NODES, PODS


def remove_nodes(client: KubeClient, *, names: Sequence[str]) -> list[str]:
    """Delete each Node with its pods, slices and Lease; returns the names removed (a Node already gone counts)."""
    removed = []
    for name in names:
        for pod in client.list(PODS, field_selector=f"spec.nodeName={name}"):
            meta = pod["metadata"]
            with contextlib.suppress(ApiError):
                client.delete(PODS, meta["name"], namespace=meta["namespace"], grace_seconds=0)
        delete_node(client, name=name)
        removed.append(name)
    return removed


def fleet_node_names(client: KubeClient, *, selector: str) -> list[str]:
    return sorted(n["metadata"]["name"] for n in client.list(NODES, label_selector=selector))
