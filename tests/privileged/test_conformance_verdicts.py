"""Conformance verdicts people can act on, against real drivers: a one-device driver meets the checks' needs with
SKIPPED and one sentence (no timeouts, no tracebacks on the console), and a driver whose CDI spec names a missing
device node gets a pod.end-to-end verdict — and a drill's pod description — naming the node, the device and the spec."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import pytest

from fakedev.cli.rig import plugin_arguments, plugin_command
from harness.cluster.local import LocalCluster
from harness.conformance.checks import CATALOG, select
from harness.conformance.context import ConformanceContext, conformance_context
from harness.conformance.runner import run_check, run_checks
from harness.kube.waits import describe_pod
from harness.node.drivers import template_driver
from harness.procs import wait_for
from harness.reports import CaseResult, render_console
from tests.helpers import ONE_DEVICE_PROFILE

pytestmark = [pytest.mark.cluster, pytest.mark.privileged, pytest.mark.slow]


MISSING_NODE = "/dev/fakedev-missing-0"
"""The node the faulty plugin's ``missing-device-node`` defect names for a claim's first device."""


@pytest.fixture(scope="module")
def one_device_results(local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> list[CaseResult]:
    profile = tmp_path_factory.mktemp("profile") / "one-device.yaml"
    profile.write_text(ONE_DEVICE_PROFILE)
    driver = template_driver(plugin_command(profile=str(profile)))
    with conformance_context(client=local_cluster.client, kubeconfig=local_cluster.kubeconfig, driver=driver) as ctx:
        return run_checks(ctx, select(), progress=lambda _: None)


def test_a_one_device_driver_passes_all_but_the_check_needing_three(one_device_results: list[CaseResult]) -> None:
    expected = {c.id: "passed" for c in CATALOG} | {"prepare.concurrent": "skipped"}
    assert {r.id: r.outcome for r in one_device_results} == expected, [
        f"{r.id}: {r.message}" for r in one_device_results if r.message
    ]
    (concurrent,) = [r for r in one_device_results if r.id == "prepare.concurrent"]
    assert concurrent.message == "needs 3 allocatable devices on the node; the driver published 1"
    assert concurrent.seconds < 5  # compared with the offer, not waited for


def test_a_one_device_driver_gets_one_sentence_per_verdict_and_no_traceback(
    one_device_results: list[CaseResult],
) -> None:
    for r in one_device_results:
        if r.outcome != "passed":
            assert r.message and "\n" not in r.message and "timed out" not in r.message, r
    assert "Traceback" not in render_console(one_device_results, title="one device")


@pytest.fixture(scope="module")
def missing_node_ctx(local_cluster: LocalCluster) -> Iterator[ConformanceContext]:
    driver = template_driver(
        (
            sys.executable,
            "-m",
            "tests.drivers.faulty_plugin",
            "--defect",
            "missing-device-node",
            "--",
            *plugin_arguments(profile="seed-example"),
        )
    )
    with conformance_context(client=local_cluster.client, kubeconfig=local_cluster.kubeconfig, driver=driver) as ctx:
        yield ctx


def test_a_pod_that_cannot_start_names_the_missing_node_the_device_and_the_spec(
    missing_node_ctx: ConformanceContext,
) -> None:
    (check,) = select(only=("pod.end-to-end",))
    started = time.monotonic()
    result = run_check(missing_node_ctx, check, done={})
    assert result.outcome == "failed", result
    assert time.monotonic() - started < 45  # the runtime's reason ends the wait, not the 60 s deadline
    assert MISSING_NODE in result.message
    assert "CDI injection failed for device k8s.gpu.example.com/device=" in result.message
    assert f"(CDI spec {missing_node_ctx.cdi_dir}/" in result.message
    assert "\n" not in result.message


def test_a_drill_describing_the_stuck_pod_quotes_the_runtime(missing_node_ctx: ConformanceContext) -> None:
    ctx = missing_node_ctx
    claim = ctx.allocated_claim(managed=True)
    pod = claim["status"]["reservedFor"][0]["name"]
    wait_for(lambda: ctx.start_failure(pod) is not None, timeout=30, what="the pod's start failure")
    said = describe_pod(ctx.client, pod, namespace=ctx.namespace)
    assert said.startswith("cannot start: container c: CreateContainerError: CDI injection failed for device")
    assert MISSING_NODE in said and str(ctx.cdi_dir) in said
    ctx.reset()


def test_the_missing_node_is_not_a_cdi_validity_failure(missing_node_ctx: ConformanceContext) -> None:
    """The spec is valid CDI (a node without a type is allowed); only the runtime can find it missing."""
    (check,) = select(only=("cdi.valid",))
    assert run_check(missing_node_ctx, check, done={}).outcome == "passed"
