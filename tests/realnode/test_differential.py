"""Differential: the same scenarios on the node emulator and on the real kubelet, compared as the plugin and the user
see them. Each scenario runs on both nodes at once (one thread each) against one fake ``gpu.example.com`` plugin per
node, and what is compared is normalized only for names that must differ (node, pod, claim, uid):

- a pod with a claim from a template, to Running and deleted: the calls the plugin receives with their batch sizes,
  the container's output, the claim's status, what is left afterwards;
- a device turning Unhealthy and back under a running pod: the container's ``allocatedResourcesStatus``;
- a NodePrepareResources that fails once: the pod's warning event, then Running on the retry;
- the plugin killed and started again under a running pod: re-registration, the pod left alone, unprepare by the new
  instance;
- the plugin killed for good: the node's ResourceSlices wiped after the kubelet's grace period.

Differences the emulator has on purpose are listed in docs/real-node.md and the README.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest

from fakedev.cli.rig import plugin_command
from fakedev.faults import CallFault
from fakedev.plugin.calls import read_calls
from fakedev.plugin.paths import PluginPaths
from fakedev.plugin.protocol import Call, ControlClient
from harness.cluster.local import LocalCluster
from harness.cluster.nodes import delete_node
from harness.kube.waits import wait_list, wait_object, wait_pod_phase
from harness.node.background import BackgroundLoop, BackgroundNode
from harness.node.drivers import DriverContext, render_driver_argv
from harness.node.emulator import NodeEmulator, NodeSettings
from harness.procs import wait_for
from harness.realnode.node import RealNode
from harness.reaper import reap_all
from kubeclient import KubeClient
from kubeclient.resources import (
    DEVICE_CLASSES,
    EVENTS,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
)
from kubeletapi.types import HealthState

pytestmark = [pytest.mark.cluster, pytest.mark.privileged, pytest.mark.xdist_group(name="realnode")]
REAL_NODE_ADDRESS = "127.0.0.2"

DRIVER = "gpu.example.com"
REGISTERED = {("NotifyRegistrationStatus", 0), ("NodeWatchResources opened", 0)}
"""The kubelet has registered the instance and subscribed to its health."""
PREPARE_CALLS = ("NodePrepareResources", "NodeUnprepareResources")
INJECTED = "injected by the differential test"
T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Side:
    """One node (emulated or real) with a fake seed-example plugin whose JSON log we read."""

    tag: str
    node: str
    kubelet_root: Path
    cdi_dir: Path
    logs: Path
    kubeconfig: Path
    container_output: Callable[[str, str], str]
    """(namespace, pod) → the container's output. The real kubelet serves it through the API server; the emulator
    has no kubelet HTTP endpoint (a known difference), so its runtime's log is read directly."""
    plugins: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def call_records(self) -> Path:
        """What the current plugin instance's gRPC interceptor recorded (each start gets its own file)."""
        return self.logs / f"diff-calls-{self.tag}-{len(self.plugins)}.jsonl"

    def start_plugin(self) -> None:
        """Start a plugin instance (after any earlier one) and wait for its registration and health stream."""
        n = len(self.plugins) + 1
        log = self.logs / f"diff-plugin-{self.tag}-{n}.log"
        argv = render_driver_argv(
            plugin_command(
                profile="seed-example",
                extra=("--log-level", "INFO", "--record-calls", str(self.logs / f"diff-calls-{self.tag}-{n}.jsonl")),
            ),
            context=DriverContext(
                node=self.node, kubelet_root=self.kubelet_root, cdi_dir=self.cdi_dir, kubeconfig=self.kubeconfig
            ),
        )
        with log.open("wb") as out:  # the child keeps its own copy of the descriptor
            self.plugins.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT))
        wait_for(
            lambda: set(self.calls()) >= REGISTERED,
            timeout=60,
            what=f"{self.node}: registration and the health stream",
            abort=lambda: None if self.plugins[-1].poll() is None else AssertionError(log.read_text()[-2000:]),
        )

    def kill_plugin(self) -> None:
        """SIGKILL: no chance to clean up, as when a driver pod is evicted or crashes."""
        proc = self.plugins[-1]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=20)

    def stop_plugins(self) -> None:
        for proc in self.plugins:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=20)

    def calls(self) -> list[tuple[str, int]]:
        """(call, claims in it) for every gRPC call the current plugin instance served, in order; a stream shows
        as ``<method> opened`` / ``<method> ended``."""
        return [
            (r["method"] if r.get("event") == "call" else f"{r['method']} {r.get('event')}", r.get("claims", 0))
            for r in read_calls(self.call_records)
        ]

    @property
    def control(self) -> ControlClient:
        """The current plugin instance's control socket (a refused request raises)."""
        return ControlClient(path=PluginPaths(kubelet_root=self.kubelet_root, driver=DRIVER).control_socket)


def registration_set(calls: list[tuple[str, int]]) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """Split calls into the registration phase (sorted: the kubelet opens the health stream concurrently with its
    NotifyRegistrationStatus, so their order is not defined) and the rest, in order."""
    start = next((i for i, (call, _n) in enumerate(calls) if call in PREPARE_CALLS), len(calls))
    return sorted(calls[:start]), calls[start:]


@pytest.fixture(scope="module")
def sides(real_node: RealNode, local_cluster: LocalCluster) -> Iterator[dict[str, Side]]:
    kube = local_cluster.client
    base = Path(tempfile.mkdtemp(prefix="fd-"))
    loop = BackgroundLoop()
    loop.start()
    emulated = BackgroundNode(
        settings=NodeSettings(name="diff-emulated", base=base), client=local_cluster.client, loop=loop
    )
    node = emulated.start()
    out = {
        "emulated": Side(
            tag="emulated",
            node=node.name,
            kubelet_root=node.layout.kubelet_root,
            cdi_dir=node.layout.cdi,
            logs=base,
            kubeconfig=local_cluster.kubeconfig,
            container_output=lambda ns, pod: _runtime_log(node, ns, pod),
        ),
        "real": Side(
            tag="real",
            node=real_node.name,
            kubelet_root=real_node.layout.kubelet_root,
            cdi_dir=real_node.layout.cdi_dir,
            logs=real_node.layout.logs,
            kubeconfig=local_cluster.kubeconfig,
            container_output=lambda ns, pod: api_log(kube, ns, pod),
        ),
    }
    try:
        both(out, lambda side: side.start_plugin())
        kube.create(
            DEVICE_CLASSES,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": "diff-example-gpu"},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
            },
        )
        yield out
    finally:
        for side in out.values():
            side.stop_plugins()
        kube.delete(DEVICE_CLASSES, "diff-example-gpu")
        emulated.stop(stop_pods=True)
        delete_node(kube, name="diff-emulated")  # its slices must not attract later tests' pods
        loop.stop()
        reap_all(base=base)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def template(kube: KubeClient, test_namespace: str) -> str:
    kube.create(
        RESOURCE_CLAIM_TEMPLATES,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "diff-gpu"},
            "spec": {
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "diff-example-gpu"}}]}}
            },
        },
        namespace=test_namespace,
    )
    return "diff-gpu"


def both(sides: dict[str, Side], scenario: Callable[[Side], T]) -> dict[str, T]:
    """Run ``scenario`` on both nodes at once; their clocks (kubelet back-offs, grace periods) then overlap."""
    with ThreadPoolExecutor(max_workers=len(sides)) as pool:
        futures = {tag: pool.submit(scenario, side) for tag, side in sides.items()}
        return {tag: f.result() for tag, f in futures.items()}


def _runtime_log(node: NodeEmulator, namespace: str, pod: str) -> str:
    worker = node.pod_worker(namespace=namespace, name=pod)
    return worker.container_logs() if worker else ""


def api_log(kube: KubeClient, namespace: str, pod: str) -> str:
    status, text = kube.get_text(f"/api/v1/namespaces/{namespace}/pods/{pod}/log")
    return text if status == 200 else ""


def normalize(value: T, names: Mapping[str, str]) -> T:
    """``value`` with every occurrence of each name (node, pod, claim, uid) replaced by its placeholder."""
    return cast(T, _replace(value, names))


def _replace(value: Any, names: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        for name, placeholder in sorted(names.items(), key=lambda kv: -len(kv[0])):
            value = value.replace(name, placeholder)
        return value
    if isinstance(value, list):
        return [_replace(v, names) for v in value]
    if isinstance(value, tuple):
        return tuple(_replace(v, names) for v in value)
    if isinstance(value, dict):
        return {k: _replace(v, names) for k, v in value.items()}
    return value


def _side_pod(side: Side, *, name: str, namespace: str, template: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": side.node},
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 2,
            "restartPolicy": "Never",
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "containers": [
                {
                    "name": "c",
                    "image": "busybox:1.36",
                    "command": ["sh", "-c", "echo device allocated; env | grep ^GPU_DEVICE_ | sort; sleep 3600"],
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
        },
    }


def _claim_of(kube: KubeClient, *, namespace: str, pod: str) -> dict[str, Any]:
    def mine(claim: dict[str, Any]) -> bool:
        return str(claim["metadata"]["name"]).startswith(f"{pod}-")

    items = wait_list(
        kube, RESOURCE_CLAIMS, namespace=namespace, predicate=lambda cs: any(map(mine, cs)), what=f"{pod}'s claim"
    )
    return next(c for c in items if mine(c))


def _run_pod(
    kube: KubeClient, side: Side, *, name: str, namespace: str, template: str
) -> tuple[dict[str, Any], dict[str, str]]:
    """Create the pod and wait for Running; returns its claim and the names to normalize."""
    kube.create(PODS, _side_pod(side, name=name, namespace=namespace, template=template), namespace=namespace)
    pod = wait_pod_phase(kube, name, namespace=namespace, phase="Running", timeout=120)
    claim = _claim_of(kube, namespace=namespace, pod=name)
    names = {
        side.node: "<node>",
        name: "<pod>",
        claim["metadata"]["name"]: "<claim>",
        claim["metadata"]["uid"]: "<claim-uid>",
        pod["metadata"]["uid"]: "<pod-uid>",
    }
    return claim, names


def _delete_pod(kube: KubeClient, side: Side, *, name: str, namespace: str, unprepared_before: int) -> None:
    kube.delete(PODS, name, namespace=namespace)
    wait_for(lambda: kube.get_or_none(PODS, name, namespace=namespace) is None, timeout=60, what=f"{name} gone")
    wait_for(
        lambda: side.calls().count(("NodeUnprepareResources", 1)) > unprepared_before,
        timeout=60,
        what=f"{side.node}: NodeUnprepareResources for {name}",
    )


def _side_slices(kube: KubeClient, side: Side) -> list[dict[str, Any]]:
    return kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={side.node},spec.driver={DRIVER}")


# -- scenarios --------------------------------------------------------------------------------------------------


def test_a_claim_template_pod_runs_and_is_cleaned_up_alike(
    sides: dict[str, Side], kube: KubeClient, test_namespace: str, template: str
) -> None:
    def scenario(side: Side) -> dict[str, Any]:
        name = f"diff-{side.tag}"
        before = len(side.calls())
        claim, names = _run_pod(kube, side, name=name, namespace=test_namespace, template=template)
        log = ""

        def logged() -> bool:
            nonlocal log
            log = side.container_output(test_namespace, name)
            return log.startswith("device allocated") and "GPU_DEVICE" in log

        wait_for(logged, timeout=30, what=f"{name}'s output")
        claim = kube.get(RESOURCE_CLAIMS, claim["metadata"]["name"], namespace=test_namespace)
        uid = claim["metadata"]["uid"]
        observed: dict[str, Any] = {
            "first_line": log.splitlines()[0],
            "env_names": sorted(line.split("=", 1)[0] for line in log.splitlines()[1:]),
            "reserved_for": [r["resource"] for r in claim["status"].get("reservedFor", [])],
            "device_conditions": [
                c["type"] for d in claim["status"].get("devices", []) for c in d.get("conditions", [])
            ],
            "cdi_files_while_running": len([p for p in side.cdi_dir.iterdir() if uid in p.name]),
        }
        _delete_pod(kube, side, name=name, namespace=test_namespace, unprepared_before=0)
        wait_for(
            lambda: kube.get_or_none(RESOURCE_CLAIMS, claim["metadata"]["name"], namespace=test_namespace) is None,
            timeout=60,
            what="the generated claim deleted",
        )
        observed["cdi_files_after"] = len([p for p in side.cdi_dir.iterdir() if uid in p.name])
        observed["calls"] = side.calls()[before:]
        observed["registration"], _rest = registration_set(side.calls())
        return normalize(observed, names)

    seen = both(sides, scenario)
    emulated, real = seen["emulated"], seen["real"]
    assert real["first_line"] == "device allocated"
    assert real["registration"] == sorted(
        [("GetInfo", 0), ("NotifyRegistrationStatus", 0), ("NodeWatchResources opened", 0)]
    )
    assert real["calls"] == [("NodePrepareResources", 1), ("NodeUnprepareResources", 1)]
    # Everything the plugin and the user observe is the same on both nodes.
    assert emulated == real


def test_an_unhealthy_device_shows_in_the_containers_allocated_resources_status_alike(
    sides: dict[str, Side], kube: KubeClient, test_namespace: str, template: str
) -> None:
    def health_of(pod: dict[str, Any]) -> list[Any]:
        return [cs.get("allocatedResourcesStatus") for cs in pod.get("status", {}).get("containerStatuses") or []]

    def reported(health: str) -> Callable[[dict[str, Any]], bool]:
        return lambda pod: any(
            r.get("health") == health for s in health_of(pod) for e in s or [] for r in e.get("resources", [])
        )

    def scenario(side: Side) -> dict[str, Any]:
        name = f"health-{side.tag}"
        unprepared = side.calls().count(("NodeUnprepareResources", 1))
        claim, names = _run_pod(kube, side, name=name, namespace=test_namespace, template=template)
        device = claim["status"]["allocation"]["devices"]["results"][0]["device"]
        observed: dict[str, Any] = {
            "before": health_of(wait_object(kube, PODS, name, namespace=test_namespace, predicate=reported("Healthy")))
        }
        side.control.set_health(device=device, health=HealthState.UNHEALTHY, message="XID 79")
        pod = wait_object(kube, PODS, name, namespace=test_namespace, predicate=reported("Unhealthy"), timeout=60)
        observed["unhealthy"] = health_of(pod)
        observed["phase_while_unhealthy"] = pod["status"]["phase"]
        side.control.set_health(device=device, health=HealthState.HEALTHY)
        pod = wait_object(kube, PODS, name, namespace=test_namespace, predicate=reported("Healthy"), timeout=60)
        observed["healthy_again"] = health_of(pod)
        _delete_pod(kube, side, name=name, namespace=test_namespace, unprepared_before=unprepared)
        return normalize(observed, names)

    seen = both(sides, scenario)
    assert seen["real"]["phase_while_unhealthy"] == "Running"
    assert seen["emulated"] == seen["real"]


def test_a_failing_prepare_is_reported_and_retried_alike(
    sides: dict[str, Side], kube: KubeClient, test_namespace: str, template: str
) -> None:
    def scenario(side: Side) -> dict[str, Any]:
        name = f"failing-{side.tag}"
        before = len(side.calls())
        unprepared = side.calls().count(("NodeUnprepareResources", 1))
        side.control.set_fault(call=Call.PREPARE, fault=CallFault(fail_times=1, error=INJECTED))
        try:
            _claim, names = _run_pod(kube, side, name=name, namespace=test_namespace, template=template)
        finally:
            side.control.clear_faults()
        events = kube.list(EVENTS, namespace=test_namespace, field_selector=f"involvedObject.name={name}")
        warnings = sorted(
            (e["type"], e["reason"], e["message"], e.get("count", 1))
            for e in events
            if e.get("reason") == "FailedPrepareDynamicResources"
        )
        observed: dict[str, Any] = {
            # The plugin's own error, as the user reads it: what the two nodes must agree on.
            "warnings": [w for w in warnings if INJECTED in w[2]],
            # The kubelet's own checks before it calls the plugin (claim fetch, reservation, registration) can
            # fail for a moment on a loaded machine and add a warning of the same reason; the emulator does not
            # reproduce those. Kept for the failure message, not compared.
            "other_warnings": [w for w in warnings if INJECTED not in w[2]],
            "prepare_calls": side.calls()[before:].count(("NodePrepareResources", 1)),
        }
        pod = kube.get(PODS, name, namespace=test_namespace)
        observed["restarts"] = [cs.get("restartCount") for cs in pod["status"].get("containerStatuses", [])]
        _delete_pod(kube, side, name=name, namespace=test_namespace, unprepared_before=unprepared)
        return normalize(observed, names)

    seen = both(sides, scenario)
    real, emulated = seen["real"], seen["emulated"]
    # Two calls at the plugin: one failed, one prepared. An extra warning without a third call did not come from it.
    assert real["prepare_calls"] == 2, seen
    assert [(kind, reason, count) for kind, reason, _m, count in real["warnings"]] == [
        ("Warning", "FailedPrepareDynamicResources", 1)
    ], seen
    assert emulated["other_warnings"] == [], seen
    compared = ("warnings", "prepare_calls", "restarts")
    assert {k: emulated[k] for k in compared} == {k: real[k] for k in compared}, seen


def test_a_restarted_plugin_is_registered_again_and_the_running_pod_is_left_alone_alike(
    sides: dict[str, Side], kube: KubeClient, test_namespace: str, template: str
) -> None:
    def scenario(side: Side) -> dict[str, Any]:
        name = f"restart-{side.tag}"
        _claim, names = _run_pod(kube, side, name=name, namespace=test_namespace, template=template)
        container = kube.get(PODS, name, namespace=test_namespace)["status"]["containerStatuses"][0]
        slices = sorted(s["metadata"]["name"] for s in _side_slices(kube, side))
        side.kill_plugin()
        side.start_plugin()
        pod = kube.get(PODS, name, namespace=test_namespace)
        after = pod["status"]["containerStatuses"][0]
        observed: dict[str, Any] = {
            "phase_after_restart": pod["status"]["phase"],
            "same_container": after.get("containerID") == container.get("containerID"),
            "restarts": after.get("restartCount"),
            "slices_kept": sorted(s["metadata"]["name"] for s in _side_slices(kube, side)) == slices,
        }
        _delete_pod(kube, side, name=name, namespace=test_namespace, unprepared_before=0)
        observed["registration"], observed["calls"] = registration_set(side.calls())
        return normalize(observed, names)

    seen = both(sides, scenario)
    real = seen["real"]
    assert real["phase_after_restart"] == "Running" and real["same_container"], real
    assert real["calls"] == [("NodeUnprepareResources", 1)], "the new instance unprepares the old one's claim"
    assert seen["emulated"] == real


def test_the_nodes_slices_are_wiped_after_the_grace_period_when_the_plugin_is_gone_alike(
    sides: dict[str, Side], kube: KubeClient
) -> None:
    def scenario(side: Side) -> dict[str, Any]:
        assert _side_slices(kube, side), f"{side.node} has no {DRIVER} slices to wipe"
        side.kill_plugin()
        gone_at = time.monotonic()
        wait_list(
            kube,
            RESOURCE_SLICES,
            field_selector=f"spec.nodeName={side.node},spec.driver={DRIVER}",
            predicate=lambda items: not items,
            timeout=120,
            what=f"{side.node}'s {DRIVER} slices wiped",
        )
        waited = time.monotonic() - gone_at
        side.start_plugin()  # and back: the slices are published again
        wait_for(lambda: bool(_side_slices(kube, side)), timeout=30, what=f"{side.node}'s slices published again")
        return {"waited_s": waited}

    seen = both(sides, scenario)
    # The kubelet waits 30 s for a plugin to come back before it wipes (a restart must not drop every allocation
    # candidate at once); the emulator keeps the same grace. Polling adds at most a second or two.
    for tag, observed in seen.items():
        assert 28 <= observed["waited_s"] <= 45, (tag, observed)
