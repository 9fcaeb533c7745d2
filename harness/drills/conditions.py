"""Conditions a drill waits for or asserts, checked against the API (pods, claims, slices, events, pod logs).

Each check returns ``None`` when the condition holds, else what was seen instead — that text ends up in the report
when a wait times out, so the failure says why.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from harness.errors import VerifyError
from harness.kubevirt.verify import NodeView, verify_vmi
from kubeclient import JsonObj, KubeClient
from kubeclient.resources import DEVICE_CLASSES, EVENTS, KNOWN, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES

LogReader = Callable[[str, str], str]
"""(namespace, pod) → the pod's container output as the node ran it."""


@dataclass(frozen=True, kw_only=True)
class ConditionContext:
    client: KubeClient
    namespace: str
    nodes: Mapping[str, str]
    """Scenario node name → real node name."""
    logs: LogReader
    node_views: Callable[[str], NodeView | None] = lambda _: None
    """Real node name → how to read its files (for checks that do), None if they are not this machine's."""


def _phase(pod: JsonObj | None) -> str:
    return str((pod or {}).get("status", {}).get("phase", "Absent"))


def check_pod(c: Mapping[str, Any], ctx: ConditionContext) -> str | None:
    pod = ctx.client.get_or_none(PODS, c["pod"], namespace=ctx.namespace)
    if c.get("deleted"):
        return None if pod is None else f"pod {c['pod']} still exists ({_phase(pod)})"
    if c.get("evicted"):
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return None
        return f"pod {c['pod']} is {_phase(pod)} and not being deleted"
    if pod is None:
        return f"pod {c['pod']} does not exist"
    if "phase" in c and _phase(pod) != c["phase"]:
        return f"pod {c['pod']} is {_phase(pod)}, not {c['phase']}"
    if "scheduled" in c:
        bound = bool(pod["spec"].get("nodeName"))
        if bound != bool(c["scheduled"]):
            return f"pod {c['pod']} is {'bound' if bound else 'not bound'} to a node"
    if "log" in c:
        text = ctx.logs(ctx.namespace, c["pod"])
        if str(c["log"]) not in text:
            return f"pod {c['pod']} has not printed {c['log']!r} (printed {text[-200:]!r})"
    if "restarts" in c:
        counts = [s.get("restartCount", 0) for s in pod.get("status", {}).get("containerStatuses") or []]
        if not counts or min(counts) < int(c["restarts"]):
            return f"pod {c['pod']} restarted {counts} times, expected at least {c['restarts']}"
    if c.get("extendedClass") == "newest":
        problem = _check_extended_class(pod, ctx)
        if problem:
            return problem
    if "health" in c:
        want = str(c["health"])
        seen = [
            r.get("health")
            for s in pod.get("status", {}).get("containerStatuses") or []
            for e in s.get("allocatedResourcesStatus") or []
            for r in e.get("resources") or []
        ]
        if want not in seen:
            return f"pod {c['pod']} reports device health {seen or 'none'}, not {want}"
    return None


def _check_extended_class(pod: JsonObj, ctx: ConditionContext) -> str | None:
    """The scheduler made the pod's extended-resource claim from the newest DeviceClass for that resource name
    (ties in creationTimestamp, which has one-second resolution, go to the smallest name)."""
    status = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    if not status.get("resourceClaimName"):
        return f"pod {pod['metadata']['name']} has no extended-resource claim"
    claim = ctx.client.get(RESOURCE_CLAIMS, status["resourceClaimName"], namespace=ctx.namespace)
    used = {r["name"]: (r.get("exactly") or {}).get("deviceClassName") for r in claim["spec"]["devices"]["requests"]}
    names = {m["requestName"]: m["resourceName"] for m in status.get("requestMappings") or []}
    classes = ctx.client.list(DEVICE_CLASSES)
    for request, resource in names.items():
        candidates = [c for c in classes if c["spec"].get("extendedResourceName") == resource]
        # Newest first; within one second, the smallest name.
        by_name = sorted(candidates, key=lambda c: str(c["metadata"]["name"]))
        newest = sorted(by_name, key=lambda c: str(c["metadata"]["creationTimestamp"]), reverse=True)[0]  # stable
        if used.get(request) != newest["metadata"]["name"]:
            seen = sorted((c["metadata"]["creationTimestamp"], c["metadata"]["name"]) for c in candidates)
            return (
                f"{resource} was served by class {used.get(request)}, not the newest {newest['metadata']['name']}"
                f" {seen}"
            )
    return None


def check_pods(c: Mapping[str, Any], ctx: ConditionContext) -> str | None:
    pods = [
        p for p in ctx.client.list(PODS, namespace=ctx.namespace) if p["metadata"]["name"].startswith(str(c["pods"]))
    ]
    matching = [p for p in pods if "phase" not in c or _phase(p) == c["phase"]]
    if "count" in c and len(matching) != int(c["count"]):
        phases = sorted(f"{p['metadata']['name']}={_phase(p)}" for p in pods)
        return f"{len(matching)} pods {c['pods']}* are {c.get('phase', 'present')}, expected {c['count']} ({phases})"
    return None


def check_claim(c: Mapping[str, Any], ctx: ConditionContext) -> str | None:
    claim = ctx.client.get_or_none(RESOURCE_CLAIMS, c["claim"], namespace=ctx.namespace)
    if claim is None:
        return f"claim {c['claim']} does not exist"
    allocated = bool((claim.get("status") or {}).get("allocation"))
    if "allocated" in c and allocated != bool(c["allocated"]):
        return f"claim {c['claim']} is {'allocated' if allocated else 'not allocated'}"
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
    if "sameAttribute" in c:
        attribute = str(c["sameAttribute"])
        values = {f"{r['driver']}/{r['device']}": _device_attribute(ctx, r, attribute) for r in results}
        if len(results) < 2 or None in values.values() or len(set(map(str, values.values()))) != 1:
            return f"claim {c['claim']}: {attribute} per allocated device is {values or 'nothing allocated'}"
    if "devices" in c and len(results) != int(c["devices"]):
        return f"claim {c['claim']} has {len(results)} devices allocated, expected {c['devices']}"
    if "attribute" in c:
        attribute = str(c["attribute"])
        values = {r["device"]: _device_attribute(ctx, r, attribute) for r in results}
        if not results or any(v != c.get("equals") for v in values.values()):
            return f"claim {c['claim']}: {attribute} of the allocated devices is {values}, expected {c.get('equals')!r}"
    if "networkIn" in c:
        return _check_network(claim, pod=str(c["networkIn"]), ctx=ctx)
    return None


def _device_attribute(ctx: ConditionContext, result: Mapping[str, Any], attribute: str) -> Any:
    selector = f"spec.driver={result['driver']}"
    for s in ctx.client.list(RESOURCE_SLICES, field_selector=selector):
        if s["spec"]["pool"]["name"] != result["pool"]:
            continue
        for d in s["spec"].get("devices") or []:
            if d["name"] == result["device"]:
                attributes = d.get("attributes") or {}
                # The driver's own domain is stored unqualified in slices.
                value = attributes.get(attribute, attributes.get(attribute.removeprefix(f"{result['driver']}/")))
                return None if value is None else next(iter(value.values()))
    return None


def _check_network(claim: JsonObj, *, pod: str, ctx: ConditionContext) -> str | None:
    """What the driver reported in status.devices[].networkData is what the pod sees on its interface."""
    entries = [d for d in (claim.get("status") or {}).get("devices") or [] if d.get("networkData")]
    if not entries:
        return f"claim {claim['metadata']['name']} reports no networkData"
    text = ctx.logs(ctx.namespace, pod)
    for e in entries:
        data = e["networkData"]
        wanted = [data.get("interfaceName", ""), data.get("hardwareAddress", ""), *data.get("ips", [])]
        missing = [w for w in wanted if not w or w.lower() not in text.lower()]
        if missing:
            return f"pod {pod} does not show {missing} of {e['device']}'s networkData (printed {text[-300:]!r})"
    return None


def check_slices(c: Mapping[str, Any], ctx: ConditionContext) -> str | None:
    node = ctx.nodes.get(str(c["slices"]), str(c["slices"]))
    selector = f"spec.nodeName={node}" + (f",spec.driver={c['driver']}" if "driver" in c else "")
    slices = ctx.client.list(RESOURCE_SLICES, field_selector=selector)
    what = f"{node}{' ' + str(c['driver']) if 'driver' in c else ''}"
    if "count" in c and len(slices) != int(c["count"]):
        return f"{len(slices)} slices for {what}, expected {c['count']}"
    if "min" in c and len(slices) < int(c["min"]):
        return f"{len(slices)} slices for {what}, expected at least {c['min']}"
    if "tainted" in c:
        tainted = sorted(d["name"] for s in slices for d in s["spec"].get("devices") or [] if d.get("taints"))
        want = bool(c["tainted"])
        if bool(tainted) != want:
            return f"tainted devices on {node}: {tainted or 'none'}"
    return None


def check_event(c: Mapping[str, Any], ctx: ConditionContext) -> str | None:
    events = ctx.client.list(EVENTS, namespace=ctx.namespace)
    reason = c["event"] if isinstance(c["event"], str) else c.get("reason")
    wanted = [
        e
        for e in events
        if reason is None
        or (
            e.get("reason") == reason
            and (not c.get("object") or e.get("involvedObject", {}).get("name") == c["object"])
        )
    ]
    if "contains" in c:
        wanted = [e for e in wanted if str(c["contains"]) in (e.get("message") or "")]
    if c.get("absent"):
        return None if not wanted else f"unexpected event {wanted[0].get('reason')}: {wanted[0].get('message')}"
    if not wanted:
        seen = sorted({f"{e.get('reason')}: {(e.get('message') or '')[:80]}" for e in events})[-5:]
        return f"no event {reason or ''} {c.get('contains', '')!r} on {c.get('object', 'any object')} (seen: {seen})"
    return None


def check_kubevirt(c: Mapping[str, Any], ctx: ConditionContext) -> str | None:
    """The VMI in the launcher pod's ``VMI_JSON`` passes ``fakedev kubevirt verify``, container output included."""
    pod = ctx.client.get_or_none(PODS, str(c["kubevirt"]), namespace=ctx.namespace)
    if pod is None:
        return f"launcher pod {c['kubevirt']} does not exist"
    env = {e["name"]: e.get("value", "") for ct in pod["spec"]["containers"] for e in ct.get("env") or []}
    if "VMI_JSON" not in env:
        return f"launcher pod {c['kubevirt']} carries no VMI_JSON"
    node = str(pod["spec"].get("nodeName", ""))
    vmi = json.loads(env["VMI_JSON"])
    vmi.setdefault("metadata", {})["namespace"] = ctx.namespace
    try:
        view = ctx.node_views(node)
        if view is None:
            where = f"is on node {node}, whose files this drill cannot read" if node else "is not bound to a node"
            return f"launcher pod {c['kubevirt']} {where}"
        report = verify_vmi(
            vmi=vmi,
            client=ctx.client,
            node=view,
            pod=pod,
            container_output=ctx.logs(ctx.namespace, str(c["kubevirt"])),
        )
    except VerifyError as exc:
        return str(exc)
    failed = report.failed()
    return None if not failed else "; ".join(f"{f.rule}: {f.detail}" for f in failed)


def check_field(c: Mapping[str, Any], ctx: ConditionContext) -> str | None:
    """A field of any API object: ``field: <plural>/<name>``, ``path`` with ``[key=value]`` list filters, ``equals``
    or ``min`` (node names from the scenario are mapped to real ones in filter values)."""
    plural, _, name = str(c["field"]).partition("/")
    res = next((r for r in KNOWN if r.plural == plural), None)
    if res is None:
        return f"unknown resource {plural!r}"
    obj = ctx.client.get_or_none(res, name, namespace=ctx.namespace if res.namespaced else None)
    if obj is None:
        return f"{plural}/{name} does not exist"
    value: Any = obj
    for part in str(c.get("path", "")).split("."):
        m = _SEGMENT.fullmatch(part)
        if m is None or not isinstance(value, Mapping):
            return f"{plural}/{name}: cannot follow {part!r} in {c.get('path')}"
        value = value.get(m["key"])
        if m["filter"]:
            key, _, want = m["filter"].partition("=")
            want = ctx.nodes.get(want, want)
            value = next((v for v in value or [] if isinstance(v, Mapping) and str(v.get(key)) == want), None)
        if value is None:
            return None if c.get("absent") else f"{plural}/{name}: {c.get('path')} is not set (stopped at {part})"
    if c.get("absent"):
        return f"{plural}/{name}: {c['path']} is set ({value!r}), expected it absent"
    if "length" in c and (not isinstance(value, list) or len(value) != int(c["length"])):
        count = len(value) if isinstance(value, list) else "no"
        return f"{plural}/{name}: {c['path']} has {count} items, expected {c['length']}"
    if "equals" in c and value != c["equals"]:
        return f"{plural}/{name}: {c['path']} is {value!r}, expected {c['equals']!r}"
    if "min" in c and not (isinstance(value, int | float) and value >= c["min"]):
        return f"{plural}/{name}: {c['path']} is {value!r}, expected at least {c['min']}"
    return None


_SEGMENT = re.compile(r"(?P<key>[A-Za-z0-9_-]+)(?:\[(?P<filter>[^\]=]+=[^\]]*)\])?")


CHECKS: Mapping[str, Callable[[Mapping[str, Any], ConditionContext], str | None]] = {
    "pod": check_pod,
    "pods": check_pods,
    "claim": check_claim,
    "slices": check_slices,
    "event": check_event,
    "kubevirt": check_kubevirt,
    "field": check_field,
}


def evaluate(condition: Mapping[str, Any], ctx: ConditionContext) -> str | None:
    """None when the condition holds; otherwise what was seen."""
    for key, check in CHECKS.items():
        if key in condition:
            return check(condition, ctx)
    return f"unknown condition {sorted(condition)}"
