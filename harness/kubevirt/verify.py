"""``fakedev kubevirt verify``: would this VMI's DRA GPUs reach the VM, and does every source agree on them?

Given a VMI manifest, its launcher pod and the node that runs it, the verifier:

1. applies KubeVirt's admission rules for DRA devices (:mod:`harness.kubevirt.vmi`);
2. rebuilds the compute container's view of the device-metadata tree from the CDI edits the node injected (the
   CDI IDs of the pod's prepared claims, resolved in the node's CDI directories) and reads it as virt-launcher does
   (:mod:`harness.kubevirt.launcher`), rendering the ``<hostdev>`` XML;
3. cross-checks each device against the ResourceSlice (pciBusID and pcieRoot agree, no ``mdevUUID`` on a device the
   slice publishes as PCI passthrough), the claim's allocation, sysfs (the device bound to vfio-pci, its IOMMU
   group, the mdev present) and the CDI edits (``/dev/vfio/vfio`` and ``/dev/vfio/<group>`` reach the container);
4. optionally compares with what the launcher stand-in printed inside the container.

Every rule checked becomes a :class:`Finding`; the report fails when any finding does.

The node-side facts are read through a :class:`~harness.kubevirt.nodefiles.NodeFiles`: the local filesystem for an
emulated node (:func:`emulated_node_view`, the kubelet checkpoint names the prepared claims), or the chart's plugin pod
on a real node (:func:`plugin_node_view`, the plugins' own checkpoints name them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Final

import yaml

import cdi
from cdi.loader import SPEC_SUFFIXES
from harness.errors import LauncherError, VerifyError
from harness.kubevirt.launcher import (
    ATTRIBUTES_ROOT,
    PCI_BUS_ID,
    PCIE_ROOT,
    ContainerFiles,
    HostDevice,
    read_host_device,
    render_hostdev,
)
from harness.kubevirt.nodefiles import LocalNodeFiles, NodeFiles
from harness.kubevirt.pluginpod import PluginPod
from harness.kubevirt.vmi import Finding, check_admission, dra_devices
from harness.node.dra_manager import parse_checkpoint
from harness.node.layout import NodeLayout
from harness.node.podclaims import compute_container_cdi_ids, compute_pod_claims
from kubeclient import JsonObj, KubeClient
from kubeclient.resources import PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from kubeletapi.types import PreparedDevice

VFIO_DRIVER: Final = "vfio-pci"
LAUNCHER_LABEL: Final = "kubevirt.io/domain"
COMPUTE_CONTAINER: Final = "compute"
_HOSTDEV: Final = re.compile(r"<hostdev\b.*?</hostdev>", re.DOTALL)


@dataclass(frozen=True, kw_only=True)
class PreparedClaim:
    """A claim the node prepared, with the devices (and their CDI IDs) one driver or all of them returned."""

    namespace: str
    name: str
    devices: tuple[PreparedDevice, ...]


@dataclass(frozen=True, kw_only=True)
class NodeView:
    """What the verifier reads on the node, and how it reads it."""

    files: NodeFiles
    cdi_dirs: tuple[PurePosixPath, ...]
    claims: tuple[PreparedClaim, ...]
    """The prepared claims (from a checkpoint: the kubelet's, or each plugin's)."""
    sysfs_roots: Mapping[str, PurePosixPath] = field(default_factory=dict)
    """Driver → the sysfs tree its devices live in; unlisted drivers use ``/sys``."""

    def sysfs(self, driver: str) -> PurePosixPath:
        return self.sysfs_roots.get(driver, PurePosixPath("/sys"))


@dataclass(frozen=True, kw_only=True)
class Report:
    vmi: str
    pod: str
    findings: tuple[Finding, ...]
    hostdevs: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)

    def failed(self) -> list[Finding]:
        return [f for f in self.findings if not f.ok]

    def render(self) -> str:
        width = max((len(f.rule) for f in self.findings), default=10)
        lines = [f"VMI {self.vmi} (launcher pod {self.pod})"]
        lines += [f"  {'PASS' if f.ok else 'FAIL'}  {f.rule:<{width}}  {f.detail}" for f in self.findings]
        passed = sum(f.ok for f in self.findings)
        lines.append(f"{passed} of {len(self.findings)} rules passed")
        if self.hostdevs:
            lines += ["", "hostdev XML virt-launcher would write:", *self.hostdevs]
        return "\n".join(lines)


# -- the container's view, rebuilt from CDI ------------------------------------------------------------------------


def container_view(
    *, edits: Sequence[cdi.ContainerEdits], node_files: NodeFiles
) -> tuple[ContainerFiles, tuple[cdi.DeviceNode, ...]]:
    """The attributes tree as bind mounts make it appear in the container, and the device nodes it gets."""
    files: dict[PurePosixPath, PurePosixPath] = {}
    nodes: list[cdi.DeviceNode] = []
    for e in edits:
        nodes += e.device_nodes
        for m in e.mounts:
            target = PurePosixPath(m.container_path)
            if target.is_relative_to(ATTRIBUTES_ROOT):
                files[target] = PurePosixPath(m.host_path)

    def list_dir(directory: PurePosixPath) -> list[str]:
        names = [p.name for p in files if p.parent == directory]
        if not names:
            raise FileNotFoundError(str(directory))
        return names

    def read(path: PurePosixPath) -> bytes:
        return node_files.read_bytes(files[path])

    return ContainerFiles(list_dir=list_dir, read=read), tuple(nodes)


def scan_cdi_dirs(files: NodeFiles, *, cdi_dirs: Sequence[PurePosixPath]) -> cdi.ScanResult:
    """What :func:`cdi.scan_spec_dirs` finds, read through ``files``: every spec directly in each directory, sorted,
    later directories winning; a missing directory is empty, a spec that fails to read or parse is an error."""
    specs: list[cdi.LoadedSpec] = []
    errors: list[cdi.CdiError] = []
    for priority, spec_dir in enumerate(cdi_dirs):
        try:
            names = files.list_dir(spec_dir)
        except FileNotFoundError:
            continue
        for name in names:
            path = spec_dir / name
            if path.suffix not in SPEC_SUFFIXES:
                continue
            try:
                text = files.read_bytes(path).decode("utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                errors.append(cdi.SpecReadError(f"cannot read CDI spec {path}: {exc}", path=Path(path)))
                continue
            fmt: cdi.SpecFormat = "json" if path.suffix == ".json" else "yaml"
            try:
                spec = cdi.parse_spec_text(text, source=str(path), fmt=fmt)
            except cdi.CdiError as exc:
                errors.append(exc)
                continue
            specs.append(cdi.LoadedSpec(spec=spec, path=Path(path), priority=priority))
    return cdi.ScanResult(specs=tuple(specs), errors=tuple(errors))


def _edits(ids: Sequence[str], *, node: NodeView) -> list[cdi.ContainerEdits]:
    registry = cdi.build_registry(scan=scan_cdi_dirs(node.files, cdi_dirs=node.cdi_dirs))
    out = []
    for resolved in registry.resolve_all(ids):
        if resolved.source.spec.container_edits is not None:
            out.append(resolved.source.spec.container_edits)
        out.append(resolved.device.container_edits)
    return out


# -- the checks ----------------------------------------------------------------------------------------------------


def _slice_device(client: KubeClient, *, driver: str, pool: str, name: str) -> JsonObj | None:
    for s in client.list(RESOURCE_SLICES, field_selector=f"spec.driver={driver}"):
        if s["spec"].get("pool", {}).get("name") != pool:
            continue
        for d in s["spec"].get("devices") or []:
            if d["name"] == name:
                return dict(d)
    return None


def _attr(attributes: Mapping[str, Any], name: str) -> str | None:
    value = (attributes.get(name) or {}).get("string")
    return None if value is None else str(value)


def _check_device(
    *,
    host: HostDevice,
    claim: JsonObj,
    client: KubeClient,
    node: NodeView,
    nodes: Sequence[cdi.DeviceNode],
) -> list[Finding]:
    tag = f"{host.device.kind} {host.device.name}"
    out: list[Finding] = []
    entry = host.metadata_device
    driver, pool, name = str(entry.get("driver")), str(entry.get("pool")), str(entry.get("name"))
    results = [
        r
        for r in ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
        if r["request"] == host.device.request or r["request"].startswith(host.device.request + "/")
    ]
    allocated = [(r["driver"], r["pool"], r["device"]) for r in results]
    out.append(
        Finding(
            rule="claim/allocated-device",
            ok=allocated == [(driver, pool, name)],
            detail=f"{tag}: metadata names {driver}/{pool}/{name}, the claim's allocation {allocated}",
        )
    )
    published = _slice_device(client, driver=driver, pool=pool, name=name)
    if published is None:
        out.append(Finding(rule="slice/device", ok=False, detail=f"{tag}: {driver}/{pool}/{name} is in no slice"))
        return out
    attrs, meta_attrs = published.get("attributes") or {}, entry.get("attributes") or {}
    slice_bdf = _attr(attrs, PCI_BUS_ID)
    if host.kind == "mdev":
        out.append(
            Finding(
                rule="slice/no-stray-mdev",
                ok=slice_bdf is None,
                detail=f"{tag}: mdevUUID {host.address} on a device the slice publishes as PCI {slice_bdf}"
                if slice_bdf
                else f"{tag}: mdevUUID on a mediated device (the slice has no pciBusID for it)",
            )
        )
    else:
        out.append(
            Finding(
                rule="slice/pci-bus-id",
                ok=slice_bdf == host.address,
                detail=f"{tag}: metadata pciBusID {host.address}, slice {slice_bdf}",
            )
        )
        out.append(
            Finding(
                rule="metadata/bdf-canonical",
                ok=host.address == host.address.lower(),
                detail=f"{tag}: pciBusID {host.address!r} is "
                + (
                    "lowercase, as sysfs names the device"
                    if host.address == host.address.lower()
                    else "not lowercase: no /sys/bus/pci/devices entry has that name"
                ),
            )
        )
    meta_root, slice_root = _attr(meta_attrs, PCIE_ROOT), _attr(attrs, PCIE_ROOT)
    out.append(
        Finding(
            rule="slice/pcie-root",
            ok=meta_root == slice_root,
            detail=f"{tag}: metadata pcieRoot {meta_root}, slice {slice_root}",
        )
    )
    group = _sysfs_checks(host, files=node.files, sysfs=node.sysfs(driver), tag=tag, out=out)
    paths = {n.path for n in nodes}
    want = {"/dev/vfio/vfio"} | ({f"/dev/vfio/{group}"} if group is not None else set())
    missing = sorted(want - paths)
    out.append(
        Finding(
            rule="cdi/vfio-group-node",
            ok=not missing and group is not None,
            detail=f"{tag}: the container gets {', '.join(sorted(want))}"
            if not missing and group is not None
            else f"{tag}: CDI edits lack {', '.join(missing) or 'a group node (no IOMMU group known)'}",
        )
    )
    return out


def _sysfs_checks(
    host: HostDevice, *, files: NodeFiles, sysfs: PurePosixPath, tag: str, out: list[Finding]
) -> int | None:
    """sysfs facts for the device; returns its IOMMU group (None when sysfs cannot tell)."""
    if host.kind == "mdev":
        mdev = sysfs / "bus" / "mdev" / "devices" / host.address
        ok = files.exists(mdev)
        mdev_type = files.read_bytes(mdev / "mdev_type" / "name").decode().strip() if ok else ""
        out.append(
            Finding(
                rule="sysfs/mdev",
                ok=ok,
                detail=f"{tag}: {mdev} " + (f"exists (type {mdev_type})" if ok else "does not exist"),
            )
        )
        group_link = mdev / "iommu_group"
    else:
        device = sysfs / "bus" / "pci" / "devices" / host.address
        if not files.exists(device):
            out.append(Finding(rule="sysfs/pci-device", ok=False, detail=f"{tag}: {device} does not exist"))
            return None
        bound = files.resolve(device / "driver").name if files.exists(device / "driver") else None
        out.append(
            Finding(
                rule="sysfs/vfio-bound",
                ok=bound == VFIO_DRIVER,
                detail=f"{tag}: {host.address} is bound to {bound or 'no driver'}",
            )
        )
        group_link = device / "iommu_group"
    if not files.exists(group_link):
        out.append(Finding(rule="sysfs/iommu-group", ok=False, detail=f"{tag}: {group_link} is missing"))
        return None
    group = int(files.resolve(group_link).name)
    out.append(Finding(rule="sysfs/iommu-group", ok=True, detail=f"{tag}: IOMMU group {group}"))
    return group


def find_launcher_pod(client: KubeClient, *, vmi: Mapping[str, Any]) -> JsonObj:
    meta = vmi.get("metadata") or {}
    name, namespace = meta.get("name"), meta.get("namespace") or "default"
    pods = client.list(PODS, namespace=namespace, label_selector=f"{LAUNCHER_LABEL}={name}")
    if len(pods) != 1:
        raise VerifyError(
            f"expected one launcher pod labelled {LAUNCHER_LABEL}={name} in {namespace}, found {len(pods)}"
        )
    return pods[0]


def verify_vmi(
    *,
    vmi: Mapping[str, Any],
    client: KubeClient,
    node: NodeView,
    pod: JsonObj | None = None,
    container_output: str | None = None,
) -> Report:
    findings = check_admission(vmi)
    pod = pod or find_launcher_pod(client, vmi=vmi)
    namespace = pod["metadata"]["namespace"]
    containers = pod["spec"]["containers"]
    compute = next((c for c in containers if c["name"] == COMPUTE_CONTAINER), containers[0])
    prepared: dict[str, list[PreparedDevice]] = {}
    for c in node.claims:
        if c.namespace == namespace:
            prepared.setdefault(c.name, []).extend(c.devices)
    ids = compute_container_cdi_ids(pod=pod, container=compute, prepared=prepared)
    try:
        edits = _edits(ids, node=node)
    except cdi.CdiError as exc:
        findings.append(Finding(rule="cdi/resolve", ok=False, detail=str(exc)))
        edits = []
    files, device_nodes = container_view(edits=edits, node_files=node.files)
    claim_names = {c.pod_claim_name: c.claim_name for c in compute_pod_claims(pod)}
    devices = dra_devices(vmi)
    hosts: list[HostDevice] = []
    for device in devices:
        try:
            host = read_host_device(device, files)
        except LauncherError as exc:
            findings.append(Finding(rule=exc.rule, ok=False, detail=f"{device.kind} {device.name}: {exc}"))
            continue
        findings.append(
            Finding(rule="launcher/read", ok=True, detail=f"{device.kind} {device.name}: {host.kind} {host.address}")
        )
        hosts.append(host)
        claim_name = claim_names.get(device.claim.name)
        claim = client.get_or_none(RESOURCE_CLAIMS, claim_name, namespace=namespace) if claim_name else None
        if claim is None:
            findings.append(Finding(rule="claim/exists", ok=False, detail=f"no ResourceClaim for {device.claim.name}"))
            continue
        findings += _check_device(host=host, claim=claim, client=client, node=node, nodes=device_nodes)
    gpus = [d for d in devices if d.kind == "gpu"]
    made = [h for h in hosts if h.device.kind == "gpu"]
    findings.append(
        Finding(
            rule="launcher/gpu-count",
            ok=len(gpus) == len(made),
            detail=f"{len(gpus)} DRA GPUs, {len(made)} host devices",
        )
    )
    hostdevs = tuple(render_hostdev(h) for h in hosts)
    if container_output is not None:
        inside = tuple(_HOSTDEV.findall(container_output))
        findings.append(
            Finding(
                rule="container/agrees",
                ok=inside == hostdevs,
                detail="the launcher stand-in in the container printed the same hostdev XML"
                if inside == hostdevs
                else f"the container printed {len(inside)} hostdevs that differ from the host's {len(hostdevs)}: "
                + (container_output.strip().splitlines() or ["(nothing)"])[-1],
            )
        )
    return Report(
        vmi=str((vmi.get("metadata") or {}).get("name")),
        pod=pod["metadata"]["name"],
        findings=tuple(findings),
        hostdevs=hostdevs,
    )


# -- an emulated node's files ----------------------------------------------------------------------------------------


def emulated_node_view(layout: NodeLayout) -> NodeView:
    """An emulated node's CDI dir, DRA checkpoint, and each fake plugin's sysfs tree (``plugins/<driver>/sys``),
    read from the local filesystem."""
    plugins = layout.plugins
    sysfs = {p.name: p / "sys" for p in plugins.iterdir() if (p / "sys").is_dir()} if plugins.is_dir() else {}
    try:
        kubelet_claims = parse_checkpoint(layout.dra_checkpoint.read_bytes(), source=str(layout.dra_checkpoint))
    except OSError as exc:
        raise VerifyError(f"{layout.dra_checkpoint}: cannot read the node's DRA checkpoint: {exc.strerror}") from exc
    claims = tuple(
        PreparedClaim(namespace=c.namespace, name=c.name, devices=tuple(c.all_devices()))
        for c in kubelet_claims.values()
    )
    return NodeView(
        files=LocalNodeFiles(),
        cdi_dirs=(PurePosixPath(layout.cdi),),
        claims=claims,
        sysfs_roots={driver: PurePosixPath(root) for driver, root in sysfs.items()},
    )


PLUGIN_CHECKPOINT: Final = "checkpoint.json"
PLUGIN_SYSFS: Final = "sys"

ReadPluginCheckpoint = Callable[[bytes, str], Sequence[PreparedClaim]]
"""(a plugin checkpoint's bytes, where it was read) → the claims it records; the plugin owns that format."""


def plugin_node_view(plugin: PluginPod, *, files: NodeFiles, read_checkpoint: ReadPluginCheckpoint) -> NodeView:
    """A node running the chart's plugins, read through ``files`` (the plugin pod): each driver's directory under
    the kubelet root's ``plugins`` holds its checkpoint (the claims it prepared, with their CDI IDs) and its fake
    sysfs; the CDI dir is the plugin's. The kubelet's own checkpoint is not in the pod, and not needed: the claims a
    pod uses are prepared by the plugins of their drivers."""
    return _plugins_view(
        files=files, plugins_dir=plugin.plugins_dir, cdi_dir=plugin.cdi_dir, read_checkpoint=read_checkpoint
    )


def local_plugins_view(*, kubelet_root: Path, cdi_dir: Path, read_checkpoint: ReadPluginCheckpoint) -> NodeView:
    """A real node on this machine (``fakedev drill --real-node``): the same plugin directories and CDI dir as
    :func:`plugin_node_view`, read from the local filesystem (the node's kubelet root is a directory of its run)."""
    return _plugins_view(
        files=LocalNodeFiles(),
        plugins_dir=PurePosixPath(kubelet_root / "plugins"),
        cdi_dir=PurePosixPath(cdi_dir),
        read_checkpoint=read_checkpoint,
    )


def _plugins_view(
    *, files: NodeFiles, plugins_dir: PurePosixPath, cdi_dir: PurePosixPath, read_checkpoint: ReadPluginCheckpoint
) -> NodeView:
    claims: list[PreparedClaim] = []
    sysfs: dict[str, PurePosixPath] = {}
    try:
        drivers = files.list_dir(plugins_dir)
    except FileNotFoundError as exc:
        raise VerifyError(f"{plugins_dir} is missing in {files.where}: is the plugins dir mounted?") from exc
    for driver in drivers:
        directory = plugins_dir / driver
        checkpoint = directory / PLUGIN_CHECKPOINT
        try:
            data = files.read_bytes(checkpoint)
        except FileNotFoundError:
            continue  # not a fake plugin's directory (or one that never prepared anything)
        claims += read_checkpoint(data, f"{checkpoint} in {files.where}")
        if files.exists(directory / PLUGIN_SYSFS):
            sysfs[driver] = directory / PLUGIN_SYSFS
    return NodeView(files=files, cdi_dirs=(cdi_dir,), claims=tuple(claims), sysfs_roots=sysfs)


def emulated_container_log(layout: NodeLayout, *, pod: Mapping[str, Any], container: str) -> str | None:
    """The latest run's output of ``container`` on an emulated node, or None if it has not run there."""
    return layout.pod(pod["metadata"]["uid"]).latest_log(container)


def load_vmi(path: Path) -> dict[str, Any]:
    """A VMI manifest (YAML or JSON); the first document whose kind is VirtualMachineInstance."""

    try:
        docs = list(yaml.safe_load_all(path.read_text()))
    except (OSError, yaml.YAMLError) as exc:
        raise VerifyError(f"{path}: cannot read a VMI manifest: {exc}") from exc
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "VirtualMachineInstance":
            return doc
    raise VerifyError(f"{path}: no document of kind VirtualMachineInstance")
