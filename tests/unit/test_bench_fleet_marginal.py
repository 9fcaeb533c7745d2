"""The fleet bench section's marginal cost of one more emulated node (pure)."""

from __future__ import annotations

from typing import Any

from fakedev.cli.bench.fleetchart import record_marginal


def test_marginal_cost_is_the_slope_between_the_smallest_and_largest_fleet() -> None:
    results: dict[str, Any] = {
        "fleet_chart_2x10_rss_mib": 300.0,
        "fleet_chart_2x50_rss_mib": 460.0,
        "fleet_chart_2x10_cpu_s": 10.0,
        "fleet_chart_2x50_cpu_s": 26.0,
        "fleet_chart_2x10_apiserver_cpu_s": 4.0,
        "fleet_chart_2x50_apiserver_cpu_s": 16.0,
    }
    record_marginal(results, replicas=2, sizes=[10, 50])
    assert results["fleet_chart_marginal_rss_mib_per_node"] == 2.0  # 160 MiB for 80 more nodes
    assert results["fleet_chart_marginal_cpu_s_per_node"] == 0.2
    assert results["fleet_chart_marginal_apiserver_cpu_s_per_node"] == 0.15


def test_one_size_gives_no_marginal() -> None:
    results: dict[str, Any] = {"fleet_chart_2x10_rss_mib": 300.0}
    record_marginal(results, replicas=2, sizes=[10])
    assert not [k for k in results if "marginal" in k]
