"""The plugin gives every directory and file it makes its own mode, whatever umask it was started with."""

from __future__ import annotations

import asyncio
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.node.dra_client import DraConnection
from kubeclient import KubeClient
from kubeletapi import DRA_V1_VERSION
from tests.helpers import allocated_claim, claim_ref
from tests.integration.conftest import PluginProcess

pytestmark = pytest.mark.cluster

NVIDIA = "gpu.nvidia.com"


def _expected_mode(rel: Path, mode: int) -> int | None:
    """What the plugin must have made ``rel`` (relative to the test's root); None: not judged (a symlink)."""
    kind = stat.S_IFMT(mode)
    if kind == stat.S_IFLNK:
        return None
    if kind == stat.S_IFDIR:
        # Its own directories and the kubelet's it had to make are private; the rest is read by the runtime,
        # containers (bind-mounted metadata) and inspection tools.
        private = {Path("kubelet"), Path("kubelet/plugins"), Path("kubelet/plugins_registry")}
        private.add(Path(f"kubelet/plugins/{NVIDIA}"))
        return 0o750 if rel in private else 0o755
    if kind == stat.S_IFSOCK:
        return 0o600
    if kind == stat.S_IFCHR:
        return 0o660  # the fake device nodes
    if rel.name in ("checkpoint.json", "checkpoint.json.lock", "serialize.lock"):
        return 0o600
    return 0o644


@pytest.mark.parametrize("umask", [0o000, 0o077], ids=["umask-000", "umask-077"])
def test_everything_the_plugin_makes_has_its_own_mode_whatever_the_umask(
    umask: int,
    plugin_factory: Callable[..., PluginProcess],
    emulated_node: str,
    device_class: Callable[..., str],
    kube: KubeClient,
    test_namespace: str,
) -> None:
    # A VM host: vfio device nodes, a vGPU's mdev in the fake sysfs, metadata files, specs, the checkpoint.
    plugin = plugin_factory(node=emulated_node, profile="kubevirt-host", driver=NVIDIA, umask=umask)
    classes = {
        kind: device_class(
            driver=NVIDIA,
            expression=f'device.driver == "{NVIDIA}" && device.attributes["{NVIDIA}"].type == "{kind}"',
            suffix=f"-{kind}",
        )
        for kind in ("vgpu", "vfio")
    }
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "vm"},
        "spec": {
            "devices": {
                "requests": [{"name": k, "exactly": {"deviceClassName": c}} for k, c in sorted(classes.items())]
            }
        },
    }
    ref = claim_ref(allocated_claim(kube, namespace=test_namespace, node=plugin.node, claim=body, pod="p"))

    async def prepare() -> str:
        conn = DraConnection(endpoint=plugin.dra_socket)
        try:
            return (await conn.prepare([ref], version=DRA_V1_VERSION))[ref.uid].error
        finally:
            await conn.close()

    assert asyncio.run(prepare()) == ""
    made = sorted(p for p in plugin.root.rglob("*") if p != plugin.log_path)
    assert any(stat.S_ISCHR(p.lstat().st_mode) for p in made), "no fake device node was made"
    assert any("mdev" in p.parts for p in made) or any(p.name == "mdev_type" for p in made)
    wrong = {
        str(rel): f"{stat.S_IMODE(mode):04o}, expected {expected:04o}"
        for p in made
        if (expected := _expected_mode(rel := p.relative_to(plugin.root), mode := p.lstat().st_mode)) is not None
        and stat.S_IMODE(mode) != expected
    }
    assert wrong == {}
