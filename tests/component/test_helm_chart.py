"""The Helm chart, as the real helm v4 sees it: lint, rendering, the values schema's refusals, and its DeviceClasses
equal to the ones fakedev renders for each schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import fakedev
from fakedev.cli import build_parser
from fakedev.model.releases import DRANET_DEFAULT, NVIDIA_DEFAULT, DranetRelease, DriverReleases, NvidiaRelease
from fakedev.render import Schema
from fakedev.render.classes import ClassOrigin, render_device_classes
from kubeclient import JsonObj
from tests.helpers import CHART_DIR, CHART_VALUES_DIR, helm_template, run_helm

EVERYTHING = CHART_VALUES_DIR / "values-everything.yaml"
NOT_EMULATED = {"key": "fakedev.io/emulated", "operator": "DoesNotExist"}
OFF_EMULATED = {"nodeSelectorTerms": [{"matchExpressions": [NOT_EMULATED]}]}


def _kinds(objects: list[JsonObj]) -> dict[str, list[JsonObj]]:
    out: dict[str, list[JsonObj]] = {}
    for o in objects:
        out.setdefault(o["kind"], []).append(o)
    return out


def _container_args(objects: list[JsonObj]) -> dict[str, list[str]]:
    (ds,) = _kinds(objects)["DaemonSet"]
    return {c["name"]: c["args"] for c in ds["spec"]["template"]["spec"]["containers"]}


def test_chart_app_version_is_fakedev_version() -> None:
    chart: dict[str, Any] = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == fakedev.__version__


@pytest.mark.parametrize("values", [None, EVERYTHING], ids=["defaults", "everything"])
def test_helm_lint_is_clean(values: Any) -> None:
    argv = ["lint", "--strict", str(CHART_DIR), *(("--values", str(values)) if values else ())]
    result = run_helm(*argv)
    assert "0 chart(s) failed" in result.stdout
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout


def test_defaults_render_one_example_plugin_with_least_privilege() -> None:
    objects = helm_template(release="r", namespace="fd")
    kinds = _kinds(objects)
    assert sorted(kinds) == ["ClusterRole", "ClusterRoleBinding", "DaemonSet", "DeviceClass", "ServiceAccount"]
    args = _container_args(objects)
    assert list(args) == ["plugin-example"]
    assert args["plugin-example"][:2] == ["plugin", "--in-cluster"]
    assert "--profile-from-node-label=fakedev.io/profile" in args["plugin-example"]
    assert "--rolling-update-uid=$(POD_UID)" in args["plugin-example"]
    (ds,) = kinds["DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == f"fakedev.local/fakedev:{fakedev.__version__}"
    assert container["securityContext"]["privileged"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["MKNOD", "NET_ADMIN"]}
    assert pod["automountServiceAccountToken"] is False
    assert pod["priorityClassName"] == "system-node-critical"
    assert ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    hostpaths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert hostpaths == {"/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry", "/var/run/cdi"}
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert "/var/run/secrets/kubernetes.io/serviceaccount" in mounts
    # It tolerates every taint, but never lands on a Node a fleet emulates.
    assert pod["affinity"] == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": OFF_EMULATED}}


def test_every_value_changed_reaches_the_objects() -> None:
    objects = helm_template(release="r", namespace="fd", values=[EVERYTHING])
    args = _container_args(objects)
    assert list(args) == ["plugin-nvidia", "plugin-dranet", "plugin-example"]
    nvidia = args["plugin-nvidia"]
    assert "--kubelet-root=/opt/kubelet" in nvidia and "--cdi-dir=/etc/cdi" in nvidia
    assert not any(a.startswith(("--profile-from-node-label", "--rolling-update-uid")) for a in nvidia)
    assert "--if-schema-absent=fail" in nvidia and "--profile=dgx-h100" in nvidia
    assert "--schema=nvidia@v25.12.0" in nvidia and "--schema=dranet@main" in args["plugin-dranet"]
    assert [c["metadata"]["name"] for c in _classes(objects)] == ["vgpu.nvidia.com", "gpu.example.com"]
    (ds,) = _kinds(objects)["DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["securityContext"]["privileged"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is True
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1" and env["KUBERNETES_SERVICE_PORT"] == "6443"
    assert container["image"] == "registry.example.test:5000/team/fakedev:dev-123"
    assert pod["serviceAccountName"] == "fake-devices"
    assert "priorityClassName" not in pod
    assert ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}


def _classes(objects: list[JsonObj]) -> list[JsonObj]:
    """The chart's DeviceClasses without the chart's labels, comparable with fakedev's render."""
    return [
        {
            "apiVersion": o["apiVersion"],
            "kind": o["kind"],
            "metadata": {"name": o["metadata"]["name"]},
            "spec": o["spec"],
        }
        for o in _kinds(objects).get("DeviceClass", [])
    ]


def _only(schema: Schema) -> list[str]:
    return [f"drivers.{s.value}.enabled={'true' if s is schema else 'false'}" for s in Schema]


SCHEMA_RELEASES: list[tuple[Schema, DriverReleases]] = [
    *((Schema.NVIDIA, DriverReleases(nvidia=r)) for r in NvidiaRelease),
    *((Schema.DRANET, DriverReleases(dranet=r)) for r in DranetRelease),
    (Schema.EXAMPLE, DriverReleases()),
]


def _release_sets(schema: Schema, releases: DriverReleases) -> list[str]:
    match schema:
        case Schema.NVIDIA:
            return [f"drivers.nvidia.release={releases.nvidia.value}"]
        case Schema.DRANET:
            return [f"drivers.dranet.release={releases.dranet.value}"]
        case Schema.EXAMPLE:
            return []


@pytest.mark.parametrize("extended", [True, False], ids=["extended-resources", "no-extended-resources"])
@pytest.mark.parametrize(
    ("schema", "releases"),
    SCHEMA_RELEASES,
    ids=[releases.name_of(schema.value) for schema, releases in SCHEMA_RELEASES],
)
def test_chart_device_classes_equal_fakedevs(schema: Schema, releases: DriverReleases, extended: bool) -> None:
    objects = helm_template(
        release="r",
        namespace="fd",
        sets=[
            *_only(schema),
            *_release_sets(schema, releases),
            f"deviceClasses.extendedResourceNames={str(extended).lower()}",
        ],
    )
    assert _classes(objects) == render_device_classes(schema=schema, releases=releases, extended_resources=extended)


@pytest.mark.parametrize(
    ("schema", "releases"),
    SCHEMA_RELEASES,
    ids=[releases.name_of(schema.value) for schema, releases in SCHEMA_RELEASES],
)
def test_plugin_serves_the_chosen_release(schema: Schema, releases: DriverReleases) -> None:
    objects = helm_template(release="r", namespace="fd", sets=[*_only(schema), *_release_sets(schema, releases)])
    (args,) = _container_args(objects).values()
    assert [a for a in args if a.startswith("--schema=")] == [f"--schema={releases.name_of(schema.value)}"]


def test_defaults_serve_the_newest_releases() -> None:
    objects = helm_template(
        release="r", namespace="fd", sets=["drivers.nvidia.enabled=true", "drivers.dranet.enabled=true"]
    )
    args = _container_args(objects)
    assert f"--schema=nvidia@{NVIDIA_DEFAULT.value}" in args["plugin-nvidia"]
    assert f"--schema=dranet@{DRANET_DEFAULT.value}" in args["plugin-dranet"]
    assert "--schema=example" in args["plugin-example"]


def test_release_classes_can_be_left_to_the_real_drivers_chart() -> None:
    objects = helm_template(
        release="r",
        namespace="fd",
        sets=[
            "drivers.nvidia.enabled=true",
            "drivers.dranet.enabled=true",
            "drivers.nvidia.release=v25.12.0",
            "deviceClasses.releaseClasses=false",
        ],
    )
    releases = DriverReleases(nvidia=NvidiaRelease.V25_12_0)
    own = [
        c
        for schema in Schema
        for c in render_device_classes(schema=schema, releases=releases, origins=[ClassOrigin.FAKEDEV])
    ]
    assert _classes(objects) == own
    assert [c["metadata"]["name"] for c in own] == ["vgpu.nvidia.com", "gpu.example.com"]


def test_no_device_classes_at_all() -> None:
    objects = helm_template(
        release="r", namespace="fd", sets=["drivers.nvidia.enabled=true", "deviceClasses.create=false"]
    )
    assert _classes(objects) == []


@pytest.mark.parametrize(
    ("setting", "field", "says"),
    [
        ("hostNetwork=maybe", "/hostNetwork", "want boolean"),
        ("healthTimeoutSeconds=soon", "/healthTimeoutSeconds", "want integer"),
        ("unknownKey=1", "", "additional properties 'unknownKey' not allowed"),
        ("drivers.gpu.enabled=true", "/drivers", "additional properties 'gpu' not allowed"),
        ("logLevel=LOUD", "/logLevel", "value must be one of"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy", "value must be one of"),
        ("ifSchemaAbsent=ignore", "/ifSchemaAbsent", "value must be one of"),
        ("securityContext.capabilities.add={SYS_RESOURCE}", "/securityContext/capabilities/add/0", "one of"),
        ("kubeletRoot=var/lib/kubelet", "/kubeletRoot", "does not match pattern"),
        ("cdiRoot=/var/run/../../etc", "/cdiRoot", "does not match pattern"),
        ("kubeletRoot=/var/lib/kubelet/", "/kubeletRoot", "does not match pattern"),
        ("apiServer.port=70000", "/apiServer/port", "maximum"),
        ("profile.nodeLabel=not a label", "/profile/nodeLabel", "does not match pattern"),
        ("drivers.nvidia.release=v25.8.0", "/drivers/nvidia/release", "value must be one of 'v25.8.1', 'v25.12.0'"),
        ("drivers.dranet.release=latest", "/drivers/dranet/release", "value must be one of 'v1.4.0', 'main'"),
        ("drivers.example.release=v1", "/drivers/example", "additional properties 'release' not allowed"),
        ("fleet.nodes=3", "/fleet", "additional properties 'nodes' not allowed"),
        ("fleet.pods=foo", "/fleet/pods", "value must be one of 'status', 'containers'"),
        ("fleet.replicas=-1", "/fleet/replicas", "minimum"),
        ("fleet.nodesPerReplica=0", "/fleet/nodesPerReplica", "minimum"),
        ("fleet.schemas={dranet}", "/fleet/schemas/0", "value must be one of 'nvidia', 'example'"),
        ("fleet.taints[0].effect=Sometimes", "/fleet/taints/0/effect", "value must be one of"),
        ("fleet.metrics.port=70000", "/fleet/metrics/port", "maximum"),
        ("plugins.enabled=maybe", "/plugins/enabled", "want boolean"),
    ],
    ids=[
        "wrong-type-bool",
        "wrong-type-int",
        "unknown-key",
        "unknown-driver",
        "bad-enum-log-level",
        "bad-enum-pull-policy",
        "bad-enum-absent",
        "capability-not-offered",
        "relative-host-path",
        "dotdot-host-path",
        "trailing-slash-host-path",
        "port-out-of-range",
        "bad-label-key",
        "unknown-nvidia-release",
        "unknown-dranet-release",
        "example-has-no-releases",
        "fleet-unknown-key",
        "fleet-bad-pods-mode",
        "fleet-negative-replicas",
        "fleet-no-nodes",
        "fleet-dranet",
        "fleet-bad-taint-effect",
        "fleet-metrics-port-out-of-range",
        "plugins-enabled-not-bool",
    ],
)
def test_values_schema_refuses_naming_the_field(setting: str, field: str, says: str) -> None:
    result = run_helm("template", "r", str(CHART_DIR), "--set", setting, check=False)
    assert result.returncode != 0
    assert f"at '{field}'" in result.stderr, result.stderr
    assert says in result.stderr, result.stderr


def test_no_driver_enabled_is_refused_by_name() -> None:
    result = run_helm("template", "r", str(CHART_DIR), "--set", "drivers.example.enabled=false", check=False)
    assert result.returncode != 0
    assert "enable at least one of drivers.nvidia, drivers.dranet, drivers.example" in result.stderr


# -- the fleet: `fakedev fleet run` as a StatefulSet ------------------------------------------------------------------

FLEET_ON = ["fleet.enabled=true"]
MONITORING = ("--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")


def _template(*, sets: list[str], values: tuple[Path, ...] = (), monitoring: bool = False) -> list[JsonObj]:
    """``helm template`` with, optionally, the ServiceMonitor API announced as served (helm knows no cluster)."""
    argv = ["template", "r", str(CHART_DIR), "--namespace", "fd", *(MONITORING if monitoring else ())]
    for v in values:
        argv += ["--values", str(v)]
    for setting in sets:
        argv += ["--set", setting]
    return [doc for doc in yaml.safe_load_all(run_helm(*argv).stdout) if doc]


def _fleet_pod(objects: list[JsonObj]) -> JsonObj:
    (sts,) = _kinds(objects)["StatefulSet"]
    pod: JsonObj = sts["spec"]["template"]["spec"]
    return pod


def _by_name(objects: list[JsonObj], kind: str) -> dict[str, JsonObj]:
    return {f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}": o for o in _kinds(objects).get(kind, [])}


@pytest.mark.parametrize("host_network", [True, False], ids=["host-network", "pod-network"])
def test_fleet_runs_fleet_run_with_the_contracts_arguments(host_network: bool) -> None:
    objects = helm_template(
        release="r",
        namespace="fd",
        sets=[*FLEET_ON, f"hostNetwork={str(host_network).lower()}", "fleet.labels.example\\.test/rack=r1"],
    )
    (sts,) = _kinds(objects)["StatefulSet"]
    assert sts["metadata"]["name"] == "r-fakedev-fleet"
    spec = sts["spec"]
    assert (spec["replicas"], spec["podManagementPolicy"], spec["serviceName"]) == (2, "Parallel", "r-fakedev-fleet")
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == [
        "fleet",
        "run",
        "--in-cluster",
        "--fleet=r-fakedev",
        "--replica=$(POD_INDEX)",
        "--nodes=10",
        "--profile=dgx-h100",
        f"--schema=nvidia@{NVIDIA_DEFAULT.value}",
        "--pods=status",
        "--statefulset=r-fakedev-fleet",
        "--namespace=$(POD_NAMESPACE)",
        "--base=/var/lib/fakedev/fleet",
        "--metrics-address=0.0.0.0",
        "--metrics-port=9464",
        f"--metrics-port-stride={1 if host_network else 0}",
        "--label=example.test/rack=r1",
        "--taint=fakedev.io/emulated=true:NoSchedule",
        "--log-format=text",
    ]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {
        "POD_INDEX": "metadata.labels['apps.kubernetes.io/pod-index']",
        "POD_NAMESPACE": "metadata.namespace",
    }
    assert pod["hostNetwork"] is host_network
    # A host port per pod would keep a second replica on the same node Pending.
    ports = [{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}]
    assert container.get("ports") == (None if host_network else ports)
    assert pod["affinity"] == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": OFF_EMULATED}}
    assert pod["terminationGracePeriodSeconds"] == 120
    assert pod["serviceAccountName"] == "r-fakedev-fleet" and pod["automountServiceAccountToken"] is False
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["nodes"] == {"name": "nodes", "emptyDir": {}}
    assert [s for s in volumes["api-access"]["projected"]["sources"] if "serviceAccountToken" in s]
    # The DaemonSet's pods keep their own selector: no fleet pod matches it.
    (ds,) = _kinds(objects)["DaemonSet"]
    selector = ds["spec"]["selector"]["matchLabels"]
    fleet_labels = spec["template"]["metadata"]["labels"]
    assert not selector.items() <= fleet_labels.items()
    assert spec["selector"]["matchLabels"].items() <= fleet_labels.items()


def test_fleet_arguments_are_what_fakedev_fleet_run_accepts() -> None:
    objects = helm_template(release="r", namespace="fd", values=[EVERYTHING])
    (container,) = _fleet_pod(objects)["containers"]
    argv = [a.replace("$(POD_INDEX)", "2").replace("$(POD_NAMESPACE)", "fd") for a in container["args"]]
    args = build_parser().parse_args(argv)
    assert (args.fleet, args.replica, args.nodes, args.profile, args.pods) == (
        "r-fd",
        2,
        4,
        "seed-example",
        "containers",
    )
    assert [s.value for s, _pin in args.schemas] == ["nvidia", "example"]
    assert args.labels == [("example.test/rack", "r1"), ("example.test/zone", "z-2")]
    assert args.taints == [
        {"key": "example.test/fleet", "effect": "NoExecute"},
        {"key": "example.test/tier", "value": "emulated", "effect": "PreferNoSchedule"},
    ]
    assert (args.statefulset, args.namespace, args.in_cluster) == ("r-fd-fleet", "fd", True)
    assert (args.metrics_address, args.metrics_port, args.metrics_port_stride) == ("127.0.0.1", 9100, 0)
    assert args.log_format == "json"
    assert args.device_faults is False


@pytest.mark.parametrize(("value", "watched"), [("true", True), ("false", False)], ids=["faults", "no-faults"])
def test_fleet_device_fault_watch_follows_its_value(value: str, watched: bool) -> None:
    objects = helm_template(release="r", namespace="fd", sets=[*FLEET_ON, f"fleet.deviceFaults={value}"])
    (container,) = _fleet_pod(objects)["containers"]
    argv = [a.replace("$(POD_INDEX)", "0").replace("$(POD_NAMESPACE)", "fd") for a in container["args"]]
    assert build_parser().parse_args(argv).device_faults is watched


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        (
            "status",
            {
                "privileged": False,
                "allowPrivilegeEscalation": False,
                "runAsUser": 0,
                "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"], "add": ["MKNOD"]},
            },
        ),
        (
            "containers",
            {"privileged": True, "allowPrivilegeEscalation": True, "runAsUser": 0, "readOnlyRootFilesystem": False},
        ),
    ],
    ids=["status", "containers"],
)
def test_fleet_security_context_per_pods_mode(pods: str, expected: JsonObj) -> None:
    objects = helm_template(release="r", namespace="fd", sets=[*FLEET_ON, f"fleet.pods={pods}"])
    (container,) = _fleet_pod(objects)["containers"]
    assert container["securityContext"] == expected
    assert f"--pods={pods}" in container["args"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["nodes"] == "/var/lib/fakedev/fleet" and mounts["tmp"] == "/tmp"


def test_every_fleet_value_reaches_the_statefulset() -> None:
    objects = helm_template(release="r", namespace="fd", values=[EVERYTHING])
    (sts,) = _kinds(objects)["StatefulSet"]
    pod = sts["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert sts["spec"]["replicas"] == 3
    assert pod["terminationGracePeriodSeconds"] == 300
    assert container["resources"] == {"requests": {"cpu": "500m", "memory": "1Gi"}}
    assert pod["nodeSelector"] == {"fakedev.io/fleet-host": "true"}
    assert pod["tolerations"] == [{"key": "fakedev.io/fleet-host", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["affinity"]["nodeAffinity"] == {"requiredDuringSchedulingIgnoredDuringExecution": OFF_EMULATED}
    assert "podAntiAffinity" in pod["affinity"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1" and env["KUBERNETES_SERVICE_PORT"] == "6443"
    assert container["image"] == "registry.example.test:5000/team/fakedev:dev-123"
    assert container["ports"] == [{"name": "metrics", "containerPort": 9100, "protocol": "TCP"}]
    # The DaemonSet's own required terms each get the exclusion too (terms are ORed).
    (ds,) = _kinds(objects)["DaemonSet"]
    required = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert required == {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "fakedev.io/profile", "operator": "Exists"}, NOT_EMULATED]}]
    }


@pytest.mark.parametrize("host_network", [True, False], ids=["host-network", "pod-network"])
def test_fleet_service_is_headless_with_the_metrics_ports(host_network: bool) -> None:
    objects = _template(sets=[*FLEET_ON, "fleet.replicas=3", f"hostNetwork={str(host_network).lower()}"])
    (service,) = _kinds(objects)["Service"]
    assert service["metadata"]["name"] == "r-fakedev-fleet" and service["spec"]["clusterIP"] == "None"
    (sts,) = _kinds(objects)["StatefulSet"]
    assert service["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
    ports = [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]]
    if host_network:
        assert ports == [("metrics-0", 9464, 9464), ("metrics-1", 9465, 9465), ("metrics-2", 9466, 9466)]
    else:
        assert ports == [("metrics", 9464, "metrics")]


def test_fleet_without_metrics_has_no_service_port() -> None:
    objects = _template(sets=[*FLEET_ON, "fleet.metrics.port=0", "fleet.metrics.serviceMonitor.enabled=true"])
    (service,) = _kinds(objects)["Service"]
    assert "ports" not in service["spec"]
    assert "--metrics-port=0" in _fleet_pod(objects)["containers"][0]["args"]


@pytest.mark.parametrize(
    ("monitoring", "wanted", "rendered"),
    [(True, True, True), (False, True, False), (True, False, False)],
    ids=["served-and-wanted", "not-served", "not-wanted"],
)
def test_service_monitor_only_when_wanted_and_served(monitoring: bool, wanted: bool, rendered: bool) -> None:
    objects = _template(
        sets=[*FLEET_ON, f"fleet.metrics.serviceMonitor.enabled={str(wanted).lower()}", "hostNetwork=false"],
        monitoring=monitoring,
    )
    monitors = _kinds(objects).get("ServiceMonitor", [])
    assert len(monitors) == (1 if rendered else 0)
    if rendered:
        (monitor,) = monitors
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        (service,) = _kinds(objects)["Service"]
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]


def test_service_monitor_keeps_each_ports_replica_with_host_network() -> None:
    objects = _template(sets=[*FLEET_ON, "fleet.metrics.serviceMonitor.enabled=true"], monitoring=True)
    (monitor,) = _kinds(objects)["ServiceMonitor"]
    kept = [
        (e["port"], e["relabelings"][0]["regex"], e["relabelings"][0]["action"]) for e in monitor["spec"]["endpoints"]
    ]
    assert kept == [("metrics-0", "0", "keep"), ("metrics-1", "1", "keep")]


FLEET_RULES = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "create", "delete"]},
    {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch", "delete"]},
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceslices"],
        "verbs": ["list", "create", "update", "delete", "deletecollection"],
    },
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get", "list"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/status"], "verbs": ["patch", "update"]},
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaims/driver"],
        "resourceNames": ["gpu.nvidia.com"],
        "verbs": ["arbitrary-node:patch", "arbitrary-node:update"],
    },
    {"apiGroups": ["fakedev.io"], "resources": ["devicefaults"], "verbs": ["list", "watch"]},
    {"apiGroups": ["fakedev.io"], "resources": ["devicefaults/status"], "verbs": ["patch"]},
]


def test_fleet_rbac_is_its_own_account_with_exactly_its_calls() -> None:
    objects = helm_template(release="r", namespace="fd", sets=FLEET_ON)
    roles = _by_name(objects, "ClusterRole")
    assert roles["/r-fakedev-fleet"]["rules"] == FLEET_RULES
    # The plugin's ClusterRole is unchanged: no fleet power reaches the DaemonSet's token.
    assert "arbitrary-node:patch" not in str(roles["/r-fakedev"]["rules"])
    namespaced = _by_name(objects, "Role")
    assert namespaced["kube-node-lease/r-fakedev-fleet"]["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "patch", "delete"]}
    ]
    assert namespaced["fd/r-fakedev-fleet"]["rules"] == [
        {"apiGroups": ["apps"], "resources": ["statefulsets"], "resourceNames": ["r-fakedev-fleet"], "verbs": ["get"]}
    ]
    account = {"kind": "ServiceAccount", "name": "r-fakedev-fleet", "namespace": "fd"}
    bindings = [*_kinds(objects)["RoleBinding"], *_by_name(objects, "ClusterRoleBinding").values()]
    fleet_bindings = [b for b in bindings if b["metadata"]["name"] == "r-fakedev-fleet"]
    assert len(fleet_bindings) == 3 and all(b["subjects"] == [account] for b in fleet_bindings)
    assert "fd/r-fakedev-fleet" in _by_name(objects, "ServiceAccount")


def test_fleet_driver_names_follow_its_schemas() -> None:
    objects = helm_template(release="r", namespace="fd", sets=[*FLEET_ON, "fleet.schemas={example,nvidia}"])
    (rule,) = (r for r in _by_name(objects, "ClusterRole")["/r-fakedev-fleet"]["rules"] if "resourceNames" in r)
    assert rule["resourceNames"] == ["gpu.nvidia.com", "gpu.example.com"]


def test_fleet_only_release_renders_no_daemonset() -> None:
    objects = helm_template(release="r", namespace="fd", sets=[*FLEET_ON, "plugins.enabled=false"])
    kinds = _kinds(objects)
    assert "DaemonSet" not in kinds
    assert list(_by_name(objects, "ClusterRole")) == ["/r-fakedev-fleet"]
    assert list(_by_name(objects, "ServiceAccount")) == ["fd/r-fakedev-fleet", "fd/r-fakedev-fleet-drain"]
    assert len(kinds["StatefulSet"]) == 1
    # The DeviceClasses of the fleet's schemas, though the plugin drivers' (example) are off with the DaemonSet.
    names = [c["metadata"]["name"] for c in _classes(objects)]
    assert "gpu.nvidia.com" in names and "gpu.example.com" not in names


def test_uninstall_drains_the_fleet_first_through_a_pre_delete_hook() -> None:
    objects = helm_template(release="r", namespace="fd", sets=[*FLEET_ON, "fleet.terminationGracePeriodSeconds=200"])
    (job,) = _kinds(objects)["Job"]
    hooked = [o for o in objects if (o["metadata"].get("annotations") or {}).get("helm.sh/hook") == "pre-delete"]
    # ServiceAccount and Role before the binding, the binding before the Job (hook weights).
    weights = {
        (o["kind"], o["metadata"].get("namespace", "")): int(o["metadata"]["annotations"]["helm.sh/hook-weight"])
        for o in hooked
    }
    assert weights == {
        ("ServiceAccount", "fd"): -10,
        ("Role", "fd"): -10,
        ("RoleBinding", "fd"): -9,
        ("ClusterRoleBinding", ""): -9,
        ("RoleBinding", "kube-node-lease"): -9,
        ("Job", "fd"): 0,
    }
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = build_parser().parse_args(container["args"])
    assert (args.command, args.verb, args.statefulset, args.namespace) == ("fleet", "drain", "r-fakedev-fleet", "fd")
    # The fleet's name, the same the replicas are given: the drain removes any Node of it a killed replica left.
    (fleet_container,) = _kinds(objects)["StatefulSet"][0]["spec"]["template"]["spec"]["containers"]
    assert args.fleet == "r-fakedev" and "--fleet=r-fakedev" in fleet_container["args"]
    # ... with the fleet's own grants, bound to the hook's account only while the hook runs.
    sweep = [
        o
        for o in hooked
        if o["kind"] in ("ClusterRoleBinding", "RoleBinding") and o["roleRef"]["name"] == "r-fakedev-fleet"
    ]
    assert sorted((o["kind"], o["roleRef"]["kind"]) for o in sweep) == [
        ("ClusterRoleBinding", "ClusterRole"),
        ("RoleBinding", "Role"),
    ]
    assert all(
        o["subjects"] == [{"kind": "ServiceAccount", "name": "r-fakedev-fleet-drain", "namespace": "fd"}] for o in sweep
    )
    assert args.in_cluster and args.timeout == 260
    assert job["spec"]["activeDeadlineSeconds"] == 290 and job["spec"]["backoffLimit"] == 0
    assert pod["serviceAccountName"] == "r-fakedev-fleet-drain" and pod["hostNetwork"] is True
    assert container["securityContext"]["runAsNonRoot"] is True
    role = _by_name(objects, "Role")["fd/r-fakedev-fleet-drain"]
    assert role["rules"] == [
        {
            "apiGroups": ["apps"],
            "resources": ["statefulsets"],
            "resourceNames": ["r-fakedev-fleet"],
            "verbs": ["get", "patch"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    ]
    without = helm_template(release="r", namespace="fd", sets=[*FLEET_ON, "fleet.drainOnUninstall=false"])
    assert "Job" not in _kinds(without)


def test_default_release_renders_no_fleet() -> None:
    kinds = _kinds(helm_template(release="r", namespace="fd"))
    assert not {"StatefulSet", "Service", "ServiceMonitor", "Role", "RoleBinding"} & set(kinds)


@pytest.mark.parametrize(
    "sets",
    [FLEET_ON, [*FLEET_ON, "plugins.enabled=false", "fleet.pods=containers", "hostNetwork=false"]],
    ids=["fleet", "fleet-only-containers"],
)
def test_helm_lint_is_clean_with_a_fleet(sets: list[str]) -> None:
    result = run_helm("lint", "--strict", str(CHART_DIR), *(a for s in sets for a in ("--set", s)))
    assert "0 chart(s) failed" in result.stdout
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout


def test_fleet_scaled_to_zero_on_the_host_network_has_no_port_to_scrape() -> None:
    sets = [*FLEET_ON, "fleet.replicas=0", "fleet.metrics.serviceMonitor.enabled=true"]
    kinds = _kinds(_template(sets=sets, monitoring=True))
    (service,) = kinds["Service"]
    assert "ports" not in service["spec"] and "ServiceMonitor" not in kinds


def test_more_than_an_endpoint_slices_ports_on_the_host_network_is_refused_by_name() -> None:
    result = run_helm(
        "template", "r", str(CHART_DIR), "--set", "fleet.enabled=true", "--set", "fleet.replicas=101", check=False
    )
    assert result.returncode != 0
    assert "fleet.replicas: more than 100 with hostNetwork" in result.stderr
    assert helm_template(release="r", namespace="fd", sets=[*FLEET_ON, "fleet.replicas=101", "hostNetwork=false"])
