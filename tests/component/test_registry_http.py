"""The node registry over real HTTP on 127.0.0.1: the distribution API routes, the denial for unknown images, adding
an archive at run time, and the process the real node starts (``start_registry``)."""

from __future__ import annotations

import gzip
import hashlib
import http.client
import json
import tarfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.errors import RegistryError
from harness.procs import run_dir
from harness.realnode.images import write_image
from harness.realnode.registry.archive import load_archive
from harness.realnode.registry.control import start_registry, write_registry_hosts
from harness.realnode.registry.names import node_rules
from harness.realnode.registry.server import Images, build_catalog, make_server

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
API_HEADER = "Docker-Distribution-API-Version"
TOKEN = "test-token"


@dataclass(frozen=True, kw_only=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> object:
        return json.loads(self.body)


@dataclass(frozen=True, kw_only=True)
class Registry:
    port: int
    busybox: Path
    pause: Path
    tmp: Path

    def request(
        self, method: str, path: str, *, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> Answer:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return Answer(status=response.status, headers=dict(response.getheaders()), body=response.read())
        finally:
            connection.close()

    def add(self, name: str, archive: Path, *, token: str = TOKEN) -> Answer:
        body = json.dumps({"name": name, "archive": str(archive)}).encode()
        return self.request("POST", "/fakedev/images", body=body, headers={"Authorization": f"Bearer {token}"})


def _image(tmp: Path, *, name: str, text: str) -> Path:
    root = tmp / f"root-{text}"
    root.mkdir()
    (root / "hello").write_text(text)
    return write_image(name=name, root=root, command=["/hello"], destination=tmp / f"{text}.tar")


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    busybox = _image(tmp_path, name="fakedev.local/busybox:latest", text="busybox")
    pause = _image(tmp_path, name="fakedev.local/pause:v1", text="pause")
    images = Images(build_catalog(node_rules(busybox=busybox, pause=pause)))
    server: ThreadingHTTPServer = make_server(host="127.0.0.1", port=0, images=images, admin_token=TOKEN)
    thread = threading.Thread(target=server.serve_forever, name="registry", daemon=True)
    thread.start()
    try:
        yield Registry(port=server.server_address[1], busybox=busybox, pause=pause, tmp=tmp_path)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_version_probe(registry: Registry) -> None:
    answer = registry.request("GET", "/v2/")
    assert (answer.status, answer.headers[API_HEADER], answer.json()) == (200, "registry/2.0", {})


@pytest.mark.parametrize(
    "path",
    [
        "/v2/library/busybox/manifests/1.36?ns=docker.io",
        "/v2/library/busybox/manifests/latest?ns=docker.io",
        "/v2/busybox/manifests/latest?ns=fakedev.local",
        "/v2/pause/manifests/v1?ns=fakedev.local",
    ],
    ids=["busybox-tag", "busybox-latest", "fakedev-busybox", "pause"],
)
def test_manifest_by_tag(registry: Registry, path: str) -> None:
    got = registry.request("GET", path)
    assert got.status == 200
    assert got.headers["Content-Type"] == MANIFEST_TYPE
    assert got.headers["Docker-Content-Digest"] == _sha256(got.body)
    assert int(got.headers["Content-Length"]) == len(got.body)
    head = registry.request("HEAD", path)
    assert (head.status, head.body) == (200, b"")
    assert head.headers["Docker-Content-Digest"] == got.headers["Docker-Content-Digest"]
    assert head.headers["Content-Length"] == got.headers["Content-Length"]


def test_every_busybox_name_serves_the_busybox_archive_and_pause_its_own(registry: Registry) -> None:
    busybox = registry.request("GET", "/v2/library/busybox/manifests/1.36?ns=docker.io")
    pause = registry.request("GET", "/v2/pause/manifests/v1?ns=fakedev.local")
    assert busybox.headers["Docker-Content-Digest"] in load_archive(registry.busybox).manifests
    assert pause.headers["Docker-Content-Digest"] in load_archive(registry.pause).manifests
    assert busybox.body != pause.body


def test_manifest_and_blobs_by_digest(registry: Registry) -> None:
    tagged = registry.request("GET", "/v2/library/busybox/manifests/1.36?ns=docker.io")
    digest = tagged.headers["Docker-Content-Digest"]
    by_digest = registry.request("GET", f"/v2/library/busybox/manifests/{digest}?ns=docker.io")
    assert (by_digest.status, by_digest.body) == (200, tagged.body)
    manifest = json.loads(tagged.body)
    for part in [manifest["config"], *manifest["layers"]]:
        blob = registry.request("GET", f"/v2/library/busybox/blobs/{part['digest']}?ns=docker.io")
        assert blob.status == 200
        assert (_sha256(blob.body), len(blob.body)) == (part["digest"], part["size"])
        assert blob.headers["Docker-Content-Digest"] == part["digest"]
        assert blob.headers["Content-Type"] == "application/octet-stream"
    layer = registry.request("GET", f"/v2/library/busybox/blobs/{manifest['layers'][0]['digest']}?ns=docker.io")
    assert b"busybox" in gzip.decompress(layer.body)


@pytest.mark.parametrize(
    ("path", "named"),
    [
        ("/v2/library/nginx/manifests/1.27?ns=docker.io", "docker.io/library/nginx:1.27"),
        ("/v2/pause/manifests/3.10?ns=registry.k8s.io", "registry.k8s.io/pause:3.10"),
        ("/v2/pause/manifests/v2?ns=fakedev.local", "fakedev.local/pause:v2"),
        ("/v2/library/nginx/blobs/sha256:" + "0" * 64 + "?ns=docker.io", "docker.io/library/nginx@sha256:" + "0" * 64),
    ],
    ids=["unknown-repository", "upstream-pause", "unknown-tag", "blob-of-unknown-repository"],
)
def test_unknown_images_are_denied_naming_the_available_ones(registry: Registry, path: str, named: str) -> None:
    get = registry.request("GET", path)
    assert get.status == 403
    assert get.json() == {
        "errors": [
            {
                "code": "DENIED",
                "message": f"fakedev: {named} is not on this node; images available: busybox:<any tag>, "
                "fakedev.local/busybox:<any tag>, fakedev.local/pause:v1",
            }
        ]
    }
    head = registry.request("HEAD", path)
    assert (head.status, head.body, head.headers["Content-Length"]) == (403, b"", str(len(get.body)))


def test_a_blob_missing_from_a_known_repository_is_not_found(registry: Registry) -> None:
    answer = registry.request("GET", "/v2/library/busybox/blobs/sha256:" + "0" * 64 + "?ns=docker.io")
    assert answer.status == 404
    assert answer.json() == {
        "errors": [
            {"code": "BLOB_UNKNOWN", "message": "fakedev: no blob sha256:" + "0" * 64 + " in docker.io/library/busybox"}
        ]
    }


@pytest.mark.parametrize("method", ["PUT", "POST", "PATCH", "DELETE"])
def test_the_registry_is_read_only(registry: Registry, method: str) -> None:
    answer = registry.request(method, "/v2/library/busybox/manifests/1.36?ns=docker.io", body=b"{}")
    assert answer.status == 405
    assert answer.json() == {"errors": [{"code": "UNSUPPORTED", "message": "fakedev: this registry is read-only"}]}


def test_an_added_archive_is_served_by_its_exact_name_only(registry: Registry) -> None:
    tool = _image(registry.tmp, name="whatever:1", text="tool")
    added = registry.add("example/tool:2", tool)
    assert added.status == 200, added.body
    assert added.json() == {
        "name": "docker.io/example/tool:2",
        "archive": str(tool),
        "manifest": next(iter(load_archive(tool).manifests)),
    }
    assert registry.request("GET", "/v2/example/tool/manifests/2?ns=docker.io").status == 200
    other_tag = registry.request("GET", "/v2/example/tool/manifests/3?ns=docker.io")
    assert other_tag.status == 403
    assert b"images available: busybox:<any tag>, fakedev.local/busybox:<any tag>, fakedev.local/pause:v1, " \
        b"example/tool:2" in other_tag.body  # fmt: skip


def test_adding_needs_the_token(registry: Registry) -> None:
    answer = registry.add("example/tool:2", registry.busybox, token="guess")
    assert answer.status == 401
    assert answer.json() == {
        "errors": [{"code": "UNAUTHORIZED", "message": "fakedev: /fakedev/images needs the registry's token"}]
    }
    assert registry.request("GET", "/v2/example/tool/manifests/2?ns=docker.io").status == 403


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (lambda p: gzip.compress(p.read_bytes()), "not a readable plain (uncompressed) tar"),
        (lambda p: b"not a tar at all" * 100, "not a readable plain (uncompressed) tar"),
    ],
    ids=["compressed", "garbage"],
)
def test_an_unusable_archive_is_refused_with_the_reason(
    registry: Registry, content: Callable[[Path], bytes], reason: str
) -> None:
    bad = registry.tmp / "bad.tar"
    bad.write_bytes(content(registry.busybox))
    answer = registry.add("example/bad:1", bad)
    assert answer.status == 400
    body = answer.json()
    assert isinstance(body, dict)
    assert body["errors"][0]["message"].startswith(f"fakedev: cannot serve {bad} as example/bad:1: {bad}: {reason}")


def test_an_archive_missing_a_blob_is_refused(tmp_path: Path) -> None:
    whole = _image(tmp_path, name="x:1", text="x")
    partial = tmp_path / "partial.tar"
    archive = load_archive(whole)
    (manifest_digest,) = archive.manifests
    layer = json.loads(archive.read(manifest_digest))["layers"][0]["digest"]
    with tarfile.open(whole) as source, tarfile.open(partial, "w") as target:
        for member in source.getmembers():
            if member.name != "blobs/" + layer.replace(":", "/"):
                target.addfile(member, source.extractfile(member))
    with pytest.raises(RegistryError, match=f"names blob {layer}, which {partial} lacks"):
        load_archive(partial)


def test_the_registry_process(tmp_path: Path) -> None:
    busybox = _image(tmp_path, name="fakedev.local/busybox:latest", text="busybox")
    pause = _image(tmp_path, name="fakedev.local/pause:v1", text="pause")
    with run_dir(purpose="registry-test", base=tmp_path) as run:
        registry = start_registry(run=run, rules=node_rules(busybox=busybox, pause=pause))
        try:
            assert registry.server == f"http://127.0.0.1:{registry.port}"
            written = write_registry_hosts(directory=run.path / "certs.d", server=registry.server)
            assert [p.relative_to(run.path).as_posix() for p in written] == ["certs.d/_default/hosts.toml"]
            assert f'server = "{registry.server}"' in written[0].read_text()
            assert registry.add(name="quay.io/example/tool:2", archive=busybox) == "quay.io/example/tool:2"
            assert registry.add_archive(pause) == ("fakedev.local/pause:v1",)
            with pytest.raises(RegistryError, match="not a readable plain"):
                registry.add(name="quay.io/example/bad:1", archive=tmp_path / "missing.tar")
            connection = http.client.HTTPConnection("127.0.0.1", registry.port, timeout=10)
            connection.request("HEAD", "/v2/example/tool/manifests/2?ns=quay.io")
            assert connection.getresponse().status == 200
            connection.close()
        finally:
            code = registry.stop()
        assert (code, registry.process.alive()) == (0, False)
        log = registry.process.log_path.read_text().splitlines()
        assert f"listening on 127.0.0.1:{registry.port}" in log
        assert any(line.endswith("200 2") and "GET /v2/" in line for line in log)
        assert any("HEAD /v2/example/tool/manifests/2?ns=quay.io 200" in line for line in log)
        assert any("added quay.io/example/tool:2" in line for line in log)
