"""The conformance suite: passes against fakedev, reports the example driver honestly, and every check can fail."""

from __future__ import annotations

import os
import pwd
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakedev.cli.rig import plugin_arguments, plugin_command
from harness.cluster.local import LocalCluster
from harness.conformance.checks import CATALOG, select
from harness.conformance.context import conformance_context
from harness.conformance.exdriver import example_driver_spec
from harness.conformance.runner import run_checks
from harness.node.drivers import DriverSpec, template_driver
from harness.reports import CaseResult, compute_exit_code
from tests.drivers.faulty_plugin import DEFECTS

pytestmark = [pytest.mark.cluster, pytest.mark.privileged, pytest.mark.slow]

FAKEDEV = template_driver(plugin_command(profile="seed-example"))


def _run_suite(local_cluster: LocalCluster, driver: DriverSpec, *, only: tuple[str, ...] = ()) -> list[CaseResult]:
    with conformance_context(client=local_cluster.client, kubeconfig=local_cluster.kubeconfig, driver=driver) as ctx:
        return run_checks(ctx, select(only=only), progress=lambda _: None)


def _outcomes(results: list[CaseResult]) -> dict[str, str]:
    return {r.id: r.outcome for r in results}


def test_every_check_passes_against_fakedev(local_cluster: LocalCluster) -> None:
    results = _run_suite(local_cluster, FAKEDEV)
    assert _outcomes(results) == {c.id: "passed" for c in CATALOG}, [r.message for r in results if r.message]
    assert compute_exit_code(results) == 0


def test_example_driver_result_check_by_check(local_cluster: LocalCluster) -> None:
    """sigs.k8s.io/dra-example-driver v0.4.0, as the README reports it."""
    results = _run_suite(local_cluster, example_driver_spec())
    expected = {c.id: "passed" for c in CATALOG}
    expected |= {"errors.per-claim": "failed", "metadata.kep5304": "skipped", "status.devices": "skipped"}
    assert _outcomes(results) == expected, [f"{r.id}: {r.message}" for r in results if r.message]
    assert compute_exit_code(results) == 0  # the failure and the skips are in recommended checks


@pytest.fixture(params=sorted(DEFECTS), ids=sorted(DEFECTS))
def defect(request: pytest.FixtureRequest) -> Iterator[str]:
    yield request.param


def test_each_check_is_failed_by_exactly_its_defect(local_cluster: LocalCluster, defect: str) -> None:
    target = DEFECTS[defect][0]
    driver = template_driver(
        (
            sys.executable,
            "-m",
            "tests.drivers.faulty_plugin",
            "--defect",
            defect,
            "--",
            *plugin_arguments(profile="seed-example"),
        )
    )
    results = _run_suite(local_cluster, driver)
    outcomes = _outcomes(results)
    failed = sorted(k for k, v in outcomes.items() if v in ("failed", "error"))
    assert failed == [target], [f"{r.id}: {r.outcome}: {r.message}" for r in results if r.id != target and r.message]
    if target == "registration.handshake":
        assert {v for k, v in outcomes.items() if k != target} == {"blocked"}
    else:
        assert {v for k, v in outcomes.items() if k != target} == {"passed"}


def test_pytest_conformance_run_attaches_artifacts_to_failures(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pytester gives the inner run a private HOME; point it at the real binary cache.
    monkeypatch.setenv("FAKEDEV_CACHE", str(Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "fakedev"))
    pytester.makepyfile(
        test_driver=(
            "from harness.pytest_plugin import run_conformance_check\n\n"
            "def test_conformance(dra_conformance, conformance_check, request):\n"
            "    run_conformance_check(dra_conformance, conformance_check, request=request)\n"
        )
    )
    repo = Path(__file__).resolve().parents[2]
    command = " ".join(
        [
            f"env PYTHONPATH={repo}",
            sys.executable,
            "-m",
            "tests.drivers.faulty_plugin",
            "--defect",
            "leave-specs",
            "--",
            *plugin_arguments(profile="seed-example"),
        ]
    )
    result = pytester.runpytest_subprocess(
        "-q", "-k", "handshake or cleanup", f"--dra-driver={command}", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*[[]§3 Unprepare[]] CDI specs still name claim*", "*driver log*", "*CDI k8s.gpu.example.com-device_*"]
    )
