"""The testcontainers provider: a whole fake Kubernetes 1.37 cluster with fake DRA devices in one container.

::

    from harness.testcontainers import FakedevContainer

    with FakedevContainer(profile="seed-example", nodes=1) as cluster:
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")  # kubectl --kubeconfig ... get nodes

The container runs the cluster flavour of the fakedev image (``fakedev image build --with-cluster``) with the command
``fakedev cluster serve``; it is ready when that command prints its readiness line, which the start waits for with
testcontainers' log-message wait strategy. The API server's port is published on the host's 127.0.0.1 only and the
kubeconfig the container wrote is rewritten to the mapped port. The container gets an explicit capability list and
security options (:mod:`harness.docker.clusterspec`), never ``--privileged``. Ryuk (testcontainers' own reaper) is
off: every container carries the run-id label, and whoever starts one stops it (the pytest fixture does).

Needs the ``testcontainers`` extra: ``pip install 'fakedev[testcontainers]'``.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path
from typing import Any, Final, cast

import yaml
from testcontainers.core.config import testcontainers_config
from testcontainers.core.container import DockerContainer
from testcontainers.core.wait_strategies import LogMessageWaitStrategy

from harness.docker.clusterspec import (
    API_PORT,
    KUBECONFIG_PATH,
    READY_PREFIX,
    RUN_ID_LABEL,
    sdk_run_options,
    serve_command,
)
from harness.image.recipe import Flavour, image_reference

DEFAULT_PROFILE: Final = "seed-example"
START_TIMEOUT_SECONDS: Final = 240.0
"""Generous: a cold start is the control plane (about 10 s), the nodes and their plugins, on a shared 2-core CI box."""


def default_image() -> str:
    """``$FAKEDEV_CLUSTER_IMAGE`` or the cluster flavour of this fakedev's version."""
    from importlib.metadata import version

    return os.environ.get("FAKEDEV_CLUSTER_IMAGE") or image_reference(
        version=version("fakedev"), flavour=Flavour.CLUSTER
    )


class FakedevContainer(DockerContainer):
    """A fake cluster: the control plane and ``nodes`` emulated nodes of ``profile`` with their fake plugins."""

    def __init__(
        self,
        *,
        profile: str = DEFAULT_PROFILE,
        nodes: int = 1,
        image: str | None = None,
        run_id: str | None = None,
        docker_host: str | None = None,
        start_timeout: float = START_TIMEOUT_SECONDS,
    ) -> None:
        # Ryuk's image cannot be pulled where no registry is reachable; our label and finalizers do its job.
        testcontainers_config.ryuk_disabled = True
        client_kw = {"environment": {"DOCKER_HOST": docker_host}} if docker_host is not None else None
        super().__init__(image or default_image(), docker_client_kw=client_kw)
        self.profile = profile
        self.nodes = nodes
        self.run_id = run_id or secrets.token_hex(4)
        self.with_command(serve_command(profile=profile, nodes=nodes))
        # 127.0.0.1 only: the cluster's admin credentials must not be reachable from the network.
        # testcontainers' with_bind_ports takes no address; its port map goes to the docker SDK as is, which takes an
        # (address, host port) pair (None: an ephemeral port).
        self.ports[f"{API_PORT}/tcp"] = cast("Any", ("127.0.0.1", None))
        self.with_kwargs(**sdk_run_options(labels={RUN_ID_LABEL: self.run_id}))
        self.waiting_for(
            LogMessageWaitStrategy(re.compile(f"^{re.escape(READY_PREFIX)}", re.MULTILINE)).with_startup_timeout(
                int(start_timeout)
            )
        )

    @property
    def api_port(self) -> int:
        """The host port kube-apiserver is published on (on 127.0.0.1)."""
        return int(self.get_exposed_port(API_PORT))

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    def kubeconfig(self) -> str:
        """The kubeconfig the container wrote, pointed at the published port: it works from the host."""
        code, output = self.exec(["cat", KUBECONFIG_PATH])
        if code != 0 or not isinstance(output, bytes):
            raise RuntimeError(f"reading {KUBECONFIG_PATH} in the container failed ({code}): {output!r}")
        config: dict[str, Any] = yaml.safe_load(output)
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = self.server
        return str(yaml.safe_dump(config, sort_keys=False))

    def write_kubeconfig(self, path: Path) -> Path:
        """:meth:`kubeconfig` in a file only its owner reads (it holds the admin's key)."""
        with path.open("w") as out:
            os.fchmod(out.fileno(), 0o600)
            out.write(self.kubeconfig())
        return path

    def logs_text(self) -> str:
        """Everything the container printed, stdout and stderr interleaved: what a failing test's report gets."""
        container = self.get_wrapped_container()
        return "" if container is None else str(container.logs().decode(errors="replace"))
