"""Drill scenarios: YAML files read into typed steps, every mistake reported as ``file:line: field: rule``.

A scenario names its nodes (profile, drivers), DeviceClasses, workloads (manifests with ``{{node:NAME}}``,
``{{class:NAME}}`` and ``{{namespace}}`` placeholders), and an ordered list of steps: ``apply``, ``delete``,
``wait`` (a condition within a timeout), ``assert`` (a condition now), ``fault`` and ``recover``. ``expect`` says in
plain words what a correct cluster does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from harness.errors import ScenarioError as ScenarioError

FAULTS: Final = (
    "driver-kill",
    "driver-hang",
    "driver-resume",
    "driver-restart",
    "driver-socket-remove",
    "node-reboot",
    "device-health",
    "prepare-fault",
    "clear-faults",
    "taint-rule",
    "taint-rule-remove",
    "apiserver-stop",
    "apiserver-start",
    "etcd-stop",
    "etcd-start",
    "nic-unplug",
    "nic-replug",
)
CONDITIONS: Final = ("pod", "pods", "claim", "slices", "event", "kubevirt", "field")
STEP_KINDS: Final = ("apply", "delete", "wait", "assert", "fault", "recover")
DEFAULT_TIMEOUT: Final = 60.0


@dataclass(frozen=True, kw_only=True)
class NodeSpec:
    name: str
    profile: str
    drivers: tuple[str, ...] = ()
    """Schemas to run (nvidia, dranet, example); empty: every schema the profile has devices for."""
    wipe_grace: float = 30.0
    max_pods: int | None = None
    """The Node's pod capacity (default 250, as the emulator registers nodes)."""
    memory: str | None = None
    """The Node's memory capacity (default 512Gi)."""


@dataclass(frozen=True, kw_only=True)
class ClassSpec:
    name: str
    cel: str
    extended_resource_name: str | None = None


@dataclass(frozen=True, kw_only=True)
class Step:
    index: int
    line: int
    kind: str
    title: str
    body: Mapping[str, Any]
    """The step's own keys (condition, fault arguments, workload names)."""
    timeout: float = DEFAULT_TIMEOUT


@dataclass(frozen=True, kw_only=True)
class Requirements:
    feature_gates: tuple[str, ...] = ()
    api_versions: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Scenario:
    path: Path
    name: str
    description: str
    expect: str
    local_only: bool
    feature: str
    """The Kubernetes feature the drill exercises, for the feature matrix ("" for fault drills)."""
    requires: Requirements
    maturity: str
    """The feature's maturity when no feature gate tells (e.g. a beta API without a gate); "" otherwise."""
    nodes: tuple[NodeSpec, ...]
    classes: tuple[ClassSpec, ...]
    workloads: Mapping[str, str]
    replicas: Mapping[str, int] = field(default_factory=dict)
    """Workload name → how many copies its manifests make (``{{replica}}`` is the copy's number)."""
    steps: tuple[Step, ...] = field(default=())


class _Node:
    """A YAML node with its position, for errors that say where."""

    def __init__(self, source: str, node: yaml.Node, path: str) -> None:
        self.source, self.node, self.path = source, node, path

    @property
    def line(self) -> int:
        return int(self.node.start_mark.line) + 1

    def fail(self, rule: str) -> ScenarioError:
        return ScenarioError(f"{self.source}:{self.line}: {self.path}: {rule}")

    def mapping(self, *, allowed: set[str], required: frozenset[str] | set[str] = frozenset()) -> dict[str, _Node]:
        if not isinstance(self.node, yaml.MappingNode):
            raise self.fail("must be a mapping")
        out: dict[str, _Node] = {}
        for key, value in self.node.value:
            name = key.value
            child = _Node(self.source, value, f"{self.path}.{name}" if self.path else name)
            if name not in allowed:
                raise _Node(self.source, key, child.path).fail(f"unknown field (allowed: {', '.join(sorted(allowed))})")
            if name in out:
                raise _Node(self.source, key, child.path).fail("appears twice")
            out[name] = child
        missing = sorted(required - set(out))
        if missing:
            raise self.fail(f"missing required field {missing[0]!r}")
        return out

    def sequence(self) -> list[_Node]:
        if not isinstance(self.node, yaml.SequenceNode):
            raise self.fail("must be a list")
        return [_Node(self.source, v, f"{self.path}[{i}]") for i, v in enumerate(self.node.value)]

    def string(self) -> str:
        if not isinstance(self.node, yaml.ScalarNode) or self.node.tag.endswith((":int", ":float", ":bool", ":null")):
            raise self.fail("must be a string")
        return str(self.node.value)

    def number(self) -> float:
        value = self.plain()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail("must be a number")
        return float(value)

    def boolean(self) -> bool:
        value = self.plain()
        if not isinstance(value, bool):
            raise self.fail("must be true or false")
        return value

    def plain(self) -> Any:
        return yaml.safe_load(yaml.serialize(self.node))


def _step(n: _Node, index: int) -> Step:
    fields = n.mapping(
        allowed={
            *STEP_KINDS,
            "name",
            "timeout",
            "node",
            "driver",
            "device",
            "state",
            "taint",
            "message",
            "failTimes",
            "delaySeconds",
            "error",
            "rule",
            "effect",
            "claim",
            "request",
        }
    )
    kinds = [k for k in STEP_KINDS if k in fields]
    if len(kinds) != 1:
        raise n.fail(f"a step has exactly one of {', '.join(STEP_KINDS)} (found {kinds or 'none'})")
    kind = kinds[0]
    body = {k: v.plain() for k, v in fields.items() if k not in ("name", "timeout")}
    what = fields[kind]
    if kind in ("fault", "recover"):
        fault = what.string()
        if fault not in FAULTS:
            raise what.fail(f"unknown fault {fault!r} (known: {', '.join(FAULTS)})")
    elif kind in ("wait", "assert"):
        cond = what.mapping(
            allowed={
                *CONDITIONS,
                "phase",
                "evicted",
                "deleted",
                "log",
                "health",
                "restarts",
                "allocated",
                "count",
                "min",
                "tainted",
                "reason",
                "contains",
                "object",
                "prefix",
                "absent",
                "node",
                "driver",
                "scheduled",
                "request",
                "extendedClass",
                "sameAttribute",
                "networkIn",
                "devices",
                "attribute",
                "path",
                "equals",
                "length",
            }
        )
        present = [c for c in CONDITIONS if c in cond]
        if len(present) != 1:
            raise what.fail(f"a condition names exactly one of {', '.join(CONDITIONS)} (found {present or 'none'})")
    elif kind in ("apply", "delete"):
        value = what.plain()
        if not isinstance(value, (str, list)):
            raise what.fail("names a workload (or a list of workloads)")
    title = fields["name"].string() if "name" in fields else f"{kind} {what.plain()}"
    timeout = fields["timeout"].number() if "timeout" in fields else DEFAULT_TIMEOUT
    return Step(index=index, line=n.line, kind=kind, title=str(title)[:120], body=body, timeout=timeout)


def parse_scenario(text: str, *, source: str) -> Scenario:
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{source}: not valid YAML: {exc}") from exc
    if root is None:
        raise ScenarioError(f"{source}:1: the file is empty")
    top = _Node(source, root, "").mapping(
        allowed={
            "name",
            "description",
            "expect",
            "localOnly",
            "feature",
            "maturity",
            "requires",
            "nodes",
            "classes",
            "workloads",
            "steps",
        },
        required={"name", "expect", "nodes", "steps"},
    )
    nodes = []
    for n in top["nodes"].sequence():
        f = n.mapping(
            allowed={"name", "profile", "drivers", "wipeGrace", "maxPods", "memory"}, required={"name", "profile"}
        )
        drivers = tuple(d.string() for d in f["drivers"].sequence()) if "drivers" in f else ()
        for d in drivers:
            if d not in ("nvidia", "dranet", "example"):
                raise f["drivers"].fail(f"unknown driver schema {d!r} (nvidia, dranet, example)")
        nodes.append(
            NodeSpec(
                name=f["name"].string(),
                profile=f["profile"].string(),
                drivers=drivers,
                wipe_grace=f["wipeGrace"].number() if "wipeGrace" in f else 30.0,
                max_pods=int(f["maxPods"].number()) if "maxPods" in f else None,
                memory=f["memory"].string() if "memory" in f else None,
            )
        )
    classes = []
    for c in top["classes"].sequence() if "classes" in top else []:
        f = c.mapping(allowed={"name", "cel", "extendedResourceName"}, required={"name", "cel"})
        classes.append(
            ClassSpec(
                name=f["name"].string(),
                cel=f["cel"].string(),
                extended_resource_name=f["extendedResourceName"].string() if "extendedResourceName" in f else None,
            )
        )
    workloads: dict[str, str] = {}
    replicas: dict[str, int] = {}
    if "workloads" in top:
        for name, w in top["workloads"].mapping(allowed=set(_keys(top["workloads"]))).items():
            text_at = w
            if isinstance(w.node, yaml.MappingNode):
                # {replicas: N, manifests: |...}: the manifests N times, {{replica}} numbering each copy.
                f = w.mapping(allowed={"replicas", "manifests"}, required={"replicas", "manifests"})
                count = f["replicas"].number()
                if count != int(count) or not 1 <= count <= 5000:
                    raise f["replicas"].fail("must be a whole number from 1 to 5000")
                replicas[name] = int(count)
                text_at = f["manifests"]
            workloads[name] = text_at.string()
            try:
                list(yaml.safe_load_all(text_at.string()))
            except yaml.YAMLError as exc:
                raise text_at.fail(f"is not valid YAML: {exc}") from exc
    steps = tuple(_step(s, i) for i, s in enumerate(top["steps"].sequence()))
    node_names = {n.name for n in nodes}
    for s in steps:
        if s.kind in ("apply", "delete"):
            for w in [s.body[s.kind]] if isinstance(s.body[s.kind], str) else s.body[s.kind]:
                if w not in workloads:
                    raise ScenarioError(f"{source}:{s.line}: steps[{s.index}].{s.kind}: unknown workload {w!r}")
        if "node" in s.body and s.body["node"] not in node_names:
            raise ScenarioError(f"{source}:{s.line}: steps[{s.index}].node: unknown node {s.body['node']!r}")
    return Scenario(
        path=Path(source),
        name=top["name"].string(),
        description=top["description"].string() if "description" in top else "",
        expect=top["expect"].string(),
        local_only=top["localOnly"].boolean() if "localOnly" in top else False,
        feature=top["feature"].string() if "feature" in top else "",
        maturity=top["maturity"].string() if "maturity" in top else "",
        requires=_requirements(top["requires"]) if "requires" in top else Requirements(),
        nodes=tuple(nodes),
        classes=tuple(classes),
        workloads=workloads,
        replicas=replicas,
        steps=steps,
    )


def _requirements(n: _Node) -> Requirements:
    f = n.mapping(allowed={"featureGates", "apiVersions"})
    gates = tuple(g.string() for g in f["featureGates"].sequence()) if "featureGates" in f else ()
    versions = tuple(v.string() for v in f["apiVersions"].sequence()) if "apiVersions" in f else ()
    for item, version in zip(f["apiVersions"].sequence() if "apiVersions" in f else [], versions, strict=True):
        if version != "v1" and "/" not in version:
            raise item.fail(f"{version!r} is not <group>/<version> (or v1)")
    return Requirements(feature_gates=gates, api_versions=versions)


def _keys(n: _Node) -> list[str]:
    if not isinstance(n.node, yaml.MappingNode):
        raise n.fail("must be a mapping of workload name to manifests")
    return [k.value for k, _ in n.node.value]


def load_scenario(path: Path) -> Scenario:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return parse_scenario(text, source=str(path))
