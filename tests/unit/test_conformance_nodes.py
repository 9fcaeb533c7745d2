"""How the conformance suite reads a real kubelet's log (lines as kubelet v1.37.2 wrote them here, at --v=2)."""

from __future__ import annotations

from harness.conformance.nodes import KUBELET_CONNECTED, KUBELET_REFUSED

LOG = """\
I1203 06:27:49.770347   23492 reconciler.go:161] "OperationExecutor.RegisterPlugin started" plugin={"SocketPath":"/x/plugins_registry/gpu.example.com-reg.sock"}
I1203 06:27:49.774483   23492 dra_plugin_manager.go:140] "Connection changed" logger="DRA registration handler" driverName="gpu.example.com" endpoint="/x/plugins/gpu.example.com/dra.sock" connected=true
I1203 06:27:53.966625   23492 dra_plugin_manager.go:140] "Connection changed" logger="DRA registration handler" driverName="gpu.example.com" endpoint="/x/plugins/gpu.example.com/dra.sock" connected=false
I1203 06:27:55.778451   23492 dra_plugin_manager.go:140] "Connection changed" logger="DRA registration handler" driverName="gpu.example.com" endpoint="/x/plugins/gpu.example.com/dra.sock" connected=true
E1203 06:28:01.000000   23492 reconciler.go:166] "OperationExecutor.RegisterPlugin failed" err="RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket /x/plugins_registry/a-reg.sock, err: EOF"
E1203 06:28:02.000000   23492 reconciler.go:166] "OperationExecutor.RegisterPlugin failed" err="RegisterPlugin error -- plugin validation failed with err: none of the versions supported"
E1203 06:28:03.000000   23492 reconciler.go:166] "OperationExecutor.RegisterPlugin failed" err="RegisterPlugin error -- no handler registered for plugin type: CSIPlugin at socket /x/plugins_registry/b-reg.sock"
"""  # noqa: E501


def test_each_registration_the_kubelet_connected_counts_once_per_driver() -> None:
    assert KUBELET_CONNECTED.findall(LOG) == ["gpu.example.com", "gpu.example.com"]


def test_only_a_validation_failure_is_a_refusal_not_a_socket_gone_during_a_restart() -> None:
    refused = KUBELET_REFUSED.findall(LOG)
    assert len(refused) == 2, refused
    assert "none of the versions supported" in refused[0] and "no handler registered" in refused[1]
