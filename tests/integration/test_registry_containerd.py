"""The node's registry behind a real containerd 2.4: images by the names users write are pulled from it through the CRI
image service (the kubelet's path, with the ``config_path`` hosts directory) and through ``ctr --hosts-dir``; an
image the node does not have fails with the registry's message in containerd's error.

containerd runs in a private mount namespace (unpacking mounts the snapshot) with its config from the real node's
renderer plus the registry lines, as the real node will run it; nothing here needs a control plane or a kubelet.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from harness.cluster.build import CONTAINERD, PAUSE, cached_binaries, default_cache_root
from harness.procs import Process, open_run_dir, start_process, wait_for
from harness.realnode.config import NodeLayout, render_containerd_config
from harness.realnode.images import ensure_images
from harness.realnode.registry.control import RegistryProcess, start_registry, write_registry_hosts
from harness.realnode.registry.names import node_rules

pytestmark = [pytest.mark.privileged]

PULL_METHOD = "/runtime.v1.ImageService/PullImage"
UNKNOWN = "nginx:1.27"
UNKNOWN_MESSAGE = (
    "fakedev: docker.io/library/nginx:1.27 is not on this node; images available: busybox:<any tag>, "
    "fakedev.local/busybox:<any tag>, fakedev.local/pause:v1"
)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (the CRI messages used here carry nothing else)."""
    key, length, out = (number << 3) | 2, len(payload), bytearray()
    out.append(key)
    while True:
        byte, length = length & 0x7F, length >> 7
        out.append(byte | (0x80 if length else 0))
        if not length:
            return bytes(out) + payload


def _first_string(message: bytes) -> str:
    """Field 1 of a CRI answer (PullImageResponse.image_ref), a short string."""
    assert message[0] == 0x0A and message[1] < 0x80, message
    return message[2 : 2 + message[1]].decode()


@dataclass(frozen=True, kw_only=True)
class Node:
    containerd: Process
    socket: Path
    ctr: Path
    hosts_dir: Path
    registry: RegistryProcess

    def cri_pull(self, image: str) -> str:
        """PullImage over CRI, as the kubelet asks for an image (the name as the pod spec writes it)."""
        request = _field(1, _field(1, image.encode()))
        with grpc.insecure_channel(f"unix://{self.socket}") as channel:
            call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
                PULL_METHOD, request_serializer=None, response_deserializer=None
            )
            answer: bytes = call(request, timeout=120)
        return _first_string(answer)

    def run_ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [str(self.ctr), "--address", str(self.socket), "--namespace", "k8s.io", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)

    def image_names(self) -> set[str]:
        done = self.run_ctr("images", "list", "--quiet")
        assert done.returncode == 0, done.stderr
        return set(done.stdout.split())


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    binaries = cached_binaries(groups=(CONTAINERD, PAUSE))
    pause, busybox = ensure_images(pause_binary=binaries.path("pause"), cache_root=default_cache_root())
    run = open_run_dir(purpose="registry-ctr")
    layout = NodeLayout(root=run.path, shim_sockets=Path(f"/tmp/fd-shim-{run.run_id}"))
    hosts_dir = layout.registry_hosts
    processes: list[Process] = []
    try:
        registry = start_registry(run=run, rules=node_rules(busybox=busybox.path, pause=pause.path))
        processes.append(registry.process)
        write_registry_hosts(directory=hosts_dir, server=registry.server)
        layout.containerd_config.parent.mkdir(parents=True, exist_ok=True)
        config = render_containerd_config(layout=layout, sandbox_image=pause.name, cdi_dirs=(layout.cdi_dir,))
        layout.containerd_config.write_text(config)  # it names the registry hosts directory
        containerd = start_process(
            name="containerd",
            argv=[
                "unshare", "--mount", "--propagation", "private", "--",
                str(binaries.path("containerd")), "--config", str(layout.containerd_config),
            ],
            run=run,
        )  # fmt: skip
        processes.append(containerd)
        built = Node(
            containerd=containerd,
            socket=layout.containerd_socket,
            ctr=binaries.path("ctr"),
            hosts_dir=hosts_dir,
            registry=registry,
        )
        wait_for(
            lambda: built.run_ctr("version").returncode == 0,
            timeout=30,
            what="the private containerd",
            abort=lambda: None if containerd.alive() else containerd.failure("exited"),
        )
        yield built
    finally:
        for process in reversed(processes):
            process.stop(timeout=15)
        shutil.rmtree(layout.shim_sockets, ignore_errors=True)
        run.remove()


@pytest.mark.parametrize(
    ("image", "stored_as"),
    [
        ("busybox:1.36", "docker.io/library/busybox:1.36"),
        ("busybox", "docker.io/library/busybox:latest"),
        ("busybox:latest", "docker.io/library/busybox:latest"),
        ("docker.io/library/busybox:1.37.0-glibc", "docker.io/library/busybox:1.37.0-glibc"),
        ("fakedev.local/busybox:latest", "fakedev.local/busybox:latest"),
        ("fakedev.local/pause:v1", "fakedev.local/pause:v1"),
    ],
    ids=["tagged", "untagged", "latest", "qualified", "fakedev-local", "pause"],
)
def test_cri_pull_serves_names_users_write(node: Node, image: str, stored_as: str) -> None:
    image_ref = node.cri_pull(image)
    assert image_ref.startswith("sha256:")
    assert stored_as in node.image_names()
    assert f"{stored_as.split('/', 1)[1].rsplit(':', 1)[0]}/manifests/" in node.registry.process.log_tail(lines=400)


def test_a_repeated_pull_asks_the_registry_again(node: Node) -> None:
    """What the kubelet does for every ``Always`` container (``busybox``, ``busybox:latest``)."""
    node.cri_pull("busybox")
    before = node.registry.process.log_tail(lines=1000).count("HEAD /v2/library/busybox/manifests/latest?ns=docker.io")
    node.cri_pull("busybox")
    after = node.registry.process.log_tail(lines=1000).count("HEAD /v2/library/busybox/manifests/latest?ns=docker.io")
    assert after == before + 1


@pytest.mark.parametrize(
    ("image", "named"),
    [
        (UNKNOWN, "docker.io/library/nginx:1.27"),
        ("registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10"),
        ("quay.io/prometheus/busybox:latest", "quay.io/prometheus/busybox:latest"),
    ],
    ids=["docker-hub", "registry-k8s-io", "quay-io"],
)
def test_cri_pull_of_an_unknown_image_names_the_available_ones(node: Node, image: str, named: str) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        node.cri_pull(image)
    error = caught.value
    assert isinstance(error, grpc.Call)
    print(f"CRI PullImage {image}: {error.code()}: {error.details()}")
    assert UNKNOWN_MESSAGE.replace("docker.io/library/nginx:1.27", named) in (error.details() or "")


@pytest.mark.parametrize(
    "image",
    ["docker.io/library/busybox:1.36", "docker.io/library/busybox:latest", "docker.io/library/busybox:1.37-musl"],
    ids=["tagged", "latest", "other-tag"],
)
def test_ctr_pull_with_hosts_dir(node: Node, image: str) -> None:
    """(ctr itself wants a tag or digest: ``ctr images pull docker.io/library/busybox`` fails with "object
    required" before asking any registry; the kubelet's untagged names go through CRI, tested above.)"""
    done = node.run_ctr("images", "pull", "--hosts-dir", str(node.hosts_dir), image)
    assert done.returncode == 0, done.stderr
    assert image in node.image_names()


def test_ctr_pull_of_an_unknown_image_names_the_available_ones(node: Node) -> None:
    done = node.run_ctr("images", "pull", "--hosts-dir", str(node.hosts_dir), "docker.io/library/nginx:1.27")
    print(f"ctr images pull docker.io/library/nginx:1.27 exited {done.returncode}: {done.stderr.strip()}")
    assert done.returncode != 0
    assert UNKNOWN_MESSAGE in done.stderr


def test_an_added_archive_is_pulled_by_its_exact_name(node: Node, tmp_path: Path) -> None:
    node.cri_pull("fakedev.local/pause:v1")
    exported = tmp_path / "exported.tar"
    # --local: through the transfer API, ctr can exit before its copy of the stream reaches the file (seen once in
    # CI as a truncated tar); the local export writes the archive itself before it returns.
    done = node.run_ctr("images", "export", "--local", str(exported), "fakedev.local/pause:v1")
    assert done.returncode == 0, done.stderr
    added = node.registry.add(name="quay.io/example/sleeper:2", archive=exported)
    assert added == "quay.io/example/sleeper:2"
    node.cri_pull("quay.io/example/sleeper:2")
    assert "quay.io/example/sleeper:2" in node.image_names()
