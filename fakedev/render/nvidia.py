"""The ``gpu.nvidia.com`` schema as a pinned release of the NVIDIA DRA driver publishes it.

The release comes from ``inventory.profile.releases.nvidia``; its attribute set per device kind is the table in
:mod:`fakedev.render.nvidia_schema`, the device mixes it can publish are checked by :mod:`fakedev.render.nvidia_mix`
(a mix it cannot publish is a :class:`~fakedev.errors.RenderError`). Under DynamicMIG each GPU has one counter set
``gpu-<minor>-counter-set`` (the largest MIG profile's engines and memory, ``memory-slice-0..7``): the full GPU consumes
every counter, a MIG placement its engines, memory and the memory slices it covers, so the scheduler itself refuses
overlaps. Without DynamicMIG the pool is one slice, as the driver publishes it.

fakedev's own additions, published for every release but by no release of the real driver: vGPU devices and
compatibility groups (``extensions: [vgpu]``, with a ``vgpu-slots`` counter) and the ``fakedev.io/partitionType``
attribute (``features.partitionTypeAttribute``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Final, Protocol

from fakedev.model.catalog import GpuProduct
from fakedev.model.inventory import GpuDevice, MigDevice, NodeInventory, PassthroughGpu, VgpuDevice
from fakedev.model.mig import Engines, MigProfile, Placement
from fakedev.model.profile import MigMode, NvidiaSoftware
from fakedev.model.releases import NvidiaRelease
from fakedev.model.vgpu import slot_cost, slot_total
from fakedev.render import names, nvidia_schema, values
from fakedev.render.nvidia_mix import FULL_GPU_UNDER_DYNAMIC_MIG, check_mix
from fakedev.render.nvidia_schema import PUBLISHABLE, DeviceFacts, NvidiaKind
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
BRAND: Final = nvidia_schema.BRAND
# Our own domain: the real driver publishes no partition-type attribute, and selectors written against its schema
# must keep matching exactly the same attributes.
PARTITION_TYPE_ATTRIBUTE: Final = "fakedev.io/partitionType"
SLOTS_COUNTER: Final = "vgpu-slots"
GROUP_MIG: Final = "mig"
GROUP_VGPU_MIG: Final = "vgpu-mig"


class StaticMigName(Protocol):
    def __call__(self, *, parent_minor: int, profile: MigProfile, placement: Placement) -> str: ...


STATIC_MIG_NAMES: Final[Mapping[NvidiaRelease, StaticMigName]] = MappingProxyType(
    {
        NvidiaRelease.V25_8_1: names.mig_device_by_size,
        NvidiaRelease.V25_12_0: names.mig_device,
        NvidiaRelease.V0_4_1: names.mig_device,
        NvidiaRelease.MAIN: names.mig_device,
    }
)
"""How each release names a pre-created MIG device (dynamic MIG devices are always ``names.mig_device``)."""


def plan_nvidia(
    inventory: NodeInventory, *, taints: Mapping[str, Sequence[DeviceTaint]]
) -> tuple[PoolPlan, list[PublishedDevice]]:
    release = inventory.profile.releases.nvidia
    check_mix(inventory, release=release)
    features = inventory.profile.features
    software = inventory.profile.software
    counter_sets: list[CounterSet] = []
    groups: list[tuple[Device, ...]] = []
    published: list[PublishedDevice] = []
    for gpu in inventory.gpus:
        migs = [m for m in inventory.mig_devices if m.parent is gpu]
        vgpus = [v for v in inventory.vgpu_devices if v.parent is gpu]
        dynamic = [m for m in migs if not m.precreated]
        counters = _counter_set(gpu, vgpus=vgpus) if (vgpus or dynamic) else None
        builder = _GpuBuilder(
            gpu=gpu,
            release=release,
            software=software,
            counter_set=counters,
            pool=inventory.node_name,
            partition_types=features.partition_type_attribute,
            groups=features.compatibility_groups and bool(gpu.vgpu_modes),
        )
        if counters is not None:
            counter_sets.append(counters)
        entries = []
        if _publishes_full_gpu(gpu, release=release, dynamic=bool(dynamic)):
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
        device, entry = _vfio(passthrough, release=release, pool=inventory.node_name)
        if device["name"] in taints:
            device["taints"] = [t.copy() for t in taints[device["name"]]]
        groups.append((device,))
        published.append(entry)
    if not counter_sets:
        # Without DynamicMIG (and without fakedev's vGPU) the driver publishes its whole pool as one slice.
        groups = [tuple(device for group in groups for device in group)]
    plan = PoolPlan(
        driver=DRIVER,
        pool=inventory.node_name,
        counter_sets=tuple(counter_sets),
        device_groups=tuple(groups),
        partition_type_attribute=PARTITION_TYPE_ATTRIBUTE if features.partition_type_attribute else None,
    )
    return plan, published


def _publishes_full_gpu(gpu: GpuDevice, *, release: NvidiaRelease, dynamic: bool) -> bool:
    if gpu.mig_mode is MigMode.STATIC:
        return False  # in MIG mode with a fixed layout the whole GPU is not usable
    if dynamic and not gpu.vgpu_modes:
        return FULL_GPU_UNDER_DYNAMIC_MIG[release](gpu.product)
    return True


def _facts(
    *,
    kind: NvidiaKind,
    gpu: GpuDevice | PassthroughGpu,
    software: NvidiaSoftware,
    uuid: str | None,
    parent_uuid: str | None = None,
    profile: str | None = None,
) -> DeviceFacts:
    return DeviceFacts(
        kind=kind,
        product=gpu.product,
        bdf=gpu.bdf,
        pcie_root=gpu.pci.root.name,
        numa_node=gpu.pci.numa_node,
        software=software,
        uuid=uuid,
        parent_uuid=parent_uuid,
        profile=profile,
    )


def _vfio(gpu: PassthroughGpu, *, release: NvidiaRelease, pool: str) -> tuple[Device, PublishedDevice]:
    """A GPU bound to vfio-pci: what a VM needs to know (PCI identity and place), nothing the host driver reports
    (no brand, architecture, driver or CUDA version: the host's NVIDIA driver does not own it)."""
    # No NVML attribute is published for vfio, so the host driver's software versions never show.
    facts = _facts(kind=NvidiaKind.VFIO, gpu=gpu, software=NvidiaSoftware(), uuid=None)
    attributes = nvidia_schema.attributes(facts, release=release)
    device: Device = {
        "name": names.vfio_device(gpu.index),
        "attributes": attributes,
        # The driver publishes the BARs' total addressable memory; fakedev's GPUs map their framebuffer.
        "capacity": {"addressableMemory": values.mebibytes(gpu.product.memory_mib)},
    }
    return device, PublishedDevice(
        ref=DeviceRef(driver=DRIVER, pool=pool, device=device["name"]),
        attributes=attributes,
        capacity=device["capacity"],
        model=gpu,
    )


def _engine_counters(engines: Engines, *, memory_mib: int) -> dict[str, Counter]:
    return dict(_shared_engines(engines, memory_mib)[0])


def _slice_counters(placement: Placement) -> dict[str, Counter]:
    return dict(_shared_slices(placement)[0])


_ENGINE_NAMES: Final = (
    ("multiprocessors", "multiprocessors", "multiprocessors"),
    ("copy_engines", "copy-engines", "copyEngines"),
    ("decoders", "decoders", "decoders"),
    ("encoders", "encoders", "encoders"),
    ("jpeg_engines", "jpeg-engines", "jpegEngines"),
    ("ofa_engines", "ofa-engines", "ofaEngines"),
)
"""Each engine: its field of :class:`Engines`, its counter's name, its capacity's name (memory comes last)."""


# A profile's engines and a placement's slices render alike on every GPU of every node: built once, copied (the
# value dicts inside are shared; nothing changes them).
@functools.cache
def _shared_engines(engines: Engines, memory_mib: int) -> tuple[Mapping[str, Counter], Mapping[str, DeviceCapacity]]:
    """The counters a device of these engines consumes, and its capacity."""
    counters = {counter: values.counter(getattr(engines, field)) for field, counter, _ in _ENGINE_NAMES}
    capacity = {name: values.count(getattr(engines, field)) for field, _, name in _ENGINE_NAMES}
    return (
        MappingProxyType(counters | {"memory": values.counter_mebibytes(memory_mib)}),
        MappingProxyType(capacity | {"memory": values.mebibytes(memory_mib)}),
    )


@functools.cache
def _shared_slices(placement: Placement) -> tuple[Mapping[str, Counter], Mapping[str, DeviceCapacity]]:
    """The memory-slice counters a placement consumes, and the ``memorySlice<i>`` capacities of a pre-created MIG
    device there."""
    return (
        MappingProxyType({f"memory-slice-{i}": values.counter(1) for i in placement.memory_slices}),
        MappingProxyType({f"memorySlice{i}": values.count(1) for i in placement.memory_slices}),
    )


def mig_maxima(product: GpuProduct) -> tuple[Engines, int]:
    """The largest value of every MIG dimension over the product's profiles (engines, memory in MiB): what the
    driver publishes for a full GPU under DynamicMIG, rather than NVML's totals."""
    profiles = product.mig_profiles

    def most(pick: Callable[[MigProfile], int]) -> int:
        return max(pick(p) for p in profiles)

    engines = Engines(
        multiprocessors=most(lambda p: p.engines.multiprocessors),
        copy_engines=most(lambda p: p.engines.copy_engines),
        decoders=most(lambda p: p.engines.decoders),
        encoders=most(lambda p: p.engines.encoders),
        jpeg_engines=most(lambda p: p.engines.jpeg_engines),
        ofa_engines=most(lambda p: p.engines.ofa_engines),
    )
    return engines, most(lambda p: p.memory_mib)


def _counter_set(gpu: GpuDevice, *, vgpus: Sequence[VgpuDevice]) -> CounterSet:
    engines, memory_mib = mig_maxima(gpu.product)
    counters = _engine_counters(engines, memory_mib=memory_mib)
    # One memory-slice counter per slice of the largest placement (the 7g profile covers all 8).
    widest = max(p.shape.size for p in gpu.product.mig_profiles)
    counters |= _slice_counters(Placement(start=0, size=widest))
    slots = slot_total([v.vgpu_type for v in vgpus])
    if slots:
        counters[SLOTS_COUNTER] = values.counter(slots)
    return {"name": names.counter_set(gpu.minor), "counters": counters}


def _engine_capacity(engines: Engines, *, memory_mib: int) -> dict[str, DeviceCapacity]:
    return dict(_shared_engines(engines, memory_mib)[1])


def _slice_capacity(placement: Placement) -> dict[str, DeviceCapacity]:
    """A pre-created MIG device's ``memorySlice<i>`` = 1 for every memory slice its placement covers."""
    return dict(_shared_slices(placement)[1])


_PLACEHOLDER_UUID: Final = "MIG-00000000-0000-0000-0000-000000000000"
"""Stands for a device's UUID while the rows shared by its profile are evaluated."""


class _GpuBuilder:
    """Renders the devices of one physical GPU (attributes of the release, counter set, groups)."""

    def __init__(
        self,
        *,
        gpu: GpuDevice,
        release: NvidiaRelease,
        software: NvidiaSoftware,
        counter_set: CounterSet | None,
        pool: str,
        partition_types: bool,
        groups: bool,
    ) -> None:
        self.gpu = gpu
        self.release = release
        self.software = software
        self.counter_set = counter_set
        self.pool = pool
        self.partition_types = partition_types
        self.groups = groups
        self._by_profile: dict[tuple[NvidiaKind, str | None, bool], dict[str, DeviceAttribute]] = {}

    def _attributes(
        self, kind: NvidiaKind, *, uuid: str | None, profile: MigProfile | None = None
    ) -> dict[str, DeviceAttribute]:
        """A GPU's MIG devices of one profile differ only in their UUID: the rows are evaluated once per profile
        (a dgx-h100 has hundreds of MIG devices; this was a third of rendering it) and the UUID is put in its place."""
        key = (kind, profile.name if profile is not None else None, uuid is not None)
        shared = self._by_profile.get(key)
        if shared is None:
            shared = self._by_profile[key] = self._evaluate(
                kind, uuid=_PLACEHOLDER_UUID if uuid else None, profile=profile
            )
        attributes = dict(shared)
        if uuid is not None and "uuid" in attributes:
            attributes["uuid"] = values.string(uuid)
        return attributes

    def _evaluate(
        self, kind: NvidiaKind, *, uuid: str | None, profile: MigProfile | None
    ) -> dict[str, DeviceAttribute]:
        parent = self.gpu.uuid if kind in (NvidiaKind.MIG_STATIC, NvidiaKind.MIG_DYNAMIC) else None
        facts = _facts(
            kind=kind,
            gpu=self.gpu,
            software=self.software,
            uuid=uuid,
            parent_uuid=parent,
            profile=profile.name if profile is not None else None,
        )
        return nvidia_schema.attributes(facts, release=self.release)

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
        # A GPU with a counter set is on the DynamicMIG path; fakedev's vGPU gives one to a release without that
        # path too, and there the GPU keeps the plain path's attributes.
        dynamic = self.counter_set is not None and NvidiaKind.GPU_DYNAMIC in PUBLISHABLE[self.release]
        kind = NvidiaKind.GPU_DYNAMIC if dynamic else NvidiaKind.GPU
        if dynamic:
            engines, memory_mib = mig_maxima(gpu.product)
            capacity = _engine_capacity(engines, memory_mib=memory_mib)
        else:
            capacity = {"memory": values.mebibytes(gpu.product.memory_mib)}
        device: Device = {
            "name": names.gpu_device(gpu.minor),
            "attributes": self._attributes(kind, uuid=gpu.uuid),
            "capacity": capacity,
        }
        if self.counter_set is not None:
            # The whole GPU takes every counter: nothing else on this GPU fits beside it.
            device["consumesCounters"] = self._consumes(dict(self.counter_set["counters"]), group=None)
        return self._finish(device, model=gpu, partition_type="full")

    def mig(self, instance: MigDevice) -> tuple[Device, PublishedDevice]:
        profile = instance.profile
        capacity = _engine_capacity(profile.engines, memory_mib=profile.memory_mib)
        if instance.precreated:
            kind = NvidiaKind.MIG_STATIC
            name = STATIC_MIG_NAMES[self.release](
                parent_minor=self.gpu.minor, profile=profile, placement=instance.placement
            )
            capacity |= _slice_capacity(instance.placement)
        else:
            kind = NvidiaKind.MIG_DYNAMIC
            name = names.mig_device(parent_minor=self.gpu.minor, profile=profile, placement=instance.placement)
        device: Device = {
            "name": name,
            "attributes": self._attributes(kind, uuid=instance.uuid, profile=profile),
            "capacity": capacity,
        }
        if not instance.precreated:
            counters = _engine_counters(profile.engines, memory_mib=profile.memory_mib)
            device["consumesCounters"] = self._consumes(counters | _slice_counters(instance.placement), group=GROUP_MIG)
        # 1.37 wants every device of one partition type to consume the same counters; each placement consumes its
        # own memory slices, so the type is the profile at a placement (PartitionCostMismatch otherwise).
        return self._finish(device, model=instance, partition_type=f"{profile.name}@{instance.placement.start}")

    def vgpu(self, vgpu: VgpuDevice) -> tuple[Device, PublishedDevice]:
        """fakedev's own vGPU model (no driver release has it): the parent's NVML attributes and its place."""
        vgpu_type = vgpu.vgpu_type
        parent = self._attributes(NvidiaKind.MIG_STATIC, uuid=None)  # publishable in every release
        attributes: dict[str, DeviceAttribute] = {
            "type": values.string("vgpu"),
            "vgpuType": values.string(vgpu_type.name),
            **{k: v for k, v in parent.items() if k in _VGPU_INHERITED},
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
        # A vGPU sits where its parent sits: the topology attributes this release gives MIG devices.
        attributes |= {k: v for k, v in parent.items() if k in _VGPU_TOPOLOGY}
        device: Device = {
            "name": names.vgpu_device(parent_minor=self.gpu.minor, vgpu_type=vgpu_type.name, index=vgpu.index),
            "attributes": attributes,
            "capacity": capacity,
            "consumesCounters": self._consumes(counters, group=group),
        }
        placed = f"@{vgpu.placement.start}" if vgpu_type.mig_profile is not None and vgpu.placement is not None else ""
        return self._finish(device, model=vgpu, partition_type=vgpu_type.name + placed)


_VGPU_INHERITED: Final = frozenset(
    {"productName", "brand", "architecture", "cudaComputeCapability", "driverVersion", "cudaDriverVersion"}
)
# No pciBusID: KubeVirt would pass the whole parent GPU through instead of the vGPU's mdev.
_VGPU_TOPOLOGY: Final = frozenset({values.PCIE_ROOT, values.NUMA_NODE})
