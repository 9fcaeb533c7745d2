"""The private dockerd's names and configuration (pure: a run id and paths in, names and JSON out).

Everything the daemon makes on the host is named after the run, so the reaper can tell whose it is: its bridge
``fdk<id>`` and the cgroup parent ``fakedev-docker-<id>`` its containers' cgroups live under (every hierarchy).
All settings go in one config file (dockerd refuses a setting given both as a flag and in the file) and the file
replaces ``/etc/docker/daemon.json``, so the host's Docker configuration never leaks in.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Final

BRIDGE_PREFIX: Final = "fdk"
CGROUP_PREFIX: Final = "fakedev-docker-"
SHIM_SOCKET_DIR: Final = Path("/run/containerd/s")
"""containerd 1.6 puts every shim's socket here, whatever its own state directory (a killed shim leaves it)."""
DAEMON_PATH: Final = "/usr/sbin:/usr/bin:/sbin:/bin"
"""dockerd finds containerd, runc and docker-proxy on PATH: Debian's, never a newer build in /usr/local."""


@dataclass(frozen=True, kw_only=True)
class DaemonPaths:
    """Where one daemon keeps its state, all below the run directory."""

    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def exec_root(self) -> Path:
        return self.root / "exec"

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def pidfile(self) -> Path:
        return self.root / "docker.pid"

    @property
    def config(self) -> Path:
        return self.root / "daemon.json"

    @property
    def containerd_socket(self) -> Path:
        """The containerd dockerd starts for itself listens here."""
        return self.exec_root / "containerd" / "containerd.sock"

    @property
    def containers(self) -> Path:
        """One directory per container, named by its id (which containerd uses too)."""
        return self.data / "containers"


def bridge_name(run_id: str) -> str:
    """``fdk<run id>``: 11 characters, within IFNAMSIZ; distinct from the real node's ``fdbr`` bridges."""
    return f"{BRIDGE_PREFIX}{run_id}"


def run_of_bridge(ifname: str) -> str | None:
    """The run id in a bridge name :func:`bridge_name` made, else ``None``."""
    if not ifname.startswith(BRIDGE_PREFIX) or ifname.startswith("fdbr"):
        return None
    rest = ifname.removeprefix(BRIDGE_PREFIX)
    return rest if rest and all(c in "0123456789abcdef" for c in rest) else None


def containerd_namespace(run_id: str) -> str:
    return f"fakedev-{run_id}"


def shim_socket(*, containerd_socket: Path, namespace: str, container_id: str) -> Path:
    """Where containerd 1.6 put the shim socket of a container: named by the SHA-256 of its address, namespace and
    id joined as a path."""
    digest = hashlib.sha256(str(containerd_socket / namespace / container_id).encode()).hexdigest()
    return SHIM_SOCKET_DIR / digest


def cgroup_parent(run_id: str) -> str:
    """The cgroup (relative to each hierarchy's root) every container of the run's daemon is created under."""
    return f"{CGROUP_PREFIX}{run_id}"


def bridge_address(subnet: ipaddress.IPv4Network) -> ipaddress.IPv4Interface:
    """The bridge holds the subnet's first address: the containers' gateway, and what docker-proxy dials from."""
    return ipaddress.IPv4Interface(f"{subnet.network_address + 1}/{subnet.prefixlen}")


def render_daemon_config(*, paths: DaemonPaths, run_id: str) -> str:
    """daemon.json for a daemon that changes nothing outside its run: no iptables rules, no masquerading, no
    forwarding switched on; published ports go through the userland proxy (which needs no iptables), which is why
    only 127.0.0.1 publishing is supported; containerd namespaces carry the run id in case a system containerd is
    found and shared."""
    config = {
        "data-root": str(paths.data),
        "exec-root": str(paths.exec_root),
        "pidfile": str(paths.pidfile),
        "hosts": [f"unix://{paths.socket}"],
        "bridge": bridge_name(run_id),
        "iptables": False,
        "ip-masq": False,
        "ip-forward": False,
        "userland-proxy": True,
        "storage-driver": "overlay2",
        "cgroup-parent": f"/{cgroup_parent(run_id)}",
        "containerd-namespace": containerd_namespace(run_id),
        "containerd-plugins-namespace": f"{containerd_namespace(run_id)}-plugins",
    }
    return json.dumps(config, indent=2) + "\n"
