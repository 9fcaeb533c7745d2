"""The soak's pure parts: the leak verdict from footprint samples, the churn's pods, the report's summary."""

from __future__ import annotations

import pytest

from fakedev.cli.soak import render_summary
from fakedev.cli.soak.churn import render_pod
from fakedev.cli.soak.footprint import Footprint, compute_drift
from fakedev.cli.soak.run import OutageResult, SoakReport, SoakSettings


def _samples(*, rss: list[float], fds: list[int] | None = None, threads: list[int] | None = None) -> list[Footprint]:
    n = len(rss)
    return [
        Footprint(t=float(i), rss_mib=rss[i], fds=(fds or [10] * n)[i], threads=(threads or [8] * n)[i])
        for i in range(n)
    ]


def test_a_steady_process_is_flat() -> None:
    drifts = {d.measure: d for d in compute_drift(_samples(rss=[50, 52, 49, 51, 50, 52, 50, 51, 49, 50]))}
    assert all(d.flat for d in drifts.values())
    assert drifts["rss_mib"].first == 51.0 and drifts["rss_mib"].last == 49.5 and drifts["fds"].growth == 0


@pytest.mark.parametrize(
    ("samples", "grown"),
    [
        (_samples(rss=[50 + 3 * i for i in range(10)]), "rss_mib"),
        (_samples(rss=[50] * 10, fds=[10 + i for i in range(10)]), "fds"),
        (_samples(rss=[50] * 10, threads=[8, 8, 8, 9, 10, 11, 12, 13, 14, 15]), "threads"),
    ],
    ids=["rss-keeps-growing", "a-descriptor-per-pod", "a-thread-per-pod"],
)
def test_a_leak_is_called_growth(samples: list[Footprint], grown: str) -> None:
    verdict = {d.measure: d.flat for d in compute_drift(samples)}
    assert verdict[grown] is False
    assert all(flat for measure, flat in verdict.items() if measure != grown)


def test_no_samples_no_verdict() -> None:
    assert compute_drift([]) == []


def test_churn_pods_hold_one_device_from_the_template_on_the_node() -> None:
    pod = render_pod(name="soak-000007", node="soak-abc", template="dev")
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": "soak-abc"}
    assert spec["resourceClaims"] == [{"name": "dev", "resourceClaimTemplateName": "dev"}]
    assert spec["containers"][0]["resources"]["claims"] == [{"name": "dev"}]


def test_the_summary_says_what_failed() -> None:
    report = SoakReport(
        settings=SoakSettings(),
        seconds=61.0,
        pods_created=30,
        pods_deleted=25,
        churn_api_errors=4,
        outages=(
            OutageResult(
                component="etcd",
                seconds=30,
                known_claims_asked=5,
                known_claims_served=4,
                churn_api_errors=3,
                converged_seconds=None,
                not_converged="2 pods not Running (e.g. soak-000004)",
            ),
        ),
        at_rest_at_end=True,
        not_at_rest="",
        leaked_namespaces=("fakedev-1234abcd-pod-0f1e2d3c-4b5a",),
        load_since=0.0,
        load_until=float("inf"),
        drift={"plugin": tuple(compute_drift(_samples(rss=[50 + 3 * i for i in range(10)])))},
        samples={},
    )
    text = render_summary(report)
    assert not report.ok and text.startswith("soak: FAILED")
    assert "known claims served 4/5" in text and "NOT at rest (2 pods not Running (e.g. soak-000004))" in text
    assert "namespaces left behind" in text and "rss_mib 51.5 → 75.5 (GREW" in text


def test_drift_is_judged_from_the_steady_load_on() -> None:
    """Threads that filled a bounded pool during an outage (before ``since``) and then stayed: flat."""
    samples = [Footprint(t=float(t), rss_mib=80.0, fds=20, threads=48 if t < 10 else 77) for t in range(30)]

    assert {d.measure: d.flat for d in compute_drift(samples)}["threads"] is False
    judged = {d.measure: d for d in compute_drift(samples, since=10.0)}
    assert judged["threads"].flat and judged["threads"].first == judged["threads"].last == 77


def test_drift_leaves_out_what_comes_after_the_load() -> None:
    """The final deletion of every pod opens files and grows memory for a moment: not part of the verdict."""
    samples = [Footprint(t=float(t), rss_mib=80.0 if t < 20 else 120.0, fds=20, threads=8) for t in range(25)]

    assert {d.measure: d.flat for d in compute_drift(samples)}["rss_mib"] is False
    assert {d.measure: d.flat for d in compute_drift(samples, until=19.0)}["rss_mib"] is True
