"""The 1.37 API's validation limits for ResourceSlices, checked before anything is sent."""

from __future__ import annotations

import functools
import re
from typing import Final

from fakedev.errors import RenderError
from fakedev.render.pool import MAX_COUNTER_SETS, MAX_DEVICES, MAX_DEVICES_WITH_COUNTERS_OR_TAINTS
from fakedev.render.types import Device, ResourceSlice

MAX_ATTRIBUTES_AND_CAPACITIES: Final = 32
MAX_ATTRIBUTE_VALUES: Final = 48
MAX_STRING: Final = 64
MAX_COUNTERS: Final = 32
MAX_CONSUMPTIONS: Final = 2
MAX_GROUPS: Final = 2
MAX_TAINTS: Final = 16
MAX_ID_LENGTH: Final = 32

_DNS_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_C_IDENTIFIER: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@functools.cache  # the same few dozen names repeat on every device of every node
def _qualified_name_problem(name: str) -> str | None:
    domain, _, ident = name.rpartition("/")
    if domain and (len(domain) > 63 or not _DNS_SUBDOMAIN.match(domain)):
        return f"domain {domain!r} is not a DNS subdomain of at most 63 characters"
    if not _C_IDENTIFIER.match(ident) or len(ident) > MAX_ID_LENGTH:
        return f"{ident!r} is not a C identifier of at most {MAX_ID_LENGTH} characters"
    return None


@functools.lru_cache(maxsize=4096)  # device and group names repeat on every node
def _is_dns_label(name: str) -> bool:
    return _DNS_LABEL.match(name) is not None


@functools.lru_cache(maxsize=1024)  # a device's attribute and capacity names are one of a few dozen combinations
def _names_problems(attributes: tuple[str, ...], capacity: tuple[str, ...]) -> tuple[str, ...]:
    problems: list[str] = []
    if len(attributes) + len(capacity) > MAX_ATTRIBUTES_AND_CAPACITIES:
        problems.append(
            f"{len(attributes) + len(capacity)} attributes and capacities (at most {MAX_ATTRIBUTES_AND_CAPACITIES})"
        )
    if len(attributes) > MAX_ATTRIBUTE_VALUES:
        problems.append(f"more than {MAX_ATTRIBUTE_VALUES} attribute values")
    for name in (*attributes, *capacity):
        if (problem := _qualified_name_problem(name)) is not None:
            problems.append(f"attribute/capacity {name}: {problem}")
    return tuple(problems)


def _device_problems(device: Device) -> list[str]:
    """Problems without the device's name in front (the caller adds it: most devices have none)."""
    problems: list[str] = []
    if not _is_dns_label(device["name"]):
        problems.append("name is not a DNS label")
    attributes = device.get("attributes", {})
    problems += _names_problems(tuple(attributes), tuple(device.get("capacity", ())))
    for name, attribute in attributes.items():
        if len(attribute) != 1:
            problems.append(f"attribute {name} must have exactly one value")
        text = attribute.get("string", attribute.get("version"))
        if isinstance(text, str) and len(text) > MAX_STRING:
            problems.append(f"attribute {name} is longer than {MAX_STRING} characters")
    consumptions = device.get("consumesCounters", ())
    if len(consumptions) > MAX_CONSUMPTIONS:
        problems.append(f"consumes from {len(consumptions)} counter sets (at most {MAX_CONSUMPTIONS})")
    for consumption in consumptions:
        if len(consumption["counters"]) > MAX_COUNTERS:
            problems.append(f"consumes {len(consumption['counters'])} counters (at most {MAX_COUNTERS})")
        groups = consumption.get("compatibilityGroups", ())
        if len(groups) > MAX_GROUPS or len(set(groups)) != len(groups):
            problems.append(f"at most {MAX_GROUPS} distinct compatibility groups")
        problems += [f"compatibility group {g!r} is not a DNS label" for g in groups if not _is_dns_label(g)]
    if len(device.get("taints", ())) > MAX_TAINTS:
        problems.append(f"more than {MAX_TAINTS} taints")
    return problems


def slice_problems(resource_slice: ResourceSlice) -> list[str]:
    """Every limit ``resource_slice`` breaks; empty when the API server would accept it."""
    spec = resource_slice["spec"]
    name = resource_slice["metadata"]["name"]
    problems: list[str] = []
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        problems.append("name is not a DNS subdomain of at most 253 characters")
    devices = spec.get("devices", [])
    counter_sets = spec.get("sharedCounters", [])
    if devices and counter_sets:
        problems.append("a slice holds devices or sharedCounters, never both")
    if spec["pool"]["resourceSliceCount"] < 1 or spec["pool"]["generation"] < 0:
        problems.append("pool needs resourceSliceCount > 0 and a non-negative generation")
    small = any(d.get("consumesCounters") or d.get("taints") for d in devices)
    limit = MAX_DEVICES_WITH_COUNTERS_OR_TAINTS if small else MAX_DEVICES
    if len(devices) > limit:
        problems.append(f"{len(devices)} devices (at most {limit})")
    if len({d["name"] for d in devices}) != len(devices):
        problems.append("device names repeat")
    for device in devices:
        problems += [f"device {device['name']!r}: {p}" for p in _device_problems(device)]
    if len(counter_sets) > MAX_COUNTER_SETS:
        problems.append(f"{len(counter_sets)} counter sets (at most {MAX_COUNTER_SETS})")
    for counter_set in counter_sets:
        if not _DNS_LABEL.match(counter_set["name"]):
            problems.append(f"counter set {counter_set['name']!r} is not a DNS label")
        if len(counter_set["counters"]) > MAX_COUNTERS:
            problems.append(f"counter set {counter_set['name']!r} has more than {MAX_COUNTERS} counters")
        problems += [f"counter {c!r} is not a DNS label" for c in counter_set["counters"] if not _DNS_LABEL.match(c)]
    return [f"ResourceSlice {name}: {p}" for p in problems]


def check_slices(slices: list[ResourceSlice]) -> None:
    """Raise :class:`RenderError` naming every broken limit."""
    problems = [p for s in slices for p in slice_problems(s)]
    if problems:
        raise RenderError("; ".join(problems))
