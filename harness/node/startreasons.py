"""A container start that failed, in words a driver author can act on: which CDI device ID, from which spec file,
and what the runtime said (pure: the registry and the OCI spec are already loaded).

A container runtime reports these as ``CreateContainerError`` with its message; the emulator words its own the same
way so that conformance verdicts and drill reports can quote the message as it stands.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import cdi

_LOGFMT_MSG: Final = re.compile(r'\bmsg="((?:[^"\\]|\\.)*)"')
_LOGFMT_ESCAPE: Final = re.compile(r"\\(.)")
_QUOTED_PATH: Final = re.compile(r"(/[^\s\"':,;()]+)")


def explain_cdi_failure(
    *, oci: Mapping[str, Any], registry: cdi.Registry, device_ids: Sequence[str], error: cdi.CdiError
) -> str:
    """One sentence on why injecting ``device_ids`` failed, naming the device ID and the spec file at fault."""
    if isinstance(error, cdi.ResolveError):
        return f"CDI device resolution failed for {', '.join(error.unresolved) or ', '.join(device_ids)}: {error}"
    # Edits are merged before they are applied, so the error does not say whose edit broke; apply each alone.
    for device_id in device_ids:
        try:
            resolved = registry.resolve(device_id)
        except cdi.CdiError:
            continue
        try:
            cdi.apply_edits(oci_spec=oci, edits=cdi.compute_edit_order([resolved]))
        except cdi.CdiError as exc:
            return f"CDI injection failed for device {device_id} (CDI spec {resolved.source.path}): {exc}"
    return f"CDI injection failed for devices {', '.join(device_ids)}: {error}"


def _edit_paths(edits: cdi.ContainerEdits) -> set[str]:
    """Every host or container path a set of edits names (device nodes, mounts, hooks)."""
    paths = {p for n in edits.device_nodes for p in (n.path, n.host_path) if p}
    paths |= {p for m in edits.mounts for p in (m.host_path, m.container_path)}
    return paths | {h.path for h in edits.hooks}


def find_cdi_culprits(*, message: str, registry: cdi.Registry) -> tuple[str, ...]:
    """The CDI devices whose edits name a path the runtime's message quotes, each with its spec file.

    A real runtime's CDI error names the path it could not use (``failed to stat CDI host device "/dev/x"``) but
    not the device or the spec; the specs on the node say which device asked for that path.
    """
    quoted = set(_QUOTED_PATH.findall(message))
    if not quoted:
        return ()
    found = []
    for device_id, resolved in sorted(registry.devices.items()):
        own = _edit_paths(resolved.device.container_edits) | _edit_paths(resolved.source.spec.container_edits)
        if own & quoted:
            found.append(f"{device_id} (CDI spec {resolved.source.path})")
    return tuple(found)


def read_runc_message(line: str) -> str:
    """runc's log line without its logfmt frame: ``time=… level=error msg="runc run failed: …"`` → the message."""
    match = _LOGFMT_MSG.search(line)
    if match is None:
        return line.strip()
    return _LOGFMT_ESCAPE.sub(lambda m: m.group(1), match.group(1))


def render_runc_failure(*, message: str, device_ids: Sequence[str], specs: Sequence[Path]) -> str:
    """runc's own error, with the CDI devices the container was given (the usual suspects of a failed create)."""
    if not device_ids:
        return f"runc create failed: {message}"
    where = f" from CDI spec {', '.join(str(p) for p in specs)}" if specs else ""
    return f"runc create failed: {message} (container given CDI devices {', '.join(device_ids)}{where})"
