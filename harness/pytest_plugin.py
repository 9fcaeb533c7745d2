"""pytest plugin (entry point ``pytest11: fakedev``): a real control plane per xdist worker, markers, options.

Fixtures have plain-function twins in :mod:`harness.cluster.local` (``local_cluster()``), so the same set-up works
outside pytest.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.cluster.build import cached_binaries
from harness.cluster.local import LocalCluster, start_local_cluster
from harness.cluster.nodes import NodeHeartbeats
from harness.reaper import reap_all
from kubeclient.client import KubeClient
from kubeclient.resources import NAMESPACES

MARKERS = {
    "cluster": "needs the real local control plane (built by `fakedev cluster build`)",
    "privileged": "needs root: network namespaces, veths, runc",
    "slow": "takes more than a few seconds on purpose (waits on real controllers)",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fakedev", "fakedev DRA harness")
    group.addoption(
        "--fakedev-keep-cluster",
        action="store_true",
        default=False,
        help="keep the control plane's run directory (logs, kubeconfig) after the session",
    )
    group.addoption(
        "--fakedev-run-base",
        default=None,
        help="where run directories are created (default: $FAKEDEV_RUN_BASE or the temp dir)",
    )


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")


def _run_base(config: pytest.Config) -> Path | None:
    value = config.getoption("--fakedev-run-base")
    return Path(value) if value else None


def pytest_sessionstart(session: pytest.Session) -> None:
    # Only the controller (or a non-xdist run) reaps, so workers never remove each other's live runs
    # (live runs are locked anyway; this just avoids doing the scan N times).
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        reap_all(base=_run_base(session.config))


@pytest.fixture(scope="session")
def local_cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """A real etcd + kube-apiserver + kube-scheduler + kube-controller-manager, one per xdist worker."""
    cluster = start_local_cluster(binaries=cached_binaries(), base=_run_base(request.config))
    try:
        yield cluster
    finally:
        cluster.stop(keep_run_dir=bool(request.config.getoption("--fakedev-keep-cluster")))


@pytest.fixture(scope="session")
def node_heartbeats(local_cluster: LocalCluster) -> Iterator[NodeHeartbeats]:
    """Keeps the Leases of the emulated nodes tests register fresh."""
    beats = NodeHeartbeats(client=local_cluster.client)
    beats.start()
    yield beats
    beats.stop()


@pytest.fixture
def kube(local_cluster: LocalCluster) -> KubeClient:
    """The admin client of the worker's control plane."""
    return local_cluster.client


def _dns_label(text: str, *, limit: int = 40) -> str:
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return label[:limit].strip("-") or "t"


@pytest.fixture
def test_namespace(kube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test, deleted afterwards."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")
    name = _dns_label(f"t-{worker}-{request.node.name}", limit=50) + f"-{os.urandom(2).hex()}"
    kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kube.delete(NAMESPACES, name)


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A DNS-label name unique to this test, for cluster-scoped objects and emulated nodes."""
    return _dns_label(request.node.name, limit=40) + f"-{os.urandom(3).hex()}"
