"""Opaque device configuration from DeviceClasses and claims: parsed strictly, merged in precedence order.

Accepted ``apiVersion``s: ours (``resource.fakedev.io/v1alpha1``), NVIDIA's (``resource.nvidia.com/v1beta1``) and the
example driver's (``gpu.resource.example.com/v1alpha1``), so manifests written for the real drivers work unchanged.
Unknown kinds, unknown fields and bad values are errors naming the field. The parameters are any JSON a user put
in a claim or class, so every check takes any value, and an error quotes a value at most about 60 characters long
and on one line: it becomes the claim's gRPC answer and the kubelet's event.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from fakedev.errors import ClaimError

API_VERSIONS: Final = frozenset(
    {"resource.fakedev.io/v1alpha1", "resource.nvidia.com/v1beta1", "gpu.resource.example.com/v1alpha1"}
)
GPU_KINDS: Final = frozenset({"GpuConfig", "MigDeviceConfig", "VfioDeviceConfig"})
NIC_KINDS: Final = frozenset({"NicConfig"})
STRATEGIES: Final = frozenset({"TimeSlicing", "SpaceSharing", "MPS"})
INTERVALS: Final = frozenset({"Default", "Short", "Medium", "Long"})
BACKEND_POLICIES: Final = frozenset({"LegacyOnly", "PreferIommuFD"})
_ENV_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IFNAME: Final = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")
_PLAIN_KEY: Final = re.compile(r"^[A-Za-z0-9_.-]{1,60}$")


@dataclass(frozen=True, kw_only=True)
class Sharing:
    strategy: str
    interval: str = "Default"
    partition_count: int | None = None


@dataclass(frozen=True, kw_only=True)
class DeviceConfig:
    """The effective configuration of one request's devices."""

    sharing: Sharing | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    interface_name: str | None = None
    mtu: int | None = None
    addresses: tuple[str, ...] = ()
    ipv6: bool = False
    vfio_api_device: bool | None = None
    """``VfioDeviceConfig.iommu.enableAPIDevice`` (NVIDIA v0.4.1+): give the claim the VFIO API node; None: not
    said (false). ``backendPolicy`` is accepted but changes nothing: fakedev's nodes have no IOMMUFD, so
    ``PreferIommuFD`` falls back to the legacy nodes, as the driver does on such a host."""


def _fail(path: str, rule: str) -> ClaimError:
    return ClaimError(f"invalid opaque config: {path}: {rule}")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _key(key: object) -> str:
    """A field name as a path shows it: plain names as they are, anything else quoted and cut short."""
    return key if isinstance(key, str) and _PLAIN_KEY.fullmatch(key) else _shown(key)


def _one_of(value: object, choices: frozenset[str]) -> bool:
    return isinstance(value, str) and value in choices  # a list or an object is no choice (nor hashable)


def _only(obj: Mapping[str, Any], *, path: str, allowed: set[str]) -> None:
    unknown = sorted(str(k) for k in set(obj) - allowed)
    if unknown:
        raise _fail(f"{path}.{_key(unknown[0])}", f"unknown field (allowed: {', '.join(sorted(allowed))})")


def _sharing(obj: Any, *, path: str) -> Sharing:
    if not isinstance(obj, Mapping):
        raise _fail(path, "must be an object")
    _only(obj, path=path, allowed={"strategy", "timeSlicingConfig", "spaceSharingConfig", "mpsConfig"})
    strategy = obj.get("strategy")
    if not _one_of(strategy, STRATEGIES):
        raise _fail(f"{path}.strategy", f"must be one of {', '.join(sorted(STRATEGIES))}, not {_shown(strategy)}")
    interval = "Default"
    if "timeSlicingConfig" in obj:
        ts = obj["timeSlicingConfig"]
        if not isinstance(ts, Mapping):
            raise _fail(f"{path}.timeSlicingConfig", "must be an object")
        _only(ts, path=f"{path}.timeSlicingConfig", allowed={"interval"})
        interval = ts.get("interval", "Default")
        if not _one_of(interval, INTERVALS):
            raise _fail(f"{path}.timeSlicingConfig.interval", f"must be one of {', '.join(sorted(INTERVALS))}")
    count = None
    for key in ("spaceSharingConfig", "mpsConfig"):
        if key in obj:
            ss = obj[key]
            if not isinstance(ss, Mapping):
                raise _fail(f"{path}.{key}", "must be an object")
            _only(ss, path=f"{path}.{key}", allowed={"partitionCount", "defaultActiveThreadPercentage"})
            count = ss.get("partitionCount")
            if count is not None and (not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 48):
                raise _fail(f"{path}.{key}.partitionCount", "must be an integer from 1 to 48")
    return Sharing(strategy=str(strategy), interval=str(interval), partition_count=count)


def _iommu(obj: Any, *, path: str) -> bool:
    """NVIDIA's ``VfioDeviceConfig.iommu``; returns ``enableAPIDevice`` (default false)."""
    if not isinstance(obj, Mapping):
        raise _fail(path, "must be an object")
    _only(obj, path=path, allowed={"backendPolicy", "enableAPIDevice"})
    policy = obj.get("backendPolicy", "LegacyOnly")
    if not _one_of(policy, BACKEND_POLICIES):
        raise _fail(f"{path}.backendPolicy", f"must be one of {', '.join(sorted(BACKEND_POLICIES))}")
    enable = obj.get("enableAPIDevice", False)
    if not isinstance(enable, bool):
        raise _fail(f"{path}.enableAPIDevice", "must be true or false")
    return enable


def _env(obj: Any, *, path: str) -> dict[str, str]:
    if not isinstance(obj, Mapping):
        raise _fail(path, "must be an object of strings")
    env = {}
    for key, value in obj.items():
        if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
            raise _fail(f"{path}.{_key(key)}", "is not a valid environment variable name")
        if not isinstance(value, str):
            raise _fail(f"{path}.{_key(key)}", "must be a string")
        env[key] = value
    return env


def parse_config(parameters: Mapping[str, Any], *, kinds: frozenset[str], path: str = "parameters") -> DeviceConfig:
    """One opaque parameters object → a partial DeviceConfig."""
    api_version, kind = parameters.get("apiVersion"), parameters.get("kind")
    if not _one_of(api_version, API_VERSIONS):
        raise _fail(
            f"{path}.apiVersion", f"must be one of {', '.join(sorted(API_VERSIONS))}, not {_shown(api_version)}"
        )
    if not _one_of(kind, kinds):
        raise _fail(f"{path}.kind", f"must be one of {', '.join(sorted(kinds))} for this device, not {_shown(kind)}")
    if kind in NIC_KINDS:
        _only(parameters, path=path, allowed={"apiVersion", "kind", "interfaceName", "mtu", "addresses", "ipv6", "env"})
        ifname = parameters.get("interfaceName")
        if ifname is not None and (not isinstance(ifname, str) or not _IFNAME.fullmatch(ifname)):
            raise _fail(f"{path}.interfaceName", "must be 1-15 characters of letters, digits, '_', '.', '-'")
        mtu = parameters.get("mtu")
        if mtu is not None and (not isinstance(mtu, int) or isinstance(mtu, bool) or not 68 <= mtu <= 65535):
            raise _fail(f"{path}.mtu", "must be an integer from 68 to 65535")
        addresses = parameters.get("addresses", [])
        if (
            not isinstance(addresses, Sequence)
            or isinstance(addresses, str)
            or not all(isinstance(a, str) for a in addresses)
        ):
            raise _fail(f"{path}.addresses", "must be a list of CIDR strings")
        ipv6 = parameters.get("ipv6", False)
        if not isinstance(ipv6, bool):
            raise _fail(f"{path}.ipv6", "must be true or false")
        return DeviceConfig(
            interface_name=ifname,
            mtu=mtu,
            addresses=tuple(addresses),
            ipv6=ipv6,
            env=_env(parameters.get("env", {}), path=f"{path}.env"),
        )
    vfio = kind == "VfioDeviceConfig"
    _only(parameters, path=path, allowed={"apiVersion", "kind", "sharing", "env", *(["iommu"] if vfio else [])})
    sharing = _sharing(parameters["sharing"], path=f"{path}.sharing") if "sharing" in parameters else None
    api_device = _iommu(parameters["iommu"], path=f"{path}.iommu") if "iommu" in parameters else None
    return DeviceConfig(
        sharing=sharing, env=_env(parameters.get("env", {}), path=f"{path}.env"), vfio_api_device=api_device
    )


def merge_configs(configs: Sequence[DeviceConfig]) -> DeviceConfig:
    """Later configs win field by field; environment maps are merged key by key."""
    result = DeviceConfig()
    for c in configs:
        result = replace(
            result,
            sharing=c.sharing or result.sharing,
            env={**result.env, **c.env},
            interface_name=c.interface_name or result.interface_name,
            mtu=c.mtu or result.mtu,
            addresses=c.addresses or result.addresses,
            ipv6=c.ipv6 or result.ipv6,
            vfio_api_device=result.vfio_api_device if c.vfio_api_device is None else c.vfio_api_device,
        )
    return result
