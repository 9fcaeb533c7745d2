"""Start and stop a private dockerd, and clean up after one whose owner died.

The daemon runs from the caller's run directory (data root, exec root, socket, config), attaches containers to a
bridge of its own on a /24 no host route uses, and changes no firewall rule or kernel switch. ``stop`` (and the
reaper, through :func:`clean_dead_daemon`) leave no container, process, mount, cgroup or bridge behind.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from harness.docker import engine, host
from harness.docker.config import (
    DAEMON_PATH,
    DaemonPaths,
    bridge_address,
    bridge_name,
    cgroup_parent,
    containerd_namespace,
    render_daemon_config,
    shim_socket,
)
from harness.errors import DockerMissingError, DockerStartError, NotReadyError
from harness.procs import Process, RunDir, start_process, wait_for
from harness.realnode.node import host_routes, remove_bridge
from harness.realnode.podnetwork import pick_subnet, route_networks

START_TIMEOUT_SECONDS: Final = 60.0
STOP_TIMEOUT_SECONDS: Final = 30.0
_STATE_DIR: Final = "docker"


@dataclass(frozen=True, kw_only=True)
class DockerDaemon:
    """A running private dockerd; ``stop`` removes all it made (the run directory itself stays its owner's)."""

    run: RunDir
    socket: Path
    bridge: str
    process: Process

    @property
    def host(self) -> str:
        """``unix:///…/docker.sock``: for ``DOCKER_HOST`` or ``docker.DockerClient(base_url=...)``."""
        return f"unix://{self.socket}"

    def env(self) -> dict[str, str]:
        """This process's environment pointed at the daemon; Ryuk is off (its image cannot be pulled here, and our
        own labels, finalizers and the reaper do its job)."""
        return {**os.environ, "DOCKER_HOST": self.host, "TESTCONTAINERS_RYUK_DISABLED": "true"}

    def stop(self) -> None:
        """Remove every container, stop dockerd, then unmount, kill and delete whatever is left."""
        if self.process.alive():
            try:
                for container in engine.container_ids(self.socket):
                    engine.remove_container(self.socket, container)
            except OSError:
                pass  # the daemon stopped answering: the host clean-up below removes what its containers left
        self.process.stop(timeout=STOP_TIMEOUT_SECONDS)
        _clean_host(run_id=self.run.run_id, paths=DaemonPaths(root=self.socket.parent))


def _clean_host(*, run_id: str, paths: DaemonPaths) -> None:
    host.remove_cgroups(cgroup_parent(run_id))
    host.unmount_below(paths.root)
    remove_bridge(bridge_name(run_id))
    # A shim killed with its daemon leaves its socket in containerd's fixed directory, outside the run.
    namespace = containerd_namespace(run_id)
    for container in paths.containers.glob("*") if paths.containers.is_dir() else ():
        socket = shim_socket(
            containerd_socket=paths.containerd_socket, namespace=namespace, container_id=container.name
        )
        socket.unlink(missing_ok=True)
    shutil.rmtree(paths.root, ignore_errors=True)


def clean_dead_daemon(run_id: str, path: Path) -> None:
    """The reaper's cleaner: a dead run's containers (their processes are not tagged with the run id, their cgroups
    are), mounts, bridge and state. A no-op for runs that never started a daemon."""
    _clean_host(run_id=run_id, paths=DaemonPaths(root=path / _STATE_DIR))


def _dockerd() -> str:
    found = shutil.which("dockerd", path=DAEMON_PATH)
    if found is None:
        raise DockerMissingError("dockerd is not installed: `make deps` installs Debian's docker.io")
    return found


def start_docker_daemon(*, run: RunDir, progress: Callable[[str], None] | None = None) -> DockerDaemon:
    """Start dockerd from ``run`` and wait until its API answers."""
    say = progress or (lambda _message: None)
    dockerd = _dockerd()
    paths = DaemonPaths(root=run.path / _STATE_DIR)
    paths.root.mkdir(mode=0o700)
    paths.config.write_text(render_daemon_config(paths=paths, run_id=run.run_id))
    bridge = bridge_name(run.run_id)
    subnet = pick_subnet(routes=route_networks(host_routes()))
    say(f"bridge {bridge} on {subnet}")
    host.add_bridge(name=bridge, address=bridge_address(subnet))
    env = {**os.environ, "PATH": DAEMON_PATH}
    try:
        process = start_process(
            name="dockerd", argv=[dockerd, f"--config-file={paths.config}"], run=run, env=env, cwd=paths.root
        )
    except Exception:
        remove_bridge(bridge)
        raise
    daemon = DockerDaemon(run=run, socket=paths.socket, bridge=bridge, process=process)
    say(f"dockerd starting on {daemon.host}")
    try:
        wait_for(
            lambda: engine.ping(paths.socket),
            timeout=START_TIMEOUT_SECONDS,
            what="the private dockerd's API",
            abort=lambda: None if process.alive() else DockerStartError(_failure(process, "exited")),
        )
    except NotReadyError as exc:
        daemon.stop()
        raise DockerStartError(_failure(process, "never answered")) from exc
    except DockerStartError:
        daemon.stop()
        raise
    say("dockerd ready")
    return daemon


def _failure(process: Process, what: str) -> str:
    return f"dockerd {what}; last log lines ({process.log_path}):\n{process.log_tail(lines=20)}"
