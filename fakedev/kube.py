"""The fake driver's only way to the API server: claims, claim status, ResourceSlices, the Node.

kubeclient errors are translated here: conflicts and unavailability become :class:`RetryableKubeError`, the rest
:class:`KubeApiError`, both carrying the HTTP status.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fakedev.errors import KubeApiError, RetryableKubeError
from kubeclient import ApiError, JsonObj, KubeClient
from kubeclient.resources import NODES, RESOURCE_CLAIMS, RESOURCE_SLICES

NOT_FOUND: Final = 404


@contextlib.contextmanager
def _translated(what: str) -> Iterator[None]:
    try:
        yield
    except ApiError as exc:
        cls = RetryableKubeError if exc.retryable else KubeApiError
        raise cls(f"{what}: {exc}", status=exc.status) from exc


@dataclass(frozen=True, kw_only=True)
class DriverApi:
    client: KubeClient
    driver: str
    node_name: str

    @property
    def field_manager(self) -> str:
        return f"fakedev/{self.driver}"

    def get_claim(self, *, namespace: str, name: str) -> JsonObj:
        with _translated(f"GET resourceclaim {namespace}/{name}"):
            return self.client.get(RESOURCE_CLAIMS, name, namespace=namespace)

    def apply_claim_status(self, *, namespace: str, name: str, uid: str, devices: Sequence[JsonObj]) -> None:
        """Own exactly ``devices`` in ``status.devices`` (server-side apply; an empty list drops our entries)."""
        body: dict[str, Any] = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "status": {"devices": list(devices)},
        }
        with _translated(f"apply status of resourceclaim {namespace}/{name}"):
            self.client.apply(
                RESOURCE_CLAIMS, body, namespace=namespace, subresource="status", field_manager=self.field_manager
            )

    def node_owner(self) -> JsonObj | None:
        """An owner reference to our Node, so slices go away with it; None when the Node does not exist."""
        with _translated(f"GET node {self.node_name}"):
            node = self.client.get_or_none(NODES, self.node_name)
        if node is None:
            return None
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "name": self.node_name,
            "uid": node["metadata"]["uid"],
            "controller": True,
        }

    def list_slices(self) -> list[JsonObj]:
        selector = f"spec.nodeName={self.node_name},spec.driver={self.driver}"
        with _translated("list resourceslices"):
            return self.client.list(RESOURCE_SLICES, field_selector=selector)

    def create_slice(self, body: JsonObj) -> JsonObj:
        with _translated(f"create resourceslice {body['metadata']['name']}"):
            return self.client.create(RESOURCE_SLICES, body)

    def replace_slice(self, body: JsonObj) -> JsonObj:
        with _translated(f"update resourceslice {body['metadata']['name']}"):
            return self.client.replace(RESOURCE_SLICES, body)

    def delete_slice(self, name: str) -> None:
        with _translated(f"delete resourceslice {name}"):
            self.client.delete(RESOURCE_SLICES, name)
