"""KEP-5304 device metadata: the JSON stream a container reads to learn its devices' attributes.

Host side: ``<plugin data dir>/dra-device-metadata/<namespace>_<claim>_<claim uid>/<request>/metadata.json``, exposed
by a CDI spec ``<cdi dir>/<driver>_metadata_<claim uid>_<request>.json`` (kind ``<driver>/metadata``, device
``<claim uid>_<request>``) that bind-mounts it read-only into the container at
``/var/run/kubernetes.io/dra-device-attributes/{resourceclaims|resourceclaimtemplates}/<name>/<request>/<driver>-metadata.json``.
The stream carries the same object once per API version, newest first, so readers take the first they understand.

The host directory carries the claim UID so that a claim deleted and re-created under the same name never shares
it with its predecessor: unprepare of the old UID (late, or repeated after a restart) removes only its own files.
Plugins before this naming used ``<namespace>_<claim>``; their checkpoint records name that directory, and
:func:`legacy_claim_dir_name` finds it for a claim they prepared but never recorded. The container path is fixed by
KEP-5304 and does not depend on the host side.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Final, NotRequired, TypedDict

import orjson

import cdi

METADATA_API_VERSIONS: Final = ("metadata.resource.k8s.io/v1beta1", "metadata.resource.k8s.io/v1alpha1")
CONTAINER_ROOT: Final = PurePosixPath("/var/run/kubernetes.io/dra-device-attributes")
POD_CLAIM_NAME_ANNOTATION: Final = "resource.kubernetes.io/pod-claim-name"
METADATA_DIR_NAME: Final = "dra-device-metadata"
HOST_FILE_NAME: Final = "metadata.json"
NAME_MAX: Final = 255


class NetworkData(TypedDict, total=False):
    interfaceName: str
    ips: list[str]
    hardwareAddress: str


class MetadataDevice(TypedDict):
    driver: str
    pool: str
    name: str
    attributes: dict[str, Any]
    networkData: NotRequired[NetworkData]


class MetadataRequest(TypedDict):
    name: str
    devices: list[MetadataDevice]


@dataclass(frozen=True, kw_only=True)
class ClaimIdentity:
    namespace: str
    name: str
    uid: str
    pod_claim_name: str | None
    """Set for claims made from a template (annotation ``resource.kubernetes.io/pod-claim-name``)."""


def top_level_request(request: str) -> str:
    """``gpu/large`` (a subrequest chosen from firstAvailable) belongs to the directory of ``gpu``."""
    return request.split("/", 1)[0]


def render_metadata_stream(*, claim: ClaimIdentity, generation: int, requests: Sequence[MetadataRequest]) -> bytes:
    """The file's bytes: one ``DeviceMetadata`` object per API version, newest first, newline separated."""
    body: dict[str, Any] = {
        "metadata": {"name": claim.name, "namespace": claim.namespace, "uid": claim.uid, "generation": generation},
    }
    if claim.pod_claim_name is not None:
        body["podClaimName"] = claim.pod_claim_name
    body["requests"] = [dict(r) for r in requests]
    docs = [{"apiVersion": v, "kind": "DeviceMetadata", **body} for v in METADATA_API_VERSIONS]
    return b"".join(orjson.dumps(d) + b"\n" for d in docs)


def host_claim_dir_name(*, namespace: str, name: str, uid: str) -> str:
    """The claim's directory below the metadata root: unique per claim UID (never reused by a re-created claim).

    The UID alone makes it unique; namespace and name are there for people, so a long claim name is shortened to
    keep the whole within a file name's 255 bytes (Kubernetes names are ASCII)."""
    room = NAME_MAX - len(namespace) - len(uid) - 2
    return f"{namespace}_{name[:room]}_{uid}"


def legacy_claim_dir_name(*, namespace: str, name: str) -> str:
    """The directory plugins before the UID naming used; shared by every claim ever named ``namespace/name``."""
    return f"{namespace}_{name}"


def read_stream_uid(data: bytes) -> str | None:
    """The claim UID a metadata file's first object names, or None when it names none (torn, foreign, empty)."""
    first = data.split(b"\n", 1)[0]
    try:
        doc = json.loads(first)
    except ValueError:
        return None
    uid = doc.get("metadata", {}).get("uid") if isinstance(doc, dict) else None
    return uid if isinstance(uid, str) else None


def container_path(*, claim: ClaimIdentity, request: str, driver: str) -> PurePosixPath:
    """Where the container sees the file: template claims by pod claim name, direct claims by claim name."""
    if claim.pod_claim_name is not None:
        base = CONTAINER_ROOT / "resourceclaimtemplates" / claim.pod_claim_name
    else:
        base = CONTAINER_ROOT / "resourceclaims" / claim.name
    return base / top_level_request(request) / f"{driver}-metadata.json"


def metadata_kind(driver: str) -> str:
    return cdi.render_kind(vendor=driver, class_name="metadata")


def metadata_device_name(*, claim_uid: str, request: str) -> str:
    return f"{claim_uid}_{request}"


def metadata_spec_file(*, driver: str, claim_uid: str, request: str) -> str:
    return f"{driver}_metadata_{claim_uid}_{request}.json"


def metadata_spec_prefix(*, driver: str, claim_uid: str) -> str:
    return f"{driver}_metadata_{claim_uid}_"


def metadata_spec_driver_prefix(driver: str) -> str:
    """What every metadata spec file name of ``driver`` starts with (and no other driver's does)."""
    return f"{driver}_metadata_"


def render_metadata_spec(*, driver: str, claim: ClaimIdentity, request: str, host_file: str) -> cdi.Spec:
    """The CDI spec that bind-mounts one request's metadata file read-only into the container."""
    device = cdi.Device(
        name=metadata_device_name(claim_uid=claim.uid, request=request),
        container_edits=cdi.ContainerEdits(
            mounts=(
                cdi.Mount(
                    host_path=host_file,
                    container_path=str(container_path(claim=claim, request=request, driver=driver)),
                    options=("ro", "bind"),
                ),
            )
        ),
    )
    return cdi.with_minimum_version(cdi.Spec(version="", kind=metadata_kind(driver), devices=(device,)))


def group_by_request(devices: Mapping[str, list[MetadataDevice]]) -> dict[str, list[MetadataRequest]]:
    """Map allocation request names (maybe ``req/sub``) to per-top-level-request lists of MetadataRequest."""
    grouped: dict[str, list[MetadataRequest]] = {}
    for request, devs in devices.items():
        grouped.setdefault(top_level_request(request), []).append({"name": request, "devices": devs})
    return grouped
