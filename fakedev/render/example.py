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


def plan_example(
    inventory: NodeInventory, *, taints: Mapping[str, Sequence[DeviceTaint]]
) -> tuple[PoolPlan, list[PublishedDevice]]:
    devices: list[Device] = []
    published: list[PublishedDevice] = []
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
    return PoolPlan(driver=DRIVER, pool=inventory.node_name, device_groups=(tuple(devices),)), published
