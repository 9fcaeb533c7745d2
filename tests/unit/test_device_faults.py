"""DeviceFault objects → the internal faults a plugin applies, outcomes, statuses, and folding faults together."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from fakedev.errors import DeviceFaultError
from fakedev.faults import CallFault
from fakedev.plugin.device_faults import (
    DeviceEffect,
    DeviceFaultKind,
    Phase,
    PrepareEffect,
    PublishedDevice,
    TaintSpec,
    combine_device_states,
    convert_device_fault,
    delay_seconds,
    merge_prepare_fault,
    parse_device_fault,
    parse_spec,
    plan_outcome,
    render_spec,
    render_status,
)
from kubeclient.values import TaintEffect
from kubeletapi.types import Health

NODE, DRIVER = "node-a", "gpu.example.com"
DEVICES = {
    "gpu-0": PublishedDevice(name="gpu-0", is_nic=False),
    "nic-0": PublishedDevice(name="nic-0", is_nic=True),
}
NOW = datetime.datetime(2030, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)


def _obj(*, generation: int = 1, status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "fakedev.io/v1alpha1",
        "kind": "DeviceFault",
        "metadata": {"name": "f1", "uid": "u1", "generation": generation},
        "spec": {"nodeName": NODE, "driver": DRIVER, **spec},
    }
    if status is not None:
        doc["status"] = status
    return doc


def _convert(**spec: Any) -> DeviceEffect | PrepareEffect | None:
    return convert_device_fault(parse_device_fault(_obj(**spec)), node_name=NODE, driver=DRIVER, devices=DEVICES)


@pytest.mark.parametrize(
    ("spec", "effect"),
    [
        (
            {"kind": "Unhealthy", "device": "gpu-0", "unhealthy": {"message": "XID 79"}},
            DeviceEffect(device="gpu-0", health=Health.UNHEALTHY, message="XID 79", taint=None, needs_nic=False),
        ),
        (
            {"kind": "Unhealthy", "device": "gpu-0"},
            DeviceEffect(
                device="gpu-0", health=Health.UNHEALTHY, message="DeviceFault f1", taint=None, needs_nic=False
            ),
        ),
        (
            {"kind": "Unhealthy", "device": "gpu-0", "unhealthy": {"message": "XID 79", "taintEffect": "NoExecute"}},
            DeviceEffect(
                device="gpu-0",
                health=Health.UNHEALTHY,
                message="XID 79",
                taint=TaintSpec(effect=TaintEffect.NO_EXECUTE, key="fakedev.io/unhealthy", value="XID-79"),
                needs_nic=False,
            ),
        ),
        (
            {"kind": "Taint", "device": "gpu-0", "taint": {"effect": "NoSchedule"}},
            DeviceEffect(
                device="gpu-0",
                health=Health.HEALTHY,
                message="",
                taint=TaintSpec(effect=TaintEffect.NO_SCHEDULE, key="fakedev.io/fault", value=""),
                needs_nic=False,
            ),
        ),
        (
            {"kind": "NicDown", "device": "nic-0"},
            DeviceEffect(
                device="nic-0",
                health=Health.UNHEALTHY,
                message="link down (DeviceFault f1)",
                taint=TaintSpec(effect=TaintEffect.NO_EXECUTE, key="fakedev.io/unhealthy", value="nic-link-down"),
                needs_nic=True,
            ),
        ),
        (
            {"kind": "FailPrepare", "failPrepare": {"count": 3}},
            PrepareEffect(delay_seconds=0.0, fail_times=3, error="injected fault"),
        ),
        (
            {"kind": "SlowPrepare", "slowPrepare": {"delay": "1m1.5s"}},
            PrepareEffect(delay_seconds=61.5, fail_times=0, error="injected fault"),
        ),
    ],
    ids=["unhealthy", "unhealthy-default-message", "unhealthy-tainted", "taint", "nic-down", "fail", "slow"],
)
def test_each_kind_converts_to_its_internal_fault(spec: dict[str, Any], effect: DeviceEffect | PrepareEffect) -> None:
    assert _convert(**spec) == effect


@pytest.mark.parametrize(
    ("node", "driver"), [("node-b", DRIVER), (NODE, "gpu.nvidia.com")], ids=["other-node", "other-driver"]
)
def test_a_fault_for_another_plugin_converts_to_nothing(node: str, driver: str) -> None:
    fault = parse_device_fault(_obj(kind="Unhealthy", device="gpu-9") | {})
    assert convert_device_fault(fault, node_name=node, driver=driver, devices=DEVICES) is None
    assert plan_outcome(fault, previous=None, node_name=node, driver=driver, devices=DEVICES, now=NOW) is None


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"kind": "Unhealthy", "device": "gpu-9"}, "publishes no device 'gpu-9'"),
        ({"kind": "NicUnplug", "device": "gpu-0"}, "gpu-0 is not a NIC"),
        ({"kind": "Taint", "device": "gpu-0"}, "spec.taint: is required when kind is Taint"),
        ({"kind": "FailPrepare", "failPrepare": {"count": 0}}, "spec.failPrepare.count: must be a whole number"),
        ({"kind": "FailPrepare", "failPrepare": {"count": True}}, "spec.failPrepare.count"),
        ({"kind": "FailPrepare", "failPrepare": {"count": 1, "message": ""}}, "must not be empty"),
        ({"kind": "SlowPrepare", "slowPrepare": {"delay": "61m"}}, "spec.slowPrepare.delay"),
        ({"kind": "SlowPrepare", "slowPrepare": {"delay": -1}}, "spec.slowPrepare.delay"),
        ({"kind": "Unhealthy"}, "spec.device: is required when kind is Unhealthy"),
        ({"kind": "SlowPrepare", "device": "gpu-0", "slowPrepare": {"delay": 1}}, "spec.device: must not be set"),
        ({"kind": "NicDown", "device": "nic-0", "taint": {"effect": "NoSchedule"}}, "spec.taint: may be set only"),
        ({"kind": "Taint", "device": "gpu-0", "taint": {"effect": "None"}}, "must be NoSchedule or NoExecute"),
        ({"kind": "Taint", "device": "gpu-0", "taint": {"effect": "NoSchedule", "key": "a b"}}, "qualified name"),
        ({"kind": "NicDown", "device": "nic-0", "until": "2030-01-01"}, "spec.until: not an RFC 3339 time"),
        ({"kind": "NicDown", "device": "nic-0", "color": "red"}, "unknown field(s) 'color'"),
        ({"kind": "Explode", "device": "gpu-0"}, "spec.kind: must be one of Unhealthy"),
    ],
    ids=[
        "unknown-device",
        "not-a-nic",
        "member-missing",
        "count-zero",
        "count-bool",
        "empty-error",
        "delay-long",
        "delay-negative",
        "device-missing",
        "device-on-prepare",
        "foreign-member",
        "effect-none",
        "taint-key",
        "until-date",
        "unknown-field",
        "unknown-kind",
    ],
)
def test_a_fault_that_cannot_be_applied_is_named_with_its_field(spec: dict[str, Any], error: str) -> None:
    with pytest.raises(DeviceFaultError) as refused:
        _convert(**spec)
    assert error in str(refused.value)
    outcome = plan_outcome(
        parse_device_fault(_obj(**spec)), previous=None, node_name=NODE, driver=DRIVER, devices=DEVICES, now=NOW
    )
    assert outcome is not None and outcome.phase is Phase.FAILED and error in (outcome.error or "")


@pytest.mark.parametrize(
    ("delay", "seconds"),
    [(0, 0.0), (3600, 3600.0), ("500ms", 0.5), ("1h", 3600.0), ("1m30s", 90.0), ("0.25s", 0.25)],
    ids=["zero", "hour-int", "ms", "hour", "compound", "fraction"],
)
def test_delays_read_as_go_durations_or_seconds(delay: int | str, seconds: float) -> None:
    assert delay_seconds(delay) == seconds


@pytest.mark.parametrize("delay", [3601, "1h1s", "-1s", "1d", "1.s", "", True, 1.5, 2**80], ids=str)
def test_delays_out_of_bounds_or_unreadable_are_refused(delay: object) -> None:
    with pytest.raises(ValueError, match="0 to 3600 seconds"):
        delay_seconds(delay)


def test_a_spec_renders_back_to_itself() -> None:
    spec = parse_spec(
        _obj(kind="Unhealthy", device="gpu-0", unhealthy={"message": "m"}, until="2030-01-01T00:00:00.5+01:00")["spec"]
    )
    assert parse_spec(render_spec(spec)) == spec
    assert spec.kind is DeviceFaultKind.UNHEALTHY and spec.until == datetime.datetime(
        2029, 12, 31, 23, 0, 0, 500000, tzinfo=datetime.UTC
    )


def test_until_clears_an_applied_fault_and_keeps_its_applied_time() -> None:
    until = "2030-01-01T12:00:10Z"
    fault = parse_device_fault(_obj(kind="Unhealthy", device="gpu-0", until=until))
    applied = plan_outcome(fault, previous=None, node_name=NODE, driver=DRIVER, devices=DEVICES, now=NOW)
    assert applied is not None and applied.phase is Phase.APPLIED
    later = NOW + datetime.timedelta(seconds=11)
    cleared = plan_outcome(fault, previous=applied, node_name=NODE, driver=DRIVER, devices=DEVICES, now=later)
    assert cleared is not None
    assert render_status(cleared) == {
        "phase": "Cleared",
        "observedGeneration": 1,
        "appliedTime": "2030-01-01T12:00:00Z",
        "clearedTime": "2030-01-01T12:00:11Z",
    }


def test_a_restarted_plugin_adopts_the_status_an_earlier_one_wrote() -> None:
    seen: dict[str, Any] = {"phase": "Applied", "observedGeneration": 2, "appliedTime": "2029-06-01T00:00:00Z"}
    fault = parse_device_fault(_obj(kind="Unhealthy", device="gpu-0", generation=2, status=seen))
    outcome = plan_outcome(fault, previous=None, node_name=NODE, driver=DRIVER, devices=DEVICES, now=NOW)
    assert outcome is not None and dict(render_status(outcome)) == seen
    # A new generation is applied anew.
    edited = parse_device_fault(_obj(kind="Unhealthy", device="gpu-0", generation=3, status=seen))
    again = plan_outcome(edited, previous=outcome, node_name=NODE, driver=DRIVER, devices=DEVICES, now=NOW)
    assert again is not None and again.applied_time == "2030-01-01T12:00:00Z" and again.generation == 3


def test_device_states_combine_health_and_keep_the_strongest_taint() -> None:
    def effect(message: str, effect: TaintEffect | None, health: Health = Health.UNHEALTHY) -> DeviceEffect:
        taint = None if effect is None else TaintSpec(effect=effect, key="k", value=message)
        return DeviceEffect(device="gpu-0", health=health, message=message, taint=taint, needs_nic=False)

    states = combine_device_states(
        [
            ("b", effect("ecc", TaintEffect.NO_SCHEDULE)),
            ("a", effect("xid", None)),
            ("c", effect("", TaintEffect.NO_EXECUTE, Health.HEALTHY)),
        ]
    )
    (state,) = states.values()
    assert (state.health, state.message) == (Health.UNHEALTHY, "xid; ecc")
    assert state.taint is not None and state.taint.effect is TaintEffect.NO_EXECUTE


def test_prepare_faults_add_their_counts_and_keep_the_longest_delay() -> None:
    fail2 = PrepareEffect(delay_seconds=0.0, fail_times=2, error="two")
    fail3 = PrepareEffect(delay_seconds=0.0, fail_times=3, error="three")
    slow = PrepareEffect(delay_seconds=1.5, fail_times=0, error="injected fault")
    first = merge_prepare_fault(CallFault(), active=[fail2], added=[fail2])
    assert (first.fail_times, first.error, first.delay_seconds) == (2, "two", 0.0)
    first.fail_times = 1  # one call failed meanwhile
    second = merge_prepare_fault(first, active=[fail2, fail3, slow], added=[fail3, slow])
    assert (second.fail_times, second.error, second.delay_seconds) == (4, "three", 1.5)
    # The failing faults go: no call fails any more, the slow one still slows.
    third = merge_prepare_fault(second, active=[slow], added=[])
    assert (third.fail_times, third.delay_seconds) == (0, 1.5)
