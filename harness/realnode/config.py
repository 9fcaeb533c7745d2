"""Config files of the real node's containerd and kubelet (pure: paths in, text out).

Every default that would touch the host is overridden here, as found when the recipe was first run on these
machines (see docs/real-node.md): containerd's shim socket dir, runc state root, NRI socket, opt dir and CDI dirs;
the kubelet's serving certificate, volume plugin dir and pod log dir. What cannot be moved by configuration
(``/var/lib/kubelet/device-plugins``, ``/var/log/containers``) lands in the node's private mount namespace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from harness.realnode.registry.hosts import render_registry_config

SHIM_SOCKET_DIR_MAX: Final = 42
"""containerd refuses a shim socket directory longer than this (the socket name is appended, sun_path is 108)."""


@dataclass(frozen=True, kw_only=True)
class NodeLayout:
    """Every path of one real node, all under its run directory (plus a short shim socket dir)."""

    root: Path
    shim_sockets: Path

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.root / "containerd" / "state"

    @property
    def containerd_socket(self) -> Path:
        return self.root / "containerd" / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd" / "config.toml"

    @property
    def runc_root(self) -> Path:
        return self.root / "containerd" / "runc"

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    @property
    def runc_wrapper(self) -> Path:
        return self.root / "containerd" / "runc-wrapper"

    @property
    def registry_hosts(self) -> Path:
        """containerd's registry hosts directory: ``_default/hosts.toml`` names the node's local registry."""
        return self.root / "containerd" / "certs.d"

    @property
    def netdevice_records(self) -> Path:
        """Specs of containers that moved interfaces in (see runc_wrapper and cni_netdevices)."""
        return self.root / "netdevices"

    @property
    def cni_bin(self) -> Path:
        return self.root / "cni" / "bin"

    @property
    def cni_conf(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_ipam(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet-config.yaml"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.root / "kubelet.kubeconfig"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def private_var_lib(self) -> Path:
        """Bound over /var/lib inside the node's mount namespace."""
        return self.root / "ns" / "var-lib"

    @property
    def private_var_log(self) -> Path:
        return self.root / "ns" / "var-log"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def logs(self) -> Path:
        return self.root / "logs"


def _toml_str(value: str) -> str:
    return "'" + value.replace("'", "") + "'"


def render_containerd_config(*, layout: NodeLayout, sandbox_image: str, cdi_dirs: Sequence[Path]) -> str:
    """containerd 2.x config (version 3; 2.4 migrates it in memory) for a private, CRI-only containerd whose image
    pulls all go to the node's own registry (the hosts directory ``layout.registry_hosts``)."""
    if len(str(layout.shim_sockets)) > SHIM_SOCKET_DIR_MAX:
        raise ValueError(f"shim socket dir {layout.shim_sockets} is longer than {SHIM_SOCKET_DIR_MAX} characters")
    q = _toml_str
    lines = [
        "version = 3",
        f"root = {q(str(layout.containerd_root))}",
        f"state = {q(str(layout.containerd_state))}",
        "imports = []",
        "disabled_plugins = ['io.containerd.snapshotter.v1.zfs', 'io.containerd.snapshotter.v1.devmapper', "
        "'io.containerd.snapshotter.v1.blockfile', 'io.containerd.snapshotter.v1.erofs', "
        "'io.containerd.differ.v1.erofs', 'io.containerd.snapshotter.v1.btrfs']",
        "",
        "[grpc]",
        f"  address = {q(str(layout.containerd_socket))}",
        "[ttrpc]",
        f"  address = {q(str(layout.containerd_socket) + '.ttrpc')}",
        "[debug]",
        "  level = 'info'",
        "",
        "[plugins.'io.containerd.shim.v1.manager']",
        f"  socket_dir = {q(str(layout.shim_sockets))}",
        "[plugins.'io.containerd.nri.v1.nri']",
        "  disable = true",
        "[plugins.'io.containerd.internal.v1.opt']",
        f"  path = {q(str(layout.root / 'containerd' / 'opt'))}",
        "[plugins.'io.containerd.cri.v1.images']",
        "  snapshotter = 'overlayfs'",
        "[plugins.'io.containerd.cri.v1.images'.pinned_images]",
        f"  sandbox = {q(sandbox_image)}",
        "[plugins.'io.containerd.cri.v1.runtime']",
        # These machines' processes lack CAP_SYS_RESOURCE: a negative oom_score_adj (sandboxes get -998) fails.
        "  restrict_oom_score_adj = true",
        # Pod namespaces are pinned under containerd's state dir, not in the host's /var/run/netns.
        "  netns_mounts_under_state_dir = true",
        "  cdi_spec_dirs = [" + ", ".join(q(str(d)) for d in cdi_dirs) + "]",
        "[plugins.'io.containerd.cri.v1.runtime'.containerd]",
        "  default_runtime_name = 'runc'",
        "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]",
        "  runtime_type = 'io.containerd.runc.v2'",
        "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]",
        f"  BinaryName = {q(str(layout.runc_wrapper))}",
        f"  Root = {q(str(layout.runc_root))}",
        "  SystemdCgroup = false",
        "[plugins.'io.containerd.cri.v1.runtime'.cni]",
        f"  bin_dirs = [{q(str(layout.cni_bin))}]",
        f"  conf_dir = {q(str(layout.cni_conf))}",
        "  max_conf_num = 1",
        *render_registry_config(layout.registry_hosts),
        "[plugins.'io.containerd.grpc.v1.cri']",
        "  stream_server_address = '127.0.0.1'",
        "  stream_server_port = '0'",
    ]
    return "\n".join(lines) + "\n"


def render_kubelet_config(*, layout: NodeLayout, address: str, ca_file: Path) -> str:
    """KubeletConfiguration for a cgroup v1 host without systemd, bound to ``address`` only."""
    config: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,  # these machines are cgroup v1; 1.35+ refuses them unless told otherwise
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "imageServiceEndpoint": f"unix://{layout.containerd_socket}",
        "address": address,
        "healthzBindAddress": address,
        "readOnlyPort": 0,
        "tlsCertFile": str(layout.pki / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(layout.pki / "kubelet-serving.key"),
        "volumePluginDir": str(layout.root / "volume-plugins"),
        "podLogsDir": str(layout.pod_logs),
        # The API server presents the cluster's admin certificate (logs, exec); nobody else reaches this address.
        "authentication": {
            "x509": {"clientCAFile": str(ca_file)},
            "webhook": {"enabled": False},
            "anonymous": {"enabled": False},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "makeIPTablesUtilChains": False,
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "failSwapOn": False,
        "protectKernelDefaults": False,
        "resolvConf": "",
        "staticPodPath": "",
        "nodeStatusUpdateFrequency": "10s",
        "syncFrequency": "10s",
    }
    return yaml.safe_dump(config, sort_keys=False)
