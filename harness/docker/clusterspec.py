"""How the fakedev cluster container must be run (pure data): its command, its port, its kubeconfig, and the explicit
security options the emulated nodes need inside it — never ``--privileged`` (this host's root lacks
CAP_SYS_RESOURCE, so Docker cannot grant "all capabilities" and refuses to start such a container). No device
cgroup rule and no host mount is needed: runc's pod containers get only the devices the container already has,
and the container's own cgroups are remounted writable from inside (:mod:`harness.runtime.cgroupmounts`).

Each option carries the reason it is needed; the same table renders the keyword arguments of the Python docker SDK
(what :class:`harness.testcontainers.FakedevContainer` passes), the ``docker run`` flags and the documentation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from harness.image.recipe import CLUSTER_API_PORT

READY_PREFIX: Final = "fakedev: cluster ready:"
"""The start of the one line ``fakedev cluster serve`` prints on stdout once the cluster can be used."""
API_PORT: Final = CLUSTER_API_PORT
KUBECONFIG_PATH: Final = "/var/run/fakedev/kubeconfig"
RUN_ID_LABEL: Final = "dev.fakedev.run-id"
"""Every container the provider starts carries it: leftovers of a run are found by it."""


@dataclass(frozen=True, kw_only=True)
class Option:
    """One security option and why the cluster container needs it."""

    flag: str
    """As ``docker run`` takes it (``--cap-add=NET_ADMIN``)."""
    reason: str


CAPABILITIES: Final = (
    Option(
        flag="SYS_ADMIN",
        reason="mount(2): `fakedev cluster serve` remounts the container's own cgroups read-write (Docker mounts them "
        "read-only) so runc can make a cgroup per pod container; each pod's network namespace is bind-mounted under "
        "/run/netns; runc mounts /proc, /dev and /sys in each pod's new mount namespace",
    ),
    Option(
        flag="NET_ADMIN",
        reason="each pod's network namespace needs its loopback brought up (without it: `ip -n … link set lo up: "
        "Operation not permitted`); profiles with NICs also make veth pairs and move them between namespaces",
    ),
)
"""Added to Docker's default set, which already has what runc needs besides (SETPCAP, SYS_CHROOT, MKNOD, SETUID,
SETGID, …). Measured on Debian 12, Docker 20.10.24, cgroup v1: SYS_ADMIN and NET_ADMIN are both required."""

SECURITY_OPTS: Final = (
    Option(
        flag="seccomp=unconfined",
        reason="runc joins a new session keyring for each pod container; Docker's default seccomp profile refuses "
        "keyctl/add_key to every container (`unable to join session keyring: unable to create session key: "
        "operation not permitted`)",
    ),
    Option(
        flag="apparmor=unconfined",
        reason="where AppArmor is on (Ubuntu, many laptops' Docker VMs), Docker's docker-default profile forbids "
        "mount(2) even with CAP_SYS_ADMIN; a no-op on hosts without AppArmor (this CI's Debian hosts)",
    ),
)


def capability_names() -> list[str]:
    return [o.flag for o in CAPABILITIES]


def serve_command(*, profile: str, nodes: int) -> list[str]:
    """The container's arguments (its entrypoint is ``fakedev``)."""
    return ["cluster", "serve", "--profile", profile, "--nodes", str(nodes), "--kubeconfig-out", KUBECONFIG_PATH]


def docker_run_flags() -> list[str]:
    """The ``docker run`` flags the cluster container needs, in the order the documentation lists them."""
    flags = [f"--cap-add={o.flag}" for o in CAPABILITIES]
    flags += [f"--security-opt={o.flag}" for o in SECURITY_OPTS]
    # An init as PID 1 reaps the emulator's container shims, which are re-parented to it when they outlive a pod.
    flags += ["--init"]
    return flags


def sdk_run_options(*, labels: dict[str, str]) -> dict[str, object]:
    """The same options as keyword arguments of the docker SDK's ``containers.run`` (testcontainers' kwargs)."""
    return {
        "cap_add": capability_names(),
        "security_opt": [o.flag for o in SECURITY_OPTS],
        "init": True,
        "labels": labels,
    }


def reasons(options: Sequence[Option]) -> list[tuple[str, str]]:
    return [(o.flag, o.reason) for o in options]
