"""``fakedev conformance --node real``: the suite with a real kubelet v1.37 registering the driver and running the
checks' pods, through the CLI as a user runs it (it starts and stops its own real node)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fakedev.cli.rig import plugin_arguments, plugin_command
from harness.cluster.local import LocalCluster
from harness.conformance.checks import CATALOG
from harness.realnode.node import KUBELET_PORTS, port_free
from tests.drivers.minidra import MiniMode, build_minidra, minidra_command

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


def _unexpected(report: dict[str, Any], expected: dict[str, str]) -> str:
    """Each check whose verdict differs, with its message and artifacts (the kubelet's log tail among them)."""
    out = []
    for r in report["results"]:
        if r["outcome"] != expected.get(r["id"]):
            out.append(f"== {r['id']}: {r['outcome']} (expected {expected.get(r['id'])}): {r['message']}")
            out.extend(f"-- {name}:\n{text[-3000:]}" for name, text in r.get("details", {}).items())
    return "\n".join(out)


def test_every_check_passes_against_fakedev_under_a_real_kubelet(local_cluster: LocalCluster, tmp_path: Path) -> None:
    proc, report = _conformance(
        local_cluster,
        tmp_path / "fakedev.json",
        "--",
        *plugin_command(profile="seed-example"),
    )
    expected = {c.id: "passed" for c in CATALOG}
    assert {r["id"]: r["outcome"] for r in report["results"]} == expected, _unexpected(report, expected)
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
    assert {r["id"]: r["outcome"] for r in report["results"]} == expected, _unexpected(report, expected)
    assert proc.returncode == 0  # the failure and the skips are in recommended checks


def test_a_plugin_the_real_kubelet_refuses_fails_the_handshake_check_and_blocks_the_rest(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The faulty plugin's ``wrong-type`` defect (a registration type that is not DRAPlugin): the real kubelet
    refuses it, and the suite says so instead of waiting on a registration that will not come."""
    proc, report = _conformance(
        local_cluster,
        tmp_path / "refused.json",
        "--only", "registration.handshake", "--only", "prepare.basic",
        "--", sys.executable, "-m", "tests.drivers.faulty_plugin", "--defect", "wrong-type", "--",
        *plugin_arguments(profile="seed-example"),
    )  # fmt: skip
    results = {r["id"]: r for r in report["results"]}
    assert results["registration.handshake"]["outcome"] == "failed", results
    assert "RegisterPlugin error" in results["registration.handshake"]["message"], results
    assert results["prepare.basic"]["outcome"] == "blocked"
    assert proc.returncode != 0


def test_a_pod_the_real_runtime_cannot_start_is_failed_with_containerds_reason(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The Go mini driver in ``--cdi-missing-device-node`` mode: prepare succeeds, then containerd's CDI injection
    cannot find the device node its spec names. The verdict quotes containerd (through the kubelet's
    CreateContainerError), with the device node and the CDI device ID, as it does on the node emulator."""
    binary = build_minidra(progress=lambda message: print(f"[minidra] {message}", file=sys.stderr, flush=True))
    checks = ("registration.handshake", "slices.published", "prepare.basic", "cdi.valid", "pod.end-to-end")
    proc, report = _conformance(
        local_cluster,
        tmp_path / "missing-node.json",
        *(f"--only={check}" for check in checks),
        "--",
        *minidra_command(binary=binary, mode=MiniMode.MISSING_DEVICE_NODE),
    )
    results = {r["id"]: r for r in report["results"]}
    expected = dict.fromkeys(checks, "passed") | {"pod.end-to-end": "failed"}
    assert {r["id"]: r["outcome"] for r in report["results"]} == expected, _unexpected(report, expected)
    message = results["pod.end-to-end"]["message"]
    assert "cannot start: container " in message and "CreateContainerError" in message, message
    assert re.search(r"/dev/minidra-missing-", message), message  # the device node containerd could not find
    # containerd names only the path; the verdict adds the device that asked for it and its spec, from the node's specs
    assert re.search(
        r"named by CDI device minidra\.fakedev\.example/[\w-]+=[\w.-]+ \(CDI spec /\S+\.json\)", message
    ), message
    assert "Traceback" not in proc.stdout and proc.returncode != 0
