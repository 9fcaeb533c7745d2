"""``fakedev kubevirt verify``: check what KubeVirt's virt-launcher would make of a VMI's DRA devices."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fakedev.cli.args import kubeconfig_path
from harness.kubevirt.verify import (
    COMPUTE_CONTAINER,
    emulated_container_log,
    emulated_node_view,
    find_launcher_pod,
    load_vmi,
    verify_vmi,
)
from harness.node.layout import NodeLayout
from kubeclient import KubeClient
from kubeclient.resources import PODS

VERIFY_HELP = """\
Apply KubeVirt's admission rules for DRA GPUs and host devices to a VMI; find each device's metadata file as
virt-launcher does (direct vs template claim path, exactly one *-metadata.json, the v1alpha1 object of the stream,
exactly one device per request, mdevUUID before pciBusID, the BDF pattern) in the compute container's view rebuilt
from the node's CDI edits; render the libvirt <hostdev> XML; cross-check it with the ResourceSlice, the claim's
allocation, sysfs (vfio-pci binding, IOMMU group, mdev) and the CDI device nodes (/dev/vfio/<group>). When the
launcher pod's compute container ran the stand-in image, its output is compared too. Exit status 1 on any
violation.
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
    v.add_argument("--json", action="store_true", help="print the findings as JSON")
    v.set_defaults(handler=_verify)


def _verify(args: argparse.Namespace) -> int:
    client = KubeClient.from_kubeconfig(kubeconfig_path(args.kubeconfig, command="kubevirt verify"))
    vmi = load_vmi(args.vmi)
    namespace = (vmi.get("metadata") or {}).get("namespace") or "default"
    pod = client.get(PODS, args.pod, namespace=namespace) if args.pod else find_launcher_pod(client, vmi=vmi)
    node = pod["spec"].get("nodeName")
    if not node and args.node_root is None:
        print(f"fakedev kubevirt verify: pod {pod['metadata']['name']} is not on a node yet", file=sys.stderr)
        return 1
    layout = (
        NodeLayout(name=node or "", root=args.node_root)
        if args.node_root is not None
        else NodeLayout.for_node(node, base=args.base)
    )
    names = [c["name"] for c in pod["spec"]["containers"]]
    container = COMPUTE_CONTAINER if COMPUTE_CONTAINER in names else names[0]
    log = emulated_container_log(layout, pod=pod, container=container)
    report = verify_vmi(vmi=vmi, client=client, node=emulated_node_view(layout), pod=pod, container_output=log)
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
