"""Node profiles: YAML (already read by the caller) parsed and validated into immutable model objects.

Every rule violation raises :class:`fakedev.errors.ProfileError` as ``<file>:<line>: <field path>: <rule>``, e.g.
``dgx-h100.yaml:12: gpus[2].mig.instances[1].start: 3g.40gb cannot start at memory slice 2 (valid: 0, 4)``; YAML the
reader (:mod:`yamlsafe`) refuses is ``<file>:<line>:<column>: <rule>``. Counts and lengths are capped (``MAX_*``) so
that no profile makes parsing, resolving or rendering costly. PCI addresses left out of a profile are allocated here,
deterministically, so later stages never fail.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Final, NoReturn, TypeVar

from fakedev.errors import ProfileError
from fakedev.model import catalog, mig, nic
from fakedev.model.catalog import GpuProduct
from fakedev.model.nic import LinkType, NicProduct
from fakedev.model.pci import Bdf, PcieRoot, parse_cpulist, sriov_vf_address
from fakedev.model.releases import RELEASES, DriverReleases, Extension, SchemaPin
from yamlsafe import ScalarValue, YamlError, YamlMap, YamlNode, YamlScalar, YamlSeq, kind_of, read_document

_S = TypeVar("_S", "GpuSpec", "NicSpec")

DNS_LABEL_RE: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_QUANTITY_RE: Final = re.compile(r"^[0-9]+(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
DEFAULT_DRIVER_VERSION: Final = "580.95.05"
DEFAULT_CUDA_DRIVER_VERSION: Final = "13.0"

# What one profile may ask for: far above any real node, low enough that no profile can make parsing, resolving or
# rendering costly.
MAX_GPUS: Final = 32
MAX_NICS: Final = 32
MAX_VIRTUAL_NICS: Final = 64
MAX_NUMA_NODES: Final = 64
MAX_PCIE_ROOTS: Final = 64
MAX_EXAMPLE_DEVICES: Final = 128
NAME_MAX: Final = 253
"""Any string field without a tighter rule (a DNS subdomain's length)."""
DESCRIPTION_MAX: Final = 1024
CPULIST_MAX: Final = 4096


class MigMode(StrEnum):
    DYNAMIC = "dynamic"  # every profile at every placement, created on demand (partitionable devices)
    STATIC = "static"  # MIG mode on with a fixed, pre-created layout
    DISABLED = "disabled"  # MIG mode off: the whole GPU only


class VgpuMode(StrEnum):
    TIME_SLICED = "time-sliced"
    MIG_BACKED = "mig-backed"


@dataclass(frozen=True, kw_only=True)
class MigInstanceSpec:
    profile: mig.MigProfile
    start: int


@dataclass(frozen=True, kw_only=True)
class MigSpec:
    mode: MigMode = MigMode.DYNAMIC
    instances: tuple[MigInstanceSpec, ...] = ()


@dataclass(frozen=True, kw_only=True)
class VgpuSpec:
    modes: tuple[VgpuMode, ...]


@dataclass(frozen=True, kw_only=True)
class GpuSpec:
    product: GpuProduct
    root: PcieRoot
    address: Bdf
    mig: MigSpec
    vgpu: VgpuSpec | None = None
    passthrough: bool = False
    """Bound to vfio-pci at boot for VM passthrough: published as ``gpu-vfio-<n>``, no MIG, no vGPU, no minor."""


@dataclass(frozen=True, kw_only=True)
class NicSpec:
    product: NicProduct
    root: PcieRoot
    address: Bdf
    vfs: int
    link: LinkType
    mtu: int


@dataclass(frozen=True, kw_only=True)
class VirtualNicSpec:
    name: str
    mtu: int


@dataclass(frozen=True, kw_only=True)
class ExampleSpec:
    """Devices in the dra-example-driver's ``gpu.example.com`` schema."""

    count: int
    model: str = "LATEST-GPU-MODEL"
    memory: str = "80Gi"
    driver_version: str = "1.0.0"
    shares: str | None = None
    """Smallest share of a device's ``compute`` capacity (e.g. "100m"): devices allow multiple allocations, each
    claim consuming a multiple of it (1.37 consumable capacity with DRAFractionalCapacityRange). None: whole devices."""
    fabric_attach: tuple[str, ...] = ()
    skip_node_operations: tuple[str, ...] = ()
    host_memory_per_pod: str | None = None
    """1.37 alpha: node memory each pod using a device costs besides the device (nodeAllocatableResources overhead)."""
    """1.37 alpha: node operations the kubelet skips for these devices (NodePrepareResources needs
    NodeUnprepareResources too; "*" is all)."""
    """Per device index, a fabric-attached device with binding conditions: "ready" (the driver reports it attached
    once allocated) or "fails" (the driver reports the attachment failed). Devices past the list are local."""


@dataclass(frozen=True, kw_only=True)
class NvidiaSoftware:
    driver_version: str = DEFAULT_DRIVER_VERSION
    cuda_driver_version: str = DEFAULT_CUDA_DRIVER_VERSION


@dataclass(frozen=True, kw_only=True)
class Features:
    """Opt-in 1.37 alpha API features (each needs its feature gate on the cluster)."""

    compatibility_groups: bool = False  # DRADeviceCompatibilityGroups: MIG vs vGPU on one GPU
    partition_type_attribute: bool = False  # DRAPartitionableDevicesType


@dataclass(frozen=True, kw_only=True)
class NumaNodeSpec:
    id: int
    cpus: str


@dataclass(frozen=True, kw_only=True)
class NodeProfile:
    name: str
    source: str
    description: str = ""
    software: NvidiaSoftware = field(default_factory=NvidiaSoftware)
    features: Features = field(default_factory=Features)
    releases: DriverReleases = field(default_factory=DriverReleases)
    """The release of each real driver the node imitates (``releases:``; ``--schema x@release`` overrides)."""
    extensions: frozenset[Extension] = frozenset()
    """fakedev's own additions the profile opts into (``extensions:``), which no driver release publishes."""
    numa_nodes: tuple[NumaNodeSpec, ...] = ()
    roots: tuple[PcieRoot, ...] = ()
    gpus: tuple[GpuSpec, ...] = ()
    nics: tuple[NicSpec, ...] = ()
    virtual_nics: tuple[VirtualNicSpec, ...] = ()
    example: ExampleSpec | None = None


# -- a tiny typed walker over the YAML tree that knows where it is --------------------------------------------------


class _At:
    """A YAML node (None: a key left out) with its field path and line, so every error can say where it happened."""

    def __init__(self, node: YamlNode | None, *, path: str, source: str, line: int) -> None:
        self.node = node
        self.path = path
        self.source = source
        self.line = node.line if node is not None else line

    def fail(self, rule: str) -> NoReturn:
        raise ProfileError(f"{self.source}:{self.line}: {self.path or '<top level>'}: {rule}")

    def _child(self, node: YamlNode | None, suffix: str, *, line: int | None = None) -> _At:
        path = f"{self.path}{suffix}" if suffix.startswith("[") or not self.path else f"{self.path}.{suffix}"
        return _At(node, path=path, source=self.source, line=self.line if line is None else line)

    def _scalar(self) -> ScalarValue:
        return self.node.value if isinstance(self.node, YamlScalar) else None

    def fields(self, *, known: tuple[str, ...], required: tuple[str, ...] = ()) -> dict[str, _At]:
        if not isinstance(self.node, YamlMap):
            self.fail(f"must be a mapping, not {kind_of(self.node)}")
        out: dict[str, _At] = {}
        for entry in self.node.entries:
            if entry.name not in known:
                self._child(None, entry.name, line=entry.line).fail(f"unknown key (known keys: {', '.join(known)})")
            out[entry.name] = self._child(entry.value, entry.name)
        for key in required:
            if key not in out:
                self._child(None, key).fail("is required")
        return out

    def items(self, *, most: int, what: str) -> list[_At]:
        """The list's items; more than ``most`` is an error, checked before any item is looked at."""
        if not isinstance(self.node, YamlSeq):
            self.fail(f"must be a list, not {kind_of(self.node)}")
        if len(self.node.items) > most:
            self.fail(f"lists {len(self.node.items)} {what}; a profile may list at most {most}")
        return [self._child(node, f"[{index}]") for index, node in enumerate(self.node.items)]

    def string(self, *, longest: int = NAME_MAX) -> str:
        value = self._scalar()
        if not isinstance(value, str):
            self.fail(f"must be a string, not {kind_of(self.node)}")
        if len(value) > longest:
            self.fail(f"must be at most {longest} characters, not {len(value)}")
        return value

    def integer(self, *, minimum: int | None = None, maximum: int | None = None) -> int:
        value = self._scalar()
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"must be an integer, not {kind_of(self.node)}")
        if minimum is not None and value < minimum:
            self.fail(f"must be at least {minimum}, not {value}")
        if maximum is not None and value > maximum:
            self.fail(f"must be at most {maximum}, not {value}")
        return value

    def boolean(self) -> bool:
        value = self._scalar()
        if not isinstance(value, bool):
            self.fail(f"must be true or false, not {kind_of(self.node)}")
        return value


# -- parsing -------------------------------------------------------------------------------------------------------

_TOP_KEYS: Final = (
    "name",
    "description",
    "nvidia",
    "features",
    "releases",
    "extensions",
    "numaNodes",
    "pcieRoots",
    "gpus",
    "nics",
    "virtualNics",
    "example",
)


def parse_profile(text: str | bytes, *, source: str) -> NodeProfile:
    """Parse a profile (the file's bytes, or text); ``source`` (a file name) prefixes every error message."""
    try:
        root = read_document(text, source=source)
    except YamlError as exc:
        raise ProfileError(str(exc)) from exc
    if root is None:
        raise ProfileError(f"{source}:1: <top level>: the file is empty")
    top = _At(root, path="", source=source, line=1).fields(known=_TOP_KEYS, required=("name",))
    name = top["name"].string()
    if not DNS_LABEL_RE.match(name):
        top["name"].fail("must be a DNS label (lowercase letters, digits and '-', at most 63 characters)")
    numa = _numa_nodes(top.get("numaNodes"))
    roots = _roots(top.get("pcieRoots"), numa={n.id for n in numa})
    gpu_items = top["gpus"].items(most=MAX_GPUS, what="GPUs") if "gpus" in top else []
    nic_items = top["nics"].items(most=MAX_NICS, what="NICs") if "nics" in top else []
    gpu_drafts = tuple(_gpu(at, roots=roots) for at in gpu_items)
    nic_drafts = tuple(_nic(at, roots=roots) for at in nic_items)
    features = _features(top.get("features"))
    _check_vgpu_features(gpu_drafts, features=features)
    releases = _releases(top.get("releases"))
    extensions = _extensions(top.get("extensions"))
    _check_extensions(gpu_drafts, features=features, extensions=extensions, root=top)
    gpus, nics = _place(gpus=gpu_drafts, nics=nic_drafts, roots=roots)
    virtual = _virtual_nics(top.get("virtualNics"), nics=nics)
    example = _example(top["example"]) if "example" in top else None
    if not gpus and not nics and not virtual and example is None:
        _At(root, path="", source=source, line=1).fail("declares no devices (gpus, nics, virtualNics or example)")
    return NodeProfile(
        name=name,
        source=source,
        description=top["description"].string(longest=DESCRIPTION_MAX) if "description" in top else "",
        software=_software(top.get("nvidia")),
        features=features,
        releases=releases,
        extensions=extensions,
        numa_nodes=numa,
        roots=roots,
        gpus=gpus,
        nics=nics,
        virtual_nics=virtual,
        example=example,
    )


def _numa_nodes(at: _At | None) -> tuple[NumaNodeSpec, ...]:
    nodes: list[NumaNodeSpec] = []
    owners: dict[int, int] = {}
    for item in at.items(most=MAX_NUMA_NODES, what="NUMA nodes") if at is not None else ():
        f = item.fields(known=("id", "cpus"), required=("id", "cpus"))
        node_id = f["id"].integer(minimum=0, maximum=1023)
        if any(n.id == node_id for n in nodes):
            f["id"].fail(f"NUMA node {node_id} is declared twice")
        cpus = f["cpus"].string(longest=CPULIST_MAX)
        try:
            numbers = parse_cpulist(cpus)
        except ValueError as exc:
            f["cpus"].fail(str(exc))
        for cpu in numbers:
            owner = owners.setdefault(cpu, node_id)
            if owner != node_id:
                f["cpus"].fail(f"CPU {cpu} is already in NUMA node {owner}")
        nodes.append(NumaNodeSpec(id=node_id, cpus=cpus))
    return tuple(nodes)


def _roots(at: _At | None, *, numa: set[int]) -> tuple[PcieRoot, ...]:
    roots: list[PcieRoot] = []
    for item in at.items(most=MAX_PCIE_ROOTS, what="PCIe roots") if at is not None else ():
        f = item.fields(known=("name", "numaNode"), required=("name",))
        numa_node = f["numaNode"].integer(minimum=0) if "numaNode" in f else None
        if numa_node is not None and numa_node not in numa:
            f["numaNode"].fail(f"NUMA node {numa_node} is not declared in numaNodes")
        try:
            root = PcieRoot.parse(f["name"].string(), numa_node=numa_node)
        except ValueError as exc:
            f["name"].fail(str(exc))
        if any(r.name == root.name for r in roots):
            f["name"].fail(f"PCIe root {root.name} is declared twice")
        roots.append(root)
    return tuple(roots)


def _root_of(at: _At, *, roots: tuple[PcieRoot, ...]) -> PcieRoot:
    name = at.string()
    root = next((r for r in roots if r.name == name), None)
    if root is None:
        at.fail(f"unknown PCIe root {name!r} (declared: {', '.join(r.name for r in roots) or 'none'})")
    return root


def _address(at: _At) -> Bdf:
    try:
        return Bdf.parse(at.string())
    except ValueError as exc:
        at.fail(str(exc))


@dataclass(frozen=True, kw_only=True)
class _Placed:
    """Where a device sits before every address is known, with the field paths errors should point at."""

    at: _At
    root: PcieRoot
    address: Bdf | None
    address_at: _At | None


@dataclass(frozen=True, kw_only=True)
class _GpuDraft:
    placed: _Placed
    product: GpuProduct
    mig: MigSpec
    vgpu: VgpuSpec | None
    vgpu_at: _At | None
    passthrough: bool = False


@dataclass(frozen=True, kw_only=True)
class _NicDraft:
    placed: _Placed
    product: NicProduct
    vfs: int
    link: LinkType
    mtu: int


def _placed(at: _At, f: dict[str, _At], *, roots: tuple[PcieRoot, ...]) -> _Placed:
    return _Placed(
        at=at,
        root=_root_of(f["root"], roots=roots),
        address=_address(f["address"]) if "address" in f else None,
        address_at=f.get("address"),
    )


def _gpu(at: _At, *, roots: tuple[PcieRoot, ...]) -> _GpuDraft:
    f = at.fields(known=("product", "root", "address", "mig", "vgpu", "passthrough"), required=("product", "root"))
    key = f["product"].string()
    product = catalog.GPU_PRODUCTS.get(key)
    if product is None:
        f["product"].fail(f"unknown product {key!r} (known: {', '.join(catalog.GPU_PRODUCTS)})")
    placed = _placed(at, f, roots=roots)
    vgpu = _vgpu(f["vgpu"], product=product) if "vgpu" in f else None
    if vgpu is not None and "mig" in f:
        f["mig"].fail("a GPU offering vGPU takes its MIG layout from the vGPU types; drop `mig`")
    mig_spec = _mig(f["mig"], product=product) if "mig" in f else MigSpec()
    passthrough = f["passthrough"].boolean() if "passthrough" in f else False
    if passthrough and ("mig" in f or "vgpu" in f):
        f["passthrough"].fail("a GPU bound to vfio-pci for passthrough has no MIG or vGPU; drop `mig`/`vgpu`")
    return _GpuDraft(
        placed=placed, product=product, mig=mig_spec, vgpu=vgpu, vgpu_at=f.get("vgpu"), passthrough=passthrough
    )


def _mig(at: _At, *, product: GpuProduct) -> MigSpec:
    f = at.fields(known=("mode", "instances"), required=("mode",))
    mode_text = f["mode"].string()
    try:
        mode = MigMode(mode_text)
    except ValueError:
        f["mode"].fail(f"unknown MIG mode {mode_text!r} (known: {', '.join(m.value for m in MigMode)})")
    if mode is not MigMode.STATIC:
        if "instances" in f:
            f["instances"].fail("only a static MIG layout lists instances")
        return MigSpec(mode=mode)
    if "instances" not in f:
        f["mode"].fail("a static MIG layout needs `instances`")
    instances: list[MigInstanceSpec] = []
    item_fields: list[dict[str, _At]] = []
    for item in f["instances"].items(most=mig.MAX_GPU_INSTANCES, what="MIG instances (one GPU's limit)"):
        i = item.fields(known=("profile", "start"), required=("profile", "start"))
        name = i["profile"].string()
        profile = product.mig_profile(name)
        if profile is None:
            known = ", ".join(p.name for p in product.mig_profiles)
            i["profile"].fail(f"{product.key} has no MIG profile {name!r} (known: {known})")
        instances.append(MigInstanceSpec(profile=profile, start=i["start"].integer(minimum=0)))
        item_fields.append(i)
    if not instances:
        f["instances"].fail("a static MIG layout needs at least one instance")
    layout = [mig.LayoutInstance(profile=i.profile, start=i.start) for i in instances]
    for problem in mig.check_layout(layout, full=product.full_engines):
        target = item_fields[min(problem.index, len(item_fields) - 1)]
        target["start"].fail(problem.rule)
    return MigSpec(mode=mode, instances=tuple(instances))


def _vgpu(at: _At, *, product: GpuProduct) -> VgpuSpec:
    f = at.fields(known=("modes",), required=("modes",))
    if not product.vgpu_types:
        at.fail(f"{product.key} has no vGPU types in the catalogue")
    modes: list[VgpuMode] = []
    for item in f["modes"].items(most=len(VgpuMode), what="vGPU modes"):
        text = item.string()
        try:
            mode = VgpuMode(text)
        except ValueError:
            item.fail(f"unknown vGPU mode {text!r} (known: {', '.join(m.value for m in VgpuMode)})")
        if mode in modes:
            item.fail(f"vGPU mode {text!r} is listed twice")
        modes.append(mode)
    if not modes:
        f["modes"].fail("needs at least one vGPU mode")
    return VgpuSpec(modes=tuple(modes))


def _nic(at: _At, *, roots: tuple[PcieRoot, ...]) -> _NicDraft:
    f = at.fields(known=("product", "root", "address", "vfs", "linkType", "mtu"), required=("product", "root"))
    key = f["product"].string()
    product = nic.NIC_PRODUCTS.get(key)
    if product is None:
        f["product"].fail(f"unknown product {key!r} (known: {', '.join(nic.NIC_PRODUCTS)})")
    vfs = f["vfs"].integer(minimum=0) if "vfs" in f else 0
    if vfs > product.sriov_totalvfs:
        f["vfs"].fail(f"{vfs} VFs is more than the {product.key} PF allows (sriov_totalvfs {product.sriov_totalvfs})")
    link = LinkType.ETHERNET
    if "linkType" in f:
        text = f["linkType"].string()
        try:
            link = LinkType(text)
        except ValueError:
            f["linkType"].fail(f"unknown link type {text!r} (known: {', '.join(t.value for t in LinkType)})")
    mtu = f["mtu"].integer(minimum=68, maximum=65520) if "mtu" in f else 1500
    return _NicDraft(placed=_placed(at, f, roots=roots), product=product, vfs=vfs, link=link, mtu=mtu)


def _features(at: _At | None) -> Features:
    if at is None:
        return Features()
    f = at.fields(known=("compatibilityGroups", "partitionTypeAttribute"))
    return Features(
        compatibility_groups=f["compatibilityGroups"].boolean() if "compatibilityGroups" in f else False,
        partition_type_attribute=f["partitionTypeAttribute"].boolean() if "partitionTypeAttribute" in f else False,
    )


def _releases(at: _At | None) -> DriverReleases:
    if at is None:
        return DriverReleases()
    f = at.fields(known=tuple(RELEASES))
    releases = DriverReleases()
    for schema, kind in RELEASES.items():
        if schema in f:
            text = f[schema].string()
            try:
                releases = releases.pinned(SchemaPin(schema=schema, release=kind(text)))
            except ValueError:
                f[schema].fail(f"unknown {schema} release {text!r} (known: {', '.join(r.value for r in kind)})")
    return releases


def _extensions(at: _At | None) -> frozenset[Extension]:
    if at is None:
        return frozenset()
    chosen: set[Extension] = set()
    for item in at.items(most=len(Extension), what="extensions"):
        text = item.string()
        try:
            chosen.add(Extension(text))
        except ValueError:
            item.fail(f"unknown extension {text!r} (known: {', '.join(e.value for e in Extension)})")
    return frozenset(chosen)


def _check_extensions(
    drafts: tuple[_GpuDraft, ...], *, features: Features, extensions: frozenset[Extension], root: dict[str, _At]
) -> None:
    # No NVIDIA driver release publishes vGPU devices or compatibility groups: a profile that wants them says so,
    # so nobody mistakes them for what the real driver does.
    if Extension.VGPU in extensions:
        return
    for draft in drafts:
        if draft.vgpu is not None and draft.vgpu_at is not None:
            draft.vgpu_at.fail(
                "vGPU devices are fakedev's own model (no release of the NVIDIA DRA driver publishes them): "
                "opt in with `extensions: [vgpu]`"
            )
    if features.compatibility_groups and "features" in root:
        root["features"].fail(
            "compatibility groups are published only for vGPU, fakedev's own model: opt in with `extensions: [vgpu]`"
        )


def _check_vgpu_features(drafts: tuple[_GpuDraft, ...], *, features: Features) -> None:
    # Offering both vGPU kinds on one GPU is only safe when compatibility groups keep them apart.
    for draft in drafts:
        if (
            draft.vgpu is not None
            and draft.vgpu_at is not None
            and len(draft.vgpu.modes) > 1
            and not features.compatibility_groups
        ):
            draft.vgpu_at.fail(
                "offering time-sliced and MIG-backed vGPU on one GPU needs features.compatibilityGroups: true"
            )


def _software(at: _At | None) -> NvidiaSoftware:
    if at is None:
        return NvidiaSoftware()
    f = at.fields(known=("driverVersion", "cudaDriverVersion"))
    software = NvidiaSoftware(
        driver_version=f["driverVersion"].string() if "driverVersion" in f else DEFAULT_DRIVER_VERSION,
        cuda_driver_version=f["cudaDriverVersion"].string()
        if "cudaDriverVersion" in f
        else DEFAULT_CUDA_DRIVER_VERSION,
    )
    for key, value in (("driverVersion", software.driver_version), ("cudaDriverVersion", software.cuda_driver_version)):
        if not re.match(r"^[0-9]+(\.[0-9]+){0,2}$", value):
            f[key].fail(f"{value!r} is not a version such as 580.95.05")
    return software


def _example(at: _At) -> ExampleSpec:
    f = at.fields(
        known=(
            "count",
            "model",
            "memory",
            "driverVersion",
            "shares",
            "fabricAttach",
            "skipNodeOperations",
            "hostMemoryPerPod",
        ),
        required=("count",),
    )
    spec = ExampleSpec(
        count=f["count"].integer(minimum=1, maximum=MAX_EXAMPLE_DEVICES),
        model=f["model"].string() if "model" in f else ExampleSpec.model,
        memory=f["memory"].string() if "memory" in f else ExampleSpec.memory,
        driver_version=f["driverVersion"].string() if "driverVersion" in f else ExampleSpec.driver_version,
        shares=f["shares"].string() if "shares" in f else None,
        fabric_attach=tuple(i.string() for i in f["fabricAttach"].items(most=MAX_EXAMPLE_DEVICES, what="devices"))
        if "fabricAttach" in f
        else (),
        skip_node_operations=tuple(i.string() for i in f["skipNodeOperations"].items(most=3, what="operations"))
        if "skipNodeOperations" in f
        else (),
    )
    if "hostMemoryPerPod" in f:
        spec = replace(spec, host_memory_per_pod=f["hostMemoryPerPod"].string())
        if not _QUANTITY_RE.match(spec.host_memory_per_pod or ""):
            f["hostMemoryPerPod"].fail(f"{spec.host_memory_per_pod!r} is not a quantity such as 16Gi")
    ops = set(spec.skip_node_operations)
    if not ops <= {"NodePrepareResources", "NodeUnprepareResources", "*"}:
        f["skipNodeOperations"].fail("known values are NodePrepareResources, NodeUnprepareResources and *")
    if "NodePrepareResources" in ops and not ops & {"NodeUnprepareResources", "*"}:
        f["skipNodeOperations"].fail("NodePrepareResources may only be skipped together with NodeUnprepareResources")
    for i, outcome in enumerate(spec.fabric_attach):
        if outcome not in ("ready", "fails"):
            f["fabricAttach"].fail(f"item {i}: {outcome!r} is not ready or fails")
    if len(spec.fabric_attach) > spec.count:
        f["fabricAttach"].fail(f"lists {len(spec.fabric_attach)} devices but count is {spec.count}")
    if spec.shares is not None and not re.match(r"^(0\.[0-9]{1,3}|[1-9][0-9]{0,2}m)$", spec.shares):
        f["shares"].fail(f"{spec.shares!r} is not a share of one device such as 100m or 0.25 (at most 3 decimals)")
    if not _QUANTITY_RE.match(spec.memory):
        f["memory"].fail(f"{spec.memory!r} is not a quantity such as 80Gi")
    if len(spec.model) > 64:
        f["model"].fail("must be at most 64 characters (the API's limit for string attributes)")
    if not re.match(r"^[0-9]+\.[0-9]+\.[0-9]+$", spec.driver_version):
        f["driverVersion"].fail(f"{spec.driver_version!r} is not a semantic version such as 1.0.0")
    return spec


def _virtual_nics(at: _At | None, *, nics: tuple[NicSpec, ...]) -> tuple[VirtualNicSpec, ...]:
    taken: set[str] = set()
    for spec in nics:
        taken.add(nic.pf_ifname(spec.address, link=spec.link))
        taken.update(nic.vf_ifname(spec.address, index=n, link=spec.link) for n in range(spec.vfs))
    out: list[VirtualNicSpec] = []
    for item in at.items(most=MAX_VIRTUAL_NICS, what="virtual NICs") if at is not None else ():
        f = item.fields(known=("name", "mtu"), required=("name",))
        name = f["name"].string()
        # DraNet names non-PCI interfaces after themselves, so the name must also be a DNS label.
        if not DNS_LABEL_RE.match(name) or len(name) > nic.IFNAME_MAX:
            f["name"].fail(f"{name!r} must be a DNS label of at most {nic.IFNAME_MAX} characters")
        if name in taken:
            f["name"].fail(f"interface name {name!r} is already used")
        taken.add(name)
        out.append(VirtualNicSpec(name=name, mtu=f["mtu"].integer(minimum=68, maximum=65520) if "mtu" in f else 1500))
    return tuple(out)


# -- address allocation and collision rules ------------------------------------------------------------------------


def _bus_window(root: PcieRoot, *, roots: tuple[PcieRoot, ...]) -> range:
    """Buses below ``root``: from the one after its root bus up to the next root bus of the same domain."""
    following = [r.bus for r in roots if r.domain == root.domain and r.bus > root.bus]
    return range(root.bus + 1, min(following, default=0x100))


def _place(
    *, gpus: tuple[_GpuDraft, ...], nics: tuple[_NicDraft, ...], roots: tuple[PcieRoot, ...]
) -> tuple[tuple[GpuSpec, ...], tuple[NicSpec, ...]]:
    placed = [g.placed for g in gpus] + [n.placed for n in nics]
    taken: dict[tuple[int, int], str] = {}
    for item in placed:
        if item.address is None or item.address_at is None:
            continue
        window = _bus_window(item.root, roots=roots)
        bus = item.address.bus
        if bus not in window:
            item.address_at.fail(
                f"bus {bus:02x} is not below {item.root.name} (its buses are {window.start:02x}-{window.stop - 1:02x})"
            )
        owner = taken.get((item.address.domain, bus))
        if owner is not None:
            item.address_at.fail(f"bus {bus:02x} is already used by {owner} (one endpoint per bus)")
        taken[(item.address.domain, bus)] = item.at.path
    # Devices without an address get the lowest free bus below their root, in declaration order.
    addresses: list[Bdf] = []
    for item in placed:
        if item.address is not None:
            addresses.append(item.address)
            continue
        free = next((b for b in _bus_window(item.root, roots=roots) if (item.root.domain, b) not in taken), None)
        if free is None:
            item.at.fail(f"no free bus left below {item.root.name}")
        taken[(item.root.domain, free)] = item.at.path
        addresses.append(Bdf(domain=item.root.domain, bus=free, device=0, function=0))
    gpu_specs = tuple(
        GpuSpec(
            product=d.product,
            root=d.placed.root,
            address=addresses[i],
            mig=d.mig,
            vgpu=d.vgpu,
            passthrough=d.passthrough,
        )
        for i, d in enumerate(gpus)
    )
    nic_specs = tuple(
        NicSpec(
            product=d.product, root=d.placed.root, address=addresses[len(gpus) + i], vfs=d.vfs, link=d.link, mtu=d.mtu
        )
        for i, d in enumerate(nics)
    )
    functions = [
        (g.placed, s.address, _vfs(g.placed, gpu_vf_addresses, s)) for g, s in zip(gpus, gpu_specs, strict=True)
    ]
    functions += [
        (n.placed, s.address, _vfs(n.placed, nic_vf_addresses, s)) for n, s in zip(nics, nic_specs, strict=True)
    ]
    _check_virtual_functions(functions, roots=roots)
    return gpu_specs, nic_specs


def _vfs(placed: _Placed, addresses: Callable[[_S], list[Bdf]], spec: _S) -> list[Bdf]:
    """The device's VF addresses; SR-IOV arithmetic past the domain's last bus is the profile's mistake."""
    try:
        return addresses(spec)
    except ValueError as exc:
        placed.at.fail(f"its VFs do not fit after {placed.address or 'its address'}: {exc}")


def _check_virtual_functions(functions: list[tuple[_Placed, Bdf, list[Bdf]]], *, roots: tuple[PcieRoot, ...]) -> None:
    owners = {address: item.at.path for item, address, _ in functions}
    for item, _, vfs in functions:
        window = _bus_window(item.root, roots=roots)
        for n, vf in enumerate(vfs):
            if vf.bus not in window:
                item.at.fail(f"VF {n} at {vf} falls outside the buses of {item.root.name}")
            if vf in owners:
                item.at.fail(f"VF {n} at {vf} collides with {owners[vf]}")
            owners[vf] = f"{item.at.path} VF {n}"


def gpu_vf_addresses(gpu: GpuSpec) -> list[Bdf]:
    """The SR-IOV VFs a vGPU-enabled GPU exposes (the mdev parents on Ampere and newer)."""
    if gpu.vgpu is None:
        return []
    return [
        sriov_vf_address(gpu.address, offset=catalog.GPU_VF_OFFSET, stride=catalog.GPU_VF_STRIDE, index=n)
        for n in range(gpu.product.vgpu_vf_count)
    ]


def nic_vf_addresses(spec: NicSpec) -> list[Bdf]:
    return [
        sriov_vf_address(spec.address, offset=spec.product.vf_offset, stride=spec.product.vf_stride, index=n)
        for n in range(spec.vfs)
    ]
