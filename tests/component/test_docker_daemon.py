"""The private dockerd (harness.docker): it answers, runs a container from an imported root filesystem, publishes a
port on 127.0.0.1, and leaves nothing behind — after ``stop`` and, through the reaper, after its owner was killed."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import docker
import pytest
from docker.models.containers import Container

from harness.docker import DockerDaemon, start_docker_daemon
from harness.docker.config import DaemonPaths, bridge_name, cgroup_parent, containerd_namespace, shim_socket
from harness.docker.host import cgroup_dirs, mounts_below
from harness.procs import SOURCE_ROOT, run_dir, tagged_pids, wait_for
from harness.reaper import reap_all
from harness.runtime.netns import netlink
from tests.helpers import busybox_rootfs_tar

pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("docker")]

IMAGE = "fakedev-test-busybox:1"
PAGE = "hello from the container\n"


def _import_busybox(client: docker.DockerClient, directory: Path) -> str:
    tar = busybox_rootfs_tar(directory / "rootfs.tar", files={"www/index.html": PAGE})
    client.api.import_image_from_file(str(tar), repository=IMAGE.split(":")[0], tag=IMAGE.split(":")[1])
    return IMAGE


@pytest.fixture
def client(docker_daemon: DockerDaemon) -> Iterator[docker.DockerClient]:
    with closing(docker.DockerClient(base_url=docker_daemon.host)) as c:
        yield c


@pytest.fixture
def busybox(client: docker.DockerClient, tmp_path: Path) -> str:
    return _import_busybox(client, tmp_path)


def _httpd(client: docker.DockerClient, image: str) -> Container:
    """busybox httpd serving /www on port 8080, published on an ephemeral port of the host's 127.0.0.1."""
    # An (address, None) pair: an ephemeral port on that address (the SDK's stubs only know fixed ports).
    ports: dict[str, Any] = {"8080/tcp": ("127.0.0.1", None)}
    return client.containers.run(
        image,
        ["/bin/busybox", "httpd", "-f", "-p", "8080", "-h", "/www"],
        detach=True,
        ports=ports,
        cap_drop=["ALL"],
        cap_add=["NET_BIND_SERVICE", "SETUID", "SETGID"],
    )


def _fetch(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=5) as answer:
        return str(answer.read().decode())


def _published_port(container: Container) -> int:
    container.reload()
    published: list[dict[str, str]] = container.ports["8080/tcp"] or []
    return int(published[0]["HostPort"])


def _running(pid: int) -> bool:
    """Alive, not a zombie: a killed container's process is gone once killed, though its new parent (PID 1 after its
    shim died) may reap it a moment later."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _bridge_exists(name: str) -> bool:
    with netlink(None) as ip:
        return bool(ip.link_lookup(ifname=name))


def test_the_daemon_answers_with_debians_docker(client: docker.DockerClient) -> None:
    version = client.version()
    assert version["Version"].startswith("20.10"), version
    assert client.info()["Driver"] == "overlay2"


def test_a_container_from_an_imported_rootfs_prints_to_its_log(client: docker.DockerClient, busybox: str) -> None:
    container = client.containers.run(busybox, ["/bin/busybox", "echo", "hello from busybox"], detach=True)
    try:
        assert container.wait(timeout=60)["StatusCode"] == 0
        assert container.logs() == b"hello from busybox\n"
    finally:
        container.remove(force=True)


def test_a_port_published_on_loopback_answers_from_the_host(client: docker.DockerClient, busybox: str) -> None:
    container = _httpd(client, busybox)
    try:
        port = _published_port(container)
        wait_for(lambda: _fetch(port) == PAGE, timeout=30, what=f"busybox httpd on 127.0.0.1:{port}")
    finally:
        container.remove(force=True)


def test_containers_attach_to_the_run_s_own_bridge(docker_daemon: DockerDaemon, client: docker.DockerClient) -> None:
    assert docker_daemon.bridge == bridge_name(docker_daemon.run.run_id)
    options = client.networks.get("bridge").attrs["Options"]
    assert options["com.docker.network.bridge.name"] == docker_daemon.bridge


def test_stop_leaves_no_process_mount_cgroup_bridge_or_directory(tmp_path: Path) -> None:
    with run_dir(purpose="docker-stop") as run:
        daemon = start_docker_daemon(run=run)
        try:
            with closing(docker.DockerClient(base_url=daemon.host)) as c:
                container = _httpd(c, _import_busybox(c, tmp_path))
                port = _published_port(container)
                wait_for(lambda: _fetch(port) == PAGE, timeout=30, what="the container to serve")
                container_pid = int(container.attrs["State"]["Pid"])
                assert mounts_below(run.path)  # the container's overlay is mounted: the check below means something
        finally:
            daemon.stop()
        assert not tagged_pids(run.run_id)
        assert not _running(container_pid)
        assert not mounts_below(run.path)
        assert not cgroup_dirs(cgroup_parent(run.run_id))
        assert not _bridge_exists(daemon.bridge)
        assert not (run.path / "docker").exists()


_ORPHAN = """
import sys
from pathlib import Path
from harness.docker import start_docker_daemon
from harness.procs import open_run_dir

run = open_run_dir(purpose="docker-orphan", base=Path(sys.argv[1]))
daemon = start_docker_daemon(run=run)
print(run.run_id, run.path, daemon.host, flush=True)
sys.stdin.read()
"""


@pytest.fixture
def short_base() -> Iterator[Path]:
    """A run base with a short path: dockerd's containerd socket lives below it and must fit a unix socket path."""
    base = Path(tempfile.mkdtemp(prefix="fd-", dir="/tmp"))
    yield base
    reap_all(base=base)  # a test that failed half-way leaves no daemon, mount or bridge either
    shutil.rmtree(base, ignore_errors=True)


def test_the_reaper_removes_a_daemon_whose_owner_was_killed(short_base: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(SOURCE_ROOT)}
    with subprocess.Popen(
        [sys.executable, "-c", _ORPHAN, str(short_base)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    ) as owner:
        try:
            assert owner.stdout is not None
            run_id, path_text, host = owner.stdout.readline().decode().split()
            with closing(docker.DockerClient(base_url=host)) as c:
                container = _httpd(c, _import_busybox(c, tmp_path))
                _published_port(container)  # (reloads the container: its Pid is known once it runs)
                container_pid = int(container.attrs["State"]["Pid"])
                paths = DaemonPaths(root=Path(path_text) / "docker")
                socket = shim_socket(
                    containerd_socket=paths.containerd_socket,
                    namespace=containerd_namespace(run_id),
                    container_id=str(container.id),
                )
        finally:
            owner.send_signal(signal.SIGKILL)
    path = Path(path_text)
    assert _running(container_pid)  # the container outlived its daemon's owner
    assert socket.exists()  # and so did its shim's socket, outside the run directory
    assert run_id in reap_all(base=short_base)
    assert not path.exists()
    assert not tagged_pids(run_id)
    assert not _running(container_pid)
    assert not mounts_below(path)
    assert not cgroup_dirs(cgroup_parent(run_id))
    assert not _bridge_exists(bridge_name(run_id))
    assert not socket.exists()
