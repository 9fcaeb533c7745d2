"""Binding conditions (1.37 beta): a fabric-attached device becomes usable only once the driver says it is attached.

The scheduler allocates such a device, then waits in PreBind until the claim's ``status.devices`` entry for it
carries one of the device's ``bindingConditions`` (attached) or ``bindingFailureConditions`` (failed, the scheduler
drops the allocation and tries again). This module decides, from the claims as listed, which entries the driver owes
(pure); the plugin writes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fakedev.render.example import FABRIC_ATTACH_FAILED, FABRIC_ATTACHED
from kubeclient.timestamps import render_time


@dataclass(frozen=True, kw_only=True)
class BindingUpdate:
    namespace: str
    name: str
    uid: str
    devices: tuple[dict[str, Any], ...]


def compute_binding_updates(
    claims: Sequence[Mapping[str, Any]], *, driver: str, pool: str, outcomes: Mapping[str, str], now: str | None = None
) -> list[BindingUpdate]:
    """Status entries to write: for each allocated fabric device without its verdict yet, attached or failed.

    ``outcomes`` maps device name → "ready" or "fails".
    """
    out = []
    for claim in claims:
        status = claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        mine = [r for r in results if r.get("driver") == driver and r.get("pool") == pool and r["device"] in outcomes]
        if not mine:
            continue
        reported = {
            d.get("device"): {c.get("type") for c in d.get("conditions") or [] if c.get("status") == "True"}
            for d in status.get("devices") or []
            if d.get("driver") == driver and d.get("pool") == pool
        }
        entries = []
        for r in mine:
            ready = outcomes[r["device"]] == "ready"
            kind = FABRIC_ATTACHED if ready else FABRIC_ATTACH_FAILED
            if kind in reported.get(r["device"], set()):
                continue
            entry: dict[str, Any] = {
                "driver": driver,
                "pool": pool,
                "device": r["device"],
                "conditions": [
                    {
                        "type": kind,
                        "status": "True",
                        "reason": "Attached" if ready else "AttachFailed",
                        "message": f"{r['device']} attached to the node through the fabric"
                        if ready
                        else f"the fabric could not attach {r['device']}",
                        "lastTransitionTime": now or render_time(),
                    }
                ],
            }
            if r.get("shareID"):
                entry["shareID"] = r["shareID"]
            entries.append(entry)
        if entries:
            meta = claim["metadata"]
            out.append(
                BindingUpdate(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"], devices=tuple(entries))
            )
    return out
