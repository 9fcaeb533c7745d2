"""DeviceFault objects (``fakedev.io/v1alpha1``) and what they mean to a plugin, as pure functions.

The CRD is ``deploy/helm/fakedev/crds/devicefaults.fakedev.io.yaml``; its CEL rules keep most mistakes out of the API,
and :func:`parse_device_fault` checks the same rules again, because an object may predate a rule, come from a CRD
someone edited, or (in the fuzz target) be anything at all. From a parsed fault:

- :func:`effect_of` gives the internal fault it stands for: a :class:`DeviceEffect` (health on the stream and a taint
  in the slice, what the control socket's set-health does) or a :class:`PrepareEffect` (a :class:`CallFault` on
  prepare, what its set-fault does);
- :func:`plan_outcomes` decides, for the objects a plugin sees, which are applied, cleared or failed;
- :func:`combine_device_states` and :func:`merge_prepare_fault` fold every fault in force into what the device
  board and the prepare slot must hold; :func:`render_status` is the status the plugin writes back.

:mod:`fakedev.plugin.fault_watch` does the I/O around them; ``fakedev fault --kubeconfig`` builds objects with
:func:`render_device_fault`.
"""

from __future__ import annotations

import datetime
import enum
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, NotRequired, TypedDict

from fakedev.errors import DeviceFaultError
from fakedev.faults import CallFault
from kubeclient import JsonObj
from kubeclient.resources import DEVICE_FAULTS
from kubeclient.timestamps import parse_time, render_time
from kubeclient.values import TaintEffect
from kubeletapi.types import Health

DEFAULT_TAINT_KEY: Final = "fakedev.io/fault"
DEFAULT_PREPARE_ERROR: Final = "injected fault"
MAX_COUNT: Final = 1_000_000
MAX_DELAY_SECONDS: Final = 3600.0
"""The control socket's bound too: a longer delay is a hang, which SIGSTOP does better."""
MAX_TEXT: Final = 1024
MAX_NODE_NAME: Final = 253
MAX_LABEL: Final = 63
MAX_TAINT_KEY: Final = 316
_DNS_SUBDOMAIN: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_LABEL_VALUE: Final = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?", re.ASCII)
_TAINT_KEY: Final = re.compile(rf"({_DNS_SUBDOMAIN}/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", re.ASCII)
_DURATION: Final = re.compile(r"([0-9]+(\.[0-9]+)?(ms|s|m|h))+", re.ASCII)
_DURATION_PART: Final = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)", re.ASCII)
_UNIT_SECONDS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_SPEC_FIELDS: Final = frozenset(
    {"nodeName", "driver", "device", "kind", "until", "unhealthy", "taint", "failPrepare", "slowPrepare"}
)


class DeviceFaultKind(enum.StrEnum):
    UNHEALTHY = "Unhealthy"
    TAINT = "Taint"
    FAIL_PREPARE = "FailPrepare"
    SLOW_PREPARE = "SlowPrepare"
    NIC_UNPLUG = "NicUnplug"
    NIC_DOWN = "NicDown"

    @property
    def member(self) -> str | None:
        """The spec field carrying this kind's parameters; None for kinds that have none."""
        return _MEMBERS.get(self)

    @property
    def per_device(self) -> bool:
        """The fault acts on one device (``spec.device`` required); the others act on every prepare."""
        return self not in (DeviceFaultKind.FAIL_PREPARE, DeviceFaultKind.SLOW_PREPARE)


_MEMBERS: Final[Mapping[DeviceFaultKind, str]] = {
    DeviceFaultKind.UNHEALTHY: "unhealthy",
    DeviceFaultKind.TAINT: "taint",
    DeviceFaultKind.FAIL_PREPARE: "failPrepare",
    DeviceFaultKind.SLOW_PREPARE: "slowPrepare",
}
_REQUIRED_MEMBER: Final = frozenset({DeviceFaultKind.TAINT, DeviceFaultKind.FAIL_PREPARE, DeviceFaultKind.SLOW_PREPARE})
_TAINT_EFFECTS: Final = (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)


class Phase(enum.StrEnum):
    APPLIED = "Applied"
    CLEARED = "Cleared"
    """``until`` passed (the plugin cleared it, or it had passed before the plugin saw the fault)."""
    FAILED = "Failed"


# -- the object ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class UnhealthyParams:
    message: str = ""
    taint_effect: TaintEffect | None = None


@dataclass(frozen=True, kw_only=True)
class TaintParams:
    effect: TaintEffect
    key: str = DEFAULT_TAINT_KEY
    value: str = ""


@dataclass(frozen=True, kw_only=True)
class FailPrepareParams:
    count: int
    message: str = DEFAULT_PREPARE_ERROR


@dataclass(frozen=True, kw_only=True)
class SlowPrepareParams:
    delay: int | str
    """As written: whole seconds or a duration string (``1.5s``, ``500ms``, ``2m``, ``1h``)."""

    @property
    def seconds(self) -> float:
        return delay_seconds(self.delay)


Params = UnhealthyParams | TaintParams | FailPrepareParams | SlowPrepareParams | None


@dataclass(frozen=True, kw_only=True)
class DeviceFaultSpec:
    node_name: str
    driver: str
    kind: DeviceFaultKind
    device: str | None = None
    params: Params = None
    """The kind's member; None for kinds without one (and for Unhealthy written without it)."""
    until: datetime.datetime | None = None


class DeviceFaultStatusJson(TypedDict):
    phase: NotRequired[str]
    observedGeneration: NotRequired[int]
    appliedTime: NotRequired[str]
    clearedTime: NotRequired[str]
    error: NotRequired[str]


@dataclass(frozen=True, kw_only=True)
class DeviceFault:
    """One object as seen: its identity, its spec (or why the spec is unusable) and the status it carries."""

    name: str
    uid: str
    generation: int
    node_name: str | None
    driver: str | None
    """``spec.nodeName`` and ``spec.driver`` as written (None: not a string), even when the spec is unusable: the
    plugin they name reports the problem in the status."""
    spec: DeviceFaultSpec | None
    """None when the spec breaks a rule: then ``problem`` says which."""
    problem: str | None
    seen_status: DeviceFaultStatusJson
    """The status as it came (only well-formed fields kept): to adopt times and to skip writes that change nothing."""


def _fail(where: str, rule: str) -> DeviceFaultError:
    return DeviceFaultError(f"{where}: {rule}")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _object(doc: Mapping[str, object], key: str, *, where: str) -> Mapping[str, object] | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _fail(f"{where}.{key}", "must be an object")
    return value


def _str(doc: Mapping[str, object], key: str, *, where: str, limit: int, required: bool = False) -> str | None:
    value = doc.get(key)
    if value is None:
        if required:
            raise _fail(f"{where}.{key}", "is required")
        return None
    if not isinstance(value, str):
        raise _fail(f"{where}.{key}", f"must be a string, not {_shown(value)}")
    if len(value) > limit:
        raise _fail(f"{where}.{key}", f"must be at most {limit} characters, not {len(value)}")
    if required and not value:
        raise _fail(f"{where}.{key}", "must not be empty")
    return value


def _unknown(doc: Mapping[str, object], *, allowed: Iterable[str], where: str) -> None:
    unknown = sorted(set(doc) - set(allowed))
    if unknown:
        raise _fail(where, f"unknown field(s) {', '.join(map(_shown, unknown))}")


def _effect(value: object, *, where: str) -> TaintEffect:
    if not isinstance(value, str) or value not in {e.value for e in _TAINT_EFFECTS}:
        raise _fail(where, f"must be NoSchedule or NoExecute, not {_shown(value)}")
    return TaintEffect(value)


def delay_seconds(delay: object) -> float:
    """A SlowPrepare delay in seconds: whole seconds, or a duration string in ms/s/m/h (raises ValueError)."""
    rule = f"must be 0 to {MAX_DELAY_SECONDS:g} seconds or a duration such as 1.5s, 500ms or 2m, not {_shown(delay)}"
    if isinstance(delay, bool):
        raise ValueError(rule)
    if isinstance(delay, int):
        seconds = float(delay) if abs(delay) <= 2**53 else math.inf
    elif isinstance(delay, str) and len(delay) <= 64 and _DURATION.fullmatch(delay):
        seconds = sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(delay))
    else:
        raise ValueError(rule)
    if not 0 <= seconds <= MAX_DELAY_SECONDS:
        raise ValueError(rule)
    return seconds


def _params(kind: DeviceFaultKind, member: Mapping[str, object] | None, *, where: str) -> Params:
    if member is None:
        return None
    at = f"{where}.{kind.member}"
    match kind:
        case DeviceFaultKind.UNHEALTHY:
            _unknown(member, allowed=("message", "taintEffect"), where=at)
            effect = member.get("taintEffect")
            return UnhealthyParams(
                message=_str(member, "message", where=at, limit=MAX_TEXT) or "",
                taint_effect=None if effect is None else _effect(effect, where=f"{at}.taintEffect"),
            )
        case DeviceFaultKind.TAINT:
            _unknown(member, allowed=("effect", "key", "value"), where=at)
            key = _str(member, "key", where=at, limit=MAX_TAINT_KEY)
            if key is not None and not _TAINT_KEY.fullmatch(key):
                raise _fail(f"{at}.key", f"must be a qualified name such as example.com/maintenance, not {_shown(key)}")
            value = _str(member, "value", where=at, limit=MAX_LABEL)
            if value is not None and not _LABEL_VALUE.fullmatch(value):
                raise _fail(f"{at}.value", f"must be a label value, not {_shown(value)}")
            return TaintParams(
                effect=_effect(member.get("effect"), where=f"{at}.effect"),
                key=key or DEFAULT_TAINT_KEY,
                value=value or "",
            )
        case DeviceFaultKind.FAIL_PREPARE:
            _unknown(member, allowed=("count", "message"), where=at)
            count = member.get("count")
            if isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= MAX_COUNT:
                raise _fail(f"{at}.count", f"must be a whole number from 1 to {MAX_COUNT}, not {_shown(count)}")
            message = _str(member, "message", where=at, limit=MAX_TEXT)
            if message == "":
                # An empty per-claim error is the kubelet's "prepared": the failing call would look like a success.
                raise _fail(f"{at}.message", "must not be empty")
            return FailPrepareParams(count=count, message=message or DEFAULT_PREPARE_ERROR)
        case DeviceFaultKind.SLOW_PREPARE:
            _unknown(member, allowed=("delay",), where=at)
            delay = member.get("delay")
            try:
                delay_seconds(delay)
            except ValueError as exc:
                raise _fail(f"{at}.delay", str(exc)) from None
            assert isinstance(delay, (int, str))
            return SlowPrepareParams(delay=delay)
        case DeviceFaultKind.NIC_UNPLUG | DeviceFaultKind.NIC_DOWN:
            raise AssertionError("kinds without a member never get here")


def parse_spec(doc: object, *, where: str = "spec") -> DeviceFaultSpec:
    """A DeviceFault's spec, checked as the CRD's schema and CEL rules check it (raises :class:`DeviceFaultError`)."""
    if not isinstance(doc, dict):
        raise _fail(where, "must be an object")
    _unknown(doc, allowed=_SPEC_FIELDS, where=where)
    node = _str(doc, "nodeName", where=where, limit=MAX_NODE_NAME, required=True)
    driver = _str(doc, "driver", where=where, limit=MAX_LABEL, required=True)
    raw_kind = doc.get("kind")
    if not isinstance(raw_kind, str) or raw_kind not in {k.value for k in DeviceFaultKind}:
        choices = ", ".join(k.value for k in DeviceFaultKind)
        raise _fail(f"{where}.kind", f"must be one of {choices}, not {_shown(raw_kind)}")
    kind = DeviceFaultKind(raw_kind)
    for other, member in _MEMBERS.items():
        if other is not kind and doc.get(member) is not None:
            raise _fail(f"{where}.{member}", f"may be set only when kind is {other.value}, not {kind.value}")
    member_doc = _object(doc, kind.member, where=where) if kind.member else None
    if member_doc is None and kind in _REQUIRED_MEMBER:
        raise _fail(f"{where}.{kind.member}", f"is required when kind is {kind.value}")
    device = _str(doc, "device", where=where, limit=MAX_LABEL)
    if kind.per_device and not device:
        raise _fail(f"{where}.device", f"is required when kind is {kind.value}")
    if not kind.per_device and device is not None:
        raise _fail(f"{where}.device", f"must not be set when kind is {kind.value}: it applies to every prepare")
    until_text = _str(doc, "until", where=where, limit=64)
    try:
        until = None if until_text is None else parse_time(until_text)
    except ValueError as exc:
        raise _fail(f"{where}.until", str(exc)) from None
    assert node is not None and driver is not None  # required=True
    return DeviceFaultSpec(
        node_name=node,
        driver=driver,
        kind=kind,
        device=device,
        params=_params(kind, member_doc, where=where),
        until=until,
    )


def _seen_status(doc: object) -> DeviceFaultStatusJson:
    """The well-formed fields of a status; anything else is as good as absent (we write it again)."""
    status: DeviceFaultStatusJson = {}
    if not isinstance(doc, dict):
        return status
    if isinstance(phase := doc.get("phase"), str) and phase in {p.value for p in Phase}:
        status["phase"] = phase
    if isinstance(gen := doc.get("observedGeneration"), int) and not isinstance(gen, bool):
        status["observedGeneration"] = gen
    for key in ("appliedTime", "clearedTime"):
        if isinstance(value := doc.get(key), str) and len(value) <= 64:
            try:
                parse_time(value)
            except ValueError:
                continue
            status[key] = value
    if isinstance(error := doc.get("error"), str) and len(error) <= MAX_TEXT:
        status["error"] = error
    return status


def parse_device_fault(obj: object) -> DeviceFault:
    """One object from a list or watch. Raises :class:`DeviceFaultError` only when it cannot even be named (no
    metadata.name/uid); a spec that breaks a rule comes back with ``spec=None`` and ``problem`` set, so that the
    plugin can say so in the object's status."""
    if not isinstance(obj, dict):
        raise _fail("DeviceFault", "must be a JSON object")
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        raise _fail("DeviceFault.metadata", "must be an object")
    name = _str(metadata, "name", where="metadata", limit=MAX_NODE_NAME, required=True)
    uid = _str(metadata, "uid", where="metadata", limit=128, required=True)
    assert name is not None and uid is not None
    generation = metadata.get("generation", 1)
    if isinstance(generation, bool) or not isinstance(generation, int):
        raise _fail(f"DeviceFault {name}: metadata.generation", f"must be a whole number, not {_shown(generation)}")
    if obj.get("apiVersion", DEVICE_FAULTS.api_version) != DEVICE_FAULTS.api_version:
        raise _fail(f"DeviceFault {name}: apiVersion", f"must be {DEVICE_FAULTS.api_version}")
    spec: DeviceFaultSpec | None = None
    problem: str | None = None
    try:
        spec = parse_spec(obj.get("spec"))
    except DeviceFaultError as exc:
        problem = str(exc)
    raw = obj.get("spec")
    raw_spec: Mapping[str, object] = raw if isinstance(raw, dict) else {}
    node, driver = raw_spec.get("nodeName"), raw_spec.get("driver")
    return DeviceFault(
        name=name,
        uid=uid,
        generation=generation,
        node_name=node if isinstance(node, str) else None,
        driver=driver if isinstance(driver, str) else None,
        spec=spec,
        problem=problem,
        seen_status=_seen_status(obj.get("status")),
    )


def render_spec(spec: DeviceFaultSpec) -> JsonObj:
    """The spec as the API holds it; :func:`parse_spec` of it gives ``spec`` back."""
    doc: JsonObj = {"nodeName": spec.node_name, "driver": spec.driver, "kind": spec.kind.value}
    if spec.device is not None:
        doc["device"] = spec.device
    if spec.until is not None:
        doc["until"] = spec.until.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    match spec.params:
        case UnhealthyParams():
            unhealthy: JsonObj = {"message": spec.params.message}
            if spec.params.taint_effect is not None:
                unhealthy["taintEffect"] = spec.params.taint_effect.value
            doc["unhealthy"] = unhealthy
        case TaintParams():
            doc["taint"] = {"effect": spec.params.effect.value, "key": spec.params.key, "value": spec.params.value}
        case FailPrepareParams():
            doc["failPrepare"] = {"count": spec.params.count, "message": spec.params.message}
        case SlowPrepareParams():
            doc["slowPrepare"] = {"delay": spec.params.delay}
        case None:
            pass
    return doc


def render_device_fault(spec: DeviceFaultSpec, *, name: str | None = None) -> JsonObj:
    """A new object; without ``name`` the API server generates one from ``<node>-<kind>-``."""
    metadata: JsonObj = {"labels": {"app.kubernetes.io/managed-by": "fakedev"}}
    if name is not None:
        metadata["name"] = name
    else:
        metadata["generateName"] = f"{spec.node_name[:200]}-{spec.kind.value.lower()}-"
    return {
        "apiVersion": DEVICE_FAULTS.api_version,
        "kind": DEVICE_FAULTS.kind,
        "metadata": metadata,
        "spec": render_spec(spec),
    }


# -- what a fault does --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TaintSpec:
    effect: TaintEffect
    key: str
    value: str


@dataclass(frozen=True, kw_only=True)
class DeviceEffect:
    """What the control socket's set-health does to one device: health on the stream and a taint in the slice."""

    device: str
    health: Health
    message: str
    taint: TaintSpec | None
    needs_nic: bool
    """Only a NIC can be unplugged or lose its link: for any other device the fault fails."""


@dataclass(frozen=True, kw_only=True)
class PrepareEffect:
    """What the control socket's set-fault on prepare does: slow every call, fail the next ``fail_times``."""

    delay_seconds: float
    fail_times: int
    error: str


Effect = DeviceEffect | PrepareEffect

UNHEALTHY_TAINT_KEY: Final = "fakedev.io/unhealthy"
"""The key the control socket and the NIC link watcher taint unhealthy devices with."""


def _label_value(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text, flags=re.ASCII)[:63].strip("-_.") or "unhealthy"


def effect_of(spec: DeviceFaultSpec, *, name: str) -> Effect:
    """The internal fault one DeviceFault stands for (``name`` fills in a message nobody wrote)."""
    device = spec.device or ""
    match spec.kind:
        case DeviceFaultKind.UNHEALTHY:
            params = spec.params if isinstance(spec.params, UnhealthyParams) else UnhealthyParams()
            message = params.message or f"DeviceFault {name}"
            taint = (
                None
                if params.taint_effect is None
                else TaintSpec(effect=params.taint_effect, key=UNHEALTHY_TAINT_KEY, value=_label_value(message))
            )
            return DeviceEffect(device=device, health=Health.UNHEALTHY, message=message, taint=taint, needs_nic=False)
        case DeviceFaultKind.TAINT:
            assert isinstance(spec.params, TaintParams)
            taint = TaintSpec(effect=spec.params.effect, key=spec.params.key, value=spec.params.value)
            return DeviceEffect(device=device, health=Health.HEALTHY, message="", taint=taint, needs_nic=False)
        case DeviceFaultKind.NIC_UNPLUG | DeviceFaultKind.NIC_DOWN:
            # What the link watcher reports when a NIC's fabric port vanishes or loses carrier.
            why = "unplugged" if spec.kind is DeviceFaultKind.NIC_UNPLUG else "link down"
            taint = TaintSpec(effect=TaintEffect.NO_EXECUTE, key=UNHEALTHY_TAINT_KEY, value=_label_value(f"nic-{why}"))
            return DeviceEffect(
                device=device,
                health=Health.UNHEALTHY,
                message=f"{why} (DeviceFault {name})",
                taint=taint,
                needs_nic=True,
            )
        case DeviceFaultKind.FAIL_PREPARE:
            assert isinstance(spec.params, FailPrepareParams)
            return PrepareEffect(delay_seconds=0.0, fail_times=spec.params.count, error=spec.params.message)
        case DeviceFaultKind.SLOW_PREPARE:
            assert isinstance(spec.params, SlowPrepareParams)
            return PrepareEffect(delay_seconds=spec.params.seconds, fail_times=0, error=DEFAULT_PREPARE_ERROR)


@dataclass(frozen=True, kw_only=True)
class PublishedDevice:
    """What the plugin knows of one device it publishes, to judge a fault against it."""

    name: str
    is_nic: bool


def convert_device_fault(
    fault: DeviceFault, *, node_name: str, driver: str, devices: Mapping[str, PublishedDevice]
) -> Effect | None:
    """The internal fault this plugin applies for ``fault``; None when the fault is for another node or driver.
    Raises :class:`DeviceFaultError` when it is ours but cannot be applied (a bad spec, an unknown device, a device
    that is no NIC)."""
    if fault.spec is None:
        raise DeviceFaultError(fault.problem or "the spec is unusable")
    spec = fault.spec
    if spec.node_name != node_name or spec.driver != driver:
        return None
    effect = effect_of(spec, name=fault.name)
    if isinstance(effect, DeviceEffect):
        published = devices.get(effect.device)
        if published is None:
            raise DeviceFaultError(f"spec.device: {driver} publishes no device {effect.device!r} on {node_name}")
        if effect.needs_nic and not published.is_nic:
            raise DeviceFaultError(f"spec.device: {effect.device} is not a NIC, so it cannot be {spec.kind.value}")
    return effect


# -- deciding and folding -----------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What the plugin made of one generation of one object."""

    name: str
    generation: int
    phase: Phase
    applied_time: str | None = None
    cleared_time: str | None = None
    error: str | None = None
    effect: Effect | None = None
    """In force exactly while ``phase`` is Applied."""
    until: datetime.datetime | None = None


def _adopted(
    seen: DeviceFaultStatusJson, *, generation: int, phase: Phase, key: Literal["appliedTime", "clearedTime"]
) -> str | None:
    """A time an earlier plugin instance wrote for this same generation and phase (kept, so a restart rewrites
    nothing)."""
    if seen.get("observedGeneration") == generation and seen.get("phase") == phase.value:
        return seen.get(key)
    return None


def plan_outcome(
    fault: DeviceFault,
    *,
    previous: Outcome | None,
    node_name: str,
    driver: str,
    devices: Mapping[str, PublishedDevice],
    now: datetime.datetime,
) -> Outcome | None:
    """The outcome for one object now; None when it is not this plugin's."""
    if (fault.node_name, fault.driver) != (node_name, driver):
        return None  # even a broken spec is judged by the plugin it names, and by no other
    stamp = render_time(now)
    until = fault.spec.until if fault.spec else None
    if previous is not None and previous.generation == fault.generation:
        if previous.phase is Phase.APPLIED and until is not None and until <= now:
            return Outcome(
                name=fault.name,
                generation=fault.generation,
                phase=Phase.CLEARED,
                applied_time=previous.applied_time,
                cleared_time=stamp,
                until=until,
            )
        return previous
    try:
        effect = convert_device_fault(fault, node_name=node_name, driver=driver, devices=devices)
    except DeviceFaultError as exc:
        return Outcome(name=fault.name, generation=fault.generation, phase=Phase.FAILED, error=str(exc))
    if effect is None:
        return None
    seen = fault.seen_status
    if until is not None and until <= now:
        applied = _adopted(seen, generation=fault.generation, phase=Phase.CLEARED, key="appliedTime")
        if applied is None and seen.get("observedGeneration") == fault.generation:
            applied = seen.get("appliedTime")  # an instance that applied it died before clearing it
        cleared = _adopted(seen, generation=fault.generation, phase=Phase.CLEARED, key="clearedTime") or stamp
        return Outcome(
            name=fault.name,
            generation=fault.generation,
            phase=Phase.CLEARED,
            applied_time=applied,
            cleared_time=cleared,
            until=until,
        )
    applied = _adopted(seen, generation=fault.generation, phase=Phase.APPLIED, key="appliedTime") or stamp
    return Outcome(
        name=fault.name,
        generation=fault.generation,
        phase=Phase.APPLIED,
        applied_time=applied,
        effect=effect,
        until=until,
    )


def render_status(outcome: Outcome) -> DeviceFaultStatusJson:
    status: DeviceFaultStatusJson = {"phase": outcome.phase.value, "observedGeneration": outcome.generation}
    if outcome.applied_time is not None:
        status["appliedTime"] = outcome.applied_time
    if outcome.cleared_time is not None:
        status["clearedTime"] = outcome.cleared_time
    if outcome.error is not None:
        status["error"] = outcome.error[:MAX_TEXT]
    return status


@dataclass(frozen=True, kw_only=True)
class DeviceState:
    """What one device must show while faults are in force on it (Healthy, no taint: none are)."""

    health: Health
    message: str
    taint: TaintSpec | None


CLEAN: Final = DeviceState(health=Health.HEALTHY, message="", taint=None)
_EFFECT_RANK: Final = {TaintEffect.NO_EXECUTE: 2, TaintEffect.NO_SCHEDULE: 1}


def combine_device_states(effects: Iterable[tuple[str, DeviceEffect]]) -> dict[str, DeviceState]:
    """Every device's state from the faults in force, given as (object name, effect): Unhealthy if any fault says
    so (messages joined in name order); one taint per device, as the board publishes it, the strongest effect's."""
    by_device: dict[str, list[tuple[str, DeviceEffect]]] = {}
    for name, effect in sorted(effects, key=lambda e: e[0]):
        by_device.setdefault(effect.device, []).append((name, effect))
    states: dict[str, DeviceState] = {}
    for device, entries in by_device.items():
        sick = [e for _, e in entries if e.health != Health.HEALTHY]
        taints = [e.taint for _, e in entries if e.taint is not None]
        strongest = max(taints, key=lambda t: _EFFECT_RANK.get(t.effect, 0), default=None)
        states[device] = DeviceState(
            health=Health.UNHEALTHY if sick else Health.HEALTHY,
            message="; ".join(e.message for e in sick)[:MAX_TEXT],
            taint=strongest,
        )
    return states


def merge_prepare_fault(
    current: CallFault, *, active: Iterable[PrepareEffect], added: Iterable[PrepareEffect]
) -> CallFault:
    """The prepare fault while these DeviceFault prepare effects are in force. ``added`` are the ones applied just
    now: each adds its count to the failures still owed (the ones owed keep counting down, never start again);
    the delay is the longest one in force; with no FailPrepare in force, no call fails."""
    active = list(active)
    added = list(added)
    delay = max((e.delay_seconds for e in active), default=0.0)
    failing = [e for e in active if e.fail_times > 0]
    if not failing:
        return CallFault(delay_seconds=delay)
    new_failures = [e for e in added if e.fail_times > 0]
    owed = max(current.fail_times, 0) + sum(e.fail_times for e in new_failures)
    error = new_failures[-1].error if new_failures else current.error
    return CallFault(delay_seconds=delay, fail_times=owed, error=error or DEFAULT_PREPARE_ERROR)
