"""Which claims a pod uses and which CDI devices each container gets (pure; the kubelet's DRA bookkeeping).

A pod names claims in ``spec.resourceClaims`` (directly, or through a template whose generated claim name is in
``status.resourceClaimStatuses``); the scheduler may add one more for extended resources
(``status.extendedResourceClaimStatus``). A container gets the CDI IDs of the devices of the claims (and requests) it
lists in ``resources.claims``, or — for extended resources — of the requests mapped to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubeletapi.types import PreparedDevice


@dataclass(frozen=True, kw_only=True)
class PodClaim:
    pod_claim_name: str
    """The name inside the pod (``spec.resourceClaims[].name``); "" for the extended-resource claim."""
    claim_name: str | None
    """The ResourceClaim's name; None while a template's claim is not created yet."""
    extended: bool = False


def compute_pod_claims(pod: Mapping[str, Any]) -> list[PodClaim]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    generated = {s["name"]: s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []}
    claims = []
    for c in spec.get("resourceClaims") or []:
        name = c.get("resourceClaimName") or generated.get(c["name"])
        claims.append(PodClaim(pod_claim_name=c["name"], claim_name=name))
    extended = status.get("extendedResourceClaimStatus")
    if extended and extended.get("resourceClaimName"):
        claims.append(PodClaim(pod_claim_name="", claim_name=extended["resourceClaimName"], extended=True))
    return claims


def _devices_for_request(devices: Sequence[PreparedDevice], request: str | None) -> list[PreparedDevice]:
    """Devices of a claim a container asked for: all of them, or those serving one request."""
    if request is None:
        return list(devices)
    return [d for d in devices if not d.request_names or request in d.request_names]


def compute_container_cdi_ids(
    *,
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    prepared: Mapping[str, Sequence[PreparedDevice]],
) -> list[str]:
    """CDI IDs for ``container``, in claim order; ``prepared`` maps claim name → every driver's devices."""
    claims = {c.pod_claim_name: c for c in compute_pod_claims(pod)}
    ids: list[str] = []
    for ref in (container.get("resources") or {}).get("claims") or []:
        claim = claims.get(ref.get("name"))
        if claim is None or claim.claim_name is None:
            continue
        for device in _devices_for_request(prepared.get(claim.claim_name, ()), ref.get("request")):
            ids += [i for i in device.cdi_device_ids if i not in ids]
    extended = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    if extended.get("resourceClaimName"):
        devices = prepared.get(extended["resourceClaimName"], ())
        for mapping in extended.get("requestMappings") or []:
            if mapping.get("containerName") != container.get("name"):
                continue
            for device in _devices_for_request(devices, mapping.get("requestName")):
                ids += [i for i in device.cdi_device_ids if i not in ids]
    return ids


def compute_resource_status_name(*, pod_claim_name: str, request: str | None) -> str:
    """``claim:<podClaimName>[/<request>]`` as allocatedResourcesStatus names a container's claim."""
    return f"claim:{pod_claim_name}" + (f"/{request}" if request else "")
