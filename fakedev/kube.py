"""The fake driver's only way to the API server: claims, claim status, ResourceSlices, the Node, DeviceFaults.

kubeclient errors are translated here: conflicts and unavailability become :class:`RetryableKubeError`, the rest
:class:`KubeApiError`, both carrying the HTTP status.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fakedev.errors import KubeApiError, RetryableKubeError
from kubeclient import ApiError, JsonObj, KubeClient, PendingGet
from kubeclient.resources import DEVICE_FAULTS, NODES, RESOURCE_CLAIMS, RESOURCE_SLICES

NOT_FOUND: Final = 404
CONFLICT: Final = 409
UNPROCESSABLE: Final = 422
CONFLICT_RETRIES: Final = 5


def _error(what: str, exc: ApiError) -> KubeApiError:
    cls = RetryableKubeError if exc.retryable else KubeApiError
    return cls(f"{what}: {exc}", status=exc.status)


@contextlib.contextmanager
def _translated(what: str) -> Iterator[None]:
    try:
        yield
    except ApiError as exc:
        raise _error(what, exc) from exc


@dataclass(frozen=True, kw_only=True)
class PendingClaim:
    """A claim GET on its way; call :meth:`result` or :meth:`abandon` exactly once."""

    pending: PendingGet
    what: str

    def result(self) -> JsonObj:
        with _translated(self.what):
            return self.pending.result()

    def abandon(self) -> None:
        self.pending.abandon()

    def drain(self) -> None:
        """Read and drop an answer nobody took (:meth:`kubeclient.PendingGet.drain`)."""
        self.pending.drain()


@dataclass(frozen=True, kw_only=True)
class DriverApi:
    client: KubeClient
    driver: str
    node_name: str

    @property
    def field_manager(self) -> str:
        return f"fakedev/{self.driver}"

    def get_claim_later(self, *, namespace: str, name: str) -> PendingClaim:
        """Send the claim's GET now; :meth:`PendingClaim.result` reads the answer (the caller works meanwhile)."""
        what = f"GET resourceclaim {namespace}/{name}"
        with _translated(what):
            return PendingClaim(pending=self.client.get_later(RESOURCE_CLAIMS, name, namespace=namespace), what=what)

    def read_ahead_claim(self, *, namespace: str, name: str) -> PendingClaim | None:
        """:meth:`get_claim_later` when a kept-alive connection is free, else None: the caller is the event loop,
        which must not wait for a connect and TLS handshake."""
        if not self.client.idle_connections():
            return None
        return self.get_claim_later(namespace=namespace, name=name)

    def list_claims_versioned(self) -> tuple[list[JsonObj], str]:
        """Every ResourceClaim of the cluster and the list's resourceVersion (to watch from)."""
        with _translated("list resourceclaims"):
            return self.client.list_versioned(RESOURCE_CLAIMS)

    def watch_claims(self, *, resource_version: str, timeout_seconds: int) -> Iterator[JsonObj]:
        """Watch events after ``resource_version`` until the server ends the stream (an ERROR event: list again)."""
        with _translated("watch resourceclaims"):
            yield from self.client.watch(
                RESOURCE_CLAIMS, resource_version=resource_version, timeout_seconds=timeout_seconds
            )

    def apply_claim_status(self, *, namespace: str, name: str, uid: str, devices: Sequence[JsonObj]) -> None:
        """Own exactly ``devices`` in ``status.devices`` (server-side apply; an empty list drops our entries).

        kube-apiserver v1.37.2 rejects this apply with 422 "status.allocation: ... field cannot be modified once set"
        when the allocation carries opaque config; then the entries are written by read-modify-write instead, which
        touches only this driver's entries and retries on conflicts.
        """
        body: dict[str, Any] = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "status": {"devices": list(devices)},
        }
        try:
            self.client.apply(
                RESOURCE_CLAIMS, body, namespace=namespace, subresource="status", field_manager=self.field_manager
            )
            return
        except ApiError as exc:
            if not (exc.status == UNPROCESSABLE and "status.allocation" in str(exc)):
                raise _error(f"apply status of resourceclaim {namespace}/{name}", exc) from exc
        self._update_claim_status(namespace=namespace, name=name, uid=uid, devices=devices)

    def _update_claim_status(self, *, namespace: str, name: str, uid: str, devices: Sequence[JsonObj]) -> None:
        what = f"update status of resourceclaim {namespace}/{name}"
        for _ in range(CONFLICT_RETRIES):
            try:
                claim = self.client.get(RESOURCE_CLAIMS, name, namespace=namespace)
                if claim["metadata"]["uid"] != uid:
                    raise KubeApiError(f"{what}: the claim was re-created (uid {claim['metadata']['uid']})", status=409)
                status = claim.setdefault("status", {})
                others = [d for d in status.get("devices") or [] if d.get("driver") != self.driver]
                status["devices"] = others + list(devices)
                if not status["devices"]:
                    del status["devices"]
                self.client.replace(RESOURCE_CLAIMS, claim, namespace=namespace, subresource="status")
                return
            except ApiError as exc:
                if exc.status != CONFLICT:
                    raise _error(what, exc) from exc
        raise RetryableKubeError(f"{what}: still conflicting after {CONFLICT_RETRIES} attempts", status=CONFLICT)

    def list_claims(self) -> list[JsonObj]:
        """Every ResourceClaim in the cluster (a binding-condition driver watches allocations it must attach)."""
        try:
            return self.client.list(RESOURCE_CLAIMS)
        except ApiError as exc:
            raise _error("list resourceclaims", exc) from exc

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

    def create_slice(self, body: JsonObj) -> None:
        # The answer echoes the slice with its managedFields; parsing it was most of a fleet's publishing CPU.
        with _translated(f"create resourceslice {body['metadata']['name']}"):
            self.client.create(RESOURCE_SLICES, body, decode=False)

    def replace_slice(self, body: JsonObj) -> None:
        with _translated(f"update resourceslice {body['metadata']['name']}"):
            self.client.replace(RESOURCE_SLICES, body, decode=False)

    def delete_slice(self, name: str) -> None:
        with _translated(f"delete resourceslice {name}"):
            self.client.delete(RESOURCE_SLICES, name)


@dataclass(frozen=True, kw_only=True)
class DeviceFaultApi:
    """DeviceFault objects: the plugin's list, watch and status writes, and the create/delete of ``fakedev fault``.

    Faults are selected by ``spec.nodeName`` and ``spec.driver``, the CRD's selectable fields, so a plugin hears of
    its own faults only (and of a fault whose fields change away from it, as a deletion)."""

    client: KubeClient

    @staticmethod
    def selector(*, node_name: str | None, driver: str | None) -> str | None:
        parts = [f"spec.nodeName={node_name}"] if node_name else []
        parts += [f"spec.driver={driver}"] if driver else []
        return ",".join(parts) or None

    def list(self, *, node_name: str | None = None, driver: str | None = None) -> tuple[list[JsonObj], str]:
        """The matching objects and the list's resourceVersion (to watch from)."""
        with _translated("list devicefaults"):
            return self.client.list_versioned(
                DEVICE_FAULTS, field_selector=self.selector(node_name=node_name, driver=driver)
            )

    def watch(self, *, node_name: str, driver: str, resource_version: str, timeout_seconds: int) -> Iterator[JsonObj]:
        """Watch events after ``resource_version`` until the server ends the stream (an ERROR event: list again)."""
        with _translated("watch devicefaults"):
            yield from self.client.watch(
                DEVICE_FAULTS,
                resource_version=resource_version,
                field_selector=self.selector(node_name=node_name, driver=driver),
                timeout_seconds=timeout_seconds,
            )

    def write_status(self, *, name: str, uid: str, status: Mapping[str, object]) -> None:
        """Replace the status of the object ``name`` if it still is ``uid`` (a merge patch on the status
        subresource: the fields absent from ``status`` are removed)."""
        fields = ("phase", "observedGeneration", "appliedTime", "clearedTime", "error")
        body = {"metadata": {"uid": uid}, "status": {key: status.get(key) for key in fields}}
        with _translated(f"update status of devicefault {name}"):
            self.client.patch(DEVICE_FAULTS, name, body, subresource="status")

    def create(self, body: JsonObj) -> JsonObj:
        with _translated("create devicefault"):
            return self.client.create(DEVICE_FAULTS, body)

    def delete(self, name: str) -> None:
        with _translated(f"delete devicefault {name}"):
            self.client.delete(DEVICE_FAULTS, name)


def get_node_labels(client: KubeClient, *, node_name: str) -> dict[str, str]:
    """The Node's labels (a plugin choosing its profile from one); a missing Node is a :class:`KubeApiError` 404."""
    with _translated(f"GET node {node_name}"):
        node = client.get(NODES, node_name)
    labels = node.get("metadata", {}).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()}
