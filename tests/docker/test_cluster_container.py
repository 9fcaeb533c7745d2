"""The testcontainers provider from the host: a whole fake cluster in one container (``FakedevContainer``), used as
another project's test suite would use it — through the kubeconfig it returns, kubectl and ``fakedev drill``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from contextlib import closing
from pathlib import Path

import docker
import pytest

from harness.docker import DockerDaemon
from harness.docker.clusterspec import KUBECONFIG_PATH, READY_PREFIX, RUN_ID_LABEL
from harness.kube.waits import wait_pod_phase
from harness.kubevirt.nodefiles import default_kubectl
from harness.pytest_plugin import CLUSTER_LOG_SECTION
from harness.testcontainers import FakedevContainer
from kubeclient import KubeClient
from kubeclient.resources import NODES, RESOURCE_SLICES
from tests.helpers import EXAMPLE_DRIVER

pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("docker")]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SEED_EXAMPLE = PROJECT_ROOT / "examples" / "seed-extended-resource.yaml"
SEED_POD = "extended-resource-dra-demo"
NODE = "fakedev-node-0"


def kubectl(kubeconfig: Path, *args: str) -> str:
    done = subprocess.run(
        [str(default_kubectl()), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


@pytest.fixture
def kubeconfig(fakedev_cluster_container: FakedevContainer, tmp_path: Path) -> Path:
    return fakedev_cluster_container.write_kubeconfig(tmp_path / "kubeconfig")


def test_kubectl_on_the_host_sees_the_emulated_node_and_its_slices(kubeconfig: Path) -> None:
    assert kubectl(kubeconfig, "get", "nodes", "-o", "name").split() == [f"node/{NODE}"]
    ready = kubectl(kubeconfig, "get", "node", NODE, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}")
    assert ready == "True"
    drivers = kubectl(
        kubeconfig, "get", "resourceslices", "--field-selector", f"spec.nodeName={NODE}", "-o",
        "jsonpath={.items[*].spec.driver}",
    )  # fmt: skip
    assert EXAMPLE_DRIVER in drivers.split()


def test_the_seed_example_s_pod_runs_in_the_container_and_sees_its_device(
    fakedev_cluster_container: FakedevContainer, kubeconfig: Path
) -> None:
    kubectl(kubeconfig, "apply", "-f", str(SEED_EXAMPLE))
    try:
        client = KubeClient.from_kubeconfig(kubeconfig)
        wait_pod_phase(client, SEED_POD, namespace="default", phase="Running", timeout=90)
        code, output = fakedev_cluster_container.exec(
            ["fakedev", "node", "logs", "--kubeconfig", KUBECONFIG_PATH, SEED_POD]
        )
        assert code == 0, output
        assert isinstance(output, bytes)
        assert "device allocated" in output.decode().splitlines()
    finally:
        kubectl(kubeconfig, "delete", "--grace-period=1", "--wait=true", "--timeout=60s", "-f", str(SEED_EXAMPLE))


def test_a_drill_runs_against_the_container_s_cluster(kubeconfig: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fakedev", "drill", "--kubeconfig", str(kubeconfig), "--report-dir", str(tmp_path),
         "gpu-exhaustion"],
        capture_output=True, text=True, timeout=600, check=False, cwd=PROJECT_ROOT,
    )  # fmt: skip
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert "1 passed" in done.stdout.splitlines(), done.stdout[-3000:]
    client = KubeClient.from_kubeconfig(kubeconfig)
    # The drill's own nodes came and went; the container's node is untouched.
    assert [n["metadata"]["name"] for n in client.list(NODES)] == [NODE]


def test_two_containers_side_by_side_do_not_collide(
    fakedev_cluster_container: FakedevContainer, docker_daemon: DockerDaemon, cluster_image: str, tmp_path: Path
) -> None:
    with FakedevContainer(profile="seed-example", image=cluster_image, docker_host=docker_daemon.host) as second:
        assert second.api_port != fakedev_cluster_container.api_port
        first_client = KubeClient.from_kubeconfig(fakedev_cluster_container.write_kubeconfig(tmp_path / "first"))
        second_client = KubeClient.from_kubeconfig(second.write_kubeconfig(tmp_path / "second"))
        for client in (first_client, second_client):
            assert [n["metadata"]["name"] for n in client.list(NODES)] == [NODE]
            assert {s["spec"]["driver"] for s in client.list(RESOURCE_SLICES)} == {EXAMPLE_DRIVER}
        # Two clusters, not one seen twice: each has its own identity.
        first_uid = first_client.get(NODES, NODE)["metadata"]["uid"]
        assert second_client.get(NODES, NODE)["metadata"]["uid"] != first_uid


def test_a_stopped_container_leaves_no_container_network_or_volume(
    docker_daemon: DockerDaemon, cluster_image: str
) -> None:
    with closing(docker.DockerClient(base_url=docker_daemon.host)) as client:
        networks = {n.id for n in client.networks.list()}
        volumes = {v.id for v in client.volumes.list()}
        with FakedevContainer(profile="seed-example", image=cluster_image, docker_host=docker_daemon.host) as c:
            run_id = c.run_id
            assert client.containers.list(filters={"label": f"{RUN_ID_LABEL}={run_id}"})
        assert not client.containers.list(all=True, filters={"label": f"{RUN_ID_LABEL}={run_id}"})
        assert {n.id for n in client.networks.list()} == networks
        assert {v.id for v in client.volumes.list()} == volumes


def test_docker_stop_ends_the_cluster_cleanly(docker_daemon: DockerDaemon, cluster_image: str) -> None:
    """SIGTERM (what `docker stop` and other languages' testcontainers send) drains and stops everything: exit 0."""
    with FakedevContainer(profile="seed-example", image=cluster_image, docker_host=docker_daemon.host) as cluster:
        container = cluster.get_wrapped_container()
        container.stop(timeout=60)
        container.reload()
        assert container.attrs["State"]["ExitCode"] == 0, cluster.logs_text()[-3000:]
        assert "[serve] stopping" in cluster.logs_text().splitlines()


def _run_ids(client: docker.DockerClient) -> set[str]:
    return {c.labels[RUN_ID_LABEL] for c in client.containers.list(all=True) if RUN_ID_LABEL in c.labels}


def test_a_failing_test_gets_the_container_s_log_in_its_report(
    pytester: pytest.Pytester, docker_daemon: DockerDaemon, cluster_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", docker_daemon.host)
    with closing(docker.DockerClient(base_url=docker_daemon.host)) as client:
        before = _run_ids(client)
    pytester.makepyfile(
        test_fails=textwrap.dedent(
            """
            def test_fails(fakedev_cluster_container):
                assert fakedev_cluster_container.api_port > 0
                raise AssertionError("on purpose")
            """
        )
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", f"--fakedev-cluster-image={cluster_image}",
    )  # fmt: skip
    text = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, text[-3000:]
    assert CLUSTER_LOG_SECTION in text
    assert READY_PREFIX in text.split(CLUSTER_LOG_SECTION, 1)[1]
    # The inner session removed its container when it ended.
    with closing(docker.DockerClient(base_url=docker_daemon.host)) as client:
        assert _run_ids(client) <= before
