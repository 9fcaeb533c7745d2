"""Keep this node's ResourceSlices for one driver equal to what the device model renders.

A change of content (taints, health, hot-unplug) bumps the pool generation, so the scheduler never mixes slices of
two inventories; an unchanged inventory is left untouched (a restart does not churn the API).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from fakedev.kube import DriverApi
from kubeclient import JsonObj

log = logging.getLogger("fakedev.publisher")

RenderSlices = Callable[[int, JsonObj | None], list[JsonObj]]
"""(pool generation, owner reference or None) → the full desired slices."""


def _without_generation(spec: JsonObj) -> JsonObj:
    pool = {k: v for k, v in spec.get("pool", {}).items() if k != "generation"}
    return {**spec, "pool": pool}


def _same(desired: JsonObj, existing: JsonObj) -> bool:
    return _without_generation(desired["spec"]) == _without_generation(existing.get("spec", {})) and (
        desired["metadata"].get("ownerReferences") == existing["metadata"].get("ownerReferences")
    )


@dataclass(kw_only=True)
class SlicePublisher:
    api: DriverApi
    render: RenderSlices
    generation: int = 0
    published: int = 0
    synced: bool = False
    """The API has matched the model at least once (set at the end of a sync)."""

    def sync(self) -> list[JsonObj]:
        """Create, update and delete slices until the API matches the model; returns the slices now stored (as
        listed when unchanged, as sent otherwise)."""
        owner = self.api.node_owner()
        existing = {s["metadata"]["name"]: s for s in self.api.list_slices()}
        stored_generation = max((int(s["spec"]["pool"].get("generation", 0)) for s in existing.values()), default=0)
        desired = self.render(max(self.generation, stored_generation, 1), owner)
        names = {s["metadata"]["name"] for s in desired}
        unchanged = names == set(existing) and all(_same(s, existing[s["metadata"]["name"]]) for s in desired)
        if unchanged:
            self.generation = max(self.generation, stored_generation, 1)
            self.synced = True
            return list(existing.values())
        self.generation = max(self.generation, stored_generation) + 1
        desired = self.render(self.generation, owner)
        stored: list[JsonObj] = []
        for body in desired:
            current = existing.get(body["metadata"]["name"])
            if current is None:
                self.api.create_slice(body)
            else:
                body = {
                    **body,
                    "metadata": {**body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]},
                }
                self.api.replace_slice(body)
            stored.append(body)
        for name in set(existing) - names:
            self.api.delete_slice(name)
        self.published += 1
        self.synced = True
        log.info("published slices", extra={"fields": {"slices": len(stored), "generation": self.generation}})
        return stored

    def delete_all(self) -> None:
        for s in self.api.list_slices():
            self.api.delete_slice(s["metadata"]["name"])
