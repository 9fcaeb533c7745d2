"""Drill conditions against the real API: each says None when it holds, and what it saw instead when it does not."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from harness.drills.conditions import ConditionContext, evaluate
from harness.node.events import render_event
from kubeclient import JsonObj, KubeClient
from kubeclient.resources import EVENTS, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from tests.helpers import EXAMPLE_DRIVER, allocated_claim, claim_body, example_slice_body, pod_body

pytestmark = pytest.mark.cluster

PRINTED = "starting\n"


def _ctx(kube: KubeClient, namespace: str, *, nodes: Mapping[str, str] | None = None) -> ConditionContext:
    return ConditionContext(client=kube, namespace=namespace, nodes=nodes or {}, logs=lambda _ns, _pod: PRINTED)


def _unscheduled_pod(name: str, *, env: dict[str, str] | None = None) -> JsonObj:
    """A pod no scheduler picks up: it stays Pending and unbound, and nobody writes events about it."""
    pod = pod_body(name=name, node="nowhere")
    pod["spec"]["schedulerName"] = "nobody"
    if env:
        pod["spec"]["containers"][0]["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return pod


@pytest.fixture
def worker_slice(kube: KubeClient, emulated_node: str) -> Iterator[str]:
    """The emulated node with a hand-written slice of two gpu.example.com devices (gpu-0, gpu-1)."""
    kube.create(RESOURCE_SLICES, example_slice_body(node=emulated_node))
    yield emulated_node
    kube.delete(RESOURCE_SLICES, f"{emulated_node}-example")


# -- pods ------------------------------------------------------------------------------------------------------------

POD_CASES = [
    pytest.param({"pod": "p", "phase": "Pending"}, None, id="phase-holds"),
    pytest.param({"pod": "p", "phase": "Running"}, "pod p is Pending, not Running", id="phase-differs"),
    pytest.param({"pod": "p", "scheduled": False}, None, id="unbound-holds"),
    pytest.param({"pod": "p", "scheduled": True}, "pod p is not bound to a node", id="not-bound"),
    pytest.param({"pod": "gone", "deleted": True}, None, id="deleted-holds"),
    pytest.param({"pod": "p", "deleted": True}, "pod p still exists (Pending)", id="still-exists"),
    pytest.param({"pod": "gone", "evicted": True}, None, id="evicted-holds-when-gone"),
    pytest.param({"pod": "p", "evicted": True}, "pod p is Pending and not being deleted", id="not-evicted"),
    pytest.param({"pod": "gone"}, "pod gone does not exist", id="absent"),
    pytest.param({"pod": "p", "log": "starting"}, None, id="log-holds"),
    pytest.param(
        {"pod": "p", "log": "ready"}, f"pod p has not printed 'ready' (printed {PRINTED!r})", id="log-missing"
    ),
    pytest.param({"pod": "p", "restarts": 1}, "pod p restarted [] times, expected at least 1", id="no-restarts"),
    pytest.param({"pod": "p", "health": "Unhealthy"}, "pod p reports device health none, not Unhealthy", id="health"),
]


@pytest.mark.parametrize(("condition", "expected"), POD_CASES)
def test_pod_condition(kube: KubeClient, test_namespace: str, condition: dict[str, Any], expected: str | None) -> None:
    kube.create(PODS, _unscheduled_pod("p"), namespace=test_namespace)

    assert evaluate(condition, _ctx(kube, test_namespace)) == expected


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        pytest.param({"pods": "w-", "count": 2, "phase": "Pending"}, None, id="count-holds"),
        pytest.param({"pods": "w-", "count": 2}, None, id="count-any-phase-holds"),
        pytest.param(
            {"pods": "w-", "count": 3, "phase": "Pending"},
            "2 pods w-* are Pending, expected 3 (['w-0=Pending', 'w-1=Pending'])",
            id="too-few",
        ),
        pytest.param(
            {"pods": "w-", "count": 2, "phase": "Running"},
            "0 pods w-* are Running, expected 2 (['w-0=Pending', 'w-1=Pending'])",
            id="wrong-phase",
        ),
    ],
)
def test_pods_condition_counts_pods_by_name_prefix(
    kube: KubeClient, test_namespace: str, condition: dict[str, Any], expected: str | None
) -> None:
    for name in ("w-0", "w-1", "other"):
        kube.create(PODS, _unscheduled_pod(name), namespace=test_namespace)

    assert evaluate(condition, _ctx(kube, test_namespace)) == expected


# -- claims ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        pytest.param({"claim": "c", "allocated": False}, None, id="unallocated-holds"),
        pytest.param({"claim": "c", "allocated": True}, "claim c is not allocated", id="not-allocated"),
        pytest.param({"claim": "c", "devices": 1}, "claim c has 0 devices allocated, expected 1", id="no-devices"),
        pytest.param({"claim": "missing"}, "claim missing does not exist", id="absent"),
    ],
)
def test_claim_condition_before_allocation(
    kube: KubeClient, test_namespace: str, example_class: str, condition: dict[str, Any], expected: str | None
) -> None:
    kube.create(RESOURCE_CLAIMS, claim_body(name="c", device_class=example_class), namespace=test_namespace)

    assert evaluate(condition, _ctx(kube, test_namespace)) == expected


def test_claim_condition_reads_the_allocated_devices_attributes_from_the_slice(
    kube: KubeClient, test_namespace: str, example_class: str, worker_slice: str
) -> None:
    claim = allocated_claim(
        kube,
        namespace=test_namespace,
        node=worker_slice,
        claim=claim_body(name="c", device_class=example_class, count=2),
        pod="p",
    )
    results = claim["status"]["allocation"]["devices"]["results"]
    attributes = {d["name"]: d["attributes"] for d in example_slice_body(node=worker_slice)["spec"]["devices"]}
    models = {r["device"]: attributes[r["device"]]["model"]["string"] for r in results}
    indexes = {f"{r['driver']}/{r['device']}": attributes[r["device"]]["index"]["int"] for r in results}
    ctx = _ctx(kube, test_namespace)
    assert sorted(models) == ["gpu-0", "gpu-1"]

    assert evaluate({"claim": "c", "allocated": True, "devices": 2}, ctx) is None
    assert evaluate({"claim": "c", "devices": 1}, ctx) == "claim c has 2 devices allocated, expected 1"
    assert evaluate({"claim": "c", "attribute": "model", "equals": "LATEST-GPU-MODEL"}, ctx) is None
    # The driver's own domain may be named: slices store its attributes unqualified.
    assert evaluate({"claim": "c", "attribute": f"{EXAMPLE_DRIVER}/model", "equals": "LATEST-GPU-MODEL"}, ctx) is None
    assert evaluate({"claim": "c", "attribute": "model", "equals": "H100"}, ctx) == (
        f"claim c: model of the allocated devices is {models}, expected 'H100'"
    )
    assert evaluate({"claim": "c", "sameAttribute": "model"}, ctx) is None
    assert evaluate({"claim": "c", "sameAttribute": "index"}, ctx) == (
        f"claim c: index per allocated device is {indexes}"
    )


# -- slices ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        pytest.param({"slices": "worker", "count": 1}, None, id="count-holds"),
        pytest.param({"slices": "worker", "driver": EXAMPLE_DRIVER, "count": 1}, None, id="driver-count-holds"),
        pytest.param({"slices": "worker", "min": 1}, None, id="min-holds"),
        pytest.param({"slices": "worker", "tainted": False}, None, id="untainted-holds"),
        pytest.param({"slices": "worker", "count": 2}, "1 slices for {node}, expected 2", id="too-few"),
        pytest.param(
            {"slices": "worker", "driver": "dra.net", "min": 1},
            "0 slices for {node} dra.net, expected at least 1",
            id="no-slice-of-driver",
        ),
        pytest.param({"slices": "worker", "tainted": True}, "tainted devices on {node}: none", id="none-tainted"),
    ],
)
def test_slices_condition_maps_the_scenario_node_to_the_real_one(
    kube: KubeClient, test_namespace: str, worker_slice: str, condition: dict[str, Any], expected: str | None
) -> None:
    ctx = _ctx(kube, test_namespace, nodes={"worker": worker_slice})

    assert evaluate(condition, ctx) == (None if expected is None else expected.format(node=worker_slice))


# -- events ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        pytest.param({"event": "FailedPrepareDynamicResources"}, None, id="reason-holds"),
        pytest.param({"event": "FailedPrepareDynamicResources", "object": "p"}, None, id="object-holds"),
        pytest.param({"event": "FailedPrepareDynamicResources", "contains": "boom"}, None, id="contains-holds"),
        pytest.param({"event": "Scheduled", "absent": True}, None, id="absent-holds"),
        pytest.param(
            {"event": "FailedPrepareDynamicResources", "absent": True},
            "unexpected event FailedPrepareDynamicResources: prepare went boom",
            id="present-though-absent-wanted",
        ),
        pytest.param(
            {"event": "FailedPrepareDynamicResources", "object": "q"},
            "no event FailedPrepareDynamicResources '' on q "
            "(seen: ['FailedPrepareDynamicResources: prepare went boom'])",
            id="other-object",
        ),
        pytest.param(
            {"event": "FailedPrepareDynamicResources", "contains": "timeout"},
            "no event FailedPrepareDynamicResources 'timeout' on any object "
            "(seen: ['FailedPrepareDynamicResources: prepare went boom'])",
            id="other-message",
        ),
    ],
)
def test_event_condition(
    kube: KubeClient, test_namespace: str, condition: dict[str, Any], expected: str | None
) -> None:
    pod = {"metadata": {"name": "p", "namespace": test_namespace, "uid": "00000000-0000-0000-0000-000000000001"}}
    event = render_event(
        pod=pod, node="n", reason="FailedPrepareDynamicResources", message="prepare went boom", warning=True
    )
    kube.create(EVENTS, event, namespace=test_namespace)

    assert evaluate(condition, _ctx(kube, test_namespace)) == expected


# -- any field -------------------------------------------------------------------------------------------------------

FIELD_CASES = [
    pytest.param({"field": "pods/p", "path": "spec.schedulerName", "equals": "nobody"}, None, id="equals-holds"),
    pytest.param(
        {"field": "pods/p", "path": "spec.schedulerName", "equals": "default-scheduler"},
        "pods/p: spec.schedulerName is 'nobody', expected 'default-scheduler'",
        id="equals-differs",
    ),
    pytest.param(
        {"field": "pods/p", "path": "spec.containers[name=c].image", "equals": "busybox"}, None, id="list-filter"
    ),
    pytest.param(
        {"field": "pods/p", "path": "spec.containers[name=d].image", "equals": "busybox"},
        "pods/p: spec.containers[name=d].image is not set (stopped at containers[name=d])",
        id="list-filter-matches-nothing",
    ),
    pytest.param({"field": "pods/p", "path": "spec.nodeName", "absent": True}, None, id="absent-holds"),
    pytest.param(
        {"field": "pods/p", "path": "spec.schedulerName", "absent": True},
        "pods/p: spec.schedulerName is set ('nobody'), expected it absent",
        id="set-though-absent-wanted",
    ),
    pytest.param({"field": "pods/p", "path": "spec.containers", "length": 1}, None, id="length-holds"),
    pytest.param(
        {"field": "pods/p", "path": "spec.containers", "length": 2},
        "pods/p: spec.containers has 1 items, expected 2",
        id="length-differs",
    ),
    pytest.param({"field": "pods/p", "path": "spec.terminationGracePeriodSeconds", "min": 30}, None, id="min-holds"),
    pytest.param(
        {"field": "pods/p", "path": "spec.terminationGracePeriodSeconds", "min": 60},
        "pods/p: spec.terminationGracePeriodSeconds is 30, expected at least 60",
        id="below-min",
    ),
    pytest.param(
        {"field": "pods/p", "path": "spec..nodeName", "equals": "x"},
        "pods/p: cannot follow '' in spec..nodeName",
        id="bad-path",
    ),
    pytest.param({"field": "pods/none", "path": "spec"}, "pods/none does not exist", id="no-object"),
    pytest.param({"field": "widgets/x", "path": "spec"}, "unknown resource 'widgets'", id="unknown-resource"),
]


@pytest.mark.parametrize(("condition", "expected"), FIELD_CASES)
def test_field_condition(
    kube: KubeClient, test_namespace: str, condition: dict[str, Any], expected: str | None
) -> None:
    kube.create(PODS, _unscheduled_pod("p"), namespace=test_namespace)

    assert evaluate(condition, _ctx(kube, test_namespace)) == expected


def test_field_filter_values_name_scenario_nodes(kube: KubeClient, test_namespace: str, worker_slice: str) -> None:
    pod = _unscheduled_pod("p")
    pod["spec"]["tolerations"] = [{"key": "node", "value": worker_slice, "effect": "NoSchedule"}]
    kube.create(PODS, pod, namespace=test_namespace)
    ctx = _ctx(kube, test_namespace, nodes={"worker": worker_slice})

    assert evaluate({"field": "pods/p", "path": "spec.tolerations[value=worker].key", "equals": "node"}, ctx) is None


# -- kubevirt: what it reports before any verification --------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param(None, "launcher pod p carries no VMI_JSON", id="no-vmi"),
        pytest.param(
            {"VMI_JSON": json.dumps({"kind": "VirtualMachineInstance"})},
            "launcher pod p is not bound to a node",
            id="not-on-a-node",
        ),
    ],
)
def test_kubevirt_condition_before_verifying(
    kube: KubeClient, test_namespace: str, env: dict[str, str] | None, expected: str
) -> None:
    kube.create(PODS, _unscheduled_pod("p", env=env), namespace=test_namespace)
    ctx = _ctx(kube, test_namespace)

    assert evaluate({"kubevirt": "p"}, ctx) == expected
    assert evaluate({"kubevirt": "gone"}, ctx) == "launcher pod gone does not exist"
