"""``fakedev torture`` against the worker's control plane: fifty SIGKILLs of the fake plugin, at crash points and
at random moments, recovered from without a violation, and nothing of the run left in the cluster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cluster.local import LocalCluster
from kubeclient import KubeClient
from kubeclient.resources import NAMESPACES, NODES

pytestmark = pytest.mark.cluster


def _torture(*args: str, kubeconfig: Path, out: Path) -> tuple[int, str]:
    argv = [sys.executable, "-m", "fakedev", "torture", "--kubeconfig", str(kubeconfig), "--json", str(out), *args]
    argv += ["--evidence-dir", str(out.parent / "evidence")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    return done.returncode, done.stdout + done.stderr[-6000:]


def test_fifty_kills_break_no_invariant_and_leave_nothing_behind(
    local_cluster: LocalCluster, kube: KubeClient, tmp_path: Path
) -> None:
    out = tmp_path / "torture.json"
    code, output = _torture("--kills", "50", kubeconfig=local_cluster.kubeconfig, out=out)
    assert code == 0, output
    summary = json.loads(out.read_text())
    assert summary["violations"] == []
    assert summary["kills"] == 50
    assert summary["crashPointKills"] > 0 and summary["randomKills"] > 0, output
    assert sum(summary["crashPoints"].values()) == summary["crashPointKills"]
    assert summary["prepares"] > 0 and summary["unprepares"] > 0
    assert f"seed: {summary['seed']}" in output
    assert [n["metadata"]["name"] for n in kube.list(NODES) if n["metadata"]["name"].startswith("torture-")] == []
    left = [n for n in kube.list(NAMESPACES) if n["metadata"]["name"].startswith("torture-")]
    assert all(n["status"]["phase"] == "Terminating" for n in left)  # deleted; the namespace controller finishes
    assert not (tmp_path / "evidence").exists()
