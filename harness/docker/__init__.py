"""A private Docker daemon for tests and the testcontainers provider: Debian's dockerd with its own data root,
socket, bridge and cgroup parent, none of which touch the host's Docker state, all named after the run."""

from harness.docker.daemon import DockerDaemon, start_docker_daemon

__all__ = ["DockerDaemon", "start_docker_daemon"]
