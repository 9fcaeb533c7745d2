"""The verdicts ``fakedev conformance`` gives small drivers that cannot give everything a check needs.

Two small drivers, one in Go (``tests/drivers/minidra``: standard library, the kubelet's generated protos, gRPC) and
fakedev's plugin with one deliberate variant switched on (``tests/drivers/faulty_plugin``), each in four behaviours:
one device, a CDI spec naming a device node that does not exist, no ResourceSlice, no answer to any gRPC call. Each
(driver, behaviour) is run once through the real command line (``fakedev conformance --json``) and every test reads
the verdicts of that run per check id.

The contract (issue 25): PASSED; FAILED — the driver broke a rule, one sentence saying which and what it did;
SKIPPED — the driver cannot give what the check needs, one sentence naming the need; ERROR — the harness or the
environment broke. Never a timeout as a verdict's only content, no traceback on the console. Expectations today's
engine cannot meet yet are ``xfail(strict=True)`` with :data:`ENGINE`, to be flipped when the engine lands.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from fakedev.cli.rig import plugin_arguments
from harness.cluster.local import LocalCluster
from harness.conformance.checks import CATALOG
from tests.drivers.minidra import MiniMode, build_minidra, minidra_command

pytestmark = [pytest.mark.cluster, pytest.mark.privileged, pytest.mark.slow]

REPO: Final = Path(__file__).resolve().parents[2]
RUN_TIMEOUT: Final = 900.0
"""A whole run, generous: today's engine waits out its timeouts (60 s each) where the new one says what is missing."""
SLOW_CHECK: Final = 30.0
"""No check of a run against these drivers needs to take longer: a longer one waited out a timeout."""

DRIVERS: Final = ("go", "python")
FEW_CHECKS: Final = ("registration.handshake", "slices.published", "prepare.basic")
MISSING_NODE_CHECKS: Final = (*FEW_CHECKS, "cdi.valid", "pod.end-to-end")
CHECKS: Final[dict[MiniMode, tuple[str, ...]]] = {
    MiniMode.SINGLE_DEVICE: (),  # the whole catalogue
    MiniMode.MISSING_DEVICE_NODE: MISSING_NODE_CHECKS,
    MiniMode.PUBLISH_NOTHING: FEW_CHECKS,
    MiniMode.NEVER_ANSWER: FEW_CHECKS,
}
"""What each run checks: the whole catalogue for the one-device driver, the checks that matter for the others."""
OPTIONAL_GAPS: Final[dict[str, dict[str, str]]] = {
    # minidra writes no KEP-5304 metadata and no status.devices: recommended checks, skipped.
    "go": {"metadata.kep5304": "skipped", "status.devices": "skipped"},
    "python": {},
}


@dataclass(frozen=True, kw_only=True)
class Run:
    """One ``fakedev conformance`` run: its verdicts by check id, its console output and exit status."""

    driver: str
    mode: MiniMode
    results: Mapping[str, Mapping[str, Any]]
    console: str
    exit_code: int

    def outcome(self, check: str) -> str:
        result = self.results[check]
        return str(result.get("verdict", result.get("outcome", ""))).lower()

    def message(self, check: str) -> str:
        return str(self.results[check].get("message", ""))

    def seconds(self, check: str) -> float:
        return float(self.results[check].get("seconds", 0.0))

    def show(self) -> str:
        return "\n".join(f"{k}: {self.outcome(k)} ({self.seconds(k):.1f}s): {self.message(k)!r}" for k in self.results)


def driver_command(*, driver: str, mode: MiniMode, minidra: Path) -> tuple[str, ...]:
    if driver == "go":
        return minidra_command(binary=minidra, mode=mode)
    return (
        sys.executable,
        "-m",
        "tests.drivers.faulty_plugin",
        "--defect",
        mode.value,
        "--",
        *plugin_arguments(profile="seed-example"),
    )


def run_conformance(
    *, cluster: LocalCluster, command: tuple[str, ...], only: tuple[str, ...], out: Path
) -> tuple[dict[str, Any], str, int]:
    """``fakedev conformance --json`` against the session's cluster, as a user would run it."""
    argv = [
        sys.executable,
        "-m",
        "fakedev",
        "conformance",
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--json",
        str(out),
        *(f"--only={check}" for check in only),
        "--",
        *command,
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env, check=False, cwd=REPO)
    assert out.exists(), f"no JSON written (exit {done.returncode}):\n{done.stdout}\n{done.stderr[-4000:]}"
    return json.loads(out.read_text()), done.stdout, done.returncode


@pytest.fixture(scope="module")
def minidra() -> Path:
    return build_minidra(progress=lambda message: print(f"[minidra] {message}", file=sys.stderr, flush=True))


def _run(
    request: pytest.FixtureRequest,
    factory: pytest.TempPathFactory,
    cluster: LocalCluster,
    minidra: Path,
    mode: MiniMode,
) -> Run:
    driver = str(request.param)
    command = driver_command(driver=driver, mode=mode, minidra=minidra)
    out = factory.mktemp(f"verdicts-{driver}-{mode.value}") / "conformance.json"
    report, console, code = run_conformance(cluster=cluster, command=command, only=CHECKS[mode], out=out)
    results = {r["id"]: r for r in report["results"]}
    return Run(driver=driver, mode=mode, results=results, console=console, exit_code=code)


@pytest.fixture(scope="module", params=DRIVERS)
def single_device(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, local_cluster: LocalCluster, minidra: Path
) -> Run:
    return _run(request, tmp_path_factory, local_cluster, minidra, MiniMode.SINGLE_DEVICE)


@pytest.fixture(scope="module", params=DRIVERS)
def missing_node(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, local_cluster: LocalCluster, minidra: Path
) -> Run:
    return _run(request, tmp_path_factory, local_cluster, minidra, MiniMode.MISSING_DEVICE_NODE)


@pytest.fixture(scope="module", params=DRIVERS)
def publish_nothing(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, local_cluster: LocalCluster, minidra: Path
) -> Run:
    return _run(request, tmp_path_factory, local_cluster, minidra, MiniMode.PUBLISH_NOTHING)


@pytest.fixture(scope="module", params=DRIVERS)
def never_answer(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, local_cluster: LocalCluster, minidra: Path
) -> Run:
    return _run(request, tmp_path_factory, local_cluster, minidra, MiniMode.NEVER_ANSWER)


TIMEOUT_ONLY: Final = re.compile(r"^\s*(\w+\.)*(TimeoutError|timed out|timeout)\b[^.]*$", re.IGNORECASE)


def problems_with_sentence(message: str) -> list[str]:
    """Why ``message`` is not one clear sentence (empty list: it is)."""
    problems = []
    if not message.strip():
        problems.append("empty")
    if "\n" in message.strip():
        problems.append("several lines")
    if "Traceback" in message:
        problems.append("a traceback")
    if TIMEOUT_ONLY.match(message):
        problems.append("only a timeout")
    return problems


# -- one device ----------------------------------------------------------------------------------------------------


def test_single_device_passes_every_check_it_can_give(single_device: Run) -> None:
    """Everything but the checks that need more than one device (or optional features the driver lacks) passes."""
    expected = {c.id: "passed" for c in CATALOG} | OPTIONAL_GAPS[single_device.driver]
    needs_more = {"prepare.concurrent"}
    got = {k: single_device.outcome(k) for k in single_device.results if k not in needs_more}
    assert got == {k: v for k, v in expected.items() if k not in needs_more}, single_device.show()


def test_single_device_concurrent_is_skipped_naming_the_need(single_device: Run) -> None:
    """prepare.concurrent needs three allocatable devices; the driver published one."""
    check = "prepare.concurrent"
    assert single_device.outcome(check) == "skipped", single_device.show()
    message = single_device.message(check)
    assert problems_with_sentence(message) == [], message
    assert re.search(r"\b3\b|three", message) and re.search(r"\b1\b|one", message), message


def test_single_device_no_check_waits_out_a_timeout(single_device: Run) -> None:
    slow = {k: single_device.seconds(k) for k in single_device.results if single_device.seconds(k) > SLOW_CHECK}
    assert slow == {}, single_device.show()


def test_single_device_exit_status_is_zero(single_device: Run) -> None:
    """A skipped check is not a failure: every required check the driver can give passes."""
    assert single_device.exit_code == 0, single_device.show()


def test_single_device_console_has_no_traceback(single_device: Run) -> None:
    assert "Traceback" not in single_device.console, single_device.console


# -- a CDI spec naming a device node that does not exist -----------------------------------------------------------


def test_missing_node_prepares_fine(missing_node: Run) -> None:
    """The defect is on the node, not in the gRPC answer: prepare itself succeeds."""
    assert missing_node.outcome("prepare.basic") == "passed", missing_node.show()


def test_missing_node_pod_end_to_end_fails(missing_node: Run) -> None:
    assert missing_node.outcome("pod.end-to-end") == "failed", missing_node.show()


def test_missing_node_verdict_names_the_runtime_reason(missing_node: Run) -> None:
    """The verdict says why the container could not start: the missing device node, the CDI device ID, its spec."""
    message = missing_node.message("pod.end-to-end")
    assert problems_with_sentence(message) == [], message
    assert re.search(r"/dev/(minidra|fakedev)-missing-", message), message  # the device node
    assert re.search(r"[\w.-]+/[\w-]+=[\w.-]+", message), message  # a CDI device ID (vendor/class=name)
    assert re.search(r"\.(json|yaml)\b", message), message  # the spec file


# -- no ResourceSlice ----------------------------------------------------------------------------------------------


def test_publish_nothing_registers(publish_nothing: Run) -> None:
    assert publish_nothing.outcome("registration.handshake") == "passed", publish_nothing.show()


def test_publish_nothing_fails_slices_in_one_sentence(publish_nothing: Run) -> None:
    check = "slices.published"
    assert publish_nothing.outcome(check) == "failed", publish_nothing.show()
    assert problems_with_sentence(publish_nothing.message(check)) == [], publish_nothing.message(check)


def test_publish_nothing_skips_prepare_naming_the_need(publish_nothing: Run) -> None:
    """prepare.basic needs one allocatable device; the driver published none."""
    check = "prepare.basic"
    assert publish_nothing.outcome(check) == "skipped", publish_nothing.show()
    message = publish_nothing.message(check)
    assert problems_with_sentence(message) == [], message
    assert re.search(r"\b0\b|\bno\b|none|nothing", message), message
    assert publish_nothing.seconds(check) < SLOW_CHECK, publish_nothing.show()


# -- no answers ----------------------------------------------------------------------------------------------------


def test_never_answer_fails_the_handshake_saying_what_went_unanswered(never_answer: Run) -> None:
    check = "registration.handshake"
    assert never_answer.outcome(check) == "failed", never_answer.show()
    message = never_answer.message(check)
    assert problems_with_sentence(message) == [], message
    assert re.search(r"GetInfo|answer|repl|respon", message, re.IGNORECASE), message


def test_never_answer_runs_nothing_after_the_handshake(never_answer: Run) -> None:
    """Without a registration no other check can run; each says so instead of waiting out its own timeout."""
    rest = {k: never_answer.outcome(k) for k in never_answer.results if k != "registration.handshake"}
    assert set(rest.values()) <= {"blocked", "skipped"}, never_answer.show()
    assert all(never_answer.message(k) for k in rest), never_answer.show()


def test_missing_node_console_has_no_traceback(missing_node: Run) -> None:
    assert "Traceback" not in missing_node.console, missing_node.console


def test_publish_nothing_console_has_no_traceback(publish_nothing: Run) -> None:
    assert "Traceback" not in publish_nothing.console, publish_nothing.console


def test_never_answer_console_has_no_traceback(never_answer: Run) -> None:
    assert "Traceback" not in never_answer.console, never_answer.console
