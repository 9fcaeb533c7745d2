"""The cluster container's tests: the cluster flavour of the image, built by the project's own builder (cached) and
loaded into the session's private dockerd; the plugin's ``fakedev_cluster_container`` pointed at both."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fakedev import __version__
from harness.cluster.build import default_cache_root
from harness.docker import DockerDaemon
from harness.image.assemble import build_image
from harness.image.recipe import Flavour
from harness.pytest_plugin import ClusterContainerSettings

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cluster_image(docker_daemon: DockerDaemon, tmp_path_factory: pytest.TempPathFactory) -> str:
    """``fakedev image build --with-cluster`` (a copy from the cache when nothing changed), ``docker load``-ed."""
    built = build_image(
        project_root=PROJECT_ROOT,
        version=__version__,
        out_dir=tmp_path_factory.mktemp("cluster-image"),
        cache_root=default_cache_root(),
        progress=lambda message: print(f"[image] {message}", flush=True),
        flavour=Flavour.CLUSTER,
    )
    # Debian's docker client (20.10, as the daemon): `docker load` streams the archive, reading its manifest.json.
    loaded = subprocess.run(
        ["/usr/bin/docker", f"--host={docker_daemon.host}", "load", f"--input={built.archive}"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert loaded.returncode == 0, loaded.stderr
    assert f"Loaded image: {built.reference}" in loaded.stdout
    return built.reference


@pytest.fixture(scope="session")
def fakedev_cluster_container_settings(docker_daemon: DockerDaemon, cluster_image: str) -> ClusterContainerSettings:
    return ClusterContainerSettings(
        profile="seed-example", nodes=1, image=cluster_image, docker_host=docker_daemon.host
    )
