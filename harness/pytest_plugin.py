"""pytest plugin (entry point ``pytest11: fakedev``): a real control plane per xdist worker, markers, options, and
the DRA driver conformance suite as parametrized tests.

Fixtures have plain-function twins (``harness.cluster.local.local_cluster()``,
``harness.conformance.context.conformance_context()``), so the same set-up works outside pytest. To check a driver
from any repository::

    # test_my_driver.py
    from harness.pytest_plugin import run_conformance_check

    def test_conformance(dra_conformance, conformance_check, request):
        run_conformance_check(dra_conformance, conformance_check, request=request)

    $ pytest test_my_driver.py --dra-driver "my-plugin --node {node} --kubelet-dir {kubelet_root} --cdi {cdi_dir}"
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.cluster.build import cached_binaries
from harness.cluster.local import LocalCluster, start_local_cluster
from harness.cluster.nodes import NodeHeartbeats, delete_node
from harness.conformance.checks import Check
from harness.conformance.context import ConformanceContext, conformance_context
from harness.conformance.runner import run_check
from harness.node.background import BackgroundLoop, BackgroundNode
from harness.node.drivers import DriverSpec, template_driver
from harness.node.emulator import NodeEmulator, NodeSettings
from harness.reaper import reap_all
from kubeclient.client import KubeClient
from kubeclient.resources import NAMESPACES

MARKERS = {
    "cluster": "needs the real local control plane (built by `fakedev cluster build`)",
    "privileged": "needs root: network namespaces, veths, runc",
    "slow": "takes more than a few seconds on purpose (waits on real controllers)",
    "fuzz": "a Hypothesis fuzz target (few examples by default; FAKEDEV_FUZZ_EXAMPLES=N for the standing run)",
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
    group.addoption(
        "--fakedev-cluster-image",
        default=None,
        help="image of the fakedev_cluster_container fixture (default: $FAKEDEV_CLUSTER_IMAGE, else "
        "fakedev.local/fakedev:<version>-cluster from `fakedev image build --with-cluster`)",
    )
    group.addoption(
        "--fakedev-cluster-profile",
        default="seed-example",
        help="node profile of the fakedev_cluster_container fixture's nodes (default: seed-example)",
    )
    group.addoption(
        "--fakedev-cluster-nodes", type=int, default=1, help="emulated nodes in fakedev_cluster_container (default 1)"
    )
    group.addoption(
        "--dra-driver",
        default=None,
        help="command of the DRA driver under test for the conformance fixtures, with placeholders "
        "{node} {kubelet_root} {registry_dir} {plugins_dir} {cdi_dir} {kubeconfig}",
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


# -- a whole fake cluster in a container (testcontainers) -----------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ClusterContainerSettings:
    """What the ``fakedev_cluster_container`` fixture starts; override ``fakedev_cluster_container_settings`` to
    choose in code (``docker_host`` None: Docker as ``DOCKER_HOST`` or the default socket says)."""

    profile: str
    nodes: int
    image: str | None = None
    docker_host: str | None = None


@pytest.fixture(scope="session")
def fakedev_cluster_container_settings(request: pytest.FixtureRequest) -> ClusterContainerSettings:
    """From ``--fakedev-cluster-image``, ``--fakedev-cluster-profile`` and ``--fakedev-cluster-nodes``."""
    return ClusterContainerSettings(
        profile=request.config.getoption("--fakedev-cluster-profile"),
        nodes=request.config.getoption("--fakedev-cluster-nodes"),
        image=request.config.getoption("--fakedev-cluster-image"),
    )


@pytest.fixture(scope="session")
def fakedev_cluster_container(fakedev_cluster_container_settings: ClusterContainerSettings) -> Iterator[Any]:
    """A :class:`harness.testcontainers.FakedevContainer`, started once per session (per xdist worker) and removed
    after it; ``.kubeconfig()`` works from the host. A test that fails gets the container's log in its report.
    Needs ``fakedev[testcontainers]``."""
    from harness.testcontainers import FakedevContainer

    settings = fakedev_cluster_container_settings
    container = FakedevContainer(
        profile=settings.profile, nodes=settings.nodes, image=settings.image, docker_host=settings.docker_host
    )
    with container:
        yield container


CLUSTER_LOG_SECTION = "fakedev cluster container log"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test that used ``fakedev_cluster_container`` gets the container's log as a report section."""
    report: pytest.TestReport = yield
    funcargs: dict[str, object] = getattr(item, "funcargs", {})
    container = funcargs.get("fakedev_cluster_container")
    if report.failed and report.when == "call" and container is not None:
        with contextlib.suppress(Exception):  # a container gone already has nothing to add
            report.sections.append((CLUSTER_LOG_SECTION, container.logs_text()))  # type: ignore[attr-defined]
    return report


# -- the DRA driver conformance suite as pytest tests ---------------------------------------------------------------


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test asking for ``conformance_check`` runs once per check of the catalogue (ids = check ids)."""
    if "conformance_check" in metafunc.fixturenames:
        from harness.conformance.checks import CATALOG

        metafunc.parametrize("conformance_check", CATALOG, ids=[c.id for c in CATALOG])


@pytest.fixture(scope="session")
def dra_driver(request: pytest.FixtureRequest) -> DriverSpec:
    """The driver under test, from ``--dra-driver "<command with {placeholders}>"``; override to hard-wire one."""
    command = request.config.getoption("--dra-driver")
    if not command:
        pytest.fail("no DRA driver to test: pass --dra-driver '<command>' or override the dra_driver fixture")
    return template_driver(tuple(shlex.split(command)))


@pytest.fixture(scope="session")
def dra_conformance(local_cluster: LocalCluster, dra_driver: DriverSpec) -> Iterator[ConformanceContext]:
    """An emulated node with the driver under test registered, shared by the conformance tests of a worker."""
    with conformance_context(
        client=local_cluster.client, kubeconfig=local_cluster.kubeconfig, driver=dra_driver
    ) as ctx:
        yield ctx


_OUTCOMES: dict[str, str] = {}


def run_conformance_check(ctx: ConformanceContext, check: Check, *, request: pytest.FixtureRequest) -> None:
    """Run one check as a test: failed → test failure with the driver's log, CDI specs and checkpoints attached."""
    result = run_check(ctx, check, done=_OUTCOMES)
    _OUTCOMES[check.id] = result.outcome
    for name, text in result.details.items():
        request.node.add_report_section("call", name, text)
    if result.traceback:
        request.node.add_report_section("call", "traceback", result.traceback)
    if result.outcome == "skipped":
        pytest.skip(result.message)
    if result.outcome == "blocked":
        pytest.skip(f"blocked: {result.message}")
    if result.outcome in ("failed", "error"):
        pytest.fail(f"[{check.clause}] {result.message}", pytrace=False)


@pytest.fixture
def emulated_node(local_cluster: LocalCluster, unique_name: str) -> Iterator[NodeEmulator]:
    """A node emulator (kubelet DRA part + runc pods) for a fresh Node; register drivers in its kubelet root."""
    base = Path(tempfile.mkdtemp(prefix="fd-"))
    loop = BackgroundLoop()
    loop.start()
    node = BackgroundNode(settings=NodeSettings(name=unique_name, base=base), client=local_cluster.client, loop=loop)
    emulator = node.start()
    try:
        yield emulator
    finally:
        node.stop(stop_pods=True)
        delete_node(local_cluster.client, name=unique_name)  # its slices must not attract later tests' pods
        loop.stop()
        reap_all(base=base)
        shutil.rmtree(base, ignore_errors=True)
