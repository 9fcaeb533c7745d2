"""``fakedev cluster serve``'s pure parts: the readiness line the wait strategies match, node names, the kubeconfig
for the container's host, and the API server's listening address."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from fakedev.cli.cluster_serve import node_names, render_ready_line
from harness.cluster.config import ClusterSettings, Layout, Ports, render_apiserver_args, render_portable_kubeconfig
from harness.docker.clusterspec import KUBECONFIG_PATH, READY_PREFIX, docker_run_flags, sdk_run_options
from harness.image.recipe import CLUSTER_API_PORT


def test_the_ready_line_starts_with_the_documented_prefix() -> None:
    line = render_ready_line(nodes=2, kubeconfig=Path("/var/run/fakedev/kubeconfig"))
    assert line == "fakedev: cluster ready: 2 node(s) with slices; kubeconfig at /var/run/fakedev/kubeconfig"
    assert line.startswith(READY_PREFIX)


def test_nodes_are_numbered_from_zero() -> None:
    assert node_names(2) == ["fakedev-node-0", "fakedev-node-1"]


def test_the_portable_kubeconfig_carries_its_certificates() -> None:
    text = render_portable_kubeconfig(server="https://127.0.0.1:6443", ca_pem=b"CA", cert_pem=b"CERT", key_pem=b"KEY")
    config = yaml.safe_load(text)
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    assert cluster["server"] == "https://127.0.0.1:6443"
    assert base64.b64decode(cluster["certificate-authority-data"]) == b"CA"
    assert base64.b64decode(user["client-certificate-data"]) == b"CERT"
    assert base64.b64decode(user["client-key-data"]) == b"KEY"


def test_the_api_server_listens_where_the_settings_say() -> None:
    ports = Ports(etcd_client=1, etcd_peer=2, apiserver=CLUSTER_API_PORT, scheduler=4, controller_manager=5)
    settings = ClusterSettings(apiserver_bind="0.0.0.0", apiserver_port=CLUSTER_API_PORT)
    args = render_apiserver_args(binary=Path("kube-apiserver"), layout=Layout(root=Path("/r")), ports=ports,
                                 settings=settings)  # fmt: skip
    assert "--bind-address=0.0.0.0" in args
    assert f"--secure-port={CLUSTER_API_PORT}" in args
    default = render_apiserver_args(binary=Path("kube-apiserver"), layout=Layout(root=Path("/r")), ports=ports,
                                    settings=ClusterSettings())  # fmt: skip
    assert "--bind-address=127.0.0.1" in default


def test_the_cluster_container_asks_for_explicit_capabilities_never_privileged() -> None:
    flags = docker_run_flags()
    assert "--privileged" not in flags
    assert [f for f in flags if f.startswith("--cap-add=")] == ["--cap-add=SYS_ADMIN", "--cap-add=NET_ADMIN"]
    options = sdk_run_options(labels={"dev.fakedev.run-id": "x"})
    assert "privileged" not in options
    assert options["cap_add"] == ["SYS_ADMIN", "NET_ADMIN"]
    assert options["security_opt"] == ["seccomp=unconfined", "apparmor=unconfined"]


def test_the_other_languages_documentation_names_every_option_the_provider_uses() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "testcontainers.md").read_text()
    for flag in docker_run_flags():
        assert f"`{flag}`" in text, flag
    assert READY_PREFIX in text
    assert KUBECONFIG_PATH in text
    assert f"{CLUSTER_API_PORT}/tcp" in text
