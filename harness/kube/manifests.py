"""Multi-document YAML manifests applied with server-side apply (as `kubectl apply --server-side` would)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import yaml

from kubeclient.client import JsonObj, KubeClient
from kubeclient.errors import ApiError
from kubeclient.resources import resource_for


def load_manifests(text: str, *, source: str = "<manifest>") -> list[JsonObj]:
    """Parse YAML documents; each must be a mapping with apiVersion, kind and metadata.name."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ValueError(f"{source}: not valid YAML: {exc}") from exc
    for index, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise ValueError(f"{source}: document {index} is not a mapping")
        for key in ("apiVersion", "kind"):
            if not isinstance(doc.get(key), str):
                raise ValueError(f"{source}: document {index} has no {key}")
        if not isinstance(doc.get("metadata"), dict) or not doc["metadata"].get("name"):
            raise ValueError(f"{source}: document {index} ({doc['kind']}) has no metadata.name")
    return docs


def load_manifest_file(path: Path) -> list[JsonObj]:
    return load_manifests(path.read_text(), source=str(path))


def apply_objects(client: KubeClient, objects: Iterable[JsonObj], *, namespace: str | None = None) -> list[JsonObj]:
    """Server-side apply each object; namespaced objects without a namespace go to ``namespace``."""
    applied = []
    for obj in objects:
        try:
            res = resource_for(api_version=obj["apiVersion"], kind=obj["kind"])
        except KeyError:
            raise ApiError(f"the harness does not know how to apply {obj['apiVersion']} {obj['kind']}") from None
        ns = None
        if res.namespaced:
            ns = obj["metadata"].get("namespace") or namespace or "default"
            obj = {**obj, "metadata": {**obj["metadata"], "namespace": ns}}
        applied.append(client.apply(res, obj, namespace=ns))
    return applied
