"""The drill environment for fakedev: emulated nodes with fake plugins, NIC hardware and fault hooks.

Nodes are fake node rigs (:mod:`fakedev.cli.rig`) sharing one background loop and one fabric; this module adds
what drills need on top: the scenario's node names, and the faults.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fakedev.cli.rig import FakeNodeRig, RigSite, RigSpec, remove_fabric
from fakedev.errors import ControlError, ControlRefusedError, ProfileError
from fakedev.faults import CallFault
from fakedev.nics import hardware
from fakedev.plugin.protocol import Call, ControlClient
from fakedev.render import Schema, SchemaPin, parse_schema
from harness.cluster.nodes import DEFAULT_CAPACITY
from harness.drills.runner import NodeKind, StepFailed
from harness.drills.scenario import FaultKind, FaultStep, NodeSpec, Scenario
from harness.kubevirt.verify import NodeView, emulated_node_view
from harness.node.background import BackgroundLoop
from harness.node.drivers import DriverProcess
from harness.node.layout import NodeLayout, node_run_id
from harness.reaper import reap_all
from kubeclient import KubeClient
from kubeclient.resources import RESOURCE_SLICES
from kubeletapi.types import HealthState

DRIVER_OF_SCHEMA = {s.value: s.driver for s in Schema}


def scenario_profile(profile: str, *, scenario: Scenario) -> str:
    """A profile file named by a scenario is relative to the scenario; a bare name is a built-in profile."""
    if profile.endswith((".yaml", ".yml")) and not Path(profile).is_absolute():
        return str((scenario.path.parent / profile).resolve())
    return profile


def node_pins(spec: NodeSpec) -> tuple[tuple[Schema, SchemaPin], ...]:
    """The node's drivers as schemas and release pins (``nvidia@main``); an unknown release fails the set-up."""
    try:
        return tuple(parse_schema(d) for d in spec.drivers)
    except ProfileError as exc:
        raise StepFailed(f"node {spec.name}: {exc}") from exc


@dataclass(frozen=True, kw_only=True)
class EmulatedNode:
    """A scenario's node: its name in the scenario and the rig that runs it."""

    logical: str
    rig: FakeNodeRig


@dataclass(kw_only=True)
class FakedevDrillEnvironment:
    client: KubeClient
    kubeconfig: Path
    loop: BackgroundLoop = field(default_factory=BackgroundLoop)
    base: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="fd-")))
    nodes: dict[str, EmulatedNode] = field(default_factory=dict)
    fabric: str | None = None

    @property
    def node_kind(self) -> NodeKind:
        return NodeKind.EMULATED

    # -- nodes -----------------------------------------------------------------------------------------------------

    def start_nodes(self, scenario: Scenario, *, prefix: str) -> dict[str, str]:
        self.loop.start()
        self.fabric = node_run_id(f"{prefix}-fabric")
        site = RigSite(
            client=self.client,
            kubeconfig=self.kubeconfig,
            loop=self.loop,
            base=self.base,
            rootfs_cache=self.base / "cache",
        )
        for spec in scenario.nodes:
            pins = node_pins(spec)
            schemas = tuple(schema for schema, _ in pins) if pins else None
            rig = FakeNodeRig.start(
                RigSpec(
                    name=f"{prefix}-{spec.name}"[:63].strip("-"),
                    profile=scenario_profile(spec.profile, scenario=scenario),
                    schemas=schemas,
                    with_nics=schemas is None or Schema.DRANET in schemas,
                    fabric=self.fabric,
                    wipe_grace=spec.wipe_grace,
                    capacity=_capacity(spec),
                    pins=tuple(pin for _, pin in pins),
                ),
                site=site,
            )
            self.nodes[spec.name] = EmulatedNode(logical=spec.name, rig=rig)
        return {logical: n.rig.name for logical, n in self.nodes.items()}

    def stop_nodes(self) -> None:
        for node in self.nodes.values():
            with contextlib.suppress(Exception):
                node.rig.stop()
        if self.fabric is not None:
            remove_fabric(self.fabric)
        with contextlib.suppress(Exception):
            self.loop.stop()
        reap_all(base=self.base)
        shutil.rmtree(self.base, ignore_errors=True)

    # -- what the runner reads -------------------------------------------------------------------------------------

    def node_layout(self, node: str) -> NodeLayout | None:
        for n in self.nodes.values():
            if n.rig.name == node:
                return n.rig.layout
        return None

    def node_view(self, node: str) -> NodeView | None:
        layout = self.node_layout(node)
        return None if layout is None else emulated_node_view(layout)

    def pod_logs(self, namespace: str, name: str) -> str:
        for node in self.nodes.values():
            emulator = node.rig.background.node
            worker = emulator.pod_worker(namespace=namespace, name=name) if emulator else None
            if worker is not None:
                return worker.container_logs()
        return ""

    def device_health(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for node in self.nodes.values():
            for driver, process in node.rig.plugins.items():
                if not process.alive():
                    continue
                # The sampler asks four times a second; a hung or restarting plugin just goes unsampled.
                with contextlib.suppress(ControlError, StepFailed):
                    status = self._control(node, driver, timeout=0.5).status()
                    for d in status["devices"]:
                        if d["health"] != HealthState.HEALTHY or d["taints"]:
                            out[f"{node.logical}/{d['device']}"] = d["health"]
        return out

    # -- faults ----------------------------------------------------------------------------------------------------

    def blocker(self, step: FaultStep) -> str | None:
        """Emulated nodes can suffer every fault: the drill holds the plugins, the node and its hardware."""
        del step
        return None

    def _node(self, step: FaultStep) -> EmulatedNode:
        return self.nodes[step.node or next(iter(self.nodes))]

    def _driver(self, node: EmulatedNode, step: FaultStep) -> tuple[str, DriverProcess]:
        driver = step.driver or next(iter(node.rig.plugins))
        if driver not in node.rig.plugins:
            raise StepFailed(f"node {node.logical} runs no driver {driver} (it runs {', '.join(node.rig.plugins)})")
        return driver, node.rig.plugins[driver]

    def _control(self, node: EmulatedNode, driver: str, *, timeout: float = 10) -> ControlClient:
        if node.rig.background.node is None:
            raise StepFailed(f"node {node.logical} is down")
        return node.rig.control(driver, timeout=timeout)

    @staticmethod
    @contextlib.contextmanager
    def _as_step_failure(driver: str) -> Iterator[None]:
        """A refused or unanswered control request fails the step, saying which driver and why."""
        try:
            yield
        except ControlRefusedError as exc:
            raise StepFailed(f"{driver} refused {exc.op}: {exc.reason}") from exc
        except ControlError as exc:
            raise StepFailed(f"{driver}: {exc}") from exc

    def inject(self, step: FaultStep, *, device: str | None) -> str:
        node = self._node(step)
        if step.fault is FaultKind.NODE_REBOOT:
            return self._reboot(node)
        if step.fault in (FaultKind.NIC_UNPLUG, FaultKind.NIC_REPLUG):
            return self._nic(node, step.fault, device)
        driver, process = self._driver(node, step)
        match step.fault:
            case FaultKind.DRIVER_KILL:
                process.kill()
                return f"{driver} on {node.logical} killed (SIGKILL)"
            case FaultKind.DRIVER_HANG:
                process.signal(signal.SIGSTOP)
                return f"{driver} on {node.logical} hung (SIGSTOP)"
            case FaultKind.DRIVER_RESUME:
                process.signal(signal.SIGCONT)
                return f"{driver} on {node.logical} resumed (SIGCONT)"
            case FaultKind.DRIVER_RESTART:
                process.restart()
                node.rig.wait_registered(driver)
                return f"{driver} on {node.logical} restarted and registered"
            case FaultKind.DRIVER_SOCKET_REMOVE:
                for sock in node.rig.layout.registry.glob(f"{driver}*-reg.sock"):
                    sock.unlink()
                return f"registration socket of {driver} on {node.logical} removed"
            case FaultKind.DEVICE_HEALTH:
                if device is None:
                    raise StepFailed("device-health needs device: or claim:")
                health = step.state or HealthState.UNHEALTHY
                with self._as_step_failure(driver):
                    self._control(node, driver).set_health(
                        device=device,
                        health=health,
                        message="drill" if step.message is None else step.message,
                        taint=step.taint,
                    )
                return f"{device} on {node.logical} reported {health}"
            case FaultKind.PREPARE_FAULT:
                default = CallFault()
                fault = CallFault(
                    delay_seconds=default.delay_seconds if step.delay_seconds is None else step.delay_seconds,
                    fail_times=default.fail_times if step.fail_times is None else step.fail_times,
                    error=default.error if step.error is None else step.error,
                )
                with self._as_step_failure(driver):
                    ack = self._control(node, driver).set_fault(call=Call.PREPARE, fault=fault)
                return f"prepare of {driver} on {node.logical}: {ack['fault']}"
            case FaultKind.CLEAR_FAULTS:
                with self._as_step_failure(driver):
                    self._control(node, driver).clear_faults()
                return f"faults of {driver} on {node.logical} cleared"
        raise StepFailed(f"this environment cannot do fault {step.fault}")

    def _nic(self, node: EmulatedNode, kind: FaultKind, device: str | None) -> str:
        if node.rig.nics is None or device is None:
            raise StepFailed(f"{kind} needs a node with NICs and a device (device: or claim:)")
        emulator = node.rig.background.node
        assert emulator is not None
        slices = self.client.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={node.rig.name},spec.driver=dra.net")
        ifname = next(
            (
                d["attributes"]["dra.net/ifName"]["string"]
                for s in slices
                for d in s["spec"]["devices"]
                if d["name"] == device
            ),
            None,
        )
        if ifname is None:
            raise StepFailed(f"{device} is not a NIC of {node.logical}")
        port = node.rig.nics.port(ifname)
        if kind is FaultKind.NIC_UNPLUG:
            hardware.unplug(node.rig.nics.hardware, port)
            return f"{ifname} ({device}) pulled from {node.logical}"
        hardware.plug(node.rig.nics.hardware, port)
        return f"{ifname} ({device}) plugged back into {node.logical}"

    def _reboot(self, node: EmulatedNode) -> str:
        """Power-cycle: everything volatile goes (containers, sandboxes, CDI specs, runtime state); disks stay."""
        node.rig.reboot()
        return f"{node.logical} rebooted: containers, sandboxes and CDI specs gone; drivers registered again"


def _capacity(spec: NodeSpec) -> dict[str, str] | None:
    """The Node's capacity when the scenario changes it (pods, memory), else the emulator's default."""
    if spec.max_pods is None and spec.memory is None:
        return None
    capacity = dict(DEFAULT_CAPACITY)
    if spec.max_pods is not None:
        capacity["pods"] = str(spec.max_pods)
    if spec.memory is not None:
        capacity["memory"] = spec.memory
    return capacity
