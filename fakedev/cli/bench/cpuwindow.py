"""Where the CPU went while a fleet published: each control-plane process, the fleet and the whole machine.

The publish-time floor counts only the API server's CPU, but on a small machine the scheduler and the controller
manager (both watch ResourceSlices), etcd and the fleet share the same cores; these figures say how busy the
machine was and what ratio its work allows at best."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from fakedev.cli.procfs import cpu_seconds, machine_busy_seconds

FLEET = "fleet"
API_SERVER = "kube-apiserver"


@dataclass(frozen=True, kw_only=True)
class CpuSample:
    processes: Mapping[str, float]
    """CPU-seconds each process used so far, by name."""
    machine: float
    """Busy CPU-seconds of the whole machine so far."""
    at: float
    """When it was taken (``time.monotonic()``)."""


def take_sample(pids: Mapping[str, int]) -> CpuSample:
    return CpuSample(
        processes={name: cpu_seconds(pid) for name, pid in pids.items()},
        machine=machine_busy_seconds(),
        at=time.monotonic(),
    )


def window_figures(*, before: CpuSample, after: CpuSample, cores: int, prefix: str) -> dict[str, float]:
    """The figures of the window between two samples (``before`` and ``after`` name the same processes, among them
    ``fleet`` and ``kube-apiserver``):

    - ``<prefix>_window_cpu_s_<process>`` and ``_machine``: CPU-seconds used in the window;
    - ``<prefix>_publish_vs_window_apiserver_floor``: the window's length against the API server's CPU in it over
      ``cores``;
    - ``<prefix>_machine_busy_share``: the machine's busy time over ``cores`` × the window's length (1.0:
      saturated);
    - ``<prefix>_publish_vs_apiserver_floor_bound``: the least publish time this work allows (all the machine's busy
      time spread over every core) against the API server's floor for the same window — a fleet at that bound
      keeps no core idle;
    - ``<prefix>_publish_vs_apiserver_floor_bound_without_fleet``: the same bound had the fleet cost nothing."""
    seconds = max(after.at - before.at, 1e-6)
    used = {name: max(0.0, after.processes[name] - before.processes[name]) for name in before.processes}
    machine = max(0.0, after.machine - before.machine)
    api = max(used[API_SERVER], 1e-6)
    figures = {f"{prefix}_window_cpu_s_{name.replace('-', '_')}": round(value, 1) for name, value in used.items()}
    figures[f"{prefix}_window_cpu_s_machine"] = round(machine, 1)
    figures[f"{prefix}_publish_vs_window_apiserver_floor"] = round(seconds / (api / max(cores, 1)), 2)
    figures[f"{prefix}_machine_busy_share"] = round(machine / (max(cores, 1) * seconds), 3)
    figures[f"{prefix}_publish_vs_apiserver_floor_bound"] = round(machine / api, 2)
    figures[f"{prefix}_publish_vs_apiserver_floor_bound_without_fleet"] = round((machine - used[FLEET]) / api, 2)
    return figures
