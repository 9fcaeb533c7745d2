"""Which claims a pod uses, which CDI devices each container gets, and how pod status names a container's claim."""

from __future__ import annotations

from typing import Any

import pytest

from harness.node.podclaims import (
    PodClaim,
    compute_container_cdi_ids,
    compute_pod_claims,
    compute_resource_status_name,
)
from kubeletapi.types import PreparedDevice


def _pod(
    *,
    claims: list[dict[str, str]] | None = None,
    containers: list[dict[str, Any]] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"resourceClaims": claims or [], "containers": containers or []},
        "status": status or {},
    }


def _container(name: str, *refs: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "resources": {"claims": list(refs)}} if refs else {"name": name}


def _device(name: str, *requests: str) -> PreparedDevice:
    return PreparedDevice(
        request_names=requests, pool="node-a", device=name, cdi_device_ids=(f"k8s.gpu.example.com/device={name}",)
    )


def _cdi(*devices: str) -> list[str]:
    return [f"k8s.gpu.example.com/device={d}" for d in devices]


# -- claims of a pod -------------------------------------------------------------------------------------------------

POD_CLAIM_CASES = [
    pytest.param(_pod(), [], id="no-claims"),
    pytest.param(
        _pod(claims=[{"name": "gpu", "resourceClaimName": "shared-gpu"}]),
        [PodClaim(pod_claim_name="gpu", claim_name="shared-gpu")],
        id="direct-claim",
    ),
    pytest.param(
        _pod(
            claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            status={"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x7k2q"}]},
        ),
        [PodClaim(pod_claim_name="gpu", claim_name="p-gpu-x7k2q")],
        id="template-claim-generated",
    ),
    pytest.param(
        _pod(claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]),
        [PodClaim(pod_claim_name="gpu", claim_name=None)],
        id="template-claim-not-created-yet",
    ),
    pytest.param(
        _pod(
            claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            status={"resourceClaimStatuses": [{"name": "gpu"}]},
        ),
        [PodClaim(pod_claim_name="gpu", claim_name=None)],
        id="template-claim-not-needed",
    ),
    pytest.param(
        _pod(
            claims=[
                {"name": "nic", "resourceClaimName": "fabric"},
                {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
            ],
            status={
                "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-1"}],
                "extendedResourceClaimStatus": {"resourceClaimName": "p-extended-resources-2", "requestMappings": []},
            },
        ),
        [
            PodClaim(pod_claim_name="nic", claim_name="fabric"),
            PodClaim(pod_claim_name="gpu", claim_name="p-gpu-1"),
            PodClaim(pod_claim_name="", claim_name="p-extended-resources-2", extended=True),
        ],
        id="spec-order-then-extended-resource-claim",
    ),
]


@pytest.mark.parametrize(("pod", "expected"), POD_CLAIM_CASES)
def test_pod_claims_name_each_resource_claim(pod: dict[str, Any], expected: list[PodClaim]) -> None:
    assert compute_pod_claims(pod) == expected


# -- CDI devices of a container --------------------------------------------------------------------------------------

TWO_CLAIMS = _pod(
    claims=[
        {"name": "gpu", "resourceClaimTemplateName": "two-gpus"},
        {"name": "nic", "resourceClaimName": "fabric"},
    ],
    status={"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-1"}]},
)
PREPARED = {
    "p-gpu-1": [_device("gpu-0", "big"), _device("gpu-1", "small"), _device("gpu-2")],
    "fabric": [_device("nic-0", "nic")],
}

CONTAINER_CASES = [
    pytest.param(_container("idle"), [], id="container-without-claims"),
    pytest.param(_container("c", {"name": "gpu"}), _cdi("gpu-0", "gpu-1", "gpu-2"), id="whole-template-claim"),
    pytest.param(_container("c", {"name": "nic"}), _cdi("nic-0"), id="whole-direct-claim"),
    pytest.param(
        _container("c", {"name": "nic"}, {"name": "gpu"}),
        _cdi("nic-0", "gpu-0", "gpu-1", "gpu-2"),
        id="in-the-containers-claim-order",
    ),
    pytest.param(
        _container("c", {"name": "gpu", "request": "big"}),
        _cdi("gpu-0", "gpu-2"),
        id="one-request-plus-devices-serving-every-request",
    ),
    pytest.param(
        _container("c", {"name": "gpu", "request": "small"}, {"name": "gpu"}),
        _cdi("gpu-1", "gpu-2", "gpu-0"),
        id="request-then-whole-claim-without-duplicates",
    ),
    pytest.param(_container("c", {"name": "unknown"}), [], id="claim-the-pod-does-not-name"),
]


@pytest.mark.parametrize(("container", "expected"), CONTAINER_CASES)
def test_container_gets_the_cdi_ids_of_the_claims_it_lists(container: dict[str, Any], expected: list[str]) -> None:
    pod = {**TWO_CLAIMS, "spec": {**TWO_CLAIMS["spec"], "containers": [container]}}

    assert compute_container_cdi_ids(pod=pod, container=container, prepared=PREPARED) == expected


def test_a_subrequests_devices_reach_the_container_asking_for_its_parent_request() -> None:
    # Drivers report a device allocated for subrequest "gpu/large" under its parent request "gpu" (as the kubelet
    # expects: it compares with the container's request without the subrequest part).
    container = _container("c", {"name": "gpu", "request": "gpu"})
    pod = _pod(claims=[{"name": "gpu", "resourceClaimName": "prioritized"}], containers=[container])
    prepared = {"prioritized": [_device("gpu-3", "gpu"), _device("nic-1", "nic")]}

    assert compute_container_cdi_ids(pod=pod, container=container, prepared=prepared) == _cdi("gpu-3")


def test_a_template_claim_not_created_yet_gives_no_devices() -> None:
    container = _container("c", {"name": "gpu"})
    pod = _pod(claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}], containers=[container])

    assert compute_container_cdi_ids(pod=pod, container=container, prepared={"p-gpu-1": [_device("gpu-0")]}) == []


def test_extended_resource_devices_go_to_the_containers_they_are_mapped_to() -> None:
    first, second, third = _container("first"), _container("second"), _container("third")
    pod = _pod(
        containers=[first, second, third],
        status={
            "extendedResourceClaimStatus": {
                "resourceClaimName": "p-extended-resources-2",
                "requestMappings": [
                    {
                        "containerName": "first",
                        "resourceName": "example.com/gpu",
                        "requestName": "container-0-request-0",
                    },
                    {
                        "containerName": "second",
                        "resourceName": "example.com/gpu",
                        "requestName": "container-1-request-0",
                    },
                ],
            }
        },
    )
    prepared = {
        "p-extended-resources-2": [_device("gpu-0", "container-0-request-0"), _device("gpu-1", "container-1-request-0")]
    }

    seen = {
        c["name"]: compute_container_cdi_ids(pod=pod, container=c, prepared=prepared) for c in (first, second, third)
    }

    assert seen == {"first": _cdi("gpu-0"), "second": _cdi("gpu-1"), "third": []}


# -- allocatedResourcesStatus names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_name", "expected"),
    [(None, "claim:gpu"), ("", "claim:gpu"), ("big", "claim:gpu/big")],
    ids=["whole-claim", "empty-request", "one-request"],
)
def test_resource_status_name_is_the_claim_and_request_the_container_lists(
    request_name: str | None, expected: str
) -> None:
    assert compute_resource_status_name(pod_claim_name="gpu", request=request_name) == expected
