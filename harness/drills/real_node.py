"""Which drills can run on the real node, decided before anything starts (pure).

The real node is this machine's kubelet and containerd (:mod:`harness.realnode`), one per host: a drill on it has
exactly one node. Its pods, claims, CDI edits and container output are the real ones; what it lacks are the drill's
hands on an emulated node: power (``node-reboot``), the plugins' control sockets and processes as the emulated rig
holds them, NIC hardware it can pull, and Node fields the emulator registers (capacity) or kubelet timings it takes
from the scenario. A drill that needs any of those is refused, naming the step or node field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from harness.drills.scenario import FaultStep, NodeSpec, Performer, Scenario
from harness.runtime.images import LOCAL_IMAGES

KUBELET_WIPE_GRACE: Final = 30.0
"""The real kubelet's grace before it wipes a gone driver's slices; a scenario asking for another cannot have it."""


def fault_refusal(step: FaultStep) -> str | None:
    """Why the real node cannot do this fault step, None when it can (the runner's API and control-plane faults)."""
    if step.fault.performer is Performer.RUNNER:
        return None
    return (
        f"{step.fault} is done to emulated nodes only (the drill holds their power, plugin processes, control "
        "sockets and NIC hardware; on the real node it holds none of these)"
    )


def _node_refusals(spec: NodeSpec) -> list[str]:
    out = []
    pinned = [d for d in spec.drivers if "@" in d]
    if pinned:
        out.append(f"node {spec.name}: driver release pins ({', '.join(pinned)}) run on emulated nodes only")
    if spec.max_pods is not None or spec.memory is not None:
        out.append(
            f"node {spec.name}: maxPods/memory set the emulated Node's capacity; the real kubelet reports its own"
        )
    if spec.wipe_grace != KUBELET_WIPE_GRACE:
        out.append(f"node {spec.name}: wipeGrace {spec.wipe_grace:g}s; the real kubelet's is {KUBELET_WIPE_GRACE:g}s")
    return out


def real_node_refusals(scenario: Scenario) -> list[str]:
    """Every reason ``scenario`` cannot run on the real node (empty: it can), each naming the node or the step."""
    out = []
    if len(scenario.nodes) != 1:
        names = ", ".join(n.name for n in scenario.nodes) or "none"
        out.append(f"the real node is one node per host; this drill has {len(scenario.nodes)} nodes ({names})")
    for spec in scenario.nodes:
        out += _node_refusals(spec)
    for step in scenario.steps:
        if isinstance(step, FaultStep):
            reason = fault_refusal(step)
            if reason is not None:
                out.append(f"step {step.index + 1} (line {step.line}) {step.title!r}: {reason}")
    return out


def local_images(workloads: Mapping[str, str]) -> tuple[str, ...]:
    """The images built from this repository (:data:`LOCAL_IMAGES`) that the workloads name, to put on the node."""
    return tuple(image for image in LOCAL_IMAGES if any(image in text for text in workloads.values()))
