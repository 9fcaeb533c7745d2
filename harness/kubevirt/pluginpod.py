"""The chart's plugin pod on a node: the container ``kubevirt verify`` reads the node's files through.

The chart's DaemonSet pods carry ``app.kubernetes.io/name=fakedev`` and one container per schema
(``plugin-<schema>``); each mounts the kubelet root's ``plugins`` dir and the CDI root at their node paths, and
names both in its arguments (``--kubelet-root=``, ``--cdi-dir=``), so the pod itself says where to look.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Final

from harness.errors import NodeFilesError
from harness.kubevirt.nodefiles import ExecTarget
from kubeclient import KubeClient
from kubeclient.resources import PODS

CHART_LABEL: Final = "app.kubernetes.io/name=fakedev"
DEFAULT_CHART_NAMESPACE: Final = "fakedev-system"
CONTAINER_PREFIX: Final = "plugin-"
DEFAULT_KUBELET_ROOT: Final = PurePosixPath("/var/lib/kubelet")
DEFAULT_CDI_DIR: Final = PurePosixPath("/var/run/cdi")


@dataclass(frozen=True, kw_only=True)
class PluginPod:
    target: ExecTarget
    kubelet_root: PurePosixPath
    cdi_dir: PurePosixPath

    @property
    def plugins_dir(self) -> PurePosixPath:
        return self.kubelet_root / "plugins"


def _flag(args: Sequence[str], name: str) -> str | None:
    """The value of ``--name=V`` or ``--name V`` (the last one wins, as argparse has it)."""
    value = None
    for i, arg in enumerate(args):
        if arg.startswith(f"{name}="):
            value = arg.split("=", 1)[1]
        elif arg == name and i + 1 < len(args):
            value = args[i + 1]
    return value


def compute_plugin_pod(pods: Sequence[Mapping[str, Any]], *, node: str, namespace: str) -> PluginPod:
    """The Running chart pod on ``node`` and its first plugin container, with the roots its arguments name."""
    on_node = [p for p in pods if (p.get("spec") or {}).get("nodeName") == node]
    running = [p for p in on_node if (p.get("status") or {}).get("phase") == "Running"]
    if not running:
        seen = ", ".join(f"{p['metadata']['name']} ({(p.get('status') or {}).get('phase', '?')})" for p in on_node)
        raise NodeFilesError(
            f"no Running fakedev plugin pod on node {node}: pods labelled {CHART_LABEL} in namespace {namespace} "
            + (f"on that node: {seen}" if seen else f"on that node: none ({len(pods)} on other nodes)")
            + ". Check that the chart is installed in that namespace (--chart-namespace) and its DaemonSet "
            "tolerates and selects the node"
        )
    pod = sorted(running, key=lambda p: str(p["metadata"]["name"]))[0]
    name = str(pod["metadata"]["name"])
    containers = [c for c in pod["spec"]["containers"] if str(c["name"]).startswith(CONTAINER_PREFIX)]
    if not containers:
        names = ", ".join(c["name"] for c in pod["spec"]["containers"])
        raise NodeFilesError(
            f"pod {namespace}/{name} on node {node} has no {CONTAINER_PREFIX}<schema> container (it has {names}); "
            "is it the fakedev chart's DaemonSet?"
        )
    container = containers[0]
    args = [str(a) for a in container.get("args") or []]
    return PluginPod(
        target=ExecTarget(namespace=namespace, pod=name, container=str(container["name"]), node=node),
        kubelet_root=PurePosixPath(_flag(args, "--kubelet-root") or DEFAULT_KUBELET_ROOT),
        cdi_dir=PurePosixPath(_flag(args, "--cdi-dir") or DEFAULT_CDI_DIR),
    )


def find_plugin_pod(client: KubeClient, *, node: str, namespace: str) -> PluginPod:
    pods = client.list(PODS, namespace=namespace, label_selector=CHART_LABEL)
    return compute_plugin_pod(pods, node=node, namespace=namespace)
