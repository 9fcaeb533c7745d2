"""Which drill faults a cluster running the chart can suffer, and how: a pure decision over one fault step.

On a real cluster the drill has no hands on the node: no control socket (it is inside the DaemonSet's pod), no power
switch, no NIC hardware, no control-plane processes. What it has is the API: DeviceFault objects, which the plugin
applies, and the DaemonSet's pod, whose deletion takes the driver away until the DaemonSet brings a new one. Every
other fault makes its step — and so its drill — BLOCKED, with a reason that names what is missing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from harness.drills.scenario import FaultKind, FaultStep
from kubeletapi.types import HealthState

NEEDS_CONTROL_PLANE: Final = "needs the local control plane (the drill stops and starts its components)"
NEEDS_CONTROL_SOCKET: Final = "needs the node's control socket (the plugin's, inside the DaemonSet's pod)"
NEEDS_NODE: Final = "needs the node itself (power, its kubelet's plugin registry)"


class InClusterMeans(enum.StrEnum):
    """How a fault is made on a cluster running the chart."""

    CREATE_DEVICE_FAULT = "create-device-fault"
    """A DeviceFault object for the node's plugin."""
    DELETE_DEVICE_FAULT = "delete-device-fault"
    """Delete the DeviceFaults the drill made that the step undoes."""
    DELETE_PLUGIN_POD = "delete-plugin-pod"
    """Delete the DaemonSet's pod on the node; the DaemonSet makes a new one."""
    API = "api"
    """A plain API call the runner makes anywhere (a DeviceTaintRule)."""
    BLOCKED = "blocked"


@dataclass(frozen=True, kw_only=True)
class InClusterPlan:
    means: InClusterMeans
    reason: str = ""
    """Why the step is blocked (empty unless ``means`` is BLOCKED)."""


def _blocked(reason: str) -> InClusterPlan:
    return InClusterPlan(means=InClusterMeans.BLOCKED, reason=reason)


def plan_in_cluster(step: FaultStep) -> InClusterPlan:
    """How ``step`` is done on a cluster running the chart, or why it cannot be."""
    match step.fault:
        case FaultKind.TAINT_RULE | FaultKind.TAINT_RULE_REMOVE:
            return InClusterPlan(means=InClusterMeans.API)
        case FaultKind.APISERVER_STOP | FaultKind.APISERVER_START | FaultKind.ETCD_STOP | FaultKind.ETCD_START:
            return _blocked(f"{step.fault}: {NEEDS_CONTROL_PLANE}")
        case FaultKind.DRIVER_KILL | FaultKind.DRIVER_RESTART:
            return InClusterPlan(means=InClusterMeans.DELETE_PLUGIN_POD)
        case FaultKind.DRIVER_HANG | FaultKind.DRIVER_RESUME:
            return _blocked(f"{step.fault}: needs to signal the plugin process (SIGSTOP/SIGCONT) on the node")
        case FaultKind.DRIVER_SOCKET_REMOVE:
            return _blocked(f"{step.fault}: {NEEDS_NODE}")
        case FaultKind.NODE_REBOOT:
            return _blocked(f"{step.fault}: {NEEDS_NODE}")
        case FaultKind.DEVICE_HEALTH:
            state = step.state or HealthState.UNHEALTHY
            if state is HealthState.UNHEALTHY:
                return InClusterPlan(means=InClusterMeans.CREATE_DEVICE_FAULT)
            if state is HealthState.HEALTHY:
                return InClusterPlan(means=InClusterMeans.DELETE_DEVICE_FAULT)
            return _blocked(
                f"{step.fault} {state}: a DeviceFault makes a device Unhealthy only; {NEEDS_CONTROL_SOCKET}"
            )
        case FaultKind.PREPARE_FAULT | FaultKind.NIC_UNPLUG:
            return InClusterPlan(means=InClusterMeans.CREATE_DEVICE_FAULT)
        case FaultKind.CLEAR_FAULTS:
            return InClusterPlan(means=InClusterMeans.DELETE_DEVICE_FAULT)
        case FaultKind.NIC_REPLUG:
            # Deleting the NicUnplug DeviceFault is the plug coming back: the plugin drops the health and taint.
            return InClusterPlan(means=InClusterMeans.DELETE_DEVICE_FAULT)
