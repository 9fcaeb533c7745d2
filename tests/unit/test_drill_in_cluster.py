"""Which faults a cluster running the chart can suffer (plan_in_cluster, over every FaultKind), and a drill whose
faults it cannot suffer coming out BLOCKED before anything is created."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakedev.cli.drill import shipped_scenario
from fakedev.cli.drill_cluster_env import ChartDrillEnvironment
from harness.drills.in_cluster import (
    NEEDS_CONTROL_PLANE,
    NEEDS_NODE,
    InClusterMeans,
    InClusterPlan,
    plan_in_cluster,
)
from harness.drills.report import as_cases, render_html
from harness.drills.runner import DrillRun, run_drills
from harness.drills.scenario import FaultKind, FaultStep, Performer, StepKind, load_scenario
from harness.reports import compute_exit_code, render_console
from kubeclient import KubeClient
from kubeletapi.types import HealthState


def _step(fault: FaultKind, **fields: object) -> FaultStep:
    return FaultStep(index=0, line=1, title=str(fault), kind=StepKind.FAULT, fault=fault, **fields)  # type: ignore[arg-type]


EXPECTED: dict[FaultKind, InClusterMeans] = {
    FaultKind.DRIVER_KILL: InClusterMeans.DELETE_PLUGIN_POD,
    FaultKind.DRIVER_RESTART: InClusterMeans.DELETE_PLUGIN_POD,
    FaultKind.DRIVER_HANG: InClusterMeans.BLOCKED,
    FaultKind.DRIVER_RESUME: InClusterMeans.BLOCKED,
    FaultKind.DRIVER_SOCKET_REMOVE: InClusterMeans.BLOCKED,
    FaultKind.NODE_REBOOT: InClusterMeans.BLOCKED,
    FaultKind.DEVICE_HEALTH: InClusterMeans.CREATE_DEVICE_FAULT,
    FaultKind.PREPARE_FAULT: InClusterMeans.CREATE_DEVICE_FAULT,
    FaultKind.CLEAR_FAULTS: InClusterMeans.DELETE_DEVICE_FAULT,
    FaultKind.TAINT_RULE: InClusterMeans.API,
    FaultKind.TAINT_RULE_REMOVE: InClusterMeans.API,
    FaultKind.APISERVER_STOP: InClusterMeans.BLOCKED,
    FaultKind.APISERVER_START: InClusterMeans.BLOCKED,
    FaultKind.ETCD_STOP: InClusterMeans.BLOCKED,
    FaultKind.ETCD_START: InClusterMeans.BLOCKED,
    FaultKind.NIC_UNPLUG: InClusterMeans.CREATE_DEVICE_FAULT,
    FaultKind.NIC_REPLUG: InClusterMeans.DELETE_DEVICE_FAULT,
}


def test_every_fault_kind_has_a_decision() -> None:
    assert set(EXPECTED) == set(FaultKind)


@pytest.mark.parametrize("fault", list(FaultKind), ids=[f.value for f in FaultKind])
def test_plan_in_cluster(fault: FaultKind) -> None:
    plan = plan_in_cluster(_step(fault))
    assert plan.means is EXPECTED[fault]
    # A blocked step says what is missing; a possible one has nothing to say.
    assert bool(plan.reason) == (plan.means is InClusterMeans.BLOCKED)
    if plan.means is InClusterMeans.BLOCKED:
        assert plan.reason.startswith(f"{fault}: ")
        assert "needs" in plan.reason
    # The API means is the runner's (DeviceTaintRules); every other possible one is the environment's.
    assert (plan.means is InClusterMeans.API) == (fault.performer is Performer.RUNNER and plan.reason == "")


@pytest.mark.parametrize(
    ("fault", "needs"),
    [
        (FaultKind.APISERVER_STOP, NEEDS_CONTROL_PLANE),
        (FaultKind.ETCD_START, NEEDS_CONTROL_PLANE),
        (FaultKind.NODE_REBOOT, NEEDS_NODE),
        (FaultKind.DRIVER_SOCKET_REMOVE, NEEDS_NODE),
    ],
)
def test_blocked_reasons_name_what_is_missing(fault: FaultKind, needs: str) -> None:
    assert plan_in_cluster(_step(fault)) == InClusterPlan(means=InClusterMeans.BLOCKED, reason=f"{fault}: {needs}")


def test_device_health_depends_on_the_state() -> None:
    assert plan_in_cluster(_step(FaultKind.DEVICE_HEALTH, state=HealthState.UNHEALTHY)).means is (
        InClusterMeans.CREATE_DEVICE_FAULT
    )
    assert plan_in_cluster(_step(FaultKind.DEVICE_HEALTH, state=HealthState.HEALTHY)).means is (
        InClusterMeans.DELETE_DEVICE_FAULT
    )
    unknown = plan_in_cluster(_step(FaultKind.DEVICE_HEALTH, state=HealthState.UNKNOWN))
    assert unknown.means is InClusterMeans.BLOCKED
    assert "control socket" in unknown.reason


def test_the_environment_blocks_what_the_plan_blocks() -> None:
    env = ChartDrillEnvironment(client=KubeClient.__new__(KubeClient))
    for fault in FaultKind:
        plan = plan_in_cluster(_step(fault))
        assert env.blocker(_step(fault)) == (plan.reason if plan.means is InClusterMeans.BLOCKED else None)


def _unreachable_client() -> KubeClient:
    """A client whose every call fails: a blocked drill must not touch the cluster at all."""

    class Refusing(KubeClient):
        def __init__(self) -> None:
            pass

        def request(self, *args: object, **kwargs: object) -> object:  # type: ignore[override]
            raise AssertionError("a blocked drill called the API")

    return Refusing()


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("node-reboot", f"node-reboot: {NEEDS_NODE}"),
        ("driver-hang", "driver-hang: needs to signal the plugin process"),
    ],
)
def test_a_drill_with_an_impossible_fault_is_blocked_before_it_starts(name: str, reason: str) -> None:
    scenario = load_scenario(shipped_scenario(name))
    client = _unreachable_client()
    run = DrillRun(
        scenario=scenario, client=client, env=ChartDrillEnvironment(client=client), cluster=None, progress=print
    )
    result = run.run()
    assert result.outcome == "blocked"
    assert reason in result.message
    blocked = [s for s in result.steps if s.outcome == "blocked"]
    assert blocked and all("needs" in s.message for s in blocked)
    assert blocked[0].message.startswith(reason)
    assert {s.outcome for s in result.steps} == {"blocked", "skipped"}
    assert len(result.steps) == len(scenario.steps)


def test_blocked_shows_in_every_report(tmp_path: Path) -> None:
    client = _unreachable_client()
    scenarios = [load_scenario(shipped_scenario(n)) for n in ("node-reboot", "apiserver-outage")]
    results = run_drills(
        scenarios,
        client=client,
        env_factory=lambda: ChartDrillEnvironment(client=client),
        cluster=None,
        progress=lambda _: None,
    )
    assert [r.outcome for r in results] == ["blocked", "blocked"]
    assert NEEDS_CONTROL_PLANE in results[1].message  # localOnly
    console = render_console(as_cases(results), title="t")
    assert "BLOCKED" in console and "2 blocked" in console
    page = render_html(results, title="t")
    assert "0 of 2 drills passed. 2 blocked" in page
    assert compute_exit_code(as_cases(results)) == 1  # not verified is not a pass
