"""Small builders shared by the tests: API objects (device classes, slices, claims, pods), claim references, CDI
specs, a health report with a deadline, waiting for an allocation, and the Helm chart rendered by helm."""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from cdi import ContainerEdits, Device, Spec
from fakedev.driver.checkpoint import ClaimRecord
from harness.cluster.build import helm_binary
from harness.kube.waits import wait_object
from harness.realnode.images import BUSYBOX_IMAGE
from kubeclient import JsonObj, KubeClient
from kubeclient.resources import DEVICE_CLASSES, PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, RESOURCE_SLICES
from kubeletapi.types import ClaimRef

EXAMPLE_DRIVER = "gpu.example.com"
"""The driver of the seed-example profile (and of sigs.k8s.io/dra-example-driver)."""

T = TypeVar("T")


def driver_is(driver: str) -> str:
    """The CEL selector of every device of ``driver``."""
    return f'device.driver == "{driver}"'


def device_class_body(*, name: str, expression: str) -> JsonObj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def example_slice_body(*, node: str, driver: str = EXAMPLE_DRIVER, count: int = 2) -> JsonObj:
    """A hand-written slice named ``<node>-example``: ``count`` GPUs with an index, one model and 80Gi each."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-example"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {"index": {"int": i}, "model": {"string": "LATEST-GPU-MODEL"}},
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for i in range(count)
            ],
        },
    }


def node_slices(kube: KubeClient, node: str) -> list[JsonObj]:
    return kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={node}")


def status_devices(claim: JsonObj) -> list[JsonObj]:
    return list((claim.get("status") or {}).get("devices") or [])


def wait_claim_status(
    kube: KubeClient, name: str, *, namespace: str, present: bool = True, timeout: float = 15.0
) -> JsonObj:
    """The claim once its ``status.devices`` has entries (``present=False``: has none). Drivers write them after
    answering prepare (fakedev's outbox does), so a reader right after a pod starts must wait for them."""
    return wait_object(
        kube,
        RESOURCE_CLAIMS,
        name,
        namespace=namespace,
        predicate=lambda c: bool(status_devices(c)) == present,
        timeout=timeout,
        what="status.devices written" if present else "status.devices cleared",
    )


def claim_ref(claim: JsonObj) -> ClaimRef:
    """How the kubelet names a claim in DRA calls."""
    m = claim["metadata"]
    return ClaimRef(uid=m["uid"], namespace=m["namespace"], name=m["name"])


def nvidia_release_profile(directory: Path, *, release: str, gpus: int = 2) -> Path:
    """A profile file of ``gpus`` plain A100s (``gpu-0``, ``gpu-1``, …) imitating NVIDIA release ``release``."""
    path = directory / f"nvidia-{release}.yaml"
    profile = {
        "name": "cdi-release",
        "description": f"{gpus} A100s without MIG, NVIDIA driver {release}",
        "releases": {"nvidia": release},
        "numaNodes": [{"id": 0, "cpus": "0-7"}],
        "pcieRoots": [{"name": "pci0000:00", "numaNode": 0}],
        "gpus": [
            {
                "product": "a100-sxm4-40gb",
                "root": "pci0000:00",
                "address": f"0000:{bus:02x}:00.0",
                "mig": {"mode": "disabled"},
            }
            for bus in range(1, gpus + 1)
        ],
    }
    path.write_text(yaml.safe_dump(profile, sort_keys=False))
    return path


def claim_body(
    *, name: str, device_class: str, requests: int = 1, config: list[JsonObj] | None = None, count: int = 1
) -> JsonObj:
    spec: dict[str, Any] = {
        "devices": {
            "requests": [
                {
                    "name": f"r{i}" if requests > 1 else "gpu",
                    "exactly": {"deviceClassName": device_class, "count": count},
                }
                for i in range(requests)
            ]
        }
    }
    if config:
        spec["devices"]["config"] = config
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name}, "spec": spec}


def pod_body(
    *,
    name: str,
    node: str,
    claims: dict[str, str] | None = None,
    templates: dict[str, str] | None = None,
    command: str = "sleep 3600",
    grace_seconds: int | None = None,
    restart: str = "Never",
) -> JsonObj:
    """A pod pinned to ``node`` whose one container uses every pod claim: ``claims`` maps a pod claim name to a
    ResourceClaim, ``templates`` to a ResourceClaimTemplate."""
    entries = [{"name": k, "resourceClaimName": v} for k, v in (claims or {}).items()]
    entries += [{"name": k, "resourceClaimTemplateName": v} for k, v in (templates or {}).items()]
    spec: dict[str, Any] = {
        "restartPolicy": restart,
        "nodeSelector": {"kubernetes.io/hostname": node},
        "resourceClaims": entries,
        "containers": [
            {
                "name": "c",
                "image": "busybox",
                "command": ["sh", "-c", command],
                "resources": {"claims": [{"name": e["name"]} for e in entries]},
            }
        ],
    }
    if grace_seconds is not None:
        spec["terminationGracePeriodSeconds"] = grace_seconds
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def allocated_claim(kube: KubeClient, *, namespace: str, node: str, claim: JsonObj, pod: str) -> JsonObj:
    """Create a claim and a pod that uses it; return the claim once the real scheduler has allocated it."""
    name = claim["metadata"]["name"]
    kube.create(RESOURCE_CLAIMS, claim, namespace=namespace)
    kube.create(PODS, pod_body(name=pod, node=node, claims={"dev": name}), namespace=namespace)
    return wait_object(
        kube,
        RESOURCE_CLAIMS,
        name,
        namespace=namespace,
        predicate=lambda c: bool(c.get("status", {}).get("reservedFor")),
        what="allocated and reserved",
    )


async def next_report(stream: AsyncIterator[T], *, what: str, timeout: float = 10.0) -> T:
    """The stream's next item within ``timeout``; a stream that goes quiet fails the test naming ``what``."""
    try:
        return await asyncio.wait_for(anext(stream), timeout)
    except TimeoutError:
        raise AssertionError(f"no {what} within {timeout:.0f}s") from None


def one_device_spec(
    *,
    version: str = "0.5.0",
    kind: str = "example.com/gpu",
    name: str = "gpu0",
    edits: ContainerEdits | None = None,
    spec_edits: ContainerEdits | None = None,
    annotations: dict[str, str] | None = None,
    device_annotations: dict[str, str] | None = None,
    devices: tuple[Device, ...] | None = None,
) -> Spec:
    """A CDI spec with one device ``name`` (or ``devices``), plain env edits unless given."""
    device = Device(
        name=name,
        container_edits=edits if edits is not None else ContainerEdits(env=("A=1",)),
        annotations=device_annotations or {},
    )
    return Spec(
        version=version,
        kind=kind,
        devices=devices if devices is not None else (device,),
        container_edits=spec_edits or ContainerEdits(),
        annotations=annotations or {},
    )


# -- the Helm chart --------------------------------------------------------------------------------------------------

CHART_DIR = Path(__file__).resolve().parents[1] / "deploy" / "helm" / "fakedev"
CHART_VALUES_DIR = Path(__file__).resolve().parent / "data" / "helm"


def run_helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The cached helm (``make build`` builds it; a missing one fails the test, as any missing binary does)."""
    # A private, empty home: no repositories, plugins or caches of the machine's user leak into the test.
    with tempfile.TemporaryDirectory(prefix="fakedev-helm-") as home:
        result = subprocess.run(
            [str(helm_binary()), *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": os.environ.get("PATH", ""), "HOME": home},
        )
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result


def helm_template(
    *, release: str, namespace: str, values: Sequence[Path] = (), sets: Sequence[str] = ()
) -> list[JsonObj]:
    """The chart rendered by ``helm template`` as objects (empty documents dropped)."""
    argv = ["template", release, str(CHART_DIR), "--namespace", namespace]
    for v in values:
        argv += ["--values", str(v)]
    for s in sets:
        argv += ["--set", s]
    return [doc for doc in yaml.safe_load_all(run_helm(*argv).stdout) if doc]


# -- a KubeVirt VMI on a kubevirt-host node ----------------------------------------------------------------------------

KUBEVIRT_DRIVER = "gpu.nvidia.com"
_ATTRS = f'device.attributes["{KUBEVIRT_DRIVER}"]'
KUBEVIRT_LAUNCHER = "virt-launcher-testvm"


def quiet_pod(name: str, *, node: str) -> dict[str, Any]:
    """A busybox pod that sleeps on ``node`` (a real node: image imported, host network, no token)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "hostNetwork": True,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "3600"]}
            ],
        },
    }


VFIO_API_CONFIG: dict[str, Any] = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "VfioDeviceConfig",
    "iommu": {"enableAPIDevice": True},
}
"""The opaque config a passthrough GPU claim for a VM needs with NVIDIA driver v0.4.1 and later."""


def kubevirt_vm_objects(*, prefix: str, node: str) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """Device classes, the VMI's claim and claim template, its launcher pod (busybox standing in), and the VMI."""
    classes = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": f"{prefix}-{name}"},
            "spec": {"selectors": [{"cel": {"expression": cel}}]},
        }
        for name, cel in (
            (
                "passthrough",
                f'device.driver == "{KUBEVIRT_DRIVER}" && {_ATTRS}.type == "vfio"',
            ),
            (
                "vgpu",
                f'device.driver == "{KUBEVIRT_DRIVER}" && device.attributes["{KUBEVIRT_DRIVER}"].type == "vgpu" && '
                f'device.attributes["{KUBEVIRT_DRIVER}"].vgpuType == "H100XM-20C"',
            ),
        )
    ]
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "vm-gpu"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": f"{prefix}-passthrough"}}],
                # Since v0.4.1 the driver gives the VFIO API node (/dev/vfio/vfio) only when asked; a VM needs it.
                "config": [{"requests": ["gpu"], "opaque": {"driver": KUBEVIRT_DRIVER, "parameters": VFIO_API_CONFIG}}],
            }
        },
    }
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "vm-vgpu"},
        "spec": {
            "spec": {"devices": {"requests": [{"name": "vgpu", "exactly": {"deviceClassName": f"{prefix}-vgpu"}}]}}
        },
    }
    launcher = quiet_pod(KUBEVIRT_LAUNCHER, node=node)
    launcher["metadata"]["labels"] = {"kubevirt.io/domain": "testvm"}
    launcher["spec"]["resourceClaims"] = [
        {"name": "passthrough", "resourceClaimName": "vm-gpu"},
        {"name": "vgpu", "resourceClaimTemplateName": "vm-vgpu"},
    ]
    compute = launcher["spec"]["containers"][0]
    compute["name"] = "compute"
    compute["resources"] = {"claims": [{"name": "passthrough", "request": "gpu"}, {"name": "vgpu", "request": "vgpu"}]}
    vmi = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "testvm"},
        "spec": {
            "resourceClaims": launcher["spec"]["resourceClaims"],
            "domain": {
                "devices": {
                    "gpus": [
                        {"name": "gpu1", "claimName": "passthrough", "requestName": "gpu"},
                        {"name": "vgpu1", "claimName": "vgpu", "requestName": "vgpu"},
                    ]
                }
            },
        },
    }
    return [*classes, claim, template], launcher, vmi


def create_vm_objects(kube: KubeClient, objects: Sequence[dict[str, Any]], *, namespace: str) -> None:
    """Create what :func:`kubevirt_vm_objects` built: the device classes, then the claim and the claim template."""
    for obj in objects:
        if obj["kind"] == "DeviceClass":
            kube.create(DEVICE_CLASSES, obj)
        else:
            kind = RESOURCE_CLAIMS if obj["kind"] == "ResourceClaim" else RESOURCE_CLAIM_TEMPLATES
            kube.create(kind, obj, namespace=namespace)


def claim_template_body(name: str, *, device_class: str) -> JsonObj:
    """A ResourceClaimTemplate asking for one device of ``device_class``."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}}},
    }


def pod_running_and_ready(kube: KubeClient, *, namespace: str, name: str) -> bool:
    pod = kube.get_or_none(PODS, name, namespace=namespace) or {}
    status = pod.get("status") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    return status.get("phase") == "Running" and conditions.get("Ready") == "True"


def scrape_metrics(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample a Prometheus endpoint on 127.0.0.1 serves: (name, sorted labels) → value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def busybox_rootfs_tar(path: Path, *, files: dict[str, str] | None = None) -> Path:
    """A root filesystem tar holding the host's static busybox as ``/bin/busybox`` plus ``files`` (path → text):
    what ``docker import`` makes a minimal image from, with no registry."""
    busybox = shutil.which("busybox") or "/bin/busybox"
    with tarfile.open(path, "w") as tar:
        tar.add(busybox, arcname="bin/busybox")
        for name, text in (files or {}).items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return path


# A node profile with a single device in the dra-example-driver schema: a driver that cannot meet most needs.
ONE_DEVICE_PROFILE = """\
name: one-device
description: a single device in the dra-example-driver schema
example:
  count: 1
  model: LATEST-GPU-MODEL
  memory: 80Gi
  driverVersion: 1.0.0
"""


@dataclass(frozen=True, kw_only=True)
class ReadLater:
    """What a fake API's ``get_claim_later`` gives: the read happens when the prepare takes the answer (in its
    thread), as a real GET's wait does."""

    read: Callable[[], Any]

    def result(self) -> Any:
        return self.read()

    def abandon(self) -> None:
        return None

    def drain(self) -> None:
        return None


def empty_record(uid: str, *, name: str = "c") -> ClaimRecord:
    """A checkpoint record of a claim ``ns/<name>`` with nothing prepared: for tests of the journal's bookkeeping."""
    return {
        "uid": uid,
        "namespace": "ns",
        "name": name,
        "devices": [],
        "cdiSpecFiles": [],
        "metadataDir": "",
        "metadataGeneration": 1,
        "nics": [],
        "mdevs": [],
    }


def count_fdatasyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every ``os.fdatasync`` the process makes from now on (still done), by descriptor, for the test's duration."""
    synced: list[int] = []
    real_fdatasync = os.fdatasync

    def fdatasync(fd: int) -> None:
        synced.append(fd)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return synced
