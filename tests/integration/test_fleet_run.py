"""`fakedev fleet run` against the worker's control plane: replicas of a fleet in status mode (no runc needed), the
way the chart's StatefulSet runs them — nodes Ready with slices, a pod's claim prepared and the pod Running, a
replaced replica adopting its Nodes, a scaled-down one removing them, `fakedev fleet clean` after a hard death."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.cluster.local import LocalCluster
from harness.cluster.nodes import LEASE_NAMESPACE, register_node
from harness.node.layout import NodeLayout
from harness.procs import wait_for
from harness.reaper import reap_all
from kubeclient import KubeClient
from kubeclient.resources import (
    LEASES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    STATEFUL_SETS,
)
from tests.helpers import claim_template_body, pod_body, pod_running_and_ready, scrape_metrics

pytestmark = [pytest.mark.cluster]

PER_REPLICA = 2
EXAMPLE = "gpu.example.com"
EMULATED_TAINT = {"key": "fakedev.io/emulated", "value": "true", "effect": "NoSchedule"}


@dataclass(kw_only=True)
class Replica:
    """One `fakedev fleet run` process and everything it printed."""

    ordinal: int
    base: Path
    popen: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    def close(self) -> None:
        """After the process is gone: its output read to the end, the pipe closed."""
        if self.reader is not None:
            self.reader.join(timeout=30)
        if self.popen.stdout is not None:
            self.popen.stdout.close()

    def read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)

    def failed(self) -> AssertionError | None:
        return None if self.popen.poll() is None else AssertionError(f"replica exited:\n{self.text()[-4000:]}")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
        return self.popen.wait(timeout=120)


@dataclass(kw_only=True)
class Fleet:
    name: str
    namespace: str
    kubeconfig: Path
    kube: KubeClient
    replicas: list[Replica] = field(default_factory=list)
    bases: list[Path] = field(default_factory=list)

    def start(self, ordinal: int, *, metrics_port: int = 0) -> Replica:
        base = Path(tempfile.mkdtemp(prefix="fdf-"))  # a fresh emptyDir, as a new pod gets; short for sockets
        self.bases.append(base)
        popen = subprocess.Popen(
            [
                sys.executable, "-m", "fakedev", "fleet", "run", "--fleet", self.name, "--replica", str(ordinal),
                "--nodes", str(PER_REPLICA), "--profile", "seed-example", "--pods", "status",
                "--taint", "fakedev.io/emulated=true:NoSchedule", "--label", "team=ml",
                "--kubeconfig", str(self.kubeconfig), "--base", str(base),
                "--statefulset", self.name, "--namespace", self.namespace,
                "--metrics-port", str(metrics_port),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        replica = Replica(ordinal=ordinal, base=base, popen=popen)
        replica.reader = threading.Thread(target=replica.read, daemon=True)
        replica.reader.start()
        self.replicas.append(replica)
        return replica

    def nodes(self, *, replica: int | None = None) -> list[str]:
        selector = f"fakedev.io/fleet={self.name}" + (
            f",fakedev.io/fleet-replica={replica}" if replica is not None else ""
        )
        return sorted(n["metadata"]["name"] for n in self.kube.list(NODES, label_selector=selector))

    def wait_ready(self, replica: Replica) -> None:
        wait_for(
            lambda: "node(s) ready (slices published)" in replica.text(),
            timeout=120,
            what=f"replica {replica.ordinal} to report its nodes ready",
            abort=replica.failed,
        )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _statefulset(name: str, *, replicas: int) -> dict[str, object]:
    """A StatefulSet standing in for the chart's: it only has to count replicas (its pods stay Pending)."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"fakedev.io/nowhere": "true"},
                    "containers": [{"name": "c", "image": "busybox"}],
                },
            },
        },
    }


@pytest.fixture
def fleet(local_cluster: LocalCluster, kube: KubeClient, test_namespace: str) -> Iterator[Fleet]:
    name = f"f{os.urandom(3).hex()}"
    kube.create(STATEFUL_SETS, _statefulset(name, replicas=2), namespace=test_namespace)
    made = Fleet(name=name, namespace=test_namespace, kubeconfig=local_cluster.kubeconfig, kube=kube)
    try:
        yield made
    finally:
        for replica in made.replicas:
            if replica.popen.poll() is None:
                replica.popen.kill()
                replica.popen.wait(timeout=30)
            replica.close()
        for node in made.nodes():
            kube.delete(NODES, node)
        for base in made.bases:
            reap_all(base=base)
            shutil.rmtree(base, ignore_errors=True)


def test_a_fleet_runs_replaces_scales_down_and_cleans(
    fleet: Fleet, kube: KubeClient, test_namespace: str, example_class: str
) -> None:
    # A Node of an ordinal the StatefulSet no longer counts (its replica died hard during a scale-down).
    register_node(
        kube, name=f"{fleet.name}-7-0", labels={"fakedev.io/fleet": fleet.name, "fakedev.io/fleet-replica": "7"}
    )
    port = _free_port()
    first = [fleet.start(0), fleet.start(1, metrics_port=port)]
    for replica in first:
        fleet.wait_ready(replica)
    names = [f"{fleet.name}-{r}-{k}" for r in range(2) for k in range(PER_REPLICA)]
    assert fleet.nodes() == names  # the orphan of replica 7 was removed by a replica at start
    assert f"removed 1 Node(s) no replica runs any more: {fleet.name}-7-0" in first[0].text() + first[1].text()
    for name in names:
        node = kube.get(NODES, name)
        labels = node["metadata"]["labels"]
        assert labels["fakedev.io/fleet-replica"] == name.split("-")[1] and labels["team"] == "ml"
        assert [t for t in node["spec"]["taints"] if t["key"] == EMULATED_TAINT["key"]] == [EMULATED_TAINT]
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
        assert ready == "True"
        assert kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={name},spec.driver=gpu.example.com")

    # A pod pinned to a node of replica 1: its claim is prepared by that replica's in-process plugin.
    target = f"{fleet.name}-1-1"
    kube.create(
        RESOURCE_CLAIM_TEMPLATES, claim_template_body("one-gpu", device_class=example_class), namespace=test_namespace
    )
    pod = pod_body(name="worker", node=target, templates={"gpu": "one-gpu"})
    pod["spec"]["tolerations"] = [{"key": "fakedev.io/emulated", "operator": "Exists", "effect": "NoSchedule"}]
    kube.create(PODS, pod, namespace=test_namespace)
    wait_for(
        lambda: pod_running_and_ready(kube, namespace=test_namespace, name="worker"),
        timeout=60,
        what="the pod on the emulated node to run",
        abort=first[1].failed,
    )
    claims = kube.list(RESOURCE_CLAIMS, namespace=test_namespace)
    assert len(claims) == 1 and claims[0]["status"]["allocation"]["devices"]["results"][0]["pool"] == target
    cdi_dir = NodeLayout.for_node(target, base=first[1].base).cdi
    assert list(cdi_dir.glob("*.json")), f"no CDI spec written in {cdi_dir}"
    # Replica 1's own metrics say it prepared the claim (and that its two nodes are ready).
    assert f"metrics on http://127.0.0.1:{port}/metrics" in first[1].text()
    series = scrape_metrics(port)
    assert series[("fakedev_dra_prepare_requests_total", (("driver", EXAMPLE), ("result", "ok")))] == 1
    assert series[("fakedev_fleet_nodes", (("state", "ready"),))] == PER_REPLICA, first[1].text()[-3000:]
    assert series[("fakedev_fleet_plugins_synced", (("driver", EXAMPLE),))] == PER_REPLICA
    assert series[("fakedev_dra_prepare_duration_seconds_count", (("driver", EXAMPLE),))] == 1
    assert series[("fakedev_fleet_pods", (("phase", "Running"),))] == 1
    assert series[("process_resident_memory_bytes", ())] > 0

    # The replica's pod is replaced (same ordinal, a fresh emptyDir): the Nodes stay and are adopted.
    assert first[1].stop() == 0
    assert "stopping: kubelet-stop" in first[1].text()
    assert fleet.nodes(replica=1) == names[2:]
    second = fleet.start(1)
    fleet.wait_ready(second)
    assert fleet.nodes() == names  # no duplicates, no new names
    new_cdi = NodeLayout.for_node(target, base=second.base).cdi
    wait_for(lambda: bool(list(new_cdi.glob("*.json"))), timeout=60, what="the claim prepared again after adoption")
    wait_for(
        lambda: pod_running_and_ready(kube, namespace=test_namespace, name="worker"),
        timeout=60,
        what="the pod Running again under the replacement",
        abort=second.failed,
    )

    # Scaled down to one replica: replica 1 decommissions its Nodes, their slices, Leases and pods.
    kube.patch(STATEFUL_SETS, fleet.name, {"spec": {"replicas": 1}}, namespace=test_namespace, patch_type="merge")
    assert second.stop() == 0
    assert "stopping: decommission" in second.text() and "decommissioned 2 Node(s)" in second.text()
    assert fleet.nodes() == names[:2]
    for name in names[2:]:
        assert not kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={name}")
        assert kube.get_or_none(LEASES, name, namespace=LEASE_NAMESPACE) is None
    assert kube.get_or_none(PODS, "worker", namespace=test_namespace) is None
    assert not list(new_cdi.glob("*.json")), "the claim was not unprepared before the node went"

    # Replica 0 dies hard: its Nodes stay until `fakedev fleet clean --replica 0` removes them (and only them).
    first[0].stop(signal.SIGKILL)
    assert fleet.nodes() == names[:2]
    stray = f"{fleet.name}-3-0"
    register_node(kube, name=stray, labels={"fakedev.io/fleet": fleet.name, "fakedev.io/fleet-replica": "3"})
    done = _fakedev("fleet", "clean", "--fleet", fleet.name, "--replica", "0", "--kubeconfig", str(fleet.kubeconfig))
    assert done.returncode == 0, done.stderr
    assert f"removed 2 Node(s) with their pods, slices and Leases: {', '.join(names[:2])}" in done.stdout
    assert fleet.nodes() == [stray]
    for name in names[:2]:
        assert not kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={name}")
        assert kube.get_or_none(LEASES, name, namespace=LEASE_NAMESPACE) is None

    # `fakedev fleet drain` (the chart's uninstall hook): the StatefulSet scaled to 0, its pods gone, then the Node
    # a killed replica left is removed and reported.
    done = _fakedev(
        "fleet", "drain", "--statefulset", fleet.name, "--namespace", test_namespace, "--fleet", fleet.name,
        "--timeout", "120", "--kubeconfig", str(fleet.kubeconfig),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert kube.get(STATEFUL_SETS, fleet.name, namespace=test_namespace)["spec"]["replicas"] == 0
    assert f"every replica of {test_namespace}/{fleet.name} is gone" in done.stdout
    assert f"1 Node(s) of fleet {fleet.name} outlived their replicas" in done.stderr
    assert "removed 1 Node(s)" in done.stdout
    assert fleet.nodes() == []
    assert kube.get_or_none(LEASES, stray, namespace=LEASE_NAMESPACE) is None
    again = _fakedev(
        "fleet", "drain", "--statefulset", fleet.name, "--namespace", test_namespace, "--fleet", fleet.name,
        "--kubeconfig", str(fleet.kubeconfig),
    )  # fmt: skip
    assert again.returncode == 0 and f"no Node of fleet {fleet.name} is left" in again.stdout, again.stderr


def _fakedev(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fakedev", *args], capture_output=True, text=True, timeout=180, check=False
    )


def test_bad_fleet_arguments_are_refused_before_anything_is_registered(local_cluster: LocalCluster) -> None:
    kubeconfig = str(local_cluster.kubeconfig)
    cases = [
        (["--fleet", "Bad_Name", "--profile", "seed-example"], "lower-case letters, digits and '-' only"),
        (["--fleet", "f", "--profile", "dgx-h100", "--schema", "dranet"], "fleets plug in no NICs"),
        (["--fleet", "f", "--profile", "seed-example", "--schema", "nvidia"], "has no devices for nvidia"),
        (["--fleet", "f" * 60, "--profile", "seed-example"], "longer than 63 characters"),
    ]
    for extra, message in cases:
        done = subprocess.run(
            [sys.executable, "-m", "fakedev", "fleet", "run", *extra, "--kubeconfig", kubeconfig],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode != 0 and message in done.stderr, (extra, done.stderr)
