"""``fakedev conformance --node real``: the suite with a real kubelet v1.37 registering the driver and running the
checks' pods, through the CLI as a user runs it (it starts and stops its own real node)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.cluster.local import LocalCluster
from harness.conformance.checks import CATALOG
from harness.realnode.node import KUBELET_PORTS, port_free

pytestmark = [pytest.mark.cluster, pytest.mark.privileged, pytest.mark.xdist_group(name="realnode")]
ADDRESS = "127.0.0.3"


def _conformance(
    local_cluster: LocalCluster, out: Path, *driver: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    proc = subprocess.run(
        [
            sys.executable, "-m", "fakedev", "conformance", "--node", "real", "--address", ADDRESS,
            "--kubeconfig", str(local_cluster.kubeconfig), "--ca", str(local_cluster.layout.pki),
            "--json", str(out), *driver,
        ],
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


def test_every_check_passes_against_fakedev_under_a_real_kubelet(local_cluster: LocalCluster, tmp_path: Path) -> None:
    proc, report = _conformance(
        local_cluster,
        tmp_path / "fakedev.json",
        "--", sys.executable, "-m", "fakedev", "plugin", "--profile", "seed-example", "--node-name", "{node}",
        "--kubelet-root", "{kubelet_root}", "--cdi-dir", "{cdi_dir}", "--kubeconfig", "{kubeconfig}",
    )  # fmt: skip
    outcomes = {r["id"]: r["outcome"] for r in report["results"]}
    assert outcomes == {c.id: "passed" for c in CATALOG}, [
        (r["id"], r["message"]) for r in report["results"] if r["outcome"] != "passed"
    ]
    assert proc.returncode == 0 and report["node"] == "real" and report["driver"] == "gpu.example.com"
    assert f"real node {ADDRESS}" in proc.stderr  # it started its own node …
    assert all(port_free(ADDRESS, port) for port in KUBELET_PORTS)  # … and stopped it


def test_the_example_driver_gets_the_same_verdicts_as_on_the_emulator(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    """sigs.k8s.io/dra-example-driver v0.4.0: the verdicts tests/privileged/test_conformance.py expects on the node
    emulator, check by check, now with the real kubelet in its place."""
    proc, report = _conformance(local_cluster, tmp_path / "example.json", "--example-driver")
    expected = {c.id: "passed" for c in CATALOG}
    expected |= {"errors.per-claim": "failed", "metadata.kep5304": "skipped", "status.devices": "skipped"}
    assert {r["id"]: r["outcome"] for r in report["results"]} == expected, [
        (r["id"], r["message"]) for r in report["results"] if r["message"]
    ]
    assert proc.returncode == 0  # the failure and the skips are in recommended checks
