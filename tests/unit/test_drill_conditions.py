"""The drill conditions that need no API: an unknown condition, and a claim's networkData against what the pod printed.

The context's client points at a port nothing listens on, so any API call would fail these tests.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.drills.conditions import ConditionContext, _check_network, evaluate
from kubeclient import Credentials, KubeClient

OFFLINE = KubeClient(Credentials(server="https://127.0.0.1:9"))


def _ctx(printed: str = "") -> ConditionContext:
    return ConditionContext(client=OFFLINE, namespace="ns", nodes={}, logs=lambda _ns, _pod: printed)


def _claim(*devices: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "c"}, "status": {"devices": list(devices)}}


NIC = {
    "driver": "dra.net",
    "pool": "node-a",
    "device": "nic-0",
    "networkData": {"interfaceName": "net1", "hardwareAddress": "02:00:00:aa:bb:01", "ips": ["10.9.0.5/24"]},
}
PRINTED = "2: net1: <UP> mtu 1500 link/ether 02:00:00:AA:BB:01\n    inet 10.9.0.5/24 scope global net1\n"


def test_an_unknown_condition_names_its_keys() -> None:
    assert evaluate({"timeout": 5, "widget": "x"}, _ctx()) == "unknown condition ['timeout', 'widget']"


def test_network_data_shown_by_the_pod_holds_whatever_the_case_of_the_mac() -> None:
    assert _check_network(_claim(NIC), pod="p", ctx=_ctx(PRINTED)) is None


@pytest.mark.parametrize(
    ("claim", "printed", "expected"),
    [
        pytest.param(
            _claim({"driver": "gpu.example.com", "pool": "node-a", "device": "gpu-0"}),
            PRINTED,
            "claim c reports no networkData",
            id="no-network-data",
        ),
        pytest.param(
            _claim(NIC),
            PRINTED.replace("10.9.0.5/24", "10.9.0.6/24"),
            f"pod p does not show ['10.9.0.5/24'] of nic-0's networkData (printed {PRINTED.replace('.5/', '.6/')!r})",
            id="address-missing",
        ),
        pytest.param(
            _claim({**NIC, "networkData": {"ips": ["10.9.0.5/24"]}}),
            PRINTED,
            f"pod p does not show ['', ''] of nic-0's networkData (printed {PRINTED!r})",
            id="driver-reported-no-interface-or-mac",
        ),
    ],
)
def test_network_data_the_pod_does_not_show_is_reported(claim: dict[str, Any], printed: str, expected: str) -> None:
    assert _check_network(claim, pod="p", ctx=_ctx(printed)) == expected
