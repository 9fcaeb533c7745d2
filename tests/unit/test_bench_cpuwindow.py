"""The publishing window's CPU figures: what each process and the machine used, and the bound they allow."""

from __future__ import annotations

import os

import pytest

from fakedev.cli.bench.cpuwindow import CpuSample, take_sample, window_figures
from fakedev.cli.procfs import machine_busy_seconds


def _sample(*, at: float, machine: float, fleet: float, api: float, etcd: float) -> CpuSample:
    return CpuSample(processes={"fleet": fleet, "kube-apiserver": api, "etcd": etcd}, machine=machine, at=at)


def test_a_saturated_machine_bounds_the_ratio_above_the_measured_api_share() -> None:
    before = _sample(at=100.0, machine=1000.0, fleet=5.0, api=10.0, etcd=1.0)
    # 80 s on 2 cores, 156 busy CPU-seconds: 112 API server, 24 fleet, 8 etcd, 12 everything else.
    after = _sample(at=180.0, machine=1156.0, fleet=29.0, api=122.0, etcd=9.0)
    figures = window_figures(before=before, after=after, cores=2, prefix="nodes_1000")
    assert figures == {
        "nodes_1000_window_cpu_s_fleet": 24.0,
        "nodes_1000_window_cpu_s_kube_apiserver": 112.0,
        "nodes_1000_window_cpu_s_etcd": 8.0,
        "nodes_1000_window_cpu_s_machine": 156.0,
        "nodes_1000_publish_vs_window_apiserver_floor": round(80 / 56, 2),
        "nodes_1000_machine_busy_share": round(156 / 160, 3),
        "nodes_1000_publish_vs_apiserver_floor_bound": round(156 / 112, 2),
        "nodes_1000_publish_vs_apiserver_floor_bound_without_fleet": round(132 / 112, 2),
    }


def test_an_api_server_that_used_no_cpu_gives_large_figures_not_a_division_error() -> None:
    sample = _sample(at=1.0, machine=1.0, fleet=1.0, api=1.0, etcd=1.0)
    figures = window_figures(before=sample, after=sample, cores=2, prefix="p")
    assert figures["p_window_cpu_s_kube_apiserver"] == 0.0
    assert figures["p_machine_busy_share"] == 0.0


def test_a_sample_of_this_process_reads_procfs() -> None:
    first = take_sample({"fleet": os.getpid(), "kube-apiserver": os.getpid()})
    sum(i * i for i in range(200_000))  # some CPU of our own between the samples
    second = take_sample({"fleet": os.getpid(), "kube-apiserver": os.getpid()})
    assert second.at > first.at
    assert second.processes["fleet"] >= first.processes["fleet"]
    assert second.machine >= first.machine > 0
    assert machine_busy_seconds() == pytest.approx(second.machine, abs=5.0)
