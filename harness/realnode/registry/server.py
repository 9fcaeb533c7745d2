"""The HTTP side of the node's registry: the read-only part of the OCI distribution API, plus one admin route.

Routes (``ns`` is the registry host containerd was asked for; without it, the request's own Host):

- ``GET /v2/``: 200, the API version header (what a client probes first);
- ``HEAD``/``GET /v2/<repository>/manifests/<tag or digest>?ns=<host>``: the manifest, with its media type,
  length and digest;
- ``HEAD``/``GET /v2/<repository>/blobs/<digest>?ns=<host>``: a blob of that repository's archive, streamed;
- ``POST /fakedev/images`` with ``{"name": N, "archive": PATH}`` and ``Authorization: Bearer <token>``: serve the
  OCI layout at PATH as N from now on (the answer comes once it is served, so a pull right after it finds it). The
  token is the one the registry was started with (``$FAKEDEV_REGISTRY_TOKEN``, which only its starter knows): other
  local users must not make a root process read files of their choosing. Without a token the route is off.

An image the node does not have gets 403 ``DENIED`` whose message names the images it has, for HEAD and GET: the
error text containerd makes of it ends up in the kubelet's ``Failed`` event (a 404's body is dropped by containerd's
resolver; see docs/real-node.md). Everything else that is not a GET or HEAD gets 405: nothing can be pushed.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Final
from urllib.parse import parse_qs, urlsplit

from harness.errors import RegistryError
from harness.realnode.registry.archive import Descriptor, OciArchive, load_archive
from harness.realnode.registry.names import (
    ImageRule,
    denial_message,
    find_rule,
    parse_image_name,
    requested_name,
    rules_for_repository,
)

log = logging.getLogger("harness.realnode.registry")

ADMIN_TOKEN_ENV: Final = "FAKEDEV_REGISTRY_TOKEN"
API_VERSION_HEADER: Final = ("Docker-Distribution-API-Version", "registry/2.0")
ADMIN_PATH: Final = "/fakedev/images"
DENIED_STATUS: Final = 403
_ROUTE: Final = re.compile(r"/v2/(?P<repository>.+)/(?P<kind>manifests|blobs)/(?P<reference>[^/]+)")
_MAX_ADMIN_BODY: Final = 64 << 10


@dataclass(frozen=True, kw_only=True)
class Catalog:
    """One consistent view of what is served: the rules in order, each one's archive and root manifest."""

    rules: tuple[ImageRule, ...]
    archives: Mapping[Path, OciArchive]
    roots: Mapping[ImageRule, Descriptor]
    manifests: Mapping[Path, frozenset[str]]
    """Archive → the digests of its manifests (what a by-digest request may name)."""


def build_catalog(rules: Sequence[ImageRule], *, loaded: Mapping[Path, OciArchive] | None = None) -> Catalog:
    """Load every archive the rules name (reusing ``loaded`` ones) and pick each rule's root manifest."""
    archives: dict[Path, OciArchive] = {}
    for rule in rules:
        if rule.archive not in archives:
            archives[rule.archive] = (loaded or {}).get(rule.archive) or load_archive(rule.archive)
    return Catalog(
        rules=tuple(rules),
        archives=archives,
        roots={rule: archives[rule.archive].root_for(rule.name) for rule in rules},
        manifests={path: frozenset(a.manifests) for path, a in archives.items()},
    )


class Images:
    """The current catalog; ``add`` swaps in a new one, so a request sees either all of an addition or none."""

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog
        self._lock = threading.Lock()

    @property
    def catalog(self) -> Catalog:
        return self._catalog

    def add(self, *, name: str, archive: Path) -> tuple[ImageRule, Descriptor]:
        """Serve ``archive`` as ``name`` (a later rule for the same name and tag replaces an earlier one)."""
        try:
            parsed = parse_image_name(name, any_tag=True)
        except ValueError as exc:
            raise RegistryError(str(exc)) from exc
        rule = ImageRule(name=parsed, archive=archive.resolve())
        with self._lock:
            old = self._catalog
            # The archive is read again: a file rewritten under the same path must not be served from stale offsets.
            fresh = {p: a for p, a in old.archives.items() if p != rule.archive}
            kept = [r for r in old.rules if r.name != parsed]
            catalog = build_catalog([*kept, rule], loaded=fresh)
            self._catalog = catalog
        return rule, catalog.roots[rule]


def _error_body(code: str, message: str) -> bytes:
    return json.dumps({"errors": [{"code": code, "message": message}]}).encode()


class RegistryHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fakedev-registry"
    images: Images  # these two are set on the subclass made per server
    admin_token: str | None

    # -- plumbing ------------------------------------------------------------------------------------------------

    def log_message(self, format: str, *args: object) -> None:
        """http.server's own lines (malformed requests) go to the same log as ours."""
        log.info("%s %s", self.client_address[0], format % args)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """One line per request, written by :meth:`_reply` (which knows what was served)."""

    def _reply(
        self, status: int, *, body: bytes = b"", headers: Mapping[str, str] | None = None, note: str = ""
    ) -> None:
        # The line goes out before the answer, so a client that saw the answer finds it in the log.
        self._log(status, len(body), note)
        self._start(status, length=len(body), headers={"Content-Type": "application/json", **(headers or {})})
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _start(self, status: int, *, length: int, headers: Mapping[str, str]) -> None:
        self.send_response(status)
        self.send_header(*API_VERSION_HEADER)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def _log(self, status: int, length: int, note: str) -> None:
        log.info(
            "%s %s %s %d %d%s",
            self.client_address[0],
            self.command,
            self.path,
            status,
            length,
            f" {note}" if note else "",
        )

    def _error(self, status: int, code: str, message: str) -> None:
        self._reply(status, body=_error_body(code, message), note=message)

    # -- routes --------------------------------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._read_route()

    def do_HEAD(self) -> None:
        self._read_route()

    def do_POST(self) -> None:
        if urlsplit(self.path).path != ADMIN_PATH or self.admin_token is None:
            self._read_only()
            return
        given = self.headers.get("Authorization") or ""
        if not hmac.compare_digest(given.encode(), f"Bearer {self.admin_token}".encode()):
            self._drain()
            self._error(401, "UNAUTHORIZED", f"fakedev: {ADMIN_PATH} needs the registry's token")
            return
        self._admin_add()

    def do_PUT(self) -> None:
        self._read_only()

    def do_PATCH(self) -> None:
        self._read_only()

    def do_DELETE(self) -> None:
        self._read_only()

    def _read_only(self) -> None:
        self._drain()
        self._error(405, "UNSUPPORTED", "fakedev: this registry is read-only")

    def _drain(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if 0 < length <= _MAX_ADMIN_BODY:
            self.rfile.read(length)
        elif length:
            self.close_connection = True

    def _read_route(self) -> None:
        url = urlsplit(self.path)
        if url.path in ("/v2", "/v2/"):
            self._reply(200, body=b"{}")
            return
        match = _ROUTE.fullmatch(url.path)
        if match is None:
            self._error(404, "NOT_FOUND", f"fakedev: no such route {url.path}")
            return
        query = parse_qs(url.query)
        host = (query.get("ns") or [self.headers.get("Host") or ""])[0]
        repository, reference = match["repository"], match["reference"]
        if match["kind"] == "manifests":
            self._manifest(host=host, repository=repository, reference=reference)
        else:
            self._blob(host=host, repository=repository, digest=reference)

    def _deny(self, *, catalog: Catalog, host: str, repository: str, reference: str) -> None:
        wanted = requested_name(host=host, repository=repository, reference=reference)
        self._error(DENIED_STATUS, "DENIED", denial_message(catalog.rules, requested=wanted))

    def _manifest(self, *, host: str, repository: str, reference: str) -> None:
        catalog = self.images.catalog
        rule = find_rule(
            catalog.rules, host=host, repository=repository, reference=reference, manifests=catalog.manifests
        )
        if rule is None:
            self._deny(catalog=catalog, host=host, repository=repository, reference=reference)
            return
        archive = catalog.archives[rule.archive]
        root = catalog.roots[rule]
        # find_rule answers a digest only with an archive holding that manifest; a tag gets the rule's root.
        digest = reference if reference in archive.manifests else root.digest
        body = archive.read(digest)
        headers = {"Content-Type": archive.manifests[digest], "Docker-Content-Digest": digest}
        self._reply(200, body=body, headers=headers, note=f"{rule.name} {archive.path.name}")

    def _blob(self, *, host: str, repository: str, digest: str) -> None:
        catalog = self.images.catalog
        rules = rules_for_repository(catalog.rules, host=host, repository=repository)
        if not rules:
            self._deny(catalog=catalog, host=host, repository=repository, reference=digest)
            return
        archive = next((a for r in rules if (a := catalog.archives[r.archive]).size(digest) is not None), None)
        if archive is None:
            self._error(404, "BLOB_UNKNOWN", f"fakedev: no blob {digest} in {host}/{repository}")
            return
        size = archive.size(digest) or 0
        headers = {"Content-Type": "application/octet-stream", "Docker-Content-Digest": digest}
        self._log(200, size, archive.path.name)
        self._start(200, length=size, headers=headers)
        if self.command != "HEAD":
            archive.stream(digest, out=self.wfile)

    def _admin_add(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= _MAX_ADMIN_BODY:
            self.close_connection = True
            self._error(400, "INVALID", f"fakedev: {ADMIN_PATH} takes a JSON body of at most {_MAX_ADMIN_BODY} bytes")
            return
        try:
            request = json.loads(self.rfile.read(length))
            name, archive = request["name"], request["archive"]
            if not (isinstance(name, str) and isinstance(archive, str)):
                raise TypeError("name and archive must be strings")
        except (ValueError, KeyError, TypeError) as exc:
            self._error(400, "INVALID", f"fakedev: {ADMIN_PATH} takes {{'name': N, 'archive': PATH}} ({exc})")
            return
        try:
            rule, root = self.images.add(name=name, archive=Path(archive))
        except RegistryError as exc:
            self._error(400, "INVALID", f"fakedev: cannot serve {archive} as {name}: {exc}")
            return
        answer = json.dumps({"name": str(rule.name), "archive": str(rule.archive), "manifest": root.digest})
        self._reply(200, body=answer.encode(), note=f"added {rule.name} from {rule.archive}")


def make_server(*, host: str, port: int, images: Images, admin_token: str | None) -> ThreadingHTTPServer:
    """A server bound to ``host:port`` (port 0: a free one) serving ``images``, taking additions from whoever
    presents ``admin_token`` (None: from nobody); the caller runs serve_forever."""
    handler = type("BoundRegistryHandler", (RegistryHandler,), {"images": images, "admin_token": admin_token})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server
