"""Fuzz the DeviceFault conversion: any object a list or watch could bring (valid ones with fields swapped for any
JSON, or any JSON at all) is a clear one-line error or a correct answer — never a traceback."""

from __future__ import annotations

import datetime
import json
from typing import Any, Final

from hypothesis import given
from hypothesis import strategies as st

from fakedev.errors import DeviceFaultError
from fakedev.plugin.device_faults import (
    DeviceEffect,
    DeviceFaultKind,
    Phase,
    PublishedDevice,
    convert_device_fault,
    parse_device_fault,
    parse_spec,
    plan_outcome,
    render_spec,
    render_status,
)
from tests.fuzz.fuzzing import MARKS, PURE_SECONDS, TEXT, Figures, big_text, fuzz_settings, json_values

pytestmark = MARKS

NODE, DRIVER = "node-a", "gpu.example.com"
DEVICES: Final = {
    "gpu-0": PublishedDevice(name="gpu-0", is_nic=False),
    "nic-0": PublishedDevice(name="nic-0", is_nic=True),
}
NOW: Final = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
ANY: Final = json_values()


def _or_any(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(strategy, strategy, ANY)


TIMES: Final = st.one_of(
    st.sampled_from(["2029-12-31T23:59:59Z", "2030-01-01T00:00:00.123456789+01:00", "9999-12-31T23:59:59-01:00"]),
    st.sampled_from(["0001-01-01T00:00:00+01:00", "2030-02-30T00:00:00Z", "2030-01-01T24:00:00Z", "today"]),
    st.text(TEXT, max_size=40),
)
DELAYS: Final = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from(["1s", "500ms", "1h", "1h0m0.001s", "3600.0001s", "1e3s", "1.s", "", "٣s"]),
    st.floats(),
    st.text(TEXT, max_size=20),
)
MEMBER: Final = _or_any(
    st.fixed_dictionaries(
        {},
        optional={
            "message": _or_any(st.one_of(st.text(TEXT, max_size=40), big_text(limit=2000))),
            "taintEffect": _or_any(st.sampled_from(["NoSchedule", "NoExecute", "None"])),
            "effect": _or_any(st.sampled_from(["NoSchedule", "NoExecute", "None"])),
            "key": _or_any(st.sampled_from(["fakedev.io/fault", "a/b/c", "-x", "k" * 64, "example.com/m"])),
            "value": _or_any(st.sampled_from(["", "v", "-v", "v" * 64])),
            "count": _or_any(st.integers(min_value=-5, max_value=2_000_000)),
            "delay": _or_any(DELAYS),
        },
    )
)
SPECS: Final = st.fixed_dictionaries(
    {},
    optional={
        "nodeName": _or_any(st.sampled_from([NODE, "node-b", "", "n" * 254])),
        "driver": _or_any(st.sampled_from([DRIVER, "dra.net", ""])),
        "device": _or_any(st.sampled_from(["gpu-0", "nic-0", "gpu-99", "", "x" * 64])),
        "kind": _or_any(st.sampled_from([k.value for k in DeviceFaultKind] + ["unhealthy", "Melt"])),
        "until": _or_any(TIMES),
        "unhealthy": MEMBER,
        "taint": MEMBER,
        "failPrepare": MEMBER,
        "slowPrepare": MEMBER,
        "extra": ANY,
    },
)
STATUSES: Final = _or_any(
    st.fixed_dictionaries(
        {},
        optional={
            "phase": _or_any(st.sampled_from([p.value for p in Phase])),
            "observedGeneration": _or_any(st.integers(min_value=-1, max_value=5)),
            "appliedTime": _or_any(TIMES),
            "clearedTime": _or_any(TIMES),
            "error": ANY,
        },
    )
)
OBJECTS: Final = st.one_of(
    st.fixed_dictionaries(
        {
            "metadata": _or_any(
                st.fixed_dictionaries(
                    {"name": _or_any(st.just("f1")), "uid": _or_any(st.just("u1"))},
                    optional={"generation": _or_any(st.integers(min_value=-(2**70), max_value=2**70))},
                )
            ),
            "spec": _or_any(SPECS),
        },
        optional={"status": STATUSES, "apiVersion": _or_any(st.just("fakedev.io/v1alpha1"))},
    ),
    ANY,
)


def _one_line(exc: DeviceFaultError) -> None:
    message = str(exc)
    assert message and "\n" not in message and len(message) < 400, message


@fuzz_settings(examples=300, deadline_seconds=2 * PURE_SECONDS)
@given(obj=OBJECTS)
def test_any_object_converts_to_an_internal_fault_or_a_clear_error(figures: Figures, obj: Any) -> None:
    with figures.example(max_seconds=PURE_SECONDS, max_heap_mb=64):
        try:
            fault = parse_device_fault(obj)
        except DeviceFaultError as exc:
            _one_line(exc)
            return
        if fault.spec is not None:
            assert parse_spec(render_spec(fault.spec)) == fault.spec  # what we would write, we read back the same
        try:
            effect = convert_device_fault(fault, node_name=NODE, driver=DRIVER, devices=DEVICES)
        except DeviceFaultError as exc:
            _one_line(exc)
            effect = None
        else:
            if effect is not None:
                assert fault.spec is not None and (fault.spec.node_name, fault.spec.driver) == (NODE, DRIVER)
            if isinstance(effect, DeviceEffect):
                assert effect.device in DEVICES and (DEVICES[effect.device].is_nic or not effect.needs_nic)
        outcome = plan_outcome(fault, previous=None, node_name=NODE, driver=DRIVER, devices=DEVICES, now=NOW)
        if outcome is None:
            assert (fault.node_name, fault.driver) != (NODE, DRIVER)
            return
        assert (outcome.effect is not None) == (outcome.phase is Phase.APPLIED)
        json.dumps(render_status(outcome))  # the status we would write is JSON
