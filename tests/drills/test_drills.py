"""Every shipped drill passes against the local control plane, and every drill can fail, saying which step and why."""

from __future__ import annotations

import dataclasses
import html.parser
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakedev.cli.drill import drill_set, shipped_scenario
from fakedev.cli.drill_env import FakedevDrillEnvironment
from harness.cluster.config import DRA_FEATURE_GATES, RUNTIME_CONFIG, ClusterSettings
from harness.cluster.local import LocalCluster, local_cluster
from harness.drills.report import render_html
from harness.drills.runner import DrillResult, run_drills
from harness.drills.scenario import ConditionStep, Scenario, load_scenario, parse_scenario
from harness.errors import ScenarioError

pytestmark = [pytest.mark.cluster, pytest.mark.privileged, pytest.mark.slow]


def _run_drill(cluster: LocalCluster, scenario: Scenario) -> DrillResult:
    (result,) = run_drills(
        [scenario],
        client=cluster.client,
        cluster=cluster,
        progress=lambda _: None,
        env_factory=lambda: FakedevDrillEnvironment(client=cluster.client, kubeconfig=cluster.kubeconfig),
    )
    return result


ALL = drill_set("all")


@pytest.mark.parametrize("name", ALL, ids=ALL)
def test_shipped_drill_passes(local_cluster: LocalCluster, name: str) -> None:
    result = _run_drill(local_cluster, load_scenario(shipped_scenario(name)))
    assert result.outcome == "passed", result.message
    assert all(s.outcome == "passed" for s in result.steps)
    assert result.samples, "the sampler recorded nothing"


def broken_variant(scenario: Scenario) -> tuple[Scenario, int]:
    """The drill with its recovery removed (a fault without recovery) or, without one, a wrong expectation.

    Returns the variant and the index of the step that must fail. Waits after the change get short timeouts so the
    failure comes quickly.
    """
    steps = list(scenario.steps)
    recover = next((i for i, s in enumerate(steps) if s.kind == "recover"), None)
    if recover is not None:
        del steps[recover]
        target = next(i for i in range(recover, len(steps)) if steps[i].kind in ("wait", "assert"))
    else:
        target = max(i for i, s in enumerate(steps) if s.kind == "wait")
        wait = steps[target]
        assert isinstance(wait, ConditionStep)
        steps[target] = dataclasses.replace(wait, condition=_unreachable(dict(wait.condition)))
    steps = [
        dataclasses.replace(s, index=i, timeout=min(s.timeout, 5.0) if i >= target else s.timeout)
        for i, s in enumerate(steps)
    ]
    return dataclasses.replace(scenario, steps=tuple(steps)), target


def _unreachable(cond: dict[str, object]) -> dict[str, object]:
    """A condition no drill workload can meet (its pods sleep for an hour, print fixed lines)."""
    if "pods" in cond:
        return {**cond, "count": int(str(cond.get("count", 0))) + 1}
    if "log" in cond:
        return {**cond, "log": f"{cond['log']} and something never printed"}
    if "slices" in cond:
        return {**cond, "min": 10_000} if "min" in cond or "count" in cond else {**cond, "tainted": not cond["tainted"]}
    if "field" in cond:
        return {**cond, "equals": -1}
    if "claim" in cond:
        return {**cond, "allocated": not cond.get("allocated", True)}
    if "pod" in cond:
        return {"pod": cond["pod"], "phase": "Succeeded"}
    return {**cond, "contains": "a message nobody writes"}


@pytest.mark.parametrize("name", ALL, ids=ALL)
def test_drill_fails_when_its_expectation_is_broken(local_cluster: LocalCluster, name: str) -> None:
    variant, target = broken_variant(load_scenario(shipped_scenario(name)))
    result = _run_drill(local_cluster, variant)
    step = variant.steps[target]
    assert result.outcome == "failed"
    assert result.message.startswith(f"step {target + 1} (line {step.line}) {step.title!r} failed: ")
    assert [s.outcome for s in result.steps][target:] == ["failed"] + ["skipped"] * (len(variant.steps) - target - 1)
    # Whatever the drill broke, the cluster is whole again for the next test.
    local_cluster.wait_ready(timeout=60)


def test_scenario_errors_name_file_line_and_field(tmp_path: Path) -> None:
    bad = (
        "name: x\nexpect: y\nnodes:\n  - {name: a, profile: seed-example}\n"
        "steps:\n  - wait: {pod: p, phase: Running}\n  - fault: set-fire\n"
    )
    with pytest.raises(ScenarioError, match=r"^drill\.yaml:7: steps\[1\]\.fault: unknown fault 'set-fire'"):
        parse_scenario(bad, source="drill.yaml")
    with pytest.raises(ScenarioError, match=r"^d\.yaml:1: : missing required field 'expect'"):
        parse_scenario("name: x\nnodes: []\nsteps: []\n", source="d.yaml")
    with pytest.raises(ScenarioError, match=r"^d\.yaml:3: steps\[0\]\.apply: unknown workload 'nope'"):
        parse_scenario("name: x\nexpect: y\nsteps: [{apply: nope}]\nnodes: []\n", source="d.yaml")


class _Structure(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


@pytest.fixture(scope="module")
def two_results(local_cluster: LocalCluster) -> list[DrillResult]:
    ok = _run_drill(local_cluster, load_scenario(shipped_scenario("unhealthy-gpu-eviction")))
    broken, _ = broken_variant(load_scenario(shipped_scenario("unhealthy-gpu-eviction")))
    return [ok, _run_drill(local_cluster, broken)]


def test_html_report_has_a_section_and_timeline_per_drill(two_results: list[DrillResult]) -> None:
    page = render_html(two_results, title="drills")
    parser = _Structure()
    parser.feed(page)
    sections = [a for t, a in parser.tags if t == "section"]
    svgs = [a for t, a in parser.tags if t == "svg"]
    rects = [t for t, _ in parser.tags if t == "rect"]
    assert len(sections) == 2 and len(svgs) == 2
    assert {a.get("class") for a in svgs} == {"timeline"}
    assert len(rects) >= len(two_results[0].steps)  # a bar per step at least
    assert "1 of 2 drills passed." in page
    assert "device dgx/gpu-" in page  # the unhealthy device got a lane
    assert page.count('class="fault"') >= 3


def test_html_report_renders_in_headless_chromium(two_results: list[DrillResult], tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    report.write_text(render_html(two_results, title="drills"))
    shot = tmp_path / "report.png"
    subprocess.run(
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
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=1280,1400",
            report.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1280, 1400)
    assert len(data) > 50_000  # a page with text, tables and timelines, not a blank screen


@pytest.fixture
def second_cluster() -> Iterator[LocalCluster]:
    """A control plane started separately from the worker's, as a stand-in for "any cluster": without the
    DRAResourcePoolStatus gate (nor DRAPartitionableDevicesType) and without resource.k8s.io/v1alpha3."""
    settings = ClusterSettings(
        # DRAPartitionableDevicesType depends on DRAResourcePoolStatus: kube-apiserver refuses one without the other.
        feature_gates={**DRA_FEATURE_GATES, "DRAResourcePoolStatus": False, "DRAPartitionableDevicesType": False},
        runtime_config={k: v for k, v in RUNTIME_CONFIG.items() if k != "resource.k8s.io/v1alpha3"},
        controllers=tuple(c for c in ClusterSettings().controllers if c != "resourcepoolstatusrequest-controller"),
    )
    # The base goes too once the cluster has stopped (an empty fd-* directory was left per session).
    with (
        tempfile.TemporaryDirectory(prefix="fd-", ignore_cleanup_errors=True) as base,
        local_cluster(base=Path(base), settings=settings) as cluster,
    ):
        yield cluster


def _fakedev_drill(*args: str) -> subprocess.CompletedProcess[str]:
    """``fakedev drill ARGS…`` as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "fakedev", "drill", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ},
    )


def test_drills_run_against_another_cluster_by_kubeconfig(second_cluster: LocalCluster, tmp_path: Path) -> None:
    files = [
        str(shipped_scenario(name))
        for name in ("extended-resource-migration", "apiserver-outage", "matrix/resource-pool-status")
    ]
    out = _fakedev_drill(*files, "--kubeconfig", str(second_cluster.kubeconfig), "--report-dir", str(tmp_path))
    # The pool-status drill checks the cluster and refuses: that is a failure of the run, with the reason.
    assert out.returncode == 1, out.stdout + out.stderr
    assert "extended-resource-migration  PASSED" in out.stdout
    assert "apiserver-outage             BLOCKED" in out.stdout  # localOnly: it stops the control plane's parts
    assert "localOnly: needs the local control plane" in out.stdout
    assert "resource-pool-status         BLOCKED" in out.stdout
    assert (
        "refused: the cluster lacks feature gate DRAResourcePoolStatus (alpha, disabled); feature gate "
        "DRAPartitionableDevicesType (alpha, disabled); API version resource.k8s.io/v1alpha3 (not served)"
    ) in out.stdout
    assert (tmp_path / "report.html").exists() and (tmp_path / "junit.xml").exists()
    assert "| `resource-pool-status` | blocked: refused" in (tmp_path / "matrix.md").read_text()
    report = json.loads((tmp_path / "report.json").read_text())
    migration = next(d for d in report["drills"] if d["name"] == "extended-resource-migration")
    assert migration["outcome"] == "passed" and migration["steps"] and migration["samples"]
    assert all(st["outcome"] == "passed" and st["end"] >= st["start"] for st in migration["steps"])


def test_a_drill_needing_an_unknown_gate_is_refused(local_cluster: LocalCluster) -> None:
    text = shipped_scenario("matrix/partitionable-full-vs-mig").read_text()
    text = text.replace(
        "featureGates: [DRAPartitionableDevices]", "featureGates: [DRAPartitionableDevices, DRATeleport]"
    )
    scenario = parse_scenario(text, source=str(shipped_scenario("matrix/partitionable-full-vs-mig")))
    result = _run_drill(local_cluster, scenario)
    assert result.outcome == "blocked"
    assert result.message == "refused: the cluster lacks feature gate DRATeleport (unknown to this kube-apiserver)"
    assert result.steps == []


def test_drill_command_repeats_and_keeps_the_private_control_planes_logs(tmp_path: Path) -> None:
    """``fakedev drill --repeat 2 --component-verbosity 6``: two named runs; the scheduler's DRA decisions on disk."""
    scenario = str(shipped_scenario("matrix/consumable-capacity-fractional"))
    out = _fakedev_drill(scenario, "--repeat", "2", "--component-verbosity", "6", "--report-dir", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "consumable-capacity-fractional-1  PASSED" in out.stdout
    assert "consumable-capacity-fractional-2  PASSED" in out.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert [d["name"] for d in report["drills"]] == [
        "consumable-capacity-fractional-1",
        "consumable-capacity-fractional-2",
    ]
    scheduler = (tmp_path / "components" / "kube-scheduler.log").read_text()
    # Logged at -v=6 only: the allocation state the DRA plugin gathered, per claim it saw allocated.
    assert "Observed consumed capacity" in scheduler
    assert (tmp_path / "components" / "kube-apiserver.log").stat().st_size > 0


POD_THAT_CANNOT_START = """
name: pod-cannot-start
description: a pod whose container cannot be created; the drill's timeout says why
expect: the wait for the pod fails, quoting the runtime's reason and the CDI devices the container was given
nodes:
  - {name: dgx, profile: dgx-h100, drivers: [nvidia]}
classes:
  - name: gpu
    cel: 'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu"'
workloads:
  first: |
    apiVersion: resource.k8s.io/v1
    kind: ResourceClaim
    metadata: {name: first}
    spec: {devices: {requests: [{name: dev, exactly: {deviceClassName: "{{class:gpu}}"}}]}}
    ---
    apiVersion: v1
    kind: Pod
    metadata: {name: first}
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 1
      nodeSelector: {kubernetes.io/hostname: "{{node:dgx}}"}
      resourceClaims: [{name: dev, resourceClaimName: first}]
      containers: [{name: c, image: busybox, command: [/no/such/program], resources: {claims: [{name: dev}]}}]
steps:
  - {apply: first}
  - {name: the pod runs, wait: {pod: first, phase: Running}, timeout: 10}
"""


def test_a_drill_whose_pod_cannot_start_says_why(local_cluster: LocalCluster, tmp_path: Path) -> None:
    """A wait that times out on a pod the runtime cannot start quotes the runtime, with the CDI devices involved."""
    source = tmp_path / "pod-cannot-start.yaml"
    source.write_text(POD_THAT_CANNOT_START)
    result = _run_drill(local_cluster, parse_scenario(POD_THAT_CANNOT_START, source=str(source)))
    assert result.outcome == "failed"
    step = result.steps[-1]
    assert step.outcome == "failed"
    said = step.message
    assert said.startswith("not within 10s: pod first is Pending, not Running — first: cannot start: container c: "), (
        said
    )
    # runc's words, without its log frame, then the CDI devices the container was given and the specs they came from
    assert (
        "CreateContainerError: runc create failed: runc run failed: unable to start container process: error during "
        'container init: exec: "/no/such/program": stat /no/such/program: no such file or directory'
    ) in said, said
    given = re.search(r"\(container given CDI devices (\S+), (\S+) from CDI spec (\S+), (\S+?)[;)]", said)
    assert given is not None, said
    assert given[1].startswith("k8s.gpu.nvidia.com/claim=") and given[1].endswith("-gpu-0")
    assert given[2].startswith("gpu.nvidia.com/metadata=") and given[2].endswith("_dev")
    assert all(Path(p).suffix in (".json", ".yaml") and "/cdi/" in p for p in (given[3], given[4])), said
    assert f"<td>{html.escape(said)}</td>" in render_html([result], title="drills")
