"""A container start that failed, in words a driver author can act on: which CDI device ID, from which spec file,
and what the runtime said (pure: the registry and the OCI spec are already loaded).

A container runtime reports these as ``CreateContainerError`` with its message; the emulator words its own the same
way so that conformance verdicts and drill reports can quote the message as it stands.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import cdi


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


def render_runc_failure(*, message: str, device_ids: Sequence[str], specs: Sequence[Path]) -> str:
    """runc's own error, with the CDI devices the container was given (the usual suspects of a failed create)."""
    if not device_ids:
        return f"runc create failed: {message}"
    where = f" from CDI spec {', '.join(str(p) for p in specs)}" if specs else ""
    return f"runc create failed: {message} (container given CDI devices {', '.join(device_ids)}{where})"
