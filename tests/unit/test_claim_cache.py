"""What the claim cache keeps from lists and watch events (pure: raw claims in, plans out)."""

from __future__ import annotations

from typing import Any

from fakedev.driver.claim_cache import ClaimCache
from fakedev.driver.claims import compute_claim_plan

DRIVER = "gpu.example.com"
NODE = "n1"


def _claim(uid: str, *, device: str = "gpu-0", driver: str = DRIVER, node: str = NODE, allocated: bool = True) -> Any:
    claim: dict[str, Any] = {"metadata": {"uid": uid, "name": f"c-{uid}", "namespace": "ns"}, "status": {}}
    if allocated:
        selector = {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        }
        result = {"request": "gpu", "driver": driver, "pool": node, "device": device}
        claim["status"]["allocation"] = {"devices": {"results": [result]}, "nodeSelector": selector}
    return claim


def test_a_list_keeps_only_claims_allocated_here_with_devices_of_this_driver() -> None:
    cache = ClaimCache(driver=DRIVER, node_name=NODE)
    cache.replace([_claim("a"), _claim("b", node="n2"), _claim("c", driver="dra.net"), _claim("d", allocated=False)])
    assert len(cache) == 1
    assert cache.get("a") == compute_claim_plan(_claim("a"), uid="a", driver=DRIVER, node_name=NODE)
    assert cache.get("b") is None and cache.get("c") is None and cache.get("d") is None


def test_a_new_list_replaces_everything_the_last_one_had() -> None:
    cache = ClaimCache(driver=DRIVER, node_name=NODE)
    cache.replace([_claim("a"), _claim("b")])
    cache.replace([_claim("b", device="gpu-1")])
    assert cache.get("a") is None
    plan = cache.get("b")
    assert plan is not None and [d.device for d in plan.devices] == ["gpu-1"]


def test_events_add_change_and_drop_plans() -> None:
    cache = ClaimCache(driver=DRIVER, node_name=NODE)
    cache.change("ADDED", _claim("a", allocated=False))
    assert cache.get("a") is None
    cache.change("MODIFIED", _claim("a"))
    first = cache.get("a")
    assert first is not None and first.devices[0].device == "gpu-0"
    cache.change("MODIFIED", _claim("a", allocated=False))  # deallocated: nothing to prepare from it
    assert cache.get("a") is None
    cache.change("MODIFIED", _claim("a", device="gpu-1"))
    second = cache.get("a")
    assert second is not None and second.devices[0].device == "gpu-1"
    cache.change("MODIFIED", _claim("a", node="n2"))  # reallocated to another node
    assert cache.get("a") is None
    cache.change("ADDED", _claim("b"))
    cache.change("DELETED", _claim("b"))
    assert cache.get("b") is None and len(cache) == 0
