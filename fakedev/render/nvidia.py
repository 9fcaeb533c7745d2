"""The ``gpu.nvidia.com`` schema: full GPUs, MIG partitions (KEP-4815 partitionable devices) and vGPU types.

Per GPU with partitions: one counter set ``gpu-<minor>-counter-set`` (engines, memory, ``memory-slice-0..7`` and,
when time-sliced vGPU is offered, ``vgpu-slots``). The full GPU consumes every counter; a MIG placement consumes its
engines and memory plus the memory slices it covers, so the scheduler itself refuses overlaps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from fakedev.model import mig
from fakedev.model.inventory import GpuDevice, MigDevice, NodeInventory, PassthroughGpu, VgpuDevice
from fakedev.model.mig import Engines, Placement
from fakedev.model.profile import MigMode, NvidiaSoftware
from fakedev.model.vgpu import slot_cost, slot_total
from fakedev.render import names, values
from fakedev.render.pool import PoolPlan
from fakedev.render.published import DeviceRef, PublishedDevice, Schema
from fakedev.render.types import (
    Counter,
    CounterSet,
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceCounterConsumption,
    DeviceTaint,
)

DRIVER: Final = Schema.NVIDIA.driver
BRAND: Final = "Nvidia"
# Our own domain: the real driver publishes no partition-type attribute, and selectors written against its schema
# must keep matching exactly the same attributes.
PARTITION_TYPE_ATTRIBUTE: Final = "fakedev.io/partitionType"
SLOTS_COUNTER: Final = "vgpu-slots"
GROUP_MIG: Final = "mig"
GROUP_VGPU_MIG: Final = "vgpu-mig"


def plan_nvidia(
    inventory: NodeInventory, *, taints: Mapping[str, Sequence[DeviceTaint]]
) -> tuple[PoolPlan, list[PublishedDevice]]:
    features = inventory.profile.features
    software = inventory.profile.software
    counter_sets: list[CounterSet] = []
    groups: list[tuple[Device, ...]] = []
    published: list[PublishedDevice] = []
    for gpu in inventory.gpus:
        migs = [m for m in inventory.mig_devices if m.parent is gpu]
        vgpus = [v for v in inventory.vgpu_devices if v.parent is gpu]
        counters = _counter_set(gpu, vgpus=vgpus) if (vgpus or any(not m.precreated for m in migs)) else None
        builder = _GpuBuilder(
            gpu=gpu,
            software=software,
            counter_set=counters,
            pool=inventory.node_name,
            partition_types=features.partition_type_attribute,
            groups=features.compatibility_groups and bool(gpu.vgpu_modes),
        )
        if counters is not None:
            counter_sets.append(counters)
        entries = []
        if gpu.mig_mode is not MigMode.STATIC:  # in MIG mode with a fixed layout the whole GPU is not usable
            entries.append(builder.full())
        entries += [builder.mig(m) for m in migs]
        entries += [builder.vgpu(v) for v in vgpus]
        entries.sort(key=lambda e: e[0]["name"])
        for device, _ in entries:
            if device["name"] in taints:
                device["taints"] = [t.copy() for t in taints[device["name"]]]
        groups.append(tuple(device for device, _ in entries))
        published += [entry for _, entry in entries]
    for passthrough in inventory.passthrough_gpus:
        device, entry = _vfio(passthrough, pool=inventory.node_name)
        if device["name"] in taints:
            device["taints"] = [t.copy() for t in taints[device["name"]]]
        groups.append((device,))
        published.append(entry)
    plan = PoolPlan(
        driver=DRIVER,
        pool=inventory.node_name,
        counter_sets=tuple(counter_sets),
        device_groups=tuple(groups),
        partition_type_attribute=PARTITION_TYPE_ATTRIBUTE if features.partition_type_attribute else None,
    )
    return plan, published


def _vfio(gpu: PassthroughGpu, *, pool: str) -> tuple[Device, PublishedDevice]:
    """A GPU bound to vfio-pci: what a VM needs to know (PCI identity and place), nothing the host driver reports
    (no driver or CUDA version: the host's NVIDIA driver does not own it)."""
    product = gpu.product
    attributes: dict[str, DeviceAttribute] = {
        "type": values.string("vfio"),
        "productName": values.string(product.product_name),
        "brand": values.string(BRAND),
        "architecture": values.string(product.architecture),
        "deviceID": values.string(f"0x{product.ids.device:04x}"),
        "vendorID": values.string(f"0x{product.ids.vendor:04x}"),
        "iommuFDEnabled": values.boolean(value=False),
        values.PCI_BUS_ID: values.string(gpu.bdf.render()),
        values.PCIE_ROOT: values.string(gpu.pci.root.name),
    }
    if gpu.pci.numa_node is not None:
        attributes[values.NUMA_NODE] = values.integer(gpu.pci.numa_node)
    device: Device = {
        "name": names.vfio_device(gpu.index),
        "attributes": attributes,
        "capacity": {"addressableMemory": values.mebibytes(product.memory_mib)},
    }
    return device, PublishedDevice(
        ref=DeviceRef(driver=DRIVER, pool=pool, device=device["name"]),
        attributes=attributes,
        capacity=device["capacity"],
        model=gpu,
    )


def _engine_counters(engines: Engines, *, memory_mib: int) -> dict[str, Counter]:
    return {
        "multiprocessors": values.counter(engines.multiprocessors),
        "copy-engines": values.counter(engines.copy_engines),
        "decoders": values.counter(engines.decoders),
        "encoders": values.counter(engines.encoders),
        "jpeg-engines": values.counter(engines.jpeg_engines),
        "ofa-engines": values.counter(engines.ofa_engines),
        "memory": values.counter_mebibytes(memory_mib),
    }


def _slice_counters(placement: Placement) -> dict[str, Counter]:
    return {f"memory-slice-{i}": values.counter(1) for i in placement.memory_slices}


def _counter_set(gpu: GpuDevice, *, vgpus: Sequence[VgpuDevice]) -> CounterSet:
    product = gpu.product
    counters = _engine_counters(product.full_engines, memory_mib=product.memory_mib)
    counters |= _slice_counters(Placement(start=0, size=mig.MEMORY_SLICES))
    slots = slot_total([v.vgpu_type for v in vgpus])
    if slots:
        counters[SLOTS_COUNTER] = values.counter(slots)
    return {"name": names.counter_set(gpu.minor), "counters": counters}


def _engine_capacity(engines: Engines, *, memory_mib: int) -> dict[str, DeviceCapacity]:
    return {
        "multiprocessors": values.count(engines.multiprocessors),
        "copyEngines": values.count(engines.copy_engines),
        "decoders": values.count(engines.decoders),
        "encoders": values.count(engines.encoders),
        "jpegEngines": values.count(engines.jpeg_engines),
        "ofaEngines": values.count(engines.ofa_engines),
        "memory": values.mebibytes(memory_mib),
    }


class _GpuBuilder:
    """Renders the devices of one physical GPU (shared attributes, counter set, groups)."""

    def __init__(
        self,
        *,
        gpu: GpuDevice,
        software: NvidiaSoftware,
        counter_set: CounterSet | None,
        pool: str,
        partition_types: bool,
        groups: bool,
    ) -> None:
        self.gpu = gpu
        self.counter_set = counter_set
        self.pool = pool
        self.partition_types = partition_types
        self.groups = groups
        product = gpu.product
        self.common: dict[str, DeviceAttribute] = {
            "productName": values.string(product.product_name),
            "brand": values.string(BRAND),
            "architecture": values.string(product.architecture),
            "cudaComputeCapability": values.version(product.compute_capability),
            "driverVersion": values.version(software.driver_version),
            "cudaDriverVersion": values.version(software.cuda_driver_version),
        }
        self.topology: dict[str, DeviceAttribute] = {values.PCIE_ROOT: values.string(gpu.pci.root.name)}
        if gpu.pci.numa_node is not None:
            self.topology[values.NUMA_NODE] = values.integer(gpu.pci.numa_node)

    def _consumes(self, counters: dict[str, Counter], *, group: str | None) -> list[DeviceCounterConsumption]:
        assert self.counter_set is not None
        entry: DeviceCounterConsumption = {"counterSet": self.counter_set["name"], "counters": counters}
        if self.groups and group is not None:
            entry["compatibilityGroups"] = [names.compatibility_group(group)]
        return [entry]

    def _finish(
        self, device: Device, *, model: GpuDevice | MigDevice | VgpuDevice, partition_type: str
    ) -> tuple[Device, PublishedDevice]:
        if self.partition_types and device.get("consumesCounters"):
            # 1.37.2 counts the counter set in "equal counter costs": a type is scoped to one GPU.
            value = f"gpu-{self.gpu.minor}/{partition_type}"
            device.setdefault("attributes", {})[PARTITION_TYPE_ATTRIBUTE] = values.string(value)
        return device, PublishedDevice(
            ref=DeviceRef(driver=DRIVER, pool=self.pool, device=device["name"]),
            attributes=device.get("attributes", {}),
            capacity=device.get("capacity", {}),
            model=model,
        )

    def full(self) -> tuple[Device, PublishedDevice]:
        gpu = self.gpu
        bus_id = gpu.bdf.render()
        device: Device = {
            "name": names.gpu_device(gpu.minor),
            "attributes": {
                "type": values.string("gpu"),
                "uuid": values.string(gpu.uuid),
                **self.common,
                "pcieBusID": values.string(bus_id),
                values.PCI_BUS_ID: values.string(bus_id),
                **self.topology,
            },
            "capacity": {"memory": values.mebibytes(gpu.product.memory_mib)},
        }
        if self.counter_set is not None:
            # The whole GPU takes every counter: nothing else on this GPU fits beside it.
            device["consumesCounters"] = self._consumes(dict(self.counter_set["counters"]), group=None)
        return self._finish(device, model=gpu, partition_type="full")

    def mig(self, instance: MigDevice) -> tuple[Device, PublishedDevice]:
        profile = instance.profile
        attributes: dict[str, DeviceAttribute] = {"type": values.string("mig")}
        if instance.uuid is not None:
            attributes["uuid"] = values.string(instance.uuid)
        attributes |= self.common
        attributes |= {
            "parentUUID": values.string(self.gpu.uuid),
            "profile": values.string(profile.name),
            # Driver-domain bus ID of the parent, as upstream publishes it; deliberately not the standard
            # pciBusID, which KubeVirt would pass through as the whole GPU.
            "pcieBusID": values.string(self.gpu.bdf.render()),
            **self.topology,
        }
        device: Device = {
            "name": names.mig_device(parent_minor=self.gpu.minor, profile=profile, placement=instance.placement),
            "attributes": attributes,
            "capacity": _engine_capacity(profile.engines, memory_mib=profile.memory_mib),
        }
        if not instance.precreated:
            counters = _engine_counters(profile.engines, memory_mib=profile.memory_mib)
            device["consumesCounters"] = self._consumes(counters | _slice_counters(instance.placement), group=GROUP_MIG)
        # 1.37 wants every device of one partition type to consume the same counters; each placement consumes its
        # own memory slices, so the type is the profile at a placement (PartitionCostMismatch otherwise).
        return self._finish(device, model=instance, partition_type=f"{profile.name}@{instance.placement.start}")

    def vgpu(self, vgpu: VgpuDevice) -> tuple[Device, PublishedDevice]:
        vgpu_type = vgpu.vgpu_type
        attributes: dict[str, DeviceAttribute] = {
            "type": values.string("vgpu"),
            "vgpuType": values.string(vgpu_type.name),
            **self.common,
            "parentUUID": values.string(self.gpu.uuid),
        }
        capacity: dict[str, DeviceCapacity] = {"memory": values.mebibytes(vgpu_type.framebuffer_mib)}
        assert self.counter_set is not None
        if vgpu_type.mig_profile is not None and vgpu.placement is not None:
            profile = self.gpu.product.mig_profile(vgpu_type.mig_profile)
            assert profile is not None
            attributes["profile"] = values.string(profile.name)
            capacity = _engine_capacity(profile.engines, memory_mib=profile.memory_mib)
            counters = _engine_counters(profile.engines, memory_mib=profile.memory_mib)
            counters |= _slice_counters(vgpu.placement)
            group = GROUP_VGPU_MIG
        else:
            total = int(self.counter_set["counters"][SLOTS_COUNTER]["value"])
            counters = {SLOTS_COUNTER: values.counter(slot_cost(vgpu_type, total=total))}
            # One group per size: time-sliced vGPUs on a GPU must all be of one type. Without the groups feature
            # sizes may mix, as NVIDIA's newer mixed-size mode allows; the slot counter still caps the total.
            group = f"vgpu-{vgpu_type.name}"
        attributes |= self.topology
        device: Device = {
            "name": names.vgpu_device(parent_minor=self.gpu.minor, vgpu_type=vgpu_type.name, index=vgpu.index),
            "attributes": attributes,
            "capacity": capacity,
            "consumesCounters": self._consumes(counters, group=group),
        }
        placed = f"@{vgpu.placement.start}" if vgpu_type.mig_profile is not None and vgpu.placement is not None else ""
        return self._finish(device, model=vgpu, partition_type=vgpu_type.name + placed)
