"""``fakedev run``: the main job on the embedded default — a local control plane, emulated nodes, checks, a report.

Until the fault drills land, the default job runs what the product promises end to end: the migration example on a
``seed-example`` node, a MIG workload on a ``dgx-h100`` node through NVIDIA's own DeviceClass, and the conformance
suite against fakedev's plugin. Results go to the console, ``<report dir>/report.json`` and ``junit.xml``.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fakedev.cli.node import plugin_command
from harness.cluster.local import LocalCluster, local_cluster
from harness.conformance.checks import select
from harness.conformance.context import conformance_context
from harness.conformance.runner import run_checks
from harness.kube.manifests import apply_objects, load_manifest_file
from harness.kube.waits import wait_object
from harness.node.background import BackgroundLoop, BackgroundNode
from harness.node.drivers import DriverContext, DriverProcess, template_driver
from harness.node.emulator import NodeSettings
from harness.procs import wait_for
from harness.reports import CaseResult, compute_exit_code, render_console, render_json, render_junit
from kubeclient.resources import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
# NVIDIA's class selector, guarded by the driver so other drivers' devices never make the CEL fail.
MIG_CEL = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"


def add_parser(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "run",
        help="the default job: local control plane + emulated nodes + checks, with a report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--report-dir", type=Path, default=Path("build/run"), help="where reports go")
    parser.set_defaults(handler=_run)


def _say(message: str) -> None:
    print(f"[run] {message}", file=sys.stderr, flush=True)


def _step(results: list[CaseResult], case_id: str, title: str, fn: Callable[[], str]) -> None:
    _say(f"{case_id} …")
    started = time.monotonic()
    try:
        message, outcome = fn(), "passed"
    except Exception as exc:
        message, outcome = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}", "failed"
    results.append(
        CaseResult(
            id=case_id, title=title, outcome=outcome, message=message, seconds=round(time.monotonic() - started, 2)
        )
    )
    _say(f"{case_id}: {outcome}")


def _node(
    cluster: LocalCluster, loop: BackgroundLoop, *, name: str, profile: str, schema: str
) -> tuple[BackgroundNode, DriverProcess]:
    node = BackgroundNode(settings=NodeSettings(name=name), client=cluster.client, loop=loop)
    emulator = node.start()
    driver = DriverProcess(
        name=f"plugin-{schema}",
        spec=template_driver(plugin_command(profile=profile, schema=schema)),
        context=DriverContext(
            node=name,
            kubelet_root=emulator.paths.kubelet_root,
            cdi_dir=emulator.paths.cdi,
            kubeconfig=cluster.kubeconfig,
        ),
        run=emulator.run,
    )
    driver.start()
    return node, driver


def _seed_example(cluster: LocalCluster, loop: BackgroundLoop) -> str:
    node, driver = _node(cluster, loop, name="fakedev-seed", profile="seed-example", schema="example")
    kube = cluster.client
    try:
        loop.call(node.node.plugins.wait_registered("gpu.example.com", timeout=30))  # type: ignore[union-attr]
        objects = load_manifest_file(EXAMPLES / "seed-extended-resource.yaml")
        apply_objects(kube, objects)
        pod = wait_object(
            kube,
            PODS,
            "extended-resource-dra-demo",
            namespace="default",
            timeout=60,
            what="Running",
            predicate=lambda p: (p.get("status") or {}).get("phase") == "Running",
        )
        worker = node.node.pod_worker(namespace="default", name="extended-resource-dra-demo")  # type: ignore[union-attr]
        assert worker is not None
        wait_for(lambda: "device allocated" in worker.container_logs(), timeout=20, what="container output")
        claim = pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
        device = kube.get(RESOURCE_CLAIMS, claim, namespace="default")["status"]["allocation"]["devices"]["results"][0]
        kept = kube.get(DEVICE_CLASSES, "example-gpu")["spec"]["extendedResourceName"]
        return (
            f"pod Running on fakedev-seed, printed 'device allocated'; claim {claim} got {device['device']}; "
            f"DeviceClass kept extendedResourceName={kept}"
        )
    finally:
        kube.delete(PODS, "extended-resource-dra-demo", namespace="default", grace_seconds=0)
        kube.delete(DEVICE_CLASSES, "example-gpu")
        driver.stop()
        node.stop(stop_pods=True)


def _mig(cluster: LocalCluster, loop: BackgroundLoop) -> str:
    node, driver = _node(cluster, loop, name="fakedev-dgx", profile="dgx-h100", schema="nvidia")
    kube = cluster.client
    try:
        loop.call(node.node.plugins.wait_registered("gpu.nvidia.com", timeout=30))  # type: ignore[union-attr]
        kube.apply(
            DEVICE_CLASSES,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": "mig.nvidia.com"},
                "spec": {"selectors": [{"cel": {"expression": MIG_CEL}}]},
            },
        )
        kube.apply(
            RESOURCE_CLAIMS,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "mig-1g", "namespace": "default"},
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "mig",
                                "exactly": {
                                    "deviceClassName": "mig.nvidia.com",
                                    "selectors": [
                                        {
                                            "cel": {
                                                "expression": "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
                                            }
                                        }
                                    ],
                                },
                            }
                        ]
                    }
                },
            },
            namespace="default",
        )
        kube.apply(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "mig-workload", "namespace": "default"},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": "fakedev-dgx"},
                    "terminationGracePeriodSeconds": 1,
                    "resourceClaims": [{"name": "mig", "resourceClaimName": "mig-1g"}],
                    "containers": [
                        {
                            "name": "cuda",
                            "image": "nvcr.io/nvidia/cuda",
                            "command": ["sh", "-c", "echo $NVIDIA_VISIBLE_DEVICES; ls /dev; sleep 3600"],
                            "resources": {"claims": [{"name": "mig"}]},
                        }
                    ],
                },
            },
            namespace="default",
        )
        wait_object(
            kube,
            PODS,
            "mig-workload",
            namespace="default",
            timeout=60,
            what="Running",
            predicate=lambda p: (p.get("status") or {}).get("phase") == "Running",
        )
        worker = node.node.pod_worker(namespace="default", name="mig-workload")  # type: ignore[union-attr]
        assert worker is not None
        wait_for(lambda: "MIG-" in worker.container_logs(), timeout=20, what="MIG UUID in the container")
        uuid = worker.container_logs().splitlines()[0]
        device = kube.get(RESOURCE_CLAIMS, "mig-1g", namespace="default")["status"]["allocation"]["devices"]["results"][
            0
        ]["device"]
        return f"MIG device {device} allocated by the real scheduler; the container saw NVIDIA_VISIBLE_DEVICES={uuid}"
    finally:
        kube.delete(PODS, "mig-workload", namespace="default", grace_seconds=0)
        kube.delete(RESOURCE_CLAIMS, "mig-1g", namespace="default")
        kube.delete(DEVICE_CLASSES, "mig.nvidia.com")
        driver.stop()
        node.stop(stop_pods=True)


def _run(args: argparse.Namespace) -> int:
    results: list[CaseResult] = []
    started = time.monotonic()
    _say("starting the local Kubernetes 1.37 control plane")
    with local_cluster(progress=_say) as cluster:
        loop = BackgroundLoop()
        loop.start()
        try:
            _step(
                results,
                "seed.extended-resource-migration",
                "the brief's migration example runs on an emulated seed-example node",
                lambda: _seed_example(cluster, loop),
            )
            _step(
                results,
                "seed.mig-allocation",
                "a MIG workload runs through NVIDIA's DeviceClass on dgx-h100",
                lambda: _mig(cluster, loop),
            )
        finally:
            loop.stop()
        _say("conformance suite against fakedev's plugin")
        driver = template_driver(plugin_command(profile="seed-example", schema="example"))
        with conformance_context(client=cluster.client, kubeconfig=cluster.kubeconfig, driver=driver) as ctx:
            for r in run_checks(ctx, select(), progress=lambda _: None):
                results.append(
                    CaseResult(
                        id=f"conformance.{r.id}",
                        title=r.title,
                        outcome=r.outcome,
                        message=r.message,
                        seconds=r.seconds,
                        required=r.required,
                        clause=r.clause,
                    )
                )
    args.report_dir.mkdir(parents=True, exist_ok=True)
    (args.report_dir / "report.json").write_text(
        render_json(results, meta={"job": "fakedev run", "seconds": round(time.monotonic() - started, 1)})
    )
    (args.report_dir / "junit.xml").write_text(render_junit(results, suite="fakedev-run"))
    print(render_console(results, title="fakedev run"))
    print(f"reports: {args.report_dir / 'report.json'}, {args.report_dir / 'junit.xml'}")
    return compute_exit_code(results)
