"""Run etcd, kube-apiserver, kube-scheduler and kube-controller-manager on loopback in a run directory."""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from harness.cluster import config as cfg
from harness.cluster.build import BinarySet, cached_binaries
from harness.cluster.pki import create_cluster_pki
from harness.errors import ComponentError, NotReadyError
from harness.procs import Process, RunDir, open_run_dir, start_process, wait_for
from kubeclient.client import Credentials, KubeClient
from kubeclient.resources import NAMESPACES

Progress = Callable[[str], None]
READY_TIMEOUT: Final = 120.0
COMPONENTS: Final = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")


def _quiet(_: str) -> None:
    pass


def _free_ports(count: int) -> list[int]:
    """Ports the kernel considers free right now; all sockets are held until every port is chosen."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _http_ok(url: str, *, insecure_tls: bool = True) -> bool:
    context = ssl.create_default_context()
    if insecure_tls:
        # Scheduler and controller-manager serve self-signed health endpoints on loopback.
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(url, timeout=2, context=context) as resp:
        return bool(resp.status == 200)


@dataclass(kw_only=True)
class LocalCluster:
    """A running control plane; ``stop()`` ends every component and removes the run directory."""

    run: RunDir
    layout: cfg.Layout
    ports: cfg.Ports
    settings: cfg.ClusterSettings
    processes: dict[str, Process] = field(default_factory=dict)
    _client: KubeClient | None = field(default=None, repr=False)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def kubeconfig(self) -> Path:
        return self.layout.kubeconfig

    @property
    def credentials(self) -> Credentials:
        pki = self.layout.pki
        return Credentials(
            server=self.server, ca_file=pki / "ca.crt", cert_file=pki / "admin.crt", key_file=pki / "admin.key"
        )

    @property
    def client(self) -> KubeClient:
        if self._client is None:
            self._client = KubeClient(self.credentials)
        return self._client

    def portable_kubeconfig(self) -> str:
        """The admin kubeconfig with its certificates inline, for a client on another filesystem (the host of a
        container this cluster runs in); its server is 127.0.0.1 at the API server's port."""
        pki = self.layout.pki
        return cfg.render_portable_kubeconfig(
            server=self.server,
            ca_pem=(pki / "ca.crt").read_bytes(),
            cert_pem=(pki / "admin.crt").read_bytes(),
            key_pem=(pki / "admin.key").read_bytes(),
        )

    def dead_component(self) -> ComponentError | None:
        """The first component that has exited, as an error carrying its log tail."""
        for proc in self.processes.values():
            if not proc.alive():
                return proc.failure(f"exited with code {proc.popen.returncode}")
        return None

    def stop_component(self, name: str, *, timeout: float = 10.0) -> None:
        self.processes[name].stop(timeout=timeout)

    def start_component(self, name: str, *, binaries: BinarySet | None = None) -> Process:
        """(Re)start one component with its original flags; used by drills that restart the API server."""
        bins = binaries or cached_binaries()
        proc = start_process(
            name=name,
            argv=_component_args(name, bins=bins, cluster=self),
            run=self.run,
            log_path=self.layout.logs / f"{name}.log",
        )
        self.processes[name] = proc
        return proc

    def wait_ready(self, *, names: tuple[str, ...] = COMPONENTS, timeout: float = READY_TIMEOUT) -> None:
        probes: dict[str, Callable[[], bool]] = {
            "etcd": lambda: _http_ok(f"http://127.0.0.1:{self.ports.etcd_client}/health"),
            "kube-apiserver": lambda: self.client.get_text("/readyz")[0] == 200,
            "kube-scheduler": lambda: _http_ok(f"https://127.0.0.1:{self.ports.scheduler}/healthz"),
            "kube-controller-manager": lambda: _http_ok(f"https://127.0.0.1:{self.ports.controller_manager}/healthz"),
        }
        for name in names:
            wait_for(probes[name], timeout=timeout, what=f"{name} to become ready", abort=self.dead_component)
        if "kube-apiserver" in names:
            wait_for(
                lambda: self.client.get_or_none(NAMESPACES, "default") is not None,
                timeout=timeout,
                what="the default namespace",
                abort=self.dead_component,
            )

    def logs(self) -> dict[str, str]:
        return {name: proc.log_tail(lines=60) for name, proc in self.processes.items()}

    def stop(self, *, keep_run_dir: bool = False) -> None:
        # Reverse start order so clients go before the servers they talk to.
        for name in reversed(list(self.processes)):
            self.processes[name].stop(timeout=10.0)
        if self._client is not None:
            self._client.close()
        if keep_run_dir:
            self.run.close()
        else:
            self.run.remove()

    def write_state(self, *, extra: dict[str, object] | None = None) -> None:
        state = {
            "runId": self.run.run_id,
            "runDir": str(self.run.path),
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "pids": {name: proc.pid for name, proc in self.processes.items()},
            "ports": vars(self.ports),
            **(extra or {}),
        }
        tmp = self.layout.state.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.layout.state)


def _component_args(name: str, *, bins: BinarySet, cluster: LocalCluster) -> list[str]:
    layout, ports, settings = cluster.layout, cluster.ports, cluster.settings
    if name == "etcd":
        return cfg.render_etcd_args(binary=bins.path(name), layout=layout, ports=ports)
    renderers = {
        "kube-apiserver": cfg.render_apiserver_args,
        "kube-scheduler": cfg.render_scheduler_args,
        "kube-controller-manager": cfg.render_controller_manager_args,
    }
    return renderers[name](binary=bins.path(name), layout=layout, ports=ports, settings=settings)


def start_local_cluster(
    *,
    settings: cfg.ClusterSettings | None = None,
    binaries: BinarySet | None = None,
    base: Path | None = None,
    progress: Progress = _quiet,
    timeout: float = READY_TIMEOUT,
    attempts: int = 3,
) -> LocalCluster:
    """Start a fresh control plane and wait until every component is ready.

    Ports are picked free just before start; if another process takes one in between, the whole start is retried.
    """
    bins = binaries or cached_binaries()
    last: Exception | None = None
    for attempt in range(1, attempts + 1):
        run = open_run_dir(purpose="cluster", base=base)
        cluster = _prepare(run=run, settings=settings or cfg.ClusterSettings())
        started = time.monotonic()
        try:
            for name in COMPONENTS:
                cluster.start_component(name, binaries=bins)
            for name in COMPONENTS:
                cluster.wait_ready(names=(name,), timeout=timeout)
                progress(f"{name} ready after {time.monotonic() - started:.1f}s")
            return cluster
        except (ComponentError, NotReadyError) as exc:
            last = exc
            logs = "address already in use" in "".join(cluster.logs().values())
            cluster.stop()
            if not logs or attempt == attempts:
                raise
            progress(f"a port was taken during start-up; retrying ({attempt}/{attempts})")
    raise AssertionError(f"unreachable: {last}")


def _prepare(*, run: RunDir, settings: cfg.ClusterSettings) -> LocalCluster:
    layout = cfg.Layout(root=run.path)
    pki = create_cluster_pki(directory=layout.pki)
    p = _free_ports(5)
    apiserver = settings.apiserver_port or p[2]
    ports = cfg.Ports(etcd_client=p[0], etcd_peer=p[1], apiserver=apiserver, scheduler=p[3], controller_manager=p[4])
    server = f"https://127.0.0.1:{ports.apiserver}"
    layout.kubeconfig.write_text(
        cfg.render_kubeconfig(server=server, ca=pki.ca.cert, cert=pki.admin.cert, key=pki.admin.key)
    )
    layout.kubeconfig.chmod(0o600)
    layout.scheduler_config.write_text(cfg.render_scheduler_config(kubeconfig=layout.kubeconfig))
    layout.etcd_data.mkdir(mode=0o700)
    return LocalCluster(run=run, layout=layout, ports=ports, settings=settings)


@contextlib.contextmanager
def local_cluster(
    *,
    settings: cfg.ClusterSettings | None = None,
    binaries: BinarySet | None = None,
    base: Path | None = None,
    progress: Progress = _quiet,
) -> Iterator[LocalCluster]:
    """``with local_cluster() as c: ...`` — a control plane for the duration of the block."""
    cluster = start_local_cluster(settings=settings, binaries=binaries, base=base, progress=progress)
    try:
        yield cluster
    finally:
        cluster.stop()
