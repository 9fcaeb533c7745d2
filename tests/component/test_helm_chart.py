"""The Helm chart, as the real helm v4 sees it: lint, rendering, the values schema's refusals, and its DeviceClasses
equal to the ones fakedev renders for each schema."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

import fakedev
from fakedev.model.releases import DRANET_DEFAULT, NVIDIA_DEFAULT, DranetRelease, DriverReleases, NvidiaRelease
from fakedev.render import Schema
from fakedev.render.classes import ClassOrigin, render_device_classes
from kubeclient import JsonObj
from tests.helpers import CHART_DIR, CHART_VALUES_DIR, helm_template, run_helm

EVERYTHING = CHART_VALUES_DIR / "values-everything.yaml"


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
