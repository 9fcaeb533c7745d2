"""What a drill needs from the cluster (feature gates, served API versions), checked against the cluster itself.

Feature gates are read from kube-apiserver's ``/metrics`` (``kubernetes_feature_enabled{name, stage}``), the one
place a cluster reports its gates; the stage gives the maturity (empty: GA). The scheduler and controller-manager
are not asked: a cluster whose components disagree on a gate is misconfigured, and the drill's own assertions then
fail. API versions are checked by discovery (``/apis/<group>/<version>``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from kubeclient import KubeClient

_GATE: Final = re.compile(r'^kubernetes_feature_enabled\{name="([^"]+)",stage="([^"]*)"\} (\d+)', re.MULTILINE)


@dataclass(frozen=True, kw_only=True)
class Gate:
    name: str
    enabled: bool
    stage: str
    """ALPHA, BETA, DEPRECATED, or "" for GA."""

    @property
    def maturity(self) -> str:
        return {"ALPHA": "alpha", "BETA": "beta", "": "GA"}.get(self.stage, self.stage.lower())


def parse_gates(metrics: str) -> dict[str, Gate]:
    return {m[1]: Gate(name=m[1], enabled=m[3] == "1", stage=m[2]) for m in _GATE.finditer(metrics)}


def cluster_gates(client: KubeClient) -> dict[str, Gate]:
    status, text = client.get_text("/metrics", timeout=10)
    if status != 200:
        return {}
    return parse_gates(text)


def api_served(client: KubeClient, api_version: str) -> bool:
    path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    status, _ = client.get_text(path, timeout=10)
    return status == 200


def missing_requirements(
    *, gates: Mapping[str, Gate], served: Mapping[str, bool], feature_gates: Sequence[str], api_versions: Sequence[str]
) -> list[str]:
    """What the cluster lacks, one phrase each (empty: the drill can run)."""
    out = []
    if feature_gates and not gates:
        out.append("its feature gates could not be read (kube-apiserver /metrics not readable)")
    for name in feature_gates if gates else ():
        gate = gates.get(name)
        if gate is None:
            out.append(f"feature gate {name} (unknown to this kube-apiserver)")
        elif not gate.enabled:
            out.append(f"feature gate {name} ({gate.maturity}, disabled)")
    out += [f"API version {v} (not served)" for v in api_versions if not served.get(v, False)]
    return out
