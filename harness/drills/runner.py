"""Run drills: set up nodes and classes, execute the steps in order, sample what happens, tear everything down.

The runner is driver-agnostic. Faults that need a driver's or a node's cooperation (kill a plugin, reboot a node,
report a device unhealthy, pull a NIC) go through a :class:`DrillEnvironment`; faults that are plain API or
control-plane actions (DeviceTaintRules, stopping kube-apiserver or etcd) are done here. Which is which is the
fault kind's :attr:`~harness.drills.scenario.FaultKind.performer`.
"""

from __future__ import annotations

import contextlib
import enum
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from harness.cluster.local import LocalCluster
from harness.drills.conditions import ConditionContext, evaluate
from harness.drills.in_cluster import NEEDS_CONTROL_PLANE
from harness.drills.requirements import api_served, cluster_gates, missing_requirements
from harness.drills.scenario import (
    ConditionStep,
    FaultKind,
    FaultStep,
    Performer,
    Scenario,
    Step,
    StepKind,
    WorkloadStep,
)
from harness.kube.manifests import apply_objects, load_manifests
from harness.kube.waits import describe_pod
from harness.kubevirt.verify import NodeView
from kubeclient import ApiError, JsonObj, KubeClient
from kubeclient.resources import (
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    NAMESPACES,
    PODS,
    RESOURCE_CLAIMS,
    Resource,
    resource_for,
)
from kubeclient.values import TaintEffect

SAMPLE_SECONDS: Final = 0.25
POLL_SECONDS: Final = 0.2
_COMPONENTS: Final[Mapping[FaultKind, str]] = {
    FaultKind.APISERVER_STOP: "kube-apiserver",
    FaultKind.APISERVER_START: "kube-apiserver",
    FaultKind.ETCD_STOP: "etcd",
    FaultKind.ETCD_START: "etcd",
}
"""The control-plane component each component fault stops or starts."""
OUTPUT_KEEP: Final = 8000
"""Characters of a pod's output the report keeps (its end), per pod whose output a condition read."""
_PLACEHOLDER: Final = re.compile(r"\{\{\s*(node|class|namespace)(?::([a-z0-9-]+))?\s*\}\}")

Progress = Callable[[str], None]


class NodeKind(enum.StrEnum):
    """What kind of node a drill ran on (the report says it)."""

    EMULATED = "emulated"
    """Nodes of the node emulator (runc containers), one per scenario node."""
    REAL = "real"
    """The real kubelet and containerd of this machine (``--real-node``), for a single-node scenario."""
    CLUSTER = "cluster"
    """The cluster's own nodes running the fakedev chart (``--in-cluster``)."""


class DrillEnvironment(Protocol):
    """What a driver (and its emulated nodes) must provide so drills can act on them."""

    @property
    def node_kind(self) -> NodeKind: ...

    def start_nodes(self, scenario: Scenario, *, prefix: str) -> dict[str, str]:
        """Start the scenario's nodes and drivers; return scenario node name → real node name."""
        ...

    def stop_nodes(self) -> None: ...

    def inject(self, step: FaultStep, *, device: str | None) -> str:
        """Do a fault the environment performs (``device``: resolved from ``claim:`` when the step names one)."""
        ...

    def pod_logs(self, namespace: str, name: str) -> str: ...

    def node_view(self, node: str) -> NodeView | None:
        """What ``kubevirt verify`` reads on ``node`` (CDI dir, prepared claims, sysfs), None if its files are not
        this machine's to read."""
        ...

    def device_health(self) -> dict[str, str]:
        """``<node>/<device>`` → Healthy, Unhealthy or Unknown, for every device the drivers report."""
        ...

    def blocker(self, step: FaultStep) -> str | None:
        """Why this environment cannot perform ``step`` (an environment fault), None when it can. Asked for every
        such step before a drill starts, so a drill that cannot be done is reported BLOCKED, not half run."""
        ...


@dataclass(frozen=True, kw_only=True)
class StepResult:
    index: int
    line: int
    kind: str
    title: str
    outcome: str
    """passed, failed, blocked (this cluster cannot do the step; see the message), or skipped (not reached)."""
    message: str
    start: float
    end: float


@dataclass(frozen=True, kw_only=True)
class Sample:
    t: float
    pods: Mapping[str, str]
    devices: Mapping[str, str]


@dataclass(kw_only=True)
class DrillResult:
    scenario: Scenario
    outcome: str = "passed"
    message: str = ""
    steps: list[StepResult] = field(default_factory=list)
    faults: list[tuple[float, str]] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    seconds: float = 0.0
    nodes: dict[str, str] = field(default_factory=dict)
    node_kind: NodeKind | None = None
    """None: the drill never got as far as starting nodes (blocked or refused up front)."""
    outputs: dict[str, str] = field(default_factory=dict)
    """Pod name → the end of its output, as last read by a condition (what the workload printed)."""


class StepFailed(Exception):  # noqa: N818 - a verdict, not an error
    pass


class StepBlocked(Exception):  # noqa: N818 - a verdict, not an error
    """The environment cannot do what the step asks on this cluster (the message says what is missing): the drill
    is neither passed nor failed, it is BLOCKED."""


@dataclass(kw_only=True)
class DrillRun:
    scenario: Scenario
    client: KubeClient
    env: DrillEnvironment
    cluster: LocalCluster | None
    progress: Progress
    namespace: str = ""
    classes: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, str] = field(default_factory=dict)
    result: DrillResult | None = None
    _t0: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _rules: list[str] = field(default_factory=list)
    _cluster_objects: list[tuple[Resource, str]] = field(default_factory=list)
    _stopped: list[str] = field(default_factory=list)
    """Control-plane components a fault stopped and no step started again yet."""

    # -- placeholders and manifests --------------------------------------------------------------------------------

    def render(self, text: str) -> str:
        def sub(m: re.Match[str]) -> str:
            kind, name = m.group(1), m.group(2)
            if kind == "namespace":
                return self.namespace
            table = self.nodes if kind == "node" else self.classes
            if name not in table:
                raise StepFailed(f"unknown {kind} {name!r} in a placeholder")
            return table[name]

        return _PLACEHOLDER.sub(sub, text)

    def objects(self, workload: str) -> list[JsonObj]:
        text = self.render(self.scenario.workloads[workload])
        copies = self.scenario.replicas.get(workload)
        if copies is None:
            return load_manifests(text, source=f"workload {workload}")
        return [
            obj
            for i in range(copies)
            for obj in load_manifests(text.replace("{{replica}}", str(i)), source=f"workload {workload}[{i}]")
        ]

    # -- the run ---------------------------------------------------------------------------------------------------

    def blocked_steps(self) -> list[tuple[FaultStep, str]]:
        """The fault steps this cluster and environment cannot do, with why (decided before anything is created)."""
        out = []
        for step in self.scenario.steps:
            if not isinstance(step, FaultStep):
                continue
            if step.fault.performer is Performer.ENVIRONMENT:
                reason = self.env.blocker(step)
            elif step.fault in _COMPONENTS and self.cluster is None:
                reason = f"{step.fault}: {NEEDS_CONTROL_PLANE}"
            else:
                reason = None
            if reason is not None:
                out.append((step, reason))
        return out

    def _report_blocked(self, result: DrillResult, blocked: Sequence[tuple[FaultStep, str]]) -> DrillResult:
        reasons = {step.index: reason for step, reason in blocked}
        first, why = blocked[0]
        result.outcome = "blocked"
        result.message = f"step {first.index + 1} (line {first.line}) {first.title!r}: {why}"
        if len(blocked) > 1:
            result.message += f" (and {len(blocked) - 1} more step(s) this cluster cannot do)"
        for step in self.scenario.steps:
            result.steps.append(
                StepResult(
                    index=step.index,
                    line=step.line,
                    kind=step.kind.value,
                    title=step.title,
                    outcome="blocked" if step.index in reasons else "skipped",
                    message=reasons.get(step.index, "not run: the drill is blocked"),
                    start=0.0,
                    end=0.0,
                )
            )
        return result

    def run(self) -> DrillResult:
        result = DrillResult(scenario=self.scenario)
        self.result = result
        self._t0 = time.monotonic()
        blocked = self.blocked_steps()
        if blocked:
            return self._report_blocked(result, blocked)
        prefix = f"{self.scenario.name[:20]}-{os.urandom(2).hex()}"
        self.namespace = f"drill-{prefix}"
        sampler = threading.Thread(target=self._sample, name="drill-sampler", daemon=True)
        try:
            self.client.create(
                NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
            )
            result.node_kind = self.env.node_kind
            self.nodes = self.env.start_nodes(self.scenario, prefix=prefix)
            result.nodes = dict(self.nodes)
            for spec in self.scenario.nodes:
                if any("@" in d for d in spec.drivers):  # a drill that needs a release says which it ran on
                    self.progress(f"node {spec.name} runs {', '.join(spec.drivers)}")
            for c in self.scenario.classes:
                self.make_class(c.name, c.cel, c.extended_resource_name, prefix=prefix)
            sampler.start()
            self._steps(result)
        except StepBlocked as exc:
            result.outcome, result.message = "blocked", f"set-up: {exc}"
        except (StepFailed, ApiError, OSError) as exc:
            result.outcome, result.message = "failed", f"set-up: {exc}"
        finally:
            self._stop.set()
            if sampler.is_alive():
                sampler.join(timeout=5)
            self.teardown()
            result.seconds = round(time.monotonic() - self._t0, 2)
        return result

    def make_class(self, name: str, cel: str, extended: str | None, *, prefix: str) -> None:
        real = name if extended else f"{prefix}-{name}"  # extended-resource classes keep the name users apply
        spec: dict[str, Any] = {"selectors": [{"cel": {"expression": self.render(cel)}}]}
        if extended:
            spec["extendedResourceName"] = extended
        self.client.apply(
            DEVICE_CLASSES,
            {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": real}, "spec": spec},
        )
        self.classes[name] = real

    def _steps(self, result: DrillResult) -> None:
        failed = False
        for step in self.scenario.steps:
            start = self._now()
            if failed:
                outcome, message = "skipped", "not reached"
            else:
                self.progress(f"  step {step.index + 1}: {step.title}")
                try:
                    outcome, message = "passed", self._do(step)
                except StepBlocked as exc:
                    outcome, message, failed = "blocked", str(exc), True
                    result.outcome = "blocked"
                    result.message = f"step {step.index + 1} (line {step.line}) {step.title!r}: {exc}"
                except (StepFailed, ApiError) as exc:
                    outcome, message, failed = "failed", str(exc), True
                    result.outcome = "failed"
                    result.message = f"step {step.index + 1} (line {step.line}) {step.title!r} failed: {exc}"
            result.steps.append(
                StepResult(
                    index=step.index,
                    line=step.line,
                    kind=step.kind.value,
                    title=step.title,
                    outcome=outcome,
                    message=message,
                    start=start,
                    end=start if outcome == "skipped" else self._now(),
                )
            )

    def _now(self) -> float:
        return round(time.monotonic() - self._t0, 3)

    def _context(self) -> ConditionContext:
        return ConditionContext(
            client=self.client,
            namespace=self.namespace,
            nodes=self.nodes,
            logs=self._logs,
            node_views=self.env.node_view,
        )

    def _logs(self, namespace: str, pod: str) -> str:
        """A pod's output from the environment; the report keeps the end of what was last read."""
        text = self.env.pod_logs(namespace, pod)
        if text and self.result is not None:
            self.result.outputs[pod] = text[-OUTPUT_KEEP:]
        return text

    def _do(self, step: Step) -> str:
        match step:
            case WorkloadStep(kind=StepKind.APPLY):
                for w in step.workloads:
                    for obj in apply_objects(self.client, self.objects(w), namespace=self.namespace):
                        res = resource_for(api_version=obj["apiVersion"], kind=obj["kind"])
                        if not res.namespaced:  # the namespace's deletion will not take these along
                            self._cluster_objects.append((res, obj["metadata"]["name"]))
                return f"applied {', '.join(step.workloads)}"
            case WorkloadStep():
                for w in step.workloads:
                    for obj in self.objects(w):
                        res = resource_for(api_version=obj["apiVersion"], kind=obj["kind"])
                        ns = self.namespace if res.namespaced else None
                        grace = 1 if res is PODS else None
                        self.client.delete(res, obj["metadata"]["name"], namespace=ns, grace_seconds=grace)
                return f"deleted {', '.join(step.workloads)}"
            case ConditionStep(kind=StepKind.ASSERT):
                seen = evaluate(self._rendered(step.condition), self._context())
                if seen is not None:
                    raise StepFailed(seen)
                return "holds"
            case ConditionStep():
                return self._wait(step)
            case FaultStep():
                return self._fault(step)

    def _rendered(self, condition: Mapping[str, Any]) -> dict[str, Any]:
        """Placeholders work in conditions too (names of cluster-scoped objects made per drill)."""
        return {k: self.render(v) if isinstance(v, str) else v for k, v in condition.items()}

    def _wait(self, step: ConditionStep) -> str:
        deadline = time.monotonic() + step.timeout
        started = time.monotonic()
        while True:
            seen = evaluate(self._rendered(step.condition), self._context())
            if seen is None:
                return f"after {time.monotonic() - started:.1f}s"
            if time.monotonic() >= deadline:
                raise StepFailed(f"not within {step.timeout:.0f}s: {seen}{self._stuck_pods()}")
            time.sleep(POLL_SECONDS)  # polling the API for the condition, as kubectl wait does

    def _stuck_pods(self) -> str:
        """Where the drill's pods that are not Running got stuck (states, events): the likely why of a timeout."""
        try:
            pods = self.client.list(PODS, namespace=self.namespace)
            stuck = [p["metadata"]["name"] for p in pods if p.get("status", {}).get("phase") != "Running"]
            said = [f"{name}: {describe_pod(self.client, name, namespace=self.namespace)}" for name in stuck[:3]]
        except (ApiError, OSError) as exc:
            return f" (pods not described: {exc})"
        return f" — {'; '.join(said)}" if said else ""

    def _device_of(self, step: FaultStep) -> str | None:
        """The device a fault targets: named directly, or the one the scheduler gave a claim."""
        if step.device is not None:
            return step.device
        if step.claim is None:
            return None
        claim = self.client.get(RESOURCE_CLAIMS, step.claim, namespace=self.namespace)
        results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
        for r in results:
            if step.request is None or r["request"] == step.request:
                return str(r["device"])
        raise StepFailed(f"claim {step.claim} has no allocated device")

    def _fault(self, step: FaultStep) -> str:
        assert self.result is not None
        self.result.faults.append((self._now(), f"{step.kind} {step.fault}"))
        if step.fault.performer is Performer.ENVIRONMENT:
            return self.env.inject(step, device=self._device_of(step))
        match step.fault:
            case FaultKind.TAINT_RULE:
                return self._taint_rule(step)
            case FaultKind.TAINT_RULE_REMOVE:
                return self._taint_rule_remove(step)
            case FaultKind.APISERVER_STOP | FaultKind.ETCD_STOP:
                return self._stop_component(step.fault)
            case FaultKind.APISERVER_START | FaultKind.ETCD_START:
                return self._start_component(step.fault)
        raise StepFailed(f"the runner cannot do fault {step.fault}")

    def _rule_name(self, step: FaultStep) -> str:
        return f"{self.namespace}-{step.rule or 'maintenance'}"

    def _taint_rule_remove(self, step: FaultStep) -> str:
        name = self._rule_name(step)
        self.client.delete(DEVICE_TAINT_RULES, name)
        return f"removed DeviceTaintRule {name}"

    def _taint_rule(self, step: FaultStep) -> str:
        name = self._rule_name(step)
        if step.driver is None:  # the scenario parser refuses this; a hand-made step may still lack it
            raise StepFailed(f"{step.fault} needs driver:")
        device = self._device_of(step)
        node = self.nodes.get(step.node, "") if step.node is not None else ""
        selector: dict[str, str] = {"driver": step.driver}
        if node:
            selector["pool"] = node
        if device:
            selector["device"] = device
        self.client.create(
            DEVICE_TAINT_RULES,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceTaintRule",
                "metadata": {"name": name},
                "spec": {
                    "deviceSelector": selector,
                    "taint": {
                        "key": "fakedev.io/maintenance",
                        "value": "drill",
                        "effect": (step.effect or TaintEffect.NO_EXECUTE).value,
                    },
                },
            },
        )
        self._rules.append(name)
        return f"DeviceTaintRule {name} on {selector}"

    def _local(self, fault: FaultKind) -> LocalCluster:
        if self.cluster is None:
            raise StepFailed(f"{fault} needs the local control plane (this drill is localOnly)")
        return self.cluster

    def _stop_component(self, fault: FaultKind) -> str:
        cluster = self._local(fault)
        name = _COMPONENTS[fault]
        self._stopped.append(name)
        cluster.stop_component(name, timeout=10)
        return f"{name} stopped"

    def _start_component(self, fault: FaultKind) -> str:
        cluster = self._local(fault)
        name = _COMPONENTS[fault]
        cluster.start_component(name)
        cluster.wait_ready(names=(name,), timeout=60)
        if name in self._stopped:
            self._stopped.remove(name)
        return f"{name} started and ready"

    # -- sampling and tear-down ------------------------------------------------------------------------------------

    def _sample(self) -> None:
        # One sample when the steps start and one when they end, so even a drill shorter than SAMPLE_SECONDS
        # (or one on a loaded machine) has a timeline with both ends.
        self._sample_once()
        while not self._stop.wait(SAMPLE_SECONDS):
            self._sample_once()
        self._sample_once()

    def _sample_once(self) -> None:
        assert self.result is not None
        with contextlib.suppress(Exception):  # the API may be down on purpose (apiserver-outage)
            pods = {
                p["metadata"]["name"]: (p.get("status") or {}).get("phase", "?")
                for p in self.client.list(PODS, namespace=self.namespace)
            }
            self.result.samples.append(Sample(t=self._now(), pods=pods, devices=self.env.device_health()))

    def teardown(self) -> None:
        # A drill leaves the control plane as it found it, even when it failed before its recovery step.
        for name in ("etcd", "kube-apiserver"):
            if name in self._stopped and self.cluster is not None:
                self.progress(f"  tear-down: starting {name} again (the drill left it stopped)")
                with contextlib.suppress(Exception):
                    self.cluster.start_component(name)
                    self.cluster.wait_ready(names=(name,), timeout=60)
                self._stopped.remove(name)
        with contextlib.suppress(Exception):
            for pod in self.client.list(PODS, namespace=self.namespace):
                self.client.delete(PODS, pod["metadata"]["name"], namespace=self.namespace, grace_seconds=0)
        with contextlib.suppress(Exception):
            self.env.stop_nodes()
        for rule in self._rules:
            with contextlib.suppress(Exception):
                self.client.delete(DEVICE_TAINT_RULES, rule)
        for real in self.classes.values():
            with contextlib.suppress(Exception):
                self.client.delete(DEVICE_CLASSES, real)
        for res, name in self._cluster_objects:
            with contextlib.suppress(Exception):
                self.client.delete(res, name)
        with contextlib.suppress(Exception):
            self.client.delete(NAMESPACES, self.namespace)


def run_drills(
    scenarios: Sequence[Scenario],
    *,
    client: KubeClient,
    env_factory: Callable[[], DrillEnvironment],
    cluster: LocalCluster | None,
    progress: Progress,
) -> list[DrillResult]:
    results = []
    for scenario in scenarios:
        if scenario.local_only and cluster is None:
            r = DrillResult(scenario=scenario, outcome="blocked", message=f"localOnly: {NEEDS_CONTROL_PLANE}")
            results.append(r)
            progress(f"{scenario.name}: blocked ({r.message})")
            continue
        lacking = _lacking(client, scenario)
        if lacking:
            r = DrillResult(
                scenario=scenario, outcome="blocked", message="refused: the cluster lacks " + "; ".join(lacking)
            )
            results.append(r)
            progress(f"{scenario.name}: {r.message}")
            continue
        progress(f"{scenario.name}: {scenario.description or scenario.expect.splitlines()[0]}")
        run = DrillRun(scenario=scenario, client=client, env=env_factory(), cluster=cluster, progress=progress)
        result = run.run()
        results.append(result)
        where = f" on {result.node_kind} node(s) {', '.join(result.nodes.values())}" if result.nodes else ""
        progress(
            f"{scenario.name}: {result.outcome} in {result.seconds:.1f}s{where}"
            + (f" — {result.message}" if result.message else "")
        )
    return results


def _lacking(client: KubeClient, scenario: Scenario) -> list[str]:
    req = scenario.requires
    if not req.feature_gates and not req.api_versions:
        return []
    try:
        gates = cluster_gates(client) if req.feature_gates else {}
        served = {v: api_served(client, v) for v in req.api_versions}
    except ApiError as exc:
        return [f"a readable API ({exc})"]
    return missing_requirements(
        gates=gates, served=served, feature_gates=req.feature_gates, api_versions=req.api_versions
    )
