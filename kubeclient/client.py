"""A small, typed JSON client for the Kubernetes API (its own HTTP/1.1 connections underneath, urllib3 for watches).

Only this module and its transport (:mod:`kubeclient.transport`) talk HTTP to the API server. Objects stay raw
JSON (``dict``), so camelCase keys, new 1.37 fields and server-side apply work without a generated model in the way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import orjson
import urllib3

from kubeclient.errors import ApiError, ApiUnavailableError, ConflictError, OfficialLoaderNeededError, TransportError
from kubeclient.kubeconfig import read_kubeconfig
from kubeclient.resources import Resource
from kubeclient.transport import Connections, Exchange, make_tls_context

JsonObj = dict[str, Any]
PatchType = Literal["merge", "strategic", "json"]
_PATCH_CONTENT: Final[dict[str, str]] = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
}
FIELD_MANAGER: Final = "fakedev"
TOKEN_REREAD_SECONDS: Final = 60.0
"""How old a token read from ``token_file`` may get before it is read again (client-go waits a minute too)."""
IN_CLUSTER_TOKEN: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


@dataclass(frozen=True, kw_only=True)
class Credentials:
    """How to reach and authenticate to one API server."""

    server: str
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    token: str | None = None
    token_file: Path | None = None
    """A bound service-account token the kubelet rotates: read again every minute, never cached for good."""
    insecure: bool = False


def credentials_from_kubeconfig(path: Path, *, context: str | None = None) -> Credentials:
    """Read a kubeconfig: certificates, keys and tokens ourselves, exec plugins and auth providers with the official
    client's loader."""
    try:
        return Credentials(**read_kubeconfig(path, context=context))
    except OfficialLoaderNeededError:
        pass
    from kubernetes import config as kconfig
    from kubernetes.client import Configuration

    cfg = Configuration()
    try:
        kconfig.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(path), context=context, client_configuration=cfg
        )
    except Exception as exc:
        raise ApiError(f"cannot load kubeconfig {path}: {exc}", status=0) from exc
    return _credentials(cfg)


def credentials_in_cluster() -> Credentials:
    """The pod's service account, as a DaemonSet container sees it."""
    from kubernetes import config as kconfig
    from kubernetes.client import Configuration

    cfg = Configuration()
    try:
        kconfig.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    except Exception as exc:
        raise ApiError(f"no in-cluster configuration: {exc}", status=0) from exc
    return dataclasses.replace(_credentials(cfg), token_file=IN_CLUSTER_TOKEN)


def _credentials(cfg: Any) -> Credentials:
    token = cfg.api_key.get("authorization") if cfg.api_key else None
    return Credentials(
        server=cfg.host,
        ca_file=Path(cfg.ssl_ca_cert) if cfg.ssl_ca_cert else None,
        cert_file=Path(cfg.cert_file) if cfg.cert_file else None,
        key_file=Path(cfg.key_file) if cfg.key_file else None,
        token=token.removeprefix("Bearer ").strip() if token else None,
        insecure=not cfg.verify_ssl,
    )


class KubeClient:
    """CRUD, patch, server-side apply and watch on raw JSON objects."""

    def __init__(
        self,
        credentials: Credentials,
        *,
        timeout: float = 30.0,
        field_manager: str = FIELD_MANAGER,
        user_agent: str = "fakedev",
        connections: int = 8,
    ):
        """``connections``: kept-alive connections per server; a client shared by many threads wants one each."""
        self.credentials = credentials
        self.field_manager = field_manager
        self._timeout = timeout
        self._base = credentials.server.rstrip("/")
        self._connections = Connections(
            server=self._base,
            max_idle=connections,
            tls=make_tls_context(
                ca_file=str(credentials.ca_file) if credentials.ca_file else None,
                cert_file=str(credentials.cert_file) if credentials.cert_file else None,
                key_file=str(credentials.key_file) if credentials.key_file else None,
                insecure=credentials.insecure,
            )
            if self._base.startswith("https:")
            else None,
        )
        # Watches stream their answers: those stay on urllib3.
        self._pool = urllib3.PoolManager(
            num_pools=4,
            maxsize=connections,
            cert_reqs="CERT_NONE" if credentials.insecure else "CERT_REQUIRED",
            ca_certs=str(credentials.ca_file) if credentials.ca_file else None,
            cert_file=str(credentials.cert_file) if credentials.cert_file else None,
            key_file=str(credentials.key_file) if credentials.key_file else None,
            retries=False,
        )
        self._base_headers = {"Accept": "application/json", "User-Agent": user_agent}
        self._token = credentials.token
        self._token_read = time.monotonic()
        self._token_lock = threading.Lock()

    @property
    def _headers(self) -> dict[str, str]:
        headers = dict(self._base_headers)
        token = self._current_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _current_token(self) -> str | None:
        path = self.credentials.token_file
        if path is None:
            return self._token
        with self._token_lock:
            if self._token is None or time.monotonic() - self._token_read >= TOKEN_REREAD_SECONDS:
                try:
                    self._token = path.read_text().strip()
                except OSError as exc:
                    if self._token is None:
                        raise ApiError(f"cannot read the service-account token {path}: {exc}", status=0) from exc
                    # Keep the token we have: it is still valid for a while, and the next call tries again.
                self._token_read = time.monotonic()
            return self._token

    @classmethod
    def from_kubeconfig(cls, path: Path, *, context: str | None = None) -> KubeClient:
        return cls(credentials_from_kubeconfig(path, context=context))

    # -- transport ---------------------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
        timeout: float | None = None,
        decode: bool = True,
    ) -> JsonObj:
        """``decode=False``: a successful answer's body is not parsed and ``{}`` is returned (large objects the
        caller does not read back, such as the ResourceSlices a fleet of nodes publishes)."""
        exchange = self._begin(method, path, body=body, content_type=content_type, query=query, timeout=timeout)
        return self._conclude(exchange, method=method, path=path, decode=decode)

    def _begin(
        self,
        method: str,
        path: str,
        *,
        body: object,
        content_type: str,
        query: Mapping[str, str] | None,
        timeout: float | None,
    ) -> Exchange:
        target = path
        if query:
            target += "?" + urllib.parse.urlencode(query)
        headers = self._headers
        data: bytes | None = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = body if isinstance(body, bytes) else orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
        try:
            return self._connections.begin(method, target, body=data, headers=headers, timeout=timeout or self._timeout)
        except TransportError as exc:
            raise ApiUnavailableError(f"{method} {path}: API server unreachable: {exc}") from exc

    def _conclude(self, exchange: Exchange, *, method: str, path: str, decode: bool) -> JsonObj:
        try:
            resp = exchange.finish()
        except TransportError as exc:
            raise ApiUnavailableError(f"{method} {path}: API server unreachable: {exc}") from exc
        payload: JsonObj = {}
        if not decode and resp.status < 400:
            return payload
        if resp.body:
            try:
                payload = orjson.loads(resp.body)
            except ValueError:
                payload = {"message": resp.body.decode(errors="replace")}
        if resp.status >= 400:
            raise _error_for(method=method, path=path, status=resp.status, payload=payload)
        return payload

    def get_text(self, path: str, *, timeout: float | None = None) -> tuple[int, str]:
        """GET a non-JSON endpoint such as ``/readyz``; returns status and body, never raises on HTTP status."""
        status, body = self.get_bytes(path, timeout=timeout)
        return status, body.decode(errors="replace")

    def get_bytes(self, path: str, *, timeout: float | None = None) -> tuple[int, bytes]:
        """GET a binary endpoint such as ``/debug/pprof/profile``; never raises on HTTP status."""
        try:
            resp = self._pool.request("GET", self._base + path, headers=self._headers, timeout=timeout or 5.0)
        except urllib3.exceptions.HTTPError as exc:
            raise ApiUnavailableError(f"GET {path}: API server unreachable: {exc}") from exc
        return resp.status, resp.data

    # -- verbs ---------------------------------------------------------------------------------------------------

    def get(self, res: Resource, name: str, *, namespace: str | None = None, subresource: str | None = None) -> JsonObj:
        return self.request("GET", res.path(namespace=namespace, name=name, subresource=subresource))

    def idle_connections(self) -> int:
        """Kept-alive connections free now: a request sent on one costs no connect (nor TLS handshake)."""
        return self._connections.idle()

    def get_later(
        self, res: Resource, name: str, *, namespace: str | None = None, subresource: str | None = None
    ) -> PendingGet:
        """Send a GET now and read its answer later (:meth:`PendingGet.result`): the caller works while the API
        server answers."""
        path = res.path(namespace=namespace, name=name, subresource=subresource)
        exchange = self._begin("GET", path, body=None, content_type="", query=None, timeout=None)
        return PendingGet(client=self, exchange=exchange, path=path)

    def get_or_none(self, res: Resource, name: str, *, namespace: str | None = None) -> JsonObj | None:
        try:
            return self.get(res, name, namespace=namespace)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def list_versioned(
        self, res: Resource, *, namespace: str | None = None, field_selector: str | None = None
    ) -> tuple[list[JsonObj], str]:
        """The items and the list's resourceVersion, from which a watch sees every later change."""
        query = {"fieldSelector": field_selector} if field_selector else None
        answer = self.request("GET", res.path(namespace=namespace), query=query)
        items: list[JsonObj] = answer.get("items") or []
        return items, str((answer.get("metadata") or {}).get("resourceVersion", ""))

    def list(
        self,
        res: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[JsonObj]:
        query = {}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        items: list[JsonObj] = self.request("GET", res.path(namespace=namespace), query=query).get("items") or []
        return items

    def create(self, res: Resource, body: JsonObj, *, namespace: str | None = None, decode: bool = True) -> JsonObj:
        return self.request("POST", res.path(namespace=namespace), body=body, decode=decode)

    def replace(
        self,
        res: Resource,
        body: JsonObj,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        decode: bool = True,
    ) -> JsonObj:
        name = body["metadata"]["name"]
        return self.request(
            "PUT", res.path(namespace=namespace, name=name, subresource=subresource), body=body, decode=decode
        )

    def patch(
        self,
        res: Resource,
        name: str,
        body: object,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        patch_type: PatchType = "merge",
    ) -> JsonObj:
        return self.request(
            "PATCH",
            res.path(namespace=namespace, name=name, subresource=subresource),
            body=body,
            content_type=_PATCH_CONTENT[patch_type],
        )

    def apply(
        self,
        res: Resource,
        body: JsonObj,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool = True,
    ) -> JsonObj:
        """Server-side apply ``body`` (which carries apiVersion, kind and metadata.name)."""
        name = body["metadata"]["name"]
        query = {"fieldManager": field_manager or self.field_manager, "force": "true" if force else "false"}
        return self.request(
            "PATCH",
            res.path(namespace=namespace, name=name, subresource=subresource),
            body=body,
            content_type="application/apply-patch+yaml",
            query=query,
        )

    def delete(
        self,
        res: Resource,
        name: str,
        *,
        namespace: str | None = None,
        grace_seconds: int | None = None,
        missing_ok: bool = True,
    ) -> None:
        body = {"gracePeriodSeconds": grace_seconds} if grace_seconds is not None else None
        try:
            self.request("DELETE", res.path(namespace=namespace, name=name), body=body)
        except ApiError as exc:
            if not (missing_ok and exc.status == 404):
                raise

    def delete_collection(
        self, res: Resource, *, namespace: str | None = None, field_selector: str | None = None
    ) -> None:
        query = {"fieldSelector": field_selector} if field_selector else None
        self.request("DELETE", res.path(namespace=namespace), query=query)

    def watch(
        self,
        res: Resource,
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 60,
    ) -> Iterator[JsonObj]:
        """Yield watch events (``{"type": ..., "object": ...}``) until the server closes the stream."""
        query = {"watch": "1", "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout_seconds)}
        if resource_version:
            query["resourceVersion"] = resource_version
        if field_selector:
            query["fieldSelector"] = field_selector
        url = self._base + res.path(namespace=namespace) + "?" + urllib.parse.urlencode(query)
        try:
            resp = self._pool.request(
                "GET",
                url,
                headers=self._headers,
                preload_content=False,
                timeout=urllib3.Timeout(connect=5.0, read=timeout_seconds + 10.0),
            )
        except urllib3.exceptions.HTTPError as exc:
            raise ApiUnavailableError(f"watch {res.plural}: API server unreachable: {exc}") from exc
        try:
            if resp.status >= 400:
                payload = json.loads(resp.read() or b"{}")
                raise _error_for(
                    method="WATCH", path=res.path(namespace=namespace), status=resp.status, payload=payload
                )
            buffer = b""
            try:
                for chunk in resp.stream(65536):
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        if line.strip():
                            yield orjson.loads(line)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise ApiUnavailableError(f"watch {res.plural} broke: {exc}") from exc
        finally:
            resp.release_conn()

    def close(self) -> None:
        self._connections.close()
        self._pool.clear()


def _error_for(*, method: str, path: str, status: int, payload: JsonObj) -> ApiError:
    reason = str(payload.get("reason", ""))
    message = f"{method} {path}: {status} {reason}: {payload.get('message', '')}".strip()
    if status == 409:
        return ConflictError(message, status=status, reason=reason)
    if status in (429, 500, 502, 503, 504):
        return ApiUnavailableError(message, status=status, reason=reason)
    return ApiError(message, status=status, reason=reason)


@dataclass(kw_only=True)
class PendingGet:
    """Mutable on purpose: a GET sent by :meth:`KubeClient.get_later`. Its answer is read once, by :meth:`result`,
    or given up (:meth:`abandon`, :meth:`drain`); until then a connection is busy with it."""

    client: KubeClient
    exchange: Exchange
    path: str
    settled: bool = False

    def result(self) -> JsonObj:
        """The object, or the ApiError the answer means (as :meth:`KubeClient.get` raises)."""
        if self.settled:
            raise RuntimeError(f"GET {self.path}: the answer was taken already")
        self.settled = True
        return self.client._conclude(self.exchange, method="GET", path=self.path, decode=True)

    def abandon(self) -> None:
        """Give up without waiting: the connection is closed."""
        if not self.settled:
            self.settled = True
            self.exchange.abandon()

    def drain(self) -> None:
        """Read and drop the answer if nobody took it, so the connection is kept for reuse; errors are dropped too."""
        if not self.settled:
            with contextlib.suppress(ApiError):
                self.result()
