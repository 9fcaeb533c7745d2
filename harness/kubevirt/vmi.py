"""A VirtualMachineInstance's DRA devices, and KubeVirt's admission rules for them (pure).

A VMI names pod-level claims in ``spec.resourceClaims`` (each with ``resourceClaimName`` or
``resourceClaimTemplateName``) and refers to them from ``spec.domain.devices.gpus[]`` and ``hostDevices[]`` by
``claimName`` + ``requestName``. The admission webhook rejects: half a reference, a device with both a
``deviceName`` and a claim, the same claim/request pair twice (across gpus, hostDevices and networks), and a
``claimName`` not listed in ``spec.resourceClaims``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

DEVICE_LISTS: Final = ("gpus", "hostDevices")


@dataclass(frozen=True, kw_only=True)
class ClaimSource:
    """One ``spec.resourceClaims`` entry: the pod-level name and where the claim comes from."""

    name: str
    claim_name: str | None
    template_name: str | None


@dataclass(frozen=True, kw_only=True)
class DraDevice:
    """A GPU or host device served by DRA."""

    kind: str
    """``gpu`` or ``hostDevice``."""
    name: str
    claim: ClaimSource
    request: str


@dataclass(frozen=True, kw_only=True)
class Finding:
    rule: str
    ok: bool
    detail: str


def _spec(vmi: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = vmi.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def claim_sources(vmi: Mapping[str, Any]) -> dict[str, ClaimSource]:
    out: dict[str, ClaimSource] = {}
    for entry in _spec(vmi).get("resourceClaims") or []:
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            out[entry["name"]] = ClaimSource(
                name=entry["name"],
                claim_name=entry.get("resourceClaimName"),
                template_name=entry.get("resourceClaimTemplateName"),
            )
    return out


def _devices(vmi: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    devices = _spec(vmi).get("domain", {}).get("devices", {})
    return [d for d in devices.get(key) or [] if isinstance(d, Mapping)]


def check_admission(vmi: Mapping[str, Any]) -> list[Finding]:
    """KubeVirt's webhook rules for DRA devices; one finding per rule (ok or the first violation)."""
    sources = claim_sources(vmi)
    problems: dict[str, list[str]] = {
        "admission/claim-sources": [],
        "admission/both-names": [],
        "admission/device-name-or-claim": [],
        "admission/unique-pairs": [],
        "admission/claim-listed": [],
    }
    for src in sources.values():
        if (src.claim_name is None) == (src.template_name is None):
            problems["admission/claim-sources"].append(
                f"resourceClaims[{src.name}] needs exactly one of resourceClaimName, resourceClaimTemplateName"
            )
    seen: dict[tuple[str, str], str] = {}
    pairs = [(key, d) for key in DEVICE_LISTS for d in _devices(vmi, key)]
    pairs += [("networks", n) for n in _spec(vmi).get("networks") or [] if isinstance(n, Mapping)]
    for key, d in pairs:
        ref = d.get("resourceClaim", d) if key == "networks" else d
        claim, request = ref.get("claimName"), ref.get("requestName")
        where = f"{key}[{d.get('name', '?')}]"
        if claim is None and request is None:
            continue
        if not claim or not request:
            problems["admission/both-names"].append(f"{where} needs both claimName and requestName")
            continue
        if key != "networks" and d.get("deviceName"):
            problems["admission/device-name-or-claim"].append(f"{where} has a deviceName and a claim")
        if (claim, request) in seen:
            problems["admission/unique-pairs"].append(f"{where} repeats {claim}/{request} of {seen[(claim, request)]}")
        seen[(claim, request)] = where
        if claim not in sources:
            problems["admission/claim-listed"].append(f"{where}: claim {claim!r} is not in spec.resourceClaims")
    texts = {
        "admission/claim-sources": "every spec.resourceClaims entry names a claim or a template",
        "admission/both-names": "every DRA device has claimName and requestName",
        "admission/device-name-or-claim": "no device has both a deviceName and a claim",
        "admission/unique-pairs": "claim/request pairs are unique across gpus, hostDevices and networks",
        "admission/claim-listed": "every claimName is listed in spec.resourceClaims",
    }
    return [
        Finding(rule=rule, ok=not found, detail="; ".join(found) if found else texts[rule])
        for rule, found in problems.items()
    ]


def dra_devices(vmi: Mapping[str, Any]) -> list[DraDevice]:
    """The GPUs and host devices that come from claims (after admission passed)."""
    sources = claim_sources(vmi)
    out = []
    for key, kind in (("gpus", "gpu"), ("hostDevices", "hostDevice")):
        for d in _devices(vmi, key):
            claim, request = d.get("claimName"), d.get("requestName")
            if claim and request and claim in sources:
                out.append(DraDevice(kind=kind, name=str(d.get("name", "")), claim=sources[claim], request=request))
    return out
