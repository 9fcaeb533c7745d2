"""Pure rendering of a node's device model into resource.k8s.io/v1 ResourceSlices.

``render_node(inventory, ...)`` returns the slices of every schema the node has devices for, plus a lookup from
``(driver, pool, device)`` to everything needed to prepare that device.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

from fakedev.model.inventory import NodeInventory
from fakedev.render.bench import bench_render
from fakedev.render.dranet import plan_dranet
from fakedev.render.example import plan_example
from fakedev.render.limits import check_slices
from fakedev.render.nvidia import plan_nvidia
from fakedev.render.pool import PoolPlan, build_slices
from fakedev.render.published import (
    DeviceRef,
    PublishedDevice,
    RenderedNode,
    Schema,
    SchemaPin,
    parse_schema,
    schema_choices,
)
from fakedev.render.types import DeviceTaint, OwnerReference, ResourceSlice

__all__ = [
    "DeviceRef",
    "PublishedDevice",
    "RenderedNode",
    "Schema",
    "SchemaPin",
    "bench_render",
    "default_schemas",
    "parse_schema",
    "render_node",
    "schema_choices",
]


class _Planner(Protocol):
    def __call__(
        self, inventory: NodeInventory, *, taints: Mapping[str, Sequence[DeviceTaint]]
    ) -> tuple[PoolPlan, list[PublishedDevice]]: ...


_PLANNERS: dict[Schema, _Planner] = {
    Schema.NVIDIA: plan_nvidia,
    Schema.DRANET: plan_dranet,
    Schema.EXAMPLE: plan_example,
}


def default_schemas(inventory: NodeInventory) -> tuple[Schema, ...]:
    """The schemas this node has devices for, in a fixed order."""
    present = {
        Schema.NVIDIA: bool(inventory.gpus or inventory.passthrough_gpus),
        Schema.DRANET: bool(inventory.nics or inventory.virtual_nics),
        Schema.EXAMPLE: bool(inventory.example_gpus),
    }
    return tuple(schema for schema, has in present.items() if has)


def render_node(
    inventory: NodeInventory,
    *,
    schemas: Collection[Schema] | None = None,
    generation: int = 1,
    owner: OwnerReference | None = None,
    taints: Mapping[DeviceRef, Sequence[DeviceTaint]] | None = None,
    addresses: Mapping[str, Sequence[str]] | None = None,
) -> RenderedNode:
    """All ResourceSlices of ``inventory`` for ``schemas`` (default: every schema it has devices for).

    ``generation`` is the pool generation (bump it on every change), ``owner`` goes into each slice's
    ``ownerReferences`` (the plugin passes its Node), ``taints`` adds driver-defined taints per device.
    ``addresses`` (interface name → its addresses in CIDR form, as netlink reports them in the node's namespace)
    feeds the schemas that publish them (dra.net ``ipv4``/``ipv6``).
    """
    chosen = default_schemas(inventory) if schemas is None else tuple(s for s in Schema if s in schemas)
    slices: list[ResourceSlice] = []
    devices: dict[DeviceRef, PublishedDevice] = {}
    planners = dict(_PLANNERS)
    if addresses:
        planners[Schema.DRANET] = functools.partial(plan_dranet, addresses=addresses)
    for schema in chosen:
        by_name = {
            ref.device: list(t)
            for ref, t in (taints or {}).items()
            if ref.driver == schema.driver and ref.pool == inventory.node_name
        }
        plan, published = planners[schema](inventory, taints=by_name)
        if not plan.device_groups or not any(plan.device_groups):
            continue  # no devices of this kind: publish no pool at all
        slices += build_slices(plan, node_name=inventory.node_name, generation=generation, owner=owner)
        devices |= {p.ref: p for p in published}
    check_slices(slices)
    return RenderedNode(node_name=inventory.node_name, slices=tuple(slices), devices=devices)
