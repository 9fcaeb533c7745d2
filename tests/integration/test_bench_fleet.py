"""The scale benchmark's fleet: several emulated nodes in one process publish what each node renders, and their
plugins are registered by the fleet's kubelet side."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from fakedev.cli.bench import cpuwindow, goprofile, record_apiserver_shares, scale
from fakedev.errors import BenchError
from fakedev.model.inventory import resolve_inventory
from fakedev.profiles import load_profile
from fakedev.render import Schema, render_node
from harness.cluster.local import COMPONENTS, LocalCluster
from harness.cluster.nodes import delete_node
from harness.procs import open_run_dir, wait_for
from kubeclient import Credentials, KubeClient
from kubeclient.resources import RESOURCE_SLICES

pytestmark = [pytest.mark.cluster]


def test_fleet_publishes_every_nodes_slices_and_registers_its_plugins(
    local_cluster: LocalCluster, unique_name: str
) -> None:
    kube = local_cluster.client
    run = open_run_dir(purpose="test-fleet")
    prefix = unique_name[:30]
    fleet = scale.start_fleet(nodes=3, kubeconfig=local_cluster.kubeconfig, run=run, prefix=prefix)
    names = [f"{prefix}-{i:04d}" for i in range(3)]
    pids = {c: local_cluster.processes[c].pid for c in COMPONENTS} | {cpuwindow.FLEET: fleet.process.pid}
    try:
        fleet.wait("publishing", timeout=120)
        before = cpuwindow.take_sample(pids)
        published = fleet.wait("published", timeout=120)
        after = cpuwindow.take_sample(pids)
        registered = fleet.wait("registered", timeout=10)
        assert published["nodes"] == 3 and registered["nodes"] == 3
        # The publishing window read from the real processes: the API server and the fleet worked in it, and the
        # machine's busy time holds theirs (a few clock ticks of slack for the moments between the reads).
        used = {name: after.processes[name] - before.processes[name] for name in pids}
        assert used["kube-apiserver"] > 0 and used[cpuwindow.FLEET] > 0
        assert after.machine - before.machine + 0.05 >= used["kube-apiserver"] + used[cpuwindow.FLEET]
        window = cpuwindow.window_figures(before=before, after=after, cores=2, prefix="w")
        assert (
            window["w_publish_vs_apiserver_floor_bound"] >= window["w_publish_vs_apiserver_floor_bound_without_fleet"]
        )
        for name in names:
            expected = render_node(
                resolve_inventory(load_profile("dgx-h100"), node_name=name), schemas=[Schema.NVIDIA]
            ).slices
            stored = kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={name}")
            assert sorted(s["metadata"]["name"] for s in stored) == sorted(s["metadata"]["name"] for s in expected)
            by_name = {s["metadata"]["name"]: s for s in stored}
            for want in expected:
                got = by_name[want["metadata"]["name"]]
                sent = json.loads(json.dumps(want["spec"]))
                key = "devices" if "devices" in sent else "sharedCounters"
                assert got["spec"][key] == sent[key]
                assert got["metadata"]["ownerReferences"][0]["name"] == name
        rss, peak = fleet.rss_gib()
        assert 0 < rss <= peak
    finally:
        fleet.stop()
        run.remove()
        for name in names:
            delete_node(kube, name=name)
        for name in names:
            wait_for(
                lambda n=name: not kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={n}"),  # type: ignore[misc]
                timeout=60,
                what=f"slices of {name} collected with their Node",
            )


def test_kube_apiserver_cpu_profile_is_taken_and_read_with_go_tool_pprof(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The scale section's --profile: a real pprof profile from the worker's API server, read by go tool pprof."""
    kube = local_cluster.client
    profiled = threading.Event()

    def lists() -> None:
        # For as long as the profile runs (200 lists alone could end before it starts on a busy machine).
        while not profiled.is_set():
            kube.list(RESOURCE_SLICES)

    load = threading.Thread(target=lists, daemon=True)
    load.start()  # something for the profile to see
    sampler = goprofile.ApiServerSampler(kube=kube, seconds=2, out=tmp_path / "kube-apiserver-nodes-3")
    results: dict[str, Any] = {}
    try:
        record_apiserver_shares(results, sampler=sampler, nodes=3)
    finally:
        profiled.set()
        load.join(timeout=30)
    assert (tmp_path / "kube-apiserver-nodes-3.pprof").read_bytes().startswith(b"\x1f\x8b")
    top = (tmp_path / "kube-apiserver-nodes-3.top.txt").read_text()
    assert "File: kube-apiserver" in top
    entries = goprofile.parse_pprof_top(top)
    assert any(e.function.startswith("k8s.io/apiserver/") for e in entries), top[:2000]
    assert set(results) == {f"nodes_3_apiserver_cpu_{key}_pct" for key in goprofile.WATCHED_FRAMES}
    assert all(0.0 <= v <= 100.0 for v in results.values())
    assert results["nodes_3_apiserver_cpu_list_pct"] > 0.0  # the lists above ran during the profile


def test_a_refused_profile_is_reported_and_keeps_the_figures(
    local_cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An anonymous client is refused by the real API server: nothing is written, the measured figures stay."""
    admin = local_cluster.client.credentials
    anonymous = KubeClient(Credentials(server=admin.server, ca_file=admin.ca_file))
    sampler = goprofile.ApiServerSampler(kube=anonymous, seconds=1, out=tmp_path / "kube-apiserver-nodes-3")
    with pytest.raises(BenchError, match=r"HTTP 40[13]"):
        sampler.shares()
    results: dict[str, Any] = {"nodes_3_publish_s": 1.5}
    record_apiserver_shares(
        results,
        sampler=goprofile.ApiServerSampler(kube=anonymous, seconds=1, out=tmp_path / "kube-apiserver-nodes-3"),
        nodes=3,
    )
    assert results == {"nodes_3_publish_s": 1.5}
    assert list(tmp_path.iterdir()) == []
    assert "no kube-apiserver CPU profile: kube-apiserver's CPU profile: HTTP 40" in capsys.readouterr().err
