"""The Helm chart, as the real helm v4 sees it: lint, rendering, the values schema's refusals, and its DeviceClasses
equal to the ones fakedev renders for each schema."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

import fakedev
from fakedev.render import Schema
from fakedev.render.classes import render_device_classes
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


@pytest.mark.parametrize("extended", [True, False], ids=["extended-resources", "no-extended-resources"])
@pytest.mark.parametrize("schema", list(Schema), ids=[s.value for s in Schema])
def test_chart_device_classes_equal_fakedevs(schema: Schema, extended: bool) -> None:
    only = [f"drivers.{s.value}.enabled={'true' if s is schema else 'false'}" for s in Schema]
    objects = helm_template(
        release="r", namespace="fd", sets=[*only, f"deviceClasses.extendedResourceNames={str(extended).lower()}"]
    )
    charted = [
        {
            "apiVersion": o["apiVersion"],
            "kind": o["kind"],
            "metadata": {"name": o["metadata"]["name"]},
            "spec": o["spec"],
        }
        for o in _kinds(objects)["DeviceClass"]
    ]
    assert charted == render_device_classes(schema=schema, extended_resources=extended)


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
