"""Small builders shared by the integration tests: claims, pods, and waiting for an allocation."""

from __future__ import annotations

from typing import Any

from harness.kube.waits import wait_object
from kubeclient import JsonObj, KubeClient
from kubeclient.resources import PODS, RESOURCE_CLAIMS


def claim_body(
    *, name: str, device_class: str, requests: int = 1, config: list[JsonObj] | None = None, count: int = 1
) -> JsonObj:
    spec: dict[str, Any] = {
        "devices": {
            "requests": [
                {
                    "name": f"r{i}" if requests > 1 else "gpu",
                    "exactly": {"deviceClassName": device_class, "count": count},
                }
                for i in range(requests)
            ]
        }
    }
    if config:
        spec["devices"]["config"] = config
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name}, "spec": spec}


def pod_body(*, name: str, node: str, claims: dict[str, str], command: str = "sleep 3600") -> JsonObj:
    """A pod pinned to ``node`` using claims ``{pod claim name: resource claim name}``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "resourceClaims": [{"name": k, "resourceClaimName": v} for k, v in claims.items()],
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "command": ["sh", "-c", command],
                    "resources": {"claims": [{"name": k} for k in claims]},
                }
            ],
        },
    }


def allocated_claim(kube: KubeClient, *, namespace: str, node: str, claim: JsonObj, pod: str) -> JsonObj:
    """Create a claim and a pod that uses it; return the claim once the real scheduler has allocated it."""
    name = claim["metadata"]["name"]
    kube.create(RESOURCE_CLAIMS, claim, namespace=namespace)
    kube.create(PODS, pod_body(name=pod, node=node, claims={"dev": name}), namespace=namespace)
    return wait_object(
        kube,
        RESOURCE_CLAIMS,
        name,
        namespace=namespace,
        predicate=lambda c: bool(c.get("status", {}).get("reservedFor")),
        what="allocated and reserved",
    )
