"""A small raw-JSON client for the Kubernetes API, shared by the fake driver and the harness (a leaf package).

Objects stay JSON dicts with the API's camelCase keys, so server-side apply and 1.37-only fields work without a
generated model in the way. Only this package speaks HTTP to the API server.
"""

from kubeclient.client import (
    Credentials,
    JsonObj,
    KubeClient,
    PendingGet,
    credentials_from_kubeconfig,
    credentials_in_cluster,
)
from kubeclient.errors import ApiError, ApiUnavailableError, ConflictError, KubeClientError
from kubeclient.resources import Resource, resource_for

__all__ = [
    "ApiError",
    "ApiUnavailableError",
    "ConflictError",
    "Credentials",
    "JsonObj",
    "KubeClient",
    "KubeClientError",
    "PendingGet",
    "Resource",
    "credentials_from_kubeconfig",
    "credentials_in_cluster",
    "resource_for",
]
