"""Read an allocated ResourceClaim (raw JSON) into what this driver must prepare — pure, no I/O.

Every problem is a :class:`ClaimError` whose message goes into that claim's response: the kubelet shows it in the
pod's events and retries.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fakedev.errors import ClaimError

_DNS_SUBDOMAIN: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_UID: Final = re.compile(r"^[A-Za-z0-9-]{1,64}$")
POD_CLAIM_NAME_ANNOTATION: Final = "resource.kubernetes.io/pod-claim-name"


@dataclass(frozen=True, kw_only=True)
class AllocatedDevice:
    """One allocation result of this driver."""

    request: str
    """As in the result: ``req`` or ``req/subrequest``."""
    pool: str
    device: str
    share_id: str | None
    admin_access: bool


@dataclass(frozen=True, kw_only=True)
class OpaqueConfig:
    source: str
    """FromClass or FromClaim; claim configs win over class configs."""
    requests: tuple[str, ...]
    """Empty means every request."""
    parameters: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class ClaimPlan:
    uid: str
    namespace: str
    name: str
    pod_claim_name: str | None
    devices: tuple[AllocatedDevice, ...]
    configs: tuple[OpaqueConfig, ...]


def check_claim_ref(*, uid: str, namespace: str, name: str) -> None:
    """Refuse names that are not Kubernetes names before they reach a URL or a file path."""
    long = len(uid) > 63 or len(namespace) > 63 or len(name) > 253  # never valid: not kept in the memo
    if problem := (_claim_ref_problem.__wrapped__ if long else _claim_ref_problem)(uid, namespace, name):
        raise ClaimError(problem)


@functools.lru_cache(maxsize=4096)
def _claim_ref_problem(uid: str, namespace: str, name: str) -> str:
    """Memoized: a prepare checks its claim's names four times on its way (request, held, read-ahead, prepare)."""
    if not _UID.fullmatch(uid):
        return f"claim uid {uid!r} is not a valid UID"
    if len(namespace) > 63 or not _DNS_LABEL.fullmatch(namespace):
        return f"claim namespace {namespace!r} is not a valid namespace name"
    if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        return f"claim name {name!r} is not a valid object name"
    return ""


def _matches_node(selector: Mapping[str, Any] | None, node_name: str) -> bool:
    """Whether an allocation's nodeSelector can select ``node_name`` (node-local pools select by name)."""
    if not selector:
        return True
    for term in selector.get("nodeSelectorTerms") or []:
        fields = term.get("matchFields") or []
        names = [f for f in fields if f.get("key") == "metadata.name"]
        if not names:
            return True  # a label-based term: cannot decide without the Node's labels, so do not refuse
        if all(f.get("operator") == "In" and node_name in (f.get("values") or []) for f in names):
            return True
    return False


def compute_claim_plan(claim: Mapping[str, Any], *, uid: str, driver: str, node_name: str) -> ClaimPlan:
    """The devices of ``driver`` this node must prepare for ``claim``, or a ClaimError saying why not."""
    meta = claim.get("metadata") or {}
    if meta.get("uid") != uid:
        raise ClaimError(
            f"claim {meta.get('namespace')}/{meta.get('name')} has uid {meta.get('uid')}, not {uid}: "
            "it was deleted and re-created; the pod must be re-created too"
        )
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise ClaimError(f"claim {meta.get('namespace')}/{meta.get('name')} is not allocated")
    if not _matches_node(allocation.get("nodeSelector"), node_name):
        raise ClaimError(f"claim {meta.get('namespace')}/{meta.get('name')} is allocated for another node")
    devices_section = allocation.get("devices") or {}
    results: Sequence[Mapping[str, Any]] = devices_section.get("results") or []
    ours = [r for r in results if r.get("driver") == driver]
    if not ours:
        raise ClaimError(f"claim {meta.get('namespace')}/{meta.get('name')} has no device of driver {driver}")
    devices = tuple(
        AllocatedDevice(
            request=str(r.get("request", "")),
            pool=str(r.get("pool", "")),
            device=str(r.get("device", "")),
            share_id=r.get("shareID"),
            admin_access=bool(r.get("adminAccess")),
        )
        for r in ours
    )
    configs = []
    for c in devices_section.get("config") or []:
        opaque = c.get("opaque") or {}
        if opaque.get("driver") != driver:
            continue
        params = opaque.get("parameters")
        if not isinstance(params, Mapping):
            raise ClaimError(f"opaque config for {driver} has no parameters object")
        configs.append(
            OpaqueConfig(source=str(c.get("source", "")), requests=tuple(c.get("requests") or ()), parameters=params)
        )
    # Class configs first, then claim configs, so the claim's word is last (as upstream drivers apply them).
    configs.sort(key=lambda c: 0 if c.source == "FromClass" else 1)
    annotations = meta.get("annotations") or {}
    return ClaimPlan(
        uid=uid,
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        pod_claim_name=annotations.get(POD_CLAIM_NAME_ANNOTATION),
        devices=devices,
        configs=tuple(configs),
    )


def configs_for(plan: ClaimPlan, request: str) -> list[Mapping[str, Any]]:
    """Opaque parameters that apply to ``request`` (or its parent request), in increasing precedence."""
    parent = request.split("/", 1)[0]
    return [c.parameters for c in plan.configs if not c.requests or request in c.requests or parent in c.requests]
