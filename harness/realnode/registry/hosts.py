"""containerd's side of the node's registry (pure): the registry hosts directory and the config lines naming it.

containerd looks for ``<config_path>/<host>/hosts.toml`` and then ``<config_path>/_default/hosts.toml``, so one
``_default`` entry sends docker.io, registry.k8s.io, quay.io and fakedev.local alike to the local registry. Its
``server`` must be set: left empty, containerd would fall back to the real upstream registry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

DEFAULT_HOSTS_FILE: Final = "_default/hosts.toml"


def render_registry_hosts(server: str) -> dict[str, str]:
    """Files of the hosts directory (relative path → text) that send every registry host to ``server``, a loopback
    ``http://IP:PORT``; pull and resolve only (nothing is pushed to it)."""
    url = urlsplit(server)
    if url.scheme != "http" or not url.hostname or not url.hostname.startswith("127.") or url.path not in ("", "/"):
        raise ValueError(f"registry server {server!r}: expected http://127.x.y.z:PORT")
    text = (
        "# Every registry host resolves to fakedev's local registry; nothing is pulled from elsewhere.\n"
        f'server = "{server.rstrip("/")}"\n'
        'capabilities = ["pull", "resolve"]\n'
    )
    return {DEFAULT_HOSTS_FILE: text}


def render_registry_config(hosts_dir: Path) -> list[str]:
    """The containerd config lines (version 3) pointing the CRI image service at ``hosts_dir``."""
    if "'" in str(hosts_dir) or "\n" in str(hosts_dir):
        raise ValueError(f"{hosts_dir}: a hosts directory path cannot hold a quote or a newline in TOML literal form")
    return ["[plugins.'io.containerd.cri.v1.images'.registry]", f"  config_path = '{hosts_dir}'"]
