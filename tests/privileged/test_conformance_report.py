"""``fakedev conformance --report-dir D`` as a user runs it against a one-device driver: the console table without
tracebacks, JUnit, JSON and an HTML page that headless Chromium renders with each check's clause, need and why."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fakedev.cli.rig import plugin_command
from harness.cluster.local import LocalCluster
from tests.helpers import ONE_DEVICE_PROFILE

pytestmark = [pytest.mark.cluster, pytest.mark.privileged, pytest.mark.slow]

SKIP_SENTENCE = "needs 3 allocatable devices on the node; the driver published 1"


@pytest.fixture(scope="module")
def report_dir(local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("conformance-report")
    (base / "one-device.yaml").write_text(ONE_DEVICE_PROFILE)
    out = base / "report"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fakedev",
            "conformance",
            "--kubeconfig",
            str(local_cluster.kubeconfig),
            "--report-dir",
            str(out),
            *("--only", "registration.handshake", "--only", "prepare.basic", "--only", "prepare.concurrent"),
            "--",
            *plugin_command(profile=str(base / "one-device.yaml")),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert SKIP_SENTENCE in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    return out


def test_the_report_dir_holds_console_junit_json_and_html(report_dir: Path) -> None:
    assert sorted(p.name for p in report_dir.iterdir()) == ["console.txt", "junit.xml", "report.html", "results.json"]
    data = json.loads((report_dir / "results.json").read_text())
    outcomes = {r["id"]: r["outcome"] for r in data["results"]}
    assert outcomes == {"registration.handshake": "passed", "prepare.basic": "passed", "prepare.concurrent": "skipped"}
    basic = next(r for r in data["results"] if r["id"] == "prepare.basic")
    assert basic["sent"].startswith("ResourceClaim ") and "NodePrepareResources → " in basic["received"]
    skipped = ET.fromstring((report_dir / "junit.xml").read_text()).find("testcase[@name='prepare.concurrent']/skipped")
    assert skipped is not None and skipped.get("message") == SKIP_SENTENCE


def _chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            *args,
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_html_report_renders_in_headless_chromium(report_dir: Path, tmp_path: Path) -> None:
    page = (report_dir / "report.html").as_uri()
    shot = tmp_path / "report.png"
    _chromium(f"--screenshot={shot}", "--window-size=1280,1400", page, profile=tmp_path / "profile")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")) == (1280, 1400)
    assert len(data) > 30_000  # tables and text, not a blank page
    dom = _chromium("--dump-dom", page, profile=tmp_path / "profile2").stdout
    assert dom.count('<section class="check"') == 3
    assert SKIP_SENTENCE in dom
    assert "§2 batches per pod run independently" in dom  # the clause prepare.concurrent tests
    assert "NodePrepareResources" in dom  # what was sent and what came back
