"""The brief's seed example, unchanged, on `fakedev node run --real --profile seed-example`, checked the way the brief
checks it: kubectl apply, kubectl get pod, kubectl logs saying ``device allocated``, the claim the scheduler made for
the extended resource allocated. Nothing in the YAML is edited: the pod uses the pod network (CNI), the image
``busybox:1.36`` from the node's own registry, and no node selector."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.cluster.local import LocalCluster
from harness.kubevirt.nodefiles import default_kubectl
from harness.procs import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.privileged, pytest.mark.xdist_group(name="realnode")]

ADDRESS = "127.0.0.8"
SEED = Path(__file__).parents[2] / "fakedev" / "examples" / "seed-extended-resource.yaml"
POD = "extended-resource-dra-demo"


@pytest.fixture(scope="module")
def node_run(local_cluster: LocalCluster) -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    """``fakedev node run --real --profile seed-example`` as a user starts it; its output lines as they come."""
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "fakedev", "node", "run", "--real", "--profile", "seed-example",
            "--kubeconfig", str(local_cluster.kubeconfig), "--ca", str(local_cluster.layout.pki),
            "--address", ADDRESS,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    lines: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        lines.extend(line.rstrip("\n") for line in proc.stdout)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        wait_for(
            lambda: any("Ctrl-C stops" in line for line in lines),
            timeout=900,  # the host lock: another real node of this worker may still be stopping
            what="fakedev node run --real to be up",
            abort=lambda: None if proc.poll() is None else AssertionError("\n".join(lines[-40:])),
        )
        yield proc, lines
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        reader.join(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def kubectl(cluster: LocalCluster, *args: str) -> str:
    done = subprocess.run(
        [str(default_kubectl()), "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def test_the_seed_example_runs_unchanged_on_the_real_node(
    node_run: tuple[subprocess.Popen[str], list[str]], local_cluster: LocalCluster
) -> None:
    proc, lines = node_run
    kubectl(local_cluster, "apply", "-f", str(SEED))
    try:
        kubectl(local_cluster, "wait", "--for=condition=Ready", f"pod/{POD}", "--timeout=120s")
        pod: dict[str, Any] = json.loads(kubectl(local_cluster, "get", "pod", POD, "-o", "json"))
        assert pod["spec"]["nodeName"] == ADDRESS
        assert pod["status"]["phase"] == "Running"
        assert not pod["spec"].get("hostNetwork")
        assert pod["status"]["podIP"] != ADDRESS  # its own namespace, an address of the node's pod network
        assert "device allocated" in kubectl(local_cluster, "logs", POD).splitlines()
        claims = json.loads(kubectl(local_cluster, "get", "resourceclaims", "-o", "json"))["items"]
        (claim,) = [c for c in claims if any(o["name"] == POD for o in c["metadata"].get("ownerReferences", []))]
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert result["driver"] == "gpu.example.com"
        assert pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"] == claim["metadata"]["name"]
        assert proc.poll() is None
    finally:
        kubectl(local_cluster, "delete", "-f", str(SEED), "--wait=true", "--timeout=120s")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 0, "\n".join(lines[-40:])
