"""Which binding-condition verdicts a driver owes, from the claims as listed (pure)."""

from __future__ import annotations

from typing import Any

from fakedev.driver.binding import compute_binding_updates


def _claim(name: str, device: str, *, reported: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    result = {"request": "g", "driver": "gpu.example.com", "pool": "n1", "device": device}
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}"},
        "status": {"allocation": {"devices": {"results": [result]}}, "devices": reported or []},
    }


OUTCOMES = {"gpu-0": "ready", "gpu-1": "fails"}


def _updates(claims: list[dict[str, Any]]) -> list[Any]:
    return compute_binding_updates(claims, driver="gpu.example.com", pool="n1", outcomes=OUTCOMES, now="T")


def test_allocated_fabric_devices_get_their_verdict() -> None:
    ready, failed = _updates([_claim("a", "gpu-0"), _claim("b", "gpu-1")])
    assert (ready.name, ready.uid) == ("a", "uid-a")
    assert ready.devices[0]["conditions"][0] == {
        "type": "FabricAttached",
        "status": "True",
        "reason": "Attached",
        "message": "gpu-0 attached to the node through the fabric",
        "lastTransitionTime": "T",
    }
    assert failed.devices[0]["conditions"][0]["type"] == "FabricAttachFailed"


def test_nothing_owed_once_reported_or_for_other_devices() -> None:
    done = {
        "driver": "gpu.example.com",
        "pool": "n1",
        "device": "gpu-0",
        "conditions": [{"type": "FabricAttached", "status": "True"}],
    }
    other_pool = _claim("c", "gpu-0")
    other_pool["status"]["allocation"]["devices"]["results"][0]["pool"] = "n2"
    unallocated = {"metadata": {"namespace": "ns", "name": "d", "uid": "u"}, "status": {}}
    assert _updates([_claim("a", "gpu-0", reported=[done]), other_pool, _claim("e", "gpu-7"), unallocated]) == []


def test_skipped_node_operations_need_every_device_of_the_driver() -> None:
    from harness.node.dra_manager import compute_skipped_operations

    def result(driver: str, skip: list[str] | None) -> dict[str, Any]:
        return {"driver": driver, "device": "d", "pool": "p", **({"skipNodeOperations": skip} if skip else {})}

    both = {"NodePrepareResources", "NodeUnprepareResources"}
    assert compute_skipped_operations([result("a", ["*"])], driver="a") == both
    assert compute_skipped_operations([result("a", ["*"]), result("a", ["NodeUnprepareResources"])], driver="a") == {
        "NodeUnprepareResources"
    }
    assert compute_skipped_operations([result("a", ["*"]), result("a", None)], driver="a") == frozenset()
    assert compute_skipped_operations([result("a", ["*", "SomethingNew"]), result("b", None)], driver="a") == both
    assert compute_skipped_operations([result("b", ["*"])], driver="a") == frozenset()
