"""Top-level test configuration: pytester is used to test fakedev's own pytest plugin; fixtures shared by the
integration and privileged tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fakedev import __version__
from harness.cluster.build import default_cache_root
from harness.docker import DockerDaemon, start_docker_daemon
from harness.errors import DockerUnsupportedError
from harness.image.assemble import BuiltImage, build_image
from harness.procs import run_dir
from kubeclient import KubeClient
from kubeclient.resources import DEVICE_CLASSES
from tests.helpers import EXAMPLE_DRIVER, device_class_body, driver_is

pytest_plugins = ["pytester"]


@pytest.fixture
def example_class(kube: KubeClient, unique_name: str) -> Iterator[str]:
    """A DeviceClass named after the test, selecting every device of the gpu.example.com driver."""
    kube.create(DEVICE_CLASSES, device_class_body(name=unique_name, expression=driver_is(EXAMPLE_DRIVER)))
    yield unique_name
    kube.delete(DEVICE_CLASSES, unique_name)


@pytest.fixture(scope="session")
def built_image(tmp_path_factory: pytest.TempPathFactory) -> BuiltImage:
    """``fakedev image build`` into a temp dir: two minutes on a cold cache (mmdebstrap), a second on a warm one;
    workers building at once take turns on the cache's lock."""
    return build_image(
        project_root=Path(__file__).resolve().parents[1],
        version=__version__,
        out_dir=tmp_path_factory.mktemp("image"),
        cache_root=default_cache_root(),
        progress=lambda message: print(f"[image] {message}", flush=True),
    )


@pytest.fixture(scope="session")
def docker_daemon() -> Iterator[DockerDaemon]:
    """A private dockerd for the session (one per xdist worker; the docker tests carry ``xdist_group("docker")`` so
    one worker runs them all on one daemon). A missing dockerd fails; only a kernel that refuses it skips."""
    with run_dir(purpose="docker") as run:
        try:
            daemon = start_docker_daemon(run=run, progress=lambda message: print(f"[docker] {message}", flush=True))
        except DockerUnsupportedError as exc:
            pytest.skip(f"Docker cannot run here: {exc}")
        try:
            yield daemon
        finally:
            daemon.stop()
