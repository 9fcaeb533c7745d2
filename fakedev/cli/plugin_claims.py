"""The claims a fakedev plugin's checkpoint records, as the KubeVirt verifier reads them (``kubevirt verify`` through
the chart's plugin pod, and drills on the real node share this: the plugin owns the checkpoint's format)."""

from __future__ import annotations

from collections.abc import Sequence

from fakedev.driver.checkpoint import parse_checkpoint_file, prepared_device
from fakedev.errors import CheckpointError
from harness.errors import VerifyError
from harness.kubevirt.verify import PreparedClaim


def plugin_claims(data: bytes, source: str) -> Sequence[PreparedClaim]:
    """The claims a fakedev plugin's checkpoint records, with the devices (and CDI IDs) it prepared for them."""
    try:
        records = parse_checkpoint_file(data, source=source).state.claims
    except CheckpointError as exc:
        raise VerifyError(str(exc)) from exc
    return [
        PreparedClaim(namespace=r["namespace"], name=r["name"], devices=tuple(prepared_device(d) for d in r["devices"]))
        for r in records.values()
    ]
