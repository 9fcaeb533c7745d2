"""The drill environment for a cluster running the fakedev chart: real nodes, faults as API objects.

The nodes are the ones the chart's DaemonSet runs a plugin on (its pods carry ``app.kubernetes.io/name=fakedev``).
Device faults become DeviceFault objects the plugin applies (and reports Applied in their status); losing the driver
is deleting the DaemonSet's pod on the node. What is possible is decided by
:func:`harness.drills.in_cluster.plan_in_cluster`; everything else makes its step BLOCKED.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from fakedev.errors import KubeApiError
from fakedev.kube import DeviceFaultApi
from fakedev.plugin.device_faults import (
    MAX_COUNT,
    DeviceFaultKind,
    DeviceFaultSpec,
    FailPrepareParams,
    Params,
    Phase,
    SlowPrepareParams,
    UnhealthyParams,
    render_device_fault,
)
from fakedev.render import Schema
from harness.drills.in_cluster import InClusterMeans, plan_in_cluster
from harness.drills.runner import NodeKind, StepBlocked, StepFailed
from harness.drills.scenario import FaultKind, FaultStep, NodeSpec, Scenario
from harness.errors import NotReadyError
from harness.kubevirt.verify import NodeView
from harness.procs import wait_for
from kubeclient import ApiError, JsonObj, KubeClient
from kubeclient.resources import DEVICE_FAULTS, PODS, RESOURCE_SLICES
from kubeletapi.types import HealthState

PLUGIN_POD_LABEL: Final = "app.kubernetes.io/name=fakedev"
"""The label of the chart's DaemonSet pods (deploy/helm/fakedev)."""
DEFAULT_CHART_NAMESPACE: Final = "fakedev-system"
NIC_DRIVER: Final = Schema.DRANET.driver
_DRIVER_OF_SCHEMA: Final = {s.value: s.driver for s in Schema}
_HEALTH: Final = "health"
_NIC: Final = "nic"
_PREPARE: Final = "prepare"
_NAME_CHARS: Final = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True, kw_only=True)
class MadeFault:
    """A DeviceFault this environment created and has not deleted yet."""

    name: str
    node: str
    logical: str
    driver: str
    device: str | None
    role: str
    """health, nic or prepare: which recovery step deletes it."""


def _ready(pod: JsonObj) -> bool:
    status = pod.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    return status.get("phase") == "Running" and conditions.get("Ready", "True") == "True"


@dataclass(kw_only=True)
class ChartDrillEnvironment:
    """Drill on nodes running the chart's DaemonSet (``nodes``: which, in the order scenario nodes take them)."""

    client: KubeClient
    chart_namespace: str = DEFAULT_CHART_NAMESPACE
    node_names: tuple[str, ...] = ()
    """Nodes to use (empty: every node with a running plugin pod, by name)."""
    progress: Callable[[str], None] = lambda _: None
    nodes: dict[str, str] = field(default_factory=dict)
    """Scenario node name → real node name."""
    specs: dict[str, NodeSpec] = field(default_factory=dict)
    made: list[MadeFault] = field(default_factory=list)
    _prefix: str = ""
    _count: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def api(self) -> DeviceFaultApi:
        return DeviceFaultApi(client=self.client)

    # -- nodes -----------------------------------------------------------------------------------------------------

    def plugin_pods(self) -> dict[str, JsonObj]:
        """Node name → the running DaemonSet pod on it."""
        pods = self.client.list(PODS, namespace=self.chart_namespace, label_selector=PLUGIN_POD_LABEL)
        return {
            p["spec"]["nodeName"]: p
            for p in pods
            if p["spec"].get("nodeName") and _ready(p) and not p["metadata"].get("deletionTimestamp")
        }

    def start_nodes(self, scenario: Scenario, *, prefix: str) -> dict[str, str]:
        """Map the scenario's nodes onto nodes running the plugin; BLOCKED when there are too few, or a node lacks
        a driver the scenario needs (the chart's profile decides what a node has, the drill cannot)."""
        self._prefix = _NAME_CHARS.sub("-", prefix.lower()).strip("-")
        running = self.plugin_pods()
        where = f"pods labelled {PLUGIN_POD_LABEL} in namespace {self.chart_namespace}"
        for name in self.node_names:
            if name not in running:
                raise StepBlocked(f"node {name} runs no ready fakedev plugin pod ({where}; is the chart installed?)")
        candidates = list(self.node_names) or sorted(running)
        if len(candidates) < len(scenario.nodes):
            raise StepBlocked(
                f"needs {len(scenario.nodes)} node(s) running the fakedev DaemonSet, found {len(candidates)} "
                f"({where}: {', '.join(candidates) or 'none'})"
            )
        for spec, real in zip(scenario.nodes, candidates, strict=False):
            for schema in spec.drivers:
                driver = _DRIVER_OF_SCHEMA.get(schema, schema)
                if not self._publishes(real, driver):
                    raise StepBlocked(
                        f"node {real} (scenario node {spec.name}) publishes no ResourceSlices of {driver}: "
                        f"the chart's profile there lacks what the drill's profile {spec.profile} has"
                    )
            self.nodes[spec.name] = real
            self.specs[spec.name] = spec
        return dict(self.nodes)

    def _publishes(self, node: str, driver: str) -> bool:
        return bool(self.client.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={node},spec.driver={driver}"))

    def stop_nodes(self) -> None:
        """The nodes are the cluster's and stay; the DeviceFaults the drill left go (the plugin then clears them)."""
        for made in list(self.made):
            with contextlib.suppress(KubeApiError):
                self.api.delete(made.name)
        with self._lock:
            self.made.clear()

    # -- what the runner reads -------------------------------------------------------------------------------------

    @property
    def node_kind(self) -> NodeKind:
        return NodeKind.CLUSTER

    def node_view(self, node: str) -> NodeView | None:
        del node
        return None  # a cluster node's files are not this machine's to read

    def pod_logs(self, namespace: str, name: str) -> str:
        status, text = self.client.get_text(f"/api/v1/namespaces/{namespace}/pods/{name}/log", timeout=10)
        return text if status == 200 else ""

    def device_health(self) -> dict[str, str]:
        """What the drill's DeviceFaults hold unhealthy (the plugin's own view is behind its pod's socket)."""
        with self._lock:
            return {f"{m.logical}/{m.device}": "Unhealthy" for m in self.made if m.role in (_HEALTH, _NIC)}

    # -- faults ----------------------------------------------------------------------------------------------------

    def blocker(self, step: FaultStep) -> str | None:
        plan = plan_in_cluster(step)
        return plan.reason if plan.means is InClusterMeans.BLOCKED else None

    def inject(self, step: FaultStep, *, device: str | None) -> str:
        plan = plan_in_cluster(step)
        logical = step.node or next(iter(self.nodes))
        if logical not in self.nodes:
            raise StepFailed(f"the scenario has no node {logical}")
        node = self.nodes[logical]
        driver = self._driver(step, logical=logical, node=node)
        match plan.means:
            case InClusterMeans.BLOCKED | InClusterMeans.API:
                raise StepBlocked(plan.reason or f"{step.fault} is the runner's to do")
            case InClusterMeans.DELETE_PLUGIN_POD:
                return self._delete_plugin_pod(step, node=node)
            case InClusterMeans.CREATE_DEVICE_FAULT:
                return self._create(step, logical=logical, node=node, driver=driver, device=device)
            case InClusterMeans.DELETE_DEVICE_FAULT:
                return self._undo(step, node=node, driver=driver, device=device)

    def _driver(self, step: FaultStep, *, logical: str, node: str) -> str:
        if step.driver is not None:
            return _DRIVER_OF_SCHEMA.get(step.driver, step.driver)
        if step.fault in (FaultKind.NIC_UNPLUG, FaultKind.NIC_REPLUG):
            return NIC_DRIVER
        spec = self.specs.get(logical)
        if spec is not None and spec.drivers:
            return _DRIVER_OF_SCHEMA.get(spec.drivers[0], spec.drivers[0])
        slices = self.client.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={node}")
        drivers = sorted({str(s["spec"]["driver"]) for s in slices})
        if not drivers:
            raise StepFailed(f"node {node} publishes no ResourceSlices")
        return drivers[0]

    def _name(self) -> str:
        with self._lock:
            self._count += 1
            return f"{self._prefix}-{self._count}"[:253].strip("-")

    def _create(self, step: FaultStep, *, logical: str, node: str, driver: str, device: str | None) -> str:
        wanted: list[tuple[DeviceFaultKind, Params, str]] = []
        if step.fault is FaultKind.PREPARE_FAULT:
            fails = step.fail_times or 0
            if fails:
                # -1 is "every call until cleared": a count no drill exhausts, deleted by clear-faults like the rest.
                count = MAX_COUNT if fails < 0 else fails
                failing = FailPrepareParams(count=count, message=step.error or "injected fault")
                wanted.append((DeviceFaultKind.FAIL_PREPARE, failing, _PREPARE))
            if step.delay_seconds:
                delay: int | str = (
                    int(step.delay_seconds) if float(step.delay_seconds).is_integer() else f"{step.delay_seconds}s"
                )
                wanted.append((DeviceFaultKind.SLOW_PREPARE, SlowPrepareParams(delay=delay), _PREPARE))
            if not wanted:
                return f"prepare of {driver} on {node}: nothing to inject (no failTimes, no delaySeconds)"
        else:
            if device is None:
                raise StepFailed(f"{step.fault} needs device: or claim:")
            if step.fault is FaultKind.NIC_UNPLUG:
                wanted.append((DeviceFaultKind.NIC_UNPLUG, None, _NIC))
            else:
                message = "drill" if step.message is None else step.message
                unhealthy = UnhealthyParams(message=message, taint_effect=step.taint)
                wanted.append((DeviceFaultKind.UNHEALTHY, unhealthy, _HEALTH))
        names = []
        for kind, params, role in wanted:
            spec = DeviceFaultSpec(
                node_name=node, driver=driver, kind=kind, device=None if role == _PREPARE else device, params=params
            )
            name = self._name()
            self.api.create(render_device_fault(spec, name=name))
            with self._lock:
                self.made.append(
                    MadeFault(name=name, node=node, logical=logical, driver=driver, device=spec.device, role=role)
                )
            self._wait_applied(name, timeout=step.timeout)
            names.append(f"DeviceFault {name} ({kind}{f' {device}' if spec.device else ''})")
        return f"{', '.join(names)} applied by {driver} on {node}"

    def _wait_applied(self, name: str, *, timeout: float) -> None:
        """The plugin took the fault: its status says Applied (or Cleared, a FailPrepare already used up)."""
        seen: dict[str, object] = {}

        def taken() -> bool:
            seen.clear()
            obj = self.client.get_or_none(DEVICE_FAULTS, name) or {}
            seen.update(obj.get("status") or {})
            return seen.get("phase") in (Phase.APPLIED, Phase.CLEARED)

        def refused() -> Exception | None:
            if seen.get("phase") != Phase.FAILED:
                return None
            return StepFailed(f"the plugin refused DeviceFault {name}: {seen.get('error', '')}")

        try:
            wait_for(taken, timeout=timeout, interval=0.2, what=f"DeviceFault {name} applied", abort=refused)
        except NotReadyError as exc:
            raise StepFailed(
                f"DeviceFault {name} not applied within {timeout:.0f}s (status {seen or 'none'}): is the plugin "
                "watching DeviceFaults (RBAC on devicefaults.fakedev.io)?"
            ) from exc

    def _undo(self, step: FaultStep, *, node: str, driver: str, device: str | None) -> str:
        role = {FaultKind.NIC_REPLUG: _NIC, FaultKind.CLEAR_FAULTS: _PREPARE}.get(step.fault, _HEALTH)
        with self._lock:
            undone = [
                m
                for m in self.made
                if m.node == node and m.driver == driver and m.role == role and (role == _PREPARE or m.device == device)
            ]
        if not undone:
            return f"no DeviceFault of the drill to delete for {device or driver} on {node} (nothing to undo)"
        for made in undone:
            self.api.delete(made.name)
            with self._lock:
                self.made.remove(made)
        state = f" ({HealthState.HEALTHY})" if role == _HEALTH else ""
        return f"DeviceFault {', '.join(m.name for m in undone)} deleted{state}: {driver} on {node} clears it"

    def _delete_plugin_pod(self, step: FaultStep, *, node: str) -> str:
        pod = self.plugin_pods().get(node)
        if pod is None:
            raise StepFailed(f"node {node} runs no ready fakedev plugin pod in {self.chart_namespace}")
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        try:
            self.client.delete(PODS, name, namespace=self.chart_namespace)
        except ApiError as exc:
            raise StepFailed(f"deleting plugin pod {name}: {exc}") from exc
        if step.fault is FaultKind.DRIVER_KILL:
            return f"plugin pod {name} on {node} deleted (the DaemonSet will start another)"

        def replaced() -> bool:
            new = self.plugin_pods().get(node)
            return new is not None and new["metadata"]["uid"] != uid

        try:
            wait_for(replaced, timeout=step.timeout, interval=0.5, what=f"a new plugin pod on {node}")
        except NotReadyError as exc:
            raise StepFailed(
                f"the DaemonSet did not replace plugin pod {name} on {node} within {step.timeout:.0f}s"
            ) from exc
        return f"plugin pod {name} on {node} deleted; the DaemonSet's new one is ready"
