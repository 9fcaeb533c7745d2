"""resource.k8s.io/v1 JSON shapes we emit (camelCase keys, exactly as the API server stores them)."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class DeviceAttribute(TypedDict, total=False):
    """Exactly one of the keys is set."""

    string: str
    int: int
    bool: bool
    version: str


class CapacityRequestPolicyRange(TypedDict):
    min: str
    max: NotRequired[str]
    step: NotRequired[str]


class CapacityRequestPolicy(TypedDict):
    default: str
    validRange: NotRequired[CapacityRequestPolicyRange]


class DeviceCapacity(TypedDict):
    value: str
    requestPolicy: NotRequired[CapacityRequestPolicy]


class Counter(TypedDict):
    value: str


class CounterSet(TypedDict):
    name: str
    counters: dict[str, Counter]


class DeviceCounterConsumption(TypedDict):
    counterSet: str
    counters: dict[str, Counter]
    compatibilityGroups: NotRequired[list[str]]  # 1.37 alpha, gate DRADeviceCompatibilityGroups


class DeviceTaint(TypedDict):
    key: str
    effect: str  # None | NoSchedule | NoExecute
    value: NotRequired[str]
    timeAdded: NotRequired[str]


class Device(TypedDict):
    name: str
    attributes: NotRequired[dict[str, DeviceAttribute]]
    capacity: NotRequired[dict[str, DeviceCapacity]]
    consumesCounters: NotRequired[list[DeviceCounterConsumption]]
    taints: NotRequired[list[DeviceTaint]]
    allowMultipleAllocations: NotRequired[bool]
    bindingConditions: NotRequired[list[str]]
    bindingFailureConditions: NotRequired[list[str]]
    nodeAllocatableResources: NotRequired[dict[str, Any]]  # 1.37 alpha, gate DRANodeAllocatableResources


class ResourcePool(TypedDict):
    name: str
    generation: int
    resourceSliceCount: int


class ResourceSliceSpec(TypedDict):
    driver: str
    pool: ResourcePool
    nodeName: str
    devices: NotRequired[list[Device]]
    sharedCounters: NotRequired[list[CounterSet]]
    partitionTypeAttribute: NotRequired[str]  # 1.37 alpha, gate DRAPartitionableDevicesType
    skipNodeOperations: NotRequired[list[str]]  # 1.37 alpha, gate DRAOptionalNodeOperations


class OwnerReference(TypedDict):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: NotRequired[bool]
    blockOwnerDeletion: NotRequired[bool]


class ObjectMeta(TypedDict):
    name: str
    labels: NotRequired[dict[str, str]]
    ownerReferences: NotRequired[list[OwnerReference]]


class ResourceSlice(TypedDict):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: ResourceSliceSpec
