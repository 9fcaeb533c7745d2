"""Reading a node's files through the chart's plugin pod: choosing the pod, the exec line, the failure message."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from harness.errors import NodeFilesError
from harness.kubevirt.nodefiles import ExecTarget, explain_exec_failure, render_exec_command
from harness.kubevirt.pluginpod import compute_plugin_pod

TARGET = ExecTarget(namespace="fakedev-system", pod="fakedev-abcde", container="plugin-nvidia", node="n1")


def _pod(name: str, *, node: str, phase: str = "Running", containers: list[dict[str, Any]] | None = None) -> Any:
    return {
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": containers or [{"name": "plugin-nvidia", "args": []}]},
        "status": {"phase": phase},
    }


def test_plugin_pod_on_the_node_with_roots_from_its_arguments() -> None:
    args = ["plugin", "--kubelet-root=/srv/kubelet", "--cdi-dir", "/etc/cdi"]
    pods = [
        _pod("fakedev-other", node="n2"),
        _pod("fakedev-mine", node="n1", containers=[{"name": "sidecar"}, {"name": "plugin-dranet", "args": args}]),
    ]
    plugin = compute_plugin_pod(pods, node="n1", namespace="fakedev-system")
    assert plugin.target == ExecTarget(
        namespace="fakedev-system", pod="fakedev-mine", container="plugin-dranet", node="n1"
    )
    assert plugin.plugins_dir == PurePosixPath("/srv/kubelet/plugins")
    assert plugin.cdi_dir == PurePosixPath("/etc/cdi")


def test_plugin_pod_roots_default_to_the_plugin_defaults() -> None:
    plugin = compute_plugin_pod([_pod("p", node="n1")], node="n1", namespace="ns")
    assert (plugin.kubelet_root, plugin.cdi_dir) == (PurePosixPath("/var/lib/kubelet"), PurePosixPath("/var/run/cdi"))


@pytest.mark.parametrize(
    ("pods", "said"),
    [
        ([], "on that node: none (0 on other nodes)"),
        ([_pod("elsewhere", node="n2")], "on that node: none (1 on other nodes)"),
        ([_pod("starting", node="n1", phase="Pending")], "on that node: starting (Pending)"),
    ],
    ids=["no-pods", "other-nodes-only", "not-running"],
)
def test_no_running_plugin_pod_names_node_namespace_and_what_to_check(pods: list[Any], said: str) -> None:
    with pytest.raises(NodeFilesError) as err:
        compute_plugin_pod(pods, node="n1", namespace="fakedev-system")
    message = str(err.value)
    assert "no Running fakedev plugin pod on node n1" in message
    assert "app.kubernetes.io/name=fakedev in namespace fakedev-system" in message
    assert said in message and "--chart-namespace" in message


def test_a_pod_without_a_plugin_container_is_refused() -> None:
    with pytest.raises(NodeFilesError, match=r"fakedev-system/x on node n1 has no plugin-<schema> container"):
        compute_plugin_pod([_pod("x", node="n1", containers=[{"name": "app"}])], node="n1", namespace="fakedev-system")


def test_exec_line_passes_the_path_as_an_argument_not_in_the_script() -> None:
    path = PurePosixPath("/var/lib/kubelet/plugins/$(reboot)/a b")
    line = render_exec_command(
        kubectl=Path("/bin/kubectl"), kubeconfig=Path("/k"), target=TARGET, script='cat "$1"', path=path
    )
    assert line[:9] == ["/bin/kubectl", "--kubeconfig", "/k", "exec", "-n", "fakedev-system", "fakedev-abcde", "-c",
                        "plugin-nvidia"]  # fmt: skip
    assert line[9:] == ["--", "busybox", "sh", "-c", 'cat "$1"', "sh", str(path)]


def test_exec_failure_names_pod_node_and_what_to_check() -> None:
    stderr = 'Error from server (Forbidden): pods "fakedev-abcde" is forbidden: cannot create resource "pods/exec"\n'
    message = explain_exec_failure(target=TARGET, path=PurePosixPath("/var/run/cdi"), status=1, stderr=stderr)
    assert "cannot read /var/run/cdi through pod fakedev-system/fakedev-abcde (container plugin-nvidia) on node n1" in (
        message
    )
    assert "kubectl exec exited 1: Error from server (Forbidden)" in message
    assert "pods/exec in namespace fakedev-system" in message and "busybox" in message
