"""A real kubelet + containerd node on the worker's control plane (one per host at a time: they share the kubepods
cgroup; the xdist group keeps them on one worker and the host lock makes sure)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.cluster.build import NODE_GROUPS, cached_binaries, default_cache_root
from harness.cluster.local import LocalCluster
from harness.cluster.pki import CertPair
from harness.realnode.node import RealNode, RealNodeSettings


@pytest.fixture(scope="module")
def real_node(local_cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[RealNode]:
    """A module sets ``REAL_NODE_ADDRESS`` to get its own loopback address (and node name): a kubelet's ports are
    per address, so two modules never wait on each other's kubelet to let go of 10250."""
    pki = local_cluster.layout.pki
    node = RealNode(
        settings=RealNodeSettings(
            binaries=cached_binaries(groups=NODE_GROUPS),
            server=local_cluster.server,
            ca=CertPair(cert=pki / "ca.crt", key=pki / "ca.key"),
            cache_root=default_cache_root(),
            address=getattr(request.module, "REAL_NODE_ADDRESS", "127.0.0.1"),
            lock_timeout=900,  # another worker's real node (never with loadgroup; the lock makes sure)
        )
    )
    node.start(client=local_cluster.client)
    try:
        yield node
    finally:
        node.stop()
