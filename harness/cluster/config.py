"""Command lines and config files of the control-plane components (pure: nothing here starts or writes)."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import yaml

# Every DRA-related gate of 1.37 that can still be set, alpha ones included. GA-and-locked gates
# (DynamicResourceAllocation, DRAAdminAccess, DRAPrioritizedList, DRAResourceClaimDeviceStatus, DRAExtendedResource,
# DRADeviceTaints, DRADeviceTaintRules) are not listed: setting them only produces warnings.
DRA_FEATURE_GATES: Final[Mapping[str, bool]] = {
    # beta, on by default
    "DRAConsumableCapacity": True,
    "DRADeviceBindingConditions": True,
    "DRAPartitionableDevices": True,
    "DRAResourceClaimGranularStatusAuthorization": True,
    "DRASchedulerFilterTimeout": True,
    "ResourceHealthStatus": True,
    "ResourceHealthStatusMessage": True,
    # beta, off by default
    "DRAWorkloadResourceClaims": True,
    "GenericWorkload": True,
    "DRAFractionalCapacityRange": True,
    # alpha
    "DRAListTypeAttributes": True,
    "DRANodeAllocatableResources": True,
    "DRAOptionalNodeOperations": True,
    "DRADerivedAttributes": True,
    "DRADeviceCompatibilityGroups": True,
    "DRAPartitionableDevicesType": True,
    "DRAResourcePoolStatus": True,
    "SchedulerPreQueueingHints": True,
}

# API versions the gates above need served (a gate without its API version breaks informers).
RUNTIME_CONFIG: Final[Mapping[str, bool]] = {
    "resource.k8s.io/v1alpha3": True,
    "scheduling.k8s.io/v1beta1": True,
}

CONTROLLERS: Final = (
    "resourceclaim-controller",
    "device-taint-eviction-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "resourcepoolstatusrequest-controller",
    # The Helm chart's plugin runs as a DaemonSet and mounts the cluster CA from kube-root-ca.crt.
    "daemonset-controller",
    "root-ca-certificate-publisher-controller",
    # Fleets of emulated nodes run as a StatefulSet (issue 23); the chart drains them before an uninstall with a
    # pre-delete hook Job.
    "statefulset-controller",
    "job-controller",
)

SERVICE_CIDR: Final = "10.0.0.0/24"


@dataclass(frozen=True, kw_only=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    scheduler: int
    controller_manager: int


@dataclass(frozen=True, kw_only=True)
class ClusterSettings:
    """What a user may vary between clusters."""

    feature_gates: Mapping[str, bool] = field(default_factory=lambda: dict(DRA_FEATURE_GATES))
    runtime_config: Mapping[str, bool] = field(default_factory=lambda: dict(RUNTIME_CONFIG))
    controllers: tuple[str, ...] = CONTROLLERS
    verbosity: int = 1
    apiserver_bind: str = "127.0.0.1"
    """Where kube-apiserver listens; a cluster in a container listens on every address so a published port reaches
    it (the other components and clients inside still use 127.0.0.1)."""
    apiserver_port: int | None = None
    """kube-apiserver's port; None: a free one picked at start (a container's is fixed so it can be published)."""


@dataclass(frozen=True, kw_only=True)
class Layout:
    """Paths inside one cluster's run directory."""

    root: Path

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def scheduler_config(self) -> Path:
        return self.root / "kube-scheduler.yaml"

    @property
    def state(self) -> Path:
        return self.root / "cluster.json"


def render_feature_gates(gates: Mapping[str, bool]) -> str:
    return ",".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(gates.items()))


def render_runtime_config(config: Mapping[str, bool]) -> str:
    return ",".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(config.items()))


def render_etcd_args(*, binary: Path, layout: Layout, ports: Ports) -> list[str]:
    client = f"http://127.0.0.1:{ports.etcd_client}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(binary),
        "--name=default",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=default={peer}",
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def render_apiserver_args(*, binary: Path, layout: Layout, ports: Ports, settings: ClusterSettings) -> list[str]:
    pki = layout.pki
    return [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        f"--bind-address={settings.apiserver_bind}",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--cert-dir={pki}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        "--service-account-issuer=https://kubernetes.default.svc",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC",
        "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
        "--allow-privileged=true",
        "--kubelet-preferred-address-types=InternalIP",
        # A real node's kubelet (fakedev node --real) authenticates the API server by this certificate (logs, exec).
        f"--kubelet-client-certificate={pki / 'admin.crt'}",
        f"--kubelet-client-key={pki / 'admin.key'}",
        f"--kubelet-certificate-authority={pki / 'ca.crt'}",
        "--endpoint-reconciler-type=none",
        f"--runtime-config={render_runtime_config(settings.runtime_config)}",
        f"--feature-gates={render_feature_gates(settings.feature_gates)}",
        f"--v={settings.verbosity}",
    ]


def render_scheduler_config(*, kubeconfig: Path) -> str:
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 200, "burst": 400},
        "leaderElection": {"leaderElect": False},
    }
    return yaml.safe_dump(config, sort_keys=False)


def render_scheduler_args(*, binary: Path, layout: Layout, ports: Ports, settings: ClusterSettings) -> list[str]:
    return [
        str(binary),
        f"--config={layout.scheduler_config}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.scheduler}",
        f"--authentication-kubeconfig={layout.kubeconfig}",
        f"--authorization-kubeconfig={layout.kubeconfig}",
        "--authentication-skip-lookup=true",
        f"--feature-gates={render_feature_gates(settings.feature_gates)}",
        f"--v={settings.verbosity}",
    ]


def render_controller_manager_args(
    *, binary: Path, layout: Layout, ports: Ports, settings: ClusterSettings
) -> list[str]:
    pki = layout.pki
    return [
        str(binary),
        f"--kubeconfig={layout.kubeconfig}",
        f"--authentication-kubeconfig={layout.kubeconfig}",
        f"--authorization-kubeconfig={layout.kubeconfig}",
        "--authentication-skip-lookup=true",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.controller_manager}",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        "--use-service-account-credentials=false",
        f"--controllers={','.join(settings.controllers)}",
        f"--feature-gates={render_feature_gates(settings.feature_gates)}",
        "--kube-api-qps=200",
        "--kube-api-burst=400",
        f"--v={settings.verbosity}",
    ]


def render_kubeconfig(*, server: str, ca: Path, cert: Path, key: Path, user: str = "fakedev-admin") -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fakedev", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "fakedev", "context": {"cluster": "fakedev", "user": user}}],
        "current-context": "fakedev",
    }
    return yaml.safe_dump(config, sort_keys=False)


def render_portable_kubeconfig(*, server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes) -> str:
    """A kubeconfig carrying its certificates inline: it works wherever it is copied to (a container's cluster,
    read from the host)."""

    def inline(pem: bytes) -> str:
        return base64.b64encode(pem).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fakedev", "cluster": {"server": server, "certificate-authority-data": inline(ca_pem)}}],
        "users": [
            {
                "name": "fakedev-admin",
                "user": {"client-certificate-data": inline(cert_pem), "client-key-data": inline(key_pem)},
            }
        ],
        "contexts": [{"name": "fakedev", "context": {"cluster": "fakedev", "user": "fakedev-admin"}}],
        "current-context": "fakedev",
    }
    return yaml.safe_dump(config, sort_keys=False)
