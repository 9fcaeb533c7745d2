"""The benchmark's pure parts: statistics, the results table, folded-stack summaries and the SVG charts."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from fakedev.cli.bench import render_table
from fakedev.cli.bench.goprofile import WATCHED_FRAMES, parse_pprof_top, watched_shares
from fakedev.cli.bench.plots import Bar, Target, bar_chart, dot_chart
from fakedev.cli.bench.prepare import compute_turns
from fakedev.cli.bench.profile import top_entries
from fakedev.cli.bench.stats import Latency, Ratio, percentile, ratio
from fakedev.model.inventory import resolve_inventory
from fakedev.profiles import load_profile
from fakedev.render import Schema, render_node
from fakedev.render.pool import restamp_slices

SVG = "{http://www.w3.org/2000/svg}"


def test_percentile_is_nearest_rank_on_unsorted_samples() -> None:
    samples = [float(v) for v in range(100, 0, -1)]
    assert percentile(samples, 0.5) == 51.0  # rank round(0.5 * 99) = 50 of 0..99
    assert percentile(samples, 0.99) == 99.0
    assert percentile(samples, 1.0) == 100.0
    assert percentile([7.0], 0.99) == 7.0
    with pytest.raises(ValueError, match="no samples"):
        percentile([], 0.5)


def test_latency_summary() -> None:
    lat = Latency.of([1.0, 2.0, 3.0, 4.0, 100.0])
    assert (lat.count, lat.p50_ms, lat.max_ms) == (5, 3.0, 100.0)
    assert lat.p99_ms == 100.0


def test_ratio_of_runs_reports_median_and_extremes() -> None:
    r = Ratio.of([20.0, 22.0, 24.0], [10.0, 11.0, 12.0])
    assert r.median == 2.0
    assert r.low == round(20 / 12, 3)
    assert r.high == round(24 / 10, 3)
    with pytest.raises(ValueError):
        Ratio.of([1.0], [])
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(1.0, 0.0) is None


def test_table_marks_targets_met_and_missed_and_unknown() -> None:
    table = render_table(
        {"gpu_prepare_p50_ms": 7.5, "nic_prepare_p50_ms": 9.0, "plugin_ready_s": "n/a", "machine": "x86_64"}
    )
    rows = {line.split("|")[1].strip(" `"): line for line in table.splitlines()[2:]}
    assert "**no**" in rows["gpu_prepare_p50_ms"] and "≤ 5 ms" in rows["gpu_prepare_p50_ms"]
    assert rows["nic_prepare_p50_ms"].rstrip().endswith("| yes |")
    assert rows["plugin_ready_s"].rstrip().endswith("| ? |")
    assert rows["machine"].rstrip().endswith("|  |  |")


PPROF_TOP = """File: kube-apiserver
Type: cpu
Duration: 60.15s, Total samples = 66.31s (110.25%)
Showing top 4 nodes out of 456
      flat  flat%   sum%        cum   cum%
         0     0% 0.015%     21.95s 33.10%  k8s.io/apiserver/pkg/registry/generic/registry.(*Store).Create
     0.62s  0.94%  0.98%     18.05s 27.22%  runtime.mallocgc
     3.75s  5.66%  5.66%      3.76s  5.67%  runtime.heapSetTypeSmallHeader (inline)
    1.10ms 0.002%  5.67%    850ms  1.28%  k8s.io/apimachinery/pkg/util/validation/field.(*Path).String
"""


def test_pprof_top_rows_are_parsed_with_and_without_units() -> None:
    entries = parse_pprof_top(PPROF_TOP)
    assert [e.function for e in entries] == [
        "k8s.io/apiserver/pkg/registry/generic/registry.(*Store).Create",
        "runtime.mallocgc",
        "runtime.heapSetTypeSmallHeader",
        "k8s.io/apimachinery/pkg/util/validation/field.(*Path).String",
    ]
    assert entries[0].cum_pct == 33.10
    assert entries[2].cum_pct == 5.67
    assert entries[3].cum_pct == 1.28


def test_watched_shares_name_every_frame_and_zero_the_absent() -> None:
    shares = watched_shares(parse_pprof_top(PPROF_TOP))
    assert set(shares) == set(WATCHED_FRAMES)
    assert shares["create_store"] == 33.10 and shares["malloc"] == 27.22 and shares["field_path_strings"] == 1.28
    assert shares["watch_serve"] == 0.0


def test_top_entries_from_folded_stacks() -> None:
    folded = "main;prepare;fsync 6\nmain;prepare;get 3\nmain;idle 1\nnot a stack line\n"
    entries = {e.frame: e for e in top_entries(folded)}
    assert entries["main"].total == 1.0 and entries["main"].own == 0.0
    assert entries["prepare"].total == 0.9
    assert entries["fsync"].own == 0.6
    assert top_entries("") == []


def test_bar_chart_is_svg_with_one_rect_per_bar_and_target_lines() -> None:
    bars = [
        Bar(group=g, series=s, value=v) for g, s, v in (("gpu", "p50", 7.0), ("gpu", "p99", 20.0), ("nic", "p50", 9.0))
    ]
    root = ET.fromstring(bar_chart(title="t", unit="ms", bars=bars, targets=[Target(value=5, label="target")]))
    titles = [t.text for t in root.iter(f"{SVG}title")]
    assert titles == ["gpu p50: 7", "gpu p99: 20", "nic p50: 9"]
    assert any(line.get("stroke-dasharray") for line in root.iter(f"{SVG}line"))


def test_dot_chart_has_a_dot_per_run() -> None:
    root = ET.fromstring(
        dot_chart(title="t", unit="pods/s", runs={"on": [30.0, 31.0, 29.0], "off": [30.5, 28.0, 32.0]})
    )
    assert len(list(root.iter(f"{SVG}circle"))) == 6


def test_restamped_slices_equal_a_fresh_render_with_that_generation_and_owner() -> None:
    inventory = resolve_inventory(load_profile("dgx-h100"), node_name="n1")
    owner = {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u-1", "controller": True}
    first = render_node(inventory, schemas=[Schema.NVIDIA])
    fresh = render_node(inventory, schemas=[Schema.NVIDIA], generation=7, owner=owner)  # type: ignore[arg-type]
    assert restamp_slices(first.slices, generation=7, owner=owner) == list(fresh.slices)  # type: ignore[arg-type]
    assert first.slices[0]["spec"]["pool"]["generation"] == 1  # the original is left alone


def test_latency_turns_cover_every_claim_once_and_rotate_who_goes_first() -> None:
    turns = compute_turns([5, 2, 4], chunk=2)
    # Round 2 starts with the second subject, which has nothing left; round 3 with the third, done too.
    assert turns == [(0, 0, 2), (1, 0, 2), (2, 0, 2), (2, 2, 4), (0, 2, 4), (0, 4, 5)]
    for i, count in enumerate([5, 2, 4]):
        covered = [n for j, first, end in turns if j == i for n in range(first, end)]
        assert covered == list(range(count))
    with pytest.raises(ValueError, match="chunk"):
        compute_turns([3], chunk=0)
