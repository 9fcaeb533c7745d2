"""The pure parts of a pod worker: its phase, its containers' statuses and environments."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.node.pods import ContainerRun, compute_pod_phase, render_container_env, render_container_status
from harness.runtime.runc import Container, Runc

RUNC = Runc(root=Path("/nonexistent/runc"), binary="runc")


def _run(name: str, *, running: bool = False, exit_code: int | None = None, restarts: int = 0) -> ContainerRun:
    started = running or exit_code is not None
    container = Container(container_id=f"id-{name}", bundle=Path("/nonexistent"), runtime=RUNC) if started else None
    return ContainerRun(
        name=name,
        container=container,
        exit_code=exit_code,
        restarts=restarts,
        started_at="2026-12-04T05:00:00Z" if started else "",
        finished_at="2026-12-04T05:01:00Z" if exit_code is not None else "",
    )


@pytest.mark.parametrize(
    ("runs", "restart", "phase"),
    [
        ([], "Always", "Pending"),
        ([_run("a")], "Never", "Pending"),
        ([_run("a", running=True), _run("b", exit_code=0)], "Never", "Running"),
        ([_run("a", exit_code=0), _run("b", exit_code=0)], "Never", "Succeeded"),
        ([_run("a", exit_code=0), _run("b", exit_code=1)], "Never", "Failed"),
        ([_run("a", exit_code=0)], "OnFailure", "Succeeded"),
        ([_run("a", exit_code=2)], "OnFailure", "Running"),
        ([_run("a", exit_code=0)], "Always", "Running"),
    ],
    ids=[
        "nothing-yet",
        "created-not-started",
        "one-still-running",
        "all-done-ok",
        "one-failed-never-restarted",
        "on-failure-all-ok",
        "on-failure-restarts-a-failure",
        "always-restarts-even-success",
    ],
)
def test_pod_phase_follows_the_restart_policy(runs: list[ContainerRun], restart: str, phase: str) -> None:
    assert compute_pod_phase(runs, restart=restart) == phase


def test_a_running_container_is_ready_and_names_its_runtime_id() -> None:
    status = render_container_status({"name": "a", "image": "busybox"}, run=_run("a", running=True, restarts=2))
    assert status["state"] == {"running": {"startedAt": "2026-12-04T05:00:00Z"}}
    assert status["ready"] and status["started"] and status["restartCount"] == 2
    assert status["containerID"] == "runc://id-a" and status["image"] == "busybox"


@pytest.mark.parametrize(("code", "reason"), [(0, "Completed"), (137, "Error")], ids=["ok", "killed"])
def test_a_finished_container_reports_its_exit_code(code: int, reason: str) -> None:
    status = render_container_status({"name": "a"}, run=_run("a", exit_code=code))
    assert status["state"]["terminated"]["exitCode"] == code
    assert status["state"]["terminated"]["reason"] == reason
    assert not status["ready"]


def test_a_container_that_cannot_start_says_why() -> None:
    run = ContainerRun(name="a", waiting_reason="CreateContainerError", waiting_message="unresolvable CDI device x")
    status = render_container_status({"name": "a"}, run=run)
    assert status["state"] == {"waiting": {"reason": "CreateContainerError", "message": "unresolvable CDI device x"}}
    assert "containerID" not in status


def test_a_restart_that_cannot_be_created_waits_with_the_last_run_as_last_state() -> None:
    run = ContainerRun(
        name="a",
        exit_code=0,
        restarts=1,
        started_at="2026-12-04T05:00:00Z",
        finished_at="2026-12-04T05:01:00Z",
        waiting_reason="CreateContainerError",
        waiting_message="link not found for interface eth7",
    )
    status = render_container_status({"name": "a"}, run=run)
    assert status["state"] == {
        "waiting": {"reason": "CreateContainerError", "message": "link not found for interface eth7"}
    }
    assert status["lastState"]["terminated"]["exitCode"] == 0
    assert compute_pod_phase([run], restart="Always") == "Running"


def test_environment_takes_values_and_the_downward_api_fields_a_node_knows() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"}}
    spec = {
        "name": "c",
        "env": [
            {"name": "PLAIN", "value": 7},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "UNKNOWN", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        ],
    }
    assert render_container_env(spec, pod=pod, node="node-a") == {"PLAIN": "7", "NODE": "node-a", "POD": "p"}
