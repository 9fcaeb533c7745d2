"""Where the plugin's sockets and files live below the kubelet root (every path is a setting)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from fakedev.errors import FakedevError

UNIX_PATH_MAX: Final = 107  # sun_path is 108 bytes including the terminating NUL
INSTANCE_CHARS: Final = 8
"""How much of a rolling update's pod UID names its sockets: a UUID's first group tells the two pods apart and
keeps the registration socket well under the limit below a long kubelet root (a whole UUID took it to 117 bytes)."""


@dataclass(frozen=True, kw_only=True)
class PluginPaths:
    kubelet_root: Path
    driver: str
    rolling_update_uid: str | None = None

    @property
    def instance(self) -> str:
        """``-<uid prefix>`` for one instance of a rolling update, else empty."""
        return f"-{self.rolling_update_uid[:INSTANCE_CHARS]}" if self.rolling_update_uid else ""

    @property
    def plugin_dir(self) -> Path:
        return self.kubelet_root / "plugins" / self.driver

    @property
    def registry_dir(self) -> Path:
        return self.kubelet_root / "plugins_registry"

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / f"dra{self.instance}.sock"

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / f"{self.driver}{self.instance}-reg.sock"

    @property
    def control_socket(self) -> Path:
        """fakedev's own fault-injection socket; per instance, so drills can address either during an update."""
        return self.plugin_dir / f"control{self.instance}.sock"

    @property
    def serialize_lock(self) -> Path:
        return self.plugin_dir / "serialize.lock"

    def check(self) -> None:
        """Refuse socket paths the kernel would truncate."""
        for sock in (self.dra_socket, self.registration_socket):
            if len(str(sock).encode()) > UNIX_PATH_MAX:
                raise FakedevError(
                    f"socket path {sock} is {len(str(sock).encode())} bytes; Unix sockets allow {UNIX_PATH_MAX}. "
                    "Use a shorter --kubelet-root."
                )
