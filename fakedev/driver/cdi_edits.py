"""CDI building blocks the device preparers share (pure): fake device nodes, sharing and config env.

Device nodes point at char devices under the plugin's fake ``/dev`` root. They are created as 1:3 (the kernel's
``null`` device), so a container may open them harmlessly; their names are the vendor's (``/dev/nvidia0``,
``/dev/nvidiactl``, ``/dev/nvidia-caps/nvidia-cap<N>``, ``/dev/vfio/<group>``). Which nodes and which environment
a device gets is its kind's business (:mod:`fakedev.driver.preparers`); which specs hold them is the release's
(:mod:`fakedev.driver.cdi_layout`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import cdi
from fakedev.driver.config import DeviceConfig

SAFE_MAJOR: Final = 1
SAFE_MINOR: Final = 3
_ENV_UNSAFE: Final = re.compile(r"[^A-Z0-9_]")


@dataclass(frozen=True, kw_only=True)
class FakeNode:
    """A char device the plugin creates under its fake /dev root, and where containers see it."""

    container_path: str
    host_relpath: str


def env_key(text: str) -> str:
    """``gpu-0-mig-1g10gb`` → ``GPU_0_MIG_1G10GB``: a device name as part of an environment variable name."""
    return _ENV_UNSAFE.sub("_", text.upper())


def render_device_nodes(nodes: Sequence[FakeNode], *, dev_root: Path) -> tuple[cdi.DeviceNode, ...]:
    return tuple(
        cdi.DeviceNode(
            path=n.container_path,
            host_path=str(dev_root / n.host_relpath),
            type="c",
            major=SAFE_MAJOR,
            minor=SAFE_MINOR,
            permissions="rw",
        )
        for n in nodes
    )


def render_sharing_env(prefix: str, config: DeviceConfig) -> list[str]:
    if config.sharing is None:
        return []
    env = [f"{prefix}SHARING_STRATEGY={config.sharing.strategy}"]
    if config.sharing.strategy == "TimeSlicing":
        env.append(f"{prefix}TIMESLICE_INTERVAL={config.sharing.interval}")
    if config.sharing.partition_count is not None:
        env.append(f"{prefix}PARTITION_COUNT={config.sharing.partition_count}")
    return env


def render_config_env(config: DeviceConfig) -> list[str]:
    """The ``env`` of the opaque config, sorted by name, after whatever the device kind sets itself."""
    return [f"{k}={v}" for k, v in sorted(config.env.items())]
