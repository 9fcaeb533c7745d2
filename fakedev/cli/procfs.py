"""What the benchmarks and soaks read of a process from /proc: memory, CPU time, open files, threads."""

from __future__ import annotations

import os
from pathlib import Path


def memory_mib(pid: int | str = "self") -> dict[str, float]:
    """``VmRSS`` (resident now) and ``VmHWM`` (its peak) in MiB."""
    out = {"VmRSS": 0.0, "VmHWM": 0.0}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in out:
            out[key] = int(value.split()[0]) / 1024
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_fds(pid: int | str = "self") -> int:
    """How many file descriptors the process holds."""
    return sum(1 for _ in Path(f"/proc/{pid}/fd").iterdir())


def threads(pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == "Threads":
            return int(value)
    return 0


def machine_busy_seconds() -> float:
    """CPU-seconds every core of the machine has spent not idle since boot (``/proc/stat``: all but idle and iowait;
    guest time is already inside user time)."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu "):
            user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in line.split()[1:9])
            return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    raise OSError("/proc/stat has no cpu line")
