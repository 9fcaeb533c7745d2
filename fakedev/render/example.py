"""The ``gpu.example.com`` schema of kubernetes-sigs/dra-example-driver: ``gpu-<i>`` with index, uuid, model,
driverVersion and a memory capacity, all in one slice."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from fakedev.model.inventory import NodeInventory
from fakedev.render import values
from fakedev.render.pool import PoolPlan
from fakedev.render.published import DeviceRef, PublishedDevice, Schema
from fakedev.render.types import Device, DeviceTaint

DRIVER: Final = Schema.EXAMPLE.driver
FABRIC_ATTACHED: Final = "FabricAttached"
FABRIC_ATTACH_FAILED: Final = "FabricAttachFailed"


def plan_example(
    inventory: NodeInventory, *, taints: Mapping[str, Sequence[DeviceTaint]]
) -> tuple[PoolPlan, list[PublishedDevice]]:
    devices: list[Device] = []
    published: list[PublishedDevice] = []
    example = inventory.profile.example
    host_memory = example.host_memory_per_pod if example is not None else None
    for gpu in inventory.example_gpus:
        device: Device = {
            "name": f"gpu-{gpu.index}",
            "attributes": {
                "index": values.integer(gpu.index),
                "uuid": values.string(gpu.uuid),
                "model": values.string(gpu.model),
                "driverVersion": values.version(gpu.driver_version),
            },
            "capacity": {"memory": values.quantity(gpu.memory)},
        }
        if gpu.shares is not None:
            # Consumable capacity: many claims share the device, each taking a multiple of the smallest share of its
            # compute; a request without an amount takes the whole device.
            device["allowMultipleAllocations"] = True
            # A capacity without a policy would be consumed whole by every share, so memory gets one too: 1Gi steps.
            device["capacity"]["memory"] = {
                "value": gpu.memory,
                "requestPolicy": {"default": "1Gi", "validRange": {"min": "1Gi", "max": gpu.memory, "step": "1Gi"}},
            }
            device["capacity"]["compute"] = {
                "value": "1",
                "requestPolicy": {"default": "1", "validRange": {"min": gpu.shares, "max": "1", "step": gpu.shares}},
            }
        if host_memory is not None:
            # Each pod using the device also costs node memory (pinned host buffers): the scheduler accounts it.
            device["nodeAllocatableResources"] = {"memory": {"overhead": {"perPod": host_memory}}}
        if gpu.fabric_attach is not None:
            # The scheduler holds the pod in PreBind until the driver reports the attachment in the claim status.
            device["bindingConditions"] = [FABRIC_ATTACHED]
            device["bindingFailureConditions"] = [FABRIC_ATTACH_FAILED]
        if device["name"] in taints:
            device["taints"] = [t.copy() for t in taints[device["name"]]]
        devices.append(device)
        published.append(
            PublishedDevice(
                ref=DeviceRef(driver=DRIVER, pool=inventory.node_name, device=device["name"]),
                attributes=device["attributes"],
                capacity=device["capacity"],
                model=gpu,
            )
        )
    plan = PoolPlan(
        driver=DRIVER,
        pool=inventory.node_name,
        device_groups=(tuple(devices),),
        skip_node_operations=example.skip_node_operations if example is not None else (),
    )
    return plan, published
