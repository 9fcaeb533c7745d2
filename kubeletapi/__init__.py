"""The kubelet's gRPC contracts for DRA drivers: our own protos and the Python modules generated from them.

A leaf package shared by the fake plugin (``fakedev``) and the kubelet emulator (``harness``), which may not import
each other; it imports nothing of ours, only grpc and protobuf (and the generated modules only on demand, so importing
these constants is cheap).

Modules (regenerate with ``python -m kubeletapi.generate``, verify with ``--check``):

==============================  ========================================  ====================================
module                          proto package                             services
==============================  ========================================  ====================================
``pluginregistration_v1_pb2``   ``pluginregistration``                    ``Registration``
``dra_v1_pb2``                  ``k8s.io.kubelet.pkg.apis.dra.v1``        ``DRAPlugin``
``dra_v1beta1_pb2``             ``k8s.io.kubelet.pkg.apis.dra.v1beta1``   ``DRAPlugin``
``health_v1_pb2``               ``v1``                                    ``DRAResourceHealth``
``health_v1alpha1_pb2``         ``v1alpha1``                              ``DRAResourceHealth``
==============================  ========================================  ====================================

Each has a ``*_pb2_grpc`` companion (stubs, servicers, ``add_*_to_server``) and ``.pyi`` stubs for mypy.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

# PluginInfo.type of a DRA driver; the kubelet routes registrations by it.
DRA_PLUGIN_TYPE: Final = "DRAPlugin"

# Strings for PluginInfo.supported_versions. For DRA they are NOT the gRPC service names (those carry the long proto
# package); for health, upstream's proto package is the bare version, so string and service name coincide.
DRA_V1_VERSION: Final = "v1.DRAPlugin"
DRA_V1BETA1_VERSION: Final = "v1beta1.DRAPlugin"
HEALTH_V1_VERSION: Final = "v1.DRAResourceHealth"
HEALTH_V1ALPHA1_VERSION: Final = "v1alpha1.DRAResourceHealth"

# What a driver serving everything advertises, in order: the kubelet takes the first DRA version it knows, so v1
# comes before v1beta1; health v1 before v1alpha1 for the same reason.
SUPPORTED_VERSIONS: Final = (DRA_V1_VERSION, DRA_V1BETA1_VERSION, HEALTH_V1_VERSION, HEALTH_V1ALPHA1_VERSION)

# Fully qualified gRPC service names ("<proto package>.<service>"), as they appear in method paths on the wire.
REGISTRATION_SERVICE: Final = "pluginregistration.Registration"
DRA_V1_SERVICE: Final = "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
DRA_V1BETA1_SERVICE: Final = "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"
HEALTH_V1_SERVICE: Final = "v1.DRAResourceHealth"
HEALTH_V1ALPHA1_SERVICE: Final = "v1alpha1.DRAResourceHealth"

# Service name behind each advertised version string (read-only), so the emulator can call what a plugin advertises.
SERVICE_FOR_VERSION: Final = MappingProxyType(
    {
        DRA_V1_VERSION: DRA_V1_SERVICE,
        DRA_V1BETA1_VERSION: DRA_V1BETA1_SERVICE,
        HEALTH_V1_VERSION: HEALTH_V1_SERVICE,
        HEALTH_V1ALPHA1_VERSION: HEALTH_V1ALPHA1_SERVICE,
    }
)


def method_path(*, service: str, method: str) -> str:
    """The HTTP/2 path of a gRPC method, e.g. ``/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources``."""
    return f"/{service}/{method}"


__all__ = [
    "DRA_PLUGIN_TYPE",
    "DRA_V1BETA1_SERVICE",
    "DRA_V1BETA1_VERSION",
    "DRA_V1_SERVICE",
    "DRA_V1_VERSION",
    "HEALTH_V1ALPHA1_SERVICE",
    "HEALTH_V1ALPHA1_VERSION",
    "HEALTH_V1_SERVICE",
    "HEALTH_V1_VERSION",
    "REGISTRATION_SERVICE",
    "SERVICE_FOR_VERSION",
    "SUPPORTED_VERSIONS",
    "method_path",
]
