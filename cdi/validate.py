"""The rules a CDI spec must follow, checked on the typed model (pure: no I/O).

Rules come from the reference library (tags.cncf.io/container-device-interface: ``pkg/cdi/spec.go``,
``device.go``, ``container-edits.go``, ``specs-go/version.go``, ``internal/validation``) and SPEC.md, which a
runtime applies when it loads a spec; a few are stricter where SPEC.md says MUST but the reference code does not
check (absolute container and hook paths, hook timeout > 0) or where the kernel would refuse the result later
(network interface names). Every problem is reported with its JSON path; nothing stops at the first one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from cdi.errors import QualifiedNameError, SpecError, SpecProblem
from cdi.naming import parse_kind, validate_device_name
from cdi.spec import DEFAULT_SOURCE, ContainerEdits, DeviceNode, Hook, IntelRdt, Mount, NetDevice, Spec
from cdi.version import KNOWN_VERSIONS, VERSION_RULES, compare_versions, normalize_version

# The OCI hooks keys a CDI hook may name (reference: validHookNames).
HOOK_NAMES = frozenset({"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"})
# "" lets the runtime take the type from the host device; u is an unbuffered char device, p a FIFO.
DEVICE_NODE_TYPES = frozenset({"", "b", "c", "u", "p"})
# Asks for a device node without any cgroup access (reference: NoPermissions).
NO_PERMISSIONS = "none"

_UINT32_MAX = 2**32 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_ANNOTATIONS_MAX_BYTES = 256 * 1024  # Kubernetes' total annotation size limit, which the reference reuses
_LINUX_IFNAMSIZ = 16  # the kernel's buffer, including the terminating NUL
_QUALIFIED_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

_Problems = Iterator[SpecProblem]


def validate_spec(spec: Spec, *, source: str = DEFAULT_SOURCE) -> None:
    """Raise SpecError listing every rule the spec breaks; ``source`` (the file) is named in the message."""
    problems = find_spec_problems(spec)
    if problems:
        raise SpecError(source=source, problems=problems)


def find_spec_problems(spec: Spec) -> tuple[SpecProblem, ...]:
    """Every rule the spec breaks, in document order."""
    return (
        *_version_problems(spec),
        *_kind_problems(spec.kind),
        *_annotation_problems(spec.annotations, at="$.annotations"),
        *_device_list_problems(spec),
        *_edits_problems(spec.container_edits, at="$.containerEdits"),
    )


def _problem(at: str, rule: str) -> SpecProblem:
    return SpecProblem(json_path=at, rule=rule)


def _version_problems(spec: Spec) -> _Problems:
    at = "$.cdiVersion"
    if normalize_version(spec.version) not in KNOWN_VERSIONS:
        yield _problem(at, f"unknown CDI version {spec.version!r} (known: {', '.join(KNOWN_VERSIONS)})")
        return
    for rule in VERSION_RULES:  # newest first, so the first match is the binding one
        if rule.needs(spec):
            if compare_versions(left=spec.version, right=rule.version) < 0:
                yield _problem(at, f"version {spec.version} is too old: {rule.feature} needs at least {rule.version}")
            return


def _kind_problems(kind: str) -> _Problems:
    try:
        parse_kind(kind)
    except QualifiedNameError as exc:
        yield _problem("$.kind", str(exc))


def _annotation_problems(annotations: Mapping[str, str], *, at: str) -> _Problems:
    # Keys follow Kubernetes' qualified-name rule, compared lowercased (as the reference does).
    for key in annotations:
        rule = _qualified_key_problem(key.lower())
        if rule:
            yield _problem(f"{at}[{key!r}]", rule)
    size = sum(len(key.encode()) + len(value.encode()) for key, value in annotations.items())
    if size > _ANNOTATIONS_MAX_BYTES:
        yield _problem(at, f"annotations take {size} bytes, more than the limit of {_ANNOTATIONS_MAX_BYTES}")


def _qualified_key_problem(key: str) -> str:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or "/" in prefix):
        return "an annotation key is [prefix/]name with at most one '/'"
    if slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return f"annotation key prefix {prefix!r} must be a DNS subdomain of at most 253 characters"
    if not name or len(name) > 63 or not _QUALIFIED_NAME_PART.fullmatch(name):
        return (
            f"annotation key name {name!r} must be 1-63 characters of letters, digits, '-', '_' or '.',"
            " starting and ending with a letter or digit"
        )
    return ""


def _device_list_problems(spec: Spec) -> _Problems:
    if not spec.devices:
        yield _problem("$.devices", "a spec must define at least one device")
    first_seen: dict[str, int] = {}
    for index, device in enumerate(spec.devices):
        at = f"$.devices[{index}]"
        try:
            validate_device_name(device.name)
        except QualifiedNameError as exc:
            yield _problem(f"{at}.name", str(exc))
        if device.name in first_seen:
            yield _problem(
                f"{at}.name", f"duplicate device name {device.name!r} (also $.devices[{first_seen[device.name]}])"
            )
        first_seen.setdefault(device.name, index)
        yield from _annotation_problems(device.annotations, at=f"{at}.annotations")
        if device.container_edits.is_empty():
            # Spec-level edits do not count: they only apply once some device with its own edits is used.
            yield _problem(f"{at}.containerEdits", "a device must have non-empty container edits")
        yield from _edits_problems(device.container_edits, at=f"{at}.containerEdits")


def _edits_problems(edits: ContainerEdits, *, at: str) -> _Problems:
    yield from _env_problems(edits.env, at=f"{at}.env")
    for i, node in enumerate(edits.device_nodes):
        yield from _device_node_problems(node, at=f"{at}.deviceNodes[{i}]")
    for i, mount in enumerate(edits.mounts):
        yield from _mount_problems(mount, at=f"{at}.mounts[{i}]")
    for i, hook in enumerate(edits.hooks):
        yield from _hook_problems(hook, at=f"{at}.hooks[{i}]")
    yield from _net_device_problems(edits.net_devices, at=f"{at}.netDevices")
    if edits.intel_rdt is not None:
        yield from _intel_rdt_problems(edits.intel_rdt, at=f"{at}.intelRdt")
    for i, gid in enumerate(edits.additional_gids):
        yield from _range_problems(gid, at=f"{at}.additionalGids[{i}]", low=0, high=_UINT32_MAX, what="a uint32")


def _env_problems(env: tuple[str, ...], *, at: str) -> _Problems:
    for i, entry in enumerate(env):
        if entry.find("=") <= 0:
            yield _problem(f"{at}[{i}]", f"environment entry {entry!r} must be NAME=VALUE with a non-empty NAME")


def _absolute_path_problems(path: str, *, at: str, what: str) -> _Problems:
    if not path:
        yield _problem(at, f"{what} is empty")
    elif not path.startswith("/"):
        yield _problem(at, f"{what} {path!r} must be absolute")


def _range_problems(value: int | None, *, at: str, low: int, high: int, what: str) -> _Problems:
    if value is not None and not low <= value <= high:
        yield _problem(at, f"{value} is out of range for {what}")


def _device_node_problems(node: DeviceNode, *, at: str) -> _Problems:
    yield from _absolute_path_problems(node.path, at=f"{at}.path", what="container device path")
    if node.host_path:
        yield from _absolute_path_problems(node.host_path, at=f"{at}.hostPath", what="host device path")
    if node.type not in DEVICE_NODE_TYPES:
        yield _problem(f"{at}.type", f"device type {node.type!r} is not one of b, c, u, p (or empty)")
    if node.permissions not in ("", NO_PERMISSIONS) and node.permissions.strip("rwm"):
        yield _problem(f"{at}.permissions", f"permissions {node.permissions!r} must be letters of 'rwm' or 'none'")
    for key, value in (("major", node.major), ("minor", node.minor)):
        yield from _range_problems(value, at=f"{at}.{key}", low=_INT64_MIN, high=_INT64_MAX, what="an int64")
    for key, value in (("fileMode", node.file_mode), ("uid", node.uid), ("gid", node.gid)):
        yield from _range_problems(value, at=f"{at}.{key}", low=0, high=_UINT32_MAX, what="a uint32")


def _mount_problems(mount: Mount, *, at: str) -> _Problems:
    if not mount.host_path:
        yield _problem(f"{at}.hostPath", "mount host path is empty")
    yield from _absolute_path_problems(mount.container_path, at=f"{at}.containerPath", what="mount container path")


def _hook_problems(hook: Hook, *, at: str) -> _Problems:
    if hook.hook_name not in HOOK_NAMES:
        yield _problem(
            f"{at}.hookName", f"unknown hook name {hook.hook_name!r} (known: {', '.join(sorted(HOOK_NAMES))})"
        )
    yield from _absolute_path_problems(hook.path, at=f"{at}.path", what="hook path")
    yield from _env_problems(hook.env, at=f"{at}.env")
    if hook.timeout is not None and hook.timeout <= 0:
        yield _problem(f"{at}.timeout", f"hook timeout {hook.timeout} must be greater than zero")


def _net_device_problems(net_devices: tuple[NetDevice, ...], *, at: str) -> _Problems:
    hosts: dict[str, int] = {}
    names: dict[str, int] = {}
    for i, net in enumerate(net_devices):
        for key, value, seen in (("hostInterfaceName", net.host_interface_name, hosts), ("name", net.name, names)):
            rule = _interface_name_problem(value)
            if rule:
                yield _problem(f"{at}[{i}].{key}", rule)
            elif value in seen:
                yield _problem(f"{at}[{i}].{key}", f"duplicate {key} {value!r} (also {at}[{seen[value]}])")
            seen.setdefault(value, i)


def _interface_name_problem(name: str) -> str:
    # The kernel's rule for netdev names (dev_valid_name); a runtime would only fail later, at container start.
    if not name:
        return "interface name is empty"
    if len(name) >= _LINUX_IFNAMSIZ or name in (".", "..") or any(c == "/" or c == ":" or c.isspace() for c in name):
        return f"interface name {name!r} must be 1-15 characters, not '.' or '..', without '/', ':' or whitespace"
    return ""


def _intel_rdt_problems(rdt: IntelRdt, *, at: str) -> _Problems:
    # The class of service names a resctrl directory, so it must be a file name; "/" means the root group.
    clos = rdt.clos_id
    if clos != "/" and (len(clos) >= 4096 or clos in (".", "..") or "/" in clos or "\n" in clos):
        yield _problem(f"{at}.closID", f"closID {clos!r} must be a valid file name or '/'")
