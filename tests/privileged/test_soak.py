"""A short soak on the worker's control plane: a pod churn on a fake node through a kube-apiserver and an etcd
outage. The standing run (`fakedev soak`, minutes-long outages, a ten-minute churn) is reported in the README."""

from __future__ import annotations

import collections
import logging

import pytest

from fakedev.cli.soak.run import Soak, SoakSettings
from harness.cluster.local import LocalCluster
from kubeclient.resources import NODES, PODS

pytestmark = [pytest.mark.cluster, pytest.mark.privileged, pytest.mark.slow]

SHORT = SoakSettings(
    pods=6,
    minutes=0.25,
    warmup_seconds=10,
    apiserver_outage_seconds=12,
    etcd_outage_seconds=12,
    period=0.3,
    sample_seconds=1,
    converge_seconds=240,
)


def test_a_churn_survives_outages_serves_known_claims_and_leaves_nothing(
    local_cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="harness.node.pods")
    said: list[str] = []
    soak = Soak(settings=SHORT, cluster=local_cluster, say=said.append)

    report = soak.run()

    assert [o.component for o in report.outages] == ["kube-apiserver", "etcd"]
    for outage in report.outages:
        assert outage.converged_seconds is not None, (outage, said)
        # Claims the plugin held were asked for again while the component was down, and answered without the API.
        assert outage.known_claims_asked > 0 and outage.known_claims_served == outage.known_claims_asked, outage
    assert report.pods_created > SHORT.pods and report.pods_deleted > 0  # pods really came and went
    assert report.at_rest_at_end, report.not_at_rest
    assert report.leaked_namespaces == ()
    assert set(report.samples) == {"plugin", "emulator"} and all(len(s) > 10 for s in report.samples.values())
    client = local_cluster.client
    assert client.list(PODS, namespace=soak.namespace) == []
    assert client.get_or_none(NODES, f"soak-{soak.suffix}") is None
    # A pod's status writes failing through an outage are one warning, not one per pass of its loop (every 200 ms).
    streaks = collections.Counter(
        r.__dict__["fields"]["pod"] for r in caplog.records if r.getMessage().startswith("pod status update failed")
    )
    assert max(streaks.values(), default=0) <= len(report.outages), streaks
