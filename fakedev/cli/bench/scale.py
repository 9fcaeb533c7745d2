"""Scale: many emulated dgx-h100 nodes in one process, their slices, and the real scheduler placing MIG pods.

The fleet (:mod:`fakedev.cli.bench.fleet`) runs as a child process so its RSS is its own. Scheduling throughput is
taken from a watch on the pods: the local time each pod is first seen bound, so a figure is pods over the span from
the first pod created (or the first slice published, for a scale-up) to the last bind.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from fakedev.cli.procfs import memory_mib
from harness.errors import NotReadyError
from harness.procs import Process, RunDir, start_process, wait_for
from kubeclient import JsonObj, KubeClient
from kubeclient.errors import ApiError
from kubeclient.resources import DEVICE_CLASSES, PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, RESOURCE_SLICES

NAMESPACE: Final = "default"
MIG_CLASS: Final = "bench-mig-1g"
TEMPLATE: Final = "bench-mig-1g"
CREATE_THREADS: Final = 8
Say = Callable[[str], None]


@dataclass(kw_only=True)
class Fleet:
    """The fleet child process and the milestones it has reported."""

    process: Process
    nodes: int
    events: dict[str, dict[str, Any]] = field(default_factory=dict)

    def poll(self) -> dict[str, dict[str, Any]]:
        with contextlib.suppress(OSError):
            for line in self.process.log_path.read_text(errors="replace").splitlines():
                if line.startswith('{"event"'):
                    with contextlib.suppress(ValueError):
                        event = json.loads(line)
                        self.events[event["event"]] = event
        return self.events

    def wait(self, event: str, *, timeout: float) -> dict[str, Any]:
        def broken() -> Exception | None:
            if "failed" in self.poll():
                return self.process.failure(f"failed before {event!r}: {self.events['failed']['error']}")
            if not self.process.alive():
                return self.process.failure(f"exited (code {self.process.popen.returncode}) before {event!r}")
            return None

        try:
            wait_for(
                lambda: event in self.poll(),
                timeout=timeout,
                what=f"fleet of {self.nodes}: {event}",
                interval=0.2,
                abort=broken,
            )
        except NotReadyError:
            raise self.process.failure(f"did not report {event!r} within {timeout:.0f}s") from None
        return self.events[event]

    def rss_gib(self) -> tuple[float, float]:
        """(current, peak) resident set of the fleet process in GiB."""
        mem = memory_mib(self.process.pid)
        return round(mem["VmRSS"] / 1024, 3), round(mem["VmHWM"] / 1024, 3)

    def stop(self) -> None:
        self.process.stop(timeout=60)


def start_fleet(*, nodes: int, kubeconfig: Path, run: RunDir, prefix: str = "fleet") -> Fleet:
    base = run.path / f"fleet-{nodes}"
    base.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "fakedev.cli.bench.fleet",
        "--kubeconfig",
        str(kubeconfig),
        "--nodes",
        str(nodes),
        "--prefix",
        prefix,
        "--base",
        str(base),
    ]
    return Fleet(process=start_process(name=f"fleet-{nodes}", argv=argv, run=run), nodes=nodes)


def count_slices(kube: KubeClient, *, driver: str = "gpu.nvidia.com") -> int:
    items = kube.list(RESOURCE_SLICES, field_selector=f"spec.driver={driver}")
    return len(items)


# -- the MIG workload --------------------------------------------------------------------------------------------


def ensure_mig_workload(kube: KubeClient) -> None:
    """A DeviceClass for 1g.10gb MIG slices and a claim template requesting one."""
    if kube.get_or_none(DEVICE_CLASSES, MIG_CLASS) is None:
        kube.create(
            DEVICE_CLASSES,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": MIG_CLASS},
                "spec": {
                    "selectors": [
                        {
                            "cel": {
                                "expression": 'device.driver == "gpu.nvidia.com" && '
                                'device.attributes["gpu.nvidia.com"].type == "mig" && '
                                'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'
                            }
                        }
                    ]
                },
            },
        )
    if kube.get_or_none(RESOURCE_CLAIM_TEMPLATES, TEMPLATE, namespace=NAMESPACE) is None:
        kube.create(
            RESOURCE_CLAIM_TEMPLATES,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": TEMPLATE, "namespace": NAMESPACE},
                "spec": {
                    "spec": {"devices": {"requests": [{"name": "mig", "exactly": {"deviceClassName": MIG_CLASS}}]}}
                },
            },
            namespace=NAMESPACE,
        )


def render_pod(*, name: str) -> JsonObj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"fakedev.io/bench": "mig"}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "mig", "resourceClaimTemplateName": TEMPLATE}],
            "containers": [
                {"name": "c", "image": "busybox", "command": ["true"], "resources": {"claims": [{"name": "mig"}]}}
            ],
        },
    }


def create_pods(kube: KubeClient, *, count: int, prefix: str) -> tuple[float, float]:
    """Create the pods from several threads; returns the wall-clock times of the first and last create."""
    started = time.time()
    with ThreadPoolExecutor(max_workers=CREATE_THREADS) as pool:
        list(
            pool.map(
                lambda i: kube.create(PODS, render_pod(name=f"{prefix}-{i:04d}"), namespace=NAMESPACE), range(count)
            )
        )
    return started, time.time()


@dataclass(kw_only=True)
class BindRecorder:
    """Watches the namespace's pods and notes when each is first seen bound (local wall-clock time)."""

    kube: KubeClient
    bound: dict[str, float] = field(default_factory=dict)
    unschedulable: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        listing = self.kube.request("GET", PODS.path(namespace=NAMESPACE))
        self._version = listing["metadata"]["resourceVersion"]
        for pod in listing.get("items") or []:
            self._note(pod)
        self._thread = threading.Thread(target=self._loop, name="bind-recorder", daemon=True)
        self._thread.start()

    def _note(self, pod: JsonObj) -> None:
        name = pod["metadata"]["name"]
        if pod.get("spec", {}).get("nodeName"):
            self.bound.setdefault(name, time.time())
            self.unschedulable.discard(name)
            return
        for cond in pod.get("status", {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
                self.unschedulable.add(name)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                for event in self.kube.watch(PODS, namespace=NAMESPACE, resource_version=self._version):
                    obj = event.get("object") or {}
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._note(obj)
                    self._version = obj.get("metadata", {}).get("resourceVersion", self._version)
                    if self._stop.is_set():
                        return
            except ApiError:
                self._stop.wait(0.5)

    def stop(self) -> None:
        self._stop.set()


def wait_bound(recorder: BindRecorder, *, count: int, timeout: float, say: Say) -> None:
    last = [0.0]

    def done() -> bool:
        n = len(recorder.bound)
        if time.monotonic() - last[0] > 10:
            say(f"  {n}/{count} pods bound")
            last[0] = time.monotonic()
        return n >= count

    wait_for(done, timeout=timeout, what=f"{count} pods bound", interval=0.1)


def claims_allocated(kube: KubeClient) -> int:
    return sum(1 for c in kube.list(RESOURCE_CLAIMS, namespace=NAMESPACE) if c.get("status", {}).get("allocation"))
