"""Starting, feeding and stopping the node's registry process, and writing the hosts directory that points at it.

The registry runs as a process of the node's run (``harness.procs.start_process``: it carries the run tag, so the
reaper kills it if its owner dies). The real node calls:

- :func:`start_registry` with the run and :func:`harness.realnode.registry.names.node_rules`;
- :func:`write_registry_hosts` with the directory its containerd config names
  (:func:`harness.realnode.registry.hosts.render_registry_config`);
- :meth:`RegistryProcess.add_archive` for an OCI layout archive it imports (served under the names it carries once
  the call returns), or :meth:`RegistryProcess.add` to serve one under a name of the caller's;
- :meth:`RegistryProcess.stop`.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from harness.errors import RegistryError
from harness.procs import SOURCE_ROOT, Process, RunDir, start_process, wait_for
from harness.realnode.registry.archive import NAME_ANNOTATION, load_archive
from harness.realnode.registry.hosts import render_registry_hosts
from harness.realnode.registry.names import ImageRule
from harness.realnode.registry.server import ADMIN_PATH, ADMIN_TOKEN_ENV

LISTEN_HOST: Final = "127.0.0.1"
START_TIMEOUT: Final = 15.0


@dataclass(frozen=True, kw_only=True)
class RegistryProcess:
    process: Process
    port: int
    token: str = field(repr=False)
    """What :meth:`add` presents (the process got it in its environment)."""

    @property
    def address(self) -> str:
        return f"{LISTEN_HOST}:{self.port}"

    @property
    def server(self) -> str:
        """What ``hosts.toml`` names: ``http://127.0.0.1:<port>``."""
        return f"http://{self.address}"

    def _request(self, method: str, path: str, *, body: bytes | None = None, timeout: float) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection(LISTEN_HOST, self.port, timeout=timeout)
        try:
            headers = {"Authorization": f"Bearer {self.token}"}
            if body is not None:
                headers["Content-Type"] = "application/json"
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def serving(self) -> bool:
        return self._request("GET", "/v2/", timeout=2)[0] == 200

    def add(self, *, name: str, archive: Path, timeout: float = 120.0) -> str:
        """Serve the OCI layout ``archive`` as ``name`` (``busybox:1.36`` style; ``:*`` for any tag) from now on;
        returns the normalized name. RegistryError says why the registry refused (not a plain-tar OCI layout, several
        images and none so named, a missing blob)."""
        payload = json.dumps({"name": name, "archive": str(archive.resolve())}).encode()
        try:
            status, answer = self._request("POST", ADMIN_PATH, body=payload, timeout=timeout)
        except OSError as exc:
            raise self.process.failure(f"did not answer adding {archive} ({exc})") from exc
        if status != 200:
            raise RegistryError(_error_text(answer) or f"the registry answered {status} adding {archive}")
        added: str = json.loads(answer)["name"]
        return added

    def add_archive(self, archive: Path, *, timeout: float = 120.0) -> tuple[str, ...]:
        """Serve every image ``archive`` names (containerd's ``io.containerd.image.name`` annotation, as ``ctr
        images import`` names them) under its name; returns the normalized names. RegistryError if it names none
        (give the name with :meth:`add`) or cannot be served."""
        names = [n for n, _d in load_archive(archive).roots if n is not None]
        if not names:
            raise RegistryError(f"{archive} names no image ({NAME_ANNOTATION} annotation); add it with a name")
        return tuple(self.add(name=name, archive=archive, timeout=timeout) for name in names)

    def stop(self) -> int:
        """SIGTERM (SIGKILL after 5 s); returns the exit code (0 after a clean stop)."""
        return self.process.stop(timeout=5)


def _error_text(answer: bytes) -> str:
    try:
        return "; ".join(str(e.get("message")) for e in json.loads(answer)["errors"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return ""


def registry_argv(*, port_file: Path, rules: Sequence[ImageRule]) -> list[str]:
    images = [f"--image={r.name.host}/{r.name.repository}:{r.name.tag}={r.archive}" for r in rules]
    return [
        sys.executable, "-m", "harness.realnode.registry",
        f"--listen={LISTEN_HOST}:0", f"--port-file={port_file}", *images,
    ]  # fmt: skip


def start_registry(
    *, run: RunDir, rules: Sequence[ImageRule], name: str = "registry", timeout: float = START_TIMEOUT
) -> RegistryProcess:
    """Start the registry for ``run`` serving ``rules`` on a free loopback port; returns once it answers."""
    port_file = run.path / f"{name}.port"
    port_file.unlink(missing_ok=True)
    token = secrets.token_hex(16)
    env = {
        **os.environ,
        ADMIN_TOKEN_ENV: token,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(SOURCE_ROOT), os.environ.get("PYTHONPATH")])),
    }
    process = start_process(name=name, argv=registry_argv(port_file=port_file, rules=rules), run=run, env=env)

    def dead() -> Exception | None:
        return None if process.alive() else process.failure(f"exited with code {process.popen.returncode}")

    try:
        wait_for(port_file.exists, timeout=timeout, what=f"{name} to listen", abort=dead)
        registry = RegistryProcess(process=process, port=int(port_file.read_text()), token=token)
        wait_for(registry.serving, timeout=timeout, what=f"{name} to answer GET /v2/", abort=dead)
    except BaseException:
        process.stop(timeout=5)
        raise
    return registry


def write_registry_hosts(*, directory: Path, server: str) -> list[Path]:
    """Write the hosts directory (``directory/_default/hosts.toml``) sending every registry host to ``server``."""
    written = []
    for relative, text in render_registry_hosts(server).items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(text)
        partial.replace(path)
        written.append(path)
    return written
