"""Drill scenarios: YAML files read into typed steps, every mistake reported as ``file:line: field: rule``.

A scenario names its nodes (profile, drivers), DeviceClasses, workloads (manifests with ``{{node:NAME}}``,
``{{class:NAME}}`` and ``{{namespace}}`` placeholders), and an ordered list of steps: ``apply``, ``delete``,
``wait`` (a condition within a timeout), ``assert`` (a condition now), ``fault`` and ``recover``. ``expect`` says in
plain words what a correct cluster does.

Steps are typed per kind: :class:`WorkloadStep` (apply, delete), :class:`ConditionStep` (wait, assert) and
:class:`FaultStep` (fault, recover), whose :class:`FaultKind` says who performs it (:attr:`FaultKind.performer`).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

from harness.errors import ScenarioError
from kubeclient.values import TaintEffect
from kubeletapi.types import HealthState
from yamlsafe import (
    DEFAULT_LIMITS,
    NonFinite,
    Plain,
    YamlError,
    YamlMap,
    YamlNode,
    YamlScalar,
    YamlSeq,
    read_document,
    to_plain,
)
from yamlsafe import read_documents as read_yaml_stream

_E = TypeVar("_E", bound=enum.StrEnum)

CONDITIONS: Final = ("pod", "pods", "claim", "slices", "event", "kubevirt", "field")
DEFAULT_TIMEOUT: Final = 60.0
MAX_SECONDS: Final = 24 * 3600.0
"""The longest timeout, grace period or delay a scenario may ask for."""
MAX_REPLICAS: Final = 5000
MAX_PODS: Final = 10_000
_RELEASE_RE: Final = re.compile(r"^[a-z0-9][a-z0-9.]{0,31}$")
"""What may follow ``<schema>@`` in a node's drivers (``main``, ``v0.4.1``); the fake driver knows which exist."""


class StepKind(enum.StrEnum):
    APPLY = "apply"
    DELETE = "delete"
    WAIT = "wait"
    ASSERT = "assert"
    FAULT = "fault"
    RECOVER = "recover"
    """The same as fault; reads better for undoing one."""


class Performer(enum.StrEnum):
    """Who makes a fault happen."""

    RUNNER = "runner"
    """API-level and control-plane faults: plain API calls or stopping a component, no driver involved."""
    ENVIRONMENT = "environment"
    """Node, driver, device and NIC faults: they need the driver's or the node's cooperation."""


class FaultKind(enum.StrEnum):
    DRIVER_KILL = "driver-kill"
    DRIVER_HANG = "driver-hang"
    DRIVER_RESUME = "driver-resume"
    DRIVER_RESTART = "driver-restart"
    DRIVER_SOCKET_REMOVE = "driver-socket-remove"
    NODE_REBOOT = "node-reboot"
    DEVICE_HEALTH = "device-health"
    PREPARE_FAULT = "prepare-fault"
    CLEAR_FAULTS = "clear-faults"
    TAINT_RULE = "taint-rule"
    TAINT_RULE_REMOVE = "taint-rule-remove"
    APISERVER_STOP = "apiserver-stop"
    APISERVER_START = "apiserver-start"
    ETCD_STOP = "etcd-stop"
    ETCD_START = "etcd-start"
    NIC_UNPLUG = "nic-unplug"
    NIC_REPLUG = "nic-replug"

    @property
    def performer(self) -> Performer:
        return Performer.RUNNER if self in _RUNNER_FAULTS else Performer.ENVIRONMENT

    @property
    def targets_a_device(self) -> bool:
        """The fault acts on one device, named by ``device:`` or found through ``claim:``."""
        return self in (FaultKind.DEVICE_HEALTH, FaultKind.NIC_UNPLUG, FaultKind.NIC_REPLUG)


_RUNNER_FAULTS: Final = frozenset(
    {
        FaultKind.TAINT_RULE,
        FaultKind.TAINT_RULE_REMOVE,
        FaultKind.APISERVER_STOP,
        FaultKind.APISERVER_START,
        FaultKind.ETCD_STOP,
        FaultKind.ETCD_START,
    }
)


@dataclass(frozen=True, kw_only=True)
class NodeSpec:
    name: str
    profile: str
    drivers: tuple[str, ...] = ()
    """Schemas to run (nvidia, dranet, example), each optionally pinned to a release of the real driver
    (``nvidia@main``: a drill that needs what only that release publishes); empty: every schema the profile has
    devices for, at the profile's releases."""
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
class StepBase:
    """What every step has: its position, a title for progress and reports, and a timeout."""

    index: int
    line: int
    title: str
    timeout: float = DEFAULT_TIMEOUT


@dataclass(frozen=True, kw_only=True)
class WorkloadStep(StepBase):
    """``apply`` or ``delete`` the objects of one or more workloads."""

    kind: Literal[StepKind.APPLY, StepKind.DELETE]
    workloads: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class ConditionStep(StepBase):
    """``wait`` for a condition (within the timeout) or ``assert`` it now."""

    kind: Literal[StepKind.WAIT, StepKind.ASSERT]
    condition: Mapping[str, Any]
    """One of the condition keys (``pod``, ``claims``, …) and its options, as :mod:`harness.drills.conditions` reads."""


@dataclass(frozen=True, kw_only=True)
class FaultStep(StepBase):
    """``fault`` or ``recover``: one fault and the fields it uses; None is "not given" (the performer's default)."""

    kind: Literal[StepKind.FAULT, StepKind.RECOVER]
    fault: FaultKind
    node: str | None = None
    """A scenario node name (default: the first node)."""
    driver: str | None = None
    device: str | None = None
    claim: str | None = None
    """A claim in the drill namespace: the fault targets the device allocated to it."""
    request: str | None = None
    """Which request of ``claim`` (default: its first allocated device)."""
    state: HealthState | None = None
    taint: TaintEffect | None = None
    message: str | None = None
    fail_times: int | None = None
    delay_seconds: float | None = None
    error: str | None = None
    rule: str | None = None
    effect: TaintEffect | None = None


Step = WorkloadStep | ConditionStep | FaultStep


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
    """A YAML node with its field path, for errors that say where."""

    def __init__(self, source: str, node: YamlNode, path: str) -> None:
        self.source, self.node, self.path = source, node, path

    @property
    def line(self) -> int:
        return self.node.line

    def fail(self, rule: str) -> ScenarioError:
        return ScenarioError(f"{self.source}:{self.line}: {self.path}: {rule}")

    def mapping(self, *, allowed: set[str], required: frozenset[str] | set[str] = frozenset()) -> dict[str, _Node]:
        if not isinstance(self.node, YamlMap):
            raise self.fail("must be a mapping")
        out: dict[str, _Node] = {}
        for entry in self.node.entries:
            path = f"{self.path}.{entry.name}" if self.path else entry.name
            if entry.name not in allowed:
                raise ScenarioError(
                    f"{self.source}:{entry.line}: {path}: unknown field (allowed: {', '.join(sorted(allowed))})"
                )
            out[entry.name] = _Node(self.source, entry.value, path)
        missing = sorted(required - set(out))
        if missing:
            raise self.fail(f"missing required field {missing[0]!r}")
        return out

    def sequence(self) -> list[_Node]:
        if not isinstance(self.node, YamlSeq):
            raise self.fail("must be a list")
        return [_Node(self.source, v, f"{self.path}[{i}]") for i, v in enumerate(self.node.items)]

    def is_string(self) -> bool:
        return isinstance(self.node, YamlScalar) and isinstance(self.node.value, str)

    def string(self) -> str:
        if not isinstance(self.node, YamlScalar) or not isinstance(self.node.value, str):
            raise self.fail("must be a string")
        return self.node.value

    def number(self) -> float:
        value = self.node.value if isinstance(self.node, YamlScalar) else None
        if isinstance(value, NonFinite):
            raise self.fail(f"must be a finite number, not {value.text}")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail("must be a number")
        return float(value)

    def whole(self, *, minimum: int, maximum: int, rule: str) -> int:
        """An integer within bounds; ``rule`` is the whole message when it is not."""
        value = self.node.value if isinstance(self.node, YamlScalar) else None
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
            raise self.fail(rule)
        return value

    def seconds(self, *, minimum: float, above: bool) -> float:
        """A finite duration from ``minimum`` (or above it, when ``above``) up to :data:`MAX_SECONDS`."""
        lowest = f"{'>' if above else '>='} {minimum:g}"
        rule = f"must be a finite number of seconds {lowest} and at most {MAX_SECONDS:g} (24 h)"
        if isinstance(self.node, YamlScalar) and isinstance(self.node.value, NonFinite):
            raise self.fail(rule)
        value = self.number()
        if value < minimum or (above and value == minimum) or value > MAX_SECONDS:
            raise self.fail(rule)
        return value

    def choice(self, values: type[_E]) -> _E:
        value = self.node.value if isinstance(self.node, YamlScalar) else None
        for v in values:
            if isinstance(value, str) and v.value == value:
                return v
        raise self.fail(f"must be one of {', '.join(v.value for v in values)}")

    def boolean(self) -> bool:
        value = self.node.value if isinstance(self.node, YamlScalar) else None
        if not isinstance(value, bool):
            raise self.fail("must be true or false")
        return value

    def plain(self) -> Plain:
        try:
            return to_plain(self.node, source=self.source)
        except YamlError as exc:
            raise ScenarioError(f"{self.source}:{exc.line}: {self.path}: {exc.rule}") from exc


_FAULT_FIELDS: Final = frozenset(
    {
        "node",
        "driver",
        "device",
        "claim",
        "request",
        "state",
        "taint",
        "message",
        "failTimes",
        "delaySeconds",
        "error",
        "rule",
        "effect",
    }
)


class _Value(enum.Enum):
    """What a condition field holds; checked when the file is read, so a drill never fails on a typo halfway."""

    TEXT = "a string"
    FLAG = "true or false"
    COUNT = "a whole number"
    NUMBER = "a number"
    ANY = "any value"


_CONDITION_FIELDS: Final = {
    **dict.fromkeys(CONDITIONS, _Value.TEXT),
    "phase": _Value.TEXT,
    "evicted": _Value.FLAG,
    "deleted": _Value.FLAG,
    "log": _Value.TEXT,
    "health": _Value.TEXT,
    "restarts": _Value.COUNT,
    "allocated": _Value.FLAG,
    "count": _Value.COUNT,
    "min": _Value.NUMBER,
    "tainted": _Value.FLAG,
    "reason": _Value.TEXT,
    "contains": _Value.TEXT,
    "object": _Value.TEXT,
    "prefix": _Value.TEXT,
    "absent": _Value.FLAG,
    "node": _Value.TEXT,
    "driver": _Value.TEXT,
    "scheduled": _Value.FLAG,
    "request": _Value.TEXT,
    "extendedClass": _Value.TEXT,
    "sameAttribute": _Value.TEXT,
    "networkIn": _Value.TEXT,
    "devices": _Value.COUNT,
    "attribute": _Value.TEXT,
    "path": _Value.TEXT,
    "equals": _Value.ANY,
    "length": _Value.COUNT,
}
_COUNT_MAX: Final = 1_000_000
_CHECKS: Final[dict[_Value, Callable[[_Node], object]]] = {
    _Value.TEXT: _Node.string,
    _Value.FLAG: _Node.boolean,
    _Value.COUNT: lambda n: n.whole(
        minimum=0, maximum=_COUNT_MAX, rule=f"must be a whole number from 0 to {_COUNT_MAX}"
    ),
    _Value.NUMBER: _Node.number,
    _Value.ANY: _Node.plain,
}


def _step(n: _Node, index: int) -> Step:
    fields = n.mapping(allowed={*StepKind, "name", "timeout", *_FAULT_FIELDS})
    kinds = [k.value for k in StepKind if k in fields]
    if len(kinds) != 1:
        raise n.fail(f"a step has exactly one of {', '.join(StepKind)} (found {kinds or 'none'})")
    kind = StepKind(kinds[0])
    what = fields[kind]
    given_title = fields["name"].string() if "name" in fields else None

    def title() -> str:
        # Called once the action is checked: the action's plain value may hold nothing the checks refuse.
        return str(given_title if given_title is not None else f"{kind} {what.plain()}")[:120]

    timeout = fields["timeout"].seconds(minimum=0, above=True) if "timeout" in fields else DEFAULT_TIMEOUT
    if kind in (StepKind.FAULT, StepKind.RECOVER):
        return _fault_step(fields, kind=kind, index=index, line=n.line, title=title, timeout=timeout)
    for name, field_node in fields.items():
        if name in _FAULT_FIELDS:
            raise field_node.fail("only a fault or recover step takes this field")
    if kind in (StepKind.WAIT, StepKind.ASSERT):
        cond = what.mapping(allowed=set(_CONDITION_FIELDS))
        present = [c for c in CONDITIONS if c in cond]
        if len(present) != 1:
            raise what.fail(f"a condition names exactly one of {', '.join(CONDITIONS)} (found {present or 'none'})")
        for key, value in cond.items():
            _CHECKS[_CONDITION_FIELDS[key]](value)
        return ConditionStep(
            index=index,
            line=n.line,
            title=title(),
            timeout=timeout,
            kind=kind,
            condition={key: value.plain() for key, value in cond.items()},
        )
    if isinstance(what.node, YamlSeq):
        workloads = tuple(w.string() for w in what.sequence())
    elif what.is_string():
        workloads = (what.string(),)
    else:
        raise what.fail("names a workload (or a list of workloads)")
    return WorkloadStep(
        index=index,
        line=n.line,
        title=title(),
        timeout=timeout,
        kind=kind,
        workloads=workloads,
    )


def _fault_step(
    fields: Mapping[str, _Node],
    *,
    kind: Literal[StepKind.FAULT, StepKind.RECOVER],
    index: int,
    line: int,
    title: Callable[[], str],
    timeout: float,
) -> FaultStep:
    what = fields[kind]
    name = what.string()
    try:
        fault = FaultKind(name)
    except ValueError:
        raise what.fail(f"unknown fault {name!r} (known: {', '.join(FaultKind)})") from None

    def text(key: str) -> str | None:
        return fields[key].string() if key in fields else None

    def effect(key: str) -> TaintEffect | None:
        return fields[key].choice(TaintEffect) if key in fields else None

    fail_times = None
    if "failTimes" in fields:
        fail_times = fields["failTimes"].whole(
            minimum=-1,
            maximum=_COUNT_MAX,
            rule=f"must be a whole number >= -1 (-1: every call until cleared) and at most {_COUNT_MAX}",
        )
    delay = fields["delaySeconds"].seconds(minimum=0, above=False) if "delaySeconds" in fields else None
    step = FaultStep(
        index=index,
        line=line,
        title=title(),
        timeout=timeout,
        kind=kind,
        fault=fault,
        node=text("node"),
        driver=text("driver"),
        device=text("device"),
        claim=text("claim"),
        request=text("request"),
        state=fields["state"].choice(HealthState) if "state" in fields else None,
        taint=effect("taint"),
        message=text("message"),
        fail_times=fail_times,
        delay_seconds=delay,
        error=text("error"),
        rule=text("rule"),
        effect=effect("effect"),
    )
    # What a fault cannot do without; the performers would otherwise fail only once the drill got there.
    if fault.targets_a_device and step.device is None and step.claim is None:
        raise what.fail(f"{fault} needs device: or claim:")
    if fault is FaultKind.TAINT_RULE and step.driver is None:
        raise what.fail(f"{fault} needs driver:")
    return step


def parse_scenario(text: str | bytes, *, source: str) -> Scenario:
    """Read a scenario (the file's bytes, or text); ``source`` names the file in every error."""
    try:
        root = read_document(text, source=source)
    except YamlError as exc:
        raise ScenarioError(str(exc)) from exc
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
            # The release after '@' is checked by the fake driver, which knows its releases (the harness does not).
            schema, at, release = d.partition("@")
            if schema not in ("nvidia", "dranet", "example") or (at and not _RELEASE_RE.match(release)):
                raise f["drivers"].fail(
                    f"unknown driver schema {d!r} (nvidia, dranet, example; pinned to a release: nvidia@main)"
                )
        nodes.append(
            NodeSpec(
                name=f["name"].string(),
                profile=f["profile"].string(),
                drivers=drivers,
                wipe_grace=f["wipeGrace"].seconds(minimum=0, above=False) if "wipeGrace" in f else 30.0,
                max_pods=f["maxPods"].whole(
                    minimum=1, maximum=MAX_PODS, rule=f"must be a whole number from 1 to {MAX_PODS}"
                )
                if "maxPods" in f
                else None,
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
            if isinstance(w.node, YamlMap):
                # {replicas: N, manifests: |...}: the manifests N times, {{replica}} numbering each copy.
                f = w.mapping(allowed={"replicas", "manifests"}, required={"replicas", "manifests"})
                replicas[name] = f["replicas"].whole(
                    minimum=1, maximum=MAX_REPLICAS, rule=f"must be a whole number from 1 to {MAX_REPLICAS}"
                )
                text_at = f["manifests"]
            workloads[name] = text_at.string()
            # The runner parses the manifests later with PyYAML; the bounded reader vouches for them now.
            try:
                read_yaml_stream(workloads[name], source=text_at.path)
            except YamlError as exc:
                raise text_at.fail(
                    f"is not valid YAML: line {exc.line}, column {exc.column} of the manifests: {exc.rule}"
                ) from exc
    steps = tuple(_step(s, i) for i, s in enumerate(top["steps"].sequence()))
    node_names = {n.name for n in nodes}
    for s in steps:
        if isinstance(s, WorkloadStep):
            for workload in s.workloads:
                if workload not in workloads:
                    raise ScenarioError(f"{source}:{s.line}: steps[{s.index}].{s.kind}: unknown workload {workload!r}")
        if isinstance(s, FaultStep) and s.node is not None and s.node not in node_names:
            raise ScenarioError(f"{source}:{s.line}: steps[{s.index}].node: unknown node {s.node!r}")
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
    if not isinstance(n.node, YamlMap):
        raise n.fail("must be a mapping of workload name to manifests")
    return list(n.node.names())


def load_scenario(path: Path) -> Scenario:
    try:
        # One byte past the limit is enough for the reader to refuse a file that is too large.
        with path.open("rb") as file:
            data = file.read(DEFAULT_LIMITS.max_bytes + 1)
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return parse_scenario(data, source=str(path))
