"""One DaemonSet, nodes of several kinds: the plugin serves the profile its Node's label names, else the default, and
idles on a node whose profile has nothing for its schema."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Iterator

import pytest

from fakedev.model.inventory import resolve_inventory
from fakedev.profiles import load_profile
from fakedev.render import Schema, render_node
from harness.cluster.nodes import NodeHeartbeats, delete_node, register_node
from harness.kube.waits import wait_list
from harness.procs import wait_for
from kubeclient import JsonObj, KubeClient
from kubeclient.resources import RESOURCE_SLICES
from tests.integration.conftest import PluginProcess

pytestmark = pytest.mark.cluster

LABEL = "fakedev.io/profile"
LABEL_ARGS = ("--profile-from-node-label", LABEL)


@pytest.fixture
def labeled_node(kube: KubeClient, unique_name: str, node_heartbeats: NodeHeartbeats) -> Iterator[Callable[..., str]]:
    """A Ready Node carrying ``fakedev.io/profile=<profile>`` (no label for None); slices and Node go afterwards."""
    made: list[str] = []

    def make(*, profile: str | None) -> str:
        register_node(kube, name=unique_name, labels={LABEL: profile} if profile else {})
        node_heartbeats.add(unique_name)
        made.append(unique_name)
        return unique_name

    yield make
    for name in made:
        node_heartbeats.discard(name)
        for s in kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={name}"):
            kube.delete(RESOURCE_SLICES, s["metadata"]["name"])
        delete_node(kube, name=name)


def _expected_devices(*, profile: str, node: str, schema: Schema) -> list[str]:
    rendered = render_node(resolve_inventory(load_profile(profile), node_name=node), schemas=[schema])
    return sorted(ref.device for ref in rendered.devices)


def _published(kube: KubeClient, *, node: str, driver: str, count: int) -> list[str]:
    def complete(slices: list[JsonObj]) -> bool:
        return sum(len(s["spec"].get("devices", [])) for s in slices) == count

    slices = wait_list(
        kube,
        RESOURCE_SLICES,
        field_selector=f"spec.nodeName={node},spec.driver={driver}",
        predicate=complete,
        what=f"{count} {driver} devices published for {node}",
    )
    return sorted(d["name"] for s in slices for d in s["spec"].get("devices", []))


@pytest.mark.parametrize(
    ("label", "driver", "serves"),
    [("kubevirt-host", "gpu.nvidia.com", "kubevirt-host"), (None, "gpu.example.com", "seed-example")],
    ids=["labeled-node-gets-its-profile", "unlabeled-node-gets-the-default"],
)
def test_plugin_publishes_the_profile_its_node_label_names(
    label: str | None,
    driver: str,
    serves: str,
    labeled_node: Callable[..., str],
    plugin_factory: Callable[..., PluginProcess],
    kube: KubeClient,
) -> None:
    node = labeled_node(profile=label)
    plugin = plugin_factory(node=node, profile="seed-example", driver=driver, extra=LABEL_ARGS)
    schema = next(s for s in Schema if s.driver == driver)
    expected = _expected_devices(profile=serves, node=node, schema=schema)
    assert _published(kube, node=node, driver=driver, count=len(expected)) == expected
    assert f"profile={serves}" in plugin.log()


def test_plugin_idles_when_the_nodes_profile_lacks_its_schema(
    labeled_node: Callable[..., str], plugin_factory: Callable[..., PluginProcess]
) -> None:
    node = labeled_node(profile="seed-example")
    plugin = plugin_factory(
        node=node,
        profile="dgx-h100",
        driver="gpu.nvidia.com",
        schema="nvidia",
        extra=(*LABEL_ARGS, "--if-schema-absent", "idle"),
        start=False,
    )
    with plugin.log_path.open("ab") as log:
        proc = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "--", *plugin.argv], stdout=log, stderr=log)
    try:
        wait_for(
            lambda: "nothing to serve" in plugin.log(),
            timeout=20,
            what="the plugin saying it idles",
            abort=lambda: None if proc.poll() is None else AssertionError(f"plugin exited:\n{plugin.log()}"),
        )
        assert not plugin.registration_socket.exists()
        assert not plugin.dra_socket.exists()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=20)
