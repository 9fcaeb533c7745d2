"""The few Docker Engine API calls the daemon's owner needs (ping, list and remove containers), over its unix socket.

The harness speaks the HTTP API directly instead of importing the ``docker`` SDK so that starting, stopping and
reaping a daemon works without the optional testcontainers dependencies installed.
"""

from __future__ import annotations

import http.client
import json
import socket
from pathlib import Path
from typing import Final, cast

from harness.errors import DockerApiError

API_TIMEOUT_SECONDS: Final = 30.0


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, *, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(str(self._path))
        except BaseException:
            sock.close()  # a daemon not listening yet: no socket may be left for the garbage collector
            raise
        self.sock = sock


def request(*, socket_path: Path, method: str, url: str, timeout: float = API_TIMEOUT_SECONDS) -> tuple[int, bytes]:
    """One API call; its status and body (connection failures raise ``OSError``)."""
    conn = _UnixConnection(socket_path, timeout=timeout)
    try:
        conn.request(method, url)
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def ping(socket_path: Path) -> bool:
    status, body = request(socket_path=socket_path, method="GET", url="/_ping", timeout=5.0)
    return status == 200 and body.strip() == b"OK"


def container_ids(socket_path: Path) -> list[str]:
    """Every container of the daemon, running or not."""
    status, body = request(socket_path=socket_path, method="GET", url="/containers/json?all=1")
    if status != 200:
        raise DockerApiError(f"listing containers answered {status}: {body[:300]!r}")
    return [str(c["Id"]) for c in cast("list[dict[str, object]]", json.loads(body))]


def remove_container(socket_path: Path, container_id: str) -> None:
    """Kill and remove a container with its anonymous volumes; one already gone is fine."""
    status, body = request(socket_path=socket_path, method="DELETE", url=f"/containers/{container_id}?force=1&v=1")
    if status not in (204, 404):
        raise DockerApiError(f"removing container {container_id[:12]} answered {status}: {body[:300]!r}")
