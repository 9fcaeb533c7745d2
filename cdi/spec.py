"""A typed model of a CDI spec file, with JSON conversion using the spec's own camelCase keys.

``to_json`` leaves out empty optional fields the way the reference Go types do (``omitempty``), so what we write
reads like what other CDI producers write. ``from_json`` rejects unknown fields and wrong types, naming the JSON
path; the semantic rules (names, paths, versions) live in ``cdi.validate``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cdi._json import (
    JsonPath,
    expect_object,
    int_item,
    read_bool,
    read_int,
    read_list,
    read_str,
    read_str_map,
    str_item,
)

JsonDict = dict[str, Any]

DEFAULT_SOURCE = "<spec>"


@dataclass(frozen=True, kw_only=True)
class DeviceNode:
    """A device node to create in the container. Absent numbers/modes are filled from the host at injection."""

    path: str
    host_path: str = ""
    type: str = ""
    major: int | None = None
    minor: int | None = None
    file_mode: int | None = None
    permissions: str = ""
    uid: int | None = None
    gid: int | None = None

    _FIELDS = frozenset({"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"})

    def to_json(self) -> JsonDict:
        """The spec's JSON form of this device node."""
        doc: JsonDict = {"path": self.path}
        _put(doc, "hostPath", self.host_path)
        _put(doc, "type", self.type)
        _put(doc, "major", self.major)
        _put(doc, "minor", self.minor)
        _put(doc, "fileMode", self.file_mode)
        _put(doc, "permissions", self.permissions)
        _put(doc, "uid", self.uid)
        _put(doc, "gid", self.gid)
        return doc

    @classmethod
    def from_json(cls, doc: object, /, *, at: JsonPath) -> DeviceNode:
        """Decode a device node, rejecting unknown fields."""
        obj = expect_object(doc, at=at, fields=cls._FIELDS)
        return cls(
            path=read_str(obj, "path", at=at, required=True),
            host_path=read_str(obj, "hostPath", at=at),
            type=read_str(obj, "type", at=at),
            major=read_int(obj, "major", at=at),
            minor=read_int(obj, "minor", at=at),
            file_mode=read_int(obj, "fileMode", at=at),
            permissions=read_str(obj, "permissions", at=at),
            uid=read_int(obj, "uid", at=at),
            gid=read_int(obj, "gid", at=at),
        )


@dataclass(frozen=True, kw_only=True)
class Mount:
    """A mount to add to the container."""

    host_path: str
    container_path: str
    type: str = ""
    options: tuple[str, ...] = ()

    _FIELDS = frozenset({"hostPath", "containerPath", "type", "options"})

    def to_json(self) -> JsonDict:
        """The spec's JSON form of this mount."""
        doc: JsonDict = {"hostPath": self.host_path, "containerPath": self.container_path}
        _put(doc, "options", list(self.options))
        _put(doc, "type", self.type)
        return doc

    @classmethod
    def from_json(cls, doc: object, /, *, at: JsonPath) -> Mount:
        """Decode a mount, rejecting unknown fields."""
        obj = expect_object(doc, at=at, fields=cls._FIELDS)
        return cls(
            host_path=read_str(obj, "hostPath", at=at, required=True),
            container_path=read_str(obj, "containerPath", at=at, required=True),
            type=read_str(obj, "type", at=at),
            options=read_list(obj, "options", at=at, item=str_item) or (),
        )


@dataclass(frozen=True, kw_only=True)
class Hook:
    """An OCI hook to run at the lifecycle point ``hook_name`` (an OCI hooks key such as ``createContainer``)."""

    hook_name: str
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int | None = None

    _FIELDS = frozenset({"hookName", "path", "args", "env", "timeout"})

    def to_json(self) -> JsonDict:
        """The spec's JSON form of this hook."""
        doc: JsonDict = {"hookName": self.hook_name, "path": self.path}
        _put(doc, "args", list(self.args))
        _put(doc, "env", list(self.env))
        _put(doc, "timeout", self.timeout)
        return doc

    @classmethod
    def from_json(cls, doc: object, /, *, at: JsonPath) -> Hook:
        """Decode a hook, rejecting unknown fields."""
        obj = expect_object(doc, at=at, fields=cls._FIELDS)
        return cls(
            hook_name=read_str(obj, "hookName", at=at, required=True),
            path=read_str(obj, "path", at=at, required=True),
            args=read_list(obj, "args", at=at, item=str_item) or (),
            env=read_list(obj, "env", at=at, item=str_item) or (),
            timeout=read_int(obj, "timeout", at=at),
        )


@dataclass(frozen=True, kw_only=True)
class NetDevice:
    """CDI 1.1: move the host interface ``host_interface_name`` into the container, renamed to ``name``."""

    host_interface_name: str
    name: str

    _FIELDS = frozenset({"hostInterfaceName", "name"})

    def to_json(self) -> JsonDict:
        """The spec's JSON form of this net device."""
        return {"hostInterfaceName": self.host_interface_name, "name": self.name}

    @classmethod
    def from_json(cls, doc: object, /, *, at: JsonPath) -> NetDevice:
        """Decode a net device, rejecting unknown fields."""
        obj = expect_object(doc, at=at, fields=cls._FIELDS)
        return cls(
            host_interface_name=read_str(obj, "hostInterfaceName", at=at, required=True),
            name=read_str(obj, "name", at=at, required=True),
        )


@dataclass(frozen=True, kw_only=True)
class IntelRdt:
    """Linux resctrl settings (0.7.0; ``schemata`` and ``enable_monitoring`` 1.1.0).

    ``schemata`` keeps None apart from an empty list because the reference treats any present list as a 1.1 field.
    """

    clos_id: str = ""
    l3_cache_schema: str = ""
    mem_bw_schema: str = ""
    schemata: tuple[str, ...] | None = None
    enable_monitoring: bool = False

    _FIELDS = frozenset({"closID", "l3CacheSchema", "memBwSchema", "schemata", "enableMonitoring"})

    def to_json(self) -> JsonDict:
        """The spec's JSON form of these settings."""
        doc: JsonDict = {}
        _put(doc, "closID", self.clos_id)
        _put(doc, "l3CacheSchema", self.l3_cache_schema)
        _put(doc, "memBwSchema", self.mem_bw_schema)
        if self.schemata is not None:
            doc["schemata"] = list(self.schemata)
        _put(doc, "enableMonitoring", self.enable_monitoring)
        return doc

    @classmethod
    def from_json(cls, doc: object, /, *, at: JsonPath) -> IntelRdt:
        """Decode the settings, rejecting unknown fields."""
        obj = expect_object(doc, at=at, fields=cls._FIELDS)
        return cls(
            clos_id=read_str(obj, "closID", at=at),
            l3_cache_schema=read_str(obj, "l3CacheSchema", at=at),
            mem_bw_schema=read_str(obj, "memBwSchema", at=at),
            schemata=read_list(obj, "schemata", at=at, item=str_item),
            enable_monitoring=read_bool(obj, "enableMonitoring", at=at),
        )


@dataclass(frozen=True, kw_only=True)
class ContainerEdits:
    """Edits a runtime makes to the OCI spec (for a device, or for a whole spec when any of its devices is used)."""

    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    hooks: tuple[Hook, ...] = ()
    net_devices: tuple[NetDevice, ...] = ()
    intel_rdt: IntelRdt | None = None
    additional_gids: tuple[int, ...] = ()

    _FIELDS = frozenset({"env", "deviceNodes", "mounts", "hooks", "netDevices", "intelRdt", "additionalGids"})

    def is_empty(self) -> bool:
        """True when there is nothing to apply (allowed for a spec, not for a device)."""
        return self == ContainerEdits()

    def to_json(self) -> JsonDict:
        """The spec's JSON form of these edits (the reference's field order)."""
        doc: JsonDict = {}
        _put(doc, "env", list(self.env))
        _put(doc, "deviceNodes", [node.to_json() for node in self.device_nodes])
        _put(doc, "netDevices", [net.to_json() for net in self.net_devices])
        _put(doc, "hooks", [hook.to_json() for hook in self.hooks])
        _put(doc, "mounts", [mount.to_json() for mount in self.mounts])
        if self.intel_rdt is not None:
            doc["intelRdt"] = self.intel_rdt.to_json()
        _put(doc, "additionalGids", list(self.additional_gids))
        return doc

    @classmethod
    def from_json(cls, doc: object, /, *, at: JsonPath) -> ContainerEdits:
        """Decode container edits, rejecting unknown fields."""
        if doc is None:
            return cls()
        obj = expect_object(doc, at=at, fields=cls._FIELDS)
        rdt = obj.get("intelRdt")
        return cls(
            env=read_list(obj, "env", at=at, item=str_item) or (),
            device_nodes=read_list(obj, "deviceNodes", at=at, item=DeviceNode.from_json) or (),
            mounts=read_list(obj, "mounts", at=at, item=Mount.from_json) or (),
            hooks=read_list(obj, "hooks", at=at, item=Hook.from_json) or (),
            net_devices=read_list(obj, "netDevices", at=at, item=NetDevice.from_json) or (),
            intel_rdt=None if rdt is None else IntelRdt.from_json(rdt, at=at.key("intelRdt")),
            additional_gids=read_list(obj, "additionalGids", at=at, item=int_item) or (),
        )


@dataclass(frozen=True, kw_only=True)
class Device:
    """A named device of a spec; its qualified name is ``<spec kind>=<name>``."""

    name: str
    container_edits: ContainerEdits
    annotations: Mapping[str, str] = field(default_factory=dict)

    _FIELDS = frozenset({"name", "annotations", "containerEdits"})

    def to_json(self) -> JsonDict:
        """The spec's JSON form of this device (``containerEdits`` always present: the schema requires it)."""
        doc: JsonDict = {"name": self.name}
        _put(doc, "annotations", dict(self.annotations))
        doc["containerEdits"] = self.container_edits.to_json()
        return doc

    @classmethod
    def from_json(cls, doc: object, /, *, at: JsonPath) -> Device:
        """Decode a device, rejecting unknown fields."""
        obj = expect_object(doc, at=at, fields=cls._FIELDS)
        return cls(
            name=read_str(obj, "name", at=at, required=True),
            annotations=read_str_map(obj, "annotations", at=at),
            container_edits=ContainerEdits.from_json(obj.get("containerEdits"), at=at.key("containerEdits")),
        )


@dataclass(frozen=True, kw_only=True)
class Spec:
    """A CDI spec: ``kind`` is ``vendor/class``; ``version`` is the ``cdiVersion`` string."""

    version: str
    kind: str
    devices: tuple[Device, ...]
    container_edits: ContainerEdits = field(default_factory=ContainerEdits)
    annotations: Mapping[str, str] = field(default_factory=dict)

    _FIELDS = frozenset({"cdiVersion", "kind", "annotations", "devices", "containerEdits"})

    def to_json(self) -> JsonDict:
        """The spec's JSON document."""
        doc: JsonDict = {"cdiVersion": self.version, "kind": self.kind}
        _put(doc, "annotations", dict(self.annotations))
        doc["devices"] = [device.to_json() for device in self.devices]
        _put(doc, "containerEdits", self.container_edits.to_json())
        return doc

    @classmethod
    def from_json(cls, doc: object, *, source: str = DEFAULT_SOURCE) -> Spec:
        """Decode a whole spec document; ``source`` (usually the file) is named in every error."""
        at = JsonPath(source=source)
        obj = expect_object(doc, at=at, fields=cls._FIELDS)
        devices = read_list(obj, "devices", at=at, item=Device.from_json)
        if devices is None:
            raise at.key("devices").error("required field is missing")
        return cls(
            version=read_str(obj, "cdiVersion", at=at, required=True),
            kind=read_str(obj, "kind", at=at, required=True),
            annotations=read_str_map(obj, "annotations", at=at),
            devices=devices,
            container_edits=ContainerEdits.from_json(obj.get("containerEdits"), at=at.key("containerEdits")),
        )


def _put(doc: JsonDict, key: str, value: object) -> None:
    """Set ``key`` unless the value is absent or empty, like Go's ``omitempty`` (numbers, even 0, are kept)."""
    if value is None or value is False or value == "" or value == [] or value == {}:
        return
    doc[key] = value
