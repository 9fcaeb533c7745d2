"""The drill environment on the real node: a single-node scenario's node is this machine's kubelet and containerd.

The node is a :class:`~fakedev.cli.realrig.RealNodeRig` (the profile's hardware, the real kubelet and containerd, one
fake plugin per schema). Images built from this repository that the scenario's workloads name (the virt-launcher
stand-in) are imported into the node's containerd and served by its registry under those names, so the workload
YAML is the one emulated nodes run. Pod output is the kubelet's (``pods/log``); the KubeVirt check reads the node's
files locally (its kubelet root and CDI dir are directories of its run). Faults the drill would do to an emulated
node are refused (:mod:`harness.drills.real_node`); the command line refuses such drills before anything starts.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from fakedev.cli.drill_env import node_pins, scenario_profile
from fakedev.cli.plugin_claims import plugin_claims
from fakedev.cli.realrig import RealNodeRig
from harness.drills.real_node import fault_refusal, local_images, real_node_refusals
from harness.drills.runner import NodeKind, StepBlocked, StepFailed
from harness.drills.scenario import FaultStep, Scenario
from harness.errors import HarnessError
from harness.kubevirt.verify import NodeView, local_plugins_view
from harness.node.drivers import DriverProcess
from harness.procs import wait_for
from harness.realnode.images import ensure_local_image
from harness.realnode.node import RealNodeSettings
from kubeclient import KubeClient
from kubeclient.resources import RESOURCE_SLICES

PUBLISH_SECONDS: Final = 120.0
"""How long the node's plugins get to register and publish their slices (the first run builds nothing here: the
node binaries and images come from the cache)."""


@dataclass(kw_only=True)
class RealNodeDrillEnvironment:
    client: KubeClient
    kubeconfig: Path
    settings: RealNodeSettings
    """The node to start for each drill (address, cluster CA, binaries); each drill gets a fresh run."""
    logs_to: Path | None = None
    """Where the node's logs (kubelet, containerd, registry, plugins) are copied before it stops, one directory per
    drill (``<logs_to>/<drill>/``)."""
    progress: Callable[[str], None] = lambda _m: None
    rig: RealNodeRig | None = None
    drill: str = ""
    """The drill the node runs for (names its logs' directory)."""

    @property
    def node_kind(self) -> NodeKind:
        return NodeKind.REAL

    # -- nodes -----------------------------------------------------------------------------------------------------

    def start_nodes(self, scenario: Scenario, *, prefix: str) -> dict[str, str]:
        del prefix  # the node's name is its address
        self.drill = scenario.name
        refusals = real_node_refusals(scenario)
        if refusals:  # the command line refuses these before anything starts; a direct caller learns it here
            raise StepBlocked("; ".join(refusals))
        (spec,) = scenario.nodes
        schemas = tuple(schema for schema, _ in node_pins(spec)) or None
        address = self.settings.address
        try:
            self.rig = RealNodeRig.start(
                profile=scenario_profile(spec.profile, scenario=scenario),
                settings=self.settings,
                client=self.client,
                kubeconfig=self.kubeconfig,
                schemas=schemas,
                progress=lambda step: self.progress(f"  real node {address}: {step}"),
            )
            for image in local_images(scenario.workloads):
                self.progress(f"  real node {address}: importing {image}")
                self.rig.node.import_image(ensure_local_image(image, cache_root=self.settings.cache_root).path)
            for driver, process in self.rig.plugins.items():
                self._wait_published(driver, process=process)
        except HarnessError as exc:
            raise StepFailed(f"the real node {address}: {exc}") from exc
        return {spec.name: self.rig.name}

    def _wait_published(self, driver: str, *, process: DriverProcess) -> None:
        """The plugin registered with the real kubelet and published: the scheduler sees the node's devices."""
        selector = f"spec.nodeName={self.settings.address},spec.driver={driver}"
        wait_for(
            lambda: bool(self.client.list(RESOURCE_SLICES, field_selector=selector)),
            timeout=PUBLISH_SECONDS,
            what=f"{driver} registered with the real kubelet and its slices published",
            abort=lambda: None if process.alive() else StepFailed(f"plugin {driver} exited; see {process.log_path}"),
        )

    def stop_nodes(self) -> None:
        rig, self.rig = self.rig, None
        if rig is None:
            return
        if self.logs_to is not None:
            with contextlib.suppress(OSError):
                shutil.copytree(rig.node.run.path / "logs", self.logs_to / self.drill, dirs_exist_ok=True)
        rig.stop()

    # -- what the runner reads -------------------------------------------------------------------------------------

    def node_view(self, node: str) -> NodeView | None:
        if self.rig is None or node != self.rig.name:
            return None
        layout = self.rig.node.layout
        return local_plugins_view(
            kubelet_root=layout.kubelet_root, cdi_dir=layout.cdi_dir, read_checkpoint=plugin_claims
        )

    def pod_logs(self, namespace: str, name: str) -> str:
        """What the container printed, as the kubelet serves it (``kubectl logs``)."""
        status, text = self.client.get_text(f"/api/v1/namespaces/{namespace}/pods/{name}/log", timeout=10)
        return text if status == 200 else ""

    def device_health(self) -> dict[str, str]:
        return {}  # no health faults here (refused), so nothing changes health but the plugins' own view

    # -- faults ----------------------------------------------------------------------------------------------------

    def blocker(self, step: FaultStep) -> str | None:
        return fault_refusal(step)

    def inject(self, step: FaultStep, *, device: str | None) -> str:
        del device
        raise StepBlocked(fault_refusal(step) or f"{step.fault} is the runner's to do")
