"""The Helm chart on a real kubelet v1.37 and containerd 2.4: the image imported into the node's containerd, `helm
install`, the DaemonSet's plugin registering through the hostPath sockets, the seed example's pod running on a fake
GPU, a DeviceFault evicting it through the real device-taint-eviction controller, `helm upgrade` to another profile,
`helm uninstall` leaving nothing on the node.

One test, in order: each step needs the state the previous one left (a module of separate tests would hide that).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from harness.cluster.local import LocalCluster
from harness.image.assemble import BuiltImage
from harness.kube.waits import wait_pod_phase
from harness.procs import wait_for
from harness.realnode.node import RealNode
from kubeclient import JsonObj, KubeClient
from kubeclient.resources import DAEMON_SETS, DEVICE_FAULTS, NAMESPACES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from tests.helpers import CHART_DIR, run_helm

pytestmark = [pytest.mark.cluster, pytest.mark.privileged, pytest.mark.xdist_group(name="realnode")]

REAL_NODE_ADDRESS = "127.0.0.3"
RELEASE = "fakedev"
NAMESPACE = "fakedev-system"
SEED = Path(__file__).parents[2] / "fakedev" / "examples" / "seed-extended-resource.yaml"
EXAMPLE = "gpu.example.com"
NVIDIA = "gpu.nvidia.com"


@pytest.fixture(scope="module")
def helm_args(local_cluster: LocalCluster, real_node: RealNode, built_image: BuiltImage) -> Iterator[list[str]]:
    """What every helm call of the test shares: the cluster, the namespace, and the values that fit fakedev's real
    node (its private kubelet root and CDI directory, no kube-proxy, a locally imported image)."""
    real_node.import_image(built_image.archive)
    lay = real_node.layout
    args = [
        "--kubeconfig", str(local_cluster.kubeconfig), "--namespace", NAMESPACE,
        "--set", "image.pullPolicy=Never",
        "--set", f"kubeletRoot={lay.kubelet_root}",
        "--set", f"cdiRoot={lay.cdi_dir}",
        "--set", "apiServer.host=127.0.0.1",
        "--set", f"apiServer.port={local_cluster.ports.apiserver}",
        "--set", f"nodeSelector.kubernetes\\.io/hostname={real_node.name}",
        "--set", "terminationGracePeriodSeconds=5",
    ]  # fmt: skip
    yield args
    run_helm("uninstall", RELEASE, "--kubeconfig", str(local_cluster.kubeconfig), "--namespace", NAMESPACE, check=False)


def _slices(kube: KubeClient, *, node: str, driver: str) -> list[JsonObj]:
    return [
        s for s in kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={node}") if s["spec"]["driver"] == driver
    ]


def _device_names(kube: KubeClient, *, node: str, driver: str) -> set[str]:
    return {d["name"] for s in _slices(kube, node=node, driver=driver) for d in s["spec"].get("devices", [])}


def _plugin_pods(kube: KubeClient) -> list[JsonObj]:
    return kube.list(PODS, namespace=NAMESPACE)


def _running_plugin_pod(kube: KubeClient) -> str:
    pods = [p for p in _plugin_pods(kube) if p.get("status", {}).get("phase") == "Running"]
    ready = [
        p["metadata"]["name"]
        for p in pods
        if all(c.get("ready") for c in p["status"].get("containerStatuses", []))
        and not p["metadata"].get("deletionTimestamp")
    ]
    return ready[0] if len(ready) == 1 else ""


def _plugin_processes() -> list[str]:
    """Command lines of `fakedev plugin` processes started from the image (its entry point)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"/usr/local/bin/fakedev" in argv[:2] and b"plugin" in argv:
            found.append(" ".join(a.decode(errors="replace") for a in argv if a))
    return found


@contextlib.contextmanager
def _explained(kube: KubeClient, real_node: RealNode) -> Iterator[None]:
    """On a failure, add what the plugin containers and the kubelet said (a chart problem shows there)."""
    try:
        yield
    except Exception as exc:
        said = []
        for pod in _plugin_pods(kube):
            for c in pod["spec"]["containers"]:
                path = f"/api/v1/namespaces/{NAMESPACE}/pods/{pod['metadata']['name']}/log?container={c['name']}"
                said.append(f"--- {pod['metadata']['name']}/{c['name']}:\n{kube.get_text(path)[1][-3000:]}")
        kubelet = [line for line in real_node.log_text("kubelet").splitlines() if "plugin" in line.lower()]
        said.append("--- kubelet (plugin lines):\n" + "\n".join(kubelet[-30:]))
        raise AssertionError(f"{exc}\n" + "\n".join(said)) from exc


def _seed_pod(node: str) -> JsonObj:
    """The seed example's pod as-is (an extended-resource request, no claim of its own, `busybox:1.36` on the pod
    network), pinned to the node and printing its environment; its DeviceClass is the chart's `gpu.example.com`."""
    _, pod = yaml.safe_load_all(SEED.read_text())
    spec = pod["spec"]
    spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    spec["terminationGracePeriodSeconds"] = 1
    container = spec["containers"][0]
    container["command"] = ["sh", "-c", "echo device allocated; env | sort; sleep 3600"]
    return dict(pod)


def _allocated_device(kube: KubeClient, *, namespace: str, pod_uid: str) -> tuple[str, str]:
    """The claim the scheduler made for the pod's extended resource (its UID) and the device it got."""
    for claim in kube.list(RESOURCE_CLAIMS, namespace=namespace):
        reserved = {r.get("uid") for r in claim.get("status", {}).get("reservedFor", [])}
        if pod_uid in reserved:
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            return claim["metadata"]["uid"], str(result["device"])
    raise AssertionError(f"no claim reserved for pod {pod_uid}")


def _registered(real_node: RealNode, *, driver: str) -> bool:
    """The kubelet logged a connected registration of ``driver`` (one log line names both)."""
    return any(
        f'driverName="{driver}"' in line and "connected=true" in line
        for line in real_node.log_text("kubelet").splitlines()
    )


def _device_taints(kube: KubeClient, *, node: str, device: str) -> list[JsonObj]:
    return [
        taint
        for s in _slices(kube, node=node, driver=EXAMPLE)
        for d in s["spec"].get("devices", [])
        if d["name"] == device
        for taint in d.get("taints", [])
    ]


def test_the_chart_installs_serves_faults_upgrades_and_uninstalls_on_a_real_kubelet(
    real_node: RealNode, kube: KubeClient, helm_args: list[str], test_namespace: str
) -> None:
    node = real_node.name
    with _explained(kube, real_node):
        # -- install: the DaemonSet's pod runs the image and its plugin registers with the kubelet ---------------------
        run_helm("install", RELEASE, str(CHART_DIR), "--create-namespace", *helm_args)
        assert [d["metadata"]["name"] for d in kube.list(DAEMON_SETS, namespace=NAMESPACE)] == [RELEASE]
        wait_for(
            lambda: _running_plugin_pod(kube) != "", timeout=180, what="the DaemonSet's plugin pod Running and ready"
        )
        wait_for(
            lambda: _registered(real_node, driver=EXAMPLE),
            timeout=60,
            what=f"the kubelet to log the registration of {EXAMPLE}",
        )
        sockets = sorted(p.name for p in (real_node.layout.kubelet_root / "plugins_registry").iterdir())
        assert any(EXAMPLE in name for name in sockets), sockets
        wait_for(lambda: _slices(kube, node=node, driver=EXAMPLE) != [], timeout=60, what="the plugin's slices")
        published = _device_names(kube, node=node, driver=EXAMPLE)
        assert len(published) == 8  # seed-example, the chart's default profile
        assert _plugin_processes(), "no fakedev plugin process from the image"

        # -- a workload: the seed example's pod on a fake GPU --------------------------------------------------------
        pod = kube.create(PODS, _seed_pod(node), namespace=test_namespace)
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        wait_pod_phase(kube, name, namespace=test_namespace, phase="Running", timeout=120)
        wait_for(
            lambda: "GPU_DEVICE_0=" in kube.get_text(f"/api/v1/namespaces/{test_namespace}/pods/{name}/log")[1],
            timeout=30,
            what="the container's environment with the CDI edits",
        )
        claim_uid, device = _allocated_device(kube, namespace=test_namespace, pod_uid=uid)
        assert device in published
        cdi_files = [p.name for p in real_node.layout.cdi_dir.iterdir()]
        assert any(claim_uid in f for f in cdi_files), cdi_files  # written by the plugin in its container

        # -- a DeviceFault: the device turns unhealthy and NoExecute-tainted; the real controller evicts the pod -------
        fault = kube.create(
            DEVICE_FAULTS,
            {
                "apiVersion": "fakedev.io/v1alpha1",
                "kind": "DeviceFault",
                "metadata": {"generateName": "real-node-"},
                "spec": {
                    "nodeName": node,
                    "driver": EXAMPLE,
                    "device": device,
                    "kind": "Unhealthy",
                    "unhealthy": {"message": "XID 79: fallen off the bus", "taintEffect": "NoExecute"},
                },
            },
        )
        fault_name = fault["metadata"]["name"]
        try:
            wait_for(
                lambda: kube.get(DEVICE_FAULTS, fault_name).get("status", {}).get("phase") == "Applied",
                timeout=60,
                what="the DeviceFault applied by the in-cluster plugin",
            )
            # No wait: the plugin writes Applied only once the published slice shows the taint.
            assert [t["effect"] for t in _device_taints(kube, node=node, device=device)] == ["NoExecute"]
            wait_for(
                lambda: kube.get_or_none(PODS, name, namespace=test_namespace) is None,
                timeout=120,
                what="the device-taint-eviction controller to evict the pod",
            )
        finally:
            kube.delete(DEVICE_FAULTS, fault_name)
        wait_for(
            lambda: _device_taints(kube, node=node, device=device) == [],
            timeout=60,
            what="the taint gone with the DeviceFault",
        )
        wait_for(lambda: list(real_node.layout.cdi_dir.iterdir()) == [], timeout=60, what="the claim unprepared")

        # -- upgrade to another profile and schema: the slices are published again ------------------------------------
        before = _running_plugin_pod(kube)
        run_helm(
            "upgrade", RELEASE, str(CHART_DIR), *helm_args, "--set", "profile.default=dgx-h100",
            "--set", "drivers.nvidia.enabled=true", "--set", "drivers.example.enabled=false",
        )  # fmt: skip
        wait_for(
            lambda: _running_plugin_pod(kube) not in ("", before),
            timeout=180,
            what="the upgraded plugin pod Running and ready",
        )
        wanted = {f"gpu-{i}" for i in range(8)}  # dgx-h100's eight full GPUs, among their MIG partitions
        wait_for(
            lambda: wanted <= _device_names(kube, node=node, driver=NVIDIA),
            timeout=90,
            what="the dgx-h100 profile's slices",
        )
        # Only a driver the kubelet registered has its slices removed by the kubelet once the plugin is gone: an
        # uninstall right after the slices appear could beat the registration and leave them for good.
        wait_for(
            lambda: _registered(real_node, driver=NVIDIA),
            timeout=60,
            what=f"the kubelet to log the registration of {NVIDIA}",
        )

        # -- uninstall: no slices, sockets, CDI files or plugin processes stay on the node ----------------------------
        run_helm("uninstall", RELEASE, *helm_args[:4])
        wait_for(lambda: _plugin_pods(kube) == [], timeout=120, what="the plugin pods gone")
        wait_for(lambda: _plugin_processes() == [], timeout=60, what="the plugin processes gone")
        # The kubelet removes a driver's slices once its plugin has been gone for 30 s.
        wait_for(
            lambda: kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={node}") == [],
            timeout=120,
            what="the node's slices removed",
        )
        registry = real_node.layout.kubelet_root / "plugins_registry"
        assert [p.name for p in registry.iterdir()] == []
        assert list((real_node.layout.kubelet_root / "plugins").rglob("*.sock")) == []
        assert list(real_node.layout.cdi_dir.iterdir()) == []
        kube.delete(NAMESPACES, NAMESPACE)
