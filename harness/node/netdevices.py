"""OCI ``linux.netDevices`` on the emulated node: who moves each interface into the pod, and handing it back.

With a runc that moves them (1.4+, the cached 1.5 by default; :attr:`Runc.moves_net_devices`) the spec keeps the
field and runc does the move, started inside the node's NIC namespace because it looks each interface up by name
where it runs. With an older runc (Debian's 1.1.5) the emulator moves them itself before starting the container —
renamed, MAC, MTU and addresses kept — and strips the field. Either way an interface that is not in the node's
namespace fails the container, as runc does: a container restarted in the same sandbox does not get its NIC again.

On pod teardown the interfaces go back under their host names (:func:`return_net_devices`): runc never moves them
out, and deleting the namespace would destroy a veth.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import ComponentError
from harness.runtime.netdevices import return_net_devices, spec_net_devices
from harness.runtime.netns import netlink, netns_path


@dataclass(frozen=True, kw_only=True)
class NetDevicesHandover:
    spec: dict[str, Any]
    """The spec to give runc."""
    runc_netns: Path | None
    """The namespace runc must run in to find the interfaces (None: wherever it runs anyway)."""


def hand_over_net_devices(
    oci: dict[str, Any], *, runc_moves: bool, sandbox: str, node_netns: str | None, record: Path
) -> NetDevicesHandover:
    """Prepare the move of every ``linux.netDevices`` interface into ``sandbox``: leave it to runc when
    ``runc_moves``, else move them now.

    ``record`` (in the pod's state directory) remembers host name → pod name for teardown; it is written before
    anything moves, so a crash in between still hands the interfaces back.
    """
    devices = spec_net_devices(oci)
    if not devices:
        return NetDevicesHandover(spec=oci, runc_netns=None)
    moved: dict[str, str] = json.loads(record.read_text()) if record.exists() else {}
    record.write_text(json.dumps({**moved, **devices}))
    if runc_moves:
        return NetDevicesHandover(spec=oci, runc_netns=netns_path(node_netns) if node_netns else None)
    for host_name, name in devices.items():
        _move(host_name=host_name, name=name, source=node_netns, sandbox=sandbox)
    linux = {k: v for k, v in (oci.get("linux") or {}).items() if k != "netDevices"}
    return NetDevicesHandover(spec={**oci, "linux": linux}, runc_netns=None)


def _move(*, host_name: str, name: str, source: str | None, sandbox: str) -> None:
    """What runc 1.4+ does at create, for a runc that does not."""
    with netlink(source) as src:
        idx = src.link_lookup(ifname=host_name)
        if not idx:
            raise ComponentError(
                f"netDevices: interface {host_name} not found in {source or 'the host namespace'}"
                " (as with runc: a restarted container finds it in the pod already)"
            )
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


def release_net_devices(*, sandbox: str, node_netns: str | None, record: Path) -> None:
    """Move the recorded interfaces out of ``sandbox`` back into the node's namespace under their host names."""
    if not record.exists():
        return
    moved: dict[str, str] = json.loads(record.read_text())
    if netns_path(sandbox).exists():
        return_net_devices(
            sandbox=str(netns_path(sandbox)), moved=moved, target=str(netns_path(node_netns)) if node_netns else None
        )
    record.unlink(missing_ok=True)
