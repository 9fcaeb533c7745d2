"""``fakedev torture --nics``: the dranet plugin with the profile's NICs plugged in (network namespaces), killed
over and over; no NIC is left configured by a claim nobody holds, and no namespace of the run survives it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cluster.local import LocalCluster

pytestmark = [pytest.mark.cluster, pytest.mark.privileged]


def test_nic_claims_survive_kills_and_leave_no_address_and_no_namespace(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    out = tmp_path / "torture.json"
    argv = [sys.executable, "-m", "fakedev", "torture", "--nics", "--kills", "15"]
    argv += ["--kubeconfig", str(local_cluster.kubeconfig), "--json", str(out), "--evidence-dir", str(tmp_path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr[-6000:]
    summary = json.loads(out.read_text())
    # The tool itself reports a namespace of its run that outlived the tear-down as a violation.
    assert (summary["violations"], summary["kills"], summary["profile"]) == ([], 15, "nic-only")
