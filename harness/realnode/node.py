"""A real node: kubelet v1.37 and containerd 2 as processes of this machine, registered with a local control plane.

Layout and isolation (each step is one that the first run on these machines showed to be needed):

- a private **mount namespace** (a holder process: ``unshare --mount --propagation slave``) with the node's own
  directories bound over ``/var/lib`` and ``/var/log``: the kubelet writes ``/var/lib/kubelet/device-plugins`` and
  ``/var/log/containers`` whatever its flags say, and every mount it and containerd make (its root dir bound onto
  itself, overlay rootfs, volumes) stays in the namespace and goes with it;
- containerd with private root, state, shim socket dir, runc root, CDI dirs and NRI off; images imported from
  locally made tarballs (no registry);
- the kubelet with ``--hostname-override=<loopback IP>`` and no ``--node-ip`` (the kubelet refuses a loopback
  node IP but takes an IP-shaped host name as the node's InternalIP), a client certificate for
  ``system:node:<ip>`` and a serving certificate from the cluster CA;
- the three sysctls the kubelet sets on start (``vm.overcommit_memory``, ``kernel.panic``,
  ``kernel.panic_on_oops``) are put back as they were;
- stop kills every container task, containerd, the kubelet and the holder, removes the ``kubepods`` cgroups, and
  deletes the Node and its ResourceSlices (nothing else would: a stopped kubelet cannot wipe them).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from harness.cluster.build import NODE_GROUPS, BinarySet, cached_binaries, default_cache_root
from harness.cluster.config import render_kubeconfig
from harness.cluster.nodes import delete_node
from harness.cluster.pki import Authority, CertPair
from harness.errors import ClusterStateError, ComponentError, NotReadyError, RegistryError
from harness.procs import SOURCE_ROOT, Process, RunDir, kill_run_processes, open_run_dir, start_process, wait_for
from harness.realnode.cni_netdevices import render_launcher
from harness.realnode.config import NodeLayout, render_containerd_config, render_kubelet_config
from harness.realnode.hostlock import DEFAULT_LOCK, HostLock
from harness.realnode.images import ImageTarball, ensure_images
from harness.realnode.podnetwork import (
    CONFLIST_NAME,
    NETDEVICES_PLUGIN,
    PLUGINS,
    PodNetwork,
    bridge_name,
    pick_subnet,
    render_conflist,
    route_networks,
)
from harness.realnode.registry.control import RegistryProcess, start_registry, write_registry_hosts
from harness.realnode.registry.names import node_rules
from harness.realnode.runc_wrapper import render_runc_wrapper
from harness.runtime.netns import netlink, netns_path
from kubeclient import KubeClient
from kubeclient.errors import ApiError
from kubeclient.resources import NODES

log = logging.getLogger("harness.realnode")

KERNEL_FLAGS: Final = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")
NETWORK_FLAGS: Final = ("net/ipv4/ip_forward",)
"""Set by the CNI bridge plugin (a gateway bridge turns forwarding on); put back when the node stops."""
CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
START_TIMEOUT: Final = 60.0
KUBELET_PORTS: Final = (10250, 10248)
"""The kubelet's API and healthz ports on the node's address."""


@dataclass(frozen=True, kw_only=True)
class RealNodeSettings:
    binaries: BinarySet
    server: str
    """The API server URL the kubelet talks to."""
    ca: CertPair
    """The cluster CA (certificate and key): the node's client and serving certificates are signed with it."""
    address: str = "127.0.0.1"
    """The node's loopback address, also its name (the kubelet takes an IP-shaped host name as InternalIP)."""
    cache_root: Path
    base: Path | None = None
    extra_cdi_dirs: tuple[Path, ...] = ()
    run_id: str | None = None
    """The run id to use (default: a new one); a caller that makes the node's NIC namespaces first names them
    after it, so the reaper removes them with the node's run."""
    nic_netns: str | None = None
    """The named network namespace the node's NICs live in (its DRA drivers' ``--netns``); runc moves claimed
    interfaces from there into pods, and they go back there when the pod's namespace is torn down."""
    host_lock: Path = DEFAULT_LOCK
    lock_timeout: float = 0.0
    """How long to wait for another real node on this host to stop (0: fail at once, naming it)."""


def settings_for_cluster(
    *, client: KubeClient, ca_dir: Path, address: str, base: Path | None = None, lock_timeout: float = 0.0
) -> RealNodeSettings:
    """A real node for the cluster ``client`` talks to, its certificates signed by the cluster CA in ``ca_dir``."""
    ca = CertPair(cert=ca_dir / "ca.crt", key=ca_dir / "ca.key")
    if not (ca.cert.is_file() and ca.key.is_file()):
        raise ClusterStateError(f"no cluster CA at {ca_dir} (ca.crt and ca.key); give --ca DIR")
    return RealNodeSettings(
        binaries=cached_binaries(groups=NODE_GROUPS),
        server=client.credentials.server,
        ca=ca,
        address=address,
        cache_root=default_cache_root(),
        base=base,
        lock_timeout=lock_timeout,
    )


def port_free(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError:
            return False
    return True


def read_kernel_flags(flags: tuple[str, ...] = KERNEL_FLAGS) -> dict[str, str]:
    return {flag: (Path("/proc/sys") / flag).read_text().strip() for flag in flags}


def write_kernel_flags(values: dict[str, str]) -> None:
    for flag, value in values.items():
        path = Path("/proc/sys") / flag
        if path.read_text().strip() != value:
            path.write_text(value + "\n")


def _write_executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def host_routes() -> list[tuple[str, int]]:
    """Every IPv4 route of the host's main namespace, as (destination, prefix length)."""
    with netlink(None) as ip:
        return [(r.get_attr("RTA_DST") or "", r["dst_len"]) for r in ip.get_routes(family=socket.AF_INET, table=254)]


def remove_bridge(name: str) -> bool:
    """Delete the pod network's bridge from the host namespace (False when there is none)."""
    with netlink(None) as ip:
        found = ip.link_lookup(ifname=name)
        if not found:
            return False
        ip.link("del", index=found[0])
        return True


def remove_kubepods_cgroups(*, root: Path = CGROUP_ROOT) -> int:
    """rmdir every empty ``kubepods`` tree in every hierarchy (deepest first); returns how many were removed."""
    removed = 0
    for hierarchy in [root, *(p for p in root.iterdir() if p.is_dir())] if root.is_dir() else []:
        top = hierarchy / "kubepods"
        if not top.is_dir():
            continue
        for directory in [*sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)), top]:
            with contextlib.suppress(OSError):  # busy (a process is still in it) or gone
                directory.rmdir()
                removed += 1
    return removed


@dataclass(kw_only=True)
class RealNode:
    settings: RealNodeSettings
    run: RunDir = field(init=False)
    layout: NodeLayout = field(init=False)
    processes: dict[str, Process] = field(default_factory=dict)
    _kernel_flags: dict[str, str] = field(default_factory=dict)
    _network_flags: dict[str, str] = field(default_factory=dict)
    network: PodNetwork | None = None
    registry: RegistryProcess | None = None
    _lock: HostLock | None = None
    _client: KubeClient | None = None

    @property
    def name(self) -> str:
        return self.settings.address

    def _binary(self, name: str) -> Path:
        return self.settings.binaries.path(name)

    # -- start ---------------------------------------------------------------------------------------------------

    def start(self, *, client: KubeClient, progress: Callable[[str], None] = lambda _m: None) -> None:
        s = self.settings
        lock = HostLock(path=s.host_lock)
        lock.acquire(owner=f"node {s.address}", timeout=s.lock_timeout, on_wait=progress)
        self._lock = lock
        self._client = client
        try:
            self.run = open_run_dir(purpose="realnode", base=s.base, run_id=s.run_id)
        except BaseException:
            self._release()
            raise
        self.layout = NodeLayout(root=self.run.path, shim_sockets=Path(f"/tmp/fd-shim-{self.run.run_id}"))
        try:
            self._start(client=client, progress=progress)
        except BaseException:
            self.stop()
            raise

    def _start(self, *, client: KubeClient, progress: Callable[[str], None]) -> None:
        s, lay = self.settings, self.layout
        for d in (
            lay.containerd_root, lay.containerd_state, lay.runc_root, lay.cdi_dir, lay.kubelet_root, lay.pki,
            lay.private_var_lib, lay.private_var_log, lay.pod_logs, lay.logs, lay.shim_sockets,
            lay.cni_bin, lay.cni_conf, lay.cni_ipam, lay.netdevice_records, lay.root / "volume-plugins",
        ):  # fmt: skip
            d.mkdir(parents=True, exist_ok=True)
        self._issue_certificates()
        self._write_pod_network()
        pause, busybox = ensure_images(pause_binary=self._binary("pause"), cache_root=s.cache_root)
        progress("registry")
        self.registry = start_registry(run=self.run, rules=node_rules(busybox=busybox.path, pause=pause.path))
        self.processes["registry"] = self.registry.process
        write_registry_hosts(directory=lay.registry_hosts, server=self.registry.server)
        lay.containerd_config.write_text(
            render_containerd_config(layout=lay, sandbox_image=pause.name, cdi_dirs=(lay.cdi_dir, *s.extra_cdi_dirs))
        )
        lay.kubelet_config.write_text(render_kubelet_config(layout=lay, address=s.address, ca_file=s.ca.cert))
        self._kernel_flags = read_kernel_flags()

        progress("mount namespace")
        ready = lay.root / "ns" / "ready"
        holder = start_process(
            name="mount-namespace",
            argv=[
                "unshare", "--mount", "--propagation", "slave", "--", "sh", "-c",
                f"mount --bind {lay.private_var_lib} /var/lib && mount --bind {lay.private_var_log} /var/log "
                f"&& touch {ready} && exec sleep infinity",
            ],
            run=self.run,
        )  # fmt: skip
        self.processes["mount-namespace"] = holder
        wait_for(ready.exists, timeout=10, what="the node's mount namespace", abort=self._dead)
        enter = ["nsenter", "-t", str(holder.pid), "-m", "--"]
        env = {**os.environ, "PATH": f"{self._binary('containerd').parent}:{os.environ.get('PATH', '')}"}

        progress("containerd")
        self.processes["containerd"] = start_process(
            name="containerd",
            argv=[*enter, str(self._binary("containerd")), "--config", str(lay.containerd_config)],
            run=self.run,
            env=env,
        )
        wait_for(lambda: self._ctr("version").returncode == 0, timeout=30, what="containerd", abort=self._dead)
        for image in (pause, busybox):
            self._import(image)

        progress("kubelet")
        # A kubelet that had this address before may take a moment to let go of its ports; say so if it does not.
        wait_for(
            lambda: all(port_free(s.address, port) for port in KUBELET_PORTS),
            timeout=30,
            what=f"ports {', '.join(map(str, KUBELET_PORTS))} on {s.address} to be free (another kubelet there?)",
        )
        self._write_kubeconfig()
        self.processes["kubelet"] = start_process(
            name="kubelet",
            argv=[
                *enter, str(self._binary("kubelet")),
                f"--config={lay.kubelet_config}", f"--kubeconfig={lay.kubelet_kubeconfig}",
                f"--root-dir={lay.kubelet_root}", f"--hostname-override={s.address}", "--v=2",
            ],
            run=self.run,
        )  # fmt: skip
        wait_for(
            lambda: client.get_or_none(NODES, s.address) is not None,
            timeout=START_TIMEOUT,
            what=f"the kubelet to register Node {s.address}",
            abort=self._dead,
        )
        # The kubelet sets its kernel flags while its container manager starts, just before it registers.
        wait_for(
            lambda: self.log_text("kubelet").count("Updating kernel flag") >= self._changed_flags(),
            timeout=10,
            what="the kubelet's kernel flag updates",
        )
        write_kernel_flags(self._kernel_flags)

    def _write_pod_network(self) -> None:
        """runc behind its wrapper, the CNI plugins (links to the cached builds, plus fakedev-netdevices) and the
        node's one network (see podnetwork)."""
        lay, s = self.layout, self.settings
        nic_netns = netns_path(s.nic_netns) if s.nic_netns else None
        _write_executable(
            lay.runc_wrapper,
            render_runc_wrapper(runc=self._binary("runc"), records=lay.netdevice_records, nic_netns=nic_netns),
        )
        for plugin in PLUGINS:
            (lay.cni_bin / plugin).symlink_to(self._binary(plugin))
        _write_executable(
            lay.cni_bin / NETDEVICES_PLUGIN,
            render_launcher(python=sys.executable, sys_path=str(SOURCE_ROOT)),
        )
        subnet = pick_subnet(routes=route_networks(host_routes()))
        self.network = PodNetwork(bridge=bridge_name(self.run.run_id), subnet=subnet)
        self._network_flags = read_kernel_flags(NETWORK_FLAGS)
        (lay.cni_conf / CONFLIST_NAME).write_text(
            render_conflist(
                network=self.network, ipam_dir=lay.cni_ipam, records=lay.netdevice_records, source_netns=nic_netns
            )
        )

    def _changed_flags(self) -> int:
        expected = {"vm/overcommit_memory": "1", "kernel/panic": "10", "kernel/panic_on_oops": "1"}
        return sum(1 for k, v in expected.items() if self._kernel_flags.get(k) != v)

    def _issue_certificates(self) -> None:
        lay, s = self.layout, self.settings
        ca = Authority.load(s.ca)
        ca.issue(
            directory=lay.pki,
            file_stem="kubelet-client",
            common_name=f"system:node:{s.address}",
            organizations=("system:nodes",),
            client=True,
        )
        ca.issue(
            directory=lay.pki,
            file_stem="kubelet-serving",
            common_name=s.address,
            server_ips=(s.address,),
            server_names=("localhost",),
            client=False,
        )

    def _write_kubeconfig(self) -> None:
        lay = self.layout
        lay.kubelet_kubeconfig.write_text(
            render_kubeconfig(
                server=self.settings.server,
                ca=self.settings.ca.cert,
                cert=lay.pki / "kubelet-client.crt",
                key=lay.pki / "kubelet-client.key",
                user=f"system:node:{self.name}",
            )
        )

    def _ctr(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self._binary("ctr")), "--address", str(self.layout.containerd_socket), "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def _import(self, image: ImageTarball) -> None:
        self.import_image(image.path)

    def import_image(self, archive: Path) -> None:
        """Import an image archive (OCI layout or docker archive) into the node's containerd, as a user would with
        ``ctr -n k8s.io images import``: pods then run it with ``imagePullPolicy: Never`` or ``IfNotPresent``. An
        OCI layout is also served by the node's registry under the names it carries, so ``Always`` finds it too."""
        done = self._ctr("images", "import", str(archive), timeout=300)
        if done.returncode != 0:
            raise ComponentError(f"ctr images import {archive}: {done.stderr.strip() or done.stdout.strip()}")
        if self.registry is not None:
            try:
                self.registry.add_archive(archive)
            except RegistryError as exc:  # a docker archive, or one without names: imported, not pullable
                log.info("the node's registry does not serve %s: %s", archive, exc)

    def _dead(self) -> Exception | None:
        for name, proc in self.processes.items():
            if not proc.alive():
                return proc.failure(f"({name}) exited with code {proc.popen.returncode}")
        return None

    def log_text(self, name: str) -> str:
        proc = self.processes.get(name)
        if proc is None:
            return ""
        with contextlib.suppress(OSError):
            return proc.log_path.read_text(errors="replace")
        return ""

    # -- stop ----------------------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Everything goes: container tasks, kubelet, containerd, shims, the namespace and its mounts, cgroups."""
        try:
            self._stop()
        finally:
            self._release()

    def _stop(self) -> None:
        if "containerd" in self.processes and self.processes["containerd"].alive():
            # A wedged containerd must not keep the rest of the node running: what ctr cannot kill, the reaper does.
            with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                self._kill_tasks()
        for name in ("kubelet", "containerd", "registry"):
            if name in self.processes:
                self.processes[name].stop(timeout=15)
        kill_run_processes(self.run.run_id)  # shims and anything else that inherited the run tag
        if "mount-namespace" in self.processes:
            self.processes["mount-namespace"].stop(timeout=5)
        remove_kubepods_cgroups()
        if self.network is not None:
            remove_bridge(self.network.bridge)
        self._forget_node()
        if self._kernel_flags:
            write_kernel_flags(self._kernel_flags)
        if self._network_flags:
            write_kernel_flags(self._network_flags)
        shutil.rmtree(self.layout.shim_sockets, ignore_errors=True)
        self.run.remove()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _forget_node(self) -> None:
        """Delete the Node and its ResourceSlices, as decommissioning a node does: a stopped kubelet cannot wipe its
        slices, and a Node that stays Ready-looking (no node-lifecycle controller here) would keep attracting pods
        and allocations to devices nobody serves."""
        if self._client is None:
            return
        with contextlib.suppress(ApiError, OSError):
            delete_node(self._client, name=self.settings.address)

    def _kill_tasks(self) -> None:
        listing = self._ctr("tasks", "list", "--quiet", timeout=20)
        for task in listing.stdout.split():
            self._ctr("tasks", "kill", "--signal", "SIGKILL", task, timeout=20)
        with contextlib.suppress(NotReadyError):  # tasks exit asynchronously after SIGKILL; delete forces the rest
            wait_for(
                lambda: not self._ctr("tasks", "list", "--quiet", timeout=20).stdout.split(),
                timeout=10,
                what="container tasks to exit",
                interval=0.2,
            )
        for task in listing.stdout.split():
            self._ctr("tasks", "delete", "--force", task, timeout=20)
