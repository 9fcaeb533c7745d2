"""Splitting a pool's counter sets and devices over ResourceSlices within the API's per-slice limits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from fakedev.render import names
from fakedev.render.types import (
    CounterSet,
    Device,
    ObjectMeta,
    OwnerReference,
    ResourcePool,
    ResourceSlice,
    ResourceSliceSpec,
)

API_VERSION: Final = "resource.k8s.io/v1"
MAX_DEVICES: Final = 128
MAX_DEVICES_WITH_COUNTERS_OR_TAINTS: Final = 64
MAX_COUNTER_SETS: Final = 8


@dataclass(frozen=True, kw_only=True)
class PoolPlan:
    """One driver's pool on one node: counter sets, then groups of devices that each start a fresh slice."""

    driver: str
    pool: str
    counter_sets: tuple[CounterSet, ...] = ()
    device_groups: tuple[tuple[Device, ...], ...] = ()
    partition_type_attribute: str | None = None
    skip_node_operations: tuple[str, ...] = ()


def _needs_small_slice(device: Device) -> bool:
    return bool(device.get("consumesCounters") or device.get("taints"))


def _chunks(devices: Sequence[Device]) -> list[list[Device]]:
    # A slice holding any device with taints or counter consumption is limited to 64 devices.
    limit = MAX_DEVICES_WITH_COUNTERS_OR_TAINTS if any(_needs_small_slice(d) for d in devices) else MAX_DEVICES
    return [list(devices[i : i + limit]) for i in range(0, len(devices), limit)]


def build_slices(
    plan: PoolPlan, *, node_name: str, generation: int, owner: OwnerReference | None
) -> list[ResourceSlice]:
    """Counter sets first (8 per slice, never mixed with devices), then each device group in ≤64/≤128 chunks."""

    def pool() -> ResourcePool:
        return {"name": plan.pool, "generation": generation, "resourceSliceCount": 0}

    specs: list[ResourceSliceSpec] = []
    for i in range(0, len(plan.counter_sets), MAX_COUNTER_SETS):
        specs.append(
            {
                "driver": plan.driver,
                "pool": pool(),
                "nodeName": node_name,
                "sharedCounters": list(plan.counter_sets[i : i + MAX_COUNTER_SETS]),
            }
        )
    for group in plan.device_groups:
        for chunk in _chunks(group):
            spec: ResourceSliceSpec = {"driver": plan.driver, "pool": pool(), "nodeName": node_name, "devices": chunk}
            # The API accepts the attribute only on slices whose devices consume counters.
            if plan.partition_type_attribute and any(d.get("consumesCounters") for d in chunk):
                spec["partitionTypeAttribute"] = plan.partition_type_attribute
            if plan.skip_node_operations:
                spec["skipNodeOperations"] = list(plan.skip_node_operations)
            specs.append(spec)
    slices: list[ResourceSlice] = []
    for index, spec in enumerate(specs):
        spec["pool"]["resourceSliceCount"] = len(specs)
        metadata: ObjectMeta = {"name": names.resource_slice(node_name=node_name, driver=plan.driver, index=index)}
        if owner is not None:
            metadata["ownerReferences"] = [owner.copy()]
        slices.append({"apiVersion": API_VERSION, "kind": "ResourceSlice", "metadata": metadata, "spec": spec})
    return slices


def restamp_slices(
    slices: Sequence[ResourceSlice], *, generation: int, owner: OwnerReference | None
) -> list[ResourceSlice]:
    """The same slices for another pool generation and owner (what a republish of an unchanged inventory needs),
    without planning the devices again; the device lists are shared with ``slices``, not copied."""
    out: list[ResourceSlice] = []
    for s in slices:
        metadata: ObjectMeta = {"name": s["metadata"]["name"]}
        if owner is not None:
            metadata["ownerReferences"] = [owner.copy()]
        spec: ResourceSliceSpec = {**s["spec"], "pool": {**s["spec"]["pool"], "generation": generation}}
        out.append({"apiVersion": s["apiVersion"], "kind": s["kind"], "metadata": metadata, "spec": spec})
    return out
