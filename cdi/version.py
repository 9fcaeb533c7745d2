"""Which CDI spec version (``cdiVersion``) a spec's content needs.

Source of the rules: tags.cncf.io/container-device-interface, ``specs-go/version.go`` (the ``requiresV…``
functions, one per version, checked newest first) and the "Released versions" table of its ``SPEC.md``.
A runtime refuses a spec whose ``cdiVersion`` is older than what its content needs, and one built against an
older library refuses versions it does not know, so producers should write the *lowest* version that fits.

| version | content that needs it                                                                   |
|---------|-----------------------------------------------------------------------------------------|
| 1.1.0   | ``netDevices`` (spec or device edits); ``intelRdt.schemata`` or ``intelRdt.enableMonitoring`` |
| 1.0.0   | nothing: the bump only moved the minimum-version logic into the Go ``specs-go`` package  |
| 0.8.0   | nothing: the bump only removed Go ``ToOCI`` helpers                                      |
| 0.7.0   | ``intelRdt`` (any), ``additionalGids`` (spec or device edits)                           |
| 0.6.0   | ``annotations`` (spec or device); a ``.`` in the class part of ``kind``                 |
| 0.5.0   | a device name starting with a digit; a device node ``hostPath``                         |
| 0.4.0   | a mount ``type``                                                                          |
| 0.3.0   | anything else (the reference library's earliest supported version)                      |

Device node ``permissions``, ``uid``/``gid``, ``fileMode`` and hooks need no particular version.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from cdi.spec import ContainerEdits, Spec

# Every version the reference library knows, oldest first; a spec may declare any of them (with an optional "v").
KNOWN_VERSIONS: tuple[str, ...] = (
    "0.1.0",
    "0.2.0",
    "0.3.0",
    "0.4.0",
    "0.5.0",
    "0.6.0",
    "0.7.0",
    "0.8.0",
    "1.0.0",
    "1.1.0",
)

# The versions we write. Never below 0.5.0: our device names are keyed by claim UIDs, which often start with a
# digit (a 0.5.0 feature), so a floor keeps one spec's version from flapping between claims.
WRITABLE_VERSIONS: tuple[str, ...] = KNOWN_VERSIONS[KNOWN_VERSIONS.index("0.5.0") :]

# The reference library's earliest supported version: what content without any newer feature needs.
EARLIEST_VERSION = "0.3.0"


def _all_edits(spec: Spec) -> Iterator[ContainerEdits]:
    yield spec.container_edits
    for device in spec.devices:
        yield device.container_edits


def _needs_1_1_0(spec: Spec) -> bool:
    for edits in _all_edits(spec):
        rdt = edits.intel_rdt
        if edits.net_devices or (rdt is not None and (rdt.schemata is not None or rdt.enable_monitoring)):
            return True
    return False


def _needs_0_7_0(spec: Spec) -> bool:
    return any(edits.intel_rdt is not None or edits.additional_gids for edits in _all_edits(spec))


def _needs_0_6_0(spec: Spec) -> bool:
    if spec.annotations or any(device.annotations for device in spec.devices):
        return True
    # Only the class part counts: dots were always allowed in the vendor part.
    _, slash, class_name = spec.kind.partition("/")
    return bool(slash) and "." in class_name


def _needs_0_5_0(spec: Spec) -> bool:
    if any("0" <= device.name[:1] <= "9" for device in spec.devices):
        return True
    return any(node.host_path for edits in _all_edits(spec) for node in edits.device_nodes)


def _needs_0_4_0(spec: Spec) -> bool:
    return any(mount.type for edits in _all_edits(spec) for mount in edits.mounts)


@dataclass(frozen=True, kw_only=True)
class VersionRule:
    """Content that needs at least ``version``; ``feature`` says what, for messages and docs."""

    version: str
    feature: str
    needs: Callable[[Spec], bool]


# Newest first: the first rule that matches decides, as in the reference. 1.0.0 and 0.8.0 have no rule (see above).
VERSION_RULES: tuple[VersionRule, ...] = (
    VersionRule(
        version="1.1.0", feature="netDevices, intelRdt.schemata or intelRdt.enableMonitoring", needs=_needs_1_1_0
    ),
    VersionRule(version="0.7.0", feature="intelRdt or additionalGids", needs=_needs_0_7_0),
    VersionRule(version="0.6.0", feature="annotations or a '.' in the kind's class", needs=_needs_0_6_0),
    VersionRule(version="0.5.0", feature="a device name starting with a digit or a hostPath", needs=_needs_0_5_0),
    VersionRule(version="0.4.0", feature="a mount type", needs=_needs_0_4_0),
)


def normalize_version(version: str) -> str:
    """The version without the optional leading ``v`` the reference accepts."""
    return version.removeprefix("v")


def compare_versions(*, left: str, right: str) -> int:
    """-1, 0 or 1 as known version ``left`` is older than, equal to or newer than ``right``."""
    a = KNOWN_VERSIONS.index(normalize_version(left))
    b = KNOWN_VERSIONS.index(normalize_version(right))
    return (a > b) - (a < b)


def compute_required_version(spec: Spec) -> str:
    """The oldest known version the spec's content is valid in (what a runtime checks ``cdiVersion`` against)."""
    for rule in VERSION_RULES:
        if rule.needs(spec):
            return rule.version
    return EARLIEST_VERSION


def compute_minimum_version(spec: Spec) -> str:
    """The lowest version we write (0.5.0 … 1.1.0) that the spec's content needs."""
    required = compute_required_version(spec)
    return next(v for v in WRITABLE_VERSIONS if compare_versions(left=v, right=required) >= 0)


def with_minimum_version(spec: Spec) -> Spec:
    """The same spec with ``version`` set by :func:`compute_minimum_version` (for producers)."""
    return dataclasses.replace(spec, version=compute_minimum_version(spec))
