"""The chart on the real 1.37 API server: what helm renders is accepted (a server-side dry run), and its RBAC is
enough for the real plugin and no more (the plugin runs on a token of the chart's ServiceAccount; ``kubectl auth
can-i`` answers for what it must not do). The fleet's RBAC likewise: a real ``fakedev fleet run``, with the
StatefulSet's own arguments on a token of the fleet's ServiceAccount, registers its node, runs a pod with a claim
and decommissions it at a scale-down; SubjectAccessReviews for what it must not do."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from fakedev.cli.rig import plugin_command
from harness.cluster.local import LocalCluster
from harness.cluster.nodes import LEASE_NAMESPACE, NodeHeartbeats, delete_node, register_node
from harness.kube.waits import wait_list
from harness.node.dra_client import DraConnection
from harness.node.drivers import DriverContext, render_driver_argv
from harness.procs import wait_for
from harness.reaper import reap_all
from kubeclient import JsonObj, KubeClient
from kubeclient.resources import (
    LEASES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    STATEFUL_SETS,
    Resource,
)
from kubeletapi import DRA_V1_VERSION
from tests.helpers import (
    CHART_DIR,
    CHART_VALUES_DIR,
    EXAMPLE_DRIVER,
    allocated_claim,
    claim_body,
    claim_ref,
    helm_template,
    pod_body,
    run_helm,
    wait_claim_status,
)
from tests.integration.conftest import PluginProcess

pytestmark = pytest.mark.cluster

KUBECTL = Path(sys.executable).parent / "kubectl"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")


def _kubectl(cluster: LocalCluster, *args: str, stdin: str | None = None, check: bool = True) -> str:
    done = subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(cluster.kubeconfig), *args],
        input=stdin,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check:
        assert done.returncode == 0, f"kubectl {' '.join(args)} failed: {done.stderr}"
    return done.stdout


def _token_kubeconfig(cluster: LocalCluster, *, token: str, path: Path) -> Path:
    """A kubeconfig (mode 0600) that speaks to ``cluster`` with ``token`` only."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {"server": cluster.server, "certificate-authority": str(cluster.layout.pki / "ca.crt")},
            }
        ],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "sa"}}],
        "current-context": "c",
    }
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("values", [None, "values-everything.yaml"], ids=["defaults", "everything"])
def test_rendered_chart_is_accepted_by_the_api_server(
    values: str | None, local_cluster: LocalCluster, test_namespace: str
) -> None:
    argv = ["template", "r", str(CHART_DIR), "--namespace", test_namespace, "--include-crds"]
    if values:
        argv += ["--values", str(CHART_VALUES_DIR / values)]
    manifest = run_helm(*argv).stdout
    out = _kubectl(local_cluster, "apply", "--dry-run=server", "-o", "name", "-f", "-", stdin=manifest)
    kinds = {line.split("/")[0] for line in out.splitlines()}
    assert {"daemonset.apps", "clusterrole.rbac.authorization.k8s.io", "deviceclass.resource.k8s.io"} <= kinds
    if values:  # every value changed includes a fleet: its StatefulSet, Service and Roles (one in kube-node-lease)
        assert {"statefulset.apps", "service", "role.rbac.authorization.k8s.io"} <= kinds


@pytest.fixture
def chart_rbac(local_cluster: LocalCluster, kube: KubeClient, test_namespace: str, unique_name: str) -> Iterator[str]:
    """The chart's ServiceAccount, ClusterRole and binding created for real (release ``unique_name``); yields the
    ServiceAccount's name once the API server's authorizer has seen the binding (its RBAC cache follows the objects
    through an informer, so an answer right after the apply may still be "no"). The cluster-scoped objects are
    deleted afterwards."""
    objects = [o for o in helm_template(release=unique_name, namespace=test_namespace) if o["kind"] in RBAC_KINDS]
    assert sorted(o["kind"] for o in objects) == sorted(RBAC_KINDS)
    manifest = yaml.safe_dump_all(objects)
    _kubectl(local_cluster, "apply", "-f", "-", stdin=manifest)
    (account,) = (o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount")
    user = f"system:serviceaccount:{test_namespace}:{account}"
    wait_for(
        lambda: bool(
            kube.create(
                SUBJECT_ACCESS_REVIEWS,
                {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": {"user": user, "resourceAttributes": {"verb": "get", "resource": "nodes"}},
                },
            )["status"].get("allowed")
        ),
        timeout=30,
        what=f"the authorizer to see the chart's ClusterRoleBinding for {user}",
    )
    yield account
    _kubectl(local_cluster, "delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=manifest, check=False)


@pytest.fixture
def profile_node(kube: KubeClient, unique_name: str, node_heartbeats: NodeHeartbeats) -> Iterator[str]:
    register_node(kube, name=unique_name, labels={"fakedev.io/profile": "seed-example"})
    node_heartbeats.add(unique_name)
    yield unique_name
    node_heartbeats.discard(unique_name)
    for s in kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={unique_name}"):
        kube.delete(RESOURCE_SLICES, s["metadata"]["name"])
    delete_node(kube, name=unique_name)


@pytest.fixture
def token_kubeconfig(
    local_cluster: LocalCluster,
    kube: KubeClient,
    test_namespace: str,
    chart_rbac: str,
    profile_node: str,
    short_tmp: Path,
) -> Path:
    """A kubeconfig holding a token of the chart's ServiceAccount bound to a pod on ``profile_node``, as the
    DaemonSet pod's projected token is (it carries the node's name, which the associated-node verbs check); the
    pod itself never runs."""
    holder = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plugin-holder"},
        "spec": {
            "nodeName": profile_node,
            "serviceAccountName": chart_rbac,
            "automountServiceAccountToken": False,
            "containers": [{"name": "c", "image": "fakedev.local/fakedev:none"}],
        },
    }
    kube.create(PODS, holder, namespace=test_namespace)
    token = _kubectl(
        local_cluster,
        "create",
        "token",
        chart_rbac,
        "-n",
        test_namespace,
        "--duration=10m",
        "--bound-object-kind=Pod",
        "--bound-object-name=plugin-holder",
    ).strip()
    return _token_kubeconfig(local_cluster, token=token, path=short_tmp / "sa.kubeconfig")


def test_chart_rbac_is_enough_for_the_plugin(
    token_kubeconfig: Path,
    profile_node: str,
    short_tmp: Path,
    kube: KubeClient,
    test_namespace: str,
    device_class: Callable[..., str],
) -> None:
    root = short_tmp / "sa"
    argv = render_driver_argv(
        plugin_command(profile="dgx-h100", extra=("--profile-from-node-label", "fakedev.io/profile")),
        context=DriverContext(
            node=profile_node, kubelet_root=root / "kubelet", cdi_dir=root / "cdi", kubeconfig=token_kubeconfig
        ),
    )
    root.mkdir()
    plugin = PluginProcess(
        node=profile_node,
        driver=EXAMPLE_DRIVER,
        root=root,
        cdi_dir=root / "cdi",
        log_path=root / "plugin.log",
        argv=argv,
    )
    plugin.start()
    try:
        # Node read (label and owner), slices listed and created: all with the ServiceAccount's token.
        wait_list(
            kube,
            RESOURCE_SLICES,
            field_selector=f"spec.nodeName={profile_node},spec.driver={EXAMPLE_DRIVER}",
            predicate=lambda slices: bool(slices) and all(s["metadata"].get("ownerReferences") for s in slices),
            what="slices published with the ServiceAccount's token",
        )
        claim = allocated_claim(
            kube,
            namespace=test_namespace,
            node=profile_node,
            claim=claim_body(name="c", device_class=device_class(driver=EXAMPLE_DRIVER)),
            pod="p",
        )
        ref = claim_ref(claim)

        async def prepare() -> str:
            conn = DraConnection(endpoint=plugin.dra_socket)
            try:
                return (await conn.prepare([ref], version=DRA_V1_VERSION))[ref.uid].error
            finally:
                await conn.close()

        # Prepare reads the claim and writes status.devices: the claim rules of the ClusterRole.
        assert asyncio.run(prepare()) == ""
        stored: JsonObj = wait_claim_status(kube, "c", namespace=test_namespace)
        assert [d["driver"] for d in stored["status"]["devices"]] == [EXAMPLE_DRIVER]
        assert "forbidden" not in plugin.log().lower()
    finally:
        plugin.stop()


SUBJECT_ACCESS_REVIEWS = Resource(
    group="authorization.k8s.io",
    version="v1",
    plural="subjectaccessreviews",
    kind="SubjectAccessReview",
    namespaced=False,
)

# (verb, group, resource, subresource, name). What the plugin calls, and what it must not be able to do.
Question = tuple[str, str, str, str, str]
ALLOWED: list[Question] = [
    ("get", "", "nodes", "", ""),
    ("list", "resource.k8s.io", "resourceslices", "", ""),
    ("create", "resource.k8s.io", "resourceslices", "", ""),
    ("update", "resource.k8s.io", "resourceslices", "", ""),
    ("delete", "resource.k8s.io", "resourceslices", "", ""),
    ("get", "resource.k8s.io", "resourceclaims", "", ""),
    ("watch", "resource.k8s.io", "resourceclaims", "", ""),
    ("patch", "resource.k8s.io", "resourceclaims", "status", ""),
    ("update", "resource.k8s.io", "resourceclaims", "status", ""),
    ("associated-node:patch", "resource.k8s.io", "resourceclaims", "driver", "gpu.example.com"),
    ("watch", "fakedev.io", "devicefaults", "", ""),
    ("patch", "fakedev.io", "devicefaults", "status", ""),
]
DENIED: list[Question] = [
    ("delete", "", "pods", "", ""),
    ("create", "", "pods", "", ""),
    ("get", "", "secrets", "", ""),
    ("list", "", "secrets", "", ""),
    ("patch", "", "nodes", "", ""),
    ("delete", "", "nodes", "", ""),
    ("update", "", "nodes", "status", ""),
    ("create", "", "serviceaccounts", "token", ""),
    ("watch", "resource.k8s.io", "resourceslices", "", ""),
    ("update", "resource.k8s.io", "resourceclaims", "", ""),
    ("delete", "resource.k8s.io", "resourceclaims", "", ""),
    ("update", "resource.k8s.io", "resourceclaims", "binding", ""),
    ("arbitrary-node:patch", "resource.k8s.io", "resourceclaims", "driver", "gpu.example.com"),
    ("associated-node:patch", "resource.k8s.io", "resourceclaims", "driver", "gpu.nvidia.com"),
    ("create", "resource.k8s.io", "deviceclasses", "", ""),
    ("create", "resource.k8s.io", "devicetaintrules", "", ""),
    ("create", "fakedev.io", "devicefaults", "", ""),
    ("delete", "fakedev.io", "devicefaults", "", ""),
]


def test_chart_rbac_grants_nothing_the_plugin_does_not_call(
    kube: KubeClient, test_namespace: str, chart_rbac: str
) -> None:
    # SubjectAccessReviews, which `kubectl auth can-i --as=system:serviceaccount:NS:SA` sends too, asked directly:
    # kubectl first resolves resource names through discovery, so for a CRD not installed it answers "no" whatever
    # the RBAC says.
    def allowed(question: Question) -> bool:
        verb, group, resource, subresource, name = question
        review = kube.create(
            SUBJECT_ACCESS_REVIEWS,
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": f"system:serviceaccount:{test_namespace}:{chart_rbac}",
                    "groups": [
                        "system:serviceaccounts",
                        f"system:serviceaccounts:{test_namespace}",
                        "system:authenticated",
                    ],
                    "resourceAttributes": {
                        "namespace": test_namespace,
                        "verb": verb,
                        "group": group,
                        "resource": resource,
                        "subresource": subresource,
                        "name": name,
                    },
                },
            },
        )
        return bool(review["status"].get("allowed"))

    answers = {" ".join(filter(None, q)): allowed(q) for q in ALLOWED + DENIED}
    expected = {" ".join(filter(None, q)): q in ALLOWED for q in ALLOWED + DENIED}
    assert answers == expected


def test_kubectl_auth_can_i_says_the_chart_account_cannot_touch_pods_or_secrets(
    local_cluster: LocalCluster, test_namespace: str, chart_rbac: str
) -> None:
    who = f"--as=system:serviceaccount:{test_namespace}:{chart_rbac}"
    for question in (("delete", "pods"), ("get", "secrets"), ("create", "deviceclasses.resource.k8s.io")):
        answer = _kubectl(local_cluster, "auth", "can-i", *question, who, "-n", test_namespace, check=False)
        assert answer.strip() == "no", question
    assert _kubectl(local_cluster, "auth", "can-i", "get", "nodes", who).strip() == "yes"


# -- the fleet's RBAC, on a real `fakedev fleet run` ------------------------------------------------------------------


def _fleet_release(name: str) -> list[str]:
    """A fleet-only release of one replica with one node, its StatefulSet's pod kept Pending (no node matches), no
    metrics server (a port on the test host), no DeviceClass (cluster-scoped; the test brings its own) and no
    uninstall hook (objects are applied with kubectl here, not installed by Helm)."""
    return [
        f"fullnameOverride={name}",
        "plugins.enabled=false",
        "deviceClasses.create=false",
        "fleet.enabled=true",
        "fleet.replicas=1",
        "fleet.nodesPerReplica=1",
        "fleet.profile=seed-example",
        "fleet.schemas={example}",
        "fleet.metrics.port=0",
        "fleet.nodeSelector.fakedev\\.io/nowhere=nowhere",
        "fleet.drainOnUninstall=false",
    ]


@pytest.fixture
def fleet_release(local_cluster: LocalCluster, kube: KubeClient, test_namespace: str) -> Iterator[list[JsonObj]]:
    """The chart's fleet objects created for real; yields them once the authorizer has seen the ClusterRoleBinding.
    The cluster-scoped objects and the Role in kube-node-lease are deleted afterwards."""
    name = f"fc{os.urandom(3).hex()}"
    objects = helm_template(release=name, namespace=test_namespace, sets=_fleet_release(name))
    manifest = yaml.safe_dump_all(objects)
    _kubectl(local_cluster, "apply", "-f", "-", stdin=manifest)  # every object names its namespace
    user = f"system:serviceaccount:{test_namespace}:{name}-fleet"
    question = {"verb": "create", "resource": "nodes"}
    wait_for(
        lambda: bool(
            kube.create(
                SUBJECT_ACCESS_REVIEWS,
                {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": {"user": user, "resourceAttributes": question},
                },
            )["status"].get("allowed")
        ),
        timeout=30,
        what=f"the authorizer to see the fleet's ClusterRoleBinding for {user}",
    )
    try:
        yield objects
    finally:
        for node in kube.list(NODES, label_selector=f"fakedev.io/fleet={name}"):
            delete_node(kube, name=node["metadata"]["name"])
        _kubectl(
            local_cluster,
            "delete",
            "--ignore-not-found",
            "--wait=false",
            "-f",
            "-",
            stdin=manifest,
            check=False,
        )


def test_chart_fleet_rbac_is_enough_for_a_fleet_replica(
    local_cluster: LocalCluster,
    kube: KubeClient,
    test_namespace: str,
    fleet_release: list[JsonObj],
    example_class: str,
    short_tmp: Path,
) -> None:
    (sts,) = (o for o in fleet_release if o["kind"] == "StatefulSet")
    (account,) = (o["metadata"]["name"] for o in fleet_release if o["kind"] == "ServiceAccount")
    fleet = sts["metadata"]["name"].removesuffix("-fleet")
    token = _kubectl(local_cluster, "create", "token", account, "-n", test_namespace, "--duration=10m").strip()
    kubeconfig = _token_kubeconfig(local_cluster, token=token, path=short_tmp / "fleet.kubeconfig")
    base = Path(tempfile.mkdtemp(prefix="fdc-"))  # the pod's emptyDir; short, for the plugins' sockets
    # The StatefulSet's own arguments, as its pod 0 would run them, on the fleet ServiceAccount's token.
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    args: list[str] = []
    for arg in container["args"]:
        arg = arg.replace("$(POD_INDEX)", "0").replace("$(POD_NAMESPACE)", test_namespace)
        if arg == "--in-cluster":
            args += ["--kubeconfig", str(kubeconfig)]
        elif arg.startswith("--base="):
            args.append(f"--base={base}")
        else:
            args.append(arg)
    popen = subprocess.Popen(
        [sys.executable, "-m", "fakedev", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []

    def read() -> None:
        assert popen.stdout is not None
        lines.extend(popen.stdout)

    def exited() -> AssertionError | None:
        return None if popen.poll() is None else AssertionError("replica exited:\n" + "".join(lines)[-4000:])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    node = f"{fleet}-0-0"
    try:
        # Node created, status patched, Lease applied, slices published: with the fleet's token only.
        wait_for(
            lambda: "node(s) ready (slices published)" in "".join(lines),
            timeout=120,
            what="the replica to report its node ready",
            abort=exited,
        )
        assert kube.get(LEASES, node, namespace=LEASE_NAMESPACE)["metadata"]["ownerReferences"][0]["name"] == node
        # A pod on the emulated node: its claim read, prepared (status.devices through resourceclaims/driver on
        # a node the fleet pod is not on), the pod's status written.
        kube.create(
            RESOURCE_CLAIM_TEMPLATES,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "one"},
                "spec": {
                    "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": example_class}}]}}
                },
            },
            namespace=test_namespace,
        )
        pod = pod_body(name="worker", node=node, templates={"gpu": "one"})
        pod["spec"]["tolerations"] = [{"key": "fakedev.io/emulated", "operator": "Exists", "effect": "NoSchedule"}]
        kube.create(PODS, pod, namespace=test_namespace)
        wait_for(
            lambda: (kube.get(PODS, "worker", namespace=test_namespace).get("status") or {}).get("phase") == "Running",
            timeout=60,
            what="the pod on the emulated node to run",
            abort=exited,
        )
        (listed,) = kube.list(RESOURCE_CLAIMS, namespace=test_namespace)
        claim = wait_claim_status(kube, listed["metadata"]["name"], namespace=test_namespace)
        assert [d["driver"] for d in claim["status"]["devices"]] == [EXAMPLE_DRIVER]
        # Scaled to 0, then stopped: the replica reads its StatefulSet and decommissions (pods, slices, Node, Lease).
        kube.patch(STATEFUL_SETS, sts["metadata"]["name"], {"spec": {"replicas": 0}}, namespace=test_namespace)
        popen.send_signal(signal.SIGTERM)
        assert popen.wait(timeout=120) == 0
        reader.join(timeout=10)
        output = "".join(lines)
        assert "stopping: decommission" in output, output[-4000:]
        assert kube.get_or_none(NODES, node) is None
        assert kube.get_or_none(LEASES, node, namespace=LEASE_NAMESPACE) is None
        assert not kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={node}")
        assert kube.get_or_none(PODS, "worker", namespace=test_namespace) is None
        assert "forbidden" not in output.lower(), output[-4000:]
    finally:
        if popen.poll() is None:
            popen.kill()
            popen.wait(timeout=30)
        reader.join(timeout=10)
        assert popen.stdout is not None
        popen.stdout.close()
        reap_all(base=base)
        shutil.rmtree(base, ignore_errors=True)


# (verb, group, resource, subresource, name, namespace): what the fleet's account must not do ("" namespace: the
# test's).
FLEET_DENIED: list[tuple[str, str, str, str, str, str]] = [
    ("get", "", "secrets", "", "", ""),
    ("create", "", "pods", "", "", ""),
    ("update", "", "nodes", "", "", ""),
    ("patch", "", "nodes", "", "", ""),
    ("patch", "coordination.k8s.io", "leases", "", "", "kube-system"),
    ("get", "apps", "statefulsets", "", "other", ""),
    ("update", "apps", "statefulsets", "", "", ""),
    ("update", "resource.k8s.io", "resourceclaims", "", "", ""),
    ("arbitrary-node:patch", "resource.k8s.io", "resourceclaims", "driver", "gpu.nvidia.com", ""),
    ("create", "resource.k8s.io", "deviceclasses", "", "", ""),
    ("create", "fakedev.io", "devicefaults", "", "", ""),
]


def test_chart_fleet_rbac_grants_nothing_else(
    kube: KubeClient, test_namespace: str, fleet_release: list[JsonObj]
) -> None:
    (account,) = (o["metadata"]["name"] for o in fleet_release if o["kind"] == "ServiceAccount")

    def allowed(verb: str, group: str, resource: str, subresource: str, name: str, namespace: str) -> bool:
        review = kube.create(
            SUBJECT_ACCESS_REVIEWS,
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": f"system:serviceaccount:{test_namespace}:{account}",
                    "groups": ["system:serviceaccounts", "system:authenticated"],
                    "resourceAttributes": {
                        "namespace": namespace or test_namespace,
                        "verb": verb,
                        "group": group,
                        "resource": resource,
                        "subresource": subresource,
                        "name": name,
                    },
                },
            },
        )
        return bool(review["status"].get("allowed"))

    assert [q for q in FLEET_DENIED if allowed(*q)] == []
    # The counterparts it has: its own StatefulSet, Leases in kube-node-lease, its driver's arbitrary-node writes.
    (sts,) = (o["metadata"]["name"] for o in fleet_release if o["kind"] == "StatefulSet")
    assert allowed("get", "apps", "statefulsets", "", sts, "")
    assert allowed("patch", "coordination.k8s.io", "leases", "", "", LEASE_NAMESPACE)
    assert allowed("arbitrary-node:patch", "resource.k8s.io", "resourceclaims", "driver", EXAMPLE_DRIVER, "")
