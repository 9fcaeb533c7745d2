"""OCI ``linux.netDevices`` as a runtime sees them, and handing the interfaces back when a pod's sandbox goes.

runc (1.4+) moves each interface into the container's network namespace at ``create`` and never moves it back: the
runtime spec leaves that to whoever owns the namespace, and the kernel destroys a virtual interface (a veth, which is
what fakedev's NICs are) together with its namespace. Both nodes therefore return the interfaces themselves just
before the sandbox's namespace is removed — the emulator from its pod teardown, the real node from a CNI ``DEL``
step — under their host names, into the namespace they came from.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.runtime.netns import netlink

INIT_NETNS = "/proc/1/ns/net"


def spec_net_devices(oci: Mapping[str, Any]) -> dict[str, str]:
    """Host interface name → name inside the container, for every ``linux.netDevices`` entry of ``oci``."""
    devices = (oci.get("linux") or {}).get("netDevices") or {}
    return {host: (target or {}).get("name") or host for host, target in devices.items()}


def spec_netns(oci: Mapping[str, Any]) -> str | None:
    """The path of the network namespace ``oci`` joins (a pod container joins its sandbox's), if any."""
    for namespace in (oci.get("linux") or {}).get("namespaces") or []:
        if namespace.get("type") == "network":
            path = namespace.get("path")
            return str(path) if path else None
    return None


def same_netns(a: str, b: str) -> bool:
    """Whether two namespace paths (bind mounts or ``/proc/<pid>/ns/net``) name the same namespace."""
    try:
        sa, sb = Path(a).stat(), Path(b).stat()
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def return_net_devices(*, sandbox: str, moved: Mapping[str, str], target: str | None) -> list[str]:
    """Move interfaces out of the namespace at path ``sandbox`` back into ``target`` (a namespace path; ``None``:
    the host's), each renamed from its container name to its host name (``moved``: host name → container name).

    Returns the host names of the interfaces returned; one that is no longer in the sandbox (unplugged meanwhile)
    is skipped.
    """
    returned: list[str] = []
    with netlink(sandbox) as ns, Path(target or INIT_NETNS).open("rb") as destination:
        for host_name, name in moved.items():
            found = ns.link_lookup(ifname=name)
            if not found:
                continue
            ns.link("set", index=found[0], state="down")
            # Rename first: the destination may hold another interface called like the container-side name.
            ns.link("set", index=found[0], ifname=host_name)
            with contextlib.suppress(Exception):  # pyroute2 raises NetlinkError; the check below tells
                ns.link("set", index=found[0], net_ns_fd=destination.fileno())
            if not ns.link_lookup(ifname=host_name):
                returned.append(host_name)
    return returned
