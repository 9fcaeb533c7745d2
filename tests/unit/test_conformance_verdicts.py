"""Verdict pieces that need no cluster: needs against a driver's offer, why a pod cannot start, error sentences,
and how results are rendered (console, JUnit, HTML)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from harness.conformance.report import render_conformance_html
from harness.conformance.runner import compute_error_sentence
from harness.conformance.verdicts import DriverOffer, Need, NeedKind, compute_unmet
from harness.errors import NotReadyError
from harness.kube.podstart import compute_start_failure
from harness.reports import CaseResult, render_console, render_junit
from kubeclient import ApiError

THREE = (Need(kind=NeedKind.DEVICES, count=3),)


def test_a_need_for_three_devices_against_one_names_both_numbers() -> None:
    unmet = compute_unmet(THREE, offer=DriverOffer(devices=1, health_advertised=True))
    assert unmet == "needs 3 allocatable devices on the node; the driver published 1"


@pytest.mark.parametrize(
    ("needs", "offer"),
    [
        (THREE, DriverOffer(devices=8, health_advertised=False)),
        ((Need(kind=NeedKind.HEALTH_DEVICES),), DriverOffer(devices=0, health_advertised=False)),
        ((Need(kind=NeedKind.RUNNABLE_POD),), DriverOffer(devices=1, health_advertised=False)),
    ],
    ids=["enough-devices", "no-health-no-need", "pod-with-a-device"],
)
def test_met_needs_leave_the_check_to_run(needs: tuple[Need, ...], offer: DriverOffer) -> None:
    assert compute_unmet(needs, offer=offer) is None


def test_health_with_nothing_published_is_an_unmet_need() -> None:
    unmet = compute_unmet((Need(kind=NeedKind.HEALTH_DEVICES),), offer=DriverOffer(devices=0, health_advertised=True))
    assert unmet is not None and "published none" in unmet


def _pod(*, waiting: dict[str, str] | None = None, phase: str = "Pending") -> dict[str, object]:
    state = {"waiting": waiting} if waiting is not None else {"running": {}}
    return {"status": {"phase": phase, "containerStatuses": [{"name": "c", "state": state}]}}


def test_a_container_creating_pod_has_no_start_failure_yet() -> None:
    assert compute_start_failure(_pod(waiting={"reason": "ContainerCreating"})) is None


def test_a_create_container_error_is_quoted_with_the_runtime_message() -> None:
    message = "CDI injection failed for device k8s.x/gpu=a (CDI spec /cdi/x.json): cannot stat CDI host device"
    failure = compute_start_failure(_pod(waiting={"reason": "CreateContainerError", "message": message}))
    assert failure is not None
    assert failure.describe() == f"container c: CreateContainerError: {message}"


def test_a_failed_prepare_event_is_the_reason_when_the_containers_say_nothing() -> None:
    events = [
        {"type": "Normal", "reason": "Scheduled", "message": "ok", "lastTimestamp": "2026-12-04T01:00:00Z"},
        {
            "type": "Warning",
            "reason": "FailedPrepareDynamicResources",
            "message": "prepare failed: no such device",
            "lastTimestamp": "2026-12-04T01:00:01Z",
        },
    ]
    failure = compute_start_failure({"status": {"phase": "Pending"}}, events=events)
    assert failure is not None and failure.reason == "FailedPrepareDynamicResources"
    assert failure.message == "prepare failed: no such device"


def test_a_failed_prepare_counts_the_nodes_attempts_across_aggregated_and_separate_events() -> None:
    def failed(count: int, at: str) -> dict[str, object]:
        return {
            "type": "Warning",
            "reason": "FailedPrepareDynamicResources",
            "message": "x",
            "count": count,
            "lastTimestamp": at,
        }

    once = compute_start_failure({"status": {"phase": "Pending"}}, events=[failed(1, "2026-12-04T01:00:01Z")])
    assert once is not None and once.attempts == 1  # one attempt: the retry may still overcome it
    aggregated = compute_start_failure({"status": {}}, events=[failed(3, "2026-12-04T01:00:01Z")])
    assert aggregated is not None and aggregated.attempts == 3  # a real kubelet counts repeats in one event
    separate = compute_start_failure(
        {"status": {}}, events=[failed(1, "2026-12-04T01:00:01Z"), failed(1, "2026-12-04T01:00:05Z")]
    )
    assert separate is not None and separate.attempts == 2  # the node emulator records one event per attempt


@pytest.mark.parametrize(
    ("exc", "says"),
    [
        (NotReadyError("timed out after 20s waiting for container output"), "check the driver's log"),
        (ApiError("etcdserver: request timed out", status=500), "check the control plane"),
        (KeyError("status"), "--verbose"),
    ],
    ids=["timeout", "api", "bug"],
)
def test_an_unexpected_exception_becomes_one_sentence_saying_what_to_check(exc: Exception, says: str) -> None:
    sentence = compute_error_sentence(exc)
    assert says in sentence
    assert "\n" not in sentence


TRACE = 'Traceback (most recent call last):\n  File "x.py", line 1\nKeyError: status\n'
RESULTS = [
    CaseResult(id="prepare.basic", title="prepares", outcome="passed", clause="§1", sent="NodePrepareResources [a]"),
    CaseResult(
        id="prepare.concurrent",
        title="concurrent",
        outcome="skipped",
        clause="§2",
        message="needs 3 allocatable devices on the node; the driver published 1",
        needs=("3 allocatable devices on the node",),
    ),
    CaseResult(
        id="status.devices", title="status", outcome="error", clause="§5", message="the harness hit X", traceback=TRACE
    ),
]


def test_the_console_shows_tracebacks_only_when_verbose() -> None:
    assert "Traceback" not in render_console(RESULTS, title="t")
    assert "Traceback" in render_console(RESULTS, title="t", verbose=True)


def test_junit_carries_the_traceback_and_what_was_sent() -> None:
    root = ET.fromstring(render_junit(RESULTS, suite="s"))
    error = root.find("testcase[@name='status.devices']/error")
    assert error is not None and error.text is not None and "KeyError: status" in error.text
    out = root.find("testcase[@name='prepare.basic']/system-out")
    assert out is not None and out.text is not None and "NodePrepareResources [a]" in out.text


def test_the_html_report_has_a_section_per_check_with_clause_need_and_why() -> None:
    page = render_conformance_html(RESULTS, title="DRA conformance: x", meta={"driver": "x"})
    assert page.count('<section class="check"') == 3
    assert "needs 3 allocatable devices on the node; the driver published 1" in page
    assert "NodePrepareResources [a]" in page
    assert "1 passed, 1 error, 1 skipped." in page
