"""`fakedev node run` as a user starts it: K emulated Nodes with the labels and taints given on the command line,
reporting the runc the emulator really uses, gone quietly on SIGTERM."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from harness.cluster.local import LocalCluster
from harness.cluster.nodes import delete_node
from harness.procs import wait_for
from harness.reaper import reap_all
from harness.runtime.runc import choose_runc, runc_version
from kubeclient import KubeClient
from kubeclient.resources import NODES

pytestmark = [pytest.mark.cluster, pytest.mark.privileged]


def test_node_run_labels_and_taints_every_node(local_cluster: LocalCluster, kube: KubeClient, unique_name: str) -> None:
    tmp_path = Path(tempfile.mkdtemp(prefix="fd-"))  # short: the plugins' Unix sockets live below it
    names = [f"{unique_name}-0", f"{unique_name}-1"]
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "fakedev", "node", "run", "--profile", "seed-example", "--nodes", "2",
            "--node-name", unique_name, "--kubeconfig", str(local_cluster.kubeconfig), "--base", str(tmp_path),
            "--label", "team=ml", "--label", "fakedev.io/fleet=f1",
            "--taint", "fakedev.io/emulated=true:NoSchedule", "--taint", "dedicated:PreferNoSchedule",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        wait_for(
            lambda: all(kube.get_or_none(NODES, n) for n in names),
            timeout=60,
            what="both emulated Nodes",
            abort=lambda: None if proc.poll() is None else AssertionError(proc.communicate()[0][-3000:]),
        )
        for name in names:
            node = kube.get(NODES, name)
            labels = node["metadata"]["labels"]
            assert labels["team"] == "ml" and labels["fakedev.io/fleet"] == "f1"
            assert labels["fakedev.io/emulated"] == "true" and labels["kubernetes.io/hostname"] == name
            assert sorted((t["key"], t.get("value"), t["effect"]) for t in node["spec"]["taints"]) == [
                ("dedicated", None, "PreferNoSchedule"),
                ("fakedev.io/emulated", "true", "NoSchedule"),
            ]
            runtime = node["status"]["nodeInfo"]["containerRuntimeVersion"]
            assert runtime == f"runc://{runc_version(choose_runc().binary)}" and runtime != "runc://unknown"
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=120)[0]
        for name in names:
            delete_node(kube, name=name)
        reap_all(base=tmp_path)
        shutil.rmtree(tmp_path, ignore_errors=True)
    assert proc.returncode == 0, out[-3000:]


def test_a_bad_taint_is_refused_with_the_form_it_wants(local_cluster: LocalCluster) -> None:
    done = subprocess.run(
        [
            sys.executable, "-m", "fakedev", "node", "run", "--profile", "seed-example",
            "--kubeconfig", str(local_cluster.kubeconfig), "--taint", "dedicated=gpu:Sometimes",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "expected KEY[=VALUE]:EFFECT" in done.stderr and "NoExecute" in done.stderr
