"""The drill environment for fakedev: emulated nodes with fake plugins, NIC hardware and fault hooks.

Nodes are fake node rigs (:mod:`fakedev.cli.rig`) sharing one background loop and one fabric; this module adds
what drills need on top: the scenario's node names, and the faults.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakedev.cli.rig import FakeNodeRig, RigSite, RigSpec, remove_fabric
from fakedev.nics import hardware
from fakedev.nics.node import NodeNics
from fakedev.plugin.control import call_control
from fakedev.render import Schema
from harness.cluster.nodes import DEFAULT_CAPACITY
from harness.drills.runner import StepFailed
from harness.drills.scenario import NodeSpec, Scenario, Step
from harness.node.background import BackgroundLoop, BackgroundNode
from harness.node.drivers import DriverProcess
from harness.node.layout import NodeLayout, node_run_id
from harness.reaper import reap_all
from kubeclient import KubeClient
from kubeclient.resources import RESOURCE_SLICES

DRIVER_OF_SCHEMA = {s.value: s.driver for s in Schema}


def _profile_path(profile: str, *, scenario: Scenario) -> str:
    """A profile file named by a scenario is relative to the scenario; a bare name is a built-in profile."""
    if profile.endswith((".yaml", ".yml")) and not Path(profile).is_absolute():
        return str((scenario.path.parent / profile).resolve())
    return profile


@dataclass(kw_only=True)
class EmulatedNode:
    """A scenario's node: its name in the scenario and the rig that runs it."""

    logical: str
    rig: FakeNodeRig

    @property
    def name(self) -> str:
        return self.rig.name

    @property
    def background(self) -> BackgroundNode:
        return self.rig.background

    @property
    def drivers(self) -> dict[str, DriverProcess]:
        """Driver name → its plugin process."""
        return self.rig.plugins

    @property
    def nics(self) -> NodeNics | None:
        return self.rig.nics


@dataclass(kw_only=True)
class FakedevDrillEnvironment:
    client: KubeClient
    kubeconfig: Path
    loop: BackgroundLoop = field(default_factory=BackgroundLoop)
    base: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="fd-")))
    nodes: dict[str, EmulatedNode] = field(default_factory=dict)
    fabric: str | None = None

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
            schemas = tuple(Schema(d) for d in spec.drivers) if spec.drivers else None
            rig = FakeNodeRig.start(
                RigSpec(
                    name=f"{prefix}-{spec.name}"[:63].strip("-"),
                    profile=_profile_path(spec.profile, scenario=scenario),
                    schemas=schemas,
                    with_nics=schemas is None or Schema.DRANET in schemas,
                    fabric=self.fabric,
                    wipe_grace=spec.wipe_grace,
                    capacity=_capacity(spec),
                ),
                site=site,
            )
            self.nodes[spec.name] = EmulatedNode(logical=spec.name, rig=rig)
        return {logical: n.name for logical, n in self.nodes.items()}

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
            if n.name == node:
                return n.rig.layout
        return None

    def pod_logs(self, namespace: str, name: str) -> str:
        for node in self.nodes.values():
            emulator = node.background.node
            worker = emulator.pod_worker(namespace=namespace, name=name) if emulator else None
            if worker is not None:
                return worker.container_logs()
        return ""

    def device_health(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for node in self.nodes.values():
            for driver, process in node.drivers.items():
                if not process.alive():
                    continue
                with contextlib.suppress(OSError, ValueError, StepFailed):
                    status = self._control(node, driver, {"op": "status"}, timeout=0.5)
                    for d in status.get("devices", []):
                        if d["health"] != "Healthy" or d.get("taints"):
                            out[f"{node.logical}/{d['device']}"] = d["health"]
        return out

    # -- faults ----------------------------------------------------------------------------------------------------

    def _node(self, step: Step) -> EmulatedNode:
        logical = str(step.body.get("node") or next(iter(self.nodes)))
        return self.nodes[logical]

    def _driver(self, node: EmulatedNode, step: Step) -> tuple[str, DriverProcess]:
        driver = str(step.body.get("driver") or next(iter(node.drivers)))
        if driver not in node.drivers:
            raise StepFailed(f"node {node.logical} runs no driver {driver} (it runs {', '.join(node.drivers)})")
        return driver, node.drivers[driver]

    def _control(self, node: EmulatedNode, driver: str, request: dict[str, Any], *, timeout: float = 10) -> Any:
        emulator = node.background.node
        if emulator is None:
            raise StepFailed(f"node {node.logical} is down")
        path = node.rig.plugin_paths(driver).control_socket
        answer = call_control(path, request, timeout=timeout)
        if not answer.get("ok"):
            raise StepFailed(f"{driver} refused {request['op']}: {answer.get('error')}")
        return answer

    def inject(self, step: Step, *, device: str | None) -> str:
        kind = str(step.body[step.kind])
        node = self._node(step)
        if kind == "node-reboot":
            return self._reboot(node)
        if kind in ("nic-unplug", "nic-replug"):
            return self._nic(node, kind, device)
        driver, process = self._driver(node, step)
        if kind == "driver-kill":
            process.kill()
            return f"{driver} on {node.logical} killed (SIGKILL)"
        if kind == "driver-hang":
            process.signal(signal.SIGSTOP)
            return f"{driver} on {node.logical} hung (SIGSTOP)"
        if kind == "driver-resume":
            process.signal(signal.SIGCONT)
            return f"{driver} on {node.logical} resumed (SIGCONT)"
        if kind == "driver-restart":
            process.restart()
            emulator = node.background.node
            assert emulator is not None
            self.loop.call(emulator.plugins.wait_registered(driver, timeout=30), timeout=40)
            return f"{driver} on {node.logical} restarted and registered"
        if kind == "driver-socket-remove":
            emulator = node.background.node
            assert emulator is not None
            for sock in emulator.layout.registry.glob(f"{driver}*-reg.sock"):
                sock.unlink()
            return f"registration socket of {driver} on {node.logical} removed"
        if kind == "device-health":
            if device is None:
                raise StepFailed("device-health needs device: or claim:")
            request: dict[str, Any] = {
                "op": "set-health",
                "device": device,
                "health": step.body.get("state", "Unhealthy"),
                "message": str(step.body.get("message", "drill")),
            }
            if step.body.get("taint"):
                request["taint"] = step.body["taint"]
            self._control(node, driver, request)
            return f"{device} on {node.logical} reported {request['health']}"
        if kind == "prepare-fault":
            fault = {k: step.body[k] for k in ("failTimes", "delaySeconds", "error") if k in step.body}
            self._control(node, driver, {"op": "set-fault", "call": "prepare", "fault": fault})
            return f"prepare of {driver} on {node.logical}: {fault}"
        if kind == "clear-faults":
            self._control(node, driver, {"op": "clear-faults"})
            return f"faults of {driver} on {node.logical} cleared"
        raise StepFailed(f"this environment cannot do fault {kind}")

    def _nic(self, node: EmulatedNode, kind: str, device: str | None) -> str:
        if node.nics is None or device is None:
            raise StepFailed(f"{kind} needs a node with NICs and a device (device: or claim:)")
        emulator = node.background.node
        assert emulator is not None
        slices = self.client.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={node.name},spec.driver=dra.net")
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
        port = node.nics.port(ifname)
        if kind == "nic-unplug":
            hardware.unplug(node.nics.hardware, port)
            return f"{ifname} ({device}) pulled from {node.logical}"
        hardware.plug(node.nics.hardware, port)
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
