"""Network namespaces without forking: iproute2 for create/delete, ``setns`` of the calling thread for sockets.

A leaf package shared by the fake driver (its NIC hardware and discovery) and the harness (pod sandboxes, moving
interfaces): pyroute2's own namespace support forks a helper process, which is unsafe in processes running gRPC.
"""

from linuxns.errors import NamespaceError
from linuxns.ns import create_netns, delete_netns, in_netns, list_netns, netlink, netns_path

__all__ = ["NamespaceError", "create_netns", "delete_netns", "in_netns", "list_netns", "netlink", "netns_path"]
