"""Drill scenarios read into typed steps: each fault kind with its fields and performer, and each rule with its line."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from harness.drills.scenario import (
    ConditionStep,
    FaultKind,
    FaultStep,
    Performer,
    StepKind,
    WorkloadStep,
    load_scenario,
    parse_scenario,
)
from harness.errors import ScenarioError
from kubeclient.values import TaintEffect
from kubeletapi.types import HealthState

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
HEAD = """\
name: x
expect: y
nodes:
  - {name: dgx, profile: seed-example}
  - {name: other, profile: seed-example}
workloads:
  first: |
    apiVersion: v1
    kind: ConfigMap
    metadata: {name: c}
  second: |
    apiVersion: v1
    kind: ConfigMap
    metadata: {name: d}
steps:
"""
FIRST_STEP_LINE = HEAD.count("\n") + 1


def _steps(*lines: str) -> str:
    return HEAD + "".join(f"  {line}\n" for line in lines)


def _only_fault(*lines: str) -> FaultStep:
    (step,) = parse_scenario(_steps(*lines), source="d.yaml").steps
    assert isinstance(step, FaultStep)
    return step


RUNNER_FAULTS = {
    FaultKind.TAINT_RULE,
    FaultKind.TAINT_RULE_REMOVE,
    FaultKind.APISERVER_STOP,
    FaultKind.APISERVER_START,
    FaultKind.ETCD_STOP,
    FaultKind.ETCD_START,
}
MINIMAL_FIELDS = {
    FaultKind.DEVICE_HEALTH: ", device: gpu-0",
    FaultKind.NIC_UNPLUG: ", claim: c",
    FaultKind.NIC_REPLUG: ", claim: c",
    FaultKind.TAINT_RULE: ", driver: gpu.example.com",
}


@pytest.mark.parametrize("kind", list(FaultKind), ids=[k.value for k in FaultKind])
def test_every_fault_kind_parses_and_names_its_performer(kind: FaultKind) -> None:
    step = _only_fault(f"- {{fault: {kind}{MINIMAL_FIELDS.get(kind, '')}}}")
    assert (step.kind, step.fault, step.line) == (StepKind.FAULT, kind, FIRST_STEP_LINE)
    assert step.title == f"fault {kind}"
    expected = Performer.RUNNER if kind in RUNNER_FAULTS else Performer.ENVIRONMENT
    assert kind.performer is expected


def test_device_health_fields_are_typed() -> None:
    step = _only_fault(
        "- name: the GPU goes bad",
        "  recover: device-health",
        "  node: dgx",
        "  driver: gpu.example.com",
        "  claim: c",
        "  request: gpu",
        "  state: Unknown",
        "  taint: NoSchedule",
        "  message: XID 79",
        "  timeout: 5",
    )
    assert step == FaultStep(
        index=0,
        line=FIRST_STEP_LINE,
        title="the GPU goes bad",
        timeout=5.0,
        kind=StepKind.RECOVER,
        fault=FaultKind.DEVICE_HEALTH,
        node="dgx",
        driver="gpu.example.com",
        claim="c",
        request="gpu",
        state=HealthState.UNKNOWN,
        taint=TaintEffect.NO_SCHEDULE,
        message="XID 79",
    )


@pytest.mark.parametrize(
    ("fields", "fail_times", "delay", "error"),
    [
        ("failTimes: 2", 2, None, None),
        ("failTimes: -1, error: GPU fell off", -1, None, "GPU fell off"),
        ("delaySeconds: 1.5", None, 1.5, None),
        ("delaySeconds: 0", None, 0.0, None),
    ],
    ids=["fail-twice", "fail-always", "slow", "no-delay"],
)
def test_prepare_fault_fields_are_typed(fields: str, fail_times: int | None, delay: float | None, error: str) -> None:
    step = _only_fault(f"- {{fault: prepare-fault, node: other, {fields}}}")
    assert (step.node, step.fail_times, step.delay_seconds, step.error) == ("other", fail_times, delay, error)


def test_taint_rule_fields_are_typed() -> None:
    step = _only_fault("- {fault: taint-rule, driver: gpu.example.com, device: gpu-1, rule: m1, effect: None}")
    assert (step.driver, step.device, step.rule, step.effect) == ("gpu.example.com", "gpu-1", "m1", TaintEffect.NONE)
    assert step.node is None and step.claim is None


def test_workload_and_condition_steps_are_typed() -> None:
    apply, delete, wait, check = parse_scenario(
        _steps(
            "- {apply: [first, second]}",
            "- {delete: first}",
            "- {wait: {pod: p, phase: Running}, timeout: 9}",
            "- {assert: {slices: dgx, tainted: false}}",
        ),
        source="d.yaml",
    ).steps
    assert isinstance(apply, WorkloadStep) and isinstance(delete, WorkloadStep)
    assert (apply.kind, apply.workloads, apply.title) == (
        StepKind.APPLY,
        ("first", "second"),
        "apply ['first', 'second']",
    )
    assert (delete.kind, delete.workloads, delete.line) == (StepKind.DELETE, ("first",), FIRST_STEP_LINE + 1)
    assert isinstance(wait, ConditionStep) and isinstance(check, ConditionStep)
    assert (wait.kind, dict(wait.condition), wait.timeout) == (StepKind.WAIT, {"pod": "p", "phase": "Running"}, 9.0)
    assert (check.kind, dict(check.condition)) == (StepKind.ASSERT, {"slices": "dgx", "tainted": False})


@pytest.mark.parametrize(
    ("lines", "line", "error"),
    [
        (["- {fault: device-health, device: gpu-0, state: Sick}"], 0, "steps[0].state: must be one of Healthy, "),
        (["- {fault: device-health, device: gpu-0, state: 1}"], 0, "steps[0].state: must be one of Healthy, "),
        (["- {fault: device-health, device: gpu-0, taint: Now}"], 0, "steps[0].taint: must be one of NoSchedule, "),
        (["- {fault: taint-rule, driver: d, effect: Later}"], 0, "steps[0].effect: must be one of NoSchedule, "),
        (["- {fault: prepare-fault, delaySeconds: -1}"], 0, "steps[0].delaySeconds: must be a finite number of "),
        (["- {fault: prepare-fault, delaySeconds: .inf}"], 0, "steps[0].delaySeconds: must be a finite number of "),
        (["- {fault: prepare-fault, delaySeconds: .nan}"], 0, "steps[0].delaySeconds: must be a finite number of "),
        (["- {fault: prepare-fault, delaySeconds: soon}"], 0, "steps[0].delaySeconds: must be a number"),
        (["- {fault: prepare-fault, failTimes: 1.5}"], 0, "steps[0].failTimes: must be a whole number >= -1"),
        (["- {fault: prepare-fault, failTimes: -2}"], 0, "steps[0].failTimes: must be a whole number >= -1"),
        (["- {fault: prepare-fault, failTimes: true}"], 0, "steps[0].failTimes: must be a whole number >= -1"),
        (["- {fault: prepare-fault, failTimes: two}"], 0, "steps[0].failTimes: must be a whole number >= -1"),
        (["- {fault: prepare-fault, error: 42}"], 0, "steps[0].error: must be a string"),
        (["- {fault: driver-kill, node: 3}"], 0, "steps[0].node: must be a string"),
        (["- {fault: device-health, state: Unhealthy}"], 0, "steps[0].fault: device-health needs device: or claim:"),
        (["- {fault: nic-unplug, node: dgx}"], 0, "steps[0].fault: nic-unplug needs device: or claim:"),
        (["- {fault: taint-rule, effect: NoExecute}"], 0, "steps[0].fault: taint-rule needs driver:"),
        (["- {fault: set-fire}"], 0, "steps[0].fault: unknown fault 'set-fire' (known: driver-kill, "),
        (["- {fault: driver-kill, node: elsewhere}"], 0, "steps[0].node: unknown node 'elsewhere'"),
        (["- {wait: {pod: p}, node: dgx}"], 0, "steps[0].node: only a fault or recover step takes this field"),
        (["- {apply: first, state: Healthy}"], 0, "steps[0].state: only a fault or recover step takes this field"),
        (["- {apply: [first, 3]}"], 0, "steps[0].apply[1]: must be a string"),
        (["- {apply: {first: 1}}"], 0, "steps[0].apply: names a workload (or a list of workloads)"),
        (["- {delete: nope}"], 0, "steps[0].delete: unknown workload 'nope'"),
        (["- {apply: first}", "- name: later", "  fault: device-health", "  state: Bad"], 3, "steps[1].state: must"),
    ],
    ids=[
        "state-unknown",
        "state-number",
        "taint-unknown",
        "effect-unknown",
        "delay-negative",
        "delay-infinite",
        "delay-nan",
        "delay-text",
        "fail-fraction",
        "fail-below-minus-one",
        "fail-bool",
        "fail-text",
        "error-number",
        "node-number",
        "health-without-device",
        "nic-without-device",
        "taint-rule-without-driver",
        "unknown-fault",
        "unknown-node",
        "fault-field-on-wait",
        "fault-field-on-apply",
        "workload-number",
        "workload-mapping",
        "unknown-workload",
        "block-style-line",
    ],
)
def test_bad_steps_name_file_line_and_field(lines: list[str], line: int, error: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(_steps(*lines), source="d.yaml")
    assert str(caught.value).startswith(f"d.yaml:{FIRST_STEP_LINE + line}: {error}"), str(caught.value)


SHIPPED = sorted(str(p.relative_to(SCENARIOS)) for p in SCENARIOS.rglob("*.yaml") if "profiles" not in p.parts)


@pytest.mark.parametrize("name", SHIPPED, ids=SHIPPED)
def test_every_shipped_scenario_reads_into_typed_steps(name: str) -> None:
    scenario = load_scenario(SCENARIOS / name)
    for step in scenario.steps:
        assert isinstance(step, WorkloadStep | ConditionStep | FaultStep)
        assert step.timeout > 0 and math.isfinite(step.timeout)


@pytest.mark.parametrize(
    ("drivers", "parsed"),
    [("[nvidia, dranet]", ("nvidia", "dranet")), ('["nvidia@main", dranet]', ("nvidia@main", "dranet"))],
    ids=["schemas", "pinned-release"],
)
def test_node_drivers_may_pin_a_release(drivers: str, parsed: tuple[str, ...]) -> None:
    text = HEAD.replace("profile: seed-example}", f"profile: dgx-h100, drivers: {drivers}}}", 1)
    scenario = parse_scenario(text + "  - {apply: first}\n", source="d.yaml")
    assert scenario.nodes[0].drivers == parsed


@pytest.mark.parametrize("driver", ["gpu@main", "nvidia@", "nvidia@Main!"], ids=["schema", "empty", "characters"])
def test_unknown_driver_schemas_are_refused(driver: str) -> None:
    text = HEAD.replace("profile: seed-example}", f'profile: dgx-h100, drivers: ["{driver}"]}}', 1)
    with pytest.raises(ScenarioError, match="unknown driver schema"):
        parse_scenario(text + "  - {apply: first}\n", source="d.yaml")
