"""What a CDI-capable runtime does with OCI ``linux.netDevices``: move host interfaces into the pod's sandbox.

runc 1.1.5 (Debian) does not implement ``linux.netDevices``, so the emulator moves each interface itself before
starting the container — renamed, with its MAC, MTU and addresses kept — and strips the field from the spec it gives
runc. On pod teardown the interfaces go back under their host names (deleting a namespace would destroy a veth).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from harness.errors import ComponentError
from harness.runtime.netns import netlink, netns_path


def apply_net_devices(oci: dict[str, Any], *, sandbox: str, source_netns: str | None, record: Path) -> dict[str, Any]:
    """Move every ``linux.netDevices`` interface into ``sandbox``; return the spec without the field.

    ``record`` (in the pod's state directory) remembers each moved interface's host name for teardown.
    """
    linux = dict(oci.get("linux") or {})
    devices: dict[str, Any] = linux.pop("netDevices", None) or {}
    if not devices:
        return oci
    moved = json.loads(record.read_text()) if record.exists() else {}
    for host_name, target in devices.items():
        name = (target or {}).get("name") or host_name
        if name in moved and _present(sandbox, name):
            continue  # a container restart: the interface is already in the sandbox
        _move(host_name=host_name, name=name, source=source_netns, sandbox=sandbox)
        moved[name] = host_name
        record.write_text(json.dumps(moved))
    return {**oci, "linux": linux}


def _present(netns: str, name: str) -> bool:
    with netlink(netns) as ns:
        return bool(ns.link_lookup(ifname=name))


def _move(*, host_name: str, name: str, source: str | None, sandbox: str) -> None:
    with netlink(source) as src:
        idx = src.link_lookup(ifname=host_name)
        if not idx:
            raise ComponentError(f"netDevices: interface {host_name} not found in {source or 'the host namespace'}")
        link = src.get_links(idx[0])[0]
        addresses = [
            (a.get_attr("IFA_ADDRESS"), a["prefixlen"]) for a in src.get_addr(index=idx[0]) if a.get_attr("IFA_ADDRESS")
        ]
        src.link("set", index=idx[0], state="down")
        fd = netns_path(sandbox).open("rb")
        try:
            src.link("set", index=idx[0], net_ns_fd=fd.fileno())
        finally:
            fd.close()
    with netlink(sandbox) as dst:
        (new,) = dst.link_lookup(ifname=host_name)
        dst.link("set", index=new, ifname=name, address=link.get_attr("IFLA_ADDRESS"), mtu=link.get_attr("IFLA_MTU"))
        for address, prefix in addresses:
            with contextlib.suppress(Exception):  # an address the kernel re-added already
                dst.addr("add", index=new, address=address, prefixlen=prefix)
        dst.link("set", index=new, state="up")


def release_net_devices(*, sandbox: str, target_netns: str | None, record: Path) -> None:
    """Move interfaces back out of ``sandbox`` under their host names."""
    if not record.exists():
        return
    moved: dict[str, str] = json.loads(record.read_text())
    fd = None
    try:
        with netlink(sandbox) as ns:
            for name, host_name in moved.items():
                idx = ns.link_lookup(ifname=name)
                if not idx:
                    continue
                ns.link("set", index=idx[0], state="down")
                ns.link("set", index=idx[0], ifname=host_name)
                if target_netns:
                    fd = netns_path(target_netns).open("rb")
                    ns.link("set", index=idx[0], net_ns_fd=fd.fileno())
                    fd.close()
                    fd = None
                else:
                    with Path("/proc/1/ns/net").open("rb") as host:
                        ns.link("set", index=idx[0], net_ns_fd=host.fileno())
    finally:
        if fd is not None:
            fd.close()
        record.unlink(missing_ok=True)
