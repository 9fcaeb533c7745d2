"""The resolver side of CDI: which spec and device a qualified device ID names, across several CDI directories.

Priority follows the reference library's cache (``pkg/cdi/cache.go``): a spec's priority is the index of its
directory in the list given, so a later directory overrides an earlier one for the same qualified device. Two specs
of *equal* priority defining the same device are a conflict: both files are reported and the device becomes
unresolvable — even if a higher-priority directory also defines it, because the reference drops every conflicting
name after the whole scan. No directory is assumed: runtimes use ``/etc/cdi`` then ``/var/run/cdi``; callers pass
those (or temp dirs) explicitly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cdi.errors import CdiError, DeviceConflictError, QualifiedNameError, ResolveError
from cdi.loader import LoadedSpec, ScanResult, scan_spec_dirs
from cdi.naming import parse_qualified_name, render_qualified_name
from cdi.spec import Device


@dataclass(frozen=True, kw_only=True)
class ResolvedDevice:
    """A device found by its qualified ID, with the spec (and file) that defines it."""

    device_id: str
    device: Device
    source: LoadedSpec


@dataclass(frozen=True, kw_only=True)
class Registry:
    """A snapshot of the CDI directories: resolvable devices, the specs loaded, and what went wrong."""

    devices: Mapping[str, ResolvedDevice]
    specs: tuple[LoadedSpec, ...] = ()
    conflicts: Mapping[str, tuple[Path, ...]] = field(default_factory=dict)
    errors: tuple[CdiError, ...] = ()

    def device_ids(self) -> tuple[str, ...]:
        """Every resolvable qualified device ID, sorted."""
        return tuple(sorted(self.devices))

    def resolve(self, device_id: str) -> ResolvedDevice:
        """The device with this qualified ID, or ResolveError saying why there is none."""
        return self.resolve_all([device_id])[0]

    def resolve_all(self, device_ids: Sequence[str]) -> tuple[ResolvedDevice, ...]:
        """The devices in request order; ResolveError names every ID that could not be resolved, and why."""
        found: list[ResolvedDevice] = []
        reasons: dict[str, str] = {}
        for device_id in device_ids:
            resolved = self.devices.get(device_id)
            if resolved is not None:
                found.append(resolved)
            else:
                reasons[device_id] = self._why_unresolved(device_id)
        if reasons:
            detail = "; ".join(f"{device_id}: {why}" for device_id, why in reasons.items())
            raise ResolveError(f"unresolvable CDI devices: {detail}", unresolved=list(reasons))
        return tuple(found)

    def _why_unresolved(self, device_id: str) -> str:
        try:
            parse_qualified_name(device_id)
        except QualifiedNameError as exc:
            return str(exc)
        if device_id in self.conflicts:
            return f"defined by specs of equal priority ({', '.join(map(str, self.conflicts[device_id]))})"
        unreadable = [e for e in self.errors if not isinstance(e, DeviceConflictError)]
        if unreadable:
            # The device may well be in one of them: say which files could not be used, and why.
            return "no readable spec defines it; unusable spec files: " + " | ".join(
                " ".join(str(e).split()) for e in unreadable
            )
        return "no spec in the CDI directories defines it"


def build_registry(*, scan: ScanResult) -> Registry:
    """Index the scanned specs by qualified device ID, applying the priority and conflict rules."""
    devices: dict[str, ResolvedDevice] = {}
    conflicts: dict[str, list[Path]] = {}
    errors: list[CdiError] = list(scan.errors)
    for loaded in scan.specs:
        for device in loaded.spec.devices:
            device_id = render_qualified_name(kind=loaded.spec.kind, device=device.name)
            current = devices.get(device_id)
            if current is not None and current.source.priority > loaded.priority:
                continue
            if current is not None and current.source.priority == loaded.priority:
                paths = conflicts.setdefault(device_id, [current.source.path])
                paths.append(loaded.path)
                errors.append(
                    DeviceConflictError(
                        f"conflicting CDI device {device_id!r} (specs {current.source.path}, {loaded.path})",
                        device_id=device_id,
                        paths=[current.source.path, loaded.path],
                    )
                )
                continue
            devices[device_id] = ResolvedDevice(device_id=device_id, device=device, source=loaded)
    for device_id in conflicts:
        devices.pop(device_id, None)
    return Registry(
        devices=devices,
        specs=scan.specs,
        conflicts={device_id: tuple(paths) for device_id, paths in conflicts.items()},
        errors=tuple(errors),
    )


def load_registry(*, spec_dirs: Sequence[Path]) -> Registry:
    """Scan the directories (lowest priority first) and index what they hold."""
    return build_registry(scan=scan_spec_dirs(spec_dirs=spec_dirs))
