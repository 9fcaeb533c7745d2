"""Apply CDI container edits to an OCI runtime spec (config.json as a dict), the way a CDI-capable runtime does.

Semantics follow the reference library (``ContainerEdits.Apply``, ``Cache.InjectDevices``, ``internal/ociedit``):

- Edits are merged first, then applied once. For each requested device in order, its spec's own edits are added
  the first time a device of that spec appears, then the device's edits.
- ``env``: an entry whose name is already set replaces it in place; new names are appended.
- device nodes: missing type/major/minor/fileMode come from stat-ing the host path (``hostPath``, else ``path``);
  uid/gid default to the process user when that is not root. An existing device with the same path is removed and
  the new one appended. Block and char devices also get an allow rule in ``linux.resources.devices`` with the
  node's ``permissions`` (empty means ``rwm``; ``none`` means no access letters).
- ``netDevices``: ``linux.netDevices[hostInterfaceName] = {"name": name}``.
- mounts: a mount at the same container path is replaced; with a user namespace, bind mounts get ``idmap``/
  ``ridmap``; then all mounts are stably sorted by the depth of their destination, so parents mount first.
- hooks: appended to ``hooks.<hookName>``. ``intelRdt``: the last one wins. ``additionalGids``: added once, 0 skipped.
"""

from __future__ import annotations

import copy
import dataclasses
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cdi.errors import InjectError
from cdi.hostdev import StatDevice, stat_host_device
from cdi.registry import Registry, ResolvedDevice
from cdi.spec import ContainerEdits, DeviceNode, Hook, IntelRdt, Mount
from cdi.validate import HOOK_NAMES, NO_PERMISSIONS

OciSpec = dict[str, Any]

_DEFAULT_PERMISSIONS = "rwm"


@dataclass(frozen=True, kw_only=True)
class _MergedEdits:
    """All edits to apply, concatenated in application order (intelRdt: the last one given)."""

    env: tuple[str, ...]
    device_nodes: tuple[DeviceNode, ...]
    net_devices: tuple[tuple[str, str], ...]
    mounts: tuple[Mount, ...]
    hooks: tuple[Hook, ...]
    intel_rdt: IntelRdt | None
    additional_gids: tuple[int, ...]


def inject_devices(
    *,
    oci_spec: Mapping[str, Any],
    registry: Registry,
    device_ids: Sequence[str],
    stat_device: StatDevice = stat_host_device,
) -> OciSpec:
    """Resolve the CDI device IDs and return a copy of ``oci_spec`` with their edits applied.

    Raises ResolveError (naming every unresolvable ID) before anything is applied, InjectError if applying fails.
    """
    return apply_edits(
        oci_spec=oci_spec, edits=compute_edit_order(registry.resolve_all(device_ids)), stat_device=stat_device
    )


def compute_edit_order(devices: Iterable[ResolvedDevice]) -> tuple[ContainerEdits, ...]:
    """The edits to apply for these devices: each spec's own edits just before its first device's edits."""
    seen_specs: set[str] = set()
    ordered: list[ContainerEdits] = []
    for resolved in devices:
        spec_key = str(resolved.source.path)  # one file is one spec
        if spec_key not in seen_specs:
            seen_specs.add(spec_key)
            ordered.append(resolved.source.spec.container_edits)
        ordered.append(resolved.device.container_edits)
    return tuple(ordered)


def apply_edits(
    *, oci_spec: Mapping[str, Any], edits: Sequence[ContainerEdits], stat_device: StatDevice = stat_host_device
) -> OciSpec:
    """Return a copy of ``oci_spec`` with the edits applied; the input is left untouched."""
    merged = _merge(edits)
    result: OciSpec = copy.deepcopy(dict(oci_spec))
    _apply_env(result, merged.env)
    for node in merged.device_nodes:
        _apply_device_node(result, node, stat_device=stat_device)
    for host_name, name in merged.net_devices:
        _section(_section(result, "linux"), "netDevices")[host_name] = {"name": name}
    if merged.mounts:
        _apply_mounts(result, merged.mounts)
    for hook in merged.hooks:
        _apply_hook(result, hook)
    if merged.intel_rdt is not None:
        _section(result, "linux")["intelRdt"] = _intel_rdt_to_oci(merged.intel_rdt)
    _apply_additional_gids(result, merged.additional_gids)
    return result


def _merge(edits: Sequence[ContainerEdits]) -> _MergedEdits:
    rdt = [e.intel_rdt for e in edits if e.intel_rdt is not None]
    return _MergedEdits(
        env=tuple(v for e in edits for v in e.env),
        device_nodes=tuple(n for e in edits for n in e.device_nodes),
        net_devices=tuple((n.host_interface_name, n.name) for e in edits for n in e.net_devices),
        mounts=tuple(m for e in edits for m in e.mounts),
        hooks=tuple(h for e in edits for h in e.hooks),
        intel_rdt=rdt[-1] if rdt else None,
        additional_gids=tuple(g for e in edits for g in e.additional_gids),
    )


def _section(parent: OciSpec, key: str) -> OciSpec:
    """``parent[key]`` as an object, created when absent (runtimes initialise missing sections the same way)."""
    value = parent.get(key)
    if value is None:
        value = parent[key] = {}
    if not isinstance(value, dict):
        raise InjectError(f"OCI spec field {key!r} must be an object, not {type(value).__name__}")
    return value


def _array(parent: OciSpec, key: str) -> list[Any]:
    value = parent.get(key)
    if value is None:
        value = parent[key] = []
    if not isinstance(value, list):
        raise InjectError(f"OCI spec field {key!r} must be an array, not {type(value).__name__}")
    return value


def _apply_env(spec: OciSpec, env: tuple[str, ...]) -> None:
    if not env:
        return
    current = _array(_section(spec, "process"), "env")
    # Later duplicates in the original env win the index, as in the reference's name -> index map.
    index = {entry.partition("=")[0]: i for i, entry in enumerate(current)}
    for entry in env:
        name = entry.partition("=")[0]
        if name in index:
            current[index[name]] = entry
        else:
            index[name] = len(current)
            current.append(entry)


def _process_user_id(spec: OciSpec, key: str) -> int | None:
    """The process uid/gid when it is set and not root (root needs no ownership change)."""
    user = (spec.get("process") or {}).get("user") or {}
    value = user.get(key)
    return value if isinstance(value, int) and value > 0 else None


def _fill_from_host(node: DeviceNode, *, stat_device: StatDevice) -> DeviceNode:
    """Complete type/major/minor/fileMode from the host device, like the reference's fillMissingInfo."""
    host_path = node.host_path or node.path
    # Go's zero values mean "absent", so major 0 counts as unset there; we keep that meaning.
    major_given = node.major not in (None, 0)
    fully_given = bool(node.type) and (major_given or node.type == "p")
    try:
        host = stat_device(host_path)
    except OSError as exc:
        if fully_given:  # a vendor may describe a node that does not exist on this host
            return node
        raise InjectError(f"cannot stat CDI host device {host_path!r} for {node.path!r}: {exc}") from exc
    file_mode = host.file_mode if node.file_mode is None else node.file_mode
    if fully_given:
        return dataclasses.replace(node, file_mode=file_mode)
    device_type = node.type or host.type
    if device_type != host.type:
        raise InjectError(
            f"CDI device node {node.path!r}: type {device_type!r} does not match"
            f" host device {host_path!r} ({host.type!r})"
        )
    if device_type == "p" or major_given:
        return dataclasses.replace(node, type=device_type, file_mode=file_mode)
    return dataclasses.replace(node, type=device_type, file_mode=file_mode, major=host.major, minor=host.minor)


def _apply_device_node(spec: OciSpec, node: DeviceNode, *, stat_device: StatDevice) -> None:
    filled = _fill_from_host(node, stat_device=stat_device)
    major = filled.major or 0
    minor = filled.minor or 0
    device: OciSpec = {"path": filled.path, "type": filled.type, "major": major, "minor": minor}
    if filled.file_mode is not None:
        device["fileMode"] = filled.file_mode
    uid = filled.uid if filled.uid is not None else _process_user_id(spec, "uid")
    gid = filled.gid if filled.gid is not None else _process_user_id(spec, "gid")
    if uid is not None:
        device["uid"] = uid
    if gid is not None:
        device["gid"] = gid

    devices = _array(_section(spec, "linux"), "devices")
    for i, existing in enumerate(devices):
        if existing.get("path") == filled.path:
            del devices[i]
            break
    for i, existing in enumerate(devices):  # a second entry with the same path is replaced in place
        if existing.get("path") == filled.path:
            devices[i] = device
            break
    else:
        devices.append(device)

    if filled.type in ("b", "c"):
        access = filled.permissions or _DEFAULT_PERMISSIONS
        rule: OciSpec = {"allow": True, "type": filled.type, "major": major, "minor": minor}
        if access != NO_PERMISSIONS:  # "none" leaves the access letters out
            rule["access"] = access
        _array(_section(_section(spec, "linux"), "resources"), "devices").append(rule)


def _has_user_namespace(spec: OciSpec) -> bool:
    namespaces = (spec.get("linux") or {}).get("namespaces") or []
    return any(isinstance(ns, dict) and ns.get("type") == "user" for ns in namespaces)


def _mount_to_oci(mount: Mount, *, idmap: bool) -> OciSpec:
    result: OciSpec = {"destination": mount.container_path, "source": mount.host_path}
    if mount.type:
        result["type"] = mount.type
    options = list(mount.options)
    if idmap:
        # In a user namespace a bind mount must be ID-mapped to show the right owners (reference withIDMapForBindMount).
        extra = "idmap" if mount.type == "bind" else ""
        if not {"idmap", "ridmap"} & set(options):
            for option in options:
                if option == "bind":
                    extra = "idmap"
                elif option == "rbind":
                    extra = "ridmap"
            if extra:
                options.append(extra)
    if options:
        result["options"] = options
    return result


def _mount_depth(mount: Any) -> int:
    destination = mount.get("destination", "") if isinstance(mount, dict) else ""
    cleaned = posixpath.normpath(destination) if destination else "."
    if cleaned.startswith("//"):  # Go's filepath.Clean folds a leading "//", normpath keeps it
        cleaned = "/" + cleaned.lstrip("/")
    return cleaned.count("/")


def _apply_mounts(spec: OciSpec, mounts: tuple[Mount, ...]) -> None:
    current = _array(spec, "mounts")
    idmap = _has_user_namespace(spec)
    for mount in mounts:
        for i, existing in enumerate(current):
            if isinstance(existing, dict) and existing.get("destination") == mount.container_path:
                del current[i]
                break
        current.append(_mount_to_oci(mount, idmap=idmap))
    # Shallower destinations first so a parent is mounted before its children; stable to keep equal depths in order.
    current.sort(key=_mount_depth)


def _apply_hook(spec: OciSpec, hook: Hook) -> None:
    if hook.hook_name not in HOOK_NAMES:
        raise InjectError(f"unknown CDI hook name {hook.hook_name!r}")
    entry: OciSpec = {"path": hook.path}
    if hook.args:
        entry["args"] = list(hook.args)
    if hook.env:
        entry["env"] = list(hook.env)
    if hook.timeout is not None:
        entry["timeout"] = hook.timeout
    _array(_section(spec, "hooks"), hook.hook_name).append(entry)


def _intel_rdt_to_oci(rdt: IntelRdt) -> OciSpec:
    # The OCI keys are the CDI keys; OCI leaves out an empty schemata list where CDI keeps it as a version marker.
    result = rdt.to_json()
    if not result.get("schemata"):
        result.pop("schemata", None)
    return result


def _apply_additional_gids(spec: OciSpec, gids: tuple[int, ...]) -> None:
    wanted = [gid for gid in gids if gid != 0]  # 0 is root's group, which the process has anyway
    if not wanted:
        return
    user = _section(_section(spec, "process"), "user")
    user.setdefault("uid", 0)
    user.setdefault("gid", 0)
    current = _array(user, "additionalGids")
    for gid in wanted:
        if gid not in current:
            current.append(gid)
