"""The API resources the harness touches, addressed by group/version/plural."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, kw_only=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, *, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


NAMESPACES: Final = Resource(group="", version="v1", plural="namespaces", kind="Namespace", namespaced=False)
NODES: Final = Resource(group="", version="v1", plural="nodes", kind="Node", namespaced=False)
PODS: Final = Resource(group="", version="v1", plural="pods", kind="Pod", namespaced=True)
EVENTS: Final = Resource(group="", version="v1", plural="events", kind="Event", namespaced=True)
LEASES: Final = Resource(group="coordination.k8s.io", version="v1", plural="leases", kind="Lease", namespaced=True)
DAEMON_SETS: Final = Resource(group="apps", version="v1", plural="daemonsets", kind="DaemonSet", namespaced=True)
STATEFUL_SETS: Final = Resource(group="apps", version="v1", plural="statefulsets", kind="StatefulSet", namespaced=True)
DEVICE_CLASSES: Final = Resource(
    group="resource.k8s.io", version="v1", plural="deviceclasses", kind="DeviceClass", namespaced=False
)
RESOURCE_CLAIMS: Final = Resource(
    group="resource.k8s.io", version="v1", plural="resourceclaims", kind="ResourceClaim", namespaced=True
)
RESOURCE_CLAIM_TEMPLATES: Final = Resource(
    group="resource.k8s.io",
    version="v1",
    plural="resourceclaimtemplates",
    kind="ResourceClaimTemplate",
    namespaced=True,
)
RESOURCE_SLICES: Final = Resource(
    group="resource.k8s.io", version="v1", plural="resourceslices", kind="ResourceSlice", namespaced=False
)
DEVICE_TAINT_RULES: Final = Resource(
    group="resource.k8s.io", version="v1", plural="devicetaintrules", kind="DeviceTaintRule", namespaced=False
)
RESOURCE_POOL_STATUS_REQUESTS: Final = Resource(
    group="resource.k8s.io",
    version="v1alpha3",
    plural="resourcepoolstatusrequests",
    kind="ResourcePoolStatusRequest",
    namespaced=False,
)

POD_GROUPS: Final = Resource(
    group="scheduling.k8s.io", version="v1beta1", plural="podgroups", kind="PodGroup", namespaced=True
)

DEVICE_FAULTS: Final = Resource(
    group="fakedev.io", version="v1alpha1", plural="devicefaults", kind="DeviceFault", namespaced=False
)
"""fakedev's own custom resource (deploy/helm/fakedev/crds/devicefaults.fakedev.io.yaml)."""
CUSTOM_RESOURCE_DEFINITIONS: Final = Resource(
    group="apiextensions.k8s.io",
    version="v1",
    plural="customresourcedefinitions",
    kind="CustomResourceDefinition",
    namespaced=False,
)

KNOWN: Final = (
    NAMESPACES,
    NODES,
    PODS,
    EVENTS,
    LEASES,
    DEVICE_CLASSES,
    RESOURCE_CLAIMS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_SLICES,
    DEVICE_TAINT_RULES,
    RESOURCE_POOL_STATUS_REQUESTS,
    POD_GROUPS,
    DEVICE_FAULTS,
    CUSTOM_RESOURCE_DEFINITIONS,
)


def resource_for(*, api_version: str, kind: str) -> Resource:
    """Look a manifest's apiVersion/kind up among the resources the harness knows."""
    for res in KNOWN:
        if res.api_version == api_version and res.kind == kind:
            return res
    raise KeyError(f"{api_version} {kind}")
